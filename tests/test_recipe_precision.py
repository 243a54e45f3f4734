"""Recipe entries per FP8 recipe (issue 48): Megatron-Bridge 25.11 chooses some settings per precision, which
a ``device_recipes`` / ``model_recipes`` entry holds in a sub-table named by the FP8 recipe. Expected values are
the recipe files' own (scripts/performance/configs/*, tag v0.2.0), written out here."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.presets.frameworks import load_framework
from workbench.specs.framework_values import recipe_for

MCORE = load_framework("megatron-core-2024")
MX = dataclasses.replace(MCORE, fp8_recipe="mxfp8")


def test_the_fp8_recipes_sub_table_lies_over_the_entry() -> None:
    entry = {
        "cuda_graph_scopes": ["attn"],
        "mxfp8": {"cuda_graph_scopes": []},
        "current": {"ep_comm_overlap": True},
    }
    assert recipe_for(entry, "mxfp8") == {"cuda_graph_scopes": []}
    assert recipe_for(entry, "current") == {"cuda_graph_scopes": ["attn"], "ep_comm_overlap": True}
    assert recipe_for(entry, "delayed") == {"cuda_graph_scopes": ["attn"]}


def test_qwen3_30b_on_gb200_graphs_the_attention_block_except_in_fp8_mx() -> None:
    """workload_base_configs.py: QWEN3_30B_A3B_GB200_{BF16,FP8_CS} graph attn, moe_router, moe_preprocess;
    QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG moe_router and moe_preprocess only."""
    assert MCORE.for_device("gb200", "qwen3-30b-a3b").cuda_graph_scopes == (
        "attn",
        "moe_router",
        "moe_preprocess",
    )
    assert MX.for_device("gb200", "qwen3-30b-a3b").cuda_graph_scopes == ("moe_router", "moe_preprocess")
    assert MX.for_device("gb200", "qwen3-30b-a3b").moe_dispatcher == "hybridep"  # the device entry stays


@pytest.mark.parametrize(
    ("gpu", "model"),
    [("b200-sxm-180gb", "qwen3-235b-a22b"), ("gb300", "DeepSeekV3"), ("gb200", "DeepSeekV3")],
)
def test_fp8_mx_runs_that_turn_the_param_gather_overlap_off(gpu: str, model: str) -> None:
    """qwen3_llm_pretrain.py qwen3_235b_a22b_b200_config and deepseek_llm_pretrain.py deepseek_v3_gb300_config /
    deepseek_v3_gb200_config: if precision == 'fp8_mx': cfg.comm_overlap.overlap_param_gather = False."""
    assert not MX.for_device(gpu, model).overlap_param_gather
    assert MCORE.for_device(gpu, model).overlap_param_gather
    assert MX.for_device("b200-sxm-180gb", "DeepSeekV3").overlap_param_gather  # its B200 config keeps it


@pytest.mark.parametrize(
    ("recipes", "match"),
    [
        ({"qwen3": {"gb200": {"mxfp8": {"fp8_matmul_scale": 0.5}}}}, r"qwen3\.gb200\.mxfp8: unknown field"),
        (
            {"qwen3": {"gb200": {"mxfp8": {"current": {"ep_comm_overlap": True}}}}},
            r"gb200\.mxfp8: unknown field",
        ),
        ({"qwen3": {"gb200": {"mxfp8": ["attn"]}}}, r"gb200\.mxfp8 must be a table"),
        ({"qwen3": {"gb200": {"fp9": {"ep_comm_overlap": True}}}}, "unknown field"),
        (
            {"qwen3": {"gb200": {"mxfp8": {"cuda_graph_scopes": ["everything"]}}}},
            r"gb200\.mxfp8: cuda_graph_scopes",
        ),
    ],
)
def test_bad_precision_sub_tables_are_refused_where_they_are(recipes: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(MCORE, device_recipes={}, model_recipes=recipes)
