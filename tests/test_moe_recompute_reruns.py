"""What recomputing Megatron-Core's modules reruns in the backward pass beyond the fused activation: the eager
clamps of GPT-OSS's clamped GLU (``cheap_recompute_ops`` ``glu_clamp_recompute``) and the kernels the backward
launches again (``workbench.cost.moe.recompute_launches``), counted from Megatron-Core 0.15's code."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from workbench.cost.elementwise_ops import UNFUSED_MODEL_OP_PASSES, cheap_recompute_ops
from workbench.cost.moe import RECOMPUTE_LAUNCHES, UNFUSED_OP_LAUNCHES, recompute_launches
from workbench.presets.catalog import load_model
from workbench.presets.frameworks import load_framework

MCORE = dataclasses.replace(load_framework("megatron-core-2024"), device_recipes={}, model_recipes={})


def _fw(**changes: Any) -> Any:
    return dataclasses.replace(MCORE, **changes)


def test_recomputed_activation_reruns_the_glu_clamp_of_gpt_oss() -> None:
    oss = load_model("gpt-oss-120b")
    kw: dict[str, Any] = {
        "tokens": 1000.0,
        "tp": 1,
        "act_bytes": 2.0,
        "moe_layer": True,
        "modules": ("moe_act",),
    }
    ops = {o.name: o for o in cheap_recompute_ops(oss, unfused=("glu_clamp",), **kw)}
    # the clamp works on the GLU's output width of every routed copy: top-4 x 2880 per token (GPT-OSS-120B's
    # config.json: experts_per_token 4, intermediate_size 2880), 8 values read or written per unit forward
    units = 1000.0 * 4 * 2880
    assert UNFUSED_MODEL_OP_PASSES["glu_clamp"][0] == 8.0
    assert float(ops["glu_clamp_recompute"].bytes) == pytest.approx(8.0 * 2.0 * units)
    assert "glu_clamp_recompute" not in {o.name for o in cheap_recompute_ops(oss, **kw)}  # the stack fuses it
    qwen = load_model("qwen3-30b-a3b")  # no clamp: the fused activation alone
    assert [o.name for o in cheap_recompute_ops(qwen, unfused=("glu_clamp",), **kw)] == ["norm_act_recompute"]
    layernorm_only = {**kw, "modules": ("layernorm",)}
    assert "glu_clamp_recompute" not in {
        o.name for o in cheap_recompute_ops(oss, unfused=("glu_clamp",), **layernorm_only)
    }


def test_recompute_launches_follow_the_modules_and_graphs() -> None:
    oss, qwen = load_model("gpt-oss-120b"), load_model("qwen3-30b-a3b")
    both = ("layernorm", "moe_act")
    # the pre-MLP norm (1), the compiled activation (1) and GPT-OSS's eager clamps and offset copy (4)
    assert (
        RECOMPUTE_LAUNCHES == {"layernorm": 1.0, "moe_act": 1.0} and UNFUSED_OP_LAUNCHES["glu_clamp"] == 4.0
    )
    assert recompute_launches(_fw(recompute_modules=both, cuda_graph_scopes=()), oss) == 6.0
    # a graphed router keeps the pre-MLP norm's output (transformer_layer.py: no layernorm recompute then)
    assert recompute_launches(_fw(recompute_modules=both, cuda_graph_scopes=("moe_router",)), oss) == 5.0
    assert recompute_launches(_fw(recompute_modules=("moe_act",), cuda_graph_scopes=()), qwen) == 1.0
    assert recompute_launches(_fw(recompute_modules=(), cuda_graph_scopes=()), oss) == 0.0
    no_clamp = _fw(recompute_modules=both, cuda_graph_scopes=(), unfused_model_ops=())
    assert recompute_launches(no_clamp, oss) == 2.0
