"""A serving plan under more and more load: the same requests sent as Poisson arrivals at a list of rates, each run
through :func:`workbench.serving.estimate.serve_estimate`, summarised one row per rate (the throughput against
latency curve of serving benchmarks, e.g. vLLM's ``benchmark_serving.py --request-rate``), and SLO attainment.

SLO attainment is DistServe's (Zhong et al. 2024, arXiv:2401.09670, Sec. 2.2): the share of requests whose own
TTFT and TPOT both meet the targets; a plan *meets* an ``SLO`` when the run's TTFT and TPOT at the SLO's
percentile are within the targets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from workbench.serving.estimate import ServingEstimate, serve_estimate
from workbench.specs.serving import SLO, Arrival, ServingPlan, ServingWorkload

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.serving.simulate import RequestSimResult
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec

LOAD_FRACS: tuple[float, ...] = (0.1, 0.25, 0.5, 0.7, 0.85, 1.0, 1.2)
"""Default sweep: these multiples of the plan's saturation rate (``saturation_requests_per_s``), from light load
to just past saturation, where the queue (and TTFT) grows without bound."""

SWEEP_COLUMNS: tuple[str, ...] = (
    "request_rate_per_s",
    "requests_per_s",
    "output_tokens_per_s",
    "output_tokens_per_s_per_device",
    "ttft_s_mean",
    "ttft_s_p50",
    "ttft_s_p90",
    "ttft_s_p99",
    "tpot_s_mean",
    "tpot_s_p50",
    "tpot_s_p90",
    "tpot_s_p99",
    "e2e_s_p50",
    "e2e_s_p99",
    "num_preemptions",
    "slo_attained_frac",
    "meets_slo",
)
"""Columns of ``sweep_table``: offered rate (requests/s), achieved requests/s and output tokens/s (whole deployment
and per device), latencies in seconds, preemptions, and the SLO columns (null without an SLO)."""


def slo_attained_frac(sim: RequestSimResult, slo: SLO) -> float:
    """Share of the run's requests whose TTFT and TPOT each meet ``slo``'s targets (a request of one output
    token has no TPOT and meets that target). NaN for a run without requests."""
    req = sim.requests
    if req.height == 0:
        return math.nan
    ok = np.ones(req.height, dtype=bool)
    if slo.ttft_s is not None:
        ok &= req["ttft_s"].to_numpy() <= slo.ttft_s
    if slo.tpot_s is not None:
        tpot = req["tpot_s"].to_numpy(allow_copy=True).astype(float)
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_s)
    return float(ok.mean())


def meets_slo(summary: Mapping[str, Any], slo: SLO) -> bool:
    """Whether a ``ServingEstimate.summary()`` meets ``slo``: TTFT and TPOT at the SLO's percentile within the
    targets (a NaN TPOT, no request with two or more output tokens, meets its target)."""
    p = slo.percentile.value
    for key, target in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s)):
        value = float(summary[f"{key}_s_{p}"])
        if target is not None and not math.isnan(value) and value > target:
            return False
    return True


def sweep_table(points: Sequence[tuple[float, ServingEstimate]], slo: SLO | None = None) -> pl.DataFrame:
    """One row per (offered rate in requests/s, estimate), in the given order: the ``SWEEP_COLUMNS``."""
    rows = []
    for rate, est in points:
        s = est.summary()
        row = {k: s[k] for k in SWEEP_COLUMNS[1:-2]}
        row["request_rate_per_s"] = float(rate)
        row["slo_attained_frac"] = slo_attained_frac(est.sim, slo) if slo is not None else None
        row["meets_slo"] = meets_slo(s, slo) if slo is not None else None
        rows.append(row)
    schema = {k: pl.Float64 for k in SWEEP_COLUMNS} | {"num_preemptions": pl.Int64, "meets_slo": pl.Boolean}
    return pl.DataFrame(rows, schema=schema).select(SWEEP_COLUMNS)


def _lengths(workload: ServingWorkload) -> dict[str, int | tuple[int, ...]]:
    """The request lengths of ``workload``: one count when all are equal as given, else one per request."""
    inputs, outputs = workload.input_tokens, workload.output_tokens
    return {
        "input_tokens": inputs if isinstance(inputs, int) else workload.input_lengths(),
        "output_tokens": outputs if isinstance(outputs, int) else workload.output_lengths(),
    }


def poisson_workload(workload: ServingWorkload, rate_per_s: float) -> ServingWorkload:
    """``workload``'s requests (count, lengths, seed; a trace's lengths) arriving as Poisson at ``rate_per_s``.
    Raises ValueError for a rate that is not finite and > 0."""
    return ServingWorkload(
        arrival=Arrival.POISSON,
        request_rate_per_s=rate_per_s,
        num_requests=workload.request_count,
        seed=workload.seed,
        **_lengths(workload),  # type: ignore[arg-type]
    )


def saturation_requests_per_s(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: ServingPlan,
    workload: ServingWorkload,
    calibration: Calibration,
) -> float:
    """Requests/s the plan completes when all of ``workload``'s requests are there at once (an offline run of
    the same lengths): the most an open-loop rate can sustain. Errors as ``serve_estimate``."""
    offline = ServingWorkload(
        arrival=Arrival.OFFLINE,
        num_requests=workload.request_count,
        **_lengths(workload),  # type: ignore[arg-type]
    )
    return serve_estimate(model, cluster, plan, offline, calibration).sim.requests_per_s


def rate_sweep(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: ServingPlan,
    workload: ServingWorkload,
    calibration: Calibration,
    rates_per_s: Sequence[float] | None = None,
) -> list[tuple[float, ServingEstimate]]:
    """``workload``'s requests on ``plan`` as Poisson arrivals at each of ``rates_per_s`` (requests/s; default
    ``LOAD_FRACS`` x ``saturation_requests_per_s``), in increasing rate order: (rate, estimate) pairs for
    ``sweep_table``. Raises ValueError for no rates or a rate not finite and > 0, and as ``serve_estimate``."""
    if rates_per_s is None:
        top = saturation_requests_per_s(model, cluster, plan, workload, calibration)
        rates_per_s = [top * f for f in LOAD_FRACS]
    rates = sorted(float(r) for r in rates_per_s)
    if not rates:
        raise ValueError("rate_sweep: rates_per_s must hold at least one rate (requests/s), got none")
    return [
        (r, serve_estimate(model, cluster, plan, poisson_workload(workload, r), calibration)) for r in rates
    ]
