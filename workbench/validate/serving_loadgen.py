"""MLPerf Inference LoadGen's run length for a Server-scenario row that gives no request count, for
:mod:`workbench.validate.serving_workload`.

LoadGen's Server scenario sends Poisson arrivals at the scheduled QPS and reports over every query of the run: its
latencies over all of them, its throughput as the tokens completed over the time until the last query is done
("Completed tokens per second", ``loadgen/results.cc``). How many queries a run has is fixed by LoadGen's rules,
so a row that does not print ``num_requests`` is priced over the same run LoadGen generated (its warm-up, a few
seconds of a run of at least ten minutes, is part of LoadGen's figures too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.validate.serving_datasets import resolve_dataset


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadGenServerRules:
    """The LoadGen settings that fix a Server run's query count (``mlperf.conf`` and ``test_settings.h``)."""

    min_duration_s: float
    """``*.Server.min_duration`` (ms in the file), the scheduled time the run must cover."""
    min_query_count: int
    """``min_query_count`` (``test_settings.h`` default when ``mlperf.conf`` sets none for the model)."""
    performance_sample_count: int
    """``<model>.*.performance_sample_count_override``: the samples loaded for the performance run."""
    equal_issue: bool
    """``<model>.Server.sample_concatenate_permutation``: the query count is padded to whole permutations of the
    loaded samples."""
    source: str


def _llm_server_rules(performance_sample_count: int, source: str) -> LoadGenServerRules:
    """The Server rules every MLPerf LLM benchmark of v4.0-v5.1 runs under, but for its sample count: mlperf.conf's
    ``*.Server.min_duration = 600000`` (ms), ``<model>...sample_concatenate_permutation = 1`` (equal issue) and no
    Server ``min_query_count`` for the model (``loadgen/test_settings.h`` default 100); ``source`` says where."""
    return LoadGenServerRules(
        min_duration_s=600.0,
        min_query_count=100,
        performance_sample_count=performance_sample_count,
        equal_issue=True,
        source=source,
    )


_CONF = "mlcommons/inference loadgen/mlperf.conf (mlperf.conf at v4.0 e39003a and v4.1 379ee53; v5.0 dcd0c3e, v5.1 75f297d)"
_NO_SERVER_MIN = "no Server min_query_count for the model (loadgen/test_settings.h default 100, every round)"

LOADGEN_SERVER_RULES = {
    "mlperf-llama2-70b-openorca": _llm_server_rules(
        24576,
        "mlcommons/inference mlperf.conf, the same at v4.0 (e39003a), v4.1 (379ee53), v5.0 (dcd0c3e) and v5.1 "
        "(75f297d): *.Server.min_duration = 600000, llama2-70b.*.performance_sample_count_override = 24576, "
        "llama2-70b sample_concatenate_permutation = 1 (v4.0: Server only; later: every scenario), no llama2-70b "
        "Server min_query_count (loadgen/test_settings.h default 100); llama2-70b-interactive (v5.1) sets the same",
    ),
    "mlperf-mixtral-8x7b-openorca-gsm8k-mbxp": _llm_server_rules(
        15000,
        f"{_CONF}, the same in v4.1, v5.0 and v5.1: *.Server.min_duration = 600000, "
        "mixtral-8x7b.*.sample_concatenate_permutation = 1, mixtral-8x7b.*.performance_sample_count_override = "
        "15000 (v5.0 on; v4.1 sets none and the QSL loads the whole 15,000-sample set: language/mixtral-8x7b/"
        f"dataset.py perf_count = total_sample_count, the v4.1 submission checker requires 15000), {_NO_SERVER_MIN}",
    ),
    "mlperf-llama3.1-405b-longcontext": _llm_server_rules(
        8313,
        f"{_CONF}, the same in v5.0 and v5.1: *.Server.min_duration = 600000, "
        "llama3_1-405b.*.performance_sample_count_override = 8313, llama3_1-405b.*.sample_concatenate_permutation "
        f"= 1, {_NO_SERVER_MIN}",
    ),
    "mlperf-llama3.1-8b-cnndm": _llm_server_rules(
        13368,
        f"{_CONF}, v5.1: *.Server.min_duration = 600000, llama3_1-8b.*.performance_sample_count_override = "
        f"13368, llama3_1-8b.*.sample_concatenate_permutation = 1, {_NO_SERVER_MIN}",
    ),
    "mlperf-deepseek-r1-ensemble": _llm_server_rules(
        4388,
        f"{_CONF}, v5.1: *.Server.min_duration = 600000, deepseek-r1.*.performance_sample_count_override = "
        f"4388, deepseek-r1.*.sample_concatenate_permutation = 1, {_NO_SERVER_MIN}",
    ),
}
"""MLPerf data set code (the serving schema's ``*_dist`` codes, ``profiles/validation/datasets.toml``) -> the LoadGen
rules a Server run of that benchmark is generated under. Every round that has a benchmark (v4.0 to v5.1) sets the
same values for it, so one entry serves all its rounds; a round that changed one would need its own key (by the
row's ``locator``, ``mlcommons/inference_results_vX.Y``)."""


def loadgen_rules(row: dict[str, str]) -> LoadGenServerRules | None:
    """The LoadGen rules of a row whose prompts come from an MLPerf benchmark's data set (its
    ``input_tokens_dist`` names a data set of ``LOADGEN_SERVER_RULES``: by its code, an alias or the benchmark's
    model name, ``serving_datasets.resolve_dataset``), whatever its source key; None otherwise."""
    found = resolve_dataset(row.get("input_tokens_dist", ""))
    return None if found is None else LOADGEN_SERVER_RULES.get(found[0].code)


def loadgen_server_queries(rate_per_s: float, rules: LoadGenServerRules) -> int:
    """Queries LoadGen schedules in a Server run at ``rate_per_s`` (mlcommons/inference v4.0
    ``loadgen/loadgen.cc`` ``GenerateQueries``): it draws Poisson arrivals while the scheduled time is below
    ``min_duration_s`` or the count below ``min_query_count``; with equal issue, ``min_query_count`` is first
    padded up to a multiple of the loaded samples, and each time the count reaches it before the duration does it
    grows by one more permutation. The expected count: the duration's rate x min_duration_s arrivals, rounded up
    to whole permutations under equal issue, and at least the (padded) minimum. Raises ValueError for a rate that
    is not positive."""
    if not rate_per_s > 0:
        raise ValueError(f"loadgen_server_queries: rate_per_s must be > 0, got {rate_per_s!r}")
    by_duration = math.ceil(rate_per_s * rules.min_duration_s)
    if not rules.equal_issue:
        return max(rules.min_query_count, by_duration)
    whole = rules.performance_sample_count
    return whole * max(math.ceil(rules.min_query_count / whole), math.ceil(by_duration / whole))
