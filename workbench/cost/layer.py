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
- CP (ring attention, Liu et al. 2023, arXiv:2310.01889): cp-1 ring steps each passing this rank's K and V
  block forward; backward passes K, V and their gradients (2x).
- EP (GShard, Lepikhin et al. 2020): an all-to-all dispatch and a combine of ``tokens*k*cf*h*e/tp`` bytes
  forward, the same backward.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from workbench.cost.comm import all_reduce_s, all_to_all_s, p2p_s
from workbench.cost.flops import embedding_ops, head_ops, layer_ops, op_times
from workbench.presets.calibration import Calibration
from workbench.specs.hardware import BYTES_PER_ELEMENT, ClusterSpec, DeviceSpec, DType
from workbench.specs.model import AttentionKind, ModelSpec

Array = Any

ACT_BYTES = 2.0
"""Activations and communicated tensors are 16-bit (bf16/fp16; FP8 runs keep bf16 activations)."""


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
) -> LayerCosts:
    """One layer's costs; ``tokens`` = micro_batch * seq_len / cp, recompute coded 0/1/2. The framework's
    ``host_overhead_per_layer_s`` is added to the forward and once more to the backward pass."""
    fw = cal.framework
    rates = device_rates(cluster.device, dtype, cal)
    ops = layer_ops(
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
        capacity_factor=fw.capacity_factor,
        fused_elementwise=fw.fused_elementwise,
        dispatch_passes=fw.moe_dispatch_passes,
    )
    attention = None
    if fw.flash_attention:
        attention = cal.attention(cluster.device, dtype="bf16", seq_len=seq_len, head_dim=model.qk_head_dim)
        if fw.cp_attention_kernels is not None:  # the ring implementation's own kernels where cp > 1
            ring = cal.attention(
                cluster.device,
                dtype="bf16",
                seq_len=seq_len,
                head_dim=model.qk_head_dim,
                families=fw.cp_attention_kernels,
            )
            attention = (np.where(cp > 1, ring[0], attention[0]), np.where(cp > 1, ring[1], attention[1]))
    mm = op_times(
        [o for o in ops if o.kind == "matmul"],
        peak_flop_per_s=rates.mm_peak,
        gemm_curve=rates.mm_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=attention,
        matmul_scale=rates.mm_scale,
    )
    rest = op_times(
        [o for o in ops if o.kind != "matmul"],
        peak_flop_per_s=rates.other_peak,
        gemm_curve=rates.other_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=attention,
    )
    overhead = fw.host_overhead_per_layer_s
    slow = 1.0 / fw.kernel_efficiency_frac
    fwd = (mm.fwd_s + rest.fwd_s) * slow + overhead
    if fw.selective_recompute == "op":  # half the matmuls and every memory-bound op, not the attention
        selective = (0.5 * mm.fwd_s + rest.fwd_s - rest.attention_core_fwd_s) * slow
    else:
        selective = rest.attention_core_fwd_s * slow
    recompute_s = np.select([recompute == 2, recompute == 1], [fwd, selective], 0.0)
    comp_i = (mm.bwd_input_s + rest.bwd_input_s) * slow + recompute_s + overhead
    comp_w = (mm.bwd_weight_s + rest.bwd_weight_s) * slow
    eff = fw.collective_efficiency_frac
    tp_one = all_reduce_s(cluster, tokens * model.hidden_size * ACT_BYTES, tp, tp_stride, eff)
    tp_f = 2 * tp_one * (1 - fw.tp_comm_overlap_frac)
    tp_b = tp_f * np.where(recompute == 2, 2.0, 1.0)
    kv_heads = (
        model.num_attention_heads if model.attention is AttentionKind.MLA else model.num_key_value_heads
    )
    kv_block = tokens * 2 * kv_heads * model.head_dim / tp * ACT_BYTES
    cp_f = (cp - 1) * p2p_s(cluster, kv_block, cp_stride, eff) * (1 - fw.cp_comm_overlap_frac)
    cp_b = cp_f * np.where(recompute == 2, 3.0, 2.0)
    if moe_layer:
        a2a = tokens * model.experts_per_token * fw.capacity_factor * model.hidden_size * ACT_BYTES / tp
        ep_f = 2 * all_to_all_s(cluster, a2a, ep, 1, eff) * (1 - fw.ep_comm_overlap_frac)
    else:
        ep_f = 0.0 * tokens
    ep_b = ep_f * np.where(recompute == 2, 2.0, 1.0)
    return LayerCosts(fwd, comp_i, comp_w, tp_f, tp_b, cp_f, cp_b, ep_f, ep_b, mm.fwd_flop + rest.fwd_flop)


class EdgeCosts(NamedTuple):
    """Embedding (first stage) and LM head + loss (last stage), seconds per micro-batch."""

    embedding_f_s: Array
    embedding_b_s: Array
    head_f_s: Array
    head_i_s: Array
    head_w_s: Array


def edge_costs(
    model: ModelSpec, cluster: ClusterSpec, cal: Calibration, *, dtype: DType | str, tokens: Array, tp: Array
) -> EdgeCosts:
    rates = device_rates(cluster.device, dtype, cal)
    head = head_ops(model, tokens=tokens, tp=tp, act_bytes=ACT_BYTES)
    mm = op_times(
        [o for o in head if o.kind == "matmul"],
        peak_flop_per_s=rates.mm_peak,
        gemm_curve=rates.mm_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=None,
        matmul_scale=rates.mm_scale,
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
    slow = 1.0 / cal.framework.kernel_efficiency_frac
    return EdgeCosts(
        emb.fwd_s * slow,
        emb.bwd_input_s * slow,
        (mm.fwd_s + loss.fwd_s) * slow,
        (mm.bwd_input_s + loss.bwd_input_s) * slow,
        mm.bwd_weight_s * slow,
    )


def dtype_bytes(dtype: DType | str) -> float:
    """Bytes per element of the weights kept for the forward pass (FP8 runs keep bf16 weights)."""
    return float(max(BYTES_PER_ELEMENT[DType(dtype)], 2))
