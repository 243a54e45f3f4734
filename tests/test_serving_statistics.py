"""How the serving validation reads a source's statistics: APEX+'s token-weighted TPOT
(``workbench.validate.serving_csv``, ``workbench.validate.serving``)."""

from __future__ import annotations

import polars as pl
import pytest

from workbench.serving.results import token_weighted_tpot_s
from workbench.validate.serving import METRIC_GROUPS
from workbench.validate.serving_csv import (
    DEFAULT_SERVING_DATA,
    TOKEN_WEIGHTED_TPOT,
    read_serving_rows,
    row_measured,
)


def test_token_weighted_tpot_is_decode_time_over_all_generated_tokens() -> None:
    # two requests: 3 tokens decoded in 0.2 s after the first, 5 tokens in 0.8 s; by hand (0.2 + 0.8) / (3 + 5),
    # where the per-request mean of the simulator's TPOT is (0.2 / 2 + 0.8 / 4) / 2 = 0.15
    req = pl.DataFrame({"first_token_s": [1.0, 2.0], "finish_s": [1.2, 2.8], "output_tokens": [3, 5]})
    assert token_weighted_tpot_s(req) == pytest.approx(1.0 / 8)
    assert METRIC_GROUPS[TOKEN_WEIGHTED_TPOT] == "tpot"


def test_row_measured_keys_a_token_weighted_tpot_by_its_statistic_notes() -> None:
    row = {"measured_tpot_ms_mean": "20.0", "measured_ttft_ms_mean": "40.0"}
    assert row_measured(row | {"statistic_notes": "TPOT per request, averaged over requests"}) == {
        "tpot_mean_s": pytest.approx(0.020), "ttft_mean_s": pytest.approx(0.040),
    }  # fmt: skip
    assert row_measured(row | {"statistic_notes": "TPOT = ... (token-weighted, ITL-like)"}) == {
        TOKEN_WEIGHTED_TPOT: pytest.approx(0.020), "ttft_mean_s": pytest.approx(0.040),
    }  # fmt: skip


def test_every_apex_row_is_scored_against_a_token_weighted_tpot() -> None:
    # APEX+'s trace.py computes every row's TPOT as tpot_sum / num_gen_tokens (microsoft/apex_plus@8769096), and
    # the reference copy's statistic_notes says so for each APEX row that has a TPOT
    rows = [r for r in read_serving_rows(DEFAULT_SERVING_DATA) if r["id"].startswith("APEX-")]
    with_tpot = [r for r in rows if r.get("measured_tpot_ms_mean")]
    assert with_tpot
    for r in with_tpot:
        assert TOKEN_WEIGHTED_TPOT in row_measured(r) and "tpot_mean_s" not in row_measured(r), r["id"]
