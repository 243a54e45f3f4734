"""Refinement of the best screened plans with the full backend, and the one-line explanations.

The top K plans become ``ParallelPlan`` objects and go through a backend's ``estimate`` (for ``analytic``:
:func:`workbench.estimate.analytic.estimate_plan` with the screen's own calibration, so both tiers price with the
same constants). ``explain_win`` says in one line why the first plan beats the second; ``bottleneck`` names
the largest part of a step after compute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from workbench.specs.axes import PLAN_AXES
from workbench.specs.plan import ParallelPlan
from workbench.specs.rules import PLAN_FIELDS

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.estimate import Estimate
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

BREAKDOWN_LABELS: dict[str, str] = {
    "compute_s": "compute",
    "exposed_tp_comm_s": "tp comm",
    "exposed_cp_comm_s": "cp comm",
    "exposed_ep_comm_s": "ep comm",
    "exposed_pp_comm_s": "pp comm",
    "exposed_dp_comm_s": "dp comm",
    "bubble_s": "bubble",
    "optimizer_s": "optimizer",
}
"""Step-time parts (``StepBreakdown`` field names) and how the CLI names them."""


def plan_from_row(row: dict[str, Any]) -> ParallelPlan:
    """The ``ParallelPlan`` of one result row (a dict with the plan columns of ``SearchResult.plans``; an axis
    missing, null or at its control's ``none_as`` takes ``ParallelPlan``'s default: a recomputed-layer count of
    0 is every layer)."""
    values = {a.name: a.plan_value(row.get(a.name)) for a in PLAN_AXES}
    return ParallelPlan(**{k: v for k, v in values.items() if v is not None})


def estimator(backend: str, calibration: Calibration) -> Callable[..., Estimate]:
    """A function (model, cluster, workload, plan) -> Estimate for ``backend``; the analytic one uses
    ``calibration`` (the screen's), any other comes from the registry with its own defaults."""
    if backend == "analytic":
        from workbench.estimate.analytic import estimate_plan

        return lambda model, cluster, workload, plan: estimate_plan(
            model, cluster, workload, plan, calibration=calibration
        )
    from workbench.estimate.registry import get_backend

    impl = get_backend(backend)
    why = impl.unavailable_reason()
    if why:
        raise ValueError(f"backend {backend!r} is unavailable: {why}")
    return impl.estimate


def refine_rows(
    model: ModelSpec,
    clusters: dict[int, ClusterSpec],
    workload: Workload,
    rows: Sequence[dict[str, Any]],
    estimate: Callable[..., Estimate],
    progress: Callable[[int], None] | None = None,
) -> list[Estimate]:
    """Estimate every row's plan on the cluster of its device count (``clusters`` keyed by num_devices)."""
    out = []
    for i, row in enumerate(rows):
        out.append(estimate(model, clusters[int(row["num_devices"])], workload, plan_from_row(row)))
        if progress is not None:
            progress(i + 1)
    return out


def bottleneck(row: dict[str, Any]) -> str:
    """The largest part of the step after compute with its share, e.g. ``bubble 12%``; ``compute`` when
    every other part is under 5% of the step."""
    step = float(row["step_time_s"])
    parts = {k: float(row[k]) for k in BREAKDOWN_LABELS if k != "compute_s"}
    key = max(parts, key=lambda k: parts[k])
    if step <= 0 or parts[key] < 0.05 * step:
        return "compute"
    return f"{BREAKDOWN_LABELS[key]} {parts[key] / step:.0%}"


def _plan_diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = ("num_devices", *PLAN_FIELDS)
    short = {
        "micro_batch_size": "mbs",
        "zero_stage": "zero",
        "sequence_parallel": "sp",
        "num_devices": "devices",
    }
    diffs = [
        f"{short.get(k, k)} {a[k]} vs {b[k]}"
        for k in keys
        if a[k] != b[k] and not (k == "schedule" and a["pp"] == 1 and b["pp"] == 1)
    ]
    return ", ".join(diffs) or "same layout"


def explain_win(
    top: dict[str, Any], runner: dict[str, Any], objective_column: str, *, runner_label: str = "#2"
) -> str:
    """One line: why ``top`` (#1) beats ``runner`` (``runner_label``): the step-time part that differs most,
    and the plan change."""
    a, b = float(top[objective_column]), float(runner[objective_column])
    margin = abs(a - b) / max(abs(b), 1e-30)
    diffs = {k: float(runner[k]) - float(top[k]) for k in BREAKDOWN_LABELS}
    gain = max(diffs, key=lambda k: diffs[k])
    loss = min(diffs, key=lambda k: diffs[k])
    pct = f"{margin:.2%}" if margin < 0.01 else f"{margin:.1%}"
    text = (
        f"#1 beats {runner_label} by {pct} on {objective_column} ({_plan_diff(top, runner)}): "
        f"{diffs[gain] * 1e3:.0f} ms less {BREAKDOWN_LABELS[gain]} per step"
    )
    if diffs[loss] < 0:
        text += f", for {-diffs[loss] * 1e3:.0f} ms more {BREAKDOWN_LABELS[loss]}"
    if diffs[gain] <= 0:
        text = f"#1 beats {runner_label} by {pct} on {objective_column} ({_plan_diff(top, runner)})"
    return text + "."
