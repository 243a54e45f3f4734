"""Rows read as their authors meant (workbench.validate.readings): the FLOP count a row's own numbers imply."""

from __future__ import annotations

import pytest

from workbench.presets.catalog import load_device, load_model
from workbench.validate.readings import read_arithmetic

GPT_1T = {"l": 128, "h": 25600, "V": 51200, "s": 2048}
"""Megatron GPT 1T (Narayanan et al. SC21 Table 1): layers, hidden size, vocabulary, sequence."""


def _narayanan(recompute: bool) -> float:
    """FLOPs per token, Narayanan et al. SC21 eq. 3 over B*s: 96 l h^2 (1 + s/6h + V/16lh) with full
    recompute; 72 l h^2 (1 + s/6h + V/12lh) without (the same derivation with three passes, not four)."""
    layers, h, v, s = GPT_1T["l"], GPT_1T["h"], GPT_1T["V"], GPT_1T["s"]
    if recompute:
        return 96 * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    return 72 * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))


def _row(tflops: float, tokens_per_s: float, dtype: str = "") -> dict[str, str]:
    return {
        "measured_tflops_per_device": f"{tflops}",
        "measured_tokens_per_s_per_device": f"{tokens_per_s}",
        "dtype": dtype,
    }


@pytest.mark.parametrize(
    ("recompute", "definition", "settled"), [(True, "hardware", "full"), (False, "model", None)]
)
def test_implied_flop_count_tells_whether_recompute_was_counted(
    recompute: bool, definition: str, settled: str | None
) -> None:
    model, device = load_model("megatron-gpt-1t"), load_device("a100-sxm4-80gb")
    tps = 50.0
    r = read_arithmetic(
        _row(tps * _narayanan(recompute) / 1e12, tps), model, device, seq_len=GPT_1T["s"], num_devices=3072
    )
    assert r.flops_definition == definition and r.recompute == settled and r.dtype is None
    assert r.implied_flop_per_token == pytest.approx(_narayanan(recompute))
    assert r.notes[0].startswith("flops:implied")


def test_model_tflops_above_the_bf16_peak_imply_fp8() -> None:
    model, device = load_model("megatron-gpt-1t"), load_device("h100-sxm5-80gb")
    # 1,100 model TFLOP/s per device: above the H100's 989 BF16 dense TFLOP/s (datasheet), below its FP8 peak
    tps = 1100e12 / _narayanan(False)
    r = read_arithmetic(_row(1100.0, tps, dtype="bf16"), model, device, seq_len=2048, num_devices=8)
    assert (
        r.dtype == "fp8" and "above the BF16 peak 989" in r.notes[-1] and "the row says bf16" in r.notes[-1]
    )
    below = read_arithmetic(
        _row(600.0, 600e12 / _narayanan(False)), model, device, seq_len=2048, num_devices=8
    )
    assert below.dtype is None


def test_a_row_with_one_metric_reads_nothing() -> None:
    model, device = load_model("megatron-gpt-1t"), load_device("a100-sxm4-80gb")
    r = read_arithmetic({"measured_tflops_per_device": "150"}, model, device, seq_len=2048, num_devices=8)
    assert r.notes == () and r.flops_definition is None
