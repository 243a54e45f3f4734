"""Fit the analytic op-time model of one device to a measured profile (``workbench calibrate``).

The analytic time of a profiled op is the roofline sum of :func:`workbench.cost.flops.op_times` over its ops
(``layer_ops``, ``head_ops``, ``embedding_ops``). The fit adjusts the device's matmul efficiency curve
(the fraction of the peak at fixed FLOP sizes, one point per decade spanned by the data, Calculon's
efficiency-vs-size curve, Isaev et al. SC23), the fused-attention fraction and the HBM fraction, by
coordinate search on the mean absolute log error of the forward and backward times (log error treats
over- and under-prediction alike). Pure numpy/polars; the result is a calibration TOML in the format of
:mod:`workbench.presets.calibration` (``[device."<id>"] matmul``, ``flash_attention_frac``, ``hbm_frac``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from workbench.cost.flops import embedding_ops, head_ops, layer_ops, op_times
from workbench.presets.profile_table import Profile, host_cluster
from workbench.specs.hardware import BYTES_PER_ELEMENT, DeviceSpec, DType

_FACTORS = (0.5, 0.7, 0.85, 1.15, 1.4, 2.0)
_SWEEPS = 8


@dataclass(frozen=True, kw_only=True)
class CalibrationFit:
    """Fitted curve and fractions of ``device``, with the per-op comparison (seconds)."""

    device: DeviceSpec
    matmul: tuple[tuple[float, float], ...]
    flash_attention_frac: float
    hbm_frac: float
    error_before_frac: float
    """Mean |analytic / measured - 1| over the forward and backward time of every profiled op, before."""
    error_after_frac: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""

    def summary(self) -> dict[str, Any]:
        return {
            "device": self.device.id,
            "matmul": [list(p) for p in self.matmul],
            "flash_attention_frac": self.flash_attention_frac,
            "hbm_frac": self.hbm_frac,
            "error_before_frac": self.error_before_frac,
            "error_after_frac": self.error_after_frac,
            "ops": self.rows,
        }


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


def _analytic(prof: Profile, device: DeviceSpec, flash_frac: float) -> np.ndarray:
    """(rows, 2) analytic forward and backward seconds of every profiled op."""
    model, dtype = prof.model, DType(prof.manifest["dtype"])
    act, peak = BYTES_PER_ELEMENT[dtype], device.peak(dtype)
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
        t = op_times(ops, device, peak_flop_per_s=peak, flash_frac=flash_frac, flash=True)
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


def calibrate_device(prof: Profile, device_id: str, *, flash_frac: float = 0.5) -> CalibrationFit:
    """Fit ``device_id``'s curve to ``prof``. ValueError when the profile was measured on another device."""
    device = _device_for(prof, device_id)
    prof = _fitted_rows(prof)
    measured = _measured(prof)
    before = _analytic(prof, device, flash_frac)
    xs = _curve_points(prof, device)
    start_eff = np.interp(
        np.log10(xs),
        np.log10([p[0] for p in device.matmul_efficiency]),
        [p[1] for p in device.matmul_efficiency],
    )
    params = [*start_eff.tolist(), flash_frac, device.hbm_efficiency_frac]

    def evaluate(values: list[float]) -> tuple[float, np.ndarray]:
        dev = replace(
            device, matmul_efficiency=tuple(zip(xs, values[:-2], strict=True)), hbm_efficiency_frac=values[-1]
        )
        pred = _analytic(prof, dev, values[-2])
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
    return _fit_result(prof, device, xs, params, measured, before, pred)


def _fit_result(
    prof: Profile,
    device: DeviceSpec,
    xs: list[float],
    params: list[float],
    measured: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
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
        matmul=tuple(zip(xs, params[:-2], strict=True)),
        flash_attention_frac=params[-2],
        hbm_frac=params[-1],
        error_before_frac=float(np.mean(np.abs(before / measured - 1))),
        error_after_frac=float(np.mean(np.abs(after / measured - 1))),
        rows=rows,
        source=f"workbench calibrate from {prof.path} ({prof.manifest['device_name']}, {prof.manifest['created_at']})",
    )


def write_calibration(path: str | Path, fit: CalibrationFit) -> Path:
    """Write the fit as a calibration TOML (``workbench.presets.calibration`` format); the caller checks overwrite."""
    points = ", ".join(f"[{x:.6g}, {f:.4f}]" for x, f in fit.matmul)
    text = (
        f"# {fit.source}\n# mean |analytic/measured - 1|: before {fit.error_before_frac:.3f}, "
        f'after {fit.error_after_frac:.3f}\n[source]\ntext = "{fit.source}"\n\n'
        f'[device."{fit.device.id}"]\nmatmul = [{points}]\n'
        f"flash_attention_frac = {fit.flash_attention_frac:.4f}\nhbm_frac = {fit.hbm_frac:.4f}\n"
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target
