"""Closed loops in steady state: desynchronised clients and a measurement window without warm-up or drain.

Benchmark clients (vLLM ``benchmark_serving --max-concurrency``, genai-perf, trtllm-bench's closed loop) keep N
requests in flight and report over long runs in which the clients have drifted apart. A simulation that starts N
equal requests at the same instant keeps them in lock-step waves (all prefill together, all finish together), so
its TTFT depends on how many waves the run has. ``closed_loop_ramp_s`` spreads the clients' first requests over
one request's estimated duration, and ``steady_window`` measures only the requests between the first wave and
the drain.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from workbench.serving.results import token_weighted_tpot_s
from workbench.specs.serving import Arrival, ServingPlan, ServingWorkload

if TYPE_CHECKING:
    from workbench.serving.cost import ReplicaCost
    from workbench.serving.results import RequestSimResult

STEADY_WAVES = 8
"""Requests per client of a closed loop whose run length is not given (``steady_state_requests``): the first and
last waves are warm-up and drain, the middle six are measured."""


def closed_loop_ramp_s(
    workload: ServingWorkload, prefill: ReplicaCost, decode: ReplicaCost, plan: ServingPlan
) -> float:
    """Seconds over which a closed loop's clients send their first requests: one request's duration at the
    loop's batch, prefill of the mean prompt plus its decode steps at min(concurrency, max_num_seqs) sequences
    on the mean context (speculative steps where the plan has them); 0.0 for other arrivals."""
    if workload.arrival is not Arrival.CLOSED:
        return 0.0
    n_in = float(np.mean(workload.input_lengths()))
    n_out = float(np.mean(workload.output_lengths()))
    batch = max(1, min(int(workload.concurrency or 1), decode.plan.max_num_seqs))
    steps = n_out - 1
    if plan.speculative is not None:
        steps = math.ceil(steps / plan.speculative.mean_accepted_length)
    first = prefill.prefill_s(max(1, round(n_in)))
    if steps < 1:
        return first
    return first + steps * decode.decode_s(batch, max(1, round(n_in + n_out / 2)))


def steady_state_requests(concurrency: int) -> int:
    """Requests to simulate for a closed loop of ``concurrency`` clients whose run length is not given:
    ``STEADY_WAVES`` per client."""
    return STEADY_WAVES * concurrency


def steady_window(sim: RequestSimResult, concurrency: int) -> dict[str, float]:
    """TTFT, TPOT and throughputs of a closed loop in steady state: latencies over the requests sent after every
    client's first (warm-up) and before the last ``concurrency`` (the drain, when fewer are in flight);
    throughputs from the requests finishing between the first and the last of those requests' arrivals (all
    clients busy), as completions per second (Little's law) times their mean tokens. Keys: ``ttft_mean_s``,
    ``ttft_median_s``, ``ttft_p99_s``, ``tpot_mean_s``, ``tpot_p99_s``, ``tpot_token_weighted_s``
    (``workbench.serving.results.token_weighted_tpot_s``), ``requests_per_s``,
    ``output_tokens_per_s``, ``input_tokens_per_s``. Raises ValueError with fewer than 3 x concurrency
    requests."""
    req = sim.requests
    n = req.height
    if n < 3 * concurrency:
        raise ValueError(f"steady_window: {n} requests; a steady window needs at least 3 x {concurrency}")
    mid = req.slice(concurrency, n - 2 * concurrency)
    arrivals = mid["arrival_s"].to_numpy()
    t0, t1 = float(arrivals.min()), float(arrivals.max())
    done = req.filter((req["finish_s"] > t0) & (req["finish_s"] <= t1))
    span = t1 - t0
    rate = done.height / span if span > 0 and done.height else math.nan
    ttft, tpot = mid["ttft_s"].to_numpy(), mid["tpot_s"].drop_nulls().to_numpy()
    q = lambda v, p: float(np.percentile(v, p)) if v.size else math.nan  # noqa: E731
    return {
        "ttft_mean_s": float(ttft.mean()),
        "ttft_median_s": q(ttft, 50),
        "ttft_p99_s": q(ttft, 99),
        "tpot_mean_s": float(tpot.mean()) if tpot.size else math.nan,
        "tpot_p99_s": q(tpot, 99),
        "tpot_token_weighted_s": token_weighted_tpot_s(mid),
        "requests_per_s": rate,
        "output_tokens_per_s": rate * float(done["output_tokens"].to_numpy().mean())
        if done.height
        else math.nan,
        "input_tokens_per_s": rate * float(done["input_tokens"].to_numpy().mean())
        if done.height
        else math.nan,
    }
