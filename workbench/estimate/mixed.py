"""Plans over the pools of a ``MixedCluster`` and what they cost (``MixedEstimate``), assembled here.

Two layouts, after the heterogeneous-training papers:

- ``PipelinePlan``: one pipeline whose stages run on different pools (Zorse, HexiScale, Metis: asymmetric
  pipeline stages), each pool with its own tensor-parallel degree and its stages sized to its speed and memory;
  ``dp`` replicas of the whole pipeline, each stage's replicas inside its pool;
- ``SplitPlan``: every pool runs whole replicas with its own homogeneous plan and a share of the global batch
  in proportion to its speed (Cephalo's batch balancing); the gradients are averaged across pools over the
  shared level, and the step waits for the slowest pool (the straggler).

``pipeline_estimate`` assembles a pipeline across pools as every plan is assembled: its ``PlanCosts`` (each
pool's stages priced by its own step model, the hop table between pools) through
:func:`workbench.estimate.assemble.assemble_step`, then the throughput over every device of every pool.
``split_estimate`` assembles a split batch from each pool's own ``Estimate``. The search over both layouts is
:mod:`workbench.search.mixed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from workbench.cost.memory import RECOMPUTE_CODES
from workbench.estimate.assemble import assemble_step
from workbench.estimate.metrics import throughput

if TYPE_CHECKING:
    from workbench.estimate.assemble import PlanCosts
    from workbench.specs.estimate import Estimate
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan, Workload
    from workbench.specs.pools import MixedCluster

STAGE_COLUMNS: tuple[str, ...] = (
    "stage",
    "pool",
    "device",
    "tp",
    "first_layer",
    "layers",
    "embedding",
    "head",
    "forward_s",
    "backward_s",
    "memory_bytes",
    "usable_bytes",
)
"""``MixedEstimate.stages``: one row per pipeline stage (for a ``SplitPlan``: each pool's stages). stage (int,
0-based in the pipeline), pool (label), device (preset id), tp (int), first_layer and layers (decoder layers,
int), embedding and head (bool), forward_s and backward_s (one micro-batch, communication folded in, s),
memory_bytes (the stage's rank at its peak), usable_bytes ((1 - headroom) x HBM)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolStages:
    """A run of consecutive pipeline stages on one pool."""

    pool: int
    """Index of the pool in ``MixedCluster.pools``."""
    tp: int
    """Tensor-parallel degree of these stages (inside the pool's nodes)."""
    layers: tuple[int, ...]
    """Decoder layers of each stage, in pipeline order (each >= 1)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelinePlan:
    """One pipeline across pools (see the module docstring). The first stage holds the embedding, the last the
    LM head; ``dp`` x (stages of pool k) x (tp of pool k) = devices of pool k."""

    segments: tuple[PoolStages, ...]
    """The pools' runs of stages in pipeline order."""
    dp: int
    micro_batch_size: int
    zero_stage: int
    recompute: str
    schedule: str

    @property
    def pp(self) -> int:
        return sum(len(s.layers) for s in self.segments)

    def describe(self, cluster: MixedCluster) -> str:
        """``dp1 mbs1 zero0 1f1b | h100 tp8 x4 [16 17 17 16] | a100 tp8 x4 [4 4 3 3]``."""
        head = f"dp{self.dp} mbs{self.micro_batch_size} zero{self.zero_stage}"
        head += f" rc-{self.recompute}" if self.recompute != "none" else ""
        parts = [
            f"{cluster.labels[s.pool]} tp{s.tp} x{len(s.layers)} [{' '.join(map(str, s.layers))}]"
            for s in self.segments
        ]
        return " | ".join([f"{head} {self.schedule}", *parts])


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolShare:
    """One pool of a ``SplitPlan``: its homogeneous plan and its share of the global batch."""

    pool: int
    plan: ParallelPlan
    global_batch_size: int
    """Sequences of each step this pool processes."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SplitPlan:
    """Whole replicas on every pool, the batch split by speed (see the module docstring)."""

    shares: tuple[PoolShare, ...]

    def describe(self, cluster: MixedCluster) -> str:
        """``h100 176 seq: dp1 tp8 pp4 ... | a100 80 seq: dp1 tp8 pp4 ...``."""
        return " | ".join(
            f"{cluster.labels[s.pool]} {s.global_batch_size} seq: {s.plan.describe()}" for s in self.shares
        )


@dataclass(frozen=True, kw_only=True)
class MixedEstimate:
    """What one plan over pools costs. Times in seconds, per optimizer step."""

    kind: str
    """``pipeline`` (a ``PipelinePlan``) or ``split`` (a ``SplitPlan``)."""
    plan: PipelinePlan | SplitPlan
    description: str
    step_time_s: float
    tokens_per_s: float
    mfu: float
    """PaLM model FLOPs per second over the summed dense peaks of every device used."""
    parts: dict[str, float]
    """The step's parts: ``pipeline_s`` (the simulated schedule, or the straggler pool's step for ``split``),
    ``dp_comm_s`` (exposed reduction inside the pools), ``cross_pool_s`` (exposed traffic on the shared level:
    the gradient exchange of ``split``; for ``pipeline`` the hops between pools, already inside pipeline_s),
    ``optimizer_s``."""
    stages: pl.DataFrame
    """Which pool runs what: ``STAGE_COLUMNS``."""
    timeline: pl.DataFrame
    """``workbench.specs.estimate.TIMELINE_COLUMNS``: the simulated pipeline (``split``: the straggler pool's)."""
    bubble_fraction: float = 0.0
    estimates: tuple[Estimate, ...] = field(default=())
    """``split``: each pool's own ``Estimate`` (the homogeneous path), in ``plan.shares`` order."""
    fits: bool = True
    notes: tuple[str, ...] = field(default=())

    def summary(self) -> dict[str, Any]:
        """Plain JSON: the plan, its step, tokens/s, MFU, fit, bubble, parts and stages (one of ``plan --json``'s
        ``plans`` on a mixed cluster)."""
        return {
            "kind": self.kind,
            "plan": self.description,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "fits": self.fits,
            "bubble_fraction": self.bubble_fraction,
            "parts": self.parts,
            "stages": self.stages.to_dicts(),
        }

    def table(self) -> pl.DataFrame:
        """The pool table: which pool runs what, ``STAGE_COLUMNS``."""
        return self.stages


CROSS_POOL_NOTE = "cross_pool_s: one hop between pools per micro-batch and direction, inside pipeline_s"


def mixed_throughput(
    model: ModelSpec, mixed: MixedCluster, workload: Workload, step_time_s: float, recompute_code: int
) -> dict[str, Any]:
    """``metrics.throughput`` of a step over every device of every pool: MFU over the summed dense peaks."""
    used = mixed.num_devices
    peak = sum(p.num_devices * p.device.peak(workload.dtype) for p in mixed.pools) / used
    return throughput(
        model, workload, step_time_s=step_time_s, num_devices=used, peak_flop_per_s=peak,
        recompute_code=recompute_code,
    )  # fmt: skip


def pipeline_estimate(
    model: ModelSpec,
    mixed: MixedCluster,
    workload: Workload,
    plan: PipelinePlan,
    costs: PlanCosts,
    *,
    stages: pl.DataFrame,
    cross_pool_s: float,
) -> MixedEstimate:
    """The ``MixedEstimate`` of a pipeline across pools: ``assemble_step`` of ``costs`` (one rank per stage) and
    ``mixed_throughput``. ``stages``: the ``STAGE_COLUMNS`` but memory_bytes, which comes from the assembly's
    memory table (the simulated peak of each rank). ``cross_pool_s``: the hops between pools of one micro-batch,
    inside the pipeline's time."""
    step = assemble_step(costs)
    figures = mixed_throughput(model, mixed, workload, step.step_time_s, RECOMPUTE_CODES[plan.recompute])
    table = stages.with_columns(memory_bytes=step.memory.sort("rank")["total_bytes"]).select(STAGE_COLUMNS)
    return MixedEstimate(
        kind="pipeline",
        plan=plan,
        description=plan.describe(mixed),
        step_time_s=step.step_time_s,
        tokens_per_s=float(figures["tokens_per_s"]),
        mfu=float(figures["mfu"]),
        parts={
            "pipeline_s": step.pipeline_s,
            "dp_comm_s": costs.dp_comm_s,
            "cross_pool_s": cross_pool_s,
            "optimizer_s": costs.optimizer_s,
        },
        stages=table,
        timeline=step.timeline,
        bubble_fraction=step.bubble_fraction,
        fits=bool((table["memory_bytes"] <= table["usable_bytes"]).all()),
        notes=(CROSS_POOL_NOTE, *step.notes),
    )


def split_estimate(
    model: ModelSpec,
    mixed: MixedCluster,
    workload: Workload,
    plan: SplitPlan,
    estimates: list[Estimate],
    *,
    stages: pl.DataFrame,
    cross_pool_s: float,
) -> MixedEstimate:
    """The ``MixedEstimate`` of a split batch: each pool's ``Estimate`` on its share (in ``plan.shares`` order)
    run side by side, the step the slowest pool's (the straggler) plus the exposed gradient exchange across pools
    ``cross_pool_s``; ``stages``: each pool's ranks (``STAGE_COLUMNS``)."""
    slowest = int(np.argmax([e.step_time_s for e in estimates]))
    straggler = estimates[slowest]
    step_s = straggler.step_time_s + cross_pool_s
    figures = mixed_throughput(model, mixed, workload, step_s, 0)
    bd = straggler.breakdown
    return MixedEstimate(
        kind="split",
        plan=plan,
        description=plan.describe(mixed),
        step_time_s=step_s,
        tokens_per_s=float(figures["tokens_per_s"]),
        mfu=float(figures["mfu"]),
        parts={
            "pipeline_s": straggler.step_time_s - bd.exposed_dp_comm_s - bd.optimizer_s,
            "dp_comm_s": bd.exposed_dp_comm_s,
            "cross_pool_s": cross_pool_s,
            "optimizer_s": bd.optimizer_s,
        },
        stages=stages,
        timeline=straggler.timeline,
        bubble_fraction=straggler.bubble_fraction,
        estimates=tuple(estimates),
        notes=(
            f"straggler: {mixed.labels[slowest]} ({straggler.step_time_s:.3f} s of its share)",
            "mfu: model FLOPs over the summed dense peaks of every device",
        ),
    )
