"""``model_from_hf_config`` on each supported architecture, checked against independent counts."""

from __future__ import annotations

import pytest

from workbench.presets import catalog
from workbench.presets.hf_config import SUPPORTED_ARCHITECTURES, model_from_hf_config
from workbench.specs.model import AttentionKind, NormKind

# Pythia-160M (EleutherAI/pythia-160m config.json); 162,322,944 parameters as the HF model reports.
PYTHIA_160M = {
    "architectures": ["GPTNeoXForCausalLM"],
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "vocab_size": 50304,
    "tie_word_embeddings": False,
    "max_position_embeddings": 2048,
    "rotary_pct": 0.25,
    "use_parallel_residual": True,
}
# GPT-2 small (openai-community/gpt2 config.json): 124,439,808 parameters (HF num_parameters()).
GPT2_SMALL = {
    "architectures": ["GPT2LMHeadModel"],
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}


def test_gpt_neox_pythia_160m() -> None:
    m = model_from_hf_config(PYTHIA_160M, name="pythia-160m")
    assert m.norm is NormKind.LAYERNORM and not m.gated_mlp and m.attention is AttentionKind.MHA
    assert m.total_parameters() == 162_322_944


def test_gpt2_small() -> None:
    m = model_from_hf_config(GPT2_SMALL, name="gpt2")
    assert m.tied_embeddings and m.num_learned_positions == 1024
    assert m.total_parameters() == 124_439_808


@pytest.mark.parametrize(
    ("preset", "arch"),
    [
        ("llama-3.1-8b", "LlamaForCausalLM"),
        ("mistral-7b", "MistralForCausalLM"),
        ("mixtral-8x7b", "MixtralForCausalLM"),
        ("qwen2.5-72b", "Qwen2ForCausalLM"),
        ("qwen3-30b-a3b", "Qwen3MoeForCausalLM"),
        ("deepseek-v3", "DeepseekV3ForCausalLM"),
        ("gpt-oss-120b", "GptOssForCausalLM"),
        ("gpt3-175b", "GPT2LMHeadModel"),
    ],
)
def test_each_architecture_has_a_preset(preset: str, arch: str) -> None:
    import json

    cfg = json.loads(catalog.resolve("model", preset).read_text())
    assert cfg["architectures"] == [arch]
    assert arch in SUPPORTED_ARCHITECTURES


def test_llama_gqa_fields() -> None:
    m = catalog.load_model("llama-3.1-70b")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_key_value_heads) == (80, 8192, 64, 8)
    assert m.attention is AttentionKind.GQA and m.head_dim == 128 and m.ffn_hidden_size == 28672


def test_qwen2_has_qkv_bias_and_qwen3_moe_qk_norm() -> None:
    assert catalog.load_model("qwen2.5-72b").qkv_bias
    q3 = catalog.load_model("qwen3-30b-a3b")
    assert q3.qk_norm and q3.num_experts == 128 and q3.experts_per_token == 8 and q3.head_dim == 128


def test_gpt_oss_and_qwen3_235b_fields_and_published_sizes() -> None:
    oss = catalog.load_model("gpt-oss-120b")
    assert oss.head_dim == 64 and oss.num_key_value_heads == 8 and oss.qkv_bias
    assert (oss.sliding_window, oss.num_sliding_window_layers) == (128, 18)  # every other layer of 36
    assert (oss.num_experts, oss.experts_per_token, oss.moe_ffn_hidden_size) == (128, 4, 2880)
    assert oss.total_parameters() == pytest.approx(116.83e9, rel=2e-4)  # gpt-oss model card, Table 1
    q = catalog.load_model("qwen3-235b-a22b")
    assert q.head_dim == 128 and q.qk_norm and q.num_layers == 94
    assert q.total_parameters() == pytest.approx(235e9, rel=0.01)  # Qwen3 technical report, Table 2


def test_deepseek_mla_fields() -> None:
    m = catalog.load_model("deepseek-v3")
    assert m.attention is AttentionKind.MLA and m.kv_lora_rank == 512 and m.q_lora_rank == 1536
    assert m.num_dense_layers == 3 and m.num_shared_experts == 1 and m.num_experts == 256
    assert m.qk_head_dim == 192 and m.value_head_dim == 128


def test_unknown_architecture_lists_supported() -> None:
    with pytest.raises(ValueError, match="supported: LlamaForCausalLM.*GPTNeoXForCausalLM"):
        model_from_hf_config({"architectures": ["BertModel"], "hidden_size": 768})


def test_missing_and_mistyped_fields_are_named() -> None:
    cfg = {**PYTHIA_160M}
    del cfg["num_hidden_layers"]
    with pytest.raises(ValueError, match="num_hidden_layers"):
        model_from_hf_config(cfg)
    with pytest.raises(ValueError, match="'hidden_size' must be an integer"):
        model_from_hf_config({**PYTHIA_160M, "hidden_size": "768"})
    with pytest.raises(ValueError, match="num_key_value_heads.*5.*must divide"):
        model_from_hf_config({**PYTHIA_160M, "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 5})
