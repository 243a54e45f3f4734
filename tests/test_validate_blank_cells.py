"""Every cell a source may leave blank: a published row with any one of its filled cells blanked (as a held-out
row of another source may come) is either priced or skipped with a reason (``Unexpressible``, a ValueError naming
what is missing or refused), never an uncaught error that would stop ``workbench validate`` for the whole file.
One row per shape: training rows of three stacks, serving rows offline, closed-loop, phase-only with wide EP and
speculative (offline rows of thousands of requests are left to the public file's own run)."""

from __future__ import annotations

import pytest

from workbench.presets.calibration import load_calibration
from workbench.validate.serving import row_case as serving_case
from workbench.validate.serving import score_serving_case
from workbench.validate.serving_csv import read_serving_rows
from workbench.validate.training import row_case as training_case
from workbench.validate.training import score_case
from workbench.validate.training_csv import DEFAULT_DATA, read_rows

CAL = load_calibration("default")
KEEP = {"id", "source_key"}


def blanked(row: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    return [(col, {**row, col: ""}) for col, value in row.items() if value and col not in KEEP]


def outcome(price, row: dict[str, str]) -> str:
    try:
        price(row)
    except ValueError as exc:  # Unexpressible included: skipped with its reason
        assert str(exc), "a skip names its reason"
        return "skipped"
    return "priced"


@pytest.mark.parametrize("row_id", ["MBRIDGE_2511-001", "TORCHTITAN_2412-001", "MOSAIC_LLMFOUNDRY-010"])
def test_a_training_row_with_any_cell_blank_is_priced_or_skipped(row_id):
    row = next(r for r in read_rows(DEFAULT_DATA) if r["id"] == row_id)
    results = {col: outcome(lambda r: score_case(training_case(r), CAL), r) for col, r in blanked(row)}
    assert results["notes"] == "priced" and results["framework"] == "priced"
    assert results["seq_len"] == "skipped"  # no default is sensible


@pytest.mark.parametrize("row_id", ["APEX-01", "LSS-02", "SGLB-04", "SGLM-02"])
def test_a_serving_row_with_any_cell_blank_is_priced_or_skipped(row_id):
    row = next(r for r in read_serving_rows() if r["id"] == row_id)
    results = {col: outcome(lambda r: score_serving_case(serving_case(r), CAL), r) for col, r in blanked(row)}
    assert results["notes"] == "priced" and results["engine"] == "priced"
    assert results["device"] == "skipped"
