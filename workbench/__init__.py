"""Parallelism planning workbench: the pure core (specs, costs, schedules, simulation, search).

Imports neither torch nor any UI library; ``import workbench`` stays light.
"""

from workbench.specs.estimate import Backend, Estimate, StepBreakdown
from workbench.specs.hardware import ClusterSpec, DeviceSpec, DType, NetworkLevel
from workbench.specs.model import AttentionKind, ModelSpec
from workbench.specs.plan import Axis, Optimizer, ParallelPlan, Recompute, Workload

__all__ = [
    "AttentionKind",
    "Axis",
    "Backend",
    "ClusterSpec",
    "DType",
    "DeviceSpec",
    "Estimate",
    "ModelSpec",
    "NetworkLevel",
    "Optimizer",
    "ParallelPlan",
    "Recompute",
    "StepBreakdown",
    "Workload",
]
__version__ = "0.1.0"
