"""Measured GEMM times at their own shapes, for pricing a weight GEMM at the token count it runs at.

The kernel table's GEMM curve is by FLOPs alone and keeps the most efficient shape of each FLOP bin
(``workbench microbench``, ``gemm_points``); its shapes have 2,048 tokens or more. A decode iteration's weight GEMMs
have as many rows as the batch (a few hundred tokens) and the same FLOPs as a training GEMM of far more rows and
narrower weights, so the curve prices them at a training shape's efficiency. The committed measurements hold the
forward GEMMs (``x @ w.T``, layout ``nt``, ``what`` ending in ``fwd``) at their own shapes: the microbench's layer
GEMMs (``profiles/measured/kernels-<device>/gemm.csv``: Llama 3.1 8B/70B/405B linears at 2,048-32,768 tokens)
and, on the H200, ``benchmarks/probe_expert_gemms.py``'s expert GEMMs at 128-8,192 tokens
(``profiles/measured/real-runs/expert-gemms-h200.csv``, bf16 and fp8). On that H200 the fp8 forward GEMMs of
Mixtral's 4096 -> 28672 and 14336 -> 4096 matrices take 1.16-1.44x what the curve and the HBM roofline give them at
128 and 256 tokens and 1.02-1.12x from 512 to 8,192 (docs/serving.md, "Weight GEMMs at their measured shape").

A series is one weight shape (N x K elements) measured at several token counts M; its efficiency at a token count
is the measured FLOP rate over the device preset's dense peak of the dtype, interpolated linearly in log M between
measured points and undefined outside them. A weight GEMM (N, K) at M tokens reads the series that covers
M with the shape nearest (N, K) in log (:func:`shape_efficiency_frac`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import polars as pl

from workbench.presets.catalog import load_device, profiles_dir

MEASURED_GEMM_FILES: dict[str, tuple[str, ...]] = {
    "h100-sxm5-80gb": ("kernels-h100-sxm5-80gb/gemm.csv", "real-runs/expert-gemms-h200.csv"),
    "h200-sxm-141gb": ("kernels-h200-sxm-141gb/gemm.csv", "real-runs/expert-gemms-h200.csv"),
}
"""Device preset id -> CSV files under ``profiles/measured`` whose forward GEMM rows (columns dtype, m, n, k, what,
time_s) were measured on that device (their provenance: the folder's ``kernels.toml``; the probe's docstring)."""


@dataclass(frozen=True, slots=True)
class GemmSeries:
    """One weight shape measured at several token counts."""

    n: float
    """Output features N of the weight matrix (the GEMM's n)."""
    k: float
    """Input features K (the GEMM's reduction)."""
    log_tokens: tuple[float, ...]
    """ln M of the measured token counts, ascending."""
    efficiency_frac: tuple[float, ...]
    """Measured FLOP rate over the dtype's dense peak, per token count."""
    what: str
    """The ``what`` of the shape's first row (model, linear)."""


@lru_cache(maxsize=32)
def measured_gemm_series(device_id: str, dtype: str) -> tuple[GemmSeries, ...]:
    """The forward GEMM series of ``device_id`` at ``dtype`` (``bf16``, ``fp8``) from ``MEASURED_GEMM_FILES``; empty
    for a device without files or a dtype without rows or peak. A series needs two token counts or more. Raises
    ValueError naming the file when one is missing or lacks a column."""
    files = MEASURED_GEMM_FILES.get(device_id, ())
    device = load_device(device_id)
    if not files or dtype not in {d.value for d in device.peak_flop_per_s}:
        return ()
    peak = device.peak(dtype)
    frames = []
    for name in files:
        path = profiles_dir() / "measured" / name
        if not path.is_file():
            raise ValueError(f"{path}: measured GEMM file of {device_id} is missing (MEASURED_GEMM_FILES)")
        frame = pl.read_csv(path)
        missing = {"dtype", "m", "n", "k", "what", "time_s"} - set(frame.columns)
        if missing:
            raise ValueError(
                f"{path}: no column {', '.join(sorted(missing))} (need dtype, m, n, k, what, time_s)"
            )
        frames.append(frame.select("dtype", "m", "n", "k", "what", "time_s"))
    rows = (
        pl.concat(frames)
        .filter((pl.col("dtype") == dtype) & pl.col("what").str.ends_with("fwd") & (pl.col("time_s") > 0))
        .with_columns((2.0 * pl.col("m") * pl.col("n") * pl.col("k") / pl.col("time_s") / peak).alias("eff"))
        .sort("n", "k", "m")
    )
    out = []
    for (n, k), group in rows.group_by(["n", "k"], maintain_order=True):
        per_m = group.group_by("m", maintain_order=True).agg(pl.col("eff").median(), pl.col("what").first())
        if per_m.height < 2:
            continue
        out.append(
            GemmSeries(
                n=float(n),
                k=float(k),
                log_tokens=tuple(math.log(float(m)) for m in per_m["m"]),
                efficiency_frac=tuple(float(e) for e in per_m["eff"]),
                what=str(per_m["what"][0]),
            )
        )
    return tuple(out)


def shape_efficiency_frac(
    series: tuple[GemmSeries, ...], tokens: np.ndarray, n: float, k: float
) -> np.ndarray:
    """Efficiency (fraction of the dense peak) of a weight GEMM with ``n`` outputs and ``k`` inputs at each of
    ``tokens`` (M, any shape): of the series whose measured token counts span M, the one nearest in shape,
    |ln(n / n_s)| + |ln(k / k_s)| (the first in (n, k) order on a tie), interpolated linearly in ln M; NaN where
    no series spans M (M < 1 included). Raises ValueError for ``n`` or ``k`` <= 0."""
    if n <= 0 or k <= 0:
        raise ValueError(f"shape_efficiency_frac: n and k must be > 0, got n={n!r}, k={k!r}")
    m = np.asarray(tokens, dtype=float)
    log_m = np.log(np.maximum(m, 1.0))
    eff = np.full(m.shape, np.nan)
    if not series:
        return eff
    lo, hi = min(s.log_tokens[0] for s in series), max(s.log_tokens[-1] for s in series)
    open_ = (m >= 1.0) & (log_m >= lo - 1e-12) & (log_m <= hi + 1e-12)  # spannable, not yet spanned
    ranked = sorted(
        range(len(series)), key=lambda i: abs(math.log(series[i].n / n)) + abs(math.log(series[i].k / k))
    )
    for i in ranked:  # nearest first (a stable sort keeps (n, k) order on a tie)
        s = series[i]
        take = open_ & (log_m >= s.log_tokens[0] - 1e-12) & (log_m <= s.log_tokens[-1] + 1e-12)
        if take.any():
            eff[take] = np.interp(log_m[take], s.log_tokens, s.efficiency_frac)
            open_ &= ~take
            if not open_.any():
                break
    return eff
