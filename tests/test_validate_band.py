"""What validate --cv adds: residuals with regimes, constant spread over the folds, signed errors, readings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from workbench.validate import DEFAULT_DATA
from workbench.validate.band import constant_spread, signed_errors, throughput_log_ratio

ROWS = [
    {
        "id": "a",
        "source_key": "S",
        "metric": "measured_tokens_per_s_per_device",
        "predicted": 110.0,
        "measured": 100.0,
        "ape": 0.1,
    },
    {
        "id": "b",
        "source_key": "S",
        "metric": "measured_step_time_s",
        "predicted": 2.0,
        "measured": 2.5,
        "ape": 0.2,
    },
    {"id": "c", "source_key": "T", "metric": None, "predicted": None, "measured": None, "ape": None},
]


def test_residuals_are_in_throughput_terms_and_signed_errors_say_predicted_faster() -> None:
    assert throughput_log_ratio(ROWS[0]) == pytest.approx(math.log(100 / 110))
    # a step predicted shorter than it ran is a throughput predicted higher: ln(2.0 / 2.5) < 0
    assert throughput_log_ratio(ROWS[1]) == pytest.approx(math.log(2.0 / 2.5))
    assert throughput_log_ratio(ROWS[2]) is None
    signed = signed_errors(ROWS)
    assert signed["by_source"] == {"S": pytest.approx((0.1 + (2.5 / 2.0 - 1)) / 2)}
    assert signed["overall"] == pytest.approx(signed["by_source"]["S"])


def test_constant_spread_is_the_range_over_the_folds() -> None:
    result = {
        "fits": {"g": {"k": 0.8, "h": 1e-4}},
        "folds": {"A": {"g": {"k": 0.7, "h": 2e-4}}, "B": {"g": {"k": 0.9}}, "C": {"pooled": {"k": 0.5}}},
    }
    spread = {c["constant"]: c for c in constant_spread(result)}
    assert spread["k"]["fold_min"] == 0.7 and spread["k"]["fold_max"] == 0.9 and spread["k"]["num_folds"] == 2
    assert spread["k"]["spread_frac"] == pytest.approx(0.25) and spread["k"]["fold_std"] == pytest.approx(0.1)
    assert spread["h"]["num_folds"] == 1 and spread["h"]["fold_std"] == 0.0
    # fold C left the group's source out: it applies the pooled 0.5
    assert (spread["k"]["applied_min"], spread["k"]["applied_max"]) == (0.5, 0.9)


def test_cross_validation_writes_a_band_table_that_reads_back(tmp_path: Path) -> None:
    """Two small sources (as tests/test_frameworks.py's leave-one-source-out test): every scored row becomes a
    residual with its regime; the band's coverage is reported; the table round-trips."""
    import csv

    from workbench.estimate.band import read_band_table
    from workbench.validate.band import cross_validate_with_band, write_band_table

    with DEFAULT_DATA.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        fields, rows = reader.fieldnames, list(reader)
    keep = [r for r in rows if r["source_key"] == "ZB_ICLR24"][:3] + [
        r for r in rows if r["source_key"] == "MOSAIC_LLMFOUNDRY"
    ][:3]
    data = tmp_path / "rows.csv"
    with data.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields or [])
        writer.writeheader()
        writer.writerows(keep)
    result, table = cross_validate_with_band(data, generated="today", source="test")
    scored = [r for r in result["rows"] if r["ape"] is not None]
    assert len(table.residuals) == len(scored) == 6
    assert {r.regime.stack for r in table.residuals} == {"megatron-lm-2021", "llm-foundry-2023"}
    assert {r.regime.zero3 for r in table.residuals if r.source_key == "MOSAIC_LLMFOUNDRY"} == {True}
    assert result["band"]["coverage"]["num_residuals"] == 6
    assert {c["group"] for c in result["constant_spread"]} >= {"pooled"}
    path = write_band_table(tmp_path / "band.toml", table)
    back = read_band_table(path)
    assert [(r.id, r.regime) for r in back.residuals] == [(r.id, r.regime) for r in table.residuals]
    assert [r.log_ratio for r in back.residuals] == pytest.approx(
        [r.log_ratio for r in table.residuals], abs=1e-6
    )
