"""The per-head query/key norms of Qwen3-style attention: their HBM bytes (``workbench.cost.flops.qk_norm_op``)
from the closed form of the model's shapes, only where the model has them, before the MoE host sync, and their
kernel launches (``workbench.cost.moe.qk_norm_launches``) where the attention block runs eagerly."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.cost.flops import QK_NORM_PASSES, attention_ops
from workbench.cost.moe import PRE_SYNC_OPS, QK_NORM_LAUNCHES, qk_norm_launches
from workbench.presets.catalog import load_model
from workbench.presets.frameworks import load_framework


def _ops(model_name: str, **changes: object) -> dict[str, object]:
    model = load_model(model_name)
    if changes:
        model = dataclasses.replace(model, **changes)
    ops = attention_ops(model, tokens=4096.0, seq_len=4096, tp=2, act_bytes=2.0, flash=True)
    return {o.name: o for o in ops}


def test_qwen3_30b_qk_norm_bytes_follow_its_head_shapes() -> None:
    # Qwen3-30B-A3B (Hugging Face config.json of Qwen/Qwen3-30B-A3B): 32 query heads, 4 key/value heads,
    # head_dim 128; 4096 tokens with the heads split over tp 2: 4096 x (32 + 4) x 128 / 2 values of 2 bytes.
    op = _ops("qwen3-30b-a3b")["qk_norm"]
    values = 4096 * (32 + 4) * 128 / 2
    assert op.kind == "memory"
    assert float(op.bytes) == pytest.approx(2 * 2.0 * values)  # read and write forward
    assert float(op.backward_bytes) == pytest.approx(3 * 2.0 * values)  # dy and x read, dx written
    assert QK_NORM_PASSES == (2.0, 3.0)


def test_qk_norm_only_where_the_model_has_it() -> None:
    assert "qk_norm" not in _ops("llama-3.1-8b")
    assert "qk_norm" in _ops("llama-3.1-8b", qk_norm=True)
    assert "qk_norm" not in _ops("qwen3-30b-a3b", qk_norm=False)


def test_qk_norm_runs_before_the_moe_host_sync() -> None:
    assert "qk_norm" in PRE_SYNC_OPS


def test_qk_norm_launches_count_where_the_attention_block_runs_eagerly() -> None:
    fw = dataclasses.replace(load_framework("megatron-core-2024"), device_recipes={}, model_recipes={})
    qwen, llama = load_model("qwen3-30b-a3b"), load_model("llama-3.1-8b")
    # q_layernorm and k_layernorm: one TE rmsnorm_fwd kernel each (Megatron-Core 0.15 attention.py)
    assert QK_NORM_LAUNCHES == 2.0
    assert qk_norm_launches(dataclasses.replace(fw, cuda_graph_scopes=()), qwen) == 2.0
    assert qk_norm_launches(dataclasses.replace(fw, cuda_graph_scopes=("attn", "moe_router")), qwen) == 0.0
    assert qk_norm_launches(dataclasses.replace(fw, cuda_graph_scopes=()), llama) == 0.0
