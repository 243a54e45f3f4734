"""workbench.presets.profile_table: round trip, lookup, interpolation flagging, device and shape refusal (no torch)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from workbench_backends.shrink import shrink_model

from workbench.presets.catalog import load_model, resolve
from workbench.presets.hf_config import load_json_object, shrunk_hf_config
from workbench.presets.profile_table import OP_COLUMNS, find_profile, read_profile, shape_key, write_profile

SPEC = replace(
    load_model("llama-3.1-8b"),
    name="tiny",
    num_layers=2,
    hidden_size=256,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    ffn_hidden_size=768,
    vocab_size=4000,
)


def _row(op: str, mbs: int, seq: int = 128, tp: int = 1) -> dict:
    t = 1e-3 * mbs + 2e-4  # affine in the batch: a closed form to interpolate against
    return {
        "op": op,
        "tp": tp,
        "cp": 1,
        "ep": 1,
        "micro_batch_size": mbs,
        "seq_len": seq,
        "num_tokens": mbs * seq,
        "forward_s": t,
        "backward_s": 2 * t,
        "backward_input_s": t,
        "backward_weight_s": t,
        "forward_spread_frac": 0.0,
        "backward_spread_frac": 0.0,
        "backward_input_spread_frac": 0.0,
        "backward_weight_spread_frac": 0.0,
        "activation_bytes": 1000 * mbs,
        "peak_allocated_bytes": None,
        "num_parameters": 10,
        "num_repeats": 5,
    }


def _write(tmp: Path, device_id: str = "host-cpu", **manifest_extra: float) -> Path:
    ops = pl.DataFrame([_row(op, b) for op in ("embedding", "layer", "head") for b in (1, 4)])
    manifest = {
        "model": SPEC.to_dict(),
        "device_id": device_id,
        "device_kind": "cpu",
        "device_name": "test cpu",
        "dtype": "fp32",
        "device_peak_flop_per_s": 1e11,
        "device_memory_bytes_per_s": 1e10,
        "optimizer_s_per_parameter": 1e-8,
        "created_at": "2026-01-01T00:00:00+00:00",
        **manifest_extra,
    }
    return write_profile(tmp / device_id, manifest, ops)


def test_round_trip_keeps_schema_and_values(tmp_path: Path) -> None:
    prof = read_profile(_write(tmp_path))
    assert list(prof.ops.columns) == list(OP_COLUMNS)
    assert prof.manifest["columns"]["forward_s"] == "s"
    assert prof.model == SPEC
    cost = prof.op_cost("layer", tp=1, cp=1, ep=1, micro_batch_size=4, seq_len=128)
    assert cost.source == "measured" and cost.forward_s == pytest.approx(4.2e-3)


def test_write_refuses_to_overwrite(tmp_path: Path) -> None:
    _write(tmp_path)
    with pytest.raises(FileExistsError, match="--force"):
        _write(tmp_path)


def test_interpolation_is_flagged_and_exact_for_affine_costs(tmp_path: Path) -> None:
    prof = read_profile(_write(tmp_path))
    mid = prof.op_cost("layer", tp=1, cp=1, ep=1, micro_batch_size=2, seq_len=128)
    assert mid.source == "interpolated" and "between 1 and 4" in mid.note
    assert mid.forward_s == pytest.approx(2.2e-3) and mid.activation_bytes == pytest.approx(2000)
    far = prof.op_cost("layer", tp=1, cp=1, ep=1, micro_batch_size=8, seq_len=128)
    assert far.source == "extrapolated" and far.forward_s == pytest.approx(4.2e-3 * 2)


def test_missing_shape_names_the_command(tmp_path: Path) -> None:
    prof = read_profile(_write(tmp_path))
    with pytest.raises(LookupError, match=r"workbench profile --model tiny .* --tp 2 .*--seq-len 128"):
        prof.op_cost("layer", tp=2, cp=1, ep=1, micro_batch_size=1, seq_len=128)


def test_never_taken_from_another_device_or_shape(tmp_path: Path) -> None:
    _write(tmp_path, "host-cpu")
    assert find_profile(tmp_path, replace(SPEC, num_layers=8), "host-cpu", "fp32").device_id == "host-cpu"
    with pytest.raises(
        LookupError, match="on device 'h200-sxm-141gb'.*workbench profile --model tiny --device cuda"
    ):
        find_profile(tmp_path, SPEC, "h200-sxm-141gb", "fp32")
    with pytest.raises(LookupError, match="no profile"):
        find_profile(tmp_path, replace(SPEC, hidden_size=512), "host-cpu", "fp32")
    with pytest.raises(LookupError, match="no profile"):
        find_profile(tmp_path, SPEC, "host-cpu", "bf16")


def test_corrupt_manifest(tmp_path: Path) -> None:
    folder = _write(tmp_path)
    (folder / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_profile(folder)


def test_shrink_keeps_ratios_and_reads_back_from_config() -> None:
    base = load_model("llama-3.1-8b")
    small = shrink_model(base, num_layers=2, hidden_size=512)
    assert small.name == "llama-3.1-8b-L2-H512"
    assert (small.num_attention_heads, small.num_key_value_heads, small.head_dim) == (8, 2, 64)  # 32:8 kept
    assert small.ffn_hidden_size == 1792  # 14336 / 8
    cfg = shrunk_hf_config(load_json_object(resolve("model", "llama-3.1-8b")), small)
    assert cfg is not None and cfg["num_hidden_layers"] == 2
    moe = shrink_model(load_model("mixtral-8x7b"), num_layers=2, hidden_size=256)
    assert (moe.num_experts, moe.experts_per_token, moe.moe_ffn_hidden_size) == (8, 2, 896)
    assert shrunk_hf_config(load_json_object(resolve("model", "mixtral-8x7b")), moe) is not None
    with pytest.raises(ValueError, match="--hidden must be a multiple of 64"):
        shrink_model(base, hidden_size=100)
    assert shape_key(small) == shape_key(replace(small, name="x", num_layers=7))


def test_a_manifest_written_before_a_field_existed_reads_as_its_default() -> None:
    """A stored model dict without the later fields (the GLU clamp, expert biases, the RoPE scaling) matches the
    model it was recorded from; the RoPE scaling never enters the shape (it changes frequencies, not kernels),
    while a clamp does."""
    llama = load_model("llama-3.1-8b")  # rope_scaling llama3
    stored = {
        k: v for k, v in llama.to_dict().items() if k not in ("glu_clamp", "expert_bias", "rope_scaling")
    }
    assert shape_key(stored) == shape_key(llama) == shape_key(replace(llama, rope_scaling=""))
    assert "rope_scaling" not in shape_key(llama)
    assert shape_key(stored) != shape_key(replace(llama, glu_clamp=7.0))
