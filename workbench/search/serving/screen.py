"""The closed-form tier of ``serve_search``: per-plan costs, the screen's rejections, and a steady-state model of
each plan's goodput that orders the plans and seeds the simulator's rate search.

Steady state of one engine (a fluid model, ASSUMED for ranking only; the simulator decides): L sequences decode in
every iteration at the mean context ``input + output / 2``; each request decodes ``output - 1`` times, so the
engine serves lambda = L / ((output - 1) t) requests/s (Little's law) and must prefill lambda x input tokens/s.

- ``sarathi``: each iteration also carries c = L x input / (output - 1) prompt tokens (the prefill keeping pace),
  so t = ``iteration_s`` of that mixed batch, TPOT = t, and a prompt takes ``ceil(input / (budget - L))``
  iterations plus an M/D/1 wait (Kendall) for the prompt budget it shares, busy c / (budget - L) of the time;
- ``vllm``: decodes stall while whole prompts prefill: TPOT = t_decode(L) + L x t_prompt / (output - 1), and a
  prompt waits one decode iteration then takes t_prompt (``prefill_s`` alone: no batching credit);
- disaggregated: the decode engines as ``vllm`` without the stalls; the prefill engines as an M/D/1 queue of
  ``prefill_s(input)`` jobs, whose mean TTFT S (1 + rho / (2 (1 - rho))) must meet the target.

L is capped by ``max_num_seqs``, by the KV capacity at the mean occupancy ``input + output / 2``, and by the
token budget (L + c); the estimate is the largest lambda whose TTFT and TPOT meet the targets (means against the
percentile targets: an optimistic start for the simulator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from workbench.search.serving.space import layout_reason
from workbench.serving.cost import ReplicaCost
from workbench.specs.serving import SLO, Scheduler, ServingPlan

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Lengths:
    """The workload's lengths as the screen reads them: per-request token counts, shape (n,), and the SLO's
    quantile (0..1)."""

    inputs: np.ndarray
    outputs: np.ndarray
    q: float

    @property
    def prompt_q(self) -> int:
        """The quantile's prompt length (numpy ``lower``: a monotone cost of it bounds the cost's quantile)."""
        return int(np.quantile(self.inputs, self.q, method="lower"))

    @property
    def decode_prompt_q(self) -> int | None:
        """The same over the requests that decode (two or more output tokens); None when none does."""
        decoding = self.inputs[self.outputs > 1]
        return int(np.quantile(decoding, self.q, method="lower")) if decoding.size else None

    @property
    def mean_input(self) -> float:
        return float(self.inputs.mean())

    @property
    def mean_decodes(self) -> float:
        """Mean decode iterations per request: output tokens - 1."""
        return float(self.outputs.mean()) - 1.0


class CostCache:
    """One ``ReplicaCost`` per distinct engine plan (replicas set to 1): aggregated engines and each side of a
    disaggregated plan share them. A failure is a reason key of ``search_space.REASONS``."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, calibration: Calibration) -> None:
        self.model, self.cluster, self.calibration = model, cluster, calibration
        self._costs: dict[ServingPlan, ReplicaCost | str] = {}

    def get(self, engine: ServingPlan) -> ReplicaCost | str:
        """The cost of one engine of the aggregated-form plan ``engine``, or why it cannot be built."""
        key = replace(engine, replicas=1)
        if key not in self._costs:
            self._costs[key] = self._build(key)
        return self._costs[key]

    def _build(self, engine: ServingPlan) -> ReplicaCost | str:
        reason = layout_reason(self.model, engine)
        if reason is not None:
            return reason
        try:
            return ReplicaCost.of(self.model, self.cluster, engine, self.calibration)
        except ValueError:
            pass  # the layout passed, so no KV block is left: say whether the weights alone overflow
        device = self.cluster.device
        roomy = replace(self.cluster, device=replace(device, hbm_bytes=device.hbm_bytes * 1e3))
        probe = ReplicaCost.of(self.model, roomy, engine, self.calibration)
        # what the engine's memory share may hold of the weights (EngineProfile.kv_memory_share): a share of the
        # device (vLLM), of the device less its reserve (SGLang), or none of it (TensorRT-LLM's share of the rest)
        share, rule = engine.gpu_memory_utilization_frac, probe.engine.kv_memory_share
        usable = {
            "of_total": device.hbm_bytes * share,
            "weights_and_kv": (device.hbm_bytes - probe.reserve_bytes()) * share,
        }.get(rule, device.hbm_bytes - probe.activation_peak_bytes() - probe.reserve_bytes())
        return "weights" if probe.weight_bytes_per_device() > usable else "no_kv"


@dataclass(frozen=True, slots=True)
class Screened:
    """A plan that passed the screen, with its costs and closed forms (seconds, requests/s)."""

    plan: ServingPlan
    prefill: ReplicaCost
    """Cost of a prefill engine (the engine itself when aggregated; its hand-off time is not priced here)."""
    decode: ReplicaCost
    """Cost of a decode engine (the engine itself when aggregated)."""
    ttft_alone_s: float
    """The quantile's prompt prefilled alone."""
    tpot_alone_s: float
    """One decode at batch 1 after the quantile's prompt (nan when no request decodes)."""
    bound_per_s: float
    """Request rate bound of the deployment (``rate_bound``)."""
    estimate_per_s: float
    """Steady-state goodput estimate of the deployment (module docstring), <= ``bound_per_s``."""
    e2e_estimate_s: float
    """Mean end-to-end latency of the steady state at ``estimate_per_s``."""

    @property
    def estimate_per_device(self) -> float:
        return self.estimate_per_s / self.plan.num_devices


def screen(plan: ServingPlan, cache: CostCache, lengths: Lengths, slo: SLO) -> Screened | str:
    """The plan's closed forms, or the key of the first ``REASONS`` rule it fails: layout and memory (from the
    cost cache), a prompt over the token budget without chunked prefill, a request larger than one engine's KV,
    the quantile's prompt alone over the TTFT target, a decode step alone over the TPOT target."""
    d = plan.disaggregation
    costs = []
    for role in ("both",) if d is None else ("prefill", "decode"):
        cost = cache.get(plan.role_plan(role))
        if isinstance(cost, str):
            return cost
        costs.append(cost)
    prefill, decode = costs[0], costs[-1]
    if not plan.chunked_prefill and int(lengths.inputs.max()) > plan.max_num_batched_tokens:
        return "prompt_budget"
    block = plan.kv_block_tokens
    held = -(-int((lengths.inputs + lengths.outputs - 1).max()) // block) * block
    if (
        held > decode.kv_capacity_tokens
        or -(-int(lengths.inputs.max()) // block) * block > prefill.kv_capacity_tokens
    ):
        return "kv_request"
    ttft = prefill.prefill_s(lengths.prompt_q)
    if slo.ttft_s is not None and ttft > slo.ttft_s:
        return "ttft_alone"
    decode_prompt = lengths.decode_prompt_q
    tpot = math.nan if decode_prompt is None else decode.decode_s(1, decode_prompt + 1)
    if slo.tpot_s is not None and tpot > slo.tpot_s:
        return "tpot_alone"
    bound = rate_bound(plan, prefill, decode, lengths)
    estimate, e2e = steady_goodput(plan, prefill, decode, lengths, slo)
    return Screened(plan, prefill, decode, ttft, tpot, bound, min(estimate, bound), e2e)


def rate_bound(plan: ServingPlan, prefill: ReplicaCost, decode: ReplicaCost, lengths: Lengths) -> float:
    """Requests/s the deployment cannot exceed if an iteration's time grows with its tokens and contexts (as
    ``ReplicaCost``'s does). Every token a request needs (its prompt and output - 1 decodes) rides in some
    iteration of at most ``max_num_batched_tokens`` tokens, which takes at least that many times the per-token
    time of one fresh chunk of the whole budget; and a decode step of B sequences takes at least
    ``decode_s(B, shortest prompt + 1)``, B at most ``max_num_seqs`` and what the KV holds at the shortest
    prompt. Disaggregated: the least of the prefill pool (prompt tokens only) and the decode pool."""
    budget = min(plan.max_num_batched_tokens, 2**16)
    token_s = prefill.iteration_s(np.array([budget]), np.array([0]), _EMPTY) / budget
    shortest = int(lengths.inputs.min()) + 1
    b = max(1, min(plan.max_num_seqs, decode.kv_capacity_tokens // shortest))
    decode_per_s = b / decode.decode_s(b, shortest)
    n_in, decodes = lengths.mean_input, lengths.mean_decodes
    d = plan.disaggregation
    if d is None:
        engine = 1.0 / ((n_in + decodes) * token_s)
        return plan.replicas * (min(engine, decode_per_s / decodes) if decodes > 0 else engine)
    pool = d.prefill_workers / (n_in * token_s)
    return min(pool, d.decode_workers * decode_per_s / decodes) if decodes > 0 else pool


def _mdl_wait(rho: float) -> float:
    """M/D/1 mean wait in service times: rho / (2 (1 - rho)) (Pollaczek-Khinchine); inf at rho >= 1."""
    return rho / (2.0 * (1.0 - rho)) if rho < 1.0 else math.inf


def _engine_state(plan: ServingPlan, cost: ReplicaCost, lengths: Lengths, batch: int,
                  disaggregated: bool) -> tuple[float, float, float] | None:  # fmt: skip
    """(requests/s, TTFT s, TPOT s) of one engine decoding ``batch`` sequences in steady state (module
    docstring), or None when the batch does not fit the engine."""
    n_in, n_dec = lengths.mean_input, max(lengths.mean_decodes, 1e-9)
    ctx = int(n_in + n_dec / 2.0) + 1
    if batch > plan.max_num_seqs or batch * (n_in + n_dec / 2.0) > cost.kv_capacity_tokens:
        return None
    t_decode = cost.decode_s(batch, ctx)
    if disaggregated:
        return batch / (n_dec * t_decode), math.nan, t_decode
    if plan.scheduler is Scheduler.VLLM:
        t_prompt = cost.prefill_s(int(n_in))
        tpot = t_decode + batch * t_prompt / n_dec
        return batch / (n_dec * tpot), t_decode + t_prompt, tpot
    room = plan.max_num_batched_tokens - batch
    chunk = batch * n_in / n_dec
    if room < 1 or chunk > room:
        return None
    t = cost.iteration_s(np.array([max(1, round(chunk))]), np.array([int(n_in / 2)]), np.full(batch, ctx))
    ttft = (math.ceil(n_in / room) + _mdl_wait(chunk / room) * n_in / room) * t
    return batch / (n_dec * t), ttft, t


def steady_goodput(
    plan: ServingPlan, prefill: ReplicaCost, decode: ReplicaCost, lengths: Lengths, slo: SLO
) -> tuple[float, float]:
    """(goodput requests/s, mean end-to-end latency s) of the deployment's steady state (module docstring): the
    largest decode batch per engine whose state meets the targets, found by bisection over the batch (rate,
    TTFT and TPOT all grow with it)."""
    d = plan.disaggregation
    engines = plan.replicas if d is None else d.decode_workers

    def ok(batch: int) -> tuple[float, float, float] | None:
        state = _engine_state(plan, decode, lengths, batch, d is not None)
        if state is None:
            return None
        rate, ttft, tpot = state
        rate *= engines
        if d is not None:
            rate = min(rate, _prefill_pool_rate(d.prefill_workers, prefill, lengths, slo))
            ttft = _prefill_ttft(d.prefill_workers, prefill, lengths, rate)
        meets = (slo.ttft_s is None or ttft <= slo.ttft_s) and (slo.tpot_s is None or tpot <= slo.tpot_s)
        return (rate, ttft, tpot) if meets else None

    lo, hi = 1, plan.max_num_seqs
    best = ok(1)
    if best is None:  # even a batch of one misses a target in the model: start the search below its rate
        state = _engine_state(plan, decode, lengths, 1, d is not None)
        rate = 0.25 * engines * state[0] if state is not None else 0.0
        return rate, math.nan
    while hi > lo:
        mid = (lo + hi + 1) // 2
        state = ok(mid)
        lo, hi, best = (mid, hi, state) if state is not None else (lo, mid - 1, best)
    rate, ttft, tpot = best
    return rate, ttft + lengths.mean_decodes * tpot


def _prefill_pool_rate(workers: int, cost: ReplicaCost, lengths: Lengths, slo: SLO) -> float:
    """Highest rate a pool of prefill engines serves with its M/D/1 mean TTFT within the target."""
    service = cost.prefill_s(int(lengths.mean_input))
    if slo.ttft_s is None:
        return workers / service
    x = slo.ttft_s / service - 1.0  # allowed wait, in service times: rho / (2 (1 - rho)) <= x
    rho = 2.0 * x / (1.0 + 2.0 * x) if x > 0 else 0.0
    return workers * rho / service


def _prefill_ttft(workers: int, cost: ReplicaCost, lengths: Lengths, rate: float) -> float:
    service = cost.prefill_s(int(lengths.mean_input))
    return service * (1.0 + _mdl_wait(rate * service / workers))
