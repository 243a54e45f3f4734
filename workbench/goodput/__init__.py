"""Goodput: failures, checkpoints and restarts in the time and the cost of a training run.

- :mod:`~workbench.goodput.failures`: interruption rates by cause (presets in ``profiles/failures/``), job MTBF;
- :mod:`~workbench.goodput.checkpoint`: checkpoint bytes of a plan, write/stage/read/reshard times on the storage path;
- :mod:`~workbench.goodput.interval`: Young/Daly/exact checkpoint interval, Daly's expected wall time, goodput;
- :mod:`~workbench.goodput.model`: the whole model, vectorised over plans (``goodput_columns``) or for one
  ``Estimate`` (``estimate_goodput``), with hot spares and elastic dp;
- :mod:`~workbench.goodput.simulate`: a Monte-Carlo simulation of the same process (checks the closed form).
"""

from workbench.goodput.checkpoint import DEFAULT_STORAGE, CheckpointSize, checkpoint_bytes, state_bytes
from workbench.goodput.failures import FailureCause, FailureModel, failure_preset_names, load_failures
from workbench.goodput.interval import (
    daly_interval_s,
    goodput_frac,
    optimal_interval_s,
    segment_wall_s,
    young_interval_s,
)
from workbench.goodput.model import (
    GoodputEstimate,
    GoodputOptions,
    cluster_goodput_columns,
    estimate_goodput,
    goodput_columns,
    lost_replica_frac,
    run_totals,
)
from workbench.goodput.simulate import SimulatedRun, simulate_run

__all__ = [
    "DEFAULT_STORAGE",
    "CheckpointSize",
    "FailureCause",
    "FailureModel",
    "GoodputEstimate",
    "GoodputOptions",
    "SimulatedRun",
    "checkpoint_bytes",
    "cluster_goodput_columns",
    "daly_interval_s",
    "estimate_goodput",
    "failure_preset_names",
    "goodput_columns",
    "goodput_frac",
    "load_failures",
    "lost_replica_frac",
    "optimal_interval_s",
    "run_totals",
    "segment_wall_s",
    "simulate_run",
    "state_bytes",
    "young_interval_s",
]
