"""The ``analytic`` backend: roofline op costs + NCCL-model collectives + the schedule simulator.

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
    """Analytic cost model. ``calibration``: a Calibration, or the fitted constants by file name under
    ``profiles/calibration/`` or path (default ``default``; ``neutral`` gives plain roofline + collectives
    without fitted constants); ``framework``: the framework profile id or path (default: the generic
    profile); ``kernels``: a kernel table file or ``workbench microbench`` folder replacing the published
    table of its device."""

    name = "analytic"

    def __init__(
        self,
        calibration: Calibration | str = "default",
        framework: str | None = None,
        kernels: str | None = None,
    ) -> None:
        if isinstance(calibration, Calibration):
            self.calibration = calibration.with_framework(framework) if framework else calibration
        else:
            from workbench.presets.frameworks import DEFAULT_FRAMEWORK

            self.calibration = load_calibration(
                calibration, framework=framework or DEFAULT_FRAMEWORK, kernels=kernels
            )

    def unavailable_reason(self) -> str | None:
        return None

    def estimate(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
    ) -> Estimate:
        """Cost one plan; ValueError naming every violated rule for an infeasible plan."""
        return estimate_plan(model, cluster, workload, plan, calibration=self.calibration, backend=self.name)
