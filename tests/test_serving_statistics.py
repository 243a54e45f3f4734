"""How the serving validation reads a source's statistics: APEX+'s token-weighted TPOT and the counters its runs
accumulate over consecutive traces (``workbench.validate.serving_csv``, ``workbench.validate.serving``)."""

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


# microsoft/apex_plus@8769096 vllm/results/llama_{lmsys,creation,summarization}_05_validation_4TP.txt: the
# "vLLM TTFT" and "vLLM TPOT" lines (seconds) and "vLLm output len sum" of the three traces that vllm/scale_4TP.sh
# serves one after another on one server (1,024, 512 and 1,302 requests); trace.py divides the cumulative
# /metrics sums by the cumulative counts.
LMSYS = (0.038234931882470846, 0.02014868504972794, 1024, 49161)
CREATION = (0.04547810911511382, 0.02529852840979572, 512, 579427)
SUMMARIZATION = (0.17058790091312293, 0.024770828612817323, 1302, 202882)


def _alone(
    before: list[tuple[float, float, int, int]], cum: tuple[float, float, int, int]
) -> tuple[float, float]:
    """(TTFT, TPOT) of the last trace alone from the cumulative figures after it and after the one before it."""
    n_before, g_before = sum(b[2] for b in before), sum(b[3] for b in before)
    ttft_before, tpot_before = before[-1][0], before[-1][1]
    ttft = (cum[0] * (n_before + cum[2]) - ttft_before * n_before) / cum[2]
    tpot = (cum[1] * (g_before + cum[3]) - tpot_before * g_before) / cum[3]
    return ttft, tpot


@pytest.mark.parametrize(
    ("row_id", "before", "cum"),
    [("APEX-07", [LMSYS], CREATION), ("APEX-09", [LMSYS, CREATION], SUMMARIZATION)],
)
def test_apex_4tp_rows_carry_their_own_trace_not_the_servers_running_totals(
    row_id: str, before: list[tuple[float, float, int, int]], cum: tuple[float, float, int, int]
) -> None:
    rows = {r["id"]: r for r in read_serving_rows(DEFAULT_SERVING_DATA)}
    measured = row_measured(rows[row_id])
    ttft, tpot = _alone(before, cum)
    assert measured["ttft_mean_s"] == pytest.approx(ttft, rel=1e-3)
    assert measured[TOKEN_WEIGHTED_TPOT] == pytest.approx(tpot, rel=1e-3)
    assert "scale_4TP.sh" in rows[row_id]["notes"]
