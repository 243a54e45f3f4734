"""Hybrid sharding (HSDP, issue 15 item 3): ZeRO states sharded over groups of ``zero_shard`` ranks and
replicated over the rest, whose gradient shards are all-reduced.

Expected values are closed forms: every state divided by the shard group instead of dp*cp, and the replica
all-reduce of 1/k of the gradients over r = dp*cp/k ranks spaced k apart (PyTorch FSDP HYBRID_SHARD)."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.cost.comm import all_reduce_s
from workbench.estimate.analytic import analytic_costs, estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.plan import ParallelPlan, Workload

MODEL, CLUSTER = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=8)
WORKLOAD = Workload(seq_len=4096, global_batch_size=256)


def _cal():
    cal = load_calibration("default").with_framework("generic")
    fw = dataclasses.replace(cal.framework, overlap_grad_reduce=False, comm_interference_frac=0.0)
    return dataclasses.replace(cal, framework=fw)


def test_states_are_sharded_over_the_shard_group() -> None:
    full = estimate_plan(MODEL, CLUSTER, WORKLOAD, ParallelPlan(dp=64, zero_stage=3), calibration=_cal())
    hybrid = estimate_plan(
        MODEL, CLUSTER, WORKLOAD, ParallelPlan(dp=64, zero_stage=3, zero_shard=8), calibration=_cal()
    )
    a, b = full.peak_memory_row(), hybrid.peak_memory_row()
    for key in ("parameters_bytes", "gradients_bytes", "optimizer_states_bytes"):
        assert b[key] == pytest.approx(a[key] * 64 / 8, rel=1e-9), key
    assert "hsdp8" in hybrid.plan.describe() and "hsdp" not in full.plan.describe()


def test_replicas_all_reduce_their_gradient_shard() -> None:
    """ZeRO-3 HSDP over 8 nodes: each shard group is one node (8 ranks, stride 1); the 1/8 gradient shard is
    all-reduced over the 8 replicas, one per node (stride 8), once per step, bucket by bucket: the generic
    stack's buckets of 40M parameters, then the remainder."""
    cal = _cal()
    plan = ParallelPlan(dp=64, zero_stage=3, zero_shard=8)
    costs = analytic_costs(MODEL, CLUSTER, WORKLOAD, plan, cal)
    params = MODEL.total_parameters()  # pp = 1: this rank holds every layer, the embedding and the head
    bucket, g = cal.framework.grad_bucket_params, cal.framework.grad_bytes_per_param
    assert bucket == 4.0e7
    full, rest = params // bucket, params % bucket
    expected = full * all_reduce_s(CLUSTER, bucket * g / 8, 8, 8) + all_reduce_s(CLUSTER, rest * g / 8, 8, 8)
    assert costs.dp_comm_s == pytest.approx(float(expected), rel=1e-9)
    full = analytic_costs(MODEL, CLUSTER, WORKLOAD, ParallelPlan(dp=64, zero_stage=3), cal)
    assert full.dp_comm_s == 0.0  # full sharding does its reduction per layer (fsdp), none after the step


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"dp": 64, "zero_stage": 3, "zero_shard": 3}, "must divide dp\\*cp = 64"),
        ({"dp": 64, "zero_shard": 8}, "needs zero_stage >= 1"),
    ],
)
def test_bad_shard_group_is_refused(fields: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ParallelPlan(**fields)
