"""The serving simulator's tables do not move when its hot path is made faster (issue 52 item 7): fixed-seed runs
over every rule (both policies, chunked and whole prefills, full admission, preemptions, replicas and both routers,
pipelined engines, disaggregated pools, closed loop, prefix hits, emit delay, one-iteration runs) give request and
iteration tables whose every column hashes, bit for bit, to what the code before the speed-up produced
(tests/fixtures/serving_sim_golden.json, written by ``python tests/test_serving_sim_golden.py --write`` from that
code, commit 'serving sim golden tables' on branch h-perf)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from workbench.serving.simulate import DisaggregatedPools, Requests, simulate

FIXTURE = Path(__file__).parent / "fixtures" / "serving_sim_golden.json"


class AffineCost:
    """An iteration cost affine in the batch (so decode runs interpolate exactly) that reads every argument: a
    fixed part, per prefill chunk and token, per prompt token already cached, per decode and per decode KV token."""

    kv_block_tokens = 16

    def __init__(self, kv_capacity_tokens: int, transfer_s_per_token: float = 0.0) -> None:
        self.kv_capacity_tokens = kv_capacity_tokens
        self.per_token = transfer_s_per_token

    def iteration_s(self, new: np.ndarray, context: np.ndarray, decode: np.ndarray) -> float:
        return (
            0.004
            + 1e-3 * len(new)
            + 2e-6 * float(new.sum())
            + 1e-8 * float(context.sum())
            + 5e-5 * len(decode)
            + 3e-9 * float(decode.sum())
        )

    def kv_transfer_s(self, tokens: int) -> float:
        return self.per_token * tokens


def _requests(n: int, seed: int, *, rate: float = 20.0, concurrency: int | None = None) -> Requests:
    rng = np.random.default_rng(seed)
    inp, out = rng.integers(16, 1500, n), rng.integers(1, 300, n)
    if concurrency is not None:
        return Requests.closed_loop(concurrency, n, input_tokens=inp, output_tokens=out)
    return Requests.poisson(rate, n, input_tokens=inp, output_tokens=out, seed=seed + 1)


def _cases() -> dict[str, Any]:
    tight, roomy = AffineCost(30_000), AffineCost(1_000_000)
    base = {"max_num_seqs": 64, "max_num_batched_tokens": 2048}
    return {
        "vllm_preempting": (_requests(1500, 1), tight, {"policy": "vllm", **base}),
        "sarathi_preempting": (_requests(1500, 2, rate=60.0), tight, {"policy": "sarathi", **base}),
        "sarathi_whole_prompts": (
            _requests(800, 3),
            roomy,
            {"policy": "sarathi", "chunked_prefill": False, **base},
        ),
        "vllm_chunked": (_requests(800, 4), tight, {"policy": "vllm", "chunked_prefill": True, **base}),
        "full_admission": (_requests(1000, 5), tight, {"policy": "sarathi", "kv_admission": "full", **base}),
        "replicas_least_loaded": (
            _requests(1500, 6, rate=150.0),
            tight,
            {"policy": "vllm", "replicas": 3, "router": "least_loaded", **base},
        ),
        "replicas_pipelined": (
            _requests(1200, 7, rate=40.0),
            roomy,
            {"policy": "sarathi", "replicas": 2, "pipeline_depth": 2, **base},
        ),
        "disaggregated": (
            _requests(1000, 8, rate=60.0),
            tight,
            {
                "policy": "sarathi",
                "disaggregation": DisaggregatedPools(
                    num_prefill_engines=2, num_decode_engines=1, prefill_cost=AffineCost(400_000, 2e-7)
                ),
                **base,
            },
        ),
        "closed_loop_prefix_delay": (
            _requests(1000, 9, concurrency=48),
            tight,
            {"policy": "vllm", "prefix_hit_rate": 0.4, "emit_delay_s": 0.003, **base},
        ),
        "one_iteration_runs": (
            _requests(400, 10),
            tight,
            {"policy": "sarathi", "max_run_iterations": 1, **base},
        ),
    }


def _column_digest(series: pl.Series) -> str:
    values = series.to_numpy()
    return f"{values.dtype.str}:{hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest()}"


def digests() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (requests, cost, options) in _cases().items():
        result = simulate(requests, cost, **options)
        out[name] = {
            table: {
                "rows": frame.height,
                "columns": {col: _column_digest(frame[col]) for col in frame.columns},
            }
            for table, frame in (("requests", result.requests), ("iterations", result.iterations))
        }
        out[name]["preemptions"] = int(result.requests["preemptions"].sum())
    return out


@pytest.fixture(scope="module")
def now() -> dict[str, Any]:
    return digests()


@pytest.mark.parametrize("case", sorted(_cases()))
def test_tables_are_bit_for_bit_those_saved(case: str, now: dict[str, Any]) -> None:
    saved = json.loads(FIXTURE.read_text())[case]
    assert now[case]["requests"]["rows"] == saved["requests"]["rows"]
    assert now[case]["iterations"]["rows"] == saved["iterations"]["rows"]
    for table in ("requests", "iterations"):
        for column, digest in saved[table]["columns"].items():
            assert now[case][table]["columns"][column] == digest, f"{case}: {table}.{column} changed"


def test_the_cases_exercise_the_rules(now: dict[str, Any]) -> None:
    saved = json.loads(FIXTURE.read_text())
    assert set(saved) == set(now)
    for case in ("vllm_preempting", "sarathi_preempting", "replicas_least_loaded", "disaggregated"):
        assert saved[case]["preemptions"] > 0, case
    assert saved["full_admission"]["preemptions"] == 0
    # decode runs were expanded into iterations: more iteration rows than requests
    assert saved["vllm_preempting"]["iterations"]["rows"] > saved["vllm_preempting"]["requests"]["rows"]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    FIXTURE.write_text(json.dumps(digests(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
