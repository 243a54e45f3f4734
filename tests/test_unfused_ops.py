"""Model features a stack runs as unfused element-wise kernels (YaRN RoPE, the GLU clamp, the experts' output
bias): their HBM passes counted op by op on PyTorch's own kernels, and how they enter a layer's cost."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from workbench.cost.flops import UNFUSED_MODEL_OP_PASSES, layer_ops, op_times, unfused_model_ops
from workbench.cost.layer import device_rates, layer_costs
from workbench.cost.layer_comm import compute_slowdown
from workbench.cost.memory import activation_parts
from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.presets.hf_config import model_from_hf_config
from workbench.specs.framework import FrameworkProfile
from workbench.specs.plan import ParallelPlan, Workload


class _BytesMoved(TorchDispatchMode):
    """Sums the bytes every non-view ATen op reads and writes (its tensor inputs and outputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            tensors = [x for x in tree_flatten((args, kwargs, out))[0] if isinstance(x, torch.Tensor)]
            self.total += sum(x.numel() * x.element_size() for x in tensors)
        return out


def _passes(
    forward: Callable[[list[torch.Tensor]], torch.Tensor], inputs: list[torch.Tensor], values: int
) -> tuple[float, float]:
    """(forward, backward) bytes moved per 2-byte value of the op's tensor."""
    with _BytesMoved() as fwd:
        out = forward(inputs)
    grad = torch.randn_like(out)
    with _BytesMoved() as bwd:
        torch.autograd.grad(out, [x for x in inputs if x.requires_grad], grad)
    return fwd.total / (2 * values), bwd.total / (2 * values)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def test_pass_counts_match_the_aten_ops_of_the_eager_code() -> None:
    """The three eager sequences written out as Megatron-Core 0.15 runs them (bf16), their bytes counted at the
    ATen level: the table's counts are what those kernels move (within the small broadcast tables)."""
    torch.manual_seed(0)
    s, heads, d = 256, 72, 64  # GPT-OSS: 64 query + 8 key heads of 64
    freqs = torch.randn(s, 1, 1, d)
    cos_ = (torch.cos(freqs) * 1.35).to(torch.bfloat16)  # YaRN's mscale != 1 is what keeps it unfused
    sin_ = (torch.sin(freqs) * 1.35).to(torch.bfloat16)

    def rope(x: list[torch.Tensor]) -> torch.Tensor:
        t, t_pass = x[0][..., :d], x[0][..., d:]
        return torch.cat(((t * cos_) + (_rotate_half(t) * sin_), t_pass), dim=-1)

    q = torch.randn(s, 1, heads, d, dtype=torch.bfloat16, requires_grad=True)
    got = _passes(rope, [q], q.numel())
    assert got == pytest.approx(UNFUSED_MODEL_OP_PASSES["yarn_rope"], rel=0.02)

    n, f = 2048, 512

    def clamp(x: list[torch.Tensor]) -> torch.Tensor:
        gate, linear = x[0].chunk(2, -1)
        return torch.cat((gate.clamp(min=None, max=7.0), linear.clamp(min=-7.0, max=7.0)), -1)

    fc1 = torch.randn(n, 2 * f, dtype=torch.bfloat16, requires_grad=True)
    assert _passes(clamp, [fc1], n * f) == pytest.approx(UNFUSED_MODEL_OP_PASSES["glu_clamp"], rel=0.02)

    h, experts = 512, 4
    split = [n // experts] * experts

    def bias(x: list[torch.Tensor]) -> torch.Tensor:
        out, probs, biases = x[0], x[1], x[2:]
        parts = zip(torch.split(out, split), biases, torch.split(probs, split), strict=True)
        return torch.cat([t + b * p for t, b, p in parts])

    fc2 = torch.randn(n, h, dtype=torch.bfloat16, requires_grad=True)
    probs = torch.rand(n, 1, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(h, dtype=torch.bfloat16, requires_grad=True) for _ in range(experts)]
    got = _passes(bias, [fc2, probs, *biases], n * h)
    assert got == pytest.approx(UNFUSED_MODEL_OP_PASSES["expert_bias"], rel=0.02)


def test_unfused_bias_dropout_add_moves_two_passes_more_than_the_fused_one() -> None:
    """Megatron-Core 0.15's bias-dropout-add without ``bias_dropout_fusion`` (GPT-OSS's provider), written out
    as ``fused_bias_dropout._bias_dropout_add_func`` runs it in training (bf16, hidden dropout 0): ``x + bias``,
    ``dropout(p=0)``, ``residual + out``, bytes counted at the ATen level. A fused kernel reads x and the
    residual and writes the sum (3 passes, what ``elementwise_op`` prices); the eager sequence moves 2 more
    forward. Its backward moves one pass, the bias gradient's reduction of the output gradient, which the fused
    kernel's backward needs as well: nothing more."""
    torch.manual_seed(0)
    n, h = 2048, 512

    def bias_dropout_add(x: list[torch.Tensor]) -> torch.Tensor:
        out = torch.nn.functional.dropout(x[0] + x[2], p=0.0, training=True)
        return x[1] + out

    x = torch.randn(n, h, dtype=torch.bfloat16, requires_grad=True)
    residual = torch.randn(n, h, dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(h, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = _passes(bias_dropout_add, [x, residual, bias], n * h)
    assert (fwd - 3.0, bwd) == pytest.approx(
        (UNFUSED_MODEL_OP_PASSES["attention_bias_add"][0], 1.0), abs=0.01
    )
    assert UNFUSED_MODEL_OP_PASSES["attention_bias_add"][1] == 0.0


def test_torchtitan_2024_eager_norm_and_rotary_passes_match_its_aten_ops() -> None:
    """torchtitan @9dec370's RMSNorm and apply_rotary_emb written out as its model code runs them without
    torch.compile (bf16 activations, a bf16 weight as FSDP2's param_dtype casts it), bytes counted at the ATen
    level: the norm's chain beyond a fused norm's one read and one write (2 forward, 4 backward by the memory-op
    rule) and the complex rotation."""
    torch.manual_seed(0)
    n, h = 1024, 512

    def rmsnorm(x: list[torch.Tensor]) -> torch.Tensor:
        t = x[0].float()
        return (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x[0]) * x[1]

    inp = torch.randn(n, h, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.ones(h, dtype=torch.bfloat16, requires_grad=True)
    fwd, bwd = _passes(rmsnorm, [inp, weight], n * h)
    assert (fwd - 2.0, bwd - 4.0) == pytest.approx(UNFUSED_MODEL_OP_PASSES["rmsnorm_fp32"], rel=0.02)

    s, heads, d = 256, 40, 128  # Llama 3.1 8B: 32 query + 8 key heads of 128
    freqs = torch.polar(torch.ones(s, d // 2), torch.randn(s, d // 2)).view(1, s, 1, d // 2)

    def rotary(x: list[torch.Tensor]) -> torch.Tensor:
        z = torch.view_as_complex(x[0].float().reshape(*x[0].shape[:-1], -1, 2))
        return torch.view_as_real(z * freqs).flatten(3).type_as(x[0])

    q = torch.randn(1, s, heads, d, dtype=torch.bfloat16, requires_grad=True)
    assert _passes(rotary, [q], q.numel()) == pytest.approx(UNFUSED_MODEL_OP_PASSES["rope_complex"], rel=0.03)


def test_torchtitan_eager_norm_and_rotary_only_without_compile() -> None:
    """A Llama 3.1 8B layer (hidden 4096, 32 + 8 heads of 128) under torchtitan 2024: compiled, no extra op;
    eager, two norms of 4096 values and the rotation of (32 + 8) x 128 values per token, split over tp (the
    norms only with sequence parallelism)."""
    llama, tokens, tp = load_model("llama-3.1-8b"), 8192.0, 2
    eager = load_framework("torchtitan-2024").unfused_model_ops
    common = dict(tokens=tokens, tp=tp, act_bytes=2.0, moe_layer=False, unfused=eager)
    assert unfused_model_ops(llama, **common) == []  # type: ignore[arg-type]
    ops = {
        o.name: o for o in unfused_model_ops(llama, fused_elementwise=False, sequence_parallel=True, **common)
    }  # type: ignore[arg-type]
    assert ops["rmsnorm_fp32_unfused"].bytes == pytest.approx(16 * 2 * 2 * 8192 * 4096 / 2)
    assert ops["rmsnorm_fp32_unfused"].backward_bytes == pytest.approx(44 * 2 * 2 * 8192 * 4096 / 2)
    assert ops["rope_complex_unfused"].bytes == pytest.approx(10 * 2 * 8192 * 40 * 128 / 2)
    no_sp = {o.name: o for o in unfused_model_ops(llama, fused_elementwise=False, **common)}  # type: ignore[arg-type]
    assert no_sp["rmsnorm_fp32_unfused"].bytes == pytest.approx(16 * 2 * 2 * 8192 * 4096)
    # Megatron-Core's profile lists neither: its TE norms and fused RoPE run the same with or without them
    mcore = load_framework("megatron-core-2024").unfused_model_ops
    assert (
        unfused_model_ops(
            llama,
            tokens=tokens,
            tp=tp,
            act_bytes=2.0,
            moe_layer=False,
            unfused=mcore,
            fused_elementwise=False,
        )
        == []
    )


ALL = ("yarn_rope", "glu_clamp", "expert_bias", "attention_bias_add")


def test_gpt_oss_layer_gets_all_three_from_its_config_figures() -> None:
    oss = load_model("gpt-oss-120b")
    tokens, tp = 16384.0, 2
    ops = {
        o.name: o
        for o in unfused_model_ops(oss, tokens=tokens, tp=tp, act_bytes=2.0, moe_layer=True, unfused=ALL)
    }
    # config.json: 64 query and 8 key/value heads of 64, top-4 of experts 2880 wide, hidden 2880
    rope, glu, bias = 16384 * (64 + 8) * 64 / 2, 16384 * 4 * 2880 / 2, 16384 * 4 * 2880 / 2
    assert ops["yarn_rope_unfused"].bytes == pytest.approx(12 * 2 * rope)
    assert ops["yarn_rope_unfused"].backward_bytes == pytest.approx(14 * 2 * rope)
    assert ops["glu_clamp_unfused"].bytes == pytest.approx(8 * 2 * glu)
    assert ops["expert_bias_unfused"].backward_bytes == pytest.approx(8 * 2 * bias)
    # a dense layer of the same model: the RoPE and the clamp of its MLP (intermediate_size 2880), no expert bias
    dense = {
        o.name: o
        for o in unfused_model_ops(oss, tokens=tokens, tp=tp, act_bytes=2.0, moe_layer=False, unfused=ALL)
    }
    assert sorted(dense) == ["attention_bias_add_unfused", "glu_clamp_unfused", "yarn_rope_unfused"]
    # the output projection's bias added on its own: h = 2880 per token, split over tp only with sequence parallel
    assert dense["attention_bias_add_unfused"].bytes == pytest.approx(2 * 2 * 16384 * 2880)
    assert dense["attention_bias_add_unfused"].backward_bytes == 0.0
    (shard,) = [
        o
        for o in unfused_model_ops(
            oss,
            tokens=tokens,
            tp=tp,
            act_bytes=2.0,
            moe_layer=False,
            unfused=("attention_bias_add",),
            sequence_parallel=True,
        )
    ]
    assert shard.bytes == pytest.approx(2 * 2 * 16384 * 2880 / 2)
    assert dense["glu_clamp_unfused"].bytes == pytest.approx(8 * 2 * 16384 * 2880 / 2)
    assert unfused_model_ops(oss, tokens=tokens, tp=tp, act_bytes=2.0, moe_layer=True, unfused=()) == []


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "mixtral-8x7b"])
def test_models_without_the_features_get_nothing(name: str) -> None:
    """Llama 3.1's llama3 RoPE is fused, DeepSeek-V3's YaRN rotary part runs in MLA's own path; none clamps or
    biases its experts."""
    model = load_model(name)
    for moe in (False, True) if model.is_moe else (False,):
        assert unfused_model_ops(model, tokens=4096.0, tp=1, act_bytes=2.0, moe_layer=moe, unfused=ALL) == []


def _profile_without(prof: FrameworkProfile) -> FrameworkProfile:
    return dataclasses.replace(prof, unfused_model_ops=())


def test_layer_cost_adds_exactly_the_unfused_time() -> None:
    """A GPT-OSS layer priced by Megatron-Core's profile costs the unfused kernels' bytes (RoPE, and the clamp of
    a dense MLP) over the achieved HBM bandwidth more than the same profile with them fused, forward and
    backward."""
    cal = load_calibration("default").with_framework("megatron-core-2024")
    plain = dataclasses.replace(cal, framework=_profile_without(cal.framework))
    oss, cluster = load_model("gpt-oss-120b"), load_cluster("dgx-h100", num_nodes=1)
    args = dict(
        dtype="bf16",
        tokens=np.array(8192.0),
        seq_len=np.array(4096.0),
        tp=np.array(1),
        cp=np.array(1),
        ep=np.array(1),
        sequence_parallel=np.array(False),
        recompute=np.array(0),
        tp_stride=np.array(1),
        cp_stride=np.array(1),
        moe_layer=False,
    )
    with_rope, without = layer_costs(oss, cluster, cal, **args), layer_costs(oss, cluster, plain, **args)
    ops = unfused_model_ops(oss, tokens=8192.0, tp=1, act_bytes=2.0, moe_layer=False, unfused=ALL)
    fwd, bwd = sum(o.bytes for o in ops), sum(o.backward_bytes for o in ops)
    per_byte = compute_slowdown(cal.framework) / device_rates(cluster.device, "bf16", cal).hbm_bytes_per_s
    assert float(with_rope.compute_f_s - without.compute_f_s) == pytest.approx(fwd * per_byte)
    assert float(with_rope.compute_i_s - without.compute_i_s) == pytest.approx(bwd * per_byte)


def test_memory_op_backward_defaults_to_twice_the_forward() -> None:
    """An op without ``backward_bytes`` keeps the memory-op rule (backward moves 2x the forward bytes)."""
    ops = layer_ops(load_model("llama-3.1-8b"), tokens=4096.0, seq_len=4096.0, act_bytes=2.0)
    norms = [o for o in ops if o.name == "norms_elementwise"]
    t = op_times(norms, peak_flop_per_s=1e15, gemm_curve=((1.0, 1.0),), hbm_bytes_per_s=1e12, attention=None)
    assert float(t.bwd_input_s) == pytest.approx(2 * float(t.fwd_s))


def test_gpt_oss_estimate_slower_with_the_eager_kernels() -> None:
    oss, cluster = load_model("gpt-oss-120b"), load_cluster("dgx-h100", num_nodes=8)
    plan = ParallelPlan(dp=16, pp=4, ep=8, micro_batch_size=1, zero_stage=1, schedule="1f1b")
    workload = Workload(seq_len=4096, global_batch_size=512, dtype="bf16")
    cal = load_calibration("default").with_framework("megatron-core-2024")
    plain = dataclasses.replace(cal, framework=_profile_without(cal.framework))
    eager = estimate_plan(oss, cluster, workload, plan, calibration=cal)
    fused = estimate_plan(oss, cluster, workload, plan, calibration=plain)
    assert eager.step_time_s > fused.step_time_s * 1.03


def test_profile_rejects_an_unknown_unfused_op() -> None:
    prof = load_framework("megatron-core-2024")
    with pytest.raises(ValueError, match=r"unfused_model_ops \['alibi'\] unknown; allowed: yarn_rope"):
        dataclasses.replace(prof, unfused_model_ops=("alibi",))
    assert load_framework("torchtitan-2024").unfused_model_ops == ("rmsnorm_fp32", "rope_complex")
    assert load_framework("torchtitan-2025").unfused_model_ops == ()


def test_hf_configs_give_the_features() -> None:
    oss = load_model("gpt-oss-120b")
    assert (oss.rope_scaling, oss.glu_clamp, oss.expert_bias) == ("yarn", 7.0, True)  # config.json
    # 116.83B total (gpt-oss model card, Table 1), expert biases included (36 layers x 128 x (2 x 2880 + 2880))
    assert oss.total_parameters() == pytest.approx(116.83e9, rel=2e-4)
    assert load_model("llama-3.1-8b").rope_scaling == "llama3"
    assert load_model("deepseek-v3").rope_scaling == "yarn"
    assert load_model("mistral-7b").rope_scaling == ""
    base = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
    }
    assert (
        model_from_hf_config({**base, "rope_scaling": {"type": "Linear", "factor": 2.0}}).rope_scaling
        == "linear"
    )
    assert model_from_hf_config({**base, "rope_scaling": {"rope_type": "default"}}).rope_scaling == ""
    with pytest.raises(
        ValueError, match=r"config: field 'rope_scaling' must be an object or null, got 'yarn'"
    ):
        model_from_hf_config({**base, "rope_scaling": "yarn"})
    oss_cfg = {
        **base,
        "architectures": ["GptOssForCausalLM"],
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    with pytest.raises(ValueError, match="field 'swiglu_limit' must be a number, got 'seven'"):
        model_from_hf_config({**oss_cfg, "swiglu_limit": "seven"})


@pytest.mark.parametrize(
    ("model", "changes", "match"),
    [
        ("llama-3.1-8b", {"glu_clamp": -1.0}, "glu_clamp must be a number in 0..10000"),
        ("llama-3.1-8b", {"glu_clamp": float("nan")}, "glu_clamp must be a number"),
        ("llama-3.1-8b", {"glu_clamp": True}, "glu_clamp must be a number"),
        ("megatron-gpt-1.7b", {"glu_clamp": 7.0}, "glu_clamp=7 needs gated_mlp"),
        ("llama-3.1-8b", {"expert_bias": True}, "expert_bias needs num_experts > 0"),
        ("llama-3.1-8b", {"expert_bias": 1}, "expert_bias must be true or false"),
        ("llama-3.1-8b", {"rope_scaling": "YaRN"}, "rope_scaling must be empty or a name of lower-case"),
        ("llama-3.1-8b", {"rope_scaling": None}, "rope_scaling must be empty"),
    ],
)
def test_bad_feature_values_are_refused(model: str, changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(load_model(model), **changes)


def test_the_eager_clamp_keeps_its_input_for_the_backward_pass() -> None:
    """The clamp's autograd node keeps the fc1 output it clamped (both halves: 2 x 2880 values per routed token
    of GPT-OSS) beside the clamped copy the activation keeps: the routed experts' saved activations grow by
    top-4 x 5760 values x 2 bytes per token, unless the activation is recomputed (moe_act)."""
    oss = load_model("gpt-oss-120b")
    kw = {"flash": True, "dropout": False, "moe_layer": True}
    base = activation_parts(oss, **kw)
    clamped = activation_parts(oss, unfused_glu_clamp=True, **kw)
    assert clamped.inside_tp - base.inside_tp == pytest.approx(4 * 2 * 2880 * 2.0)
    redo = activation_parts(oss, unfused_glu_clamp=True, recompute_modules=("moe_act",), **kw)
    assert redo.inside_tp == activation_parts(oss, recompute_modules=("moe_act",), **kw).inside_tp
    llama = load_model("llama-3.1-8b")  # no clamp: nothing changes
    assert activation_parts(llama, unfused_glu_clamp=True, flash=True, dropout=False) == activation_parts(
        llama, flash=True, dropout=False
    )
