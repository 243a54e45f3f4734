"""Megatron-Bridge 25.11 recipe mechanisms (issues 13 and 14): per-device recipes of a framework profile, CUDA
graph scopes cutting host launches, the Hybrid-EP dispatcher, the token copies of Megatron-Core's MoE path
(expert sort, FP8 padding), Transformer Engine's multi-stream grouped GEMM, recomputed modules, and
sliding-window attention.

Expected values are closed forms written out here (kernel counts by part, passes x bytes, the mean keys a
query attends to by brute force), never values read back from the cost model's own output.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from workbench.cost.flops import Op, attended_keys_frac, attention_ops, cheap_recompute_ops, mlp_ops
from workbench.cost.memory import activation_parts
from workbench.cost.moe import (
    MOE_LAYER_KERNEL_PARTS,
    MOE_LAYER_KERNELS,
    dispatch_passes,
    expert_launches,
    moe_host_s,
    moe_layer_launches,
    on_device,
    ranks_reached,
)
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_device, load_model, preset_names
from workbench.presets.frameworks import load_framework
from workbench.presets.hf_config import model_from_hf_config
from workbench.specs.framework import FrameworkProfile

MCORE = load_framework("megatron-core-2024")


def _profile(**changes: Any) -> FrameworkProfile:
    return dataclasses.replace(MCORE, **{"device_recipes": {}, "model_recipes": {}, **changes})


def test_profile_applies_the_recipes_of_gb200_and_gb300_only() -> None:
    for device in ("gb200", "gb300"):
        assert device in preset_names("device")
        fw = MCORE.for_device(device)
        assert fw.moe_dispatcher == "hybridep"
        assert fw.cuda_graph_scopes == ("moe_router", "moe_preprocess")
    assert MCORE.for_device("b200-sxm-180gb") is MCORE
    assert MCORE.for_device("h100-sxm5-80gb").moe_dispatcher == "alltoall"
    assert "device_recipes" in MCORE.sources


@pytest.mark.parametrize(
    ("recipes", "match"),
    [
        ({"gb200": {"fp8_matmul_scale": 0.5}}, "unknown field"),
        ({"gb200": {"cuda_graph_scopes": ["mlp_everything"]}}, "cuda_graph_scopes"),
        ({"gb200": {"cuda_graph_scopes": ["moe_preprocess"]}}, "needs moe_router"),
        ({"gb200": {"moe_dispatcher": "nccl"}}, "moe_dispatcher"),
        ({"gb200": "hybridep"}, "must be a table"),
    ],
)
def test_bad_device_recipes_are_refused_with_the_device_and_field(recipes: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        dataclasses.replace(MCORE, device_recipes=recipes)
    assert "megatron-core-2024" in str(err.value)


def test_attn_graph_with_mla_up_proj_recompute_is_refused() -> None:
    with pytest.raises(ValueError, match="mla_up_proj"):
        _profile(cuda_graph_scopes=("attn", "moe_router"), recompute_modules=("mla_up_proj",))


def test_graphed_parts_launch_once_per_contiguous_graph() -> None:
    parts = MOE_LAYER_KERNEL_PARTS
    assert MOE_LAYER_KERNELS == 60 == sum(parts.values())
    assert moe_layer_launches(_profile(moe_router_fusion=False)) == 60
    # router + preprocess are adjacent: one graph (fused or not, the router then launches nothing of its own)
    both = _profile(moe_dispatcher="hybridep", cuda_graph_scopes=("moe_router", "moe_preprocess"))
    assert moe_layer_launches(both) == 60 - 12 - 6 + 1
    # attn, router and preprocess are one run in layer order: one graph
    three = _profile(moe_router_fusion=False, cuda_graph_scopes=("attn", "moe_router", "moe_preprocess"))
    assert moe_layer_launches(three) == 60 - 20 - 12 - 6 + 1


def test_host_time_of_qwen3_30b_on_gb200_follows_its_launches() -> None:
    """ep8, FP8 with current scaling (Transformer Engine 2.9): 16 local experts, each with 2 GEMMs forward and
    4 backward, and an amax, a scale and a cast kernel per grouped GEMM input (forward) and output gradient
    (backward); the eager part of the layer launches twice as many kernels backward as forward. The Qwen3
    recipes fuse the router: 10 launches where the rounded unfused count is 12 (test_fused_router_...)."""
    model = load_model("qwen3-30b-a3b")
    cal = dataclasses.replace(load_calibration("default"), framework=_profile(host_s_per_kernel=1e-5))
    gb = dataclasses.replace(cal, framework=cal.framework.for_device("gb200"))
    gb = dataclasses.replace(
        gb,
        framework=dataclasses.replace(
            gb.framework, moe_dispatcher="hybridep", cuda_graph_scopes=("moe_router",)
        ),
    )
    fwd, bwd = moe_host_s(model, cal, dtype="fp8", ep=8)
    qk = 2  # Qwen3's q_layernorm and k_layernorm, eager where the attention block is not graphed
    assert (float(fwd), float(bwd)) == pytest.approx(
        ((60 - 12 + 10 + qk + 8 * 16) * 1e-5, (2 * (60 - 12 + 10 + qk) + 10 * 16) * 1e-5)
    )
    fwd, bwd = moe_host_s(model, gb, dtype="fp8", ep=8)
    eager = 60 - 12 + 1 + qk
    assert (float(fwd), float(bwd)) == pytest.approx(((eager + 8 * 16) * 1e-5, (2 * eager + 10 * 16) * 1e-5))


@pytest.mark.parametrize(
    ("dtype", "recipe", "fwd", "bwd"),
    [
        ("bf16", "current", 2 * 16, 4 * 16),  # no quantisation: the GEMMs only
        ("fp8", "mxfp8", 4 * 16, 6 * 16),  # one cast kernel per split, block scales written by it
        ("fp8", "blockwise", 4 * 16, 6 * 16),
        ("fp8", "delayed", 2 * 16 + 2, 4 * 16 + 2),  # one fused multi-tensor cast per grouped GEMM
        ("fp8", "current", 8 * 16, 10 * 16),  # amax, scale and cast per split
    ],
)
def test_expert_launches_follow_the_fp8_recipe(dtype: str, recipe: str, fwd: int, bwd: int) -> None:
    model = load_model("qwen3-30b-a3b")  # 128 experts, no expert bias
    fw = _profile(fp8_recipe=recipe)
    got = expert_launches(fw, model, dtype=dtype, local=128 / 8)
    assert (float(got[0]), float(got[1])) == (fwd, bwd)
    # GPT-OSS's expert bias, applied unfused: its product and sum, and their gradients
    oss = load_model("gpt-oss-120b")
    assert oss.expert_bias
    biased = expert_launches(
        _profile(fp8_recipe=recipe, unfused_model_ops=("expert_bias",)), oss, dtype=dtype, local=16
    )
    assert (float(biased[0]), float(biased[1])) == (fwd + 2 * 16, bwd + 4 * 16)


def test_ranks_reached_is_the_expected_distinct_ranks_of_k_uniform_picks() -> None:
    model = load_model("qwen3-30b-a3b")  # top-8
    assert float(ranks_reached(model, 8)) == pytest.approx(8 * (1 - (7 / 8) ** 8))
    assert float(ranks_reached(model, 1)) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    picks = rng.integers(0, 64, size=(20000, 8))  # rank of each of 8 independent uniform picks over 64 ranks
    distinct = np.mean([len(set(row)) for row in picks])
    assert float(ranks_reached(model, 64)) == pytest.approx(distinct, rel=0.01)


def test_token_copy_passes_by_dispatcher_and_dtype() -> None:
    model = load_model("qwen3-30b-a3b")  # 128 experts
    fw = _profile()
    assert (fw.moe_dispatch_passes, fw.moe_expert_sort_passes, fw.moe_fp8_padding_passes) == (4.0, 4.0, 4.0)
    # 16 local experts: permute + sort + FP8 padding
    assert float(dispatch_passes(fw, model, ep=8, dtype="fp8", dropless=True)) == 12.0
    # one expert per rank: nothing to sort; BF16 or drop-and-pad: nothing to pad
    assert float(dispatch_passes(fw, model, ep=128, dtype="fp8", dropless=True)) == 8.0
    assert float(dispatch_passes(fw, model, ep=8, dtype="bf16", dropless=True)) == 8.0
    assert float(dispatch_passes(fw, model, ep=8, dtype="fp8", dropless=False)) == 8.0
    # Hybrid-EP permutes the received tokens into expert order, padded: no sort, no padding copies
    hybrid = _profile(moe_dispatcher="hybridep")
    assert float(dispatch_passes(hybrid, model, ep=8, dtype="fp8", dropless=True)) == 4.0
    ops = {
        o.name: o
        for o in mlp_ops(
            model, tokens=4096.0, tp=1, ep=8, act_bytes=2.0, moe_layer=True, dispatch_passes=12.0
        )
    }
    assert ops["moe_dispatch"].bytes == pytest.approx(12.0 * 2.0 * 4096 * 8 * model.hidden_size)


def test_expert_gemms_are_read_at_their_own_sizes() -> None:
    """The up projection (gate fused: h x 2f) and the down projection (f x h) are two ops, each read on the curve
    at one GEMM's FLOPs: one expert's tokens when GEMMs are issued per expert (also on several streams, which
    the H200 probe measured to gain nothing from 1,024 tokens per expert up), all routed tokens for one grouped
    kernel. Their FLOPs and bytes add up to the whole block's."""
    model = load_model("qwen3-30b-a3b")
    h, f, k = model.hidden_size, model.moe_ffn_hidden_size, model.experts_per_token
    kw: dict[str, Any] = {"tokens": 4096.0, "tp": 1, "act_bytes": 2.0, "moe_layer": True}

    def experts(**more: Any) -> tuple[Op, Op]:
        ops = {o.name: o for o in mlp_ops(model, **kw, **more)}
        return ops["experts"], ops["experts_down"]

    routed = 4096 * k
    per_expert = routed * 8 / 128  # ep 8: balanced tokens per expert
    up, down = experts(ep=8)  # one grouped kernel
    assert (float(up.gemm_flop), float(down.gemm_flop)) == pytest.approx(
        (2 * routed * h * 2 * f, 2 * routed * f * h)
    )
    for more in ({"gemm_streams": 4}, {"grouped_gemm": False}):
        up, down = experts(ep=8, **more)
        assert float(up.gemm_flop) == pytest.approx(2 * per_expert * h * 2 * f)
        assert float(down.gemm_flop) == pytest.approx(2 * per_expert * f * h)
    up, down = experts(ep=8)
    assert float(up.flop + down.flop) == pytest.approx(2 * routed * 3 * h * f)
    local = 128 / 8
    assert float(up.bytes + down.bytes) == pytest.approx(2.0 * (routed * (2 * h + 3 * f) + 3 * h * f * local))


def test_recompute_modules_redo_their_forward() -> None:
    qwen, v3 = load_model("qwen3-30b-a3b"), load_model("deepseek-v3")
    h, f, k = qwen.hidden_size, qwen.moe_ffn_hidden_size, qwen.experts_per_token
    kw: dict[str, Any] = {"tokens": 1000.0, "tp": 1, "act_bytes": 2.0}
    (norms,) = cheap_recompute_ops(qwen, moe_layer=True, modules=("layernorm",), **kw)
    assert norms.bytes == pytest.approx(2.0 * 2 * 1000 * 2 * h)  # two norms: read and write h
    (act,) = cheap_recompute_ops(qwen, moe_layer=True, modules=("moe_act",), **kw)
    assert act.bytes == pytest.approx(2.0 * 3 * 1000 * k * f)  # gate, up in; product out
    assert cheap_recompute_ops(qwen, moe_layer=False, modules=("moe_act",), **kw) == []
    up = cheap_recompute_ops(v3, moe_layer=True, modules=("mla_up_proj",), **kw)
    a, r_q, r_kv = v3.num_attention_heads, v3.q_lora_rank, v3.kv_lora_rank
    up_w = r_q * a * v3.qk_head_dim + r_kv * a * (v3.qk_nope_head_dim + v3.value_head_dim)
    assert [o.name for o in up] == ["up_proj_recompute"] and up[0].flop == pytest.approx(2.0 * 1000 * up_w)
    assert cheap_recompute_ops(qwen, moe_layer=True, modules=("mla_up_proj",), **kw) == []


def test_recompute_modules_leave_the_saved_activations() -> None:
    qwen = load_model("qwen3-30b-a3b")
    h, f, k = qwen.hidden_size, qwen.moe_ffn_hidden_size, qwen.experts_per_token
    kw: dict[str, Any] = {"flash": True, "dropout": False, "moe_layer": True}
    plain = activation_parts(qwen, **kw)
    norms = activation_parts(qwen, recompute_modules=("layernorm",), **kw)
    act = activation_parts(qwen, recompute_modules=("moe_act",), **kw)
    assert plain.outside_tp - norms.outside_tp == pytest.approx(2.0 * 2 * h)  # the two norm outputs
    assert plain.inside_tp - act.inside_tp == pytest.approx(2.0 * k * (5 - 2) * f)  # gated: 5f kept -> 2f


def test_attended_keys_of_a_window_match_brute_force() -> None:
    def brute(s: int, w: int) -> float:  # query i sees min(i + 1, w) keys, over the full s x s matrix
        return float(np.minimum(np.arange(1, s + 1), w).sum()) / s**2

    dense = load_model("llama-3.1-8b")
    assert float(attended_keys_frac(dense, 4096)) == 0.5
    oss = load_model("gpt-oss-120b")  # banded attention (128 keys) on 18 of its 36 layers
    want = (18 * brute(4096, 4096) + 18 * brute(4096, 128)) / 36
    assert float(attended_keys_frac(oss, 4096)) == pytest.approx(want, rel=2e-3)
    assert float(attended_keys_frac(oss, 100)) == pytest.approx(0.5)  # a window longer than the sequence
    core = {
        o.name: o for o in attention_ops(oss, tokens=4096.0, seq_len=4096, tp=1, act_bytes=2.0, flash=True)
    }
    full = 2.0 * 4096 * 4096 * 64 * (64 + 64)
    # the full layers and the window layers as two ops (each kernel read at its own rate), summing to the band
    assert core["attention_core"].flop == pytest.approx(18 * brute(4096, 4096) / 36 * full, rel=2e-3)
    assert core["attention_window"].flop == pytest.approx(18 * brute(4096, 128) / 36 * full, rel=2e-3)
    assert core["attention_core"].flop + core["attention_window"].flop == pytest.approx(want * full, rel=2e-3)


def test_sliding_window_from_hf_configs() -> None:
    assert (load_model("mistral-7b").sliding_window, load_model("mistral-7b").num_sliding_window_layers) == (
        4096,
        32,
    )
    base = {
        "architectures": ["Qwen2ForCausalLM"],
        "num_hidden_layers": 28,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "intermediate_size": 2816,
        "vocab_size": 32000,
        "sliding_window": 4096,
        "max_window_layers": 20,
    }
    assert model_from_hf_config({**base, "use_sliding_window": False}).sliding_window == 0
    on = model_from_hf_config({**base, "use_sliding_window": True})
    assert (on.sliding_window, on.num_sliding_window_layers) == (4096, 28 - 20)
    llama = {**base, "architectures": ["LlamaForCausalLM"], "sliding_window": 128}
    llama["layer_types"] = ["sliding_attention", "full_attention"] * 14
    assert model_from_hf_config(llama).num_sliding_window_layers == 14
    with pytest.raises(ValueError, match="sliding_window"):
        model_from_hf_config({**llama, "sliding_window": "128"})
    with pytest.raises(ValueError, match="layer_types"):
        model_from_hf_config({**llama, "layer_types": ["sliding_attention"]})


@pytest.mark.parametrize(("window", "layers"), [(128, 0), (0, 4), (128, 33), (-1, 1)])
def test_inconsistent_windows_are_refused(window: int, layers: int) -> None:
    with pytest.raises(ValueError, match="sliding_window"):
        dataclasses.replace(load_model("mistral-7b"), sliding_window=window, num_sliding_window_layers=layers)


def test_model_recipes_lay_the_model_and_gpu_recipe_over_the_device_one() -> None:
    """Megatron-Bridge 25.11: GPT-OSS keeps the alltoall dispatcher on GB200 without CUDA graphs and recomputes
    nothing (its recipes name recompute_modules without recompute_granularity 'selective', which Megatron-Core
    0.15 needs to run them), while the Qwen3 recipes on GB200 take Hybrid-EP with graphs."""
    oss = MCORE.for_device("gb200", "GPT OSS 120B")
    assert (oss.moe_dispatcher, oss.cuda_graph_scopes) == ("alltoall", ())
    assert oss.recompute_modules == ()
    for gpu in ("b200-sxm-180gb", "h100-sxm5-80gb"):
        assert MCORE.for_device(gpu, "gpt-oss-120b").recompute_modules == ()
    assert MCORE.for_device("gb200", "gpt-oss-120b") == oss  # names compare on letters and digits
    qwen = MCORE.for_device("gb200", "Qwen3_30B_a3B")
    assert (qwen.moe_dispatcher, qwen.recompute_modules) == ("hybridep", ())
    assert qwen.cuda_graph_scopes == ("attn", "moe_router", "moe_preprocess")
    on_b200 = MCORE.for_device("b200-sxm-180gb", "qwen3-30b-a3b")
    assert (on_b200.moe_dispatcher, on_b200.cuda_graph_scopes) == (
        "alltoall",
        ("moe_router", "moe_preprocess"),
    )
    on_b200 = MCORE.for_device("b200-sxm-180gb", "qwen3-235b-a22b")  # moe_a2a_overlap=True, nothing else
    assert on_b200 == dataclasses.replace(MCORE, device_recipes={}, model_recipes={}, ep_comm_overlap=True)
    assert MCORE.for_device("gb300", "gpt-oss-120b").cuda_graph_scopes == (
        "attn",
        "moe_router",
        "moe_preprocess",
    )
    assert MCORE.for_device("b200-sxm-180gb", "DeepSeekV3").recompute_modules == ("mla_up_proj",)
    assert MCORE.for_device("b200-sxm-180gb", "llama-3.1-8b") is MCORE
    assert MCORE.for_device("gb200") == MCORE.for_device("gb200", "llama-3.1-8b")
    assert "model_recipes" in MCORE.sources
    # the longest matching key wins, whatever the order of the table
    fw = dataclasses.replace(
        _profile(),
        model_recipes={
            "gpt-oss": {"gb200": {"recompute_modules": ["moe_act"]}},
            "gpt": {"gb200": {"recompute_modules": ["layernorm"]}},
        },
    )
    assert fw.for_device("gb200", "GPT OSS 20B").recompute_modules == ("moe_act",)
    assert fw.for_device("gb200", "gpt-2").recompute_modules == ("layernorm",)
    assert fw.for_device("h100-sxm5-80gb", "gpt-oss-120b") is fw


def test_host_launches_of_gpt_oss_on_gb200_follow_its_own_recipe() -> None:
    """No CUDA graphs: all 60 eager kernels of the layer, less 2 for the fused router (10 launches where the
    rounded unfused count is 12), and the unfused model ops' 31 (YaRN RoPE 2 x 12, the
    attention output bias's add 1, the GLU clamp 4, the expert bias's concatenation and cast 2; twice that
    backward); ep64 leaves 2 local experts,
    BF16: 2 GEMMs forward and 4 backward per expert, plus the unfused expert bias (2 forward, 4 backward per
    expert); its recipe recomputes nothing (no recompute_granularity 'selective'), so the backward relaunches
    no recomputed kernel."""
    model = load_model("gpt-oss-120b")
    cal = load_calibration("default")
    cal = dataclasses.replace(cal, framework=dataclasses.replace(MCORE, host_s_per_kernel=1e-5))
    resolved = on_device(cal, load_device("gb200"), model)
    fwd, bwd = moe_host_s(model, resolved, dtype="bf16", ep=64)
    assert (float(fwd), float(bwd)) == pytest.approx(
        ((58 + 31 + 2 * 2 + 2 * 2) * 1e-5, (2 * (58 + 31) + 4 * 2 + 4 * 2) * 1e-5)
    )
    qwen = on_device(cal, load_device("gb200"), load_model("qwen3-30b-a3b"))
    graphed_once = 60 - 20 - 12 - 6 + 1  # its attn, router and preprocess replay as one graph
    assert moe_layer_launches(qwen.framework) == graphed_once


@pytest.mark.parametrize(
    ("recipes", "match"),
    [
        ({"gpt-oss": {"gb200": {"fp8_matmul_scale": 0.5}}}, "unknown field"),
        ({"gpt-oss": {"gb200": "alltoall"}}, "must be a table"),
        ({"gpt-oss": ["gb200"]}, "model_recipes.gpt-oss must be a table"),
        ({"--": {"gb200": {"recompute_modules": ["moe_act"]}}}, "no letter or digit"),
        ({"gpt-oss": {"gb200": {"cuda_graph_scopes": ["everything"]}}}, r"gpt-oss\.gb200: cuda_graph_scopes"),
    ],
)
def test_bad_model_recipes_are_refused_with_the_model_device_and_field(recipes: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        dataclasses.replace(MCORE, model_recipes=recipes)
    assert str(err.value).count("megatron-core-2024") == 1  # the profile named once, then where in it


def test_a_model_recipe_is_checked_laid_over_the_device_recipe() -> None:
    """Alone, recomputing mla_up_proj is fine; over a device entry that graphs attn, Megatron-Core refuses it."""
    model_recipes = {"deepseek-v3": {"gb200": {"recompute_modules": ["mla_up_proj"]}}}
    assert _profile(model_recipes=model_recipes).for_device("gb200", "deepseek-v3").recompute_modules == (
        "mla_up_proj",
    )
    with pytest.raises(ValueError, match="model_recipes.deepseek-v3.gb200: .*mla_up_proj"):
        _profile(device_recipes={"gb200": {"cuda_graph_scopes": ["attn"]}}, model_recipes=model_recipes)


def test_an_estimate_names_the_recipe_it_priced() -> None:
    """The estimate says which per-GPU and per-model choices of the stack's recipes it applied."""
    from workbench.estimate.analytic import estimate_plan
    from workbench.presets.catalog import load_cluster
    from workbench.specs.plan import ParallelPlan, Workload

    cal = load_calibration("default").with_framework("megatron-core-2024")
    workload = Workload(seq_len=4096, global_batch_size=512)
    plan = ParallelPlan(dp=64, ep=64, micro_batch_size=4, zero_stage=1)
    est = estimate_plan(
        load_model("gpt-oss-120b"), load_cluster("gb200-nvl72", num_nodes=16), workload, plan, calibration=cal
    )
    want = (
        "recipe of megatron-core-2024 for gpt-oss-120b on gb200: moe_dispatcher alltoall; cuda_graph_scopes none; "
        "tp_comm_overlap False"
    )
    assert want in est.notes
    dense = estimate_plan(
        load_model("llama-3.1-8b"),
        load_cluster("dgx-h100", num_nodes=1),
        workload,
        ParallelPlan(dp=8),
        calibration=cal,
    )
    assert not [n for n in dense.notes if n.startswith("recipe")]


def test_a_full_iteration_graph_takes_the_host_out_of_every_layer() -> None:
    """Megatron-Core cuda_graph_impl='local' with cuda_graph_scope='full_iteration' replays the whole step as one
    graph: the per-layer host overhead and the MoE launches drop out, nothing else changes."""
    from workbench.cost.layer import layer_costs
    from workbench.presets.catalog import load_cluster

    overhead = 3e-4
    eager = _profile(host_overhead_per_layer_s=overhead, host_s_per_kernel=2e-5)
    graphed = dataclasses.replace(eager, cuda_graph_scopes=("full_iteration",))
    cal = load_calibration("default")
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=1)
    kw: dict[str, Any] = {
        "dtype": "bf16",
        "tokens": 8192.0,
        "seq_len": 8192,
        "tp": 1,
        "cp": 1,
        "ep": 1,
        "sequence_parallel": False,
        "recompute": 0,
        "tp_stride": 1,
        "cp_stride": 1,
        "moe_layer": False,
    }
    slow = layer_costs(model, cluster, dataclasses.replace(cal, framework=eager), **kw)
    fast = layer_costs(model, cluster, dataclasses.replace(cal, framework=graphed), **kw)
    assert float(slow[0] - fast[0]) == pytest.approx(overhead)  # forward
    assert float(slow[1] - fast[1]) == pytest.approx(overhead)  # backward (input gradients)
    assert float(slow[2]) == pytest.approx(float(fast[2]))  # weight gradients: no overhead either way
    qwen = load_model("qwen3-30b-a3b")
    assert moe_layer_launches(graphed) == 0.0
    fwd, bwd = moe_host_s(qwen, dataclasses.replace(cal, framework=graphed), dtype="fp8", ep=8)
    assert (float(fwd), float(bwd)) == (0.0, 0.0)
    assert MCORE.for_device("gb200", "LLAMA3_8B").cuda_graph_scopes == ("full_iteration",)
    assert MCORE.for_device("h100-sxm5-80gb", "LLAMA3_8B") is MCORE


def test_full_iteration_goes_alone() -> None:
    with pytest.raises(ValueError, match="full_iteration captures the whole step"):
        _profile(cuda_graph_scopes=("full_iteration", "attn"))
