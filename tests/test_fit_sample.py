"""What a fit learns from: rows the source publishes inconsistently (confidence ``low``) are scored, never fitted."""

from __future__ import annotations

import dataclasses

from workbench.presets.calibration import load_calibration
from workbench.validate import DEFAULT_DATA, prepare, read_rows
from workbench.validate.fit import FIT_ROWS_PER_SOURCE, UNFITTED_CONFIDENCE, _fit_sample, fit_constants
from workbench.validate.training import score


def _cases(ids: set[str] | None = None):  # type: ignore[no-untyped-def]
    rows = read_rows(DEFAULT_DATA)
    return prepare([r for r in rows if ids is None or r["id"] in ids]).cases


def test_the_sample_holds_no_low_confidence_row_and_spreads_the_rest() -> None:
    cases = _cases()
    sample = _fit_sample(cases)
    assert all(c.row["confidence"] != UNFITTED_CONFIDENCE for c in sample)
    low = {c.id for c in cases if c.row["confidence"] == UNFITTED_CONFIDENCE}
    assert {"MBRIDGE_2511-018", "MBRIDGE_2511-025"} <= low  # the table and the recipe disagree
    # the sources' eligible rows, counted from the file: min(eligible, FIT_ROWS_PER_SOURCE) each
    eligible: dict[str, int] = {}
    for c in cases:
        has_metric = any(
            c.row.get(m, "").strip()
            for m in (
                "measured_step_time_s",
                "measured_tokens_per_s_per_device",
                "measured_tflops_per_device",
                "measured_mfu",
            )
        )
        if c.row["confidence"] != UNFITTED_CONFIDENCE and has_metric:
            eligible[c.source_key] = eligible.get(c.source_key, 0) + 1
    per_source: dict[str, int] = {}
    for c in sample:
        per_source[c.source_key] = per_source.get(c.source_key, 0) + 1
    assert per_source == {k: min(n, FIT_ROWS_PER_SOURCE) for k, n in eligible.items()}


def test_a_low_confidence_row_moves_no_constant_but_is_still_scored() -> None:
    """Fitting a high-confidence row alone and with a low-confidence row of the same stack gives the same
    constants; the low row keeps its own prediction and error."""
    base = dataclasses.replace(load_calibration("default"), fits={})
    alone = fit_constants(_cases({"MBRIDGE_2511-019"}), base)
    both_cases = _cases({"MBRIDGE_2511-019", "MBRIDGE_2511-025"})
    both = fit_constants(both_cases, base)
    assert both == alone
    scored = score(prepare([c.row for c in both_cases]), dataclasses.replace(base, fits=both))["rows"]
    assert {r["id"] for r in scored if r["ape"] is not None} == {"MBRIDGE_2511-019", "MBRIDGE_2511-025"}
