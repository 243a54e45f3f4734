"""Communication hidden behind compute, MoE dispatch and FP8 per op as mechanisms (issue 14 items 2-4).

Expected values are closed forms computed here: the overlap rule, the expected number of distinct nodes
among k uniform picks, the bytes of FP8 casts, and sums that must hold between the breakdown's parts.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from workbench.cost.comm import all_reduce_s, all_to_all_s
from workbench.cost.flops import FP8_CAST_BYTES, fp8_cast_op, layer_ops
from workbench.cost.layer import edge_costs, layer_costs
from workbench.cost.moe import (
    FP8_DISPATCH_BYTES,
    MOE_LAYER_KERNEL_PARTS,
    MOE_LAYER_KERNELS,
    moe_dispatch_s,
    nodes_reached,
)
from workbench.cost.overlap import overlap
from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.framework import FP8_RECIPES
from workbench.specs.plan import ParallelPlan, Workload

B200_QWEN3_EAGER = (
    MOE_LAYER_KERNELS - MOE_LAYER_KERNEL_PARTS["moe_router"] - MOE_LAYER_KERNEL_PARTS["moe_preprocess"] + 1
)
"""Launches of a Qwen3 MoE layer's forward apart from its experts on B200: its recipe graphs router and preprocessing."""


def _cal(**changes: object):
    """The default calibration priced with megatron-core-2024, some profile fields changed."""
    cal = load_calibration("default").with_framework("megatron-core-2024")
    return dataclasses.replace(cal, framework=dataclasses.replace(cal.framework, **changes))


def test_overlap_rule_closed_forms() -> None:
    # hidden behind a longer window: only the tail is exposed
    assert overlap(10.0, 50.0, on=True, tail=2.0) == pytest.approx((2.0, 8.0))
    # longer than the window: the excess is exposed
    assert overlap(10.0, 6.0, on=True, tail=2.0) == pytest.approx((4.0, 6.0))
    # off: all exposed; a tail longer than the transfer exposes the transfer
    assert overlap(10.0, 50.0, on=False) == pytest.approx((10.0, 0.0))
    assert overlap(1.0, 50.0, on=True, tail=5.0) == pytest.approx((1.0, 0.0))
    # interference: 0.2 s of compute lost per hidden second, counted as exposed
    assert overlap(10.0, 50.0, on=True, tail=2.0, interference=0.2) == pytest.approx((2.0 + 0.2 * 8.0, 8.0))
    exposed, hidden = overlap(np.array([1.0, 10.0]), np.array([5.0, 5.0]), on=np.array([True, False]))
    assert exposed.tolist() == [0.0, 10.0] and hidden.tolist() == [1.0, 0.0]


def test_nodes_reached_with_and_without_group_limited_routing() -> None:
    v3 = load_model("deepseek-v3")  # 256 experts, top-8, 8 groups, 4 groups per token (arXiv:2412.19437)
    assert (v3.num_expert_groups, v3.routed_groups_per_token, v3.experts_per_token) == (8, 4, 8)
    # ep over 8 nodes: one group per node, a token may use 4 of them: 4 (1 - (3/4)^8)
    assert nodes_reached(v3, 8) == pytest.approx(4 * (1 - 0.75**8))
    # one node: everything local
    assert nodes_reached(v3, 1) == pytest.approx(1.0)
    mixtral = load_model("mixtral-8x7b")  # no group limit, top-2
    assert nodes_reached(mixtral, 4) == pytest.approx(4 * (1 - 0.75**2))


def test_deepep_sends_a_token_once_per_remote_node() -> None:
    """Big payloads on 8 nodes: the network leg sets the time, and DeepEP's bytes over the network are the
    remote nodes' share of one copy per node, against k (N-1)/N copies for a plain all-to-all."""
    v3, cluster = load_model("deepseek-v3"), load_cluster("hgx-h800", num_nodes=8)
    tokens, ep = 65536.0, 64
    plain, _ = moe_dispatch_s(v3, cluster, _cal(), dtype="bf16", tokens=tokens, tp=1, ep=ep)
    deepep, _ = moe_dispatch_s(
        v3, cluster, _cal(moe_dispatcher="deepep"), dtype="bf16", tokens=tokens, tp=1, ep=ep
    )
    remote = nodes_reached(v3, 8) * 7 / 8
    copies_over_network = v3.experts_per_token * 7 / 8
    assert deepep / plain == pytest.approx(remote / copies_over_network, rel=0.05)
    # the network leg of each is an all-to-all among the 8 nodes (one rank per node, stride 8)
    per_value = tokens * v3.hidden_size
    network = all_to_all_s(cluster, per_value * remote * 2.0 * 8 / 7, 8, 8)
    assert deepep == pytest.approx(2 * network, rel=1e-6)  # dispatch + combine, both bf16


def test_fp8_dispatch_sends_one_byte_and_a_scale_and_combines_in_bf16() -> None:
    v3, cluster = load_model("deepseek-v3"), load_cluster("hgx-h800", num_nodes=8)
    kw = {"tokens": 65536.0, "tp": 1, "ep": 64}
    cal = _cal(moe_dispatcher="deepep", moe_fp8_dispatch=True)
    fp8, back = moe_dispatch_s(v3, cluster, cal, dtype="fp8", **kw)
    bf16, back16 = moe_dispatch_s(v3, cluster, cal, dtype="bf16", **kw)
    # bandwidth-bound: forward = dispatch (1 + 4/128 bytes) + combine (2 bytes) against 2 + 2
    assert fp8 / bf16 == pytest.approx((FP8_DISPATCH_BYTES + 2.0) / 4.0, rel=0.02)
    assert back == pytest.approx(back16)  # gradients travel in bf16 both ways


def test_ep_overlap_hides_the_all_to_all_behind_the_layer_compute() -> None:
    model, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-h100", num_nodes=2)
    workload, plan = Workload(seq_len=4096, global_batch_size=64), ParallelPlan(dp=16, ep=8, zero_stage=1)
    off = estimate_plan(model, cluster, workload, plan, calibration=_cal(moe_host_sync=False))
    on = estimate_plan(
        model, cluster, workload, plan, calibration=_cal(moe_host_sync=False, ep_comm_overlap=True)
    )
    assert off.breakdown.exposed_ep_comm_s > 0 and off.breakdown.overlapped_ep_comm_s == 0
    total = off.breakdown.exposed_ep_comm_s
    interference = on.breakdown.exposed_ep_comm_s - (total - on.breakdown.overlapped_ep_comm_s)
    # exposed + hidden = the same traffic; what hides costs comm_interference_frac of it in compute
    assert interference == pytest.approx(
        _cal().framework.comm_interference_frac * on.breakdown.overlapped_ep_comm_s
    )
    assert on.step_time_s < off.step_time_s
    summary = json.loads(json.dumps(on.summary()))
    assert summary["overlapped_comm_s"]["ep"] == pytest.approx(on.breakdown.overlapped_ep_comm_s)
    assert on.breakdown.total_s == pytest.approx(on.step_time_s)  # hidden parts are not in the step


def test_grad_reduce_overlap_exposes_at_least_the_last_bucket() -> None:
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=4)
    workload, plan = Workload(seq_len=4096, global_batch_size=64), ParallelPlan(dp=32, zero_stage=1)
    kw = {"comm_interference_frac": 0.0, "overlap_param_gather": False}
    off = estimate_plan(model, cluster, workload, plan, calibration=_cal(overlap_grad_reduce=False, **kw))
    on = estimate_plan(model, cluster, workload, plan, calibration=_cal(overlap_grad_reduce=True, **kw))
    b_off, b_on = off.breakdown, on.breakdown
    assert b_on.exposed_dp_comm_s + b_on.overlapped_dp_comm_s == pytest.approx(b_off.exposed_dp_comm_s)
    assert 0 < b_on.exposed_dp_comm_s < b_off.exposed_dp_comm_s
    assert on.step_time_s == pytest.approx(off.step_time_s - b_on.overlapped_dp_comm_s)


def test_host_sync_makes_small_moe_layers_launch_bound() -> None:
    """Qwen3-30B-A3B at micro-batch 1 on 8 B200 (ep8: 16 local experts, FP8 current scaling): the layer cannot
    take less than its launches x host_s_per_kernel, forward (the eager kernels + 8 x 16) and backward
    (2 x the eager kernels + 10 x 16), where its Megatron-Bridge recipe on B200 graphs the router and the
    dispatcher's preprocessing (one launch for both)."""
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("dgx-b200")
    workload = Workload(seq_len=4096, global_batch_size=64, dtype="fp8")
    plan = ParallelPlan(dp=8, ep=8, zero_stage=1)
    cal = _cal(host_s_per_kernel=1e-4, moe_host_sync=True)
    est = estimate_plan(model, cluster, workload, plan, calibration=cal)
    host = (B200_QWEN3_EAGER + 8 * 16 + 2 * B200_QWEN3_EAGER + 10 * 16) * 1e-4
    m = plan.num_microbatches(workload)
    assert est.breakdown.compute_s >= m * model.num_moe_layers * host * 0.999
    free = estimate_plan(model, cluster, workload, plan, calibration=_cal(moe_host_sync=False))
    assert free.step_time_s < est.step_time_s


def test_fp8_casts_and_a_16_bit_lm_head() -> None:
    model = load_model("llama-3.1-8b")
    assert tuple(FP8_CAST_BYTES) == FP8_RECIPES
    h, f, a, d = model.hidden_size, model.ffn_hidden_size, model.num_attention_heads, model.value_head_dim
    op = fp8_cast_op(model, tokens=1000.0, tp=2, moe_layer=False, recipe="current")
    assert op.bytes == pytest.approx(6.0 * 1000 * (h + a * d / 2 + h + f / 2))
    names = [o.name for o in layer_ops(model, tokens=1000.0, seq_len=4096, fp8_recipe="delayed")]
    assert "fp8_casts" in names and "fp8_casts" not in [
        o.name for o in layer_ops(model, tokens=1000.0, seq_len=4096)
    ]
    cluster, cal = load_cluster("dgx-h100"), _cal()
    head8 = edge_costs(model, cluster, cal, dtype="fp8", tokens=4096.0, tp=1)
    head16 = edge_costs(model, cluster, cal, dtype="bf16", tokens=4096.0, tp=1)
    assert head8.head_f_s == pytest.approx(head16.head_f_s)


def test_breakdown_plot_draws_hidden_communication_apart() -> None:
    from workbench_widgets.plots.breakdown import estimates_breakdown_figure

    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=4)
    est = estimate_plan(
        model,
        cluster,
        Workload(seq_len=4096, global_batch_size=64),
        ParallelPlan(dp=32, zero_stage=1),
        calibration=_cal(),
    )
    fig = estimates_breakdown_figure([est])
    hidden = next(r for r in fig.renderers if r.name == "overlapped").data_source.data
    assert "DP comm hidden" in hidden["part"]
    i = hidden["part"].index("DP comm hidden")
    assert hidden["ms"][i] == pytest.approx(est.breakdown.overlapped_dp_comm_s * 1e3)
    parts = next(r for r in fig.renderers if r.name == "parts").data_source.data
    assert max(parts["right"]) == pytest.approx(est.step_time_s * 1e3)


def test_fp8_weights_in_memory() -> None:
    """Transformer Engine FP8 keeps two FP8 copies of every local linear weight (rowwise and transposed) beside
    the 16-bit weight; with fp8_param_gather (Megatron-Bridge's FP8 recipes) the weights are 1 byte and only the
    transposed copy is extra."""
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    plan = ParallelPlan(dp=8, zero_stage=1)
    kw = {"seq_len": 4096, "global_batch_size": 64}
    bf16 = estimate_plan(model, cluster, Workload(**kw), plan, calibration=_cal()).peak_memory_row()
    fp8 = estimate_plan(
        model, cluster, Workload(**kw, dtype="fp8"), plan, calibration=_cal(fp8_param_gather=False)
    ).peak_memory_row()
    layers = model.num_layers * model.layer_parameters(0)
    assert fp8["buffers_bytes"] - bf16["buffers_bytes"] == pytest.approx(2.0 * layers)
    assert fp8["parameters_bytes"] == pytest.approx(bf16["parameters_bytes"])
    gathered = estimate_plan(
        model, cluster, Workload(**kw, dtype="fp8"), plan, calibration=_cal(fp8_param_gather=True)
    ).peak_memory_row()
    assert gathered["parameters_bytes"] == pytest.approx(bf16["parameters_bytes"] / 2)
    assert gathered["buffers_bytes"] - bf16["buffers_bytes"] == pytest.approx(1.0 * layers)


def test_capacity_factor_pads_experts_and_removes_the_host_sync() -> None:
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("dgx-b200")
    plan = ParallelPlan(dp=8, ep=8, zero_stage=1)
    cal = _cal(host_s_per_kernel=1e-3, moe_host_sync=True)
    kw = {"seq_len": 4096, "global_batch_size": 64, "dtype": "fp8"}
    dropless = estimate_plan(model, cluster, Workload(**kw), plan, calibration=cal)
    padded = estimate_plan(model, cluster, Workload(**kw, capacity_factor=1.0), plan, calibration=cal)
    m = plan.num_microbatches(Workload(**kw))
    host = (B200_QWEN3_EAGER + 8 * 16 + 2 * B200_QWEN3_EAGER + 10 * 16) * 1e-3
    assert dropless.breakdown.compute_s >= m * model.num_moe_layers * host * 0.999
    assert padded.breakdown.compute_s < dropless.breakdown.compute_s / 3
    # the all-to-all carries capacity_factor x the balanced copies (bandwidth-bound at this size)
    big = {"dtype": "bf16", "tokens": 65536.0, "tp": 1, "ep": 64}
    v3, h800 = load_model("deepseek-v3"), load_cluster("hgx-h800", num_nodes=8)
    one, _ = moe_dispatch_s(v3, h800, _cal(), capacity_factor=1.0, **big)
    two, _ = moe_dispatch_s(v3, h800, _cal(), capacity_factor=2.0, **big)
    assert two / one == pytest.approx(2.0, rel=0.02)


@pytest.mark.parametrize("bad", [0.5, float("nan"), 65.0, True])
def test_capacity_factor_out_of_range_is_refused_with_its_name(bad: object) -> None:
    with pytest.raises(ValueError, match="capacity_factor"):
        Workload(seq_len=4096, global_batch_size=64, capacity_factor=bad)  # type: ignore[arg-type]


def test_expert_tensor_parallelism_splits_experts_and_gathers_their_tokens() -> None:
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100", num_nodes=2)
    workload = Workload(seq_len=4096, global_batch_size=64)
    cal = _cal(moe_host_sync=False, ep_comm_overlap=False)
    auto = ParallelPlan(dp=16, ep=8, zero_stage=1)
    folded = ParallelPlan(dp=16, ep=8, etp=2, zero_stage=1)
    assert auto.expert_tp == 1 and folded.expert_tp == 2 and "etp2" in folded.describe()
    a = estimate_plan(model, cluster, workload, auto, calibration=cal)
    f = estimate_plan(model, cluster, workload, folded, calibration=cal)
    experts = model.num_moe_layers * model.num_experts * 3 * model.hidden_size * model.moe_ffn_hidden_size
    # bf16 weights of the experts: 1/ep of them per device, 1/(ep*etp) with etp
    drop = a.peak_memory_row()["parameters_bytes"] - f.peak_memory_row()["parameters_bytes"]
    assert drop == pytest.approx(2.0 * experts * (1 / 8 - 1 / 16), rel=1e-6)
    assert f.breakdown.exposed_ep_comm_s > a.breakdown.exposed_ep_comm_s  # the etp gathers
    bad = ParallelPlan(dp=16, ep=8, etp=4, zero_stage=1)  # 8 * 4 = 32 does not divide 16
    assert any("ep*etp = 8*4 must divide dp*cp*tp = 16" in p for p in bad.validate(model, cluster, workload))
    with pytest.raises(ValueError, match="etp"):
        ParallelPlan(dp=16, ep=8, etp=0)


def test_reserved_sms_slow_every_kernel() -> None:
    """DeepSeek-V3 keeps 20 of 132 SMs for communication: compute runs at 112/132 of the rate."""
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    workload, plan = Workload(seq_len=4096, global_batch_size=64), ParallelPlan(dp=8, zero_stage=1)
    base = estimate_plan(model, cluster, workload, plan, calibration=_cal(host_overhead_per_layer_s=0.0))
    kept = estimate_plan(
        model,
        cluster,
        workload,
        plan,
        calibration=_cal(host_overhead_per_layer_s=0.0, reserved_sm_frac=20 / 132),
    )
    assert kept.breakdown.compute_s == pytest.approx(base.breakdown.compute_s * 132 / 112, rel=1e-9)


def test_pipeline_hops_are_priced_on_the_link_each_crosses() -> None:
    """llama-3.1-8b, dp2 tp2 pp4 on 2 DGX H100: pipeline ranks sit on devices 0, 4 | 8, 12, so the hops 0->1 and
    2->3 stay on NVLink and 1->2 crosses InfiniBand (alpha + payload / bandwidth of each level)."""
    from workbench.estimate.analytic import analytic_costs
    from workbench.pipeline.simulate import StageCosts

    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=2)
    workload, plan = Workload(seq_len=8192, global_batch_size=64), ParallelPlan(dp=2, tp=2, pp=4)
    cal = load_calibration("default", framework="generic")  # non-blocking sends
    payload = 8192 * model.hidden_size * 2 / 2
    nvlink, ib = cluster.levels
    eff = cal.framework.collective_efficiency_frac
    near = nvlink.latency_s + payload / (nvlink.bytes_per_s * eff)
    far = ib.latency_s + payload / (ib.bytes_per_s * eff)
    costs = analytic_costs(model, cluster, workload, plan, cal)
    hops = np.asarray(costs.stages.p2p_rank_s)
    assert hops[0, 1] == pytest.approx(near) and hops[2, 3] == pytest.approx(near)
    assert hops[1, 2] == pytest.approx(far) and costs.stages.p2p_s == pytest.approx(far)
    comm = estimate_plan(model, cluster, workload, plan, calibration=cal).timeline
    sends = comm.filter(comm["op"] == "comm")
    took = (sends["end_s"] - sends["start_s"]).to_numpy()
    stage = sends["stage"].to_numpy()
    # stage 0 receives gradients from stage 1 and stage 3 activations from stage 2: NVLink only; stage 1
    # receives activations over NVLink (from 0) and gradients over InfiniBand (from 2)
    assert np.allclose(took[stage == 0], near) and np.allclose(took[stage == 3], near)
    assert set(np.round(took[stage == 1] / far, 6)) == {round(near / far, 6), 1.0}
    with pytest.raises(ValueError, match="p2p_rank_s"):
        StageCosts(
            forward_s=(1.0,),
            backward_s=(1.0,),
            backward_input_s=(1.0,),
            backward_weight_s=(0.0,),
            p2p_rank_s=((0.0, 1.0),),
        )


@pytest.mark.parametrize(("recipe", "fp8_bytes"), [("current", 1.0), ("mxfp8", 1 + 1 / 32)])
def test_fp8_runs_gather_their_sequence_parallel_inputs_in_fp8(recipe: str, fp8_bytes: float) -> None:
    """Llama 3.1 70B, tp8 with sequence parallelism, FP8: the all-gather of each all-gather + reduce-scatter
    pair moves FP8 values (1 byte, plus MXFP8's scale per 32), the reduce-scatter 16-bit ones; BF16 runs and
    tensor parallelism without sequence parallelism (all-reduces) stay 16-bit."""
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100")
    tokens, h = 8192.0, model.hidden_size
    kw = {"seq_len": 8192, "tp": 8, "cp": 1, "ep": 1, "recompute": 0, "tp_stride": 1, "cp_stride": 1}

    def tp_forward(dtype: str, sp: bool, gather: bool) -> float:
        cal = _cal(tp_comm_overlap=False, fp8_recipe=recipe, fp8_tp_all_gather=gather)
        lc = layer_costs(
            model, cluster, cal, dtype=dtype, tokens=tokens, sequence_parallel=sp, moe_layer=False, **kw
        )
        return float(lc.tp_f_s)

    eff = _cal().framework.collective_efficiency_frac
    mixed = 2 * all_reduce_s(cluster, tokens * h * (fp8_bytes + 2.0) / 2, 8, 1, eff)
    assert tp_forward("fp8", True, True) == pytest.approx(mixed)
    assert tp_forward("fp8", True, False) == pytest.approx(
        2 * all_reduce_s(cluster, tokens * h * 2.0, 8, 1, eff)
    )
    assert tp_forward("fp8", False, True) == tp_forward("fp8", False, False)
    assert tp_forward("bf16", True, True) == tp_forward("bf16", True, False)
    # bandwidth-bound at 8K tokens x 8192: close to (1 + 2) / 4 of the 16-bit traffic
    assert tp_forward("fp8", True, True) / tp_forward("fp8", True, False) == pytest.approx(
        (fp8_bytes + 2) / 4, rel=0.05
    )
