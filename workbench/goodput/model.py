"""Goodput of a plan: failures, checkpoints, restarts, spares and elastic dp, vectorised over plans.

``goodput_columns`` prices many plans at once (numpy arrays over the planner's screened plans; every formula
broadcasts, nothing loops per plan); ``estimate_goodput`` prices one ``Estimate`` and returns a frozen
``GoodputEstimate``. The pieces:

- MTBF ``M`` of the job: :mod:`workbench.goodput.failures` from its devices and nodes.
- Checkpoint size, write, staging, read and reshard times: :mod:`workbench.goodput.checkpoint`.
- Stall ``delta`` and durability lag ``W``: sync ``delta = write, W = 0``; async ``delta = staging, W = write``.
- Restart ``R = restart_s + read`` (+ ``W``), failure-prone (Daly's ``R``).
- Node replacement: a failure of a cause with ``replace_node`` needs a healthy node. With ``S`` hot spares the
  failed node is swapped at once; the nodes in repair form an M/G/inf queue, so a failure finds every spare busy
  with probability ``P(Poisson(lambda_h * repair_s) >= S)`` (``lambda_h`` the job's replace-needing rate;
  Erlang's loss reasoning for a repair shop). Then the ``wait`` policy adds the downtime ``D = repair_s``; the
  ``shrink`` policy (elastic dp, ElasWave, arXiv:2510.00606) runs on with the surviving dp replicas until the
  repair, losing the failed replicas' share ``f`` of throughput: an equivalent downtime ``f * repair_s`` plus a
  reshard and a second restart to grow back (Universal Checkpointing, arXiv:2406.18820, for the reshard).
  ``f = min(1, ceil(devices_per_node / (tp*cp*pp)) / dp)``: a node holds one model-parallel slice of one
  replica when a replica spans nodes, else ``devices_per_node / (tp*cp*pp)`` whole replicas.
- Interval ``tau``: the optimum of :mod:`workbench.goodput.interval`, at least ``W`` (one write in flight) and
  at least one step, rounded to whole steps.
- Spares cost: ``S * devices_per_node`` devices idle for the whole wall time.

Known error: failures are assumed independent and exponential (real fleets show bursts and "lemon" nodes,
Kokolis et al. arXiv:2410.21680); planned maintenance is not in the presets' rates; async writes are assumed not
to slow training (DataStates-LLM measures a few percent of interference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from workbench.goodput import checkpoint as ck
from workbench.goodput.interval import goodput_frac, optimal_interval_s
from workbench.goodput.practice import CHECKPOINT_MODES as CHECKPOINT_MODES
from workbench.goodput.practice import ON_FAILURE as ON_FAILURE
from workbench.goodput.practice import GoodputOptions

if TYPE_CHECKING:
    from workbench.goodput.failures import FailureModel
    from workbench.specs.estimate import Estimate
    from workbench.specs.hardware import ClusterSpec, StorageSpec


def poisson_tail(mean: Any, k: Any) -> Any:
    """``P(N >= k)`` for ``N ~ Poisson(mean)`` (``mean`` and integer ``k`` broadcast); 1 for ``k = 0``."""
    mean = np.asarray(mean, dtype=np.float64)
    k = np.asarray(k)
    term = np.exp(-mean)
    below = np.zeros(np.broadcast(mean, k).shape)
    for i in range(int(np.max(k, initial=0))):
        below = below + np.where(i < k, term, 0.0)
        term = term * mean / (i + 1)
    return np.clip(1.0 - below, 0.0, 1.0)


def lost_replica_frac(dp: Any, tp: Any, cp: Any, pp: Any, devices_per_node: int) -> Any:
    """Share of the dp replicas one failed node takes out (module docstring), in (0, 1]."""
    per_replica = np.asarray(tp) * cp * pp
    lost = np.ceil(devices_per_node / per_replica)
    return np.minimum(lost / np.asarray(dp, dtype=np.float64), 1.0)


def goodput_columns(
    *,
    num_devices: Any,
    num_nodes: Any,
    devices_per_node: int,
    checkpoint_bytes: Any,
    step_time_s: Any,
    lost_frac: Any,
    failures: FailureModel,
    storage: StorageSpec | None,
    options: GoodputOptions,
) -> dict[str, Any]:
    """Goodput figures of many plans (numpy arrays or scalars, broadcast). Returns seconds (``mtbf_s``,
    ``checkpoint_write_s``, ``checkpoint_stall_s``, ``checkpoint_interval_s``, ``restart_s``,
    ``restore_s``, ``downtime_s`` per failure), ``checkpoint_interval_steps``, ``goodput_frac`` and
    ``spare_devices``. ``lost_frac``: ``lost_replica_frac`` of each plan (used by ``shrink``)."""
    st = storage or ck.DEFAULT_STORAGE
    mtbf = failures.mtbf_s(np.asarray(num_devices, dtype=np.float64), np.asarray(num_nodes, dtype=np.float64))
    write = ck.write_s(checkpoint_bytes, num_nodes, st)
    restore = ck.read_s(checkpoint_bytes, num_nodes, st)
    if options.checkpoint == "sync":
        stall, lag = write, 0.0 * write
    else:
        stall, lag = ck.staging_s(checkpoint_bytes, num_devices, st), write
    step = np.asarray(step_time_s, dtype=np.float64)
    tau = np.maximum(np.maximum(optimal_interval_s(stall, mtbf), lag), step)
    steps = np.maximum(np.round(tau / step), 1.0)
    tau = steps * step
    restart = failures.restart_s + restore + lag
    replace_frac = failures.rate_per_s(num_devices, num_nodes, replace_only=True) * mtbf
    spares = options.spares(num_nodes)
    busy = poisson_tail(replace_frac / mtbf * failures.repair_s, spares)
    if options.on_failure == "wait":
        waited = failures.repair_s + 0.0 * lost_frac
    else:
        regrow = failures.restart_s + ck.reshard_s(checkpoint_bytes, num_nodes, st)
        waited = lost_frac * failures.repair_s + regrow
    downtime = replace_frac * busy * waited
    return {
        "mtbf_s": mtbf,
        "checkpoint_write_s": write,
        "checkpoint_stall_s": stall,
        "checkpoint_interval_s": tau,
        "checkpoint_interval_steps": steps,
        "restart_s": restart,
        "restore_s": restore,
        "downtime_s": downtime,
        "goodput_frac": goodput_frac(tau, stall, mtbf, restart, downtime),
        "spare_devices": spares * devices_per_node + 0.0 * mtbf,
    }


def cluster_goodput_columns(
    cluster: ClusterSpec,
    *,
    dp: Any,
    tp: Any,
    cp: Any,
    pp: Any,
    checkpoint_bytes: Any,
    step_time_s: Any,
    failures: FailureModel,
    options: GoodputOptions,
) -> dict[str, Any]:
    """``goodput_columns`` of plans on ``cluster`` (its devices, nodes and storage), the degrees and step times
    of the plans as scalars or arrays (the lost share of replicas from ``lost_replica_frac``)."""
    return goodput_columns(
        num_devices=cluster.num_devices,
        num_nodes=cluster.num_nodes,
        devices_per_node=cluster.devices_per_node,
        checkpoint_bytes=checkpoint_bytes,
        step_time_s=step_time_s,
        lost_frac=lost_replica_frac(dp, tp, cp, pp, cluster.devices_per_node),
        failures=failures,
        storage=cluster.storage,
        options=options,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class GoodputEstimate:
    """Goodput of one plan: every figure of ``goodput_columns`` as a float, and the checkpoint's size."""

    failures_id: str
    checkpoint_mode: str
    spare_nodes: int
    on_failure: str
    mtbf_s: float
    """Mean time between interruptions of the whole job."""
    checkpoint_bytes: float
    checkpoint_write_s: float
    checkpoint_stall_s: float
    """Training time lost per checkpoint (the write when sync, the copy to host memory when async)."""
    checkpoint_interval_s: float
    """Compute between checkpoints (a whole number of steps)."""
    checkpoint_interval_steps: int
    restart_s: float
    """Failure-prone restart: restart overhead + checkpoint read (+ the async durability lag)."""
    restore_s: float
    downtime_s: float
    """Mean wait per failure for a repaired node (or the elastic equivalent)."""
    goodput_frac: float
    """Useful training time over wall time."""
    spare_devices: int

    def summary(self) -> dict[str, Any]:
        """Plain-JSON object (the ``goodput`` key of ``workbench estimate --json``)."""
        return {k: getattr(self, k) for k in self.__slots__}

    @property
    def notes(self) -> tuple[str, ...]:
        """None: the assumptions are the failure preset's (``workbench.specs.estimate.Result``)."""
        return ()

    def table(self) -> pl.DataFrame:
        """``summary`` as one row."""
        return pl.DataFrame([self.summary()])


def estimate_goodput(
    est: Estimate, failures: FailureModel, options: GoodputOptions | None = None
) -> GoodputEstimate:
    """Goodput of ``est``'s plan on its cluster under ``failures`` (checkpoint size from its memory table,
    ``workbench.goodput.checkpoint.checkpoint_bytes``; storage from ``est.cluster.storage`` or the defaults),
    with ``options`` or else the preset's own practice (``failures.practice``)."""
    options = options or failures.practice
    p = est.plan
    size = ck.checkpoint_bytes(est).total_bytes
    cols = cluster_goodput_columns(
        est.cluster,
        dp=p.dp,
        tp=p.tp,
        cp=p.cp,
        pp=p.pp,
        checkpoint_bytes=size,
        step_time_s=est.step_time_s,
        failures=failures,
        options=options,
    )
    values = {k: float(v) for k, v in cols.items()}
    return GoodputEstimate(
        failures_id=failures.id,
        checkpoint_mode=options.checkpoint,
        spare_nodes=int(options.spares(est.cluster.num_nodes)),
        on_failure=options.on_failure,
        checkpoint_bytes=size,
        **{k: v for k, v in values.items() if k not in ("checkpoint_interval_steps", "spare_devices")},
        checkpoint_interval_steps=int(values["checkpoint_interval_steps"]),
        spare_devices=int(values["spare_devices"]),
    )


def run_totals(
    time_to_train_s: Any, num_devices: Any, goodput: Any, spare_devices: Any = 0
) -> dict[str, Any]:
    """Wall time and device-hours of a run whose failure-free time is ``time_to_train_s``:
    ``goodput_time_to_train_s = time / goodput`` and ``goodput_device_hours`` counting the spares too."""
    wall = np.asarray(time_to_train_s) / goodput
    return {
        "goodput_time_to_train_s": wall,
        "goodput_device_hours": wall * (np.asarray(num_devices) + spare_devices) / 3600.0,
    }
