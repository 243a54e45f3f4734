"""Predicted vs measured: the figures that lay two ``Estimate`` of one plan side by side, defined once.

The relative error is always predicted / measured - 1 (positive: the prediction is slower or larger), None
where the measured value is 0 or missing. ``compare`` gives the quantities ``QUANTITIES`` (step time, bubble
fraction, tokens/s, peak memory per rank, in SI units) and the per-(stage, op) median action times; the CLI
(``workbench run --compare``), the HTML report and the comparison figure all read them from here.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate

COMPUTE_OPS: tuple[str, ...] = ("F", "B", "I", "W")

QUANTITIES: tuple[tuple[str, str], ...] = (
    ("step_time_s", "step time"),
    ("bubble_fraction", "bubble fraction"),
    ("tokens_per_s", "tokens/s"),
    ("peak_memory_bytes", "peak memory per rank"),
)
"""(key, label) of the compared quantities: an ``Estimate`` attribute each, in its SI unit."""


def error_frac(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured - 1; None where either is missing or the measured value is 0."""
    if predicted is None or measured is None or measured == 0:
        return None
    return predicted / measured - 1.0


def step_time_error_frac(predicted: Estimate, measured: Estimate) -> float:
    """Relative step-time error predicted / measured - 1. ValueError if the measured step time is not > 0."""
    if not measured.step_time_s > 0:
        raise ValueError(f"measured step_time_s must be > 0 seconds, got {measured.step_time_s!r}")
    return predicted.step_time_s / measured.step_time_s - 1.0


def per_op_times(estimate: Estimate) -> dict[tuple[int, str], float]:
    """Median duration (s) of each (stage, op) over the micro-batches, compute ops only, sorted."""
    groups: dict[tuple[int, str], list[float]] = {}
    for row in estimate.timeline.iter_rows(named=True):
        if row["op"] in COMPUTE_OPS:
            groups.setdefault((row["stage"], row["op"]), []).append(row["end_s"] - row["start_s"])
    return {k: statistics.median(v) for k, v in sorted(groups.items())}


def compare(predicted: Estimate, measured: Estimate) -> dict[str, Any]:
    """Predicted vs measured as plain JSON: ``backend`` and ``measured_backend``; one entry per key of
    ``QUANTITIES`` with predicted, measured and error_frac; ``ops``: per (stage, op) predicted_s, measured_s
    and error_frac (None where a side lacks that op)."""
    out: dict[str, Any] = {"backend": predicted.backend, "measured_backend": measured.backend}
    for key, _ in QUANTITIES:
        p, m = float(getattr(predicted, key)), float(getattr(measured, key))
        out[key] = {"predicted": p, "measured": m, "error_frac": error_frac(p, m)}
    pred_ops, meas_ops = per_op_times(predicted), per_op_times(measured)
    out["ops"] = [
        {
            "stage": s,
            "op": op,
            "predicted_s": pred_ops.get((s, op)),
            "measured_s": meas_ops.get((s, op)),
            "error_frac": error_frac(pred_ops.get((s, op)), meas_ops.get((s, op))),
        }
        for s, op in sorted(set(pred_ops) | set(meas_ops))
    ]
    return out
