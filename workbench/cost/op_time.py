"""Time of a layer's ops on one device: the op record (``Op``), the roofline and the backward rules.

The backward pass is derived per op kind (``op_times``):

- ``matmul`` (a GEMM with a weight): backward-input and backward-weight GEMMs each cost the forward's FLOPs
  (Narayanan et al. 2021, arXiv:2104.04473, section 5.1: backward = 2x forward).
- ``attention`` (score and value products, no weight): backward is all input-gradient, 2x forward; with
  FlashAttention the kernel recomputes the scores, 2.5x forward (Dao 2023, FlashAttention-2: 5 GEMMs
  backward vs 2 forward).
- ``memory`` (norms, activations, residuals, softmax, dropout, loss): bandwidth-bound; backward moves 2x the
  forward bytes.

Time per op is a roofline (Williams et al. 2009): ``max(flop / (peak * eff(flop)), bytes / (hbm * hbm_frac))``
where ``eff`` is the device's matmul efficiency curve over the op's FLOPs (Calculon, Isaev et al. SC23).
Arrays broadcast elementwise, as in :mod:`workbench.cost.flops`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

Array = Any
"""A float, an int or a numpy array (broadcast elementwise)."""

FLASH_BACKWARD_FLOP_RATIO = 2.5
"""Backward FLOPs of a fused attention kernel over its forward FLOPs: it recomputes the scores, 5 GEMMs
backward vs 2 forward (Dao 2023, FlashAttention-2, section 4.1)."""


class Op(NamedTuple):
    """One forward op of a layer on one device: ``kind`` is matmul, attention or memory."""

    name: str
    kind: str
    flop: Array
    bytes: Array
    gemm_flop: Array = None
    """FLOPs of one GEMM of the op, the size the efficiency curve is read at (None: ``flop``)."""
    backward_bytes: Array = None
    """HBM bytes of a memory op's backward pass (None: twice ``bytes``, the memory-op rule)."""


def matmul_efficiency_frac(flop: Array, points: tuple[tuple[float, float], ...]) -> Array:
    """Fraction of the dense peak a GEMM of ``flop`` FLOPs reaches: linear in log10(flop) between the
    (flop, fraction) points, flat beyond the ends (Calculon's efficiency-vs-size idea)."""
    xs = np.log10([p[0] for p in points])
    fs = np.array([p[1] for p in points])
    return np.interp(np.log10(np.maximum(flop, 1.0)), xs, fs)


def roofline_time_s(
    flop: Array, bytes_moved: Array, *, peak_flop_per_s: float, efficiency_frac: Array, hbm_bytes_per_s: float
) -> Array:
    """``max(flop / (peak * efficiency), bytes / hbm_bytes_per_s)``: the roofline (Williams et al. 2009).
    ``hbm_bytes_per_s`` is the achievable bandwidth (peak times the device's hbm efficiency)."""
    return np.maximum(flop / (peak_flop_per_s * efficiency_frac), bytes_moved / hbm_bytes_per_s)


class OpTimes(NamedTuple):
    """Seconds per device for one micro-batch through a list of ops."""

    fwd_s: Array
    bwd_input_s: Array
    bwd_weight_s: Array
    attention_core_fwd_s: Array
    """Forward time of the attention core (what selective recompute repeats)."""
    attention_core_bwd_s: Array
    """Backward time of the attention core (the window ring attention hides its backward sends behind)."""
    fwd_flop: Array
    """Executed forward FLOPs (hardware FLOPs, causal half when fused)."""


def op_times(
    ops: list[Op],
    *,
    peak_flop_per_s: float,
    gemm_curve: tuple[tuple[float, float], ...],
    hbm_bytes_per_s: float,
    attention: tuple[Array, Array] | None,
    matmul_scale: float = 1.0,
    window_attention: tuple[Array, Array] | None = None,
) -> OpTimes:
    """Roofline time of each op, summed into forward, backward-input and backward-weight parts (see the
    module docstring for the backward rules). ``gemm_curve``: (flop, fraction) points of the GEMM efficiency
    (:func:`matmul_efficiency_frac`); ``attention``: (forward, backward) fraction of the peak of the fused
    attention kernel, or None for unfused attention (its score GEMMs run at the GEMM curve);
    ``matmul_scale`` multiplies the efficiency of the weight GEMMs (the FP8 recipe's overhead);
    ``window_attention``: the fractions of the sliding-window kernel, for the ``attention_window`` op (None:
    ``attention``'s);
    ``hbm_bytes_per_s`` is the achieved bandwidth."""
    fwd = bwd_i = bwd_w = core = core_b = flop = 0.0
    for op in ops:
        size = op.flop if op.gemm_flop is None else op.gemm_flop
        bwd_eff = None
        if op.kind == "matmul":
            eff = matmul_efficiency_frac(size, gemm_curve) * matmul_scale
        elif op.kind == "attention" and attention is not None:
            use_window = op.name == "attention_window" and window_attention is not None
            eff, bwd_eff = window_attention if use_window else attention  # type: ignore[misc]
        else:
            eff = matmul_efficiency_frac(size, gemm_curve)
        t = roofline_time_s(
            op.flop,
            op.bytes,
            peak_flop_per_s=peak_flop_per_s,
            efficiency_frac=eff,
            hbm_bytes_per_s=hbm_bytes_per_s,
        )
        fwd = fwd + t
        flop = flop + op.flop
        if op.kind == "matmul":
            bwd_i, bwd_w = bwd_i + t, bwd_w + t
        elif op.kind == "attention":
            if bwd_eff is None:
                tb = 2 * t
            else:
                tb = roofline_time_s(
                    FLASH_BACKWARD_FLOP_RATIO * op.flop,
                    2 * op.bytes,
                    peak_flop_per_s=peak_flop_per_s,
                    efficiency_frac=bwd_eff,
                    hbm_bytes_per_s=hbm_bytes_per_s,
                )
            bwd_i, core, core_b = bwd_i + tb, core + t, core_b + tb
        else:
            bwd_i = bwd_i + (2 * t if op.backward_bytes is None else op.backward_bytes / hbm_bytes_per_s)
            if op.name == "softmax_dropout":
                core, core_b = core + t, core_b + 2 * t
    return OpTimes(fwd, bwd_i, bwd_w, core, core_b, flop)
