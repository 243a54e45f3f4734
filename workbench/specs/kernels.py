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

ATTENTION_FAMILIES = ("fa2", "fa3", "cudnn", "sdpa")
"""Fused attention kernel families: FlashAttention-2 (Dao 2023), FlashAttention-3 (Shah et al. 2024, Hopper
only), cuDNN fused attention (NVIDIA cuDNN 8.9+/9, Transformer Engine's default backend on Hopper), and
``sdpa`` = whatever ``torch.nn.functional.scaled_dot_product_attention`` dispatches to (microbench tables)."""


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

    def __post_init__(self) -> None:
        where = f"attention table {self.family}/{self.dtype}/d{self.head_dim}"
        if self.family not in ATTENTION_FAMILIES:
            raise ValueError(f"{where}: family must be one of {', '.join(ATTENTION_FAMILIES)}")
        n = len(self.seq_len)
        if not n or len(self.fwd_frac) != n or len(self.bwd_frac) != n:
            raise ValueError(f"{where}: seq_len, fwd_frac and bwd_frac must be non-empty and of equal length")
        if list(self.seq_len) != sorted(self.seq_len) or min(self.seq_len) <= 0:
            raise ValueError(f"{where}: seq_len must be positive and sorted, got {self.seq_len}")
        for name in ("fwd_frac", "bwd_frac"):
            if any(not 0 < f <= 1 for f in getattr(self, name)):
                raise ValueError(f"{where}: {name} must be fractions in (0, 1], got {getattr(self, name)}")


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
        if not 0 < self.hbm_frac <= 1:
            raise ValueError(
                f"kernel table {self.device}: hbm achieved_frac must be in (0, 1], got {self.hbm_frac}"
            )
        if not self.gemm:
            raise ValueError(f"kernel table {self.device}: needs at least one [gemm.<dtype>] curve")
        for dtype, points in self.gemm.items():
            if (
                not points
                or any(not 0 < f <= 1 or x <= 0 for x, f in points)
                or list(points) != sorted(points)
            ):
                raise ValueError(
                    f"kernel table {self.device}: gemm.{dtype}.points must be (flop > 0, fraction in (0, 1]) "
                    f"sorted by flop, got {points!r}"
                )

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
        self, families: tuple[str, ...], *, dtype: str, head_dim: int, causal: bool, seq_len: Any
    ) -> tuple[str, Any, Any] | None:
        """(family, forward fraction, backward fraction) of the first of ``families`` the table has at
        ``dtype``; among its tables the nearest head dim, then the matching mask (else the other), and the
        fractions interpolated in log(seq_len). None when no family matches."""
        for family in families:
            tables = [t for t in self.attention if t.family == family and t.dtype == dtype]
            if not tables:
                continue
            best = min(tables, key=lambda t: (abs(np.log2(t.head_dim / head_dim)), t.causal != causal))
            return (
                family,
                interp_log(seq_len, best.seq_len, best.fwd_frac),
                interp_log(seq_len, best.seq_len, best.bwd_frac),
            )
        return None
