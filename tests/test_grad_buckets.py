"""Data-parallel reduction issued bucket by bucket (issue 14 item 2): each bucket is its own collective with its
own latency terms (``workbench.cost.step.grad_buckets``).

Expected values are closed forms over ``workbench.cost.comm``'s collectives: ZeRO-1 reduce-scatters the
gradients and all-gathers the updated weights, in ``grad_bucket_params`` buckets and a remainder, or one bucket per
FSDP unit (each layer plus the root) for stacks with ``grad_bucket_per_layer``."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.cost.comm import all_gather_s, reduce_scatter_s
from workbench.estimate.analytic import analytic_costs
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.plan import ParallelPlan, Workload

MODEL = load_model("llama-3.1-8b")
WORKLOAD = Workload(seq_len=4096, global_batch_size=1024)


def _cal(**fields):
    cal = load_calibration("default").with_framework("generic")
    fw = dataclasses.replace(
        cal.framework,
        overlap_grad_reduce=False,
        overlap_param_gather=False,
        comm_interference_frac=0.0,
        **fields,
    )
    return dataclasses.replace(cal, framework=fw)


def _zero1_s(cluster, count: float, n: int, g: float, p: float) -> float:
    return float(reduce_scatter_s(cluster, count * g, n, 1) + all_gather_s(cluster, count * p, n, 1))


@pytest.mark.parametrize("nodes", [2, 64])
def test_zero1_reduction_runs_in_buckets(nodes: int) -> None:
    cluster = load_cluster("dgx-h100", num_nodes=nodes)
    dp = 8 * nodes
    cal = _cal(grad_bucket_params=4.0e7)
    fw = cal.framework
    costs = analytic_costs(MODEL, cluster, WORKLOAD, ParallelPlan(dp=dp, zero_stage=1), cal)
    params = MODEL.total_parameters()
    full, rest = params // 4.0e7, params % 4.0e7
    p = 2.0  # bf16 weights
    expected = full * _zero1_s(cluster, 4.0e7, dp, fw.grad_bytes_per_param, p) + _zero1_s(
        cluster, rest, dp, fw.grad_bytes_per_param, p
    )
    assert costs.dp_comm_s == pytest.approx(expected, rel=1e-9)
    one = analytic_costs(
        MODEL, cluster, WORKLOAD, ParallelPlan(dp=dp, zero_stage=1), _cal(grad_bucket_params=1e13)
    )
    assert one.dp_comm_s == pytest.approx(_zero1_s(cluster, params, dp, fw.grad_bytes_per_param, p), rel=1e-9)
    # the same bytes in 201 collectives pay 201 latencies: more at 512 ranks, where latency dominates
    assert costs.dp_comm_s > one.dp_comm_s


def test_fsdp_units_are_one_bucket_per_layer_and_the_root() -> None:
    cluster = load_cluster("dgx-h100", num_nodes=16)
    cal = _cal(grad_bucket_per_layer=True, grad_bucket_params=1e13)
    fw = cal.framework
    costs = analytic_costs(MODEL, cluster, WORKLOAD, ParallelPlan(dp=128, zero_stage=2), cal)
    units = MODEL.num_layers + 1
    unit = MODEL.total_parameters() / units
    expected = units * _zero1_s(cluster, unit, 128, fw.grad_bytes_per_param, 2.0)
    assert costs.dp_comm_s == pytest.approx(expected, rel=1e-9)


def test_buckets_grow_with_the_data_parallel_group() -> None:
    """Megatron-Core's default bucket is max(40M, 1M x dp) parameters: at dp = 512 a bucket holds 512M."""
    cluster = load_cluster("dgx-h100", num_nodes=64)
    cal = _cal(grad_bucket_params=4.0e7, grad_bucket_params_per_rank=1.0e6)
    fw = cal.framework
    costs = analytic_costs(MODEL, cluster, WORKLOAD, ParallelPlan(dp=512, zero_stage=1), cal)
    params, bucket = MODEL.total_parameters(), 512 * 1.0e6
    full, rest = params // bucket, params % bucket
    expected = full * _zero1_s(cluster, bucket, 512, fw.grad_bytes_per_param, 2.0) + _zero1_s(
        cluster, rest, 512, fw.grad_bytes_per_param, 2.0
    )
    assert costs.dp_comm_s == pytest.approx(expected, rel=1e-9)
