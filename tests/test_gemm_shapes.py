"""Weight GEMMs priced at their own measured shape (``workbench.presets.gemm_shapes``): the series read from the
measured CSVs (efficiency = 2 m n k / time / peak, by hand), the interpolation in ln M, and a decode layer of
Llama 3.1 8B on the H200 costing what the committed measurements of its own matrices took."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from workbench.presets import gemm_shapes
from workbench.presets.calibration import Calibration, load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.serving.cost import ReplicaCost
from workbench.specs.serving import ServingDType, ServingPlan

H200_PEAK_FP8 = 1978.9e12  # profiles/hardware/h200-sxm-141gb.toml, dense fp8


def _series_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[dict]) -> tuple:
    path = tmp_path / "gemm.csv"
    pl.DataFrame(rows).write_csv(path)
    monkeypatch.setitem(gemm_shapes.MEASURED_GEMM_FILES, "h200-sxm-141gb", (str(path),))
    gemm_shapes.measured_gemm_series.cache_clear()
    try:
        return gemm_shapes.measured_gemm_series("h200-sxm-141gb", "fp8")
    finally:
        gemm_shapes.measured_gemm_series.cache_clear()


def test_series_are_forward_rows_at_the_measured_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def row(dtype: str, m: int, n: int, k: int, what: str, time_s: float) -> dict:
        return {"dtype": dtype, "m": m, "n": n, "k": k, "what": what, "time_s": time_s}

    series = _series_from(tmp_path, monkeypatch, [
        row("fp8", 128, 1000, 2000, "a fwd", 4e-6),
        row("fp8", 512, 1000, 2000, "a fwd", 8e-6),
        row("fp8", 512, 1000, 2000, "a dgrad", 1e-6),  # not a forward GEMM
        row("bf16", 512, 1000, 2000, "a fwd", 1e-6),  # another dtype
        row("fp8", 256, 3000, 3000, "b fwd", 9e-6),  # one token count only: no series
        row("fp8", 64, 8000, 8000, "c fwd", 20e-6),
        row("fp8", 1024, 8000, 8000, "c fwd", 90e-6),
    ])  # fmt: skip
    assert [(s.n, s.k) for s in series] == [(1000, 2000), (8000, 8000)]
    e128, e512 = 2 * 128 * 2e6 / 4e-6 / H200_PEAK_FP8, 2 * 512 * 2e6 / 8e-6 / H200_PEAK_FP8
    assert series[0].efficiency_frac == pytest.approx((e128, e512), rel=1e-12)
    # ln 256 is halfway between ln 128 and ln 512; outside a series' token counts there is no value
    eff = gemm_shapes.shape_efficiency_frac(series[:1], np.array([256.0, 64.0, 1024.0, 0.0]), 1000, 2000)
    assert eff[0] == pytest.approx((e128 + e512) / 2, rel=1e-12)
    assert np.isnan(eff[1:]).all()
    # at 256 tokens both series span: the nearer shape in log wins (|ln 2| + |ln 1.5| = 1.10 against
    # |ln 4| + |ln 2.67| = 2.37 for (2000, 3000); (6000, 6000) is nearer (8000, 8000): 0.58 against 2.89)
    e_c = gemm_shapes.shape_efficiency_frac(series, np.array([256.0]), 2000, 3000)[0]
    assert e_c == pytest.approx((e128 + e512) / 2, rel=1e-12)
    assert gemm_shapes.shape_efficiency_frac(series, np.array([256.0]), 6000, 6000)[0] != pytest.approx(e_c)
    assert gemm_shapes.shape_efficiency_frac(series, np.array([80.0]), 1000, 2000)[0] == pytest.approx(
        np.interp(math.log(80), [math.log(64), math.log(1024)], [
            2 * 64 * 64e6 / 20e-6 / H200_PEAK_FP8, 2 * 1024 * 64e6 / 90e-6 / H200_PEAK_FP8])
    )  # fmt: skip
    with pytest.raises(ValueError, match="n and k"):
        gemm_shapes.shape_efficiency_frac(series, np.array([256.0]), 0.0, 1.0)


def test_a_missing_measured_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(gemm_shapes.MEASURED_GEMM_FILES, "h200-sxm-141gb", (str(tmp_path / "none.csv"),))
    gemm_shapes.measured_gemm_series.cache_clear()
    try:
        with pytest.raises(ValueError, match="none.csv"):
            gemm_shapes.measured_gemm_series("h200-sxm-141gb", "fp8")
    finally:
        gemm_shapes.measured_gemm_series.cache_clear()


def _measured_s(path: str, what: str, tokens: int = 256) -> float:
    rows = pl.read_csv(Path(__file__).parents[1] / "profiles" / "measured" / path)
    pick = (pl.col("what") == what) & (pl.col("dtype") == "fp8") & (pl.col("m") == tokens)
    (time_s,) = rows.filter(pick)["time_s"]
    return float(time_s)


def test_a_decode_layer_costs_the_measured_time_of_its_own_matrices() -> None:
    """Llama 3.1 8B's MLP (4096 -> 2 x 14336 fused gate and up, 14336 -> 4096) has Mixtral 8x7B's expert matrices:
    at 256 tokens on the H200 its two GEMMs take what benchmarks/probe_expert_gemms.py measured for them, at 32,768
    what the microbench measured for Llama 3.1 8B's own linears (the only rows of that shape at those token
    counts); the FLOP curve prices the pair at 256 tokens 15-30% lower."""
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h200")
    plan = ServingPlan(tp=1, weight_dtype=ServingDType.FP8, activation_dtype=ServingDType.FP8)
    layers = ReplicaCost.of(model, cluster, plan, load_calibration("default")).layers
    for tokens, up, down, path in (
        (256, "mixtral-8x7b fc1 t256 fwd", "mixtral-8x7b fc2 t256 fwd", "real-runs/expert-gemms-h200.csv"),
        (32768, "llama-3.1-8b tp1 fc1 fwd", "llama-3.1-8b tp1 fc2 fwd", "kernels-h200-sxm-141gb/gemm.csv"),
    ):
        t = np.array([float(tokens)])
        measured = _measured_s(path, up, tokens) + _measured_s(path, down, tokens)
        assert layers._shape_delta_s(layers._mlp_matrices(t), [], t)[0] == pytest.approx(measured, rel=1e-9)
    t = np.array([256.0])
    curve = layers._gemm_s([layers._mlp_op(t, model.mlp_parameters(), model.ffn_hidden_size)])[0]
    assert 1.15 < (_measured_s("real-runs/expert-gemms-h200.csv", "mixtral-8x7b fc1 t256 fwd")
                   + _measured_s("real-runs/expert-gemms-h200.csv", "mixtral-8x7b fc2 t256 fwd")) / curve < 1.3  # fmt: skip


def test_without_a_measured_table_the_curve_alone_prices() -> None:
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h200")
    plan = ServingPlan(tp=1, weight_dtype=ServingDType.FP8, activation_dtype=ServingDType.FP8)
    assert ReplicaCost.of(model, cluster, plan, Calibration()).layers._shapes == ()
    fp4 = ServingPlan(tp=1, weight_dtype=ServingDType.FP4, activation_dtype=ServingDType.FP4)
    assert (
        ReplicaCost.of(model, load_cluster("dgx-h200"), fp4, load_calibration("default")).layers._shapes == ()
    )
