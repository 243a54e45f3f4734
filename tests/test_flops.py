"""Compute costs: golden FLOP counts (Megatron eq. 3) and the roofline."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost.flops import (
    head_ops,
    layer_ops,
    matmul_efficiency_frac,
    megatron_flop_per_iteration,
    roofline_time_s,
)
from workbench.specs.model import ModelSpec

GPT3 = ModelSpec(
    name="gpt3-175b",
    num_layers=96,
    hidden_size=12288,
    num_attention_heads=96,
    num_key_value_heads=96,
    head_dim=128,
    ffn_hidden_size=4 * 12288,
    vocab_size=51200,
    gated_mlp=False,
    attention="mha",
    norm="layernorm",
    linear_bias=True,
)


def test_megatron_eq3_gpt3_literal() -> None:
    # Narayanan et al. 2021 eq. 3 written out for B=1536, s=2048, l=96, h=12288, V=51200.
    b, s, l_, h, v = 1536, 2048, 96, 12288, 51200
    expected = 96 * b * s * l_ * h * h * (1 + s / (6 * h) + v / (16 * l_ * h))
    got = megatron_flop_per_iteration(
        global_batch_size=b, seq_len=s, num_layers=l_, hidden_size=h, vocab_size=v
    )
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == pytest.approx(4.47e18, rel=0.01)  # ~4.5 EFLOP per iteration


def test_op_counts_reproduce_eq3_exactly() -> None:
    """Per-op FLOPs (unfused attention, full s^2) x 4 passes (fwd, 2x bwd, recompute) + head x 3 = eq. 3."""
    b, s = 1536, 2048
    tokens = b * s
    layer = sum(op.flop for op in layer_ops(GPT3, tokens=tokens, seq_len=s, flash=False))
    head = sum(op.flop for op in head_ops(GPT3, tokens=tokens, tp=1, act_bytes=2))
    total = 4 * GPT3.num_layers * layer + 3 * head
    expected = megatron_flop_per_iteration(
        global_batch_size=b, seq_len=s, num_layers=96, hidden_size=12288, vocab_size=51200
    )
    assert total == pytest.approx(expected, rel=1e-12)


def test_flash_executes_causal_half_and_tp_shards() -> None:
    full = {op.name: op.flop for op in layer_ops(GPT3, tokens=2048, seq_len=2048, flash=False)}
    fused = {op.name: op.flop for op in layer_ops(GPT3, tokens=2048, seq_len=2048, flash=True)}
    assert fused["attention_core"] == pytest.approx(full["attention_core"] / 2)
    split = {op.name: op.flop for op in layer_ops(GPT3, tokens=2048, seq_len=2048, tp=8, flash=False)}
    for name in ("qkv_proj", "attention_core", "out_proj", "mlp"):
        assert split[name] == pytest.approx(full[name] / 8)


def test_vectorised_over_plans() -> None:
    tp = np.array([1, 2, 4, 8])
    ops = layer_ops(GPT3, tokens=2048, seq_len=2048, tp=tp, sequence_parallel=tp > 1)
    assert all(np.shape(op.flop) in ((), (4,)) for op in ops)
    assert np.allclose(ops[0].flop * tp, ops[0].flop[0])


def test_roofline_and_efficiency_curve() -> None:
    pts = ((1e9, 0.5), (1e11, 0.7))
    assert matmul_efficiency_frac(1e10, pts) == pytest.approx(0.6)
    assert matmul_efficiency_frac(1e13, pts) == pytest.approx(0.7)
    # compute-bound: 1e12 FLOP at 100 TFLOP/s x 0.5 = 20 ms; memory-bound: 1e9 bytes at 1e12 B/s = 1 ms
    assert roofline_time_s(1e12, 1e6, peak_flop_per_s=1e14, efficiency_frac=0.5, hbm_bytes_per_s=1e12) == 0.02
    assert roofline_time_s(0.0, 1e9, peak_flop_per_s=1e14, efficiency_frac=0.5, hbm_bytes_per_s=1e12) == 1e-3
