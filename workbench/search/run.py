"""``search``: screen every plan of one or more cluster sizes in chunks, keep the best, refine the top K.

Per chunk of plans (bounded memory, ``grid.DEFAULT_CHUNK`` plans at a time): the rule checks of
``grid.rule_reasons``; the closed-form peak memory of the plans that pass (``screen.screen_memory``); the
closed-form step time of those that fit and could still enter the pools (``screen.screen_time``; ``_hopeless``
skips the rest by a bound on their tokens/s); then the chunk's best ``keep`` plans by the
objective, its Pareto frontier and its closest memory misses join running pools that never exceed a few
hundred rows. The pools become the frames of ``SearchResult``; the top K go through the full backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from workbench.cost.memory import RECOMPUTE_CODES
from workbench.search import grid, rank, screen
from workbench.search.frontier import pareto_mask
from workbench.search.space import Constraints, PlanSpace, build_space

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

Progress = Callable[[int, int], None]
"""Called with (plans screened so far, plans in the whole search)."""

Pool = dict[str, np.ndarray]

NUM_MISSES = 5


@dataclass(kw_only=True)
class _Pools:
    """Running best plans, frontier and misses over all chunks (numpy columns)."""

    best: list[Pool] = field(default_factory=list)
    frontier: list[Pool] = field(default_factory=list)
    misses: list[Pool] = field(default_factory=list)
    rejections: dict[str, int] = field(default_factory=lambda: {k: 0 for k, _ in grid.REASONS})
    num_plans: int = 0
    num_feasible: int = 0
    num_costed: int = 0
    num_skipped: int = 0


def _take(cols: Pool, idx: np.ndarray) -> Pool:
    return {k: v[idx] for k, v in cols.items()}


def memory_frontier(cols: Pool) -> np.ndarray:
    """True for the plans of ``cols`` on the frontier of higher ``tokens_per_s`` against lower
    ``peak_memory_bytes`` (exact duplicates keep one copy)."""
    return pareto_mask((cols["tokens_per_s"], cols["peak_memory_bytes"]), (True, False))


def _concat(pools: list[Pool]) -> Pool:
    if not pools:
        return {}
    return {k: np.concatenate([p[k] for p in pools]) for k in pools[0]}


def _compact(pools: _Pools, objective: str, keep: int) -> None:
    best = _concat(pools.best)
    pools.best = [_take(best, rank.best_indices(rank.score(best, objective), keep))] if best else []
    front = _concat(pools.frontier)
    if front:
        pools.frontier = [_take(front, memory_frontier(front))]
    miss = _concat(pools.misses)
    if miss:
        pools.misses = [_take(miss, rank.best_indices(-miss["memory_frac"], NUM_MISSES))]


RECOMPUTE_SLOWDOWN_BOUND = 1.5
"""At most how much slower recomputing every layer makes a plan than recomputing none: a layer's forward runs
once more, at most a third of its compute (its backward takes at least twice the forward: Narayanan et al.
2021 section 5.1; fused attention 2.5x, Dao 2023), and its tensor-, context- and expert-parallel traffic at
most half again (``workbench.cost.layer.layer_costs`` repeats the forward's share in the backward)."""


def _every_layer(pool: Pool) -> Pool:
    """``pool`` with a ``recompute_layers`` column (``step.recompute_share``; 0: every layer) where it has none:
    the screened plans carry it only once a partial-recompute variant joins them."""
    if "recompute_layers" not in pool:
        pool["recompute_layers"] = np.zeros(len(pool["tp"]), dtype=np.int64)
    return pool


def _trimmed(
    ctx: screen.ScreenContext, ok: Pool, candidates: np.ndarray, limit: float, token_budget: float
) -> Pool:
    """``screen.trimmed_recompute`` of ``ok``'s rows ``candidates`` (full-recompute plans), with their step time
    and objective columns (every column of ``ok`` and ``recompute_layers``)."""
    trimmed = screen.trimmed_recompute(ctx, _take(ok, candidates), limit)
    if len(trimmed["tp"]):
        trimmed.update(screen.screen_time(ctx, trimmed))
        trimmed.update(rank.objective_columns(trimmed["tokens_per_s"], trimmed["num_devices"], token_budget))
    return {k: trimmed[k] for k in (*ok, "recompute_layers")}


def _hopeless(
    ctx: screen.ScreenContext,
    ok: Pool,
    layers: screen.Layers,
    pools: _Pools,
    objective: str,
    keep: int,
    token_budget: float,
    *,
    partial: bool,
) -> np.ndarray:
    """True for the plans of ``ok`` (they fit) that can reach neither the final best plans nor the frontier,
    judged against the pools of the chunks before: even at their most tokens/s (``screen.tokens_per_s_bound``;
    times ``RECOMPUTE_SLOWDOWN_BOUND`` for full-recompute plans when ``partial`` variants are made, which are
    faster by at most that and never lighter) they score below the ``keep``-th best plan so far, and a plan of
    the frontier so far with no more memory has more tokens/s. The pools only improve, so such a plan (and
    any variant of it) would be dropped at a later compaction; pricing it is skipped. All False until the best
    pool holds ``keep`` plans."""
    best, front = _concat(pools.best), _concat(pools.frontier)
    if not best or len(best["tp"]) < keep or not front:
        return np.zeros(len(ok["tp"]), dtype=bool)
    tokens = screen.tokens_per_s_bound(ctx, ok, layers)
    if partial:
        full = ok["recompute_code"] == RECOMPUTE_CODES["full"]
        tokens = np.where(full, tokens * RECOMPUTE_SLOWDOWN_BOUND, tokens)
    hope = {"tokens_per_s": tokens, **rank.objective_columns(tokens, ok["num_devices"], token_budget)}
    below = rank.score(hope, objective) < np.min(rank.score(best, objective))
    order = np.argsort(front["peak_memory_bytes"], kind="stable")
    memory = front["peak_memory_bytes"][order]
    most = np.maximum.accumulate(front["tokens_per_s"][order])  # most tokens/s at this memory or less
    at = np.searchsorted(memory, ok["peak_memory_bytes"], side="right") - 1
    beaten = (at >= 0) & (most[np.maximum(at, 0)] > tokens)
    return below & beaten


def _screen_chunk(
    ctx: screen.ScreenContext,
    space: PlanSpace,
    cols: Pool,
    pools: _Pools,
    objective: str,
    keep: int,
    token_budget: float,
    headroom_frac: float,
) -> None:
    reasons = grid.rule_reasons(
        cols,
        ctx.model,
        ctx.workload,
        ctx.schedule_names,
        uneven_stages=ctx.step_ctx.cal.framework.uneven_stages,
    )
    per_row = len(space.zero_stage) * len(space.recompute_code)
    for i, (key, _) in enumerate(grid.REASONS[: grid.MEMORY_REASON]):
        pools.rejections[key] += per_row * int(np.count_nonzero(reasons == i))
    valid = grid.expand(space, _take(cols, np.flatnonzero(reasons < 0)))
    refused = grid.stack_mask(valid, ctx.step_ctx.cal.framework)
    if refused.any():
        pools.rejections["stack"] += int(np.count_nonzero(refused))
        valid = _take(valid, np.flatnonzero(~refused))
    mem = screen.screen_memory(ctx, valid)
    valid.update(mem)
    limit = ctx.capacity_bytes * (1.0 - headroom_frac)
    fits = valid["peak_memory_bytes"] <= limit
    pools.rejections["memory"] += int(np.count_nonzero(~fits))
    if not fits.all():
        miss = _take(valid, np.flatnonzero(~fits))
        pools.misses.append(_every_layer(_take(miss, rank.best_indices(-miss["memory_frac"], NUM_MISSES))))
    ok = _take(valid, np.flatnonzero(fits))
    pools.num_costed += len(fits)
    pools.num_feasible += len(ok["tp"])
    if not len(ok["tp"]):
        return
    partial = ctx.step_ctx.cal.framework.partial_recompute
    layers = screen.layer_terms(ctx, ok)
    hopeless = _hopeless(ctx, ok, layers, pools, objective, keep, token_budget, partial=partial)
    if hopeless.any():
        pools.num_skipped += int(np.count_nonzero(hopeless))
        hopeful = np.flatnonzero(~hopeless)
        layers = screen.take_plans(layers, hopeful, len(hopeless))
        ok = _take(ok, hopeful)
        if not len(ok["tp"]):
            return
    ok.update(screen.screen_time(ctx, ok, layers))
    ok.update(rank.objective_columns(ok["tokens_per_s"], ok["num_devices"], token_budget))
    scores = rank.score(ok, objective)
    best = _take(ok, rank.best_indices(scores, keep))
    on_front = memory_frontier(ok)
    front = _take(ok, np.flatnonzero(on_front))
    if partial:
        # Variants that recompute only the layers memory needs, of the full-recompute plans that could enter
        # the best plans (were recompute free: tokens/s x RECOMPUTE_SLOWDOWN_BOUND) or are on the frontier.
        bar = np.min(rank.score(best, objective)) if len(scores) > keep else -np.inf
        full = np.flatnonzero(ok["recompute_code"] == RECOMPUTE_CODES["full"])
        tokens = ok["tokens_per_s"][full] * RECOMPUTE_SLOWDOWN_BOUND
        hope = {
            "tokens_per_s": tokens,
            **rank.objective_columns(tokens, ok["num_devices"][full], token_budget),
        }
        near = rank.score(hope, objective) >= bar
        trimmed = _trimmed(ctx, ok, full[near | on_front[full]], limit, token_budget)
        if len(trimmed["tp"]):
            best, front = _every_layer(best), _every_layer(front)
            best = _concat([best, trimmed])
            best = _take(best, rank.best_indices(rank.score(best, objective), keep))
            front = _concat([front, trimmed])
            front = _take(front, np.flatnonzero(memory_frontier(front)))
    pools.best.append(_every_layer(best))
    pools.frontier.append(_every_layer(front))


@dataclass(frozen=True, kw_only=True)
class ScreenOutcome:
    """What the screen of all cluster sizes found (numpy columns; see ``result.SearchResult`` for frames)."""

    best: Pool
    frontier: Pool
    misses: Pool
    rejections: dict[str, int]
    num_plans: int
    num_costed: int
    num_feasible: int
    screen_s: float
    """Wall time of the screen, s."""
    screen_cpu_s: float = 0.0
    """CPU time this process spent on the screen (``time.process_time``: all its threads), s."""
    num_skipped: int = 0
    """Feasible plans whose step time was not priced: they could beat neither the best plans nor the frontier
    found before them (``_hopeless``)."""
    clusters: tuple[ClusterSpec, ...]
    schedule_names: tuple[str, ...]


def screen_all(
    model: ModelSpec,
    clusters: Sequence[ClusterSpec],
    workload: Workload,
    constraints: Constraints,
    *,
    calibration: Calibration,
    objective: str = "throughput",
    keep: int = 200,
    token_budget: float = rank.DEFAULT_TOKEN_BUDGET,
    chunk_plans: int = grid.DEFAULT_CHUNK,
    progress: Progress | None = None,
) -> ScreenOutcome:
    """Screen every plan of ``model`` on each of ``clusters`` (one per node count) under ``constraints``.

    Returns the ``keep`` best feasible plans by ``objective``, the Pareto frontier (tokens/s against peak
    memory per device), the closest memory misses and the rejection counts. Memory stays bounded by
    ``chunk_plans`` plans of numpy columns plus the pools.
    """
    rank.check_objective(objective)
    start, cpu_start = time.perf_counter(), time.process_time()
    pools = _Pools()
    spaces = [
        (c, build_space(model, c, constraints))
        for c in clusters
        if constraints.max_devices is None or c.num_devices <= constraints.max_devices
    ]
    total = sum(s.size for _, s in spaces)
    names: tuple[str, ...] = spaces[0][1].schedule_names if spaces else ()
    for cluster, space in spaces:
        ctx = screen.ScreenContext.build(model, cluster, workload, calibration, space)
        for lo, hi in grid.chunk_bounds(space, chunk_plans):
            cols = grid.rule_columns(space, lo, hi, workload.global_batch_size)
            cols["num_devices"] = np.full(len(cols["tp"]), cluster.num_devices, dtype=np.int64)
            cols["num_nodes"] = np.full(len(cols["tp"]), cluster.num_nodes, dtype=np.int64)
            _screen_chunk(
                ctx, space, cols, pools, objective, keep, token_budget, constraints.memory_headroom_frac
            )
            pools.num_plans += (hi - lo) * space.inner_size
            _compact(pools, objective, keep)
            if progress is not None:
                progress(pools.num_plans, total)
    return ScreenOutcome(
        best=_concat(pools.best),
        frontier=_concat(pools.frontier),
        misses=_concat(pools.misses),
        rejections=pools.rejections,
        num_plans=pools.num_plans,
        num_costed=pools.num_costed,
        num_skipped=pools.num_skipped,
        num_feasible=pools.num_feasible,
        screen_s=time.perf_counter() - start,
        screen_cpu_s=time.process_time() - cpu_start,
        clusters=tuple(c for c, _ in spaces),
        schedule_names=names,
    )
