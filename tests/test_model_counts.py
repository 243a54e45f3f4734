"""Golden parameter counts against published totals, and the closed forms they must satisfy."""

from __future__ import annotations

import pytest

from workbench.presets import catalog

# (preset, published total, published active or None, relative tolerance, source)
PUBLISHED = [
    ("llama-3.1-405b", 405.9e9, None, 0.005, "Llama 3 herd, arXiv:2407.21783 Table 3; HF model card 405.9B"),
    ("llama-3.1-70b", 70.6e9, None, 0.005, "HF meta-llama/Llama-3.1-70B safetensors metadata 70.6B"),
    ("llama-3.1-8b", 8.03e9, None, 0.005, "HF meta-llama/Llama-3.1-8B safetensors metadata 8.03B"),
    (
        "mixtral-8x7b",
        46.7e9,
        12.9e9,
        0.005,
        "Mistral AI, 'Mixtral of experts' (Dec 2023): 46.7B total, 12.9B active",
    ),
    ("qwen2.5-72b", 72.7e9, None, 0.005, "Qwen/Qwen2.5-72B model card: 72.7B"),
    (
        "qwen3-30b-a3b",
        30.5e9,
        3.3e9,
        0.02,
        "Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated (2 digits)",
    ),
    ("mixtral-8x22b", 141e9, 39e9, 0.005, "Mistral AI Mixtral 8x22B announcement: 141B total, 39B active"),
]


@pytest.mark.parametrize(
    ("name", "total", "active", "rel", "source"), PUBLISHED, ids=[p[0] for p in PUBLISHED]
)
def test_published_totals(name: str, total: float, active: float | None, rel: float, source: str) -> None:
    model = catalog.load_model(name)
    assert model.total_parameters() == pytest.approx(total, rel=rel), source
    if active is not None:
        assert model.active_parameters() == pytest.approx(active, rel=max(rel, 0.005)), source


def test_deepseek_v3_totals() -> None:
    """DeepSeek-V3 technical report (arXiv:2412.19437) abstract: 671B total, 37B activated per token.

    The total is checked to 0.5%. '37B' is rounded to two digits: counting the embeddings as Mixtral does
    gives 37.55B, excluding the input embedding 36.6B; both round to 37 within 1.5%, the tolerance here.
    """
    model = catalog.load_model("deepseek-v3")
    assert model.total_parameters() == pytest.approx(671e9, rel=0.005)
    assert model.active_parameters() == pytest.approx(37e9, rel=0.015)
    assert model.active_parameters() - model.embedding_parameters() == pytest.approx(37e9, rel=0.015)


MEGATRON_T1 = [  # Narayanan et al. 2021 (arXiv:2104.04473) Table 1: name, layers, hidden, billions
    ("megatron-gpt-1.7b", 24, 2304, 1.7),
    ("megatron-gpt-3.6b", 30, 3072, 3.6),
    ("megatron-gpt-7.5b", 36, 4096, 7.5),
    ("megatron-gpt-18b", 40, 6144, 18.4),
    ("megatron-gpt-39b", 48, 8192, 39.1),
    ("megatron-gpt-76b", 60, 10240, 76.1),
    ("megatron-gpt-145b", 80, 12288, 145.6),
    ("megatron-gpt-310b", 96, 16384, 310.1),
    ("megatron-gpt-530b", 105, 20480, 529.6),
    ("megatron-gpt-1t", 128, 25600, 1008.0),
]


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "billions"), MEGATRON_T1, ids=[r[0] for r in MEGATRON_T1]
)
def test_megatron_closed_form(name: str, layers: int, hidden: int, billions: float) -> None:
    """P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), Narayanan et al. 2021 section 5.1, V=51200, s=2048."""
    model = catalog.load_model(name)
    assert (model.num_layers, model.hidden_size) == (layers, hidden)
    v, s, lay, h = 51200, 2048, layers, hidden
    closed = 12 * lay * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * lay * h))
    final_layernorm = 2 * h  # the closed form leaves out the final LayerNorm's weight and bias
    assert model.total_parameters() == pytest.approx(closed + final_layernorm, rel=1e-12)
    # Table 1 prints one decimal (two digits below 10B): agree with it to that rounding.
    assert model.total_parameters() / 1e9 == pytest.approx(billions, abs=0.051 if billions > 10 else 0.05)


ZERO_BUBBLE_T3 = [  # Qi et al. 2024 (arXiv:2401.10241) Table 3: name, layers, hidden, heads, billions
    ("zb-gpt-1.5b", 22, 2304, 24, 1.5),
    ("zb-gpt-6.2b", 30, 4096, 32, 6.2),
    ("zb-gpt-14.6b", 46, 5120, 40, 14.6),
    ("zb-gpt-28.3b", 62, 6144, 48, 28.3),
]


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "heads", "billions"), ZERO_BUBBLE_T3, ids=[r[0] for r in ZERO_BUBBLE_T3]
)
def test_zero_bubble_models_round_to_the_published_sizes(
    name: str, layers: int, hidden: int, heads: int, billions: float
) -> None:
    """The Zero Bubble paper gives each model's size to one decimal but not its vocabulary; the presets take the
    32,000-token SentencePiece vocabulary of the authors' training script. The closed form of Narayanan et al.
    (learned positions of 2048, tied embeddings) with that vocabulary rounds to every published size; Megatron's
    padded GPT-2 vocabulary (51,200) would not (6.3, 14.7, 28.4)."""
    model = catalog.load_model(name)
    assert (model.num_layers, model.hidden_size, model.num_attention_heads) == (layers, hidden, heads)
    assert model.vocab_size == 32000
    v, s = model.vocab_size, 2048
    closed = (
        12 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (v + s) / (12 * layers * hidden)) + 2 * hidden
    )
    assert model.total_parameters() == pytest.approx(closed, rel=1e-12)
    assert round(model.total_parameters() / 1e9, 1) == billions
    gpt2_vocab = closed + (51200 - v) * hidden
    assert billions == 1.5 or round(gpt2_vocab / 1e9, 1) != billions


def test_gpt3_175b() -> None:
    """Brown et al. 2020 (arXiv:2005.14165) Table 2.1: 175.0B parameters."""
    assert catalog.load_model("gpt3-175b").total_parameters() == pytest.approx(175.0e9, rel=0.005)


def test_palm_flops_per_token_closed_form() -> None:
    """PaLM appendix B: 6N + 12 L H Q T, N the non-embedding parameters, for an MHA model (Llama-2-7B)."""
    m = catalog.load_model("llama-2-7b")
    seq = 4096
    n = m.total_parameters() - m.vocab_size * m.hidden_size
    expected = 6 * n + 12 * m.num_layers * m.num_attention_heads * m.head_dim * seq
    assert m.model_flop_per_token(seq) == pytest.approx(expected, rel=1e-12)


def test_moe_flops_use_active_parameters() -> None:
    m = catalog.load_model("mixtral-8x7b")
    expert = 3 * m.hidden_size * m.moe_ffn_hidden_size
    unused = m.num_layers * (m.num_experts - m.experts_per_token) * expert
    assert m.total_parameters() - m.active_parameters() == unused
