"""Rule checks of the grid against the scalar reference (``ParallelPlan.validate``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from workbench.pipeline.schedules import SCHEDULE_NAMES, schedule_rule_violations
from workbench.presets.catalog import load_cluster, load_model
from workbench.search.grid import REASONS, chunk_bounds, plan_columns, rule_reasons, schedule_rule_mask
from workbench.search.space import RECOMPUTE_CODES, Constraints, build_space
from workbench.specs.plan import ParallelPlan, Workload


def test_schedule_mask_matches_schedule_rule_violations():
    names = SCHEDULE_NAMES
    grid = list(itertools.product(range(len(names)), (2, 3, 4, 8), (1, 2, 3, 4), range(1, 20)))
    code, pp, vpp, m = (np.array(col) for col in zip(*grid, strict=True))
    got = schedule_rule_mask(names, code, pp, vpp, m)
    want = [
        bool(schedule_rule_violations(names[c], pp=int(p), vpp=int(v), num_microbatches=int(k)))
        for c, p, v, k in grid
    ]
    assert got.tolist() == want


def _plan(cols, i, names):
    keys = ("dp", "tp", "pp", "cp", "ulysses", "ep", "vpp", "micro_batch_size", "zero_stage")
    kw = {k: int(cols[k][i]) for k in keys}
    return ParallelPlan(
        **kw,
        sequence_parallel=bool(cols["sequence_parallel"][i]),
        recompute=RECOMPUTE_CODES[cols["recompute_code"][i]],
        schedule=names[cols["schedule_code"][i]],
    )


@pytest.mark.parametrize(
    ("model_id", "nodes", "seq", "batch"), [("llama-3.1-8b", 1, 4096, 24), ("mixtral-8x7b", 2, 4096, 48)]
)
def test_every_plan_of_a_small_space_agrees_with_validate(model_id, nodes, seq, batch):
    model, cluster = load_model(model_id), load_cluster("dgx-h100", num_nodes=nodes)
    workload = Workload(seq_len=seq, global_batch_size=batch)
    space = build_space(
        model, cluster, Constraints(schedules=SCHEDULE_NAMES, zero_stages=(0,), recompute=("none",))
    )
    cols = plan_columns(space, 0, len(space.layout["tp"]), batch)
    reasons = rule_reasons(cols, model, workload, space.schedule_names)
    for i in range(len(reasons)):
        problems = _plan(cols, i, space.schedule_names).validate(model, cluster, workload)
        assert bool(problems) == (reasons[i] >= 0), (
            i,
            problems,
            REASONS[reasons[i]] if reasons[i] >= 0 else None,
        )


def test_chunks_cover_every_layout_row_once():
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", num_nodes=8)
    space = build_space(model, cluster, Constraints())
    bounds = list(chunk_bounds(space, chunk_plans=5000))
    assert bounds[0][0] == 0 and bounds[-1][1] == len(space.layout["tp"])
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    assert all((hi - lo) * space.inner_size <= 5000 for lo, hi in bounds)
