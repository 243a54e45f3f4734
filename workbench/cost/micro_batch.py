"""Seconds per micro-batch of what a pipeline stage or rank holds: compute, the exposed and hidden tp, cp, ep,
ZeRO-3 and vocabulary-parallel communication (``share_s``), and the pipeline hop between stages.

Sources: ZeRO-3's per-layer gathers and reduce-scatters (Rajbhandari et al. 2020, arXiv:1910.02054, section
5.3); Megatron's pipeline hop of 1/tp of the activations (Narayanan et al. 2021, arXiv:2104.04473, section
4.1); vocabulary parallelism (Yeung et al. 2024, arXiv:2411.05288, section 4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from workbench.cost.activations import activation_sizes, blend_recompute, offload_share, partial_recompute
from workbench.cost.comm import all_gather_s, all_reduce_s, p2p_s, reduce_scatter_s
from workbench.cost.context import (
    Array,
    Cols,
    StepContext,
    expert_tp,
    host_path,
    shard_group,
    strides,
    tokens,
    zero_exec,
)
from workbench.cost.holdings import Holdings, stage_holdings
from workbench.cost.layer import ACT_BYTES, EdgeCosts, LayerCosts, edge_costs, layer_costs
from workbench.cost.memory import RECOMPUTE_CODES
from workbench.cost.overlap import overlap
from workbench.cost.placement import level_spans, pair_level_index

if TYPE_CHECKING:
    from workbench.specs.model import ModelSpec


class LayerPair(NamedTuple):
    """Per-layer costs of the model's dense and MoE layers (None for a dense model) and its edges."""

    dense: LayerCosts
    moe: LayerCosts | None
    edges: EdgeCosts


def layer_pair(ctx: StepContext, cols: Cols) -> LayerPair:
    """Seconds per micro-batch of one dense layer, one MoE layer, the embedding and the LM head. With partial
    recompute (``recompute_share`` between 0 and 1) a layer is the mean of a recomputed and a kept one."""
    s, tok = strides(cols), tokens(ctx, cols)
    kw: dict[str, Any] = {
        "dtype": ctx.workload.dtype,
        "tokens": tok,
        "seq_len": ctx.workload.seq_len,
        "tp": cols["tp"],
        "cp": cols["cp"],
        "ep": cols["ep"],
        "sequence_parallel": cols["sequence_parallel"],
        "recompute": cols["recompute_code"],
        "tp_stride": s["tp"],
        "cp_stride": s["cp"],
        "capacity_factor": ctx.workload.capacity_factor,
        "etp": expert_tp(cols),
        "ulysses": cols.get("ulysses", 1),
    }
    dense = layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=False, **kw)
    moe = layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=True, **kw) if ctx.model.is_moe else None
    share, partial = partial_recompute(ctx.model, cols)
    if np.any(partial):
        kept = {**kw, "recompute": np.where(partial, RECOMPUTE_CODES["none"], kw["recompute"])}
        dense = blend_recompute(
            share, partial, dense, layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=False, **kept)
        )
        if moe is not None:
            moe = blend_recompute(
                share, partial, moe, layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=True, **kept)
            )
    if np.any(cols.get("offload_activations", False)):
        sizes = activation_sizes(ctx, {**cols, "offload_activations": False})
        dense = _offload_transfers(ctx, cols, dense, sizes.dense_layer)
        moe = _offload_transfers(ctx, cols, moe, sizes.moe_layer) if moe is not None else None
    edges = edge_costs(
        ctx.model,
        ctx.cluster,
        ctx.cal,
        dtype=ctx.workload.dtype,
        tokens=tok,
        tp=cols["tp"],
        loss_chunks=cols.get("loss_chunks", 1),
    )
    vocab = np.asarray(cols.get("vocab_parallel", False), dtype=bool) & (np.asarray(cols["pp"]) > 1)
    if np.any(vocab):
        edges = edges._replace(vocab_s=np.where(vocab, vocab_parallel_comm_s(ctx, cols), 0.0))
    return LayerPair(dense, moe, edges)


LAYER_COLUMNS = (
    "tp",
    "cp",
    "ep",
    "etp",
    "micro_batch_size",
    "sequence_parallel",
    "recompute_code",
    "tp_stride",
    "cp_stride",
    "ulysses",
    "loss_chunks",
)
"""The plan columns ``layer_pair`` and ``activation_sizes`` read where a plan has them (``layer_columns`` adds
the rest)."""


def layer_columns(cols: Cols) -> tuple[str, ...] | None:
    """Names of the columns of ``cols`` that ``layer_pair(ctx, cols)`` and ``activation_sizes(ctx, cols)`` read:
    two plans equal on these have the same per-layer costs and activation sizes, so a caller may work each
    distinct combination out once. pp and vpp join where plans recompute only some layers
    (``recompute_layers``: the share depends on the chunk size); None (every column counts) with
    ``offload_activations`` (its transfers read the whole activation-size model) or ``vocab_parallel`` (priced
    over the pipeline group and its placement)."""
    if "offload_activations" in cols or "vocab_parallel" in cols:
        return None
    names = [k for k in LAYER_COLUMNS if k in cols]
    if "recompute_layers" in cols:
        names += ["recompute_layers", "pp", "vpp"]
    return tuple(names)


def _offload_transfers(ctx: StepContext, cols: Cols, layer: LayerCosts, stored_bytes: Array) -> LayerCosts:
    """``layer`` with its activations' trip to the host and back: the copy out runs during the layer's
    forward, the copy in during the backward of the layer after it (one ahead), each exposed only beyond that
    compute (:func:`workbench.cost.overlap.overlap`); the exposed part is added to the compute. With a share s
    of the layers offloaded (``offload_share``), each offloaded layer's copy runs over the 1/s layers up to its
    sync point (Transformer Engine 2.9 ``layer_window_map``: group i syncs after layer (L/N)(i+1) - 1, its
    reload starts there in the backward) and the mean layer carries s of that exposed time."""
    pcie = host_path(ctx)[0]
    share = offload_share(ctx.model, cols)
    on = share > 0
    window = 1 / np.where(on, share, 1.0)
    trip = stored_bytes / pcie
    out = share * overlap(trip, window * layer.compute_f_s, on=True).exposed
    back = share * overlap(trip, window * (layer.compute_i_s + layer.compute_w_s), on=True).exposed
    return layer._replace(
        compute_f_s=layer.compute_f_s + np.where(on, out, 0.0),
        compute_i_s=layer.compute_i_s + np.where(on, back, 0.0),
    )


def vocab_parallel_comm_s(ctx: StepContext, cols: Cols) -> Array:
    """Per micro-batch and pipeline rank, the communication vocabulary parallelism adds (Yeung et al. 2024,
    section 4): the last stage's output hidden states reach every pipeline rank forward and their gradients
    are summed back backward (each a collective of tokens x hidden 16-bit values / tp over the pp group),
    priced as two all-reduces over it; the softmax statistics' all-reduces are tokens-sized and left out."""
    payload = tokens(ctx, cols) * ctx.model.hidden_size * ACT_BYTES / cols["tp"]
    s = strides(cols)
    return 2 * all_reduce_s(
        ctx.cluster, payload, cols["pp"], s["pp"], ctx.cal.framework.collective_efficiency_frac
    )


def mean_layer_compute_s(model: ModelSpec, pair: LayerPair) -> tuple[Array, Array]:
    """Mean (forward, backward = I + W with recompute) seconds of one layer over the dense and MoE layers."""
    dense, moe = pair.dense, pair.moe
    nd, nm = model.num_layers - model.num_moe_layers, model.num_moe_layers
    f = nd * dense.compute_f_s + (nm * moe.compute_f_s if moe is not None else 0.0)
    b = nd * (dense.compute_i_s + dense.compute_w_s) + (
        nm * (moe.compute_i_s + moe.compute_w_s) if moe is not None else 0.0
    )
    return f / model.num_layers, b / model.num_layers


class FsdpLayer(NamedTuple):
    """ZeRO-3 traffic of one layer per micro-batch: exposed forward, exposed backward, hidden (seconds)."""

    f: Array
    b: Array
    hidden: Array


def fsdp_layer_s(ctx: StepContext, cols: Cols, layer_compute_s: tuple[Array, Array]) -> FsdpLayer:
    """ZeRO-3 communication per layer and micro-batch: the layer's weights are all-gathered for the forward
    and again for the backward (the recompute of a checkpointed layer runs inside its backward and uses that
    gather), and its gradients reduce-scattered (ZeRO section 5.3: 3x the data-parallel volume) over dp*cp,
    at ``FrameworkProfile.reduce_bytes_per_param`` (FSDP's ``reduce_dtype``: fp32 doubles a bf16 gather's bytes).
    With ``fsdp_prefetch`` the next layer's gather runs during this layer's compute (forward: its forward;
    backward: gather and reduce-scatter behind its backward), :func:`workbench.cost.overlap.overlap`;
    without, each gather waits in line. ``layer_compute_s``: (forward, backward) seconds of a mean layer
    (``mean_layer_compute_s``, or measured). Each call is priced with its own latency terms at the per-layer
    message size (small layers at hundreds of ranks are latency-bound). 0 without ZeRO-3 or dp*cp = 1."""
    model, fw = ctx.model, ctx.cal.framework
    n, stride = shard_group(cols), strides(cols)["dpcp"]
    layer_bytes = model.layer_parameters(model.num_layers - 1) / cols["tp"] * ctx.param_bytes
    eff = fw.collective_efficiency_frac
    ag = all_gather_s(ctx.cluster, layer_bytes, n, stride, eff)
    rs = reduce_scatter_s(
        ctx.cluster, layer_bytes / ctx.param_bytes * fw.reduce_bytes_per_param, n, stride, eff
    )
    on = (zero_exec(ctx, cols) >= 3) & (n > 1)
    fwd_s, bwd_s = layer_compute_s
    f = overlap(ag, fwd_s, on=fw.fsdp_prefetch, interference=fw.comm_interference_frac)
    b = overlap(ag + rs, bwd_s, on=fw.fsdp_prefetch, interference=fw.comm_interference_frac)
    return FsdpLayer(
        np.where(on, f.exposed, 0.0), np.where(on, b.exposed, 0.0), np.where(on, f.hidden + b.hidden, 0.0)
    )


def _per_micro_batch(pair: LayerPair, held: Holdings) -> tuple[Callable[[str], Array], tuple[Array, ...]]:
    """(``both``: a LayerCosts field summed over the dense and MoE layers ``held`` holds, per micro-batch;
    (dense, moe, embedding, head, mtp) held per micro-batch). A micro-batch goes through one of the ``copies``
    of the model a rank holds (``rank_holdings``; DualPipe: 2), so 1/copies of each."""
    per = 1 / np.asarray(held.get("copies", 1))
    counts = tuple(held[k] * per for k in ("dense", "moe", "embedding", "head", "mtp"))
    nd, nm = counts[0], counts[1]
    dense, moe, _ = pair

    def both(name: str) -> Array:
        return nd * getattr(dense, name) + (nm * getattr(moe, name) if moe is not None else 0.0)

    return both, counts


def _compute_parts(
    both: Callable[[str], Array], counts: tuple[Array, ...], edges: EdgeCosts
) -> tuple[Array, Array, Array]:
    """Compute seconds per micro-batch, without communication: (F, I, W), of what ``_per_micro_batch`` gave."""
    _, _, emb, head, mtp = counts
    comp_f = both("compute_f_s") + emb * edges.embedding_f_s + head * edges.head_f_s + mtp * edges.mtp_f_s
    comp_i = both("compute_i_s") + emb * edges.embedding_b_s + head * edges.head_i_s + mtp * edges.mtp_i_s
    comp_w = both("compute_w_s") + head * edges.head_w_s + mtp * edges.mtp_w_s
    return comp_f, comp_i, comp_w


def compute_s(pair: LayerPair, held: Holdings) -> Array:
    """Seconds per micro-batch ``held`` computes (F + I + W, no communication): ``share_s``'s ``compute``.
    A rank runs its actions one after another, so ``num_microbatches`` times this bounds its step from below
    (``workbench.search.screen.tokens_per_s_bound``)."""
    return sum(_compute_parts(*_per_micro_batch(pair, held), pair.edges))


def share_s(
    pair: LayerPair, held: Holdings, fsdp: FsdpLayer, blocking_p2p_s: Array = 0.0
) -> dict[str, Array]:
    """Seconds per micro-batch of what ``held`` holds: f, i, w (each action's time, exposed communication
    folded in), compute (F + I + W without communication), compute_f and compute_b (its forward and backward
    parts), the exposed tp, cp, ep, fsdp, vocab and pp parts and the hidden ones (``hidden_<kind>``). A
    micro-batch goes through one of the ``copies`` of the model a rank holds (``rank_holdings``; DualPipe: 2):
    1/copies of it. ``blocking_p2p_s``: the pipeline transfers one micro-batch's forward and backward wait
    for on what ``held`` holds (``pp_blocking_s``), split evenly between F and I."""
    both, counts = _per_micro_batch(pair, held)
    nd, nm, _, head, _ = counts
    edges = pair.edges
    comp_f, comp_i, comp_w = _compute_parts(both, counts, edges)
    comm_f = {k: both(f"{k}_f_s") for k in ("tp", "cp", "ep")} | {"fsdp": (nd + nm) * fsdp.f}
    comm_b = {k: both(f"{k}_b_s") for k in ("tp", "cp", "ep")} | {"fsdp": (nd + nm) * fsdp.b}
    vocab = np.where(np.asarray(head) > 0, edges.vocab_s, 0.0) / 2  # forward and backward halves
    comm_f["vocab"], comm_b["vocab"] = vocab, vocab
    comm_f["pp"] = comm_b["pp"] = np.asarray(blocking_p2p_s) / 2
    hidden = {f"hidden_{k}": both(f"{k}_hidden_s") for k in ("tp", "cp", "ep")}
    return {
        "f": comp_f + sum(comm_f.values()),
        "i": comp_i + sum(comm_b.values()),
        "w": comp_w,
        "compute": comp_f + comp_i + comp_w,
        "compute_f": comp_f,
        "compute_b": comp_i + comp_w,
        **{k: comm_f[k] + comm_b[k] for k in comm_f},
        **hidden,
        "hidden_fsdp": (nd + nm) * fsdp.hidden,
        "hidden_vocab": 0.0 * vocab,
        "hidden_pp": 0.0 * vocab,
    }


def whole_share(model: ModelSpec, pair: LayerPair, fsdp: FsdpLayer) -> dict[str, Array]:
    """``share_s`` of the whole model: every layer, the embedding, the LM head and the multi-token-prediction
    modules (counted as ``stage_holdings`` counts them on the last stage)."""
    return share_s(pair, stage_holdings(model, 1, 0), fsdp)


def pp_hop_s(ctx: StepContext, cols: Cols) -> Array:
    """One activation (or gradient) transfer between pipeline stages: 1/tp of the micro-batch's hidden
    states (Megatron's scatter-gather). The simulator and the closed forms take one time for every hop, so
    the slowest one sets it: the level that joins the first and the last pipeline rank. 0 where pp = 1."""
    payload = tokens(ctx, cols) * ctx.model.hidden_size * ACT_BYTES / cols["tp"]
    span = strides(cols)["pp"] * np.maximum(cols["pp"] - 1, 1)
    hop = p2p_s(ctx.cluster, payload, span, ctx.cal.framework.collective_efficiency_frac)
    return np.where(cols["pp"] > 1, hop, 0.0)


def pp_blocking_s(hop_s: Array, blocking: Array, actions: Array) -> Array:
    """Seconds per micro-batch a pipeline rank (or stage) waits on its own transfers when the schedule's sends
    block compute (``blocking``, per plan: the schedule is among ``FrameworkProfile.blocking_p2p_schedules``):
    ``actions`` chunks each send once in the forward and once in the backward, one hop ``hop_s`` each
    (``pp_hop_s``, the slowest hop: a blocking pipeline moves at the pace of its slowest link). 0 otherwise."""
    return np.where(np.asarray(blocking, dtype=bool), 2 * np.asarray(actions) * hop_s, 0.0)


def pp_latency_s(hop_s: Array, blocking: Array) -> Array:
    """The hop the simulated dependencies and the closed forms wait for between stages: ``hop_s``, or 0 where
    the transfer already sits inside the sender's action (``pp_blocking_s``)."""
    return np.where(np.asarray(blocking, dtype=bool), 0.0, hop_s)


def pp_hop_table_s(ctx: StepContext, cols: Cols) -> np.ndarray:
    """For one plan: seconds of a hop from pipeline rank i to rank j (pp x pp), each priced on the level that
    joins the two ranks (pipeline rank r is the device r * pp_stride with the other coordinates 0; aligned
    groups assumed), as ``pp_hop_s`` prices one hop. ``pp_hop_s`` is the largest entry a schedule uses."""
    pp = int(np.asarray(cols["pp"]))
    ranks = np.arange(pp) * int(np.asarray(strides(cols)["pp"]))
    level = pair_level_index(ctx.cluster, ranks[:, None], ranks[None, :])
    spans = np.array([1, *level_spans(ctx.cluster)[:-1]])
    payload = tokens(ctx, cols) * ctx.model.hidden_size * ACT_BYTES / cols["tp"]
    hop = p2p_s(ctx.cluster, payload, spans[level], ctx.cal.framework.collective_efficiency_frac)
    return np.where(np.eye(pp, dtype=bool), 0.0, hop)
