"""Fit one device's kernel table to a measured per-op profile (``workbench calibrate``).

The analytic time of a profiled op is the roofline sum of :func:`workbench.cost.flops.op_times` over its ops
(``layer_ops``, ``head_ops``, ``embedding_ops``). The fit starts from a kernel table (a ``workbench
microbench`` output, the published table of the device, or the device preset's curve) and adjusts the GEMM
efficiency curve (the fraction of the peak at fixed FLOP sizes, one point per decade spanned by the data,
Calculon's efficiency-vs-size curve, Isaev et al. SC23), the fused-attention forward and backward fractions
and the HBM fraction, by coordinate search on the mean absolute log error of the forward and backward times
of the profiled ops (log error treats over- and under-prediction alike). These are kernel-level timings of
the device at hand, never end-to-end step times. The result is a kernel table
(:mod:`workbench.presets.kernels` format) that ``--kernels`` hands to the analytic backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from workbench.cost.flops import embedding_ops, head_ops, layer_ops, op_times
from workbench.presets.kernels import write_kernel_table
from workbench.presets.profile_table import Profile, host_cluster
from workbench.specs.hardware import BYTES_PER_ELEMENT, DeviceSpec, DType
from workbench.specs.kernels import AttentionTable, KernelTable

_FACTORS = (0.5, 0.7, 0.85, 1.15, 1.4, 2.0)
_SWEEPS = 8


@dataclass(frozen=True, kw_only=True)
class CalibrationFit:
    """Fitted curve and fractions of ``device``, with the per-op comparison (seconds)."""

    device: DeviceSpec
    dtype: str
    matmul: tuple[tuple[float, float], ...]
    attention_fwd_frac: float
    attention_bwd_frac: float
    hbm_frac: float
    seq_len: float
    """Mean sequence length of the profiled ops (where the attention fractions hold)."""
    head_dim: int
    error_before_frac: float
    """Mean |analytic / measured - 1| over the forward and backward time of every profiled op, before."""
    error_after_frac: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""

    def summary(self) -> dict[str, Any]:
        return {
            "device": self.device.id,
            "matmul": [list(p) for p in self.matmul],
            "attention_fwd_frac": self.attention_fwd_frac,
            "attention_bwd_frac": self.attention_bwd_frac,
            "hbm_frac": self.hbm_frac,
            "error_before_frac": self.error_before_frac,
            "error_after_frac": self.error_after_frac,
            "ops": self.rows,
        }

    def table(self) -> KernelTable:
        """The fit as a kernel table of the device (``measured = true``)."""
        return KernelTable(
            device=self.device.id,
            gemm={self.dtype: self.matmul},
            hbm_frac=self.hbm_frac,
            attention=(
                AttentionTable(
                    family="sdpa",
                    dtype=self.dtype,
                    head_dim=self.head_dim,
                    causal=True,
                    seq_len=(self.seq_len,),
                    fwd_frac=(self.attention_fwd_frac,),
                    bwd_frac=(self.attention_bwd_frac,),
                    source="fitted to the profiled layers' forward and backward times",
                ),
            ),
            measured=True,
            source=self.source,
            provenance={
                "error_before_frac": f"{self.error_before_frac:.4f}",
                "error_after_frac": f"{self.error_after_frac:.4f}",
            },
        )


def _device_for(prof: Profile, device_id: str) -> DeviceSpec:
    if device_id != prof.device_id:
        raise ValueError(
            f"profile {prof.path} was measured on {prof.device_id!r}, not {device_id!r}; "
            "calibrate a device only from its own measurements"
        )
    if prof.manifest["device_kind"] == "cpu":
        return host_cluster(prof).device
    from workbench.presets.catalog import load_device

    return load_device(device_id)


def _analytic(
    prof: Profile, device: DeviceSpec, curve: tuple[tuple[float, float], ...], attention: tuple[float, float]
) -> np.ndarray:
    """(rows, 2) analytic forward and backward seconds of every profiled op."""
    model, dtype = prof.model, DType(prof.manifest["dtype"])
    act, peak = BYTES_PER_ELEMENT[dtype], device.peak(dtype)
    hbm = device.hbm_bytes_per_s * device.hbm_efficiency_frac
    out = []
    for r in prof.ops.iter_rows(named=True):
        tokens, op = r["num_tokens"], r["op"]
        if op == "embedding":
            ops = embedding_ops(model, tokens=tokens, act_bytes=act)
        elif op == "head":
            ops = head_ops(model, tokens=tokens, tp=r["tp"], act_bytes=act)
        else:
            ops = layer_ops(
                model,
                tokens=tokens,
                seq_len=r["seq_len"],
                tp=r["tp"],
                ep=r["ep"],
                act_bytes=act,
                moe_layer=op == "moe_layer",
            )
        t = op_times(ops, peak_flop_per_s=peak, gemm_curve=curve, hbm_bytes_per_s=hbm, attention=attention)
        out.append((float(t.fwd_s), float(t.bwd_input_s + t.bwd_weight_s)))
    return np.array(out)


def _measured(prof: Profile) -> np.ndarray:
    return prof.ops.select("forward_s", "backward_s").to_numpy()


def _fitted_rows(prof: Profile) -> Profile:
    """The rows the fit uses: blocks and the head. The embedding is left out: the analytic model counts only
    its gather, while a dense embedding's backward also writes a V x h gradient (not a matmul question)."""
    return replace(prof, ops=prof.ops.filter(prof.ops["op"] != "embedding"))


def _curve_points(prof: Profile, device: DeviceSpec) -> list[float]:
    lo = math.floor(
        math.log10(max(1.0, float(prof.ops["num_tokens"].to_numpy().min()) * prof.model.hidden_size))
    )
    hi = math.ceil(
        math.log10(
            float(prof.ops["num_tokens"].to_numpy().max())
            * prof.model.hidden_size
            * prof.model.vocab_size
            * 2
        )
    )
    return [10.0**k for k in range(lo, hi + 1)]


def calibrate_device(prof: Profile, device_id: str, *, start: KernelTable | None = None) -> CalibrationFit:
    """Fit ``device_id``'s kernel rates to ``prof``, starting from ``start`` (a microbench or published table of
    that device; None: the device preset's curve and a 0.5 attention fraction). ValueError when the profile
    was measured on another device or ``start`` describes another device."""
    device = _device_for(prof, device_id)
    if start is not None and start.device != device_id:
        raise ValueError(f"kernel table of {start.device!r} cannot start a fit of {device_id!r}")
    prof = _fitted_rows(prof)
    dtype = str(prof.manifest["dtype"])
    seq = float(np.mean(prof.ops["seq_len"].to_numpy()))
    head_dim = prof.model.qk_head_dim
    curve0 = device.matmul_efficiency
    attn0 = (0.5, 0.5)
    if start is not None:
        device = replace(device, hbm_efficiency_frac=start.hbm_frac)
        if dtype in start.gemm or (dtype == "fp16" and "bf16" in start.gemm):
            curve0 = start.gemm_curve(dtype)
        hit = start.attention_fracs(
            ("sdpa", "fa2", "fa3", "cudnn"), dtype=dtype, head_dim=head_dim, causal=True, seq_len=seq
        )
        if hit is not None:
            attn0 = (float(hit[1]), float(hit[2]))
    measured = _measured(prof)
    before = _analytic(prof, device, curve0, attn0)
    xs = _curve_points(prof, device)
    start_eff = np.interp(np.log10(xs), np.log10([p[0] for p in curve0]), [p[1] for p in curve0])
    params = [*start_eff.tolist(), *attn0, device.hbm_efficiency_frac]

    def evaluate(values: list[float]) -> tuple[float, np.ndarray]:
        dev = replace(device, hbm_efficiency_frac=values[-1])
        pred = _analytic(prof, dev, tuple(zip(xs, values[:-3], strict=True)), (values[-3], values[-2]))
        return float(np.mean(np.abs(np.log(pred / measured)))), pred

    best, pred = evaluate(params)
    for _ in range(_SWEEPS):
        improved = False
        for i in range(len(params)):
            for f in _FACTORS:
                trial = list(params)
                trial[i] = float(min(1.0, max(1e-4, params[i] * f)))
                score, trial_pred = evaluate(trial)
                if score < best - 1e-9:
                    best, pred, params, improved = score, trial_pred, trial, True
        if not improved:
            break
    return _fit_result(prof, device, xs, params, measured, before, pred, dtype=dtype, seq_len=seq)


def _fit_result(
    prof: Profile,
    device: DeviceSpec,
    xs: list[float],
    params: list[float],
    measured: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    *,
    dtype: str,
    seq_len: float,
) -> CalibrationFit:
    rows = []
    for k, r in enumerate(prof.ops.iter_rows(named=True)):
        shape = f"tp{r['tp']} cp{r['cp']} ep{r['ep']} mbs{r['micro_batch_size']} s{r['seq_len']}"
        for j, part in enumerate(("forward", "backward")):
            rows.append(
                {
                    "op": f"{r['op']} {part}",
                    "shape": shape,
                    "measured_s": float(measured[k, j]),
                    "before_s": float(before[k, j]),
                    "after_s": float(after[k, j]),
                }
            )
    return CalibrationFit(
        device=device,
        dtype=dtype,
        matmul=tuple(zip(xs, params[:-3], strict=True)),
        attention_fwd_frac=params[-3],
        attention_bwd_frac=params[-2],
        hbm_frac=params[-1],
        seq_len=seq_len,
        head_dim=prof.model.qk_head_dim,
        error_before_frac=float(np.mean(np.abs(before / measured - 1))),
        error_after_frac=float(np.mean(np.abs(after / measured - 1))),
        rows=rows,
        source=f"workbench calibrate from {prof.path} ({prof.manifest['device_name']}, {prof.manifest['created_at']})",
    )


def write_calibration(path: str | Path, fit: CalibrationFit) -> Path:
    """Write the fit as a kernel table (:mod:`workbench.presets.kernels` format); the caller checks overwrite."""
    return write_kernel_table(path, fit.table())
