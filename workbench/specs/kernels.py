"""``KernelTable``: what one device's kernels achieve, measured by microbenchmarks, never by step times.

A table holds, per device and precision: the GEMM efficiency curve (fraction of the dense peak by GEMM size
in FLOPs = 2*M*N*K, Calculon's efficiency-vs-size idea, Isaev et al. SC23), attention kernel tables per
kernel family (``fa2``, ``fa3``, ``cudnn``) with forward and backward apart, by sequence length and head dim,
and the achieved share of the HBM bandwidth for memory-bound ops. Tables come from published
microbenchmarks (``profiles/kernels/<device>.toml``, every number with its source) or from
``workbench microbench`` on the device at hand (``measured = true`` with the torch/CUDA/driver provenance).

FLOP convention of the attention tables (FlashAttention papers, Dao 2023 section 4.1): forward FLOPs are
``4 * s_q * s_k * head_dim * heads`` per sequence, halved for a causal mask; backward FLOPs are 2.5x forward.
Fractions are achieved FLOP/s over the dense peak of the table's precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.specs.hardware import efficiency_points
from workbench.specs.limits import MAX_HEAD_DIM, MAX_SEQ_LEN, check_count, check_real, shown

ATTENTION_FAMILIES = ("fa2", "fa3", "cudnn", "fa-triton", "sdpa")
"""Fused attention kernel families: FlashAttention-2 (Dao 2023), FlashAttention-3 (Shah et al. 2024, Hopper
only), cuDNN fused attention (NVIDIA cuDNN 8.9+/9, Transformer Engine's default backend on Hopper),
``fa-triton`` = FlashAttention written in Triton (flash-attn's ``flash_attn_triton.py``, the FlashAttention-1
algorithm with an additive bias such as ALiBi; MPT's ``attn_impl: triton``, about half FA2's speed in the FA2
paper's Fig. 4), and ``sdpa`` = whatever ``torch.nn.functional.scaled_dot_product_attention`` dispatches to
(microbench tables)."""


WINDOW_MATCH_FACTOR = 2.0
"""A sliding-window attention table stands for windows within this factor of its own (either way)."""


def _window_near(table_window: int, window: int) -> bool:
    return max(table_window, window) <= WINDOW_MATCH_FACTOR * min(table_window, window)


def interp_log(x: Any, xs: tuple[float, ...], ys: tuple[float, ...]) -> Any:
    """Linear interpolation in log10(x) between sorted points ``xs`` -> ``ys``, flat beyond the ends.
    ``x`` may be a scalar or a numpy array (broadcast)."""
    return np.interp(np.log10(np.maximum(x, 1.0)), np.log10(xs), ys)


@dataclass(frozen=True, kw_only=True, slots=True)
class AttentionTable:
    """One attention kernel family at one precision, head dim and mask: fractions by sequence length."""

    family: str
    dtype: str
    head_dim: int
    causal: bool
    seq_len: tuple[float, ...]
    fwd_frac: tuple[float, ...]
    bwd_frac: tuple[float, ...]
    source: str = ""
    window: int = 0
    """Keys a query attends to in a sliding-window (banded causal) table, the benchmark's window: its FLOPs
    count the attended pairs only (``w (w + 1) / 2 + (s - w) w`` per head, cudnn-frontend's
    ``benchmark_single_sdpa.flops``); 0 for a full causal or unmasked table."""

    def __post_init__(self) -> None:
        where = f"attention table {shown(self.family)}/{shown(self.dtype)}/d{shown(self.head_dim)}"
        if self.family not in ATTENTION_FAMILIES:
            raise ValueError(f"{where}: family must be one of {', '.join(ATTENTION_FAMILIES)}")
        check_count(where, "head_dim", self.head_dim, maximum=MAX_HEAD_DIM, limit="MAX_HEAD_DIM")
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 0:
            raise ValueError(f"{where}: window must be a whole number of keys >= 0, got {shown(self.window)}")
        if self.window and not self.causal:
            raise ValueError(f"{where}: a window table (window={self.window}) must be causal")
        if not isinstance(self.causal, bool):
            raise ValueError(f"{where}: causal must be true or false, got {shown(self.causal)}")
        n = len(self.seq_len)
        if not n or len(self.fwd_frac) != n or len(self.bwd_frac) != n:
            raise ValueError(f"{where}: seq_len, fwd_frac and bwd_frac must be non-empty and of equal length")
        lengths = tuple(check_real(where, "seq_len", x, maximum=MAX_SEQ_LEN) for x in self.seq_len)
        if list(lengths) != sorted(lengths):
            raise ValueError(f"{where}: seq_len must be positive and sorted, got {shown(self.seq_len)}")
        object.__setattr__(self, "seq_len", lengths)
        for name in ("fwd_frac", "bwd_frac"):
            values = getattr(self, name)
            if any(not isinstance(f, int | float) or isinstance(f, bool) or not 0 < f <= 1 for f in values):
                raise ValueError(f"{where}: {name} must be fractions in (0, 1], got {shown(values)}")


@dataclass(frozen=True, kw_only=True, slots=True)
class KernelTable:
    """Kernel efficiencies of one device (see the module docstring); fractions are 0..1."""

    device: str
    """Device preset id the table describes."""
    gemm: dict[str, tuple[tuple[float, float], ...]]
    """Per precision (``bf16``, ``fp8``...): (GEMM FLOPs, fraction of that precision's dense peak) points."""
    hbm_frac: float
    """Achieved share of the datasheet HBM bandwidth for large memory-bound kernels."""
    attention: tuple[AttentionTable, ...] = ()
    measured: bool = False
    """True for a ``workbench microbench`` table, False for published numbers."""
    source: str = ""
    provenance: dict[str, str] = field(default_factory=dict)
    """Measured tables: torch, CUDA, driver, clocks, host, date."""

    def __post_init__(self) -> None:
        where = f"kernel table {shown(self.device)}"
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"kernel table: device must be a device id string, got {shown(self.device)}")
        check_real(where, "hbm achieved_frac", self.hbm_frac, maximum=1.0)
        if not isinstance(self.gemm, dict) or not self.gemm:
            raise ValueError(f"{where}: needs at least one [gemm.<dtype>] curve")
        curves = {
            dtype: efficiency_points(where, pts, f"gemm.{dtype}.points") for dtype, pts in self.gemm.items()
        }
        object.__setattr__(self, "gemm", curves)

    def gemm_curve(self, dtype: str) -> tuple[tuple[float, float], ...]:
        """The GEMM curve of ``dtype``; fp16 falls back to bf16 (same tensor-core rate). KeyError if absent."""
        key = "bf16" if dtype == "fp16" and "fp16" not in self.gemm else dtype
        if key not in self.gemm:
            raise KeyError(
                f"kernel table {self.device} has no gemm.{dtype} curve; it has {sorted(self.gemm)}"
            )
        return self.gemm[key]

    def families(self, dtype: str = "bf16") -> list[str]:
        """Attention families the table covers at ``dtype``."""
        return sorted({t.family for t in self.attention if t.dtype == dtype})

    def attention_fracs(
        self,
        families: tuple[str, ...],
        *,
        dtype: str,
        head_dim: int,
        causal: bool,
        seq_len: Any,
        window: int = 0,
    ) -> tuple[str, Any, Any] | None:
        """(family, forward fraction, backward fraction) of the first of ``families`` the table has at
        ``dtype``; among its tables the nearest head dim, then the matching mask (else the other), and the
        fractions interpolated in log(seq_len). None when no family matches. ``window`` > 0 asks for a
        sliding-window table (``AttentionTable.window``) within a factor ``WINDOW_MATCH_FACTOR`` of it: a
        windowed kernel's rate depends on the window (few key blocks per query block), so a table of another
        window, or a full-attention table, does not stand in for it (None)."""
        for family in families:
            tables = [t for t in self.attention if t.family == family and t.dtype == dtype]
            if window:
                tables = [t for t in tables if t.window and _window_near(t.window, window)]
            else:
                tables = [t for t in tables if not t.window]
            if not tables:
                continue
            best = min(
                tables,
                key=lambda t: (
                    abs(np.log2(t.window / window)) if window else 0.0,
                    abs(np.log2(t.head_dim / head_dim)),
                    t.causal != causal,
                ),
            )
            return (
                family,
                interp_log(seq_len, best.seq_len, best.fwd_frac),
                interp_log(seq_len, best.seq_len, best.bwd_frac),
            )
        return None
