"""The ``analytic`` backend: roofline op costs + alpha-beta collectives + the schedule simulator.

A thin adapter over :func:`workbench.estimate.analytic.estimate_plan` so that the core stays importable without
any backend; registered under the ``workbench.backends`` entry-point group as ``analytic``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import Calibration, load_calibration

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan, Workload


class AnalyticBackend:
    """Analytic cost model. ``calibration``: a Calibration, a file name under ``profiles/calibration/`` or a
    path (default ``default``; ``neutral`` gives plain roofline + alpha-beta without fitted overlaps)."""

    name = "analytic"

    def __init__(self, calibration: Calibration | str = "default") -> None:
        self.calibration = (
            calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
        )

    def unavailable_reason(self) -> str | None:
        return None

    def estimate(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
    ) -> Estimate:
        """Cost one plan; ValueError naming every violated rule for an infeasible plan."""
        return estimate_plan(model, cluster, workload, plan, calibration=self.calibration, backend=self.name)
