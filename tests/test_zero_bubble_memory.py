"""What a split backward keeps until its weight-gradient pass, and the zero-bubble fork's fp16 gradient buffers.

Sources: sail-sg/zero-bubble-pipeline-parallelism @ed85b11c (2023-11-03), megatron/core/weight_grad_store.py
(``WeightGradStore.put(total_input, grad_output, weight, func)`` keeps both until W) and megatron/arguments.py
(fp32 gradient accumulation forced only for bf16); Korthikanti et al. 2022 (arXiv:2205.05198) Table 2 for a GPT
layer's stored activations, ``s b h (34 + 5 a s / h)`` bytes.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from workbench.cost import step
from workbench.cost.memory import activation_parts, weight_grad_stash_bytes
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_cluster
from workbench.presets.frameworks import load_framework
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

GPT_1_5B = ModelSpec(  # Qi et al. ICLR 2024 Table 3's 1.5B model: h 2304, 24 heads, MLP 4h
    name="zb-gpt-1.5b",
    num_layers=22,
    hidden_size=2304,
    num_attention_heads=24,
    num_key_value_heads=24,
    head_dim=96,
    ffn_hidden_size=4 * 2304,
    vocab_size=32000,
    gated_mlp=False,
    attention="mha",
    norm="layernorm",
    linear_bias=True,
)


def _torch_stash_values_per_token(h: int, a: int, kv: int, d: int, f: int, gated: bool) -> int:
    """Values per token that a deferred W would need, counted on a real torch layer: every ``nn.Linear``'s
    input and the gradient of its output, read from forward and backward hooks."""
    torch.manual_seed(0)
    lin = torch.nn.ModuleDict(
        {
            "qkv": torch.nn.Linear(h, (a + 2 * kv) * d),
            "proj": torch.nn.Linear(a * d, h),
            "fc1": torch.nn.Linear(h, (2 if gated else 1) * f),
            "fc2": torch.nn.Linear(f, h),
        }
    )
    counted: list[int] = []
    for m in lin.values():
        m.register_forward_hook(lambda _m, inp, _out: counted.append(inp[0].numel()))
        m.register_full_backward_hook(lambda _m, _gi, gout: counted.append(gout[0].numel()))
    b, s = 2, 8
    x = torch.randn(b, s, h, requires_grad=True)
    q, k, v = lin["qkv"](F.layer_norm(x, (h,))).split([a * d, kv * d, kv * d], dim=-1)
    q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k, v))
    k, v = (t.repeat_interleave(a // kv, dim=1) for t in (k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, a * d)
    y = x + lin["proj"](o)
    u = lin["fc1"](F.layer_norm(y, (h,)))
    act = F.silu(u[..., :f]) * u[..., f:] if gated else F.gelu(u)
    (y + lin["fc2"](act)).sum().backward()
    return sum(counted) // (b * s)


@pytest.mark.parametrize("gated", [False, True])
def test_weight_grad_stash_is_every_gemm_input_and_output_gradient(gated: bool) -> None:
    """``weight_grad_stash_bytes`` at tp = 1 equals 2 bytes per value of what torch's linear layers take in and
    get back as output gradients (MHA GPT and a gated GQA layer)."""
    h, a, kv, d, f = 64, 4, 4 if not gated else 2, 16, 96
    model = dataclasses.replace(
        GPT_1_5B,
        hidden_size=h,
        num_attention_heads=a,
        num_key_value_heads=kv,
        head_dim=d,
        ffn_hidden_size=f,
        gated_mlp=gated,
        attention="mha" if kv == a else "gqa",
    )
    whole, split = weight_grad_stash_bytes(model)
    assert whole + split == pytest.approx(2.0 * _torch_stash_values_per_token(h, a, kv, d, f, gated))


def test_gpt_layer_stash_is_32h_bytes_per_token() -> None:
    """A GPT layer (MHA, MLP 4h): inputs h + h + h + 4h and output gradients 3h + h + 4h + h, 16h values."""
    h = GPT_1_5B.hidden_size
    assert sum(weight_grad_stash_bytes(GPT_1_5B)) == 32 * h
    parts = activation_parts(GPT_1_5B, flash=False, dropout=True)
    assert parts.weight_grad_inputs + parts.weight_grad_inside_tp == 32 * h


def test_split_backward_keeps_only_the_stash_after_input_grad() -> None:
    """Qi et al.'s 1.5B model at micro-batch 6, sequence 1024, tp 1, unfused attention with dropout and no
    recompute: the I pass frees all but the stash, 1 - 32h / (34h + 5as) of the layer (Korthikanti Table 2)."""
    fw = dataclasses.replace(load_framework("zero-bubble-2024"), attention_kernels=())
    cal = Calibration().with_framework(fw)
    work = Workload(seq_len=1024, global_batch_size=48)
    ctx = step.StepContext.build(GPT_1_5B, load_cluster("dgx-a100"), work, cal)
    plan = ParallelPlan(pp=8, micro_batch_size=6, schedule="zb-h2")
    sizes = step.activation_sizes(ctx, step.plan_columns(plan, work))
    h, a, s = 2304, 24, 1024
    assert float(sizes.freed_at_input_grad_frac) == pytest.approx(
        1 - 32 * h / (34 * h + 5 * a * s), rel=1e-12
    )
    assert float(sizes.dense_layer) == pytest.approx(6 * s * (34 * h + 5 * a * s), rel=1e-12)


def test_zero_bubble_fork_keeps_fp16_gradients_in_fp16() -> None:
    """The fork's fp16 runs keep 2-byte main grads (no --accumulate-allreduce-grads-in-fp32); bf16 keeps fp32."""
    fw = load_framework("zero-bubble-2024")
    assert fw.held_grad_bytes_per_param("fp16") == 2.0
    assert fw.held_grad_bytes_per_param("bf16") == 4.0
    assert load_framework("megatron-lm-2021").held_grad_bytes_per_param("fp16") == 4.0  # not set there
    cal = Calibration().with_framework(fw)
    plan = ParallelPlan(pp=8, micro_batch_size=1)
    for dtype, ratio in (("fp16", 1.0), ("bf16", 2.0)):
        work = Workload(seq_len=1024, global_batch_size=48, dtype=dtype)
        ctx = step.StepContext.build(GPT_1_5B, load_cluster("dgx-a100"), work, cal)
        cols = step.plan_columns(plan, work)
        mem = step.static_memory(ctx, cols, step.stage_holdings(GPT_1_5B, 8, 3))
        # 2-byte weights: the gradient buffer is the same size in fp16, twice it with fp32 main grads
        assert float(mem["gradients_bytes"]) == pytest.approx(
            ratio * float(mem["parameters_bytes"]), rel=1e-12
        )


def test_a_blank_dtype_reads_the_stacks_launch_dtype() -> None:
    """A Zero Bubble row leaves its dtype blank (the paper states none): it is read at the fork's launch dtype,
    fp16 (its scripts pass --fp16), and says so in ``assumed``; Megatron-LM 2021 states no launch dtype (its
    blank rows keep the arithmetic's reading or bf16); a profile with an unknown launch dtype is refused."""
    import csv

    from tests.conftest import ROOT
    from workbench.validate.training import row_case

    rows = {r["id"]: r for r in csv.DictReader((ROOT / "profiles/validation/training_public.csv").open())}
    zb = row_case(rows["ZB_ICLR24-001"])
    assert rows["ZB_ICLR24-001"]["dtype"] == "" and str(zb.workload.dtype) == "fp16"
    assert "dtype:zero-bubble-2024 launches fp16" in zb.assumed
    assert load_framework("megatron-lm-2021").launch_dtype == ""
    with pytest.raises(ValueError, match="launch_dtype must be one of"):
        dataclasses.replace(load_framework("zero-bubble-2024"), launch_dtype="fp12")
