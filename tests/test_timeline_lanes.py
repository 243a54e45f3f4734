"""Timeline lanes that do not crowd, a legend entry for blended quads, communication visible at full zoom-out.

Issue 19 (item 3): a pp8 x vpp2 interleaved-1f1b plan has 8 x 2 compute lanes and one communication lane per
rank, 24 lanes that were squeezed into ~170 px with overlapping labels, and its 0.35 ms sends were under a
pixel wide over a 2.5 s step. Expected lane counts, widths and positions are computed here from the timeline
frame and the plan, never read back from the builder's own helpers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from bokeh.models import PanTool, Rect, WheelPanTool
from workbench_widgets.plots import estimate_timeline_figure, timeline_figure
from workbench_widgets.plots.timeline import (
    COMM_LABEL,
    content_timeline_figure,
    refresh_timeline_figure,
    timeline_content,
)
from workbench_widgets.sample import sample_cluster, sample_estimate

from workbench.specs.plan import ParallelPlan, Workload

MIN_LANE_PX = 18
"""Issue 19: at least ~18-22 px per lane; an 11 px label and a gap need 18."""
COMPUTE_OPS = ("F", "B", "I", "W")


@pytest.fixture(scope="module")
def pp8_vpp2():
    """Llama 3.1 70B on 8 DGX H100 nodes, tp8 pp8 vpp2 interleaved-1f1b: the app's default model and cluster."""
    from workbench_backends.analytic import AnalyticBackend

    from workbench.presets.catalog import load_cluster, load_model

    plan = ParallelPlan(tp=8, pp=8, vpp=2, dp=1, schedule="interleaved-1f1b")
    return AnalyticBackend().estimate(
        load_model("llama-3.1-70b"),
        load_cluster("dgx-h100", 8),
        Workload(seq_len=8192, global_batch_size=16),
        plan,
    )


def renderer(fig, name):
    found = [r for r in fig.renderers if r.name == name]
    assert found, f"no renderer {name!r} in {[r.name for r in fig.renderers]}"
    return found[0]


def legend_labels(fig) -> list[str]:
    return [item.label.value for legend in fig.legend for item in legend.items]


def px(font_size: str) -> float:
    assert font_size.endswith("px"), font_size
    return float(font_size[:-2])


def comm_rows(timeline: pl.DataFrame) -> pl.DataFrame:
    return timeline.filter(~pl.col("op").is_in(COMPUTE_OPS))


def test_pp8_vpp2_has_24_lanes_of_at_least_the_minimum_height(pp8_vpp2) -> None:
    timeline = pp8_vpp2.timeline
    ranks_with_comm = comm_rows(timeline)["rank"].n_unique()
    assert ranks_with_comm == 8  # every pipeline rank sends activations or gradients
    num_lanes = 8 * 2 + ranks_with_comm
    fig = estimate_timeline_figure(pp8_vpp2)
    assert len(fig.yaxis.major_label_overrides) == num_lanes == 24
    shown = abs(fig.y_range.start - fig.y_range.end)
    assert shown == pytest.approx(num_lanes)  # 24 lanes stay under the cap: all in view
    assert fig.frame_height / shown >= MIN_LANE_PX
    assert fig.height > fig.frame_height  # title, legend and x axis come on top of the plot area
    assert fig.frame_height >= 24 * MIN_LANE_PX  # was a 306 px figure with a 174 px plot area


def test_pp8_vpp2_lane_labels_do_not_overlap(pp8_vpp2) -> None:
    fig = estimate_timeline_figure(pp8_vpp2)
    ticks = sorted(fig.yaxis.ticker.ticks)
    assert ticks == list(range(24))  # every lane labelled, none skipped
    labels = [fig.yaxis.major_label_overrides[t] for t in ticks]
    assert len(set(labels)) == 24
    px_per_unit = fig.frame_height / abs(fig.y_range.start - fig.y_range.end)
    centres_px = np.array(ticks) * px_per_unit
    font_px = px(fig.yaxis.major_label_text_font_size)
    assert np.diff(centres_px).min() >= font_px + 4  # one label's height plus a gap between neighbours


def test_many_lanes_cap_the_figure_and_pan_in_y() -> None:
    num_ranks = 120
    frame = pl.DataFrame(
        {
            "rank": list(range(num_ranks)),
            "stage": list(range(num_ranks)),
            "chunk": [0] * num_ranks,
            "microbatch": [0] * num_ranks,
            "op": ["F"] * num_ranks,
            "start_s": [r * 1e-3 for r in range(num_ranks)],
            "end_s": [(r + 1) * 1e-3 for r in range(num_ranks)],
        }
    )
    fig = timeline_figure(frame)
    assert fig.frame_height <= 1000  # capped: not 120 x 18 = 2,160 px
    shown = abs(fig.y_range.start - fig.y_range.end)
    assert shown < num_ranks and fig.frame_height / shown >= MIN_LANE_PX
    assert tuple(fig.y_range.bounds) == (-0.5, num_ranks - 0.5)  # the other lanes are reachable by panning
    assert min(fig.y_range.start, fig.y_range.end) == -0.5  # rank 0 at the top first
    pans_y = [
        t
        for t in fig.toolbar.tools
        if (isinstance(t, PanTool) and t.dimensions in ("both", "height"))
        or (isinstance(t, WheelPanTool) and t.dimension == "height")
    ]
    assert pans_y
    assert len(fig.yaxis.major_label_overrides) == num_ranks


def test_few_lanes_keep_a_readable_band() -> None:
    frame = pl.DataFrame(
        {
            "rank": [0],
            "stage": [0],
            "chunk": [0],
            "microbatch": [0],
            "op": ["F"],
            "start_s": [0.0],
            "end_s": [1.0],
        }
    )
    fig = timeline_figure(frame)
    assert fig.frame_height >= 100
    assert (fig.y_range.start, fig.y_range.end) == (0.5, -0.5)


def test_comm_blocks_have_a_minimum_visible_width_at_full_range(pp8_vpp2) -> None:
    fig = estimate_timeline_figure(pp8_vpp2)
    comm = comm_rows(pp8_vpp2.timeline)
    span_ms = fig.x_range.end - fig.x_range.start
    plot_px = fig.width - 120  # the plot area is narrower than the figure (axis labels, toolbar)
    widest_px = float(np.max((comm["end_s"] - comm["start_s"]).to_numpy())) * 1e3 * plot_px / span_ms
    assert widest_px < 1.0  # the sends alone would vanish at full zoom-out
    marks = renderer(fig, "comm_marks")
    assert isinstance(marks.glyph, Rect)
    glyph: Any = marks.glyph  # bokeh's stubs type width as any spec, not the number it holds here
    assert glyph.width_units == "screen" and glyph.width >= 1  # pixels, whatever the zoom
    # pale: where ~1,000 sends of a rank crowd at full zoom-out the lane is not painted solid (issue 51)
    assert glyph.fill_alpha <= 0.5
    data = marks.data_source.data
    assert len(data["x"]) == comm.height
    want = sorted(((comm["start_s"] + comm["end_s"]) / 2 * 1e3).to_list())
    assert sorted(data["x"]) == pytest.approx(want)
    assert min(data["height"]) > 0


def test_blended_quads_have_a_legend_entry_exactly_when_drawn() -> None:
    est = sample_estimate(
        plan=ParallelPlan(pp=16, schedule="zb-h1"), num_microbatches=256, cluster=sample_cluster(2)
    )
    dense = estimate_timeline_figure(est, max_blocks=5_000, num_bins=200)
    runs = renderer(dense, "runs").data_source.data
    # 16 x 256 x 3 blocks in 200 bins per lane: runs hold several blocks or part-idle bins
    assert (np.asarray(runs["blocks"]) > 1).any() or (np.asarray(runs["busy"]) < 1).any()
    assert any("blended" in label for label in legend_labels(dense))
    exact = estimate_timeline_figure(
        sample_estimate(plan=ParallelPlan(pp=4, schedule="1f1b"), num_microbatches=8)
    )
    assert not any("blended" in label for label in legend_labels(exact))
    assert legend_labels(exact) == ["B: backward", "F: forward"]


def test_blended_legend_fits_a_narrow_figure() -> None:
    est = sample_estimate(
        plan=ParallelPlan(pp=16, schedule="zb-h1"), num_microbatches=256, cluster=sample_cluster(2)
    )
    fig = estimate_timeline_figure(est, max_blocks=5_000, num_bins=200, width=560)
    (legend,) = fig.legend
    num_items = len(legend.items)
    assert num_items == 4  # F, I, W and blended
    assert legend.ncols < num_items  # wrapped into rows, not one row wider than 560 px
    assert fig.height >= fig.frame_height + 2 * 20  # the extra legend row is counted in the height


def test_thin_sends_stay_visible_in_the_aggregated_view() -> None:
    # rank 0 computes ten 0.1 s forwards; two 0.1 ms sends are 0.1 % of a 0.1 s bin (under the 2 % idle cut)
    rows = [(0, 0, 0, k, "F", k * 0.1, (k + 1) * 0.1) for k in range(10)]
    rows += [(0, 0, 0, 0, "send", 0.05, 0.0501), (0, 0, 0, 1, "send", 0.55, 0.5501)]
    keys = ("rank", "stage", "chunk", "microbatch", "op", "start_s", "end_s")
    frame = pl.DataFrame([dict(zip(keys, r, strict=True)) for r in rows])
    fig = timeline_figure(frame, max_blocks=5, num_bins=10)
    runs = renderer(fig, "runs").data_source.data
    comm_lane = list(fig.yaxis.major_label_overrides.values()).index("rank 0 · comm")
    on_comm = np.asarray(runs["lane"]) == comm_lane
    assert sorted(np.asarray(runs["left"])[on_comm].tolist()) == pytest.approx([0.0, 500.0])  # bins 0 and 5
    assert (np.asarray(runs["alpha"])[on_comm] >= 0.5).all()
    assert any(label == COMM_LABEL for label in legend_labels(fig))


def test_refresh_rewrites_the_comm_marks() -> None:
    def frame(scale: float) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "rank": [0, 0, 1],
                "stage": [0, 0, 1],
                "chunk": [0, 0, 0],
                "microbatch": [0, 0, 0],
                "op": ["F", "send", "F"],
                "start_s": [0.0, 1.0, 1.0],
                "end_s": [1.0, 1.001, 2.0],
            }
        ).with_columns(pl.col("start_s", "end_s") * scale)

    first, second = timeline_content(frame(1.0)), timeline_content(frame(2.0))
    assert first.layout_key == second.layout_key
    fig = content_timeline_figure(first)
    before = {m.id for m in fig.references()}
    refresh_timeline_figure(fig, second)
    assert {m.id for m in fig.references()} == before
    assert list(renderer(fig, "comm_marks").data_source.data["x"]) == pytest.approx([2001.0])
