"""MLPerf Server rows without a request count: priced over the run LoadGen schedules (workbench.validate.serving_loadgen)."""

from __future__ import annotations

import pytest

from workbench.presets.calibration import load_calibration
from workbench.serving.steady import STEADY_WAVES
from workbench.specs.serving import Arrival
from workbench.validate.rows import Unexpressible
from workbench.validate.serving import case_predictions, row_case
from workbench.validate.serving_csv import read_serving_rows
from workbench.validate.serving_datasets import load_datasets
from workbench.validate.serving_loadgen import (
    LOADGEN_SERVER_RULES,
    LoadGenServerRules,
    loadgen_server_queries,
)
from workbench.validate.serving_workload import row_workload

V40 = LOADGEN_SERVER_RULES["mlperf-llama2-70b-openorca"]

NOT_MLPERF = {
    "source_key": "SOMEONE_ELSE",
    "input_tokens_dist": "fixed",
    "output_tokens_dist": "fixed",
    "input_tokens_mean": "222",
}
"""What makes a copy of MLP-02 a Poisson row of another benchmark: prompts not drawn from an MLPerf data set."""


def by_id(row_id: str) -> dict[str, str]:
    return next(r for r in read_serving_rows() if r["id"] == row_id)


def test_the_v40_rules_are_mlperf_confs():
    # mlcommons/inference v4.0 mlperf.conf (v4.1, v5.0 and v5.1 alike): *.Server.min_duration = 600000 (ms);
    # llama2-70b.*.performance_sample_count_override = 24576; llama2-70b.Server.sample_concatenate_permutation = 1;
    # test_settings.h: uint64_t min_query_count = 100
    assert (V40.min_duration_s, V40.min_query_count, V40.performance_sample_count, V40.equal_issue) == (
        600.0,
        100,
        24576,
        True,
    )
    # the same count as the data set the rows name
    assert V40.performance_sample_count == load_datasets()["mlperf-llama2-70b-openorca"].samples


@pytest.mark.parametrize(
    ("rate", "expected"),
    [
        # 70.98/s x 600 s = 42,588 arrivals: the padded minimum (24,576) is reached first and grows by one
        # permutation, to 49,152 = 2 x 24,576, which the scheduled time crosses
        (70.98, 2 * 24576),
        (91.24, 3 * 24576),  # 54,744 arrivals -> 73,728
        (1.0, 24576),  # 600 arrivals: min_query_count 100 padded to one whole permutation
        (24576 / 600, 24576),  # exactly one permutation's worth
    ],
)
def test_loadgen_pads_the_servers_queries_to_whole_permutations(rate, expected):
    assert loadgen_server_queries(rate, V40) == expected


def test_without_equal_issue_the_run_is_its_duration_or_the_minimum():
    plain = LoadGenServerRules(
        min_duration_s=600.0,
        min_query_count=270336,
        performance_sample_count=24576,
        equal_issue=False,
        source="s",
    )
    assert loadgen_server_queries(10.0, plain) == 270336
    assert loadgen_server_queries(1000.0, plain) == 600000


def test_a_rate_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="rate_per_s must be > 0, got 0"):
        loadgen_server_queries(0.0, V40)


def test_the_server_rows_are_priced_over_loadgens_run_and_say_so():
    assumed: list[str] = []
    workload = row_workload(by_id("MLP-02"), assumed)
    assert workload.arrival is Arrival.POISSON and workload.request_rate_per_s == 70.98
    assert workload.num_requests == 49152
    assert any("num_requests=49152 (blank): the queries MLPerf LoadGen schedules" in a for a in assumed)
    assert row_workload(by_id("MLP-04"), []).num_requests == 73728


def test_a_poisson_row_of_another_source_without_a_count_is_skipped_only_without_an_engine_batch():
    row = by_id("MLP-02") | NOT_MLPERF
    with pytest.raises(Unexpressible, match="num_requests is blank"):
        row_workload(row, [])
    assumed: list[str] = []
    assert row_workload(row, assumed, 512).num_requests == STEADY_WAVES * 512
    assert any("the Poisson run priced in steady state" in a for a in assumed)


def test_a_poisson_run_of_another_source_is_scored_in_steady_state_at_its_arrival_rate():
    """Closed form: below capacity, the completions in the steady window (warm-up and drain left out) come at the
    arrival rate; the run is STEADY_WAVES x the deployment's sequences (4 engines x 128)."""
    row = (
        by_id("MLP-02")
        | NOT_MLPERF
        | {
            "max_batch_size": "128",
            "request_rate_per_s": "40",
        }
    )
    case = row_case(row)
    assert case.workload is not None and case.workload.num_requests == STEADY_WAVES * 128 * 4
    assert case.steady_concurrency == 128 * 4
    values = case_predictions(case, load_calibration("default"))
    assert values["requests_per_s"] == pytest.approx(40.0, rel=0.05)
    assert values["output_tokens_per_s"] == pytest.approx(40.0 * case.workload.output_tokens, rel=0.05)
    assert row_case(by_id("MLP-02")).steady_concurrency is None  # LoadGen's run is scored whole


def test_a_server_run_that_keeps_up_completes_its_arrival_rate():
    """Closed form: a Poisson run below the deployment's capacity completes requests at the arrival rate, and
    LoadGen's completed-token rate is that rate times the output length, less the drain (the last request's
    duration) over the ~692 s run."""
    case = row_case(by_id("MLP-02"))
    assert case.workload is not None
    values = case_predictions(case, load_calibration("default"))
    rate, n = case.workload.request_rate_per_s, case.workload.num_requests
    assert rate is not None
    span_s = n / rate  # the scheduled arrivals span ~692 s
    assert values["requests_per_s"] == pytest.approx(rate, rel=0.02)
    assert values["output_tokens_per_s"] == pytest.approx(rate * case.workload.output_tokens, rel=0.02)
    # completions over the time until all are done: below the rate by at most a 60 s drain
    assert rate * span_s / (span_s + 60.0) <= values["requests_per_s"] <= rate * 1.01


def test_loadgens_rules_follow_the_benchmark_data_set_not_the_source_key():
    """A Server row of the llama2-70b benchmark from another submitter or round (another source key) is priced over
    LoadGen's run as the v4.0 rows are; the same arrival rate gives the same query count (49,152 at 70.98/s)."""
    other = by_id("MLP-02") | {
        "id": "X-01",
        "source_key": "MLPERF_INF41_PARTNER",
        "locator": "mlcommons/inference_results_v4.1@0000000 closed/Partner/results/x/llama2-70b-99/Server/...",
    }
    assumed: list[str] = []
    assert row_workload(other, assumed).num_requests == 2 * 24576
    assert any("MLPerf LoadGen schedules" in a for a in assumed)
    assert row_case(other).steady_concurrency is None  # scored over LoadGen's whole run
