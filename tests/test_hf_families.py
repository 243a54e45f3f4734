"""The day-0 families without transformers: published totals, active counts as the model cards count them, the
number of local-attention layers, the cost of those layers, and bad input refused by file, field and value."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workbench.cost.flops import attended_keys_frac
from workbench.presets.catalog import load_model
from workbench.presets.hf_config import read_hf_config, supported_list_markdown

MODELS = ROOT / "profiles" / "models"

# id: (total, active, active convention, local-attention layers, source). Conventions: "with embedding" is
# ModelSpec.active_parameters (Mixtral's "12.9B active"); "without embedding" leaves out the input embedding
# lookup (non_embedding_active_parameters), as the GPT-OSS, DeepSeek-V2 and GLM-4.5 cards do.
PUBLISHED = {
    "gemma-2-9b": (9.24e9, None, None, 21, "google/gemma-2-9b model card: 9.24B"),
    "phi-3-mini-4k": (
        3.82e9,
        None,
        None,
        32,
        "Phi-3 report arXiv:2404.14219: 3.8B; sliding_window 2047 on every layer",
    ),
    "qwen3-8b": (8.19e9, None, None, 0, "Qwen/Qwen3-8B model card: 8.2B"),
    "llama-4-scout-17b-16e": (
        109e9,
        17e9,
        "with",
        36,
        "meta-llama/Llama-4-Scout-17B-16E card: 17B active, 109B total",
    ),
    "deepseek-v2-lite": (
        15.7e9,
        2.4e9,
        "without",
        0,
        "deepseek-ai/DeepSeek-V2-Lite card: 15.7B total, 2.4B active",
    ),
    "gpt-oss-20b": (
        20.9e9,
        3.6e9,
        "without",
        12,
        "gpt-oss model card arXiv:2508.10925: 20.9B total, 3.6B active",
    ),
    "gpt-oss-120b": (116.8e9, 5.1e9, "without", 18, "gpt-oss model card: 116.8B total, 5.1B active"),
    "gemma-3-27b": (27e9, None, None, 52, "Gemma 3 report arXiv:2503.19786: 27B (text ~27.0B, vision 0.4B)"),
    "glm-4.5": (355e9, 32e9, "without", 0, "GLM-4.5 card: 355B total, 32B active"),
}


def _total_as_published(name: str) -> int:
    """Llama 4's 109B counts its vision tower; Gemma 3's 27B is the text model (the report lists vision apart)."""
    reading = read_hf_config(MODELS / f"{name}.json")
    return reading.total_with_encoder if name.startswith("llama-4") else reading.spec.total_parameters()


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_totals_active_and_local_layers(name: str) -> None:
    total, active, convention, local, _ = PUBLISHED[name]
    m = load_model(name)
    assert _total_as_published(name) == pytest.approx(total, rel=0.01)
    if active is not None:
        ours = m.active_parameters() if convention == "with" else m.non_embedding_active_parameters()
        assert ours == pytest.approx(active, rel=0.05)
    assert m.num_sliding_window_layers + m.num_chunked_attention_layers == local


def test_shared_expected_figures_agree_with_this_table() -> None:
    """The figures of ../shared/hf_configs/expected.json (when the folder is there) are the ones tested here."""
    path = ROOT.parent.parent / "shared" / "hf_configs" / "expected.json"
    if not path.is_file():
        pytest.skip("no ../shared/hf_configs beside this checkout")
    for name, fig in json.loads(path.read_text()).items():
        total, active, _, local, _ = PUBLISHED[name]
        assert (fig["total"], fig.get("active"), fig.get("sliding_layers", local)) == (total, active, local)


def test_layer_kinds_follow_transformers_defaults() -> None:
    g2, g3, scout = load_model("gemma-2-9b"), load_model("gemma-3-27b"), load_model("llama-4-scout-17b-16e")
    assert (g2.sliding_window, g2.post_norms, g2.final_logit_softcap, g2.tied_embeddings) == (
        4096,
        True,
        30.0,
        True,
    )
    assert (g3.sliding_window, g3.qk_norm, g3.vocab_size, g3.head_dim) == (1024, True, 262208, 128)
    assert (scout.attention_chunk_size, scout.num_chunked_attention_layers, scout.num_shared_experts) == (
        8192,
        36,
        1,
    )
    assert scout.num_dense_layers == 0 and scout.num_experts == 16
    notes = read_hf_config(MODELS / "llama-4-scout-17b-16e.json").notes
    assert "12 NoPE layers (no rotary embedding; global attention)" in notes


def test_local_layers_bound_attention_flops() -> None:
    """A window of w (chunk of c) keys: at s = 16w the window layers attend to (w - w^2/2s)/s of the scores,
    the chunked ones c/2s, the global ones 1/2 (closed forms of attended_keys_frac)."""
    g2 = load_model("gemma-2-9b")
    s, w = 65536.0, 4096.0
    expect = (21 * 0.5 + 21 * (w - w * w / (2 * s)) / s) / 42
    assert attended_keys_frac(g2, s) == pytest.approx(expect)
    scout = load_model("llama-4-scout-17b-16e")
    s, c = 131072.0, 8192.0
    assert attended_keys_frac(scout, s) == pytest.approx((12 * 0.5 + 36 * c / (2 * s)) / 48)
    assert attended_keys_frac(scout, 4096.0) == pytest.approx(0.5)  # shorter than a chunk: plain causal


def _cfg(name: str, **changes: object) -> dict:  # type: ignore[type-arg]
    cfg = json.loads((MODELS / f"{name}.json").read_text())
    target = cfg.get("text_config", cfg) if name.startswith(("llama-4", "gemma-3")) else cfg
    target.update(changes)
    return cfg


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        (
            "qwen3-8b",
            {"num_key_value_heads": 7},
            r"field 'num_key_value_heads' is 7; it must divide num_attention_heads = 32",
        ),
        (
            "phi-3-mini-4k",
            {"num_attention_heads": 7, "num_key_value_heads": 7},
            r"'num_attention_heads' is 7; without a 'head_dim' field it must divide hidden_size = 3072",
        ),
        (
            "gemma-2-9b",
            {"layer_types": ["sliding_attention"] * 41},
            r"field 'layer_types' has 41 entries; it must list one type per layer \(num_hidden_layers = 42\)",
        ),
        (
            "gemma-2-9b",
            {"layer_types": ["local"] * 42},
            r"field 'layer_types'\[0\] is 'local'; allowed: full_attention",
        ),
        (
            "deepseek-v2-lite",
            {"num_experts_per_tok": 65},
            r"field 'num_experts_per_tok' is 65; it must be at most n_routed_experts = 64",
        ),
        ("qwen3-8b", {"hidden_size": -4096}, r"field 'hidden_size'.*-4096"),
        (
            "llama-4-scout-17b-16e",
            {"no_rope_layers": [1, 0]},
            r"'no_rope_layers' lists 2 values; it must list one per layer \(num_hidden_layers = 48\)",
        ),
        ("llama-4-scout-17b-16e", {"moe_layers": [48]}, r"field 'moe_layers' holds 48; allowed: 0..47"),
    ],
)
def test_bad_input_names_file_field_value_and_allowed(
    name: str, changes: dict, message: str, tmp_path: Path
) -> None:  # type: ignore[type-arg]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(_cfg(name, **changes)))
    with pytest.raises(ValueError, match=message) as info:
        read_hf_config(path)
    assert str(info.value).startswith(str(path))


def test_linear_attention_is_refused_by_name() -> None:
    cfg = {
        "architectures": ["Qwen3NextForCausalLM"],
        "hidden_size": 2048,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "intermediate_size": 5120,
        "moe_intermediate_size": 512,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "vocab_size": 151936,
    }
    with pytest.raises(
        ValueError, match=r"'layer_types'\[0\] is 'linear_attention' \(Qwen3NextGatedDeltaNet\)"
    ):
        read_hf_config(cfg)


def test_defaults_applied_are_listed_in_the_notes() -> None:
    notes = read_hf_config(MODELS / "phi-3-mini-4k.json").notes
    assert "head_dim: not in the file (or null), default 96" in notes


def test_readme_supported_list_is_generated_from_the_readers() -> None:
    readme = (ROOT / "README.md").read_text()
    line = re.search(r"^Supported architectures \(generated\): (.*)$", readme, re.M)
    assert line is not None, "README.md lacks the 'Supported architectures (generated): ...' line"
    assert line.group(1) == supported_list_markdown() + "."


def test_hub_id_resolves_from_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub's cache layout: refs/main names the snapshot that holds config.json."""
    repo = tmp_path / "hub" / "models--Qwen--Qwen3-8B"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text((MODELS / "qwen3-8b.json").read_text())
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    m = load_model("Qwen/Qwen3-8B")
    assert m.name == "Qwen3-8B" and m.total_parameters() == load_model("qwen3-8b").total_parameters()
    with pytest.raises(
        ValueError,
        match=r"hub id 'meta-llama/Llama-3.1-70B': no config.json .* `hf download meta-llama/Llama-3.1-70B config.json`",
    ):
        load_model("meta-llama/Llama-3.1-70B")
