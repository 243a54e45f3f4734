"""Closed-form peak memory per device for the screen, vectorised over plans.

The analytic backend reads the peak of stored activations off the simulated schedule
(:mod:`workbench.analytic_memory`); the screen cannot simulate millions of plans, so it uses the peak number
of stage activations (chunks) a rank holds, in closed form per schedule. The forms below reproduce a walk
over the generators' per-rank action orders (+1 chunk at F, -1 at B or W; a test checks them on a grid of
pp, vpp and micro-batch counts), all capped at ``m * vpp`` (every chunk of every micro-batch):

- GPipe (Huang et al. 2019): m; looped BFS: m v (all forwards first);
- 1F1B (Narayanan et al. 2021 section 2.2): min(p, m) on rank 0, 1 on the last rank;
- interleaved 1F1B (Megatron's warm-up, ibid.): 2(p-1) + (v-1)p + 1 on rank 0 when m >= 2p, else m v;
  last rank (v-1)p + 1 (m >= 2p) or (v-1)m + 1;
- ZB-H1 (Qi et al. 2024): v min(p, m) for v = 1 or m >= 2p; between p and 2p, m v - (m - p);
- ZB-H2: min(2p-1, m); ZB-V (Qi et al. 2024): min(2p, m+1) on rank 0, min(2p, 2m) on the last rank;
  V-Half, V-Min (Qi et al. 2025): the generators' caps ``2 ((p+2)//2)`` and ``2 ((p+4)//3)``; DualPipeV (DeepSeek-V3 report): 2p + 1.

Split-backward schedules free most of a chunk when its I pass ends (the weight-gradient inputs stay until
W); the screen keeps the whole chunk until W, an upper bound (the refinement gives the exact figure).
Everything else (model states, logits, recompute working set, buffers, framework overhead and
fragmentation) uses the same functions and conventions as :mod:`workbench.analytic_memory`; the peak is the
larger of the first and the last pipeline rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.costs import ACT_BYTES
from workbench.memory import (
    layer_activation_bytes,
    logits_bytes,
    model_state_bytes,
    recompute_working_bytes,
)

Array = Any


PEAK_FAMILIES: tuple[str, ...] = (
    "gpipe",
    "looped-bfs",
    "1f1b",
    "interleaved-1f1b",
    "zb-h1",
    "zb-h2",
    "zbv",
    "v-half",
    "v-min",
    "dualpipev",
)
"""Schedules with their own closed form, indexed by the family code ``family_codes`` returns."""


def family_codes(names: tuple[str, ...]) -> np.ndarray:
    """Per schedule code, its index in ``PEAK_FAMILIES``."""
    return np.array([PEAK_FAMILIES.index(n) for n in names], dtype=np.int8)


def peak_chunks(family: Array, *, pp: Array, vpp: Array, m: Array) -> tuple[Array, Array]:
    """(rank 0, last rank) peak stage activations held, in chunks, for schedules of family codes ``family``
    (see the module docstring)."""
    p, v = pp, vpp
    inter0 = np.where(m >= 2 * p, 2 * (p - 1) + (v - 1) * p + 1, m * v)
    zbh1 = np.where((v == 1) | (m >= 2 * p) | (m <= p), v * np.minimum(p, m), m * v - (m - p))
    first = np.choose(
        family,
        [
            m,
            m * v,
            np.minimum(p, m),
            inter0,
            zbh1,
            np.minimum(2 * p - 1, m),
            np.minimum(2 * p, m + 1),
            2 * ((p + 2) // 2),
            2 * ((p + 4) // 3),
            2 * p + 1,
        ],
    )
    last = np.where(family == 2, 1, first)
    last = np.where(family == 6, np.minimum(2 * p, 2 * m), last)
    inter_last = np.where(m >= 2 * p, (v - 1) * p + 1, (v - 1) * m + 1)
    last = np.where(family == 3, inter_last, last)
    one = pp == 1
    return np.where(one, 1, np.minimum(first, m * v)), np.where(one, 1, np.minimum(last, m * v))


def _freed_frac(ctx: Any, cols: dict[str, Array]) -> Array:
    """Share of a chunk's activations freed when its I pass ends (as ``analytic_memory``: all but the
    weight-gradient inputs, without recompute; nothing with recompute)."""
    parts = ctx.dense_parts
    freed = float(np.clip(1 - parts.weight_grad_inputs / (parts.outside_tp + parts.inside_tp), 0, 1))
    return np.where(cols["recompute_code"] == 0, freed, 0.0)


def split_backward_last_rank(family: Array, chunks_last: Array, *, pp: Array, freed_frac: Array) -> Array:
    """The last rank's peak in chunk units once I frees ``freed_frac`` of a chunk: at its peak rank r of ZB-H1
    holds r chunks, ZB-H2 2r chunks, whose I is done and W pending (read off the simulator's in-flight bytes)."""
    pending = np.select(
        [family == PEAK_FAMILIES.index("zb-h1"), family == PEAK_FAMILIES.index("zb-h2")],
        [pp - 1, 2 * (pp - 1)],
        0,
    )
    return np.maximum(chunks_last - freed_frac * pending, 1.0)


def rank_layers(model: Any, *, pp: Array, vpp: Array, v_shape: Array, rank: Array) -> dict[str, Array]:
    """Dense and MoE layer counts and whether ``rank`` holds the embedding / the LM head.

    Layers split evenly in order over the ``pp * vpp`` stages (dense-first layers on the first stages), as
    ``workbench.analytic.stage_layout``; rank r holds stages r, r+p, ... (looping) or r and 2p-1-r (V)."""
    stages = pp * vpp
    per = model.num_layers // stages
    dense_total = model.num_layers - model.num_moe_layers
    nd = np.zeros(np.shape(pp)) if np.ndim(pp) else 0.0
    emb = head = np.zeros(np.shape(pp), dtype=bool) if np.ndim(pp) else False
    for k in range(int(np.max(vpp)) if np.size(vpp) else 0):
        stage = np.where(v_shape, np.where(k == 0, rank, 2 * pp - 1 - rank), rank + k * pp)
        held = k < vpp
        nd = nd + np.where(held, np.clip(dense_total - stage * per, 0, per), 0)
        emb = emb | (held & (stage == 0))
        head = head | (held & (stage == stages - 1))
    return {"dense": nd, "moe": vpp * per - nd, "embedding": emb, "head": head}


def rank_params(ctx: Any, cols: dict[str, Array], layers: dict[str, Array]) -> tuple[Array, Array]:
    """(non-expert, expert) parameters one device of the rank holds (``analytic_memory.stage_param_counts``):
    non-expert weights split over tp, experts over ep times the expert tp (1 when ep > 1, else tp)."""
    model, tp, ep = ctx.model, cols["tp"], cols["ep"]
    experts_layer = model.num_experts * model.mlp_parameters(model.moe_ffn_hidden_size) if model.is_moe else 0
    moe_other = model.layer_parameters(model.num_layers - 1) - experts_layer if model.is_moe else 0
    head_params = model.lm_head_parameters() + (model.embedding_parameters() if model.tied_embeddings else 0)
    dense = (
        layers["dense"] * model.layer_parameters(0)
        + layers["moe"] * moe_other
        + layers["embedding"] * model.embedding_parameters()
        + layers["head"] * head_params
    ) / tp
    return dense, layers["moe"] * experts_layer / (ep * np.where(ep > 1, 1, tp))


def _states(ctx: Any, cols: dict[str, Array], layers: dict[str, Array]) -> Array:
    """Weights, gradients and optimizer states of one rank (bytes), as ``analytic_memory.memory_table``:
    non-expert states shard over dp*cp, expert states over the expert-data-parallel group dp*cp*tp/(ep*etp)."""
    tp, ep = cols["tp"], cols["ep"]
    dense, expert = rank_params(ctx, cols, layers)
    kw = dict(
        zero_stage=cols["zero_stage"],
        param_bytes=ctx.param_bytes,
        grad_bytes=ctx.cal.grad_bytes_per_param,
        optimizer_bytes=ctx.optimizer_bytes,
    )
    edp = np.maximum(cols["dp"] * cols["cp"] * tp // (ep * np.where(ep > 1, 1, tp)), 1)
    return sum(model_state_bytes(num_params=dense, dp=cols["dp"] * cols["cp"], **kw)) + sum(
        model_state_bytes(num_params=expert, dp=edp, **kw)
    )


def peak_memory_bytes(ctx: Any, cols: dict[str, Array]) -> Array:
    """Peak bytes per device of every plan: max over the first and last pipeline rank of model states,
    stored activations at the schedule's peak, the recompute working set, logits (on the LM head's rank),
    communication buffers and the calibration's overhead and fragmentation."""
    model, cal = ctx.model, ctx.cal
    tp, pp, vpp, m = cols["tp"], cols["pp"], cols["vpp"], cols["num_microbatches"]
    tokens = cols["micro_batch_size"] * ctx.workload.seq_len / cols["cp"]
    kw = dict(
        tokens=tokens,
        seq_len=ctx.workload.seq_len,
        tp=tp,
        sequence_parallel=cols["sequence_parallel"],
        recompute=cols["recompute_code"],
    )
    op = cal.selective_recompute == "op"
    per_dense = layer_activation_bytes(ctx.dense_parts, selective_op=op, **kw)
    per_moe = layer_activation_bytes(ctx.moe_parts, selective_op=op, **kw) if model.is_moe else 0.0
    work = recompute_working_bytes(ctx.moe_parts if model.is_moe else ctx.dense_parts, **kw)
    emb_act = tokens * model.hidden_size * ACT_BYTES / np.where(cols["sequence_parallel"], tp, 1)
    buffers = np.where(tp > 1, 2 * tokens * model.hidden_size * ACT_BYTES, 0.0)
    buffers = buffers + np.where(
        cols["zero_stage"] >= 3, 2 * model.layer_parameters(model.num_layers - 1) / tp * ctx.param_bytes, 0.0
    )
    logits = logits_bytes(model, tokens=tokens, tp=tp)
    family = ctx.family[cols["schedule_code"]]
    chunks0, chunks_last = peak_chunks(family, pp=pp, vpp=vpp, m=m)
    chunks_last = split_backward_last_rank(family, chunks_last, pp=pp, freed_frac=_freed_frac(ctx, cols))
    # micro-batches of stage 0 in flight: all of rank 0's chunks without interleaving; looped BFS: all m;
    # interleaved 1F1B / ZB-H1: stage 0's backward comes last in each micro-batch, about 2p - 1 of them
    # (read off the simulator); V schedules: rank 0's mean
    looped = (family == PEAK_FAMILIES.index("interleaved-1f1b")) | (family == PEAK_FAMILIES.index("zb-h1"))
    first_stage = np.select(
        [vpp == 1, family == PEAK_FAMILIES.index("looped-bfs"), looped],
        [chunks0, m, np.minimum(chunks0, np.minimum(m, 2 * pp - 1))],
        chunks0 / vpp,
    )
    best = 0.0
    for rank, chunks in (("first", chunks0), ("last", chunks_last)):
        layers = ctx.rank_layers(cols, rank)
        per_chunk = (layers["dense"] * per_dense + layers["moe"] * per_moe) / vpp  # the rank's mean chunk
        acts = (
            chunks * per_chunk + layers["embedding"] * first_stage * emb_act + work + layers["head"] * logits
        )
        counted = _states(ctx, cols, layers) + acts + buffers
        best = np.maximum(best, counted * (1 + cal.fragmentation_frac) + cal.framework_overhead_bytes)
    return best
