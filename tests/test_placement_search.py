"""Placement as a searched dimension (issue 15, item 7): the rank order decides which links each group crosses.

Independent values: the stride of each group under a named order, computed by hand from the order's
definition (the product of the degrees laid inside it), and a pipeline hop priced as alpha + bytes / bandwidth
of the level it crosses (the cluster preset's NVLink or InfiniBand figures).
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost import step
from workbench.cost.placement import axis_stride, order_strides
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.search import search
from workbench.search.refine import plan_from_row
from workbench.search.space import Constraints, build_space, framework_constraints
from workbench.specs.plan import RANK_ORDERS, ParallelPlan, Workload

MODEL = load_model("llama-3.1-70b")
CLUSTER = load_cluster("dgx-h100", 2)
WORK = Workload(seq_len=4096, global_batch_size=64)


@pytest.mark.parametrize("name", list(RANK_ORDERS))
def test_order_strides_are_the_products_of_the_inner_degrees(name):
    plan = ParallelPlan(dp=2, tp=4, pp=2, cp=1, rank_order=RANK_ORDERS[name])
    got = order_strides(RANK_ORDERS[name], {"tp": 4, "cp": 1, "dp": 2, "pp": 2})
    by_hand = {
        "tp-cp-ep-dp-pp": {"tp": 1, "cp": 4, "dp": 4, "pp": 8},
        "tp-cp-ep-pp-dp": {"tp": 1, "cp": 4, "pp": 4, "dp": 8},
    }
    assert {k.removesuffix("_stride"): v for k, v in got.items()} == by_hand[name]
    assert all(got[f"{a}_stride"] == axis_stride(plan, a) for a in ("tp", "cp", "dp", "pp"))


def test_the_order_moves_the_pipeline_hop_between_links():
    """tp4 pp2 dp2 on two 8-GPU nodes: pp outermost puts the two stages on different nodes (InfiniBand, 50 GB/s,
    10 us); pp inside dp keeps them on one node (NVLink, 450 GB/s, 3 us)."""
    cal = load_calibration("default", framework="generic")
    ctx = step.StepContext.build(MODEL, CLUSTER, WORK, cal)
    payload = 1 * 4096 * MODEL.hidden_size * 2.0 / 4  # one micro-batch's hidden states / tp, bf16
    hops = {}
    for name, order in RANK_ORDERS.items():
        plan = ParallelPlan(dp=2, tp=4, pp=2, micro_batch_size=1, rank_order=order)
        hops[name] = float(step.pp_hop_s(ctx, step.plan_columns(plan, WORK)))
    ib, nvlink = CLUSTER.levels[1], CLUSTER.levels[0]
    assert hops["tp-cp-ep-dp-pp"] == pytest.approx(ib.latency_s + payload / ib.bytes_per_s, rel=1e-12)
    assert hops["tp-cp-ep-pp-dp"] == pytest.approx(nvlink.latency_s + payload / nvlink.bytes_per_s, rel=1e-12)


def test_the_space_adds_an_order_only_where_it_moves_a_group():
    space = build_space(MODEL, CLUSTER, Constraints())
    lay = space.layout
    other = lay["order_code"] == list(RANK_ORDERS).index("tp-cp-ep-pp-dp")
    assert other.any()
    assert np.all((lay["pp"][other] > 1) & (lay["dp"][other] > 1))  # swapping pp and dp changes nothing else
    default = ~other
    n_rows = int(default.sum())
    assert len(lay["tp"]) == n_rows + int(((lay["pp"][default] > 1) & (lay["dp"][default] > 1)).sum())
    titan = framework_constraints(Constraints(), load_framework("torchtitan-2024"))
    assert set(build_space(MODEL, CLUSTER, titan).layout["order_code"].tolist()) == {0}
    plan = ParallelPlan(dp=2, tp=4, pp=2, rank_order=RANK_ORDERS["tp-cp-ep-pp-dp"])
    assert any("rank order" in r for r in load_framework("torchtitan-2024").unsupported(plan))
    assert load_framework("megatron-core-2024").unsupported(plan) == []


def test_planner_rows_carry_their_order_back_into_plans():
    result = search(
        load_model("llama-3.1-8b"),
        CLUSTER,
        WORK,
        Constraints(fixed={"tp": 4, "pp": 2}, zero_stages=(1,), recompute=("full",)),
        nodes=[2],
        top_k=4,
        calibration="default",
    )
    orders = set(result.plans["rank_order"].to_list())
    assert orders <= set(RANK_ORDERS) and "tp-cp-ep-pp-dp" in orders
    for row in result.plans.head(4).iter_rows(named=True):
        plan = plan_from_row(row)
        assert "-".join(plan.rank_order) == row["rank_order"]
        assert ("order " in row["plan"]) == (row["rank_order"] != "tp-cp-ep-dp-pp")
