"""What a serving simulation returns: per-request and per-iteration tables and latency statistics."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from workbench.specs.estimate import TIMELINE_COLUMNS

if TYPE_CHECKING:
    from workbench.serving.requests import Requests

ROW_FIELDS = 9
"""Numbers the simulator records per started batch (a head iteration or a run of k decode iterations): engine,
start_s, k, t0 (first iteration's seconds), slope (growth per iteration), prefill tokens, decode seqs, KV tokens,
waiting."""

REQUEST_COLUMNS: tuple[str, ...] = (
    "id",
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "preemptions",
    "engine",
    "prefill_engine",
)
"""Columns of ``RequestSimResult.requests``."""
ITERATION_COLUMNS: tuple[str, ...] = (
    "engine",
    "iteration",
    "start_s",
    "end_s",
    "num_prefill_tokens",
    "num_decode_seqs",
    "kv_used_tokens",
    "kv_capacity_tokens",
    "waiting",
)
"""Columns of ``RequestSimResult.iterations``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LatencyStats:
    """Mean and percentiles (numpy's linear interpolation) of one latency over the requests, seconds; NaN when
    no request has the metric."""

    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float

    @classmethod
    def of(cls, values: np.ndarray) -> LatencyStats:
        v = values[np.isfinite(values)]
        if not v.size:
            return cls(mean_s=math.nan, p50_s=math.nan, p90_s=math.nan, p99_s=math.nan)
        p50, p90, p99 = np.percentile(v, [50, 90, 99]).tolist()
        return cls(mean_s=float(v.mean()), p50_s=p50, p90_s=p90, p99_s=p99)


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestSimResult:
    """What a serving simulation produced. Times in seconds from the simulation's start.

    ``requests``: one row per request (``REQUEST_COLUMNS``): id (int, position in arrival order), arrival_s,
    input_tokens, output_tokens, first_token_s, finish_s, ttft_s = first_token_s - arrival_s, tpot_s =
    (finish_s - first_token_s) / (output_tokens - 1) (null for one output token), e2e_s = finish_s - arrival_s,
    preemptions (int), engine (the engine that produced the last token), prefill_engine (the engine of the first
    prefill).

    ``iterations``: one row per engine iteration in start order per engine (``ITERATION_COLUMNS``): engine,
    iteration (index on that engine), start_s, end_s, num_prefill_tokens (prompt tokens computed), num_decode_seqs,
    kv_used_tokens (tokens in the KV of the running requests during the iteration, without the round-up to whole
    blocks), kv_capacity_tokens, waiting (queue length when the iteration, or the decode run holding it, was
    scheduled).
    """

    requests: pl.DataFrame
    iterations: pl.DataFrame
    ttft: LatencyStats
    tpot: LatencyStats
    e2e: LatencyStats
    duration_s: float
    """From the first arrival to the last finish."""
    output_tokens_per_s: float
    """All output tokens over ``duration_s``."""
    requests_per_s: float
    """Requests over ``duration_s``."""
    num_preemptions: int

    def summary(self) -> dict[str, float]:
        """Plain numbers: ``ttft_s_p50`` ... ``e2e_s_mean``, throughputs, duration and preemptions."""
        out: dict[str, float] = {}
        for name in ("ttft", "tpot", "e2e"):
            stats: LatencyStats = getattr(self, name)
            for q in ("mean", "p50", "p90", "p99"):
                out[f"{name}_s_{q}"] = getattr(stats, f"{q}_s")
        out |= {
            "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "duration_s": self.duration_s,
            "num_preemptions": self.num_preemptions,
        }
        return out

    def timeline_rows(self) -> pl.DataFrame:
        """The iterations in the training timeline's layout (``workbench.specs.estimate.TIMELINE_COLUMNS``):
        rank = engine, stage = chunk = 0, microbatch = iteration, op = ``prefill``, ``decode`` or ``mixed``,
        start_s, end_s."""
        it = self.iterations
        op = (
            pl.when(pl.col("num_decode_seqs") == 0)
            .then(pl.lit("prefill"))
            .when(pl.col("num_prefill_tokens") == 0)
            .then(pl.lit("decode"))
            .otherwise(pl.lit("mixed"))
        )
        return it.select(
            pl.col("engine").alias("rank"),
            pl.lit(0, dtype=pl.Int64).alias("stage"),
            pl.lit(0, dtype=pl.Int64).alias("chunk"),
            pl.col("iteration").alias("microbatch"),
            op.alias("op"),
            "start_s",
            "end_s",
        ).select(TIMELINE_COLUMNS)


def token_weighted_tpot_s(requests: pl.DataFrame) -> float:
    """Mean TPOT weighted by tokens: the sum over requests of (finish_s - first_token_s) over the sum of their
    output_tokens, first tokens included, in seconds; NaN when no token was generated. ``requests`` has the columns
    of ``RequestSimResult.requests``. It is the TPOT that APEX+'s ``vllm/trace.py`` (microsoft/apex_plus@8769096)
    reads from vLLM V0's /metrics, ``time_per_output_token_seconds_sum / generation_tokens_total``: one
    observation per decode step of each request over every generated token, V0's ``LLMEngine._get_stats``
    counting "One generation token per finished prefill"."""
    decode_s = (requests["finish_s"] - requests["first_token_s"]).sum()
    tokens = requests["output_tokens"].sum()
    return float(decode_s) / float(tokens) if tokens else float("nan")


def sim_result(
    requests: Requests,
    *,
    arrival_s: np.ndarray,
    first_token_s: np.ndarray,
    finish_s: np.ndarray,
    preemptions: np.ndarray,
    engine: np.ndarray,
    prefill_engine: np.ndarray,
    iterations: pl.DataFrame,
) -> RequestSimResult:
    """A ``RequestSimResult`` from per-request times (shape (n,), seconds; arrival as the simulation saw it, closed-loop
    ones included) and the iteration table."""
    out_tokens = requests.output_tokens
    ttft = first_token_s - arrival_s
    e2e = finish_s - arrival_s
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out_tokens > 1, (finish_s - first_token_s) / (out_tokens - 1), np.nan)
    table = pl.DataFrame(
        {
            "id": np.arange(len(requests), dtype=np.int64),
            "arrival_s": arrival_s,
            "input_tokens": requests.input_tokens,
            "output_tokens": out_tokens,
            "first_token_s": first_token_s,
            "finish_s": finish_s,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "preemptions": preemptions,
            "engine": engine,
            "prefill_engine": prefill_engine,
        }
    ).with_columns(pl.col("tpot_s").fill_nan(None))
    duration = float(finish_s.max() - arrival_s.min()) if len(requests) else 0.0
    rate = 1.0 / duration if duration > 0 else math.nan
    return RequestSimResult(
        requests=table,
        iterations=iterations,
        ttft=LatencyStats.of(ttft),
        tpot=LatencyStats.of(tpot),
        e2e=LatencyStats.of(e2e),
        duration_s=duration,
        output_tokens_per_s=float(out_tokens.sum()) * rate,
        requests_per_s=len(requests) * rate,
        num_preemptions=int(preemptions.sum()),
    )


def iteration_table(table: np.ndarray, kv_capacity_tokens: np.ndarray) -> pl.DataFrame:
    """One row per iteration from the simulator's ``ROW_FIELDS`` numbers per started batch (shape (b, ROW_FIELDS)):
    a decode run of k iterations expands to k rows (times from its t0 and slope). ``kv_capacity_tokens``: per
    engine index."""
    table = table[np.argsort(table[:, 0], kind="stable")]  # per engine, rows are already in time order
    engine, k, prefill, decode, kv, waiting = (table[:, c].astype(np.int64) for c in (0, 2, 5, 6, 7, 8))
    start, t0, slope = table[:, 1], table[:, 3], table[:, 4]
    row = np.repeat(np.arange(len(k)), k)
    j = np.arange(row.size) - np.repeat(np.cumsum(k) - k, k)
    jf = j.astype(np.float64)
    begin = start[row] + jf * t0[row] + slope[row] * jf * (jf - 1) / 2
    engine_r = engine[row]
    counts = np.bincount(engine_r, minlength=len(kv_capacity_tokens))
    return pl.DataFrame(
        {
            "engine": engine_r,
            "iteration": np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts),
            "start_s": begin,
            "end_s": begin + t0[row] + slope[row] * jf,
            "num_prefill_tokens": prefill[row],
            "num_decode_seqs": decode[row],
            "kv_used_tokens": kv[row] + j * decode[row],
            "kv_capacity_tokens": kv_capacity_tokens[engine_r],
            "waiting": waiting[row],
        }
    )


def with_requests(sim: RequestSimResult, requests: Requests) -> RequestSimResult:
    """``sim`` summarised again over ``requests`` (the same requests in the same order, with other output lengths:
    the tokens the client gets when the simulation ran a request's decode as fewer, longer steps), times and the
    iteration table kept. Raises ValueError when the request counts differ."""
    table = sim.requests
    if table.height != len(requests):
        raise ValueError(f"with_requests: {len(requests)} requests for a simulation of {table.height}")
    col = {c: table[c].to_numpy() for c in ("arrival_s", "first_token_s", "finish_s", "preemptions", "engine",
                                             "prefill_engine")}  # fmt: skip
    return sim_result(requests, iterations=sim.iterations, **col)
