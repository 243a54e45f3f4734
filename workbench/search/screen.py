"""The closed-form screen: step time and peak memory of many plans at once (numpy arrays, one entry per plan).

It calls the step model of :mod:`workbench.cost.step` on arrays, the very functions the full estimate calls
for one plan: compute, exposed tp/cp/ep/ZeRO-3 communication, the pipeline hop, the data-parallel reduction,
the optimizer step and every memory part. Only the pipeline term differs: the closed-form makespan per
schedule (:mod:`workbench.pipeline.bubble`) instead of the simulator, and the closed-form peak of stored
chunks (:mod:`workbench.pipeline.peak`) instead of the simulated in-flight bytes. The screen looks at the
first and the last pipeline rank (the embedding and the LM head make them the heaviest) and, with uneven stages,
at the rank holding the most layers; the critical rank is the one with the longest makespan, and the bubble
follows the other ranks' mean work. Tokens/s, MFU and the
bubble fraction come from :mod:`workbench.estimate.metrics`, as for the estimate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from workbench.cost import step
from workbench.estimate.metrics import bubble_fraction, throughput
from workbench.pipeline import bubble, peak
from workbench.pipeline.schedules import num_directions, uses_v_placement

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.search.space import PlanSpace
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

Cols = dict[str, np.ndarray]
RANKS = ("first", "last")


@dataclass(frozen=True, kw_only=True)
class ScreenContext:
    """Everything the screen needs that does not change from plan to plan."""

    step_ctx: step.StepContext
    schedule_names: tuple[str, ...]
    peak_family: np.ndarray
    """Per schedule code: its ``workbench.pipeline.peak.PEAK_FAMILIES`` index."""
    bubble_family: np.ndarray
    """Per schedule code: its ``workbench.pipeline.bubble.FAMILIES`` index."""
    tiled: np.ndarray
    """Per schedule code: consecutive steps overlap (``workbench.pipeline.bubble.tiles``)."""
    blocking: np.ndarray
    """Per schedule code: its pipeline sends block compute (``FrameworkProfile.blocking_p2p_schedules``)."""
    layout_holdings: dict[str, step.Holdings]
    """For the first, the last, the middle (pp // 2) and the heaviest pipeline rank (``_heaviest_rank``; with
    ``distinct``, true where it holds more layers than both edge ranks, and its ``rank``):
    ``step.rank_holdings`` of every layout row of the space (gathered per plan by ``layout_index``)."""
    capacity_bytes: float
    peak_flop_per_s: float

    @property
    def model(self) -> ModelSpec:
        return self.step_ctx.model

    @property
    def workload(self) -> Workload:
        return self.step_ctx.workload

    def holdings(self, cols: Cols, rank: str) -> step.Holdings:
        """What the ``first`` or ``last`` pipeline rank of every plan holds."""
        idx = cols["layout_index"]
        return {k: np.asarray(v)[idx] for k, v in self.layout_holdings[rank].items()}

    @classmethod
    def build(
        cls, model: ModelSpec, cluster: ClusterSpec, workload: Workload, cal: Calibration, space: PlanSpace
    ) -> ScreenContext:
        lay = space.layout
        v_shape = np.array([uses_v_placement(n) for n in space.schedule_names])[lay["schedule_code"]]
        copies = np.array([num_directions(n) for n in space.schedule_names])[lay["schedule_code"]]
        heavy = _heaviest_rank(model, lay["pp"], lay["vpp"], v_shape, copies)
        held = {
            name: step.rank_holdings(
                model, pp=lay["pp"], vpp=lay["vpp"], v_shape=v_shape, rank=rank, copies=copies
            )
            for name, rank in zip(
                (*RANKS, "middle", "heavy"), (0, lay["pp"] - 1, lay["pp"] // 2, heavy), strict=True
            )
        }
        n = len(lay["pp"])
        layers = {k: np.asarray(h["dense"] + h["moe"]) for k, h in held.items()}
        held["heavy"]["distinct"] = layers["heavy"] > np.maximum(layers["first"], layers["last"])
        held["heavy"]["rank"] = heavy
        return cls(
            step_ctx=step.StepContext.build(model, cluster, workload, cal),
            schedule_names=space.schedule_names,
            peak_family=peak.family_codes(space.schedule_names),
            bubble_family=bubble.family_of(space.schedule_names),
            tiled=bubble.tiles(space.schedule_names, post_validation=cal.framework.optimizer_post_validation),
            blocking=np.array(
                [n in cal.framework.blocking_p2p_schedules for n in space.schedule_names], dtype=bool
            ),
            layout_holdings={r: {k: np.broadcast_to(v, n) for k, v in h.items()} for r, h in held.items()},
            capacity_bytes=cluster.device.hbm_bytes,
            peak_flop_per_s=cluster.device.peak(workload.dtype),
        )


def _heaviest_rank(
    model: ModelSpec, pp: np.ndarray, vpp: np.ndarray, v_shape: np.ndarray, copies: Any
) -> Any:
    """Per layout row, the pipeline rank holding the most layers (the lowest such rank): with uneven stages a
    middle rank can carry more work than the first or the last (the remainder layers go to the middle stages,
    ``step.stage_layer_span``), and then it sets the pipeline's pace. Worked out once per distinct
    (pp, vpp, placement, copies)."""
    keys = np.stack(np.broadcast_arrays(pp, vpp, v_shape, copies), axis=1).astype(np.int64)
    unique, which = np.unique(keys, axis=0, return_inverse=True)
    best = np.zeros(len(unique), dtype=np.int64)
    for u, (p, v, shape, c) in enumerate(unique):
        ranks = np.arange(p)
        held = step.rank_holdings(
            model, pp=np.full(p, p), vpp=np.full(p, v), v_shape=np.full(p, bool(shape)), rank=ranks, copies=c
        )
        best[u] = int(np.argmax(np.asarray(held["dense"] + held["moe"])))
    return best[np.ravel(which)]


def screen_memory(ctx: ScreenContext, cols: Cols) -> Cols:
    """peak_memory_bytes and memory_frac (of the device capacity) of every plan: the larger of the first and
    the last pipeline rank, with the stored activations at the schedule's closed-form peak; for DualPipe, whose
    ranks all hold PP+1 micro-batches (DeepSeek-V3 report Table 2) and whose first and last ranks hold the two
    edge stages (the fewest layers when stages are uneven), the middle rank too; where a middle rank holds more
    layers than both edge ranks, that rank at its own peak count (``peak.peak_chunks_at``)."""
    sizes = shared_by(lambda sub: step.activation_sizes(ctx.step_ctx, sub), cols, step.layer_columns(cols))
    shared, terms = (
        step.static_shared(ctx.step_ctx, cols),
        shared_by(partial(peak_terms, ctx), cols, PEAK_COLUMNS),
    )
    totals = [_rank_total(ctx, cols, rank, sizes, shared, terms) for rank in RANKS]
    dual = terms.family == peak.PEAK_FAMILIES.index("dualpipe")
    if np.any(dual):
        totals.append(np.where(dual, _rank_total(ctx, cols, "middle", sizes, shared, terms), 0.0))
    peak_bytes = np.max(totals, axis=0)
    distinct = np.flatnonzero(np.asarray(ctx.layout_holdings["heavy"]["distinct"])[cols["layout_index"]])
    if len(distinct):  # uneven stages: the rank with the most layers, at its own count of stored chunks
        n = len(peak_bytes)
        sub = {k: v[distinct] for k, v in cols.items()}
        heavy = _rank_total(
            ctx,
            sub,
            "heavy",
            take_plans(sizes, distinct, n),
            take_plans(shared, distinct, n),
            take_plans(terms, distinct, n),
        )
        peak_bytes[distinct] = np.maximum(peak_bytes[distinct], heavy)
    return {"peak_memory_bytes": peak_bytes, "memory_frac": peak_bytes / ctx.capacity_bytes}


class PeakTerms(NamedTuple):
    """The closed-form pipeline peak of one chunk's plans that no rank changes: the peak family, rank 0's and
    the last rank's peak counts of stored chunks (``peak.peak_chunks``) and stage 0's micro-batches in flight."""

    family: Any
    chunks0: Any
    chunks_last: Any
    first_stage: Any


PEAK_COLUMNS = ("schedule_code", "pp", "vpp", "num_microbatches")
"""The plan columns ``peak_terms`` reads."""


def peak_terms(ctx: ScreenContext, cols: Cols) -> PeakTerms:
    """``PeakTerms`` of ``cols`` (see ``_stored_peak_bytes``); it reads only ``PEAK_COLUMNS``."""
    pp, vpp, m = cols["pp"], cols["vpp"], cols["num_microbatches"]
    family = ctx.peak_family[cols["schedule_code"]]
    chunks0, chunks_last = peak.peak_chunks(family, pp=pp, vpp=vpp, m=m)
    # micro-batches of stage 0 in flight: all of rank 0's chunks without interleaving; looped BFS: all m;
    # interleaved 1F1B / ZB-H1: stage 0's backward comes last in each micro-batch, about 2p - 1 of them
    # (read off the simulator); V schedules: rank 0's mean
    code = peak.PEAK_FAMILIES.index
    looped = (family == code("interleaved-1f1b")) | (family == code("zb-h1"))
    first_stage = np.select(
        [vpp == 1, family == code("looped-bfs"), looped],
        [chunks0, m, np.minimum(chunks0, np.minimum(m, 2 * pp - 1))],
        chunks0 / vpp,
    )
    return PeakTerms(family, chunks0, chunks_last, first_stage)


def _stored_peak_bytes(
    ctx: ScreenContext,
    cols: Cols,
    held: step.Holdings,
    rank: str,
    sizes: step.ActivationSizes,
    terms: PeakTerms | None = None,
) -> Any:
    """Closed-form peak of stored activations on the first or the last rank (the pipeline term); ``terms``:
    ``peak_terms(ctx, cols)`` when the caller has it."""
    pp, vpp, m = cols["pp"], cols["vpp"], cols["num_microbatches"]
    family, chunks0, chunks_last, first_stage = peak_terms(ctx, cols) if terms is None else terms
    chunks = chunks0
    if rank == "heavy":  # a middle rank: no embedding, its own peak count
        r = held["rank"]
        at = peak.peak_chunks_at(family, pp=pp, vpp=vpp, m=m, rank=r, edges=(chunks0, chunks_last))
        chunks = peak.split_backward_at(
            family, at, rank=r, freed_frac=sizes.freed_at_input_grad_frac, pp=pp, m=m
        )
    if rank == "last":
        chunks = peak.split_backward_last_rank(
            family, chunks_last, pp=pp, m=m, freed_frac=sizes.freed_at_input_grad_frac
        )
    per_chunk = (held["dense"] * sizes.dense_layer + held["moe"] * sizes.moe_layer) / vpp  # the rank's mean
    # per-micro-batch pipeline buffers (step.stored_activation_bytes): the first stage keeps its output, the
    # last stage's input is a receive buffer counted in static_memory (its in-flight count: the rank's mean)
    edge = (
        np.asarray(held["embedding"], dtype=float) * first_stage
        - np.asarray(held["head"], dtype=float) * chunks / vpp
    ) * sizes.pipeline_edge
    return chunks * per_chunk + held["embedding"] * first_stage * sizes.embedding + edge


def _rank_total(
    ctx: ScreenContext,
    cols: Cols,
    rank: str,
    sizes: step.ActivationSizes,
    shared: step.StaticShared | None = None,
    terms: PeakTerms | None = None,
) -> Any:
    held = ctx.holdings(cols, rank)
    cal = ctx.step_ctx.cal
    parts = step.memory_columns(
        step.static_memory(ctx.step_ctx, cols, held, sizes, shared),
        _stored_peak_bytes(ctx, cols, held, rank, sizes, terms),
        overhead_bytes=cal.framework.context_bytes,
        fragmentation_frac=cal.framework.fragmentation_frac,
    )
    return sum(parts.values())


def rank_terms(
    ctx: ScreenContext,
    cols: Cols,
    rank: str,
    layers: Layers | None = None,
    *,
    memory: bool = True,
) -> dict[str, Any]:
    """Every non-pipeline term of the ``first`` or ``last`` pipeline rank of every plan: f, i, w, compute and
    the exposed tp, cp, ep and fsdp seconds per micro-batch (``step.share_s``), the pipeline hop ``p2p_s``,
    ``dp_comm_s`` and ``optimizer_s`` per step, and (``memory``) the static memory parts
    (``step.static_memory``)."""
    sc = ctx.step_ctx
    pair, fsdp = layers or layer_terms(ctx, cols)
    held = ctx.holdings(cols, rank)
    dense, expert = step.params_held(sc, cols, held)
    blocking = ctx.blocking[cols["schedule_code"]] & (cols["pp"] > 1)
    hop = step.pp_hop_s(sc, cols)
    share = step.share_s(pair, held, fsdp, step.pp_blocking_s(hop, blocking, cols["vpp"] / held["copies"]))
    dp = step.dp_comm_s(sc, cols, dense, expert, step.whole_share(ctx.model, pair, fsdp))
    return {
        **share,
        "p2p_s": step.pp_latency_s(hop, blocking),
        "dp_comm_s": dp.exposed,
        "dp_hidden_s": dp.hidden,
        "optimizer_s": step.optimizer_s(sc, cols, dense, expert),
        **(step.static_memory(sc, cols, held) if memory else {}),
    }


Layers = tuple[step.LayerPair, Any]
"""``layer_terms``' per-layer costs and ZeRO-3's per-layer communication of a chunk's plans."""


def layer_terms(ctx: ScreenContext, cols: Cols) -> Layers:
    """Per-layer costs (``step.layer_pair``) and ZeRO-3's exposed per-layer communication (``step.fsdp_layer_s``)
    of every plan, shared by all its ranks. The layer costs are priced once per distinct combination of the
    columns they read (``step.layer_columns``; a chunk of a planner's space has about a hundred times fewer
    than plans: zero stage, dp, pp, vpp and schedule do not change a layer)."""
    pair = shared_by(lambda sub: step.layer_pair(ctx.step_ctx, sub), cols, step.layer_columns(cols))
    return pair, step.fsdp_layer_s(ctx.step_ctx, cols, step.mean_layer_compute_s(ctx.model, pair))


def shared_by(fn: Callable[[Cols], Any], cols: Cols, names: tuple[str, ...] | None) -> Any:
    """``fn(cols)``, worked out on one plan of each distinct combination of the columns ``names`` (which must
    be every column ``fn`` reads) and handed back to every plan: arrays (or named tuples of them) with one entry
    per plan. ``names`` None, or columns ``distinct_rows`` cannot key, call ``fn`` on every plan."""
    distinct = distinct_rows(cols, names) if names is not None else None
    if distinct is None:
        return fn(cols)
    first, inverse = distinct
    return take_plans(fn({k: np.asarray(v)[first] for k, v in cols.items()}), inverse, len(first))


def distinct_rows(cols: Cols, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """(first, inverse) over the plans of ``cols``: the index of one plan of each distinct combination of the
    integer (or boolean) columns ``names``, and per plan the position of its combination in ``first``, so
    ``cols[k][first][inverse] == cols[k]`` for every k of ``names``. None where a column is not integral or
    there are fewer than two plans (nothing to share)."""
    n = len(cols["tp"])
    if n < 2:
        return None
    parts = []
    for k in names:
        c = np.broadcast_to(np.asarray(cols[k]), (n,))
        if not (np.issubdtype(c.dtype, np.integer) or c.dtype == np.bool_):
            return None
        parts.append(c.astype(np.int64))
    key, span = np.zeros(n, dtype=np.int64), 1
    for c in parts:  # mixed radix: one int64 per plan while the spans multiply below 2**62
        lo = int(c.min())
        radix = int(c.max()) - lo + 1
        if span * radix >= 1 << 62:
            _, first, inverse = np.unique(
                np.stack(parts, axis=1), axis=0, return_index=True, return_inverse=True
            )
            return first, np.ravel(inverse)
        key, span = key * radix + (c - lo), span * radix
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse


def tokens_per_s_bound(ctx: ScreenContext, cols: Cols, layers: Layers) -> Any:
    """The most tokens/s each plan of ``cols`` can reach: a device runs its forward, backward and
    weight-gradient actions one after another, so a step lasts at least ``num_microbatches`` times the compute
    of its busier edge rank (``step.compute_s``); communication, the bubble, the data-parallel reduction and the
    optimizer step only add to it. ``layers``: ``layer_terms(ctx, cols)``. Tokens per second, one per plan, never
    below ``screen_time``'s ``tokens_per_s`` (tested over whole spaces)."""
    pair, _ = layers
    busiest = np.max([step.compute_s(pair, ctx.holdings(cols, rank)) for rank in RANKS], axis=0)
    return ctx.workload.tokens_per_step / (cols["num_microbatches"] * busiest)


def take_plans(x: Any, idx: np.ndarray, n: int) -> Any:
    """Entries ``idx`` of every per-plan array (length ``n``) in ``x``, through nested named tuples; scalars and
    other shapes pass unchanged."""
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(take_plans(v, idx, n) for v in x))
    if isinstance(x, tuple):
        return tuple(take_plans(v, idx, n) for v in x)
    a = np.asarray(x)
    return a[idx] if a.ndim == 1 and len(a) == n else x


def _critical(
    best: dict[str, Any], share: dict[str, Any], whole: dict[str, Any], cols: Cols, ctx: ScreenContext
) -> dict[str, Any]:
    """``best`` (the critical rank so far; empty at first) or ``share`` (one more rank's terms), plan by plan,
    whichever has the longer makespan (``bubble.makespan_s``, the other ranks' mean setting the bubble); the
    data-parallel reduction and the optimizer step are the slowest rank's either way."""
    pp = cols["pp"]
    # every rank waits on as many blocking sends per micro-batch as this one (``step.pp_blocking_s``); the
    # whole-model share holds none, so they come off this rank's share and back onto the others' mean
    sends = {"f": share["pp"] / 2, "i": share["pp"] / 2, "w": 0.0}
    others = tuple(
        (whole[k] - share[k] + sends[k]) / np.maximum(pp - 1, 1) + sends[k] for k in ("f", "i", "w")
    )
    share["makespan"] = bubble.makespan_s(
        ctx.bubble_family[cols["schedule_code"]],
        pp=pp,
        vpp=cols["vpp"],
        m=cols["num_microbatches"],
        f_s=share["f"],
        i_s=share["i"],
        w_s=share["w"],
        p2p_time_s=share["p2p_s"],
        others=others,
        tiled=ctx.tiled[cols["schedule_code"]],
    )
    if not best:
        return share
    share["dp_comm_s"] = np.maximum(share["dp_comm_s"], best["dp_comm_s"])
    share["optimizer_s"] = np.maximum(share["optimizer_s"], best["optimizer_s"])
    take = share["makespan"] >= best["makespan"]
    return {k: np.where(take, share[k], best[k]) for k in share}


def trimmed_recompute(ctx: ScreenContext, cols: Cols, limit_bytes: float) -> Cols:
    """For the plans of ``cols`` that recompute every layer (and fit), the same plans recomputing only the
    fewest layers of each chunk that still fit under ``limit_bytes`` (``ParallelPlan.recompute_num_layers``,
    Megatron's block method), as new rows with their ``screen_memory`` columns; none for a plan whose chunks
    hold one layer, that fits without recompute (its own plan in the space) or that no longer fits with one
    layer fewer recomputed. A rank's memory falls linearly as its recomputed share rises
    (``step.activation_sizes``), so two points, about half the layers of a chunk and all of them, give the
    share that meets the limit; the peak is the largest rank's (piecewise linear), so the count found is
    checked once more. ``cols``: plan columns with ``screen_memory``'s (``peak_memory_bytes`` is read);
    ``limit_bytes``: usable device memory, bytes. Returns the variants' columns (one entry per variant, every
    column of ``cols`` kept, ``recompute_layers`` set, ``screen_memory``'s recomputed)."""
    full = np.flatnonzero(np.asarray(cols["recompute_code"]) == step.RECOMPUTE_CODES["full"])
    sub = {k: np.asarray(v)[full] for k, v in cols.items()}
    chunk = ctx.model.num_layers / (sub["pp"] * sub["vpp"])
    half = np.maximum(np.floor(chunk / 2), 1).astype(np.int64)
    probe = np.flatnonzero(half < chunk)
    sub = {k: v[probe] for k, v in sub.items()}
    chunk, half = chunk[probe], half[probe]
    at_half = screen_memory(ctx, {**sub, "recompute_layers": half})["peak_memory_bytes"]
    at_all = sub["peak_memory_bytes"]
    per_share = (at_half - at_all) / (1.0 - half / chunk)  # bytes a kept share of 1 adds, on the line
    need = 1.0 - (limit_bytes - at_all) / np.maximum(per_share, 1e-300)
    layers = np.maximum(np.ceil(need * chunk - 1e-9), 1).astype(np.int64)
    # need <= 0: the plan fits recomputing nothing, which the space holds as its own plan
    fewer = np.flatnonzero((per_share > 0) & (need > 0) & (layers < chunk))
    trial = {**{k: v[fewer] for k, v in sub.items()}, "recompute_layers": layers[fewer]}
    mem = screen_memory(ctx, trial)
    keep = np.flatnonzero(mem["peak_memory_bytes"] <= limit_bytes)
    return {k: np.asarray(v)[keep] for k, v in {**trial, **mem}.items()}


def screen_time(ctx: ScreenContext, cols: Cols, layers: Layers | None = None) -> Cols:
    """Closed-form step time of every plan, its breakdown (seconds, ``StepBreakdown`` names), tokens_per_s,
    mfu, hfu and bubble_fraction. The pipeline makespan is ``workbench.pipeline.bubble.makespan_s`` on the
    first and the last rank's share (and, with uneven stages, the heaviest rank's compute and per-layer
    communication); the slowest is the critical rank whose parts the breakdown reports. ``layers``:
    ``layer_terms(ctx, cols)`` where the caller has them."""
    model = ctx.model
    pp, vpp, m = cols["pp"], cols["vpp"], cols["num_microbatches"]
    layers = layers or layer_terms(ctx, cols)
    pair, fsdp = layers
    whole = step.whole_share(model, pair, fsdp)
    best: dict[str, Any] = {}
    for rank in RANKS:
        best = _critical(best, rank_terms(ctx, cols, rank, layers, memory=False), whole, cols, ctx)
    distinct = np.flatnonzero(np.asarray(ctx.layout_holdings["heavy"]["distinct"])[cols["layout_index"]])
    if len(distinct):  # uneven stages: a middle rank may be the critical one
        n = len(pp)
        sub = {k: v[distinct] for k, v in cols.items()}
        edge = {k: np.broadcast_to(v, n)[distinct] for k, v in best.items()}
        # its compute and per-layer communication (``step.share_s``); the pipeline hop is the same for every
        # rank, and the data-parallel reduction and the optimizer step stay the edge ranks' (a middle rank holds
        # neither the embedding nor the LM head, so its share of those differs by its extra layers only)
        heavy = {
            **step.share_s(
                take_plans(pair, distinct, n),
                ctx.holdings(sub, "heavy"),
                take_plans(fsdp, distinct, n),
                edge["pp"],  # every rank waits on the same number of hops per micro-batch
            ),
            **{k: edge[k] for k in ("p2p_s", "dp_comm_s", "dp_hidden_s", "optimizer_s")},
        }
        sub_best = _critical(
            edge, heavy, {k: np.broadcast_to(v, n)[distinct] for k, v in whole.items()}, sub, ctx
        )
        best = {k: np.array(np.broadcast_to(v, n), dtype=float) for k, v in best.items()}
        for k in best:
            best[k][distinct] = sub_best[k]
    dp_s, opt_s, p2p = best["dp_comm_s"], best["optimizer_s"], best["p2p_s"]
    step_time = best["makespan"] + dp_s + opt_s
    idle = np.maximum(best["makespan"] - m * (best["f"] + best["i"] + best["w"]), 0.0)
    pp_comm = np.minimum(idle, np.where(pp > 1, 2 * (pp * vpp - 1), 0) * p2p)
    figures = throughput(
        model,
        ctx.workload,
        step_time_s=step_time,
        num_devices=cols["num_devices"],
        peak_flop_per_s=ctx.peak_flop_per_s,
        recompute_code=cols["recompute_code"],
        recompute_share=step.recompute_share(model, cols),
    )
    return {
        "step_time_s": step_time,
        "tokens_per_s": figures["tokens_per_s"],
        "mfu": figures["mfu"],
        "hfu": figures["hfu"],
        "compute_s": m * best["compute"],
        "exposed_tp_comm_s": m * best["tp"],
        "exposed_cp_comm_s": m * best["cp"],
        "exposed_ep_comm_s": m * best["ep"],
        "exposed_pp_comm_s": pp_comm + m * (best["vocab"] + best["pp"]),
        "exposed_dp_comm_s": m * best["fsdp"] + dp_s,
        "bubble_s": idle - pp_comm,
        "bubble_fraction": bubble_fraction(idle - pp_comm, step_time),
        "optimizer_s": opt_s,
    }
