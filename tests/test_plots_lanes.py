"""The timeline rasteriser against hand-computed bins."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from workbench_widgets.plots._lanes import aggregate_runs, assign_lanes, detail_window_s


def frame(rows):
    keys = ("rank", "stage", "chunk", "microbatch", "op", "start_s", "end_s")
    return pl.DataFrame([dict(zip(keys, r, strict=True)) for r in rows])


def test_runs_by_hand():
    # lane 0: F over [0, 1.5], B over [2, 4]; lane 1: W over [0.5, 1]; four bins of 1 s over [0, 4]
    tl = frame([(0, 0, 0, 0, "F", 0.0, 1.5), (0, 0, 0, 0, "B", 2.0, 4.0), (1, 1, 0, 0, "W", 0.5, 1.0)])
    lanes = assign_lanes(tl)
    runs = aggregate_runs(tl, lanes.lane, 2, num_bins=4, span_s=(0.0, 4.0))
    got = sorted(
        zip(
            runs.lane.tolist(),
            runs.start_s.tolist(),
            runs.end_s.tolist(),
            [runs.ops[c] for c in runs.op_code],
            runs.busy_frac.tolist(),
            runs.num_blocks.tolist(),
            strict=True,
        )
    )
    assert got == [
        (0, 0.0, 1.0, "F", 1.0, 1),
        (0, 1.0, 2.0, "F", 0.5, 0),
        (0, 2.0, 4.0, "B", 1.0, 1),
        (1, 0.0, 1.0, "W", 0.5, 1),
    ]


def test_dominant_op_wins_a_shared_bin():
    tl = frame([(0, 0, 0, 0, "F", 0.0, 0.3), (0, 0, 0, 1, "B", 0.3, 1.0)])
    lanes = assign_lanes(tl)
    runs = aggregate_runs(tl, lanes.lane, 1, num_bins=1, span_s=(0.0, 1.0))
    assert [runs.ops[c] for c in runs.op_code] == ["B"]
    assert runs.busy_frac.tolist() == [1.0]
    assert runs.num_blocks.tolist() == [2]


def test_lanes_per_chunk_and_detail_window():
    tl = frame([(0, 0, 0, 0, "F", 0.0, 1.0), (0, 2, 1, 0, "F", 1.0, 2.0), (1, 1, 0, 0, "F", 1.0, 2.0)])
    lanes = assign_lanes(tl)
    assert lanes.labels == ("rank 0 · chunk 0", "rank 0 · chunk 1", "rank 1")
    assert np.array_equal(lanes.lane, [0, 1, 2])
    assert detail_window_s(tl, 1) == pytest.approx((0.0, 1.0))
    assert detail_window_s(tl, 10) == pytest.approx((0.0, 2.0))
