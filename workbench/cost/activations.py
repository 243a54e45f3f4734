"""Activation bytes of one micro-batch on one device for a plan (the formulas of :mod:`workbench.cost.memory`
evaluated on plan columns), and the share of the layers a plan recomputes.

Sources: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198 (per-layer activations, selective and partial recompute); torch.distributed.pipelining's
per-micro-batch buffers (``FrameworkProfile.pipeline_stage_buffers``, ``pipeline_keeps_outputs``); Megatron-Core ``--cpu-offloading``
and ``--cpu-offloading-num-layers`` (Transformer Engine 2.9 ``AsyncDoubleBufferGroupOffloadHandler``, the
release Megatron-Bridge 25.11 pins) for the offloaded share and working set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from workbench.cost.context import Array, Cols, StepContext, tokens
from workbench.cost.holdings import Holdings
from workbench.cost.layer import ACT_BYTES
from workbench.cost.memory import (
    RECOMPUTE_CODES,
    cp_ring_backward_bytes,
    layer_activation_bytes,
    logits_bytes,
    recompute_working_bytes,
)

if TYPE_CHECKING:
    from workbench.specs.model import ModelSpec

OFFLOAD_WORKING_LAYERS = 2
"""Layers of activations a device keeps while the rest are offloaded: the one whose backward runs and the
one being fetched back ahead of it (Megatron-Core ``--cpu-offloading``, Transformer Engine's
``get_cpu_offload_context`` with double buffering)."""


OFFLOAD_IN_FLIGHT_LAYERS = 1
"""Offloaded layers still on the device at the end of the forward pass when only some layers are offloaded:
Transformer Engine 2.9's ``AsyncDoubleBufferGroupOffloadHandler`` frees offloaded group i only when the forward of
layer ``layer_window_map[i]`` ends (the last group's window is the rank's last layer), so the last offloaded
group's activations are still held, being copied out, while the last layer runs
(transformer_engine/pytorch/cpu_offload.py, ``synchronize_on_group_commit_forward``). That group is freed at
the last layer's group commit, which Megatron-Core calls right after the layer's forward and before the final
norm, the output layer and the loss (megatron/core/transformer/transformer_block.py, core 0.15:
``group_prefetch_offload_commit_async`` inside the layer loop): the group and the logits are never alive
together (``ActivationSizes.offload_in_flight``)."""


def offload_share(model: ModelSpec, cols: Cols) -> Array:
    """Share of a pipeline rank's layers whose saved activations go to host memory: 0 without
    ``offload_activations``; 1 with it and ``offload_layers`` 0 (``ParallelPlan.offload_activation_layers``
    None: every layer); else ``min(1, N pp / num_layers)``, N of the mean rank's ``num_layers / pp`` layers
    (Megatron-Core passes ``cpu_offloading_num_layers`` to Transformer Engine's ``get_cpu_offload_context``,
    whose handler offloads the groups (layers) 0..N-1 it sees). One fraction in [0, 1] per plan."""
    off = np.asarray(cols.get("offload_activations", False), dtype=bool)
    n = np.asarray(cols.get("offload_layers", 0))
    per_rank = model.num_layers / np.asarray(cols["pp"])
    return np.where(off, np.where(n > 0, np.minimum(1.0, n / per_rank), 1.0), 0.0)


def recompute_share(model: ModelSpec, cols: Cols) -> Array:
    """Share of the layers a rank recomputes whole in its backward pass: 1 with full recompute, 0 without it;
    with ``recompute_layers`` N > 0 (``ParallelPlan.recompute_num_layers``: the first N layers of each model
    chunk) N over the layers of a mean chunk, ``min(1, N pp vpp / num_layers)`` (Megatron-Core's block method
    recomputes every layer of a chunk that holds N or fewer). One fraction in [0, 1] per plan, broadcast as the
    columns."""
    full = np.asarray(cols["recompute_code"]) == RECOMPUTE_CODES["full"]
    n = np.asarray(cols.get("recompute_layers", 0))
    chunk = model.num_layers / (np.asarray(cols["pp"]) * np.asarray(cols["vpp"]))
    return np.where(full, np.where(n > 0, np.minimum(1.0, n / chunk), 1.0), 0.0)


def partial_recompute(model: ModelSpec, cols: Cols) -> tuple[Array, Array]:
    """(share of the layers recomputed, mask of the plans that recompute only some of them)."""
    share = recompute_share(model, cols)
    return share, (share > 0) & (share < 1)


def blend_recompute(share: Array, partial: Array, whole: Any, kept: Any) -> Any:
    """``share`` of the fully recomputed layer's value and the rest of the layer that keeps its activations,
    where ``partial``; ``whole`` elsewhere. Arrays, or NamedTuples of them field by field."""
    if isinstance(whole, tuple):
        return type(whole)(*(blend_recompute(share, partial, w, k) for w, k in zip(whole, kept, strict=True)))
    return np.where(partial, share * whole + (1 - share) * kept, whole)


class ActivationSizes(NamedTuple):
    """Activation bytes of one micro-batch on one device."""

    dense_layer: Array
    moe_layer: Array
    embedding: Array
    """The embedding's output kept for its backward (on the stage that holds the embedding)."""
    recompute_work: Array
    """Transient working set of one recomputed layer."""
    logits: Array
    """The logits of one micro-batch on the rank that holds the LM head."""
    freed_at_input_grad_frac: Array
    """Share of a layer's stored activations freed when its I pass ends (split backward; 0 with recompute):
    all but the deferred W pass's stash of GEMM inputs and output gradients (``memory.weight_grad_stash_bytes``,
    0 where the stash is the larger)."""
    pipeline_edge: Array = 0.0
    """One micro-batch's tensor between two pipeline stages (the block output, 16-bit, split over tp under
    sequence parallelism) where the stack's pipeline runtime keeps per-micro-batch buffers
    (``FrameworkProfile.pipeline_stage_buffers``, pp > 1); else 0. See ``pipeline_buffer_bytes``."""
    kept_output: Array = 0.0
    """One micro-batch's output of the last pipeline stage (the 16-bit logits, vocabulary split over tp) that
    the runtime keeps until the step ends (``FrameworkProfile.pipeline_keeps_outputs``, pp > 1); else 0."""
    offload_in_flight: Array = 0.0
    """The offloaded layers still being copied out while a rank's last layer runs forward when only some layers
    are offloaded (``OFFLOAD_IN_FLIGHT_LAYERS`` layers' activations); freed before the loss, so on the rank that
    holds the LM head it counts only where it exceeds the logits (``rank_memory.static_memory``); else 0."""
    cp_ring_work: Array = 0.0
    """The ring attention's working set during one attention layer's backward pass when cp > 1 under torch's
    experimental context parallel (``FrameworkProfile.cp_rotate_method``, ``memory.cp_ring_backward_bytes``);
    alive beside the recompute working set, never with the logits (freed after the LM head's backward); else 0."""


def activation_sizes(ctx: StepContext, cols: Cols) -> ActivationSizes:
    """Activation bytes per micro-batch (formulas of :mod:`workbench.cost.memory`)."""
    model, tp = ctx.model, cols["tp"]
    tok = tokens(ctx, cols)
    kw: dict[str, Any] = {
        "tokens": tok,
        "seq_len": ctx.workload.seq_len,
        "tp": tp,
        "sequence_parallel": cols["sequence_parallel"],
        "recompute": cols["recompute_code"],
    }
    op = ctx.cal.framework.selective_recompute == "op"
    parts = ctx.dense_parts
    # a layer that recomputes nothing keeps, from its I pass to its W pass, only the weight-gradient stash
    none = layer_activation_bytes(parts, selective_op=op, **{**kw, "recompute": RECOMPUTE_CODES["none"]})
    stash = tok * (parts.weight_grad_inputs + parts.weight_grad_inside_tp / tp)
    freed = np.clip(1 - stash / np.maximum(none, 1e-300), 0.0, 1.0)
    dense = layer_activation_bytes(ctx.dense_parts, selective_op=op, **kw)
    moe = layer_activation_bytes(ctx.moe_parts, selective_op=op, **kw) if model.is_moe else 0.0
    share, partial = partial_recompute(model, cols)
    freed_frac = np.where(cols["recompute_code"] == 0, freed, 0.0)
    if np.any(partial):  # the layers past the first N of a chunk keep all their activations
        kept = {**kw, "recompute": np.where(partial, RECOMPUTE_CODES["none"], kw["recompute"])}
        kept_dense = layer_activation_bytes(ctx.dense_parts, selective_op=op, **kept)
        dense = blend_recompute(share, partial, dense, kept_dense)
        # only the kept layers free part of what they store when their I pass ends
        freed_frac = np.where(
            partial, (1 - share) * kept_dense * freed / np.maximum(dense, 1e-300), freed_frac
        )
        if model.is_moe:
            moe = blend_recompute(
                share, partial, moe, layer_activation_bytes(ctx.moe_parts, selective_op=op, **kept)
            )
    # Offloaded layers keep nothing between their forward and backward; every offloaded layer: a working set of
    # OFFLOAD_WORKING_LAYERS; some of them: the kept layers store as before, plus the group still being copied
    off = offload_share(model, cols)
    some = (off > 0) & (off < 1)
    layer = np.maximum(dense, moe)
    return ActivationSizes(
        dense_layer=(1 - off) * dense,
        moe_layer=(1 - off) * moe,
        embedding=tok * model.hidden_size * ACT_BYTES / np.where(cols["sequence_parallel"], tp, 1),
        recompute_work=recompute_working_bytes(ctx.moe_parts, **kw)
        + np.where(off >= 1, OFFLOAD_WORKING_LAYERS, 0) * layer,
        offload_in_flight=np.where(some, OFFLOAD_IN_FLIGHT_LAYERS, 0) * layer,
        logits=logits_bytes(
            model,
            tokens=tok,
            tp=tp,
            bytes_per_logit=loss_bytes_per_logit(ctx, tp),
            loss_chunks=cols.get("loss_chunks", 1),
        ),
        freed_at_input_grad_frac=freed_frac,
        cp_ring_work=cp_ring_backward_bytes(
            model,
            tokens=tok,
            cp=cols["cp"],
            tp=tp,
            rotate_method=ctx.cal.framework.cp_rotate_method,
            repeats_kv=ctx.cal.framework.attention_repeats_kv,
        ),
        **_pipeline_runtime_sizes(ctx, cols, tok),
    )


def loss_bytes_per_logit(ctx: StepContext, tp: Array) -> Array:
    """Bytes per logit of the loss at its peak: ``FrameworkProfile.loss_parallel_bytes_per_logit`` where
    tp > 1 and the profile sets it (the loss on vocabulary-sharded logits), else ``loss_bytes_per_logit``."""
    fw = ctx.cal.framework
    sharded = (
        fw.loss_parallel_bytes_per_logit if fw.loss_parallel_bytes_per_logit > 0 else fw.loss_bytes_per_logit
    )
    return np.where(np.asarray(tp) > 1, sharded, fw.loss_bytes_per_logit)


def _pipeline_runtime_sizes(ctx: StepContext, cols: Cols, tok: Array) -> dict[str, Array]:
    """``ActivationSizes.pipeline_edge`` and ``kept_output`` of the plans (0 where pp = 1 or the stack's
    pipeline runtime keeps neither)."""
    fw, model, tp = ctx.cal.framework, ctx.model, cols["tp"]
    piped = np.asarray(cols["pp"]) > 1
    edge = tok * model.hidden_size * ACT_BYTES / np.where(cols["sequence_parallel"], tp, 1)
    logits = tok * model.vocab_size / tp * ACT_BYTES
    return {
        "pipeline_edge": np.where(piped & fw.pipeline_stage_buffers, edge, 0.0),
        "kept_output": np.where(piped & fw.pipeline_keeps_outputs, logits, 0.0),
    }


def stored_activation_bytes(sizes: ActivationSizes, held: Holdings) -> Array:
    """Activations one micro-batch leaves stored on what ``held`` holds until its backward: its layers', the
    embedding output on the first stage, and with per-micro-batch pipeline buffers
    (``ActivationSizes.pipeline_edge``) the stage output kept for the backward on every stage but the last,
    less the stage input on every stage but the first (that input lies in a receive buffer
    ``pipeline_buffer_bytes`` counts for every micro-batch): +1 edge on the first stage, -1 on the last, 0 on
    the others."""
    first = np.asarray(held["embedding"], dtype=float)
    last = np.asarray(held["head"], dtype=float)
    return (
        held["dense"] * sizes.dense_layer
        + held["moe"] * sizes.moe_layer
        + held["embedding"] * sizes.embedding
        + (first - last) * sizes.pipeline_edge
    )


def pipeline_buffer_bytes(sizes: ActivationSizes, held: Holdings, cols: Cols) -> Array:
    """Bytes a pipeline rank's runtime holds for the whole step, whatever the schedule
    (``FrameworkProfile.pipeline_stage_buffers`` and ``pipeline_keeps_outputs``): on each of its ``vpp``
    stages one activation receive buffer per micro-batch (stages but the first) and one output-gradient receive
    buffer per micro-batch (stages but the last), ``pipeline_edge`` each; on the rank with the last stage the
    outputs of all ``num_microbatches`` micro-batches, ``kept_output`` each (torch.distributed.pipelining
    ``output_chunks``: the last one's is alive at the last backward, the earlier ones since their forward). 0
    where pp = 1 (the fields are 0 there)."""
    m, vpp = cols["num_microbatches"], cols["vpp"]
    first = np.asarray(held["embedding"], dtype=float)
    last = np.asarray(held["head"], dtype=float)
    receive = m * sizes.pipeline_edge * ((vpp - first) + (vpp - last))
    return receive + last * m * sizes.kept_output
