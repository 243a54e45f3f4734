"""The predicted-vs-measured overlay: two rows per lane, one glyph per action, makespans, error in the title.

Both sides are ``workbench_widgets.sample.sample_estimate`` (a real schedule through the simulator) with different
forward times, so "measured" is a second, slower simulation. Expected values are closed forms:
- action counts: 1F1B and GPipe run F and B once per stage and micro-batch (2 p m actions); ZB-H1 splits B
  into I and W (3 p m); interleaved 1F1B with v chunks per rank has 2 p v m;
- GPipe makespan with uniform stages F, B and a stage-to-stage latency c:
  (m + p - 1)(F + B) + 2 (p - 1) c (the forward fill and backward drain each cross p - 1 links; the
  (m + p - 1) fill-and-drain term is GPipe's, Huang et al., arXiv:1811.06965);
- the sample's step time is that makespan plus its synthetic TP (F), DP (2F) and optimizer (F) terms;
- colours are the Okabe-Ito hex codes (Wong, Nature Methods 8:441, 2011).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from bokeh.models import HoverTool, Span
from workbench_widgets.plots import comparison_timeline_figure
from workbench_widgets.sample import sample_estimate

from workbench.specs.plan import ParallelPlan

OKABE_ITO = {"F": "#0072B2", "B": "#D55E00", "I": "#E69F00", "W": "#009E73"}
F_PRED_S, F_MEAS_S = 2e-3, 3e-3


def pair(schedule: str, pp: int, m: int, vpp: int = 1):
    plan = ParallelPlan(pp=pp, vpp=vpp, schedule=schedule)
    predicted = sample_estimate(plan=plan, num_microbatches=m, forward_s=F_PRED_S)
    measured = sample_estimate(plan=plan, num_microbatches=m, forward_s=F_MEAS_S)
    return predicted, replace(measured, backend="real-run", measured=True)


def renderer(fig, name):
    found = [r for r in fig.renderers if r.name == name]
    assert len(found) == 1, f"{name!r} not in {[r.name for r in fig.renderers]}"
    return found[0]


def span(fig, name) -> Span:
    found = [a for a in fig.center if isinstance(a, Span) and a.name == name]
    assert len(found) == 1
    return found[0]


def gpipe_makespan_s(forward_s: float, pp: int, m: int) -> float:
    backward_s, link_s = 2 * forward_s, forward_s / 20  # the sample's B = 2F and p2p = F/20
    return (m + pp - 1) * (forward_s + backward_s) + 2 * (pp - 1) * link_s


@pytest.mark.parametrize(
    ("schedule", "pp", "vpp", "m", "actions_per_side"),
    [
        ("1f1b", 4, 1, 8, 2 * 4 * 8),
        ("zb-h1", 4, 1, 8, 3 * 4 * 8),
        ("interleaved-1f1b", 2, 2, 4, 2 * 2 * 2 * 4),
    ],
)
def test_one_glyph_per_action_on_each_side(schedule, pp, vpp, m, actions_per_side):
    fig = comparison_timeline_figure(*pair(schedule, pp, m, vpp))
    for side in ("predicted", "measured"):
        data = renderer(fig, f"{side}_blocks").data_source.data
        assert len(data["left"]) == actions_per_side
        assert set(data["side"]) == {side}
        for op, color in zip(data["op"], data["color"], strict=True):
            assert color == OKABE_ITO[op]


def test_each_lane_is_two_rows_predicted_above_measured():
    fig = comparison_timeline_figure(*pair("interleaved-1f1b", 2, 4, vpp=2))
    labels = fig.yaxis.major_label_overrides
    expected = [
        f"rank {r} · chunk {c} · {side}"
        for r in range(2)
        for c in range(2)
        for side in ("predicted", "measured")
    ]
    assert [labels[i] for i in range(len(expected))] == expected
    for k, side in enumerate(("predicted", "measured")):
        data = renderer(fig, f"{side}_blocks").data_source.data
        centres = (np.asarray(data["bottom"]) + np.asarray(data["top"])) / 2
        assert set(centres.tolist()) == {2 * lane + k for lane in range(4)}


def test_makespan_lines_at_the_closed_form_and_error_in_the_title():
    pp, m = 4, 8
    fig = comparison_timeline_figure(*pair("gpipe", pp, m))
    pred_ms = gpipe_makespan_s(F_PRED_S, pp, m) * 1e3
    meas_ms = gpipe_makespan_s(F_MEAS_S, pp, m) * 1e3
    assert span(fig, "predicted_makespan").location == pytest.approx(pred_ms, rel=1e-9)
    assert span(fig, "measured_makespan").location == pytest.approx(meas_ms, rel=1e-9)
    assert span(fig, "predicted_makespan").line_dash != span(fig, "measured_makespan").line_dash
    # the sample adds DP (2F) and the optimizer (F) to the makespan
    step_pred_ms, step_meas_ms = pred_ms + 3 * F_PRED_S * 1e3, meas_ms + 3 * F_MEAS_S * 1e3
    error_pct = (step_pred_ms / step_meas_ms - 1) * 100
    title = fig.title.text
    assert f"error {error_pct:+.1f} %" in title
    assert f"{step_pred_ms:.2f} ms predicted" in title and f"{step_meas_ms:.2f} ms measured" in title
    assert "(sample)" in title and "(real-run)" in title


def test_hover_names_side_op_microbatch_and_times_in_ms():
    fig = comparison_timeline_figure(*pair("1f1b", 2, 4))
    tips = dict(t for tool in fig.toolbar.tools if isinstance(tool, HoverTool) for t in tool.tooltips)
    assert tips["side"] == "@side" and "@op" in tips["op"] and tips["micro-batch"] == "@microbatch"
    for key in ("start", "end", "duration"):
        assert tips[key].endswith(" ms")
    hover = next(t for t in fig.toolbar.tools if isinstance(t, HoverTool))
    assert {r.name for r in hover.renderers} == {"predicted_blocks", "measured_blocks"}


def test_measured_waits_get_their_own_thin_row_without_a_predicted_twin():
    predicted, measured = pair("1f1b", 2, 4)
    tl = measured.timeline
    waits = tl.filter(pl.col("op") == "F").with_columns(
        op=pl.lit("wait"),
        stage=pl.lit(-1, dtype=tl["stage"].dtype),
        chunk=pl.lit(-1, dtype=tl["chunk"].dtype),
        end_s=pl.col("start_s") + 1e-4,
    )
    fig = comparison_timeline_figure(predicted, replace(measured, timeline=pl.concat([tl, waits])))
    labels = list(fig.yaxis.major_label_overrides.values())
    assert "rank 0 · comm · measured" in labels and "rank 0 · comm · predicted" not in labels
    data = renderer(fig, "measured_blocks").data_source.data
    assert len(data["left"]) == 2 * 2 * 4 + 2 * 4
    height = np.asarray(data["top"]) - np.asarray(data["bottom"])
    is_wait = np.asarray(data["op"]) == "wait"
    assert height[is_wait].max() < height[~is_wait].min()


def test_dense_timelines_are_aggregated_per_side():
    pp, m = 8, 64
    fig = comparison_timeline_figure(*pair("1f1b", pp, m), max_blocks=500, num_bins=200)
    assert not [r for r in fig.renderers if r.name and r.name.endswith("_blocks")]
    for side in ("predicted", "measured"):
        data = renderer(fig, f"{side}_runs").data_source.data
        # every block starts in some bin; a bin under 2 % busy is drawn idle, so a few can drop out
        assert 0.99 * 2 * pp * m <= int(np.sum(data["blocks"])) <= 2 * pp * m
        assert set(np.asarray(data["row"]) % 2) == {0 if side == "predicted" else 1}
        assert len(data["left"]) <= pp * 200


def test_rejects_empty_timeline_and_zero_measured_step():
    predicted, measured = pair("1f1b", 2, 4)
    with pytest.raises(ValueError, match="measured timeline has no rows"):
        comparison_timeline_figure(predicted, replace(measured, timeline=measured.timeline.head(0)))
    with pytest.raises(ValueError, match="step_time_s must be > 0"):
        comparison_timeline_figure(predicted, replace(measured, step_time_s=0.0))
