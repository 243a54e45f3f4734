"""Per-layer and per-step cost pieces shared by the analytic backend and the planner's screen.

``layer_costs`` turns one layer (dense or MoE) into seconds per micro-batch on one device, split into pure
compute (forward F, backward-input I, backward-weight W; recompute added to I) and exposed communication
by kind (tp, cp, ep); ``edge_costs`` does the same for the embedding and the LM head with its loss. The
planner's closed-form pipeline makespan per schedule lives in :mod:`workbench.pipeline.bubble`.

Vectorisation contract (as in :mod:`workbench.cost.flops`): plan fields may be numpy arrays, broadcast
elementwise; plan-dependent branches use ``np.where``/``np.select`` on codes (``RECOMPUTE_CODES``,
``zero_stage``). Model, device, cluster and calibration are scalars.

The communication of each kind (volumes, what hides behind which compute) is in
:mod:`workbench.cost.layer_comm`.

``LayerCosts`` keeps the exposed seconds (interference included) and the hidden ones.

The framework profile is first resolved for the model and the device (``FrameworkProfile.for_device``: the
recipes' choice of dispatcher, CUDA graphs, recomputed modules and EP overlap for that model on that GPU), so
every piece here prices the plan as the stack runs it there.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from workbench.cost.cp_ring import step_attention_rates, torch_ring_layer
from workbench.cost.elementwise_ops import cheap_recompute_ops
from workbench.cost.flops import embedding_ops, head_ops, layer_ops, mtp_ops
from workbench.cost.layer_comm import (
    LayerComm,
    compute_slowdown,
    cp_layer_comm,
    ep_layer_comm,
    tp_bytes_per_value,
    tp_layer_comm,
)
from workbench.cost.moe import (
    ACT_BYTES,
    PRE_SYNC_OPS,
    dispatch_passes,
    moe_host_s,
    moe_post_sync_host_s,
    moe_synced_forward_s,
    on_device,
    routed_load,
)
from workbench.cost.op_time import Op, OpTimes, op_times
from workbench.presets.calibration import Calibration
from workbench.specs.framework import FrameworkProfile
from workbench.specs.hardware import BYTES_PER_ELEMENT, ClusterSpec, DeviceSpec, DType
from workbench.specs.model import ModelSpec

Array = Any


class LayerCosts(NamedTuple):
    """Seconds per micro-batch for one layer on one device (arrays broadcast over plans)."""

    compute_f_s: Array
    compute_i_s: Array
    """Backward-input compute plus recompute (full: the layer's forward; selective: the attention core)."""
    compute_w_s: Array
    tp_f_s: Array
    tp_b_s: Array
    cp_f_s: Array
    cp_b_s: Array
    ep_f_s: Array
    ep_b_s: Array
    executed_f_flop: Array
    """Executed forward FLOPs (what HFU-style counters would see, causal half when fused)."""
    tp_hidden_s: Array = 0.0
    """Tensor-parallel communication hidden behind compute, forward + backward."""
    cp_hidden_s: Array = 0.0
    ep_hidden_s: Array = 0.0


class Rates(NamedTuple):
    """What one device does for one dtype under a calibration: the peaks and curves ``op_times`` needs."""

    mm_peak: float
    """Peak of the weight GEMMs (the FP8 peak for FP8 runs)."""
    other_peak: float
    """Peak of everything else (attention and the rest stay 16-bit in FP8 runs)."""
    mm_curve: tuple[tuple[float, float], ...]
    other_curve: tuple[tuple[float, float], ...]
    mm_scale: float
    hbm_bytes_per_s: float


def device_rates(device: DeviceSpec, dtype: DType | str, cal: Calibration) -> Rates:
    """Peaks, GEMM curves (:meth:`Calibration.gemm_curve`) and achieved HBM bandwidth of ``device`` for a run
    in ``dtype``: FP8 runs use the FP8 peak and curve for the linear layers only, scaled by the framework's
    ``fp8_matmul_scale``; attention and the rest run at the 16-bit peak."""
    dtype = DType(dtype)
    dev = cal.device(device)
    hbm = dev.hbm_bytes_per_s * dev.hbm_efficiency_frac
    if dtype is DType.FP8:
        half_dtype = DType.BF16 if DType.BF16 in device.peak_flop_per_s else DType.FP16
        half = device.peak(half_dtype)
        return Rates(
            device.peak(DType.FP8),
            half,
            cal.gemm_curve(device, "fp8"),
            cal.gemm_curve(device, half_dtype.value),
            cal.framework.fp8_matmul_scale,
            hbm,
        )
    curve = cal.gemm_curve(device, dtype.value)
    return Rates(device.peak(dtype), device.peak(dtype), curve, curve, 1.0, hbm)


def layer_costs(
    model: ModelSpec,
    cluster: ClusterSpec,
    cal: Calibration,
    *,
    dtype: DType | str,
    tokens: Array,
    seq_len: Array,
    tp: Array,
    cp: Array,
    ep: Array,
    sequence_parallel: Array,
    recompute: Array,
    tp_stride: Array,
    cp_stride: Array,
    moe_layer: bool,
    capacity_factor: float | None = None,
    etp: Array = 1,
    ulysses: Array = 1,
) -> LayerCosts:
    """One layer's costs; ``tokens`` = micro_batch * seq_len / cp, recompute coded 0/1/2, ``capacity_factor``
    the workload's (None: dropless), ``etp`` the expert tensor-parallel degree, ``ulysses`` the cp ranks that
    exchange heads by all-to-all (the rest of cp is the ring, ``ParallelPlan.ulysses``). The framework's
    ``host_overhead_per_layer_s`` is added to the forward and once more to the backward pass, except when the
    stack replays the whole step as one CUDA graph (``cuda_graph_scopes`` full_iteration)."""
    cal = on_device(cal, cluster.device, model)
    fw = cal.framework
    load = routed_load(fw, capacity_factor)
    rates = device_rates(cluster.device, dtype, cal)
    ops = _block_ops(model, fw, dtype, tokens, seq_len, tp, ep, sequence_parallel, moe_layer, capacity_factor)
    full_rates = _attention_rates(model, cluster, cal, seq_len=seq_len, cp=cp, ulysses=ulysses)
    attention = (full_rates, _window_rates(model, cluster, cal, seq_len=seq_len, full=full_rates))
    mm, rest = _split_op_times(ops, rates, attention)
    redo = recompute_modules_s(model, cal, rates, tokens=tokens, tp=tp, moe_layer=moe_layer, load=load)
    dropless_moe = moe_layer and capacity_factor is None
    synced = dropless_moe and fw.moe_host_sync
    pre_sync = _fwd_s([o for o in ops if o.name in PRE_SYNC_OPS], rates, attention) if synced else 0.0
    fwd, comp_i, comp_w = _compute_s(model, cal, mm, rest, redo, dtype, ep, recompute, dropless_moe, pre_sync)
    full = recompute == 2
    per_value = tp_bytes_per_value(fw, dtype=dtype, sequence_parallel=sequence_parallel)
    tp_comm = tp_layer_comm(model, cluster, fw, mm, per_value, tokens, tp, tp_stride, full)
    if fw.cp_rotate_method:  # torch's experimental context parallel: its collectives and merges (cp_ring.py)
        ring_shard, hbm = (tokens, tp, cp, cp_stride), rates.hbm_bytes_per_s
        ring, merge = torch_ring_layer(model, cluster, fw, rest, hbm, compute_slowdown(fw), ring_shard, full)
        cp_comm, fwd, comp_i = LayerComm(*ring), fwd + merge[0], comp_i + merge[1]
    else:
        cp_comm = cp_layer_comm(model, cluster, fw, rest, tokens, tp, cp, ulysses, cp_stride, full)
    if moe_layer:
        shard = (tokens, tp, ep, etp)
        pair = None
        if fw.ep_comm_overlap:
            attn = _split_op_times([o for o in ops if o.name in PRE_SYNC_OPS], rates, attention)
            pair = _pair_compute(attn, compute_slowdown(fw), fwd, comp_i, comp_w)
        ep_comm = ep_layer_comm(model, cluster, cal, dtype, shard, capacity_factor, full, pair)
    else:
        ep_comm = LayerComm(0.0 * tokens, 0.0 * tokens, 0.0 * tokens)
    return LayerCosts(
        fwd,
        comp_i,
        comp_w,
        tp_comm.f_s,
        tp_comm.b_s,
        cp_comm.f_s,
        cp_comm.b_s,
        ep_comm.f_s,
        ep_comm.b_s,
        mm.fwd_flop + rest.fwd_flop,
        tp_comm.hidden_s,
        cp_comm.hidden_s,
        ep_comm.hidden_s,
    )


def _block_ops(
    model: ModelSpec,
    fw: FrameworkProfile,
    dtype: DType | str,
    tokens: Array,
    seq_len: Array,
    tp: Array,
    ep: Array,
    sequence_parallel: Array,
    moe_layer: bool,
    capacity_factor: float | None,
) -> list[Op]:
    """The forward ops of one block (``layer_ops``) as the stack ``fw`` runs them: its attention kernels,
    element-wise fusion, MoE dispatch passes and grouped GEMMs, FP8 recipe and unfused model ops."""
    return layer_ops(
        model,
        tokens=tokens,
        seq_len=seq_len,
        tp=tp,
        ep=ep,
        sequence_parallel=sequence_parallel,
        act_bytes=ACT_BYTES,
        flash=fw.flash_attention,
        dropout=fw.dropout,
        moe_layer=moe_layer,
        capacity_factor=routed_load(fw, capacity_factor),
        fused_elementwise=fw.fused_elementwise,
        dispatch_passes=dispatch_passes(fw, model, ep=ep, dtype=dtype, dropless=capacity_factor is None),
        grouped_gemm=fw.moe_grouped_gemm,
        fp8_recipe=fw.fp8_recipe if str(dtype) == "fp8" else None,
        gemm_streams=int(fw.moe_grouped_gemm_streams),
        unfused=fw.unfused_model_ops,
    )


def _attention_rates(
    model: ModelSpec, cluster: ClusterSpec, cal: Calibration, *, seq_len: Array, cp: Array, ulysses: Array
) -> tuple[Array, Array] | None:
    """(forward, backward) fraction of the peak of the stack's fused attention kernel at ``seq_len``, the ring
    implementation's own kernels (``cp_attention_kernels``) where the ring runs (cp > ulysses), torch's ring's
    at its calls' shapes (``cp_ring.step_attention_rates``); None for unfused attention."""
    fw = cal.framework
    if not fw.flash_attention:
        return None
    attention = cal.attention(cluster.device, dtype="bf16", seq_len=seq_len, head_dim=model.qk_head_dim)
    if fw.cp_attention_kernels is not None:  # the ring implementation's own kernels where cp > 1
        ring = cal.attention(
            cluster.device,
            dtype="bf16",
            seq_len=seq_len,
            head_dim=model.qk_head_dim,
            families=fw.cp_attention_kernels,
        )
        in_ring = cp > ulysses  # Ulysses alone calls the stack's ordinary kernels on whole sequences
        attention = (np.where(in_ring, ring[0], attention[0]), np.where(in_ring, ring[1], attention[1]))
    if fw.cp_rotate_method:  # torch's ring: each step's kernel at its own shape
        attention = step_attention_rates(cal, cluster.device, model, seq_len=seq_len, cp=cp, whole=attention)
    return attention


def _window_rates(
    model: ModelSpec,
    cluster: ClusterSpec,
    cal: Calibration,
    *,
    seq_len: Array,
    full: tuple[Array, Array] | None,
) -> tuple[Array, Array] | None:
    """(forward, backward) fraction of the peak of the stack's fused kernel in the model's sliding-window
    layers (``Calibration.window_attention``), the full kernel's (``full``) where the window covers the
    sequence; None without window layers, unfused attention or a window table for the device."""
    if full is None or not model.sliding_window or not model.num_sliding_window_layers:
        return None
    window = cal.window_attention(
        cluster.device, dtype="bf16", seq_len=seq_len, head_dim=model.qk_head_dim, window=model.sliding_window
    )
    if window is None:
        return None
    banded = np.asarray(seq_len) > model.sliding_window
    return np.where(banded, window[0], full[0]), np.where(banded, window[1], full[1])


AttentionRates = tuple[tuple[Array, Array] | None, tuple[Array, Array] | None]
"""(full-attention kernel, sliding-window kernel) (forward, backward) fractions of the peak, each or None."""


def _split_op_times(ops: list[Op], rates: Rates, attention: AttentionRates) -> tuple[OpTimes, OpTimes]:
    """(weight GEMMs, everything else) of ``ops`` timed at their own peaks and curves (``Rates``), the
    attention ops at ``attention``'s kernel fractions."""
    full, window = attention
    mm = op_times(
        [o for o in ops if o.kind == "matmul"],
        peak_flop_per_s=rates.mm_peak,
        gemm_curve=rates.mm_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=full,
        matmul_scale=rates.mm_scale,
    )
    rest = op_times(
        [o for o in ops if o.kind != "matmul"],
        peak_flop_per_s=rates.other_peak,
        gemm_curve=rates.other_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=full,
        window_attention=window,
    )
    return mm, rest


def _pair_compute(
    attn: tuple[OpTimes, OpTimes], slow: Array, fwd: Array, comp_i: Array, comp_w: Array
) -> tuple[Array, Array, Array, Array, Array]:
    """(attention fwd, MoE fwd, attention bwd, MoE bwd input, MoE bwd weight) seconds of one MoE layer, the
    parts a combined forward-backward pair schedules apart (``workbench.cost.overlap.combined_pair_s``):
    ``attn`` the (GEMMs, rest) times of the ops before the dispatch (``PRE_SYNC_OPS``: the attention block
    and the router), slowed by ``slow``; the MoE block is the rest of the layer's F, I and W (host bounds,
    recompute and the per-layer overhead included), never below 0."""
    mm, rest = attn
    a_f = (mm.fwd_s + rest.fwd_s) * slow
    a_i = (mm.bwd_input_s + rest.bwd_input_s) * slow
    a_w = (mm.bwd_weight_s + rest.bwd_weight_s) * slow
    m_f, m_i, m_w = np.maximum(fwd - a_f, 0.0), np.maximum(comp_i - a_i, 0.0), np.maximum(comp_w - a_w, 0.0)
    return np.minimum(a_f, fwd), m_f, np.minimum(a_i, comp_i) + np.minimum(a_w, comp_w), m_i, m_w


def _fwd_s(ops: list[Op], rates: Rates, attention: AttentionRates) -> Array:
    """Forward seconds of ``ops`` at their own peaks and curves (before ``compute_slowdown``)."""
    mm, rest = _split_op_times(ops, rates, attention)
    return mm.fwd_s + rest.fwd_s


def _compute_s(
    model: ModelSpec,
    cal: Calibration,
    mm: OpTimes,
    rest: OpTimes,
    redo: Array,
    dtype: DType | str,
    ep: Array,
    recompute: Array,
    dropless_moe: bool,
    pre_sync: Array = 0.0,
) -> tuple[Array, Array, Array]:
    """Compute seconds (F, I with the recompute, W) of one layer from its op times, slowed by
    ``compute_slowdown``, with the host overhead per layer; ``redo``: the recomputed modules' forward. A
    dropless MoE layer of a stack that syncs with the host (``moe_host_sync``) takes at least the host's
    time where ep > 1 (``moe_host_s``), and at least the launches after its sync plus ``pre_sync``, the GPU's
    forward seconds before it (``PRE_SYNC_OPS``) with the per-layer host overhead, which the model adds to
    the layer serially (``moe_synced_forward_s``)."""
    fw = cal.framework
    overhead = 0.0 if fw.graphs_whole_step else fw.host_overhead_per_layer_s
    slow = compute_slowdown(fw)
    fwd = (mm.fwd_s + rest.fwd_s) * slow + overhead
    if fw.selective_recompute == "op":  # half the matmuls and every memory-bound op, not the attention
        selective = (0.5 * mm.fwd_s + rest.fwd_s - rest.attention_core_fwd_s) * slow
    else:
        selective = rest.attention_core_fwd_s * slow
    recompute_s = np.select([recompute == 2, recompute == 1], [fwd, selective + redo * slow], redo * slow)
    comp_i = (mm.bwd_input_s + rest.bwd_input_s) * slow + recompute_s + overhead
    comp_w = (mm.bwd_weight_s + rest.bwd_weight_s) * slow
    if dropless_moe and fw.moe_host_sync:
        host_f, host_b = moe_host_s(model, cal, dtype=dtype, ep=ep)
        post = moe_post_sync_host_s(model, cal, dtype=dtype, ep=ep)
        synced = moe_synced_forward_s(host_f, post, fwd, pre_sync * slow + overhead)
        fwd, host_b = np.where(ep > 1, synced, fwd), np.where(ep > 1, host_b, 0.0)
        comp_i = comp_i + np.maximum(host_b - comp_i - comp_w, 0.0)
    return fwd, comp_i, comp_w


def recompute_modules_s(
    model: ModelSpec,
    cal: Calibration,
    rates: Rates,
    *,
    tokens: Array,
    tp: Array,
    moe_layer: bool,
    load: float,
) -> Array:
    """Forward seconds (before ``compute_slowdown``) of what the backward pass recomputes under the
    profile's ``recompute_modules``, or all three modules under ``recompute_cheap_ops``; 0 when neither."""
    fw = cal.framework
    if not (fw.recompute_modules or fw.recompute_cheap_ops):
        return 0.0
    ops = cheap_recompute_ops(
        model,
        tokens=tokens,
        tp=tp,
        act_bytes=ACT_BYTES,
        moe_layer=moe_layer,
        capacity_factor=load,
        modules=None if fw.recompute_cheap_ops else fw.recompute_modules,
        unfused=fw.unfused_model_ops,
    )
    if not ops:
        return 0.0
    return op_times(
        ops,
        peak_flop_per_s=rates.other_peak,
        gemm_curve=rates.other_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=None,
    ).fwd_s


class EdgeCosts(NamedTuple):
    """Embedding (first stage) and LM head + loss (last stage), seconds per micro-batch."""

    embedding_f_s: Array
    embedding_b_s: Array
    head_f_s: Array
    head_i_s: Array
    head_w_s: Array
    vocab_s: Array = 0.0
    """With vocabulary parallelism: the communication each pipeline rank adds per micro-batch (forward and
    backward together, ``workbench.cost.micro_batch.vocab_parallel_comm_s``); 0 otherwise."""
    mtp_f_s: Array = 0.0
    """One multi-token-prediction module's own forward (``flops.mtp_ops``) plus its pass through the head and
    loss; its transformer block is priced as a layer. 0 for a model without MTP."""
    mtp_i_s: Array = 0.0
    mtp_w_s: Array = 0.0


def edge_costs(
    model: ModelSpec,
    cluster: ClusterSpec,
    cal: Calibration,
    *,
    dtype: DType | str,
    tokens: Array,
    tp: Array,
    loss_chunks: Array = 1,
) -> EdgeCosts:
    """The embedding's and the LM head's (with its loss, in ``loss_chunks`` chunks) seconds per micro-batch."""
    rates = device_rates(cluster.device, dtype, cal)
    head = head_ops(model, tokens=tokens, tp=tp, act_bytes=ACT_BYTES, loss_chunks=loss_chunks)
    mm = op_times(  # the LM head stays 16-bit in FP8 runs (a plain linear outside TE's FP8 layers)
        [o for o in head if o.kind == "matmul"],
        peak_flop_per_s=rates.other_peak,
        gemm_curve=rates.other_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=None,
    )
    loss = op_times(
        [o for o in head if o.kind != "matmul"],
        peak_flop_per_s=rates.other_peak,
        gemm_curve=rates.other_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=None,
    )
    emb = op_times(
        embedding_ops(model, tokens=tokens, act_bytes=ACT_BYTES),
        peak_flop_per_s=rates.other_peak,
        gemm_curve=rates.other_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=None,
    )
    slow = compute_slowdown(cal.framework)
    head_f, head_i, head_w = mm.fwd_s + loss.fwd_s, mm.bwd_input_s + loss.bwd_input_s, mm.bwd_weight_s
    mtp = op_times(  # 16-bit like the head
        mtp_ops(model, tokens=tokens, tp=tp, act_bytes=ACT_BYTES) if model.num_mtp_layers else [],
        peak_flop_per_s=rates.other_peak,
        gemm_curve=rates.other_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=None,
    )
    return EdgeCosts(
        emb.fwd_s * slow,
        emb.bwd_input_s * slow,
        head_f * slow,
        head_i * slow,
        head_w * slow,
        mtp_f_s=(head_f + mtp.fwd_s) * slow,
        mtp_i_s=(head_i + mtp.bwd_input_s) * slow,
        mtp_w_s=(head_w + mtp.bwd_weight_s) * slow,
    )


def dtype_bytes(dtype: DType | str) -> float:
    """Bytes per element of the weights kept for the forward pass (FP8 runs keep bf16 weights)."""
    return float(max(BYTES_PER_ELEMENT[DType(dtype)], 2))
