"""Megatron-Core's combined 1F1B EP overlap (issue 48): ``overlap_moe_expert_parallel_comm`` with
``delay_wgrad_compute``, which Megatron-Bridge 25.11 turns on for some MoE recipes (``moe_a2a_overlap=True``,
scripts/performance/utils/helpers.py ``set_moe_a2a_overlap_overrides``).

The pair's period is checked against a hand-worked layer and against an independent two-stream list
scheduler written here (each op starts when its stream is free and its inputs are done, in the program
order of ``TransformerLayerSchedulePlan.run``), never against the cost model's own output.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from workbench.cost.overlap import combined_pair_s
from workbench.presets.frameworks import load_framework

MCORE = load_framework("megatron-core-2024")

# program order of TransformerLayerSchedulePlan.run (Megatron-Core 0.15, delay_wgrad_compute):
# (name, stream, inputs that must be done first)
PAIR_PROGRAM = [
    ("combine_bwd", "comm", []),
    ("attn_fwd", "comp", []),
    ("mlp_bwd", "comp", ["combine_bwd"]),
    ("dispatch_fwd", "comm", ["attn_fwd"]),
    ("mlp_bwd_dw", "comp", ["mlp_bwd"]),
    ("dispatch_bwd", "comm", ["mlp_bwd"]),
    ("mlp_fwd", "comp", ["dispatch_fwd"]),
    ("combine_fwd", "comm", ["mlp_fwd"]),
    ("attn_bwd", "comp", ["dispatch_bwd"]),
]


def _simulate(times: dict[str, float]) -> float:
    """End of the last op when each stream runs its ops in program order."""
    free = {"comm": 0.0, "comp": 0.0}
    end: dict[str, float] = {}
    for name, stream, needs in PAIR_PROGRAM:
        start = max([free[stream], *(end[n] for n in needs)])
        end[name] = free[stream] = start + times[name]
    return max(end.values())


def _pair(t: dict[str, float]) -> float:
    compute = (t["attn_fwd"], t["mlp_fwd"], t["attn_bwd"], t["mlp_bwd"], t["mlp_bwd_dw"])
    comm = (t["dispatch_fwd"], t["combine_fwd"], t["dispatch_bwd"], t["combine_bwd"])
    return float(combined_pair_s(compute, comm))


def test_hand_worked_layer() -> None:
    """A_f 2, M_b 3, W_b 1, M_f 2, A_b 3 (compute 11); C_b 1, D_f 5, D_b 1, C_f 1. M_b and D_f start at 2;
    D_f ends at 7, M_b at 5, W_b at 6; D_b runs 7-8; M_f waits for D_f: 7-9; A_b 9-12, C_f 9-10: 12, so 1 s
    of the 8 s of traffic stays exposed, where hiding the total behind the total compute would expose none."""
    t = dict(attn_fwd=2, mlp_bwd=3, mlp_bwd_dw=1, mlp_fwd=2, attn_bwd=3)
    t |= dict(combine_bwd=1, dispatch_fwd=5, dispatch_bwd=1, combine_fwd=1)
    assert _pair(t) == pytest.approx(12.0)
    assert _simulate(t) == pytest.approx(12.0)


def test_pair_matches_a_two_stream_schedule() -> None:
    rng = np.random.default_rng(48)
    names = [n for n, _, _ in PAIR_PROGRAM]
    for _ in range(400):
        kept = rng.choice([0.0, 1.0], len(names), p=[0.1, 0.9])  # some ops take no time
        t = dict(zip(names, rng.exponential(1.0, len(names)) * kept, strict=True))
        assert _pair(t) == pytest.approx(_simulate(t))


@pytest.mark.parametrize(("comm_scale", "compute_scale"), list(itertools.product([0.0, 1.0], [0.0, 1.0])))
def test_pair_lies_between_compute_and_serial(comm_scale: float, compute_scale: float) -> None:
    compute = tuple(compute_scale * x for x in (1.0, 2.0, 1.5, 2.5, 1.0))
    comm = tuple(comm_scale * x for x in (0.7, 0.7, 1.2, 1.2))
    t = float(combined_pair_s(compute, comm))
    assert sum(compute) - 1e-12 <= t <= sum(compute) + sum(comm) + 1e-12
    if comm_scale == 0.0 or compute_scale == 0.0:
        assert t == pytest.approx(sum(compute) + sum(comm))  # nothing to hide behind, or nothing to hide


def test_recipes_that_set_moe_a2a_overlap_encode_it() -> None:
    """scripts/performance/configs/{qwen3,deepseek}/workload_base_configs.py at Megatron-Bridge v0.2.0:
    moe_a2a_overlap=True for Qwen3-235B-A22B on B200 and H100, Qwen3-30B-A3B on H100 and DeepSeek-V3 on H100;
    False (explicitly) for DeepSeek-V3 on GB300, GB200 and B200; GPT-OSS never."""
    on = [
        ("b200-sxm-180gb", "qwen3-235b-a22b"),
        ("h100-sxm5-80gb", "Qwen3_235B_a22B"),
        ("h100-sxm5-80gb", "qwen3-30b-a3b"),
        ("h100-sxm5-80gb", "DeepSeekV3"),
    ]
    off = [
        ("gb300", "DeepSeekV3"),
        ("gb200", "DeepSeekV3"),
        ("b200-sxm-180gb", "DeepSeekV3"),
        ("b200-sxm-180gb", "qwen3-30b-a3b"),
        ("gb200", "qwen3-235b-a22b"),
        ("h100-sxm5-80gb", "gpt-oss-120b"),
    ]
    assert all(MCORE.for_device(gpu, name).ep_comm_overlap for gpu, name in on)
    assert not any(MCORE.for_device(gpu, name).ep_comm_overlap for gpu, name in off)
    assert not MCORE.ep_comm_overlap


def test_other_per_recipe_overlap_choices() -> None:
    """DeepSeek-V3 on H100 turns the gradient-reduce overlap off (deepseek_llm_pretrain.py
    deepseek_v3_h100_config: cfg.comm_overlap.overlap_grad_reduce = False); Qwen3-235B-A22B on H100 builds its
    recipe with CommOverlapConfig(tp_comm_overlap=False) (qwen3_llm_pretrain.py qwen3_235b_a22b_h100_config)."""
    assert not MCORE.for_device("h100-sxm5-80gb", "DeepSeekV3").overlap_grad_reduce
    assert MCORE.for_device("gb200", "DeepSeekV3").overlap_grad_reduce
    assert not MCORE.for_device("h100-sxm5-80gb", "qwen3-235b-a22b").tp_comm_overlap
    assert MCORE.for_device("h100-sxm5-80gb", "qwen3-30b-a3b").tp_comm_overlap
    assert MCORE.for_device(
        "gb300", "qwen3-235b-a22b"
    ).tp_comm_overlap  # CommOverlapConfig(tp_comm_overlap=True)
    # DeepSeek-V3 and GPT-OSS pass no comm_overlap_config: recipes/deepseek/deepseek_v3.py falls back to
    # CommOverlapConfig(tp_comm_overlap=False), recipes/gpt_oss/gpt_oss.py leaves comm_overlap None
    for gpu in ("gb300", "gb200", "b200-sxm-180gb", "h100-sxm5-80gb"):
        assert not MCORE.for_device(gpu, "DeepSeekV3").tp_comm_overlap
        assert not MCORE.for_device(gpu, "gpt-oss-120b").tp_comm_overlap


def test_a_recipes_step_level_field_reaches_the_step_cost() -> None:
    """overlap_grad_reduce is read by the step's data-parallel cost (workbench.cost.update), not by a layer:
    the DeepSeek-V3 H100 recipe's False exposes the gradient reduction that the profile's default hides."""
    import dataclasses

    from workbench.estimate.analytic import estimate_plan
    from workbench.presets.calibration import load_calibration
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.specs.plan import ParallelPlan, Workload

    model = load_model("deepseek-v3")
    cluster = load_cluster("dgx-h100", num_nodes=64)
    workload = Workload(seq_len=4096, global_batch_size=4096)
    plan = ParallelPlan(dp=64, pp=8, ep=64, micro_batch_size=1, zero_stage=1)
    cal = load_calibration("default").with_framework("megatron-core-2024")
    recipe = cal.framework.model_recipes["deepseek-v3"]["h100-sxm5-80gb"]
    hidden = dict(cal.framework.model_recipes, **{"deepseek-v3": {"h100-sxm5-80gb": {**recipe}}})
    hidden["deepseek-v3"]["h100-sxm5-80gb"]["overlap_grad_reduce"] = True
    on = dataclasses.replace(cal, framework=dataclasses.replace(cal.framework, model_recipes=hidden))
    off_est = estimate_plan(model, cluster, workload, plan, calibration=cal)
    on_est = estimate_plan(model, cluster, workload, plan, calibration=on)
    assert off_est.breakdown.exposed_dp_comm_s > on_est.breakdown.exposed_dp_comm_s
