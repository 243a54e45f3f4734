"""Serving plan search: the highest SLO-goodput per device over the serving plans of a cluster.

``serve_search`` walks the plan space of :mod:`workbench.search.serving.space` (engine layouts, replicas filling
the device budget, weight/KV dtypes, a small batching grid, disaggregated prefill:decode splits) in two tiers, as
the training search does:

1. screen every plan with closed forms (:mod:`workbench.search.serving.screen`): layout rules, weights and KV
   capacity, a prompt alone against the TTFT target and one decode alone against the TPOT target, counting the
   plans that fail by reason (``REASONS``), and a steady-state estimate of each survivor's goodput;
2. simulate ``top_k`` survivors, best estimate per device first and one per engine layout before any second
   (the rest are counted as ``pruned``), and find each one's SLO-goodput with the request simulator.

SLO-goodput (DistServe, Zhong et al. OSDI 2024, arXiv:2401.09670, section 2.2): for open-loop Poisson arrivals,
the highest request rate at which the SLO holds, found by bracketing from the estimate (steps growing
geometrically) and geometric bisection over the rate, capped at the plan's throughput bound. The SLO holds when each target's ``slo.percentile`` over the
judged requests is within the target (``SLO``'s definition; DistServe counts the requests meeting both, reported
as ``slo_attainment_frac``). Each Poisson run is judged in steady state: ``n_warm`` requests (the rate times the
estimated end-to-end latency, at most ``MAX_WARMUP_REQUESTS``) arrive before the workload's ``num_requests`` and
as many after them; every request after the first ``n_warm`` is judged, so none finds an empty engine and a queue
that keeps growing (a rate the plan cannot sustain) shows in the latest arrivals. An aggregated plan's replicas
are simulated as one engine at its share of the rate (Poisson splitting: exact for random routing, pessimistic
for ``serve_estimate``'s least-loaded router), which divides the simulated requests by the replicas. One sample
path per rate (the workload's seed): near saturation a percentile moves by tens of percent between seeds, so
the goodput is good to about the rate tolerance plus that noise. For offline, closed-loop and trace workloads,
one simulation of the workload itself: goodput is the requests (and output tokens) meeting both targets per
second of the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from workbench.presets.engines import load_engine
from workbench.search.serving.result import (
    GoodputPoint,
    KeptPlan,
    ServingSearchResult,
    results_table,
    screened_table,
)
from workbench.search.serving.screen import CostCache, Lengths, Screened, screen
from workbench.search.serving.space import REASONS, ServingSearchConstraints, candidate_plans
from workbench.serving.estimate import serve_estimate
from workbench.serving.precision import gemm_precision, kv_precision
from workbench.serving.simulate import LatencyStats, RequestSimResult
from workbench.specs.hardware import DType
from workbench.specs.serving import SLO, Arrival, ServingDType, ServingPlan, ServingWorkload

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.price import PriceSpec


NO_TARGET_RATE_PER_S = 1e-3
"""Target rate to pass when none is wanted (one request per 1,000 s): a plan then only has to meet the SLO at
light load to be kept."""

MAX_WARMUP_REQUESTS = 4096
"""Most requests simulated before (and again after) the judged ones of a Poisson run."""


# ---- simulation --------------------------------------------------------------------------------------------
def _judge(sim: RequestSimResult, judged: slice, slo: SLO) -> tuple[bool, float, float, float, np.ndarray]:
    """(SLO held, TTFT and TPOT at the percentile, attainment, per-request meets-both mask) over the ``judged``
    requests; percentiles as ``LatencyStats`` takes them (what ``serve_estimate`` reports)."""
    req = sim.requests[judged]
    ttft = req["ttft_s"].to_numpy()
    tpot = req["tpot_s"].fill_null(math.nan).to_numpy()
    key = f"{slo.percentile.value}_s"
    ttft_q, tpot_q = getattr(LatencyStats.of(ttft), key), getattr(LatencyStats.of(tpot), key)
    held = (slo.ttft_s is None or ttft_q <= slo.ttft_s) and (
        slo.tpot_s is None or math.isnan(tpot_q) or tpot_q <= slo.tpot_s
    )
    ok = np.ones(len(ttft), dtype=bool)
    if slo.ttft_s is not None:
        ok &= ttft <= slo.ttft_s
    if slo.tpot_s is not None:
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_s)
    return bool(held), ttft_q, tpot_q, float(ok.mean()) if ok.size else 0.0, ok


def _max_rate(
    probe: Callable[[float], GoodputPoint], *, target: float, start: float, top: float, rel_tol: float
) -> GoodputPoint | None:
    """The point of the highest rate in [target, max(top, target)] that meets the SLO, to ``rel_tol``: probe
    ``start``, step away from it by factors (1 + 4 rel_tol)^(2^k), k = 0, 1, ... (up while the SLO holds, down
    while it fails) until the outcome changes, then bisect geometrically. None when the SLO fails at ``target``.
    Assumes it holds below some rate and fails above."""
    top = max(top, target)
    point = probe(min(max(start, target), top))
    good, bad = (point, None) if point.meets else (None, point)
    step = 1.0 + 4.0 * rel_tol
    while bad is None:
        assert good is not None
        if good.rate_per_s >= top:
            return good
        point = probe(min(good.rate_per_s * step, top))
        good, bad = (point, None) if point.meets else (good, point)
        step *= step
    while good is None:
        if bad.rate_per_s <= target:
            return None
        point = probe(max(bad.rate_per_s / step, target))
        good, bad = (point, bad) if point.meets else (None, point)
        step *= step
    while bad.rate_per_s > good.rate_per_s * (1.0 + rel_tol):
        point = probe(math.sqrt(good.rate_per_s * bad.rate_per_s))
        good, bad = (point, bad) if point.meets else (good, point)
    return good


def _padded(value: int | tuple[int, ...] | None, n: int, n_warm: int) -> int | tuple[int, ...]:
    """A length field for ``n`` judged requests with ``n_warm`` before and after them (a per-request tuple is
    cycled)."""
    if not isinstance(value, tuple):
        assert value is not None
        return value
    cycle = np.asarray(value)
    return tuple(
        np.concatenate([np.resize(cycle, n_warm), np.resize(cycle, n), np.resize(cycle, n_warm)]).tolist()
    )


class _Evaluator:
    """Simulates screened plans: Poisson runs at a rate with warm-up (module docstring), or the workload's own
    requests; counts the runs."""

    def __init__(self, workload: ServingWorkload, slo: SLO, lengths: Lengths, cache: CostCache) -> None:
        self.workload, self.slo, self.lengths, self.cache = workload, slo, lengths, cache
        self.runs = 0

    def probe(self, s: Screened, rate: float) -> GoodputPoint:
        """Simulate ``s`` at ``rate`` (Poisson; nan: the workload as it is) and judge it."""
        self.runs += 1
        w, n = self.workload, self.workload.request_count
        if math.isnan(rate):
            sim = self._simulate(s.plan, w)
            held, ttft_q, tpot_q, attained, ok = _judge(sim, slice(0, n), self.slo)
            scale = 1.0 / sim.duration_s if sim.duration_s > 0 else 0.0
            out = sim.requests["output_tokens"].to_numpy()
            met, met_tokens = float(ok.sum()) * scale, float(out[ok].sum()) * scale
            return GoodputPoint(rate, held, w, ttft_q, tpot_q, attained, met, met_tokens)
        # one engine of an aggregated plan at its share of the rate (module docstring)
        engines = s.plan.replicas if s.plan.disaggregation is None else 1
        share = rate / engines
        e2e = s.e2e_estimate_s if math.isfinite(s.e2e_estimate_s) else 0.0
        n_warm = min(math.ceil(share * e2e), MAX_WARMUP_REQUESTS)
        run = self._run(share, n, n_warm)
        sim = self._simulate(replace(s.plan, replicas=1) if engines > 1 else s.plan, run)
        held, ttft_q, tpot_q, attained, _ = _judge(sim, slice(n_warm, None), self.slo)
        whole = self._run(rate, engines * n, engines * n_warm)
        return GoodputPoint(
            rate, held, whole, ttft_q, tpot_q, attained, rate, rate * float(self.lengths.outputs.mean())
        )

    def _simulate(self, plan: ServingPlan, workload: ServingWorkload) -> RequestSimResult:
        """``serve_estimate``'s simulation: the search judges exactly what ``workbench serve estimate`` reports."""
        c = self.cache
        return serve_estimate(c.model, c.cluster, plan, workload, c.calibration).sim

    def _run(self, rate: float, n: int, n_warm: int) -> ServingWorkload:
        """The Poisson workload of ``n`` judged requests at ``rate`` with ``n_warm`` before and after them."""
        w = self.workload
        return replace(w, request_rate_per_s=rate, num_requests=n + 2 * n_warm,
                       input_tokens=_padded(w.input_tokens, n, n_warm),
                       output_tokens=_padded(w.output_tokens, n, n_warm))  # fmt: skip

    def goodput(self, s: Screened, rel_tol: float) -> KeptPlan | None:
        """The plan's goodput point, or None when the SLO fails at the target rate (Poisson) or no request meets
        it (other arrivals)."""
        runs0 = self.runs
        if self.workload.arrival is Arrival.POISSON:
            target = float(self.workload.request_rate_per_s or NO_TARGET_RATE_PER_S)
            point = _max_rate(lambda r: self.probe(s, r), target=target, start=s.estimate_per_s,
                              top=s.bound_per_s, rel_tol=rel_tol)  # fmt: skip
        else:
            point = self.probe(s, math.nan)
        if point is None or not point.goodput_per_s > 0:
            return None
        return KeptPlan(s, point, self.runs - runs0)


# ---- the search --------------------------------------------------------------------------------------------
def serve_search(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: ServingWorkload,
    slo: SLO,
    calibration: Calibration,
    *,
    constraints: ServingSearchConstraints | None = None,
    price: PriceSpec | None = None,
) -> ServingSearchResult:
    """Search the serving plans on ``cluster`` (or ``constraints.num_devices`` of it) for the highest SLO-goodput
    per device (module docstring). ``workload`` gives the lengths and the judged request count of each
    simulation; with ``arrival='poisson'`` its ``request_rate_per_s`` is the target: a plan that misses the SLO at
    that rate is counted under ``slo`` (pass ``NO_TARGET_RATE_PER_S`` for no target), and each kept plan's
    goodput is the highest rate at which it meets the SLO, to ``constraints.rate_rel_tol``.

    With ``price`` (a ``workbench.specs.price.PriceSpec``) the table gets ``usd_per_million_output_tokens`` at
    each plan's goodput point (``price x devices / 3600 / goodput output tokens/s x 10^6``): on one device kind
    the order by goodput per device is the order by dollars per output token.

    Returns a ``ServingSearchResult``. Raises ValueError for a device budget above the cluster's devices, and
    what ``simulate`` raises for requests it refuses.
    """
    c = constraints or ServingSearchConstraints()
    budget = c.num_devices or cluster.num_devices
    if budget > cluster.num_devices:
        raise ValueError(
            f"serve_search: num_devices={budget} exceeds the cluster's {cluster.num_devices} devices ({cluster.id})"
        )
    counts = {key: 0 for key, _ in REASONS}
    candidates = candidate_plans(model, cluster, budget, c, counts)
    num_candidates = len(candidates) + sum(counts.values())
    lengths = Lengths(np.asarray(workload.input_lengths(), dtype=np.int64),
                      np.asarray(workload.output_lengths(), dtype=np.int64), slo.percentile.quantile)  # fmt: skip
    cache = CostCache(model, cluster, calibration)
    passed: list[Screened] = []
    for plan in candidates:
        outcome = screen(plan, cache, lengths, slo)
        if isinstance(outcome, str):
            counts[outcome] += 1
        else:
            passed.append(outcome)
    passed.sort(key=lambda s: (-s.estimate_per_device, s.plan.num_devices, s.plan.describe()))
    chosen = _pick(passed, c.top_k)
    counts["pruned"] = len(passed) - len(chosen)
    evaluator = _Evaluator(workload, slo, lengths, cache)
    kept = []
    for s in chosen:
        found = evaluator.goodput(s, c.rate_rel_tol)
        if found is None:
            counts["slo"] += 1
        else:
            kept.append(found)
    kept.sort(key=KeptPlan.order)
    table = results_table(kept)
    if price is None:
        notes = [
            "per dollar: no price for this device (give a price per device-hour), goodput per device only"
        ]
    else:
        notes = [f"price: {price.describe()}"]
        table = with_dollars(table, price.usd_per_device_hour)
    notes += dtype_notes(model, cluster, c)
    return ServingSearchResult(
        model=model, cluster=cluster, workload=workload, slo=slo, calibration=calibration, constraints=c,
        table=table, plans=tuple(k.screened.plan for k in kept),
        screened=screened_table(passed, {id(s) for s in chosen}),
        rejections=pl.DataFrame({"reason": [k for k, _ in REASONS], "description": [t for _, t in REASONS],
                                 "num_plans": [counts[k] for k, _ in REASONS]}),
        num_candidates=num_candidates, num_simulations=evaluator.runs,
        goodput_workloads=tuple(k.point.workload for k in kept), notes=tuple(notes),
    )  # fmt: skip


def dtype_notes(model: ModelSpec, cluster: ClusterSpec, c: ServingSearchConstraints) -> list[str]:
    """How the searched dtypes read on the cluster's device under ``c.engine``: each searched KV dtype the engine
    stores none of there (``kv_precision``'s refusal) or stores through another attention backend (its note);
    and, on a device without an fp8 peak, the searched fp8 weights (``gemm_precision``: weight-only W8A16
    through the engine's Marlin path, or refused and why). [] when every searched dtype reads as-is."""
    engine = load_engine(c.engine)
    notes = []
    for kv in c.kv_cache_dtypes:
        try:
            note = kv_precision(engine, cluster.device, kv).note
        except ValueError as exc:
            note = f"no kv-{kv} plans: {exc}"
        notes += [note] if note else []
    if DType.FP8 in cluster.device.peak_flop_per_s or "fp8" not in c.weight_dtypes:
        return notes
    try:
        p = gemm_precision(engine, cluster.device, ServingDType.FP8, ServingDType.FP8, moe=model.is_moe)
        notes.append(p.note)
    except ValueError as exc:
        notes.append(f"no fp8 plans: {exc}")
    return notes


def with_dollars(table: pl.DataFrame, usd_per_device_hour: float) -> pl.DataFrame:
    """``table`` with ``usd_per_million_output_tokens`` at the goodput point (``workbench.cost.dollars``)."""
    from workbench.cost.dollars import usd_per_million_tokens

    if not table.height:
        return table.with_columns(pl.lit(None, dtype=pl.Float64).alias("usd_per_million_output_tokens"))
    per_s = usd_per_device_hour * table["num_devices"].to_numpy() / 3600.0
    usd = usd_per_million_tokens(per_s, table["goodput_output_tokens_per_s"].to_numpy())
    return table.with_columns(pl.Series("usd_per_million_output_tokens", usd, dtype=pl.Float64))


def _layout_key(plan: ServingPlan) -> tuple[object, ...]:
    return (plan.replicas, plan.tp, plan.pp, plan.ep, plan.attention_dp, plan.disaggregation)


def _pick(passed: list[Screened], k: int) -> list[Screened]:
    """The ``k`` plans to simulate from ``passed`` (best estimate first): the first of each engine layout, then
    the next ones in order, kept in estimate order."""
    seen: set[tuple[object, ...]] = set()
    firsts: list[int] = []
    others: list[int] = []
    for i, s in enumerate(passed):
        key = _layout_key(s.plan)
        (others if key in seen else firsts).append(i)
        seen.add(key)
    return [passed[i] for i in sorted((firsts + others)[:k])]
