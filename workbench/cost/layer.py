"""Per-layer and per-step cost pieces shared by the analytic backend and the planner's screen.

``layer_costs`` turns one layer (dense or MoE) into seconds per micro-batch on one device, split into pure
compute (forward F, backward-input I, backward-weight W; recompute added to I) and exposed communication
by kind (tp, cp, ep); ``edge_costs`` does the same for the embedding and the LM head with its loss. The
planner's closed-form pipeline makespan per schedule lives in :mod:`workbench.pipeline.bubble`.

Vectorisation contract (as in :mod:`workbench.cost.flops`): plan fields may be numpy arrays, broadcast
elementwise; plan-dependent branches use ``np.where``/``np.select`` on codes (``RECOMPUTE_CODES``,
``zero_stage``). Model, device, cluster and calibration are scalars.

Communication volumes per layer and micro-batch (bytes per device; e = 2 bytes per activation value):
- TP (Megatron, Shoeybi et al. 2019; with sequence parallelism Korthikanti et al. 2022 section 4.2.2): two
  all-reduces (or two all-gathers + two reduce-scatters, the same time) of ``tokens*h*e`` forward and two
  backward; full recompute repeats the forward ones.
- CP = ulysses x ring (``ParallelPlan.ulysses``). Ring (ring attention, Liu et al. 2023, arXiv:2310.01889):
  ring-1 steps each passing this rank's K and V block forward; backward passes K, V and their gradients (2x).
  Ulysses (Jacobs et al. 2023, arXiv:2309.14509): four all-to-alls of Q, K, V and the output forward, four
  backward (``ulysses_all_to_all_s``), exposed; the hybrid (USP, Fang & Zhao 2024) runs both.
- EP (GShard, Lepikhin et al. 2020): a dispatch and a combine of the routed copies, ``tokens*k*cf*h/tp``
  values forward and the same backward (``moe_dispatch_s``).

What of each kind hides behind compute follows :mod:`workbench.cost.overlap`; ``LayerCosts`` keeps the
exposed seconds (interference included) and the hidden ones.

The framework profile is first resolved for the model and the device (``FrameworkProfile.for_device``: the
recipes' choice of dispatcher, CUDA graphs, recomputed modules and EP overlap for that model on that GPU), so
every piece here prices the plan as the stack runs it there.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from workbench.cost.comm import all_reduce_s, all_to_all_s, p2p_s
from workbench.cost.cp_ring import step_attention_rates, torch_ring_layer
from workbench.cost.elementwise_ops import FP8_VALUE_BYTES, cheap_recompute_ops
from workbench.cost.flops import embedding_ops, head_ops, layer_ops, mtp_ops
from workbench.cost.moe import (
    ACT_BYTES,
    PRE_SYNC_OPS,
    dispatch_passes,
    moe_dispatch_s,
    moe_host_s,
    moe_post_sync_host_s,
    moe_synced_forward_s,
    on_device,
    routed_load,
)
from workbench.cost.op_time import Op, OpTimes, op_times
from workbench.cost.overlap import overlap
from workbench.presets.calibration import Calibration
from workbench.specs.framework import FrameworkProfile
from workbench.specs.hardware import BYTES_PER_ELEMENT, ClusterSpec, DeviceSpec, DType
from workbench.specs.model import AttentionKind, ModelSpec

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


def compute_slowdown(fw: FrameworkProfile) -> float:
    """What every kernel time is multiplied by: 1 / (``kernel_efficiency_frac`` x the SMs left to compute,
    1 - ``reserved_sm_frac``)."""
    return 1.0 / (fw.kernel_efficiency_frac * (1.0 - fw.reserved_sm_frac))


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
    tp_comm = _tp_comm(model, cluster, fw, mm, per_value, tokens, tp, tp_stride, full)
    if fw.cp_rotate_method:  # torch's experimental context parallel: its collectives and merges (cp_ring.py)
        ring_shard, hbm = (tokens, tp, cp, cp_stride), rates.hbm_bytes_per_s
        ring, merge = torch_ring_layer(model, cluster, fw, rest, hbm, compute_slowdown(fw), ring_shard, full)
        cp_comm, fwd, comp_i = _Comm(*ring), fwd + merge[0], comp_i + merge[1]
    else:
        cp_comm = _cp_comm(model, cluster, fw, rest, tokens, tp, cp, ulysses, cp_stride, full)
    if moe_layer:
        shard = (tokens, tp, ep, etp)
        ep_comm = _ep_comm(model, cluster, cal, dtype, shard, capacity_factor, full, fwd + comp_i + comp_w)
    else:
        ep_comm = _Comm(0.0 * tokens, 0.0 * tokens, 0.0 * tokens)
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


class _Comm(NamedTuple):
    """One kind of a layer's communication per micro-batch: exposed forward, exposed backward, hidden (s)."""

    f_s: Array
    b_s: Array
    hidden_s: Array


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


def _tp_comm(
    model: ModelSpec,
    cluster: ClusterSpec,
    fw: FrameworkProfile,
    mm: OpTimes,
    per_value: Array,
    tokens: Array,
    tp: Array,
    tp_stride: Array,
    full: Array,
) -> _Comm:
    """Tensor-parallel traffic of one layer: two all-reduces (or all-gather + reduce-scatter pairs) forward,
    the same backward, again in a full recompute; hidden behind the GEMMs with ``tp_comm_overlap``.
    ``per_value``: bytes per activation value (``tp_bytes_per_value``)."""
    eff, mix, slow = fw.collective_efficiency_frac, fw.comm_interference_frac, compute_slowdown(fw)
    tp_comm = 2 * all_reduce_s(cluster, tokens * model.hidden_size * per_value, tp, tp_stride, eff)
    tail = tp_comm / np.maximum(tp, 1)
    tp_f = overlap(tp_comm, mm.fwd_s * slow, on=fw.tp_comm_overlap, tail=tail, interference=mix)
    tp_b = overlap(
        tp_comm * np.where(full, 2.0, 1.0),
        (mm.bwd_input_s + mm.bwd_weight_s + np.where(full, mm.fwd_s, 0.0)) * slow,
        on=fw.tp_comm_overlap,
        tail=tail,
        interference=mix,
    )
    return _Comm(tp_f.exposed, tp_b.exposed, tp_f.hidden + tp_b.hidden)


def _cp_comm(
    model: ModelSpec,
    cluster: ClusterSpec,
    fw: FrameworkProfile,
    rest: OpTimes,
    tokens: Array,
    tp: Array,
    cp: Array,
    ulysses: Array,
    cp_stride: Array,
    full: Array,
) -> _Comm:
    """Context-parallel traffic of one layer, cp = ulysses x ring. Ring: ring - 1 steps each passing a K and V
    block (after Ulysses' exchange a rank holds ulysses x the tokens of 1/ulysses of the heads: the same
    bytes), hidden behind the attention core with ``cp_comm_overlap``; backward passes them and their
    gradients. Ulysses: its all-to-alls are exposed (neither DeepSpeed nor TE's a2a overlaps them)."""
    eff, mix, slow = fw.collective_efficiency_frac, fw.comm_interference_frac, compute_slowdown(fw)
    ring = cp / ulysses
    kv_block = tokens * 2 * _kv_heads(model) * model.head_dim / tp * ACT_BYTES
    ring_comm = (ring - 1) * p2p_s(cluster, kv_block, cp_stride * ulysses, eff)
    share = (ring - 1) / ring
    uly = ulysses_all_to_all_s(
        model, cluster, tokens=tokens, tp=tp, ulysses=ulysses, stride=cp_stride, eff=eff
    )
    cp_f = overlap(
        ring_comm, rest.attention_core_fwd_s * slow * share, on=fw.cp_comm_overlap, interference=mix
    )
    cp_b = overlap(
        ring_comm * np.where(full, 3.0, 2.0),
        (rest.attention_core_bwd_s + np.where(full, rest.attention_core_fwd_s, 0.0)) * slow * share,
        on=fw.cp_comm_overlap,
        interference=mix,
    )
    return _Comm(cp_f.exposed + uly, cp_b.exposed + uly * np.where(full, 2.0, 1.0), cp_f.hidden + cp_b.hidden)


def _ep_comm(
    model: ModelSpec,
    cluster: ClusterSpec,
    cal: Calibration,
    dtype: DType | str,
    shard: tuple[Array, Array, Array, Array],
    capacity_factor: float | None,
    full: Array,
    compute_s: Array,
) -> _Comm:
    """Expert-parallel traffic of one MoE layer: dispatch + combine forward and backward (again in a full
    recompute), hidden behind another micro-batch's compute of the layer (``compute_s``: F + I + W) with
    ``ep_comm_overlap``; the exposed part split between forward and backward by their shares. ``shard``:
    (tokens, tp, ep, etp)."""
    fw = cal.framework
    tokens, tp, ep, etp = shard
    ep_fwd, ep_bwd = moe_dispatch_s(
        model,
        cluster,
        cal,
        dtype=dtype,
        tokens=tokens,
        tp=tp,
        ep=ep,
        capacity_factor=capacity_factor,
        etp=etp,
    )
    ep_bwd = ep_bwd + np.where(full, ep_fwd, 0.0)
    split = overlap(ep_fwd + ep_bwd, compute_s, on=fw.ep_comm_overlap, interference=fw.comm_interference_frac)
    total = np.maximum(ep_fwd + ep_bwd, 1e-300)
    return _Comm(split.exposed * ep_fwd / total, split.exposed * ep_bwd / total, split.hidden)


def tp_bytes_per_value(fw: FrameworkProfile, *, dtype: DType | str, sequence_parallel: Array) -> Array:
    """Mean bytes per activation value of a layer's tensor-parallel traffic, priced as all-reduces: 16-bit,
    except that with sequence parallelism each all-reduce is an all-gather and a reduce-scatter of the same
    bytes, and an FP8 run of a stack with ``fp8_tp_all_gather`` gathers FP8 values (``FP8_VALUE_BYTES`` of its
    recipe: the scales ride along) while it reduce-scatters 16-bit ones: (FP8 + 16-bit) / 2 per value. Bytes;
    ``sequence_parallel`` may be an array of flags over plans (the result broadcasts with it)."""
    if str(dtype) != "fp8" or not fw.fp8_tp_all_gather:
        return ACT_BYTES
    return np.where(sequence_parallel, (FP8_VALUE_BYTES[fw.fp8_recipe] + ACT_BYTES) / 2, ACT_BYTES)


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


def _kv_heads(model: ModelSpec) -> int:
    """Key/value heads a rank exchanges: every head under MLA (its K and V are per head once up-projected)."""
    return model.num_attention_heads if model.attention is AttentionKind.MLA else model.num_key_value_heads


def ulysses_all_to_all_s(
    model: ModelSpec,
    cluster: ClusterSpec,
    *,
    tokens: Array,
    tp: Array,
    ulysses: Array,
    stride: Array,
    eff: float = 1.0,
) -> Array:
    """One layer's forward DeepSpeed-Ulysses exchange (Jacobs et al. 2023, arXiv:2309.14509, section 3.1): an
    all-to-all over the ``ulysses`` ranks (``stride`` apart) for each of Q, K and V (sequence-sharded in,
    head-sharded out) and one for the attention output back, s; the backward repeats it for the gradients.
    Each all-to-all carries this rank's ``tokens`` x its heads (per tp rank) x head_dim 16-bit values, so the
    four move ``tokens x (2 x heads + 2 x kv_heads) x head_dim / tp`` values; the paper's per-link volume
    ``4Nh/P`` is the MHA case. 0 where ulysses == 1."""
    q = tokens * model.num_attention_heads * model.head_dim / tp * ACT_BYTES
    kv = tokens * _kv_heads(model) * model.head_dim / tp * ACT_BYTES
    one = all_to_all_s(cluster, q, ulysses, stride, eff)
    return 2 * one + 2 * all_to_all_s(cluster, kv, ulysses, stride, eff)


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
