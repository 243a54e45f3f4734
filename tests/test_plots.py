"""Structural tests of the bokeh figure builders, on estimates whose timeline is a real simulated schedule.

Expected values come from closed forms (action counts, rank layouts) and the Okabe-Ito hex codes
(Wong, Nature Methods 8:441, 2011), never from the builders themselves.
"""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
from bokeh.models import HoverTool, Span
from workbench_widgets.plots import (
    activation_figure,
    estimate_memory_figure,
    estimate_timeline_figure,
    estimates_breakdown_figure,
    placement_figure,
    search_figure,
    timeline_figure,
)
from workbench_widgets.plots.placement import axis_groups
from workbench_widgets.sample import sample_cluster, sample_estimate

from workbench.pipeline.schedules import build_schedule
from workbench.specs.plan import ParallelPlan

OKABE_ITO_BLUE, OKABE_ITO_VERMILLION, OKABE_ITO_ORANGE, OKABE_ITO_GREEN = (
    "#0072B2",
    "#D55E00",
    "#E69F00",
    "#009E73",
)
EXPECTED_OP_COLOR = {
    "F": OKABE_ITO_BLUE,
    "B": OKABE_ITO_VERMILLION,
    "I": OKABE_ITO_ORANGE,
    "W": OKABE_ITO_GREEN,
}


def renderer(fig, name):
    found = [r for r in fig.renderers if r.name == name]
    assert found, f"no renderer {name!r} in {[r.name for r in fig.renderers]}"
    return found[0]


def mapped_colours(glyph_renderer):
    """The fill colour of every row of ``glyph_renderer`` whose fill is a LinearColorMapper of a field, computed
    as BokehJS does (bin ``floor((v - low) / (high - low) * len(palette))``, clipped to the palette)."""
    spec = glyph_renderer.glyph.fill_color
    mapper = spec.transform
    values = np.asarray(glyph_renderer.data_source.data[spec.field], dtype=float)
    n = len(mapper.palette)
    bins = np.clip(np.floor((values - mapper.low) / (mapper.high - mapper.low) * n), 0, n - 1).astype(int)
    return [mapper.palette[i] for i in bins]


def tooltips(fig):
    return [t for tool in fig.toolbar.tools if isinstance(tool, HoverTool) for t in tool.tooltips]


@pytest.mark.parametrize(
    ("schedule", "pp", "vpp", "m"), [("1f1b", 4, 1, 8), ("zb-h1", 4, 1, 8), ("interleaved-1f1b", 2, 2, 4)]
)
def test_timeline_one_block_per_action_coloured_by_op(schedule, pp, vpp, m):
    est = sample_estimate(plan=ParallelPlan(pp=pp, vpp=vpp, schedule=schedule), num_microbatches=m)
    fig = estimate_timeline_figure(est)
    data = renderer(fig, "blocks").data_source.data
    num_actions = build_schedule(schedule, pp=pp, num_microbatches=m, vpp=vpp).num_actions
    assert len(data["left"]) == num_actions
    ops_per_mb = 3 if schedule.startswith("zb") else 2
    assert num_actions == pp * vpp * m * ops_per_mb  # every stage does F and B (or I and W) per micro-batch
    # each block's colour as BokehJS's LinearColorMapper maps its op code, against the op of its timeline row
    assert [c.upper() for c in mapped_colours(renderer(fig, "blocks"))] == [
        EXPECTED_OP_COLOR[op] for op in est.timeline["op"].to_list()
    ]
    assert "makespan" in fig.title.text and "bubble" in fig.title.text
    assert len(fig.yaxis.major_label_overrides) == pp * vpp  # one lane per rank and chunk


def test_timeline_tooltips_carry_units_and_labels_fit():
    est = sample_estimate(plan=ParallelPlan(pp=4, schedule="1f1b"), num_microbatches=8)
    fig = estimate_timeline_figure(est)
    units = dict(tooltips(fig))
    assert all(units[k].endswith(" ms") for k in ("start", "end", "duration"))
    labels = renderer(fig, "labels").data_source.data["text"]
    assert sorted(set(labels)) == sorted(str(i) for i in range(8))


def test_comm_ops_get_their_own_lane():
    frame = pl.DataFrame(
        {
            "rank": [0, 0, 1],
            "stage": [0, 0, 1],
            "chunk": [0, 0, 0],
            "microbatch": [0, 0, 0],
            "op": ["F", "comm", "F"],
            "start_s": [0.0, 0.001, 0.002],
            "end_s": [0.001, 0.002, 0.003],
        }
    )
    fig = timeline_figure(frame)
    assert list(fig.yaxis.major_label_overrides.values()) == ["rank 0", "rank 0 · comm", "rank 1"]
    data = renderer(fig, "blocks").data_source.data
    assert list(data["bottom"] + data["top"]) == pytest.approx([0.0, 2.0, 4.0])  # lane centres 0, 1, 2


def test_dense_timeline_is_aggregated_and_bounded():
    est = sample_estimate(
        plan=ParallelPlan(pp=16, schedule="zb-h1"), num_microbatches=256, cluster=sample_cluster(2)
    )
    assert est.timeline.height == 16 * 256 * 3
    fig = estimate_timeline_figure(est, max_blocks=5_000, num_bins=200)
    assert not [r for r in fig.renderers if r.name == "blocks"]
    runs = renderer(fig, "runs").data_source.data
    assert len(runs["left"]) <= 16 * 200
    assert runs["blocks"].sum() == est.timeline.height  # every block starts in exactly one run
    detail = timeline_figure(est.timeline, window_s=(0.0, 0.05))
    expected = est.timeline.filter((pl.col("start_s") < 0.05) & (pl.col("end_s") > 0.0)).height
    assert len(renderer(detail, "blocks").data_source.data["left"]) == expected


def test_memory_bars_capacity_line_and_over_capacity_marks():
    est = sample_estimate(plan=ParallelPlan(pp=4, schedule="1f1b"), num_microbatches=8, memory_scale=1.65)
    fig = estimate_memory_figure(est)
    spans = {s.name: s for s in fig.center if isinstance(s, Span)}
    # The plan is judged against the usable memory: the sample device's 80 GiB less the 5 % headroom
    # (DEFAULT_HEADROOM_FRAC) = 76 GiB, dashed; the whole HBM dotted above it.
    assert spans["capacity"].location == pytest.approx(76.0)
    assert spans["hbm"].location == pytest.approx(80.0) and spans["hbm"].visible
    assert "of 76.0 GiB usable" in fig.title.text and "HBM 80.0 GiB" in fig.title.text
    over = renderer(fig, "over_capacity").data_source.data["x"]
    # 1.65 x (43 GiB + (4 - rank) in-flight micro-batches x 2 GiB) = 84.2, 80.9, 77.6, 74.3 GiB: ranks 0-2 exceed 76
    assert list(over) == ["0", "1", "2"]
    whole = estimate_memory_figure(
        est, headroom_frac=0.0
    )  # no headroom: one line at the HBM, ranks 0, 1 over
    assert [s.location for s in whole.center if isinstance(s, Span) and s.name == "capacity"] == [80.0]
    assert not next(s for s in whole.center if isinstance(s, Span) and s.name == "hbm").visible
    assert list(renderer(whole, "over_capacity").data_source.data["x"]) == ["0", "1"]
    bars = renderer(fig, "bars").data_source.data
    assert len(bars["top"]) == 6 * 4  # six memory kinds stacked on each of the 4 ranks
    totals = est.memory.select(pl.sum_horizontal(pl.exclude("rank", "total_bytes"))).to_series() / 2**30
    tops = [t for t, part in zip(bars["top"], bars["part"], strict=True) if part == "other"]  # stacked last
    assert tops == pytest.approx(totals.to_list())


def test_activation_lines_keep_each_rank_peak():
    est = sample_estimate(plan=ParallelPlan(pp=4, schedule="1f1b"), num_microbatches=16)
    fig = activation_figure(est.activation_timeline, max_points_per_rank=10)
    ys = renderer(fig, "activations").data_source.data["ys"]
    # 1F1B holds at most pp - rank micro-batches of 2 GiB on rank r (Narayanan et al. 2021, sec. 2.2)
    assert [float(max(y)) for y in ys] == pytest.approx([8.0, 6.0, 4.0, 2.0])


def test_breakdown_parts_add_up():
    a = sample_estimate(plan=ParallelPlan(pp=4, schedule="1f1b"), num_microbatches=8)
    b = sample_estimate(plan=ParallelPlan(pp=2, schedule="1f1b"), num_microbatches=8)
    fig = estimates_breakdown_figure([a, b])
    data = renderer(fig, "parts").data_source.data
    assert len(data["plan"]) == 2 * 8  # eight parts per plan
    for i, est in enumerate((a, b)):
        rows = [k for k, plan in enumerate(data["plan"]) if plan.startswith(f"#{i} ")]
        assert sum(data["ms"][k] for k in rows) == pytest.approx(est.step_time_s * 1e3)
        assert max(data["right"][k] for k in rows) == pytest.approx(est.step_time_s * 1e3)
    # the thin hatched bars (communication hidden behind compute) have their own legend entry, hatched
    from workbench_widgets.plots.breakdown import HIDDEN_LABEL

    (hidden,) = [i for i in fig.legend[0].items if getattr(i.label, "value", None) == HIDDEN_LABEL]
    (drawn,) = hidden.renderers  # a legend-only glyph hatched as the bars are, on a constant source
    assert drawn is not renderer(fig, "overlapped") and drawn.name == "legend_overlapped"
    assert drawn.glyph.hatch_pattern == renderer(fig, "overlapped").glyph.hatch_pattern == "/"


def test_breakdown_x_range_is_fixed_as_bokehjs_would_compute_it():
    """The step-time axis is a fixed range, written with the bars (the browser recomputes no data range and
    lays the figure out once per change): 0 to the longest bar padded as BokehJS's ``DataRange1d`` with
    ``start=0`` and its default 10% padding does (span 0..hi widened 10% about hi/2: hi * 1.05); a refresh
    moves it, and the reset tool's end, to the new plan's bars."""
    from bokeh.models import Range1d
    from workbench_widgets.plots.breakdown import refresh_breakdown_figure

    a = sample_estimate(plan=ParallelPlan(pp=4, schedule="1f1b"), num_microbatches=8)
    b = sample_estimate(plan=ParallelPlan(pp=2, schedule="1f1b"), num_microbatches=32)
    fig = estimates_breakdown_figure([a])
    longest_ms = a.step_time_s * 1e3  # the stacked parts end at the step; the hidden bars are shorter
    assert max(renderer(fig, "overlapped").data_source.data["right"], default=0.0) < longest_ms
    assert isinstance(fig.x_range, Range1d) and fig.x_range.start == 0
    assert fig.x_range.end == pytest.approx(1.05 * longest_ms) and fig.x_range.reset_end == fig.x_range.end
    assert refresh_breakdown_figure(fig, [b])
    assert fig.x_range.end == pytest.approx(1.05 * b.step_time_s * 1e3) != pytest.approx(1.05 * longest_ms)
    assert fig.x_range.reset_end == fig.x_range.end


def test_search_figure_greys_infeasible_and_marks_chosen():
    frame = pl.DataFrame(
        {
            "tokens_per_s": [9e5, 8e5, 7e5, 6e5, 5e5],
            "peak_memory_bytes": [90e9, 70e9, 40e9, 50e9, 20e9],
            "fits": [False, True, True, True, True],
            "pp": [1, 2, 4, 4, 8],
            "rejected_reason": [None, None, None, "tp does not divide heads", None],
        }
    )
    fig = search_figure(frame, chosen_index=1)
    assert len(renderer(fig, "infeasible").data_source.data["x"]) == 2
    assert len(renderer(fig, "feasible").data_source.data["x"]) == 3
    pareto = renderer(fig, "pareto").data_source.data
    assert sorted(pareto["y"]) == [5e5, 7e5, 8e5]
    chosen = renderer(fig, "chosen").data_source.data
    assert chosen["x"][0] == pytest.approx(70e9 / 2**30)
    with pytest.raises(ValueError, match="chosen_index"):
        search_figure(frame, chosen_index=5)
    with pytest.raises(ValueError, match="peak_memory_bytes"):
        search_figure(frame.drop("peak_memory_bytes"))


def test_placement_colours_by_stage_and_flags_groups_across_nodes():
    plan = ParallelPlan(dp=2, tp=8, pp=4)
    cluster = sample_cluster(8)
    fig = placement_figure(plan, cluster)
    data = renderer(fig, "devices").data_source.data
    # default order tp, cp, ep, dp, pp innermost first: stage of rank r is r // (tp * dp)
    assert list(data["pp"]) == [r // 16 for r in range(64)]
    colors = {c for s, c in zip(data["pp"], data["color"], strict=True) if s == 0}
    assert len(colors) == 1
    assert "tp groups across nodes: 0 of 8" in fig.title.text
    assert "dp groups across nodes: 32 of 32" in fig.title.text  # dp partners are 8 ranks apart
    wide = placement_figure(ParallelPlan(tp=16, pp=4), cluster)
    assert "tp groups across nodes: 4 of 4" in wide.title.text
    with pytest.raises(ValueError, match="devices"):
        placement_figure(ParallelPlan(tp=8, pp=16), cluster)


def test_axis_groups_partition_the_ranks():
    plan = ParallelPlan(dp=2, tp=4, pp=2, cp=2)
    for axis, size in (("tp", 4), ("dp", 2), ("cp", 2), ("pp", 2)):
        groups = axis_groups(plan, axis)
        assert all(len(g) == size for g in groups)
        assert sorted(itertools.chain.from_iterable(groups)) == list(range(32))
