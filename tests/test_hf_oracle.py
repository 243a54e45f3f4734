"""transformers as the oracle: every config we read (model presets, test fixtures) is built by transformers on the
meta device and our ModelSpec's totals, per-layer counts and active parameters must equal its own, exactly, or
differ by a documented amount. Needs the ``[hf]`` extra (scripts/test.sh installs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workbench.presets.hf_config import read_hf_config

pytest.importorskip("transformers")
hf_meta = pytest.importorskip("workbench_backends.hf_meta")

CONFIGS = sorted((ROOT / "profiles" / "models").glob("*.json")) + sorted(
    (ROOT / "tests" / "fixtures" / "hf_configs").glob("*.json")
)

BUFFER_ROUTER_BIAS = {"DeepseekV3ForCausalLM", "Glm4MoeForCausalLM"}
"""Architectures whose router score-correction bias (``e_score_correction_bias``, one value per expert) is a
buffer in transformers (``nn.Buffer`` in DeepseekV3TopkRouter / Glm4MoeTopkRouter), not a parameter; the
checkpoints store it and ModelSpec counts it (``router_bias``), so our count is E per MoE layer above."""


def _documented_extra_per_layer(arch: str, spec) -> list[int]:  # type: ignore[no-untyped-def]
    extra = spec.num_experts if arch in BUFFER_ROUTER_BIAS and spec.router_bias else 0
    return [extra if spec.is_moe and i >= spec.num_dense_layers else 0 for i in range(spec.num_layers)]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_counts_equal_the_meta_model(path: Path) -> None:
    config = json.loads(path.read_text())
    reading = read_hf_config(path)
    spec = reading.spec
    counts = hf_meta.meta_counts(config)
    extra = _documented_extra_per_layer(reading.architecture, spec)
    ours = sorted(spec.layer_parameters(i) - extra[i] for i in range(spec.num_layers))
    assert ours == sorted(counts.layers)
    assert spec.total_parameters() - sum(extra) == counts.decoder
    assert reading.encoder_parameters == counts.encoder
    active = sorted(spec.active_layer_parameters(i) - extra[i] for i in range(spec.num_layers))
    assert active == sorted(counts.active_layers)
    assert spec.active_parameters() - sum(extra) == counts.active
    assert spec.embedding_parameters() - spec.num_learned_positions * spec.hidden_size == counts.embedding


def test_generic_path_derives_an_architecture_without_a_reader() -> None:
    """Granite 3.1 8B (GraniteForCausalLM has no hand-written reader): derived from the meta model's modules,
    equal to transformers' count and to the published 8.17B (the model page's count, rounded)."""
    from workbench.presets.hf_readers import READERS

    path = ROOT / "tests" / "fixtures" / "hf_configs" / "granite-3.1-8b.json"
    assert "GraniteForCausalLM" not in READERS
    reading = read_hf_config(path)
    assert reading.notes[0].startswith("derived from transformers ")
    spec = reading.spec
    assert (spec.num_layers, spec.head_dim, spec.ffn_hidden_size, spec.tied_embeddings) == (
        40,
        128,
        12800,
        True,
    )
    assert spec.total_parameters() == pytest.approx(8.17e9, rel=5e-3)


def test_generic_path_refuses_what_it_cannot_price_by_module() -> None:
    """OLMo 2 normalises the whole q and k projections (RMSNorm over heads x head_dim), which ModelSpec's per-head
    q/k norm does not express: the derived count disagrees with transformers' and the error names the modules."""
    cfg = {
        "architectures": ["Olmo2ForCausalLM"],
        "model_type": "olmo2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 1000,
    }
    with pytest.raises(
        ValueError, match=r"derived spec counts .* modules of the block: self_attn \(Olmo2Attention\)"
    ):
        read_hf_config(cfg)


def test_unknown_to_transformers_too_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="does not know model_type 'no_such_model'"):
        read_hf_config({"architectures": ["NoSuchForCausalLM"], "model_type": "no_such_model"})
