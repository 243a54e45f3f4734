"""The error band (workbench.estimate.band): pools, percentiles, widening, coverage out of sample."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from workbench.estimate.band import (
    BandTable,
    Regime,
    Residual,
    band_for,
    band_table_toml,
    calibrate,
    coverage,
    read_band_table,
    unvalidated,
)
from workbench.specs.band import ErrorBand


def _res(i: int, source: str, x: float, **regime: object) -> Residual:
    base = {"stack": "megatron-core-2024", "num_devices": 64}
    return Residual(id=f"r{i}", source_key=source, regime=Regime(**{**base, **regime}), log_ratio=x)  # type: ignore[arg-type]


def test_band_is_the_pools_10_90_percentiles_about_its_median() -> None:
    xs = [math.log(1 + 0.01 * k) for k in range(-10, 11)]  # 21 residuals
    table = BandTable(residuals=tuple(_res(i, f"S{i % 3}", x) for i, x in enumerate(xs)))
    band = band_for(Regime(stack="megatron-core-2024", num_devices=64), table)
    lo, hi = np.quantile(xs, [0.1, 0.9])  # numpy's linear interpolation is the reference
    assert band.low_frac == pytest.approx(math.exp(lo)) and band.high_frac == pytest.approx(math.exp(hi))
    assert band.num_residuals == 21 and not band.widened and band.coverage_frac == 0.8
    stretched = band_for(
        Regime(stack="megatron-core-2024", num_devices=64),
        BandTable(residuals=table.residuals, inflation=2.0),
    )
    mid = float(np.median(xs))
    assert math.log(stretched.high_frac) == pytest.approx(mid + 2 * (hi - mid))


def test_pool_prefers_the_same_stack_features_and_scale() -> None:
    near = [_res(i, f"A{i % 2}", 0.5) for i in range(8)]  # megatron-core, 64 devices: +0.5
    far = [_res(100 + i, f"B{i % 2}", -0.5, num_devices=4096) for i in range(8)]
    other = [_res(200 + i, f"C{i % 2}", 0.0, stack="torchtitan-2024") for i in range(8)]
    table = BandTable(residuals=tuple(near + far + other))
    band = band_for(Regime(stack="megatron-core-2024", num_devices=128), table)
    assert band.low_frac == pytest.approx(math.exp(0.5)) and band.pool.startswith("same stack and features")
    # at 2048 devices the 4096-device runs are within 4x, the 64-device ones are not
    band = band_for(Regime(stack="megatron-core-2024", num_devices=2048), table)
    assert band.high_frac == pytest.approx(math.exp(-0.5))


def test_unvalidated_regime_is_widened_and_says_why() -> None:
    table = BandTable(
        residuals=tuple(_res(i, f"A{i % 2}", 0.1 * (i % 5 - 2)) for i in range(20)),
        inflation=1.0,
        widening=2.0,
    )
    plain = band_for(Regime(stack="megatron-core-2024", num_devices=64), table)
    zero3 = band_for(Regime(stack="megatron-core-2024", num_devices=1024, zero3=True), table)
    assert zero3.widened and zero3.notes == ("no published run within 4x of this scale (1024 devices)",)
    zero3_near = band_for(Regime(stack="megatron-core-2024", num_devices=128, zero3=True), table)
    assert zero3_near.notes == ("no published run within 4x of this scale (128 devices) uses ZeRO-3",)
    assert math.log(zero3_near.high_frac / zero3_near.low_frac) == pytest.approx(
        2 * math.log(plain.high_frac / plain.low_frac)
    )
    assert unvalidated(Regime(stack="deepspeed-2021", num_devices=64), table.residuals) == (
        "no published run of deepspeed-2021 is in the validation set",
    )


def test_calibrated_band_covers_80_percent_of_exchangeable_residuals_out_of_sample() -> None:
    rng = random.Random(7)
    residuals = tuple(_res(i, f"S{i % 10}", rng.gauss(0.0, 0.1)) for i in range(400))
    table = calibrate(BandTable(residuals=residuals))
    cov = coverage(table)
    assert 0.77 <= cov["overall"] <= 0.83
    # i.i.d. normal residuals: the 10-90 % spread needs almost no stretch (1.2816 sigma each side)
    assert 0.9 <= table.inflation <= 1.15
    band = band_for(Regime(stack="megatron-core-2024", num_devices=64), table)
    assert math.log(band.high_frac) == pytest.approx(1.2816 * 0.1 * table.inflation, abs=0.025)


def test_band_table_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import tomli_w

    table = BandTable(
        residuals=(_res(0, "A", 0.25, zero3=True, fp8=True, num_devices=512),),
        inflation=1.3,
        widening=1.5,
        generated="2026-12-07 at commit abc",
        source="test",
    )
    path = tmp_path / "band.toml"
    path.write_bytes(tomli_w.dumps(band_table_toml(table)).encode())
    assert read_band_table(path) == table
    path.write_text('inflation = "x"\n')
    with pytest.raises(ValueError, match="band.toml: not an error-band table"):
        read_band_table(path)


def test_error_band_ranges_and_rejection() -> None:
    band = ErrorBand(low_frac=0.8, high_frac=1.25)
    assert band.time_range(10.0) == pytest.approx((8.0, 12.5))
    assert band.throughput_range(100.0) == pytest.approx((80.0, 125.0))
    with pytest.raises(ValueError, match="low_frac"):
        ErrorBand(low_frac=1.2, high_frac=1.1)


def test_estimates_carry_the_committed_band() -> None:
    from workbench.estimate.analytic import estimate_plan
    from workbench.estimate.band import load_band_table
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.specs.plan import ParallelPlan, Workload

    if load_band_table() is None:
        pytest.skip("no committed band table")
    est = estimate_plan(
        load_model("llama-3.1-8b"),
        load_cluster("dgx-h100", num_nodes=1),
        Workload(seq_len=8192, global_batch_size=64),
        ParallelPlan(tp=1, pp=1, dp=8, micro_batch_size=1, zero_stage=1),
        calibration="default",
    )
    assert est.band is not None and est.band.low_frac < 1.5 and est.band.high_frac > 0.6
    summary = est.summary()["band"]
    assert summary["step_time_low_s"] == pytest.approx(est.step_time_s / est.band.high_frac)


def test_committed_band_covers_75_to_85_percent_of_residuals_out_of_sample() -> None:
    """Issue 48's calibration target: each residual scored against the band read without its own source."""
    from workbench.estimate.band import load_band_table

    table = load_band_table()
    if table is None:
        pytest.skip("no committed band table")
    cov = coverage(table)
    assert cov["num_residuals"] > 200 and 0.75 <= cov["overall"] <= 0.85
    assert table.widening >= 1.0
