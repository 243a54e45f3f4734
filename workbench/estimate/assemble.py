"""One ``Estimate`` assembly for every backend: ``PlanCosts`` -> schedule simulation -> ``Estimate``.

A backend prices a plan's pieces (``PlanCosts``: per-stage action times, per-rank compute and exposed
communication by kind, the step-level data-parallel reduction and optimizer step, per-rank memory parts);
this module simulates the schedule and derives everything else in one place:

- step time = simulated makespan (compute and exposed tp/cp/ep/ZeRO-3 communication inside each action,
  pipeline sends between stages) + exposed data-parallel reduction + the optimizer step;
- the breakdown on the critical rank (the busiest one): its compute and exposed communication by kind; its
  idle time split into pipeline sends (at most 2(p*v - 1) of them on the critical path) and the bubble; and
  the communication hidden behind compute by kind (for pp: the transfers the rank receives, less the exposed
  ones);
- tokens/s, MFU, HFU and the bubble fraction from :mod:`workbench.estimate.metrics`;
- memory per pipeline rank: the static parts plus the simulated peak of stored activations
  (:func:`workbench.cost.step.memory_columns`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from workbench.cost.step import memory_columns
from workbench.estimate.metrics import bubble_fraction, throughput
from workbench.pipeline.simulate import StageCosts, simulate
from workbench.specs.estimate import MEMORY_COLUMNS, TIMELINE_COLUMNS, Estimate, StepBreakdown

if TYPE_CHECKING:
    from workbench.pipeline.schedules import Schedule
    from workbench.pipeline.simulate import SimResult
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan, Workload

COMM_KINDS = ("tp", "cp", "ep", "fsdp", "vocab", "pp")
"""Exposed communication folded into the pipeline's actions, by kind (fsdp: ZeRO-3 per-layer traffic; vocab:
the pipeline-group collectives of vocabulary parallelism; pp: blocking pipeline sends, ``step.pp_blocking_s``;
the last two reported with the pipeline's communication)."""

MEMORY_PARTS = (
    "parameters_bytes",
    "gradients_bytes",
    "optimizer_states_bytes",
    "buffers_bytes",
    "activation_extra_bytes",
)


@dataclass(frozen=True, kw_only=True)
class PlanCosts:
    """What a backend provides for one plan. Per-rank arrays have length pp, per micro-batch unless said."""

    schedule: Schedule
    stages: StageCosts
    """The simulator's input: per-stage F, I, W (exposed communication folded in), pipeline hop, activations."""
    rank_compute_s: np.ndarray
    """F + I + W compute (no communication) per rank."""
    rank_comm_s: dict[str, np.ndarray]
    """Exposed communication per rank by kind (``COMM_KINDS``), already inside ``stages``."""
    dp_comm_s: float
    """Exposed data-parallel reduction after the pipeline flush, per step."""
    rank_hidden_s: dict[str, np.ndarray] = field(default_factory=dict)
    """Communication hidden behind compute per rank by kind (``COMM_KINDS``), per micro-batch."""
    dp_hidden_s: float = 0.0
    """Data-parallel reduction and weight gathers hidden behind compute, per step."""
    optimizer_s: float
    """The optimizer step, per step."""
    rank_memory: dict[str, np.ndarray]
    """Per rank, bytes per device: ``MEMORY_PARTS`` (see :func:`workbench.cost.step.static_memory`)."""
    overhead_bytes: float = 0.0
    """Framework overhead per device (CUDA context, workspaces)."""
    fragmentation_frac: float = 0.0
    """Allocator fragmentation as a share of the counted memory."""
    tiled: bool = False
    """Consecutive steps overlap (``FrameworkProfile.optimizer_post_validation`` with a schedule that
    ``tiles_across_steps``): the pipeline's period is its longest rank span, not its makespan."""
    notes: tuple[str, ...] = field(default=())


def pipeline_period_s(sim: SimResult, *, tiled: bool) -> float:
    """Seconds the pipeline adds to every step: the makespan, or with ``tiled`` the longest rank span (the next
    step's warm-up runs in this one's cool-down; ``workbench.pipeline.bubble.tile_s`` is its closed form)."""
    return max(sim.span_s) if tiled else sim.makespan_s


@dataclass(frozen=True, kw_only=True)
class StepAssembly:
    """A ``PlanCosts`` simulated and totalled: every part of an ``Estimate`` that needs neither the model's FLOPs
    nor the devices' peak (``assemble`` adds those for one cluster; a plan over pools of different devices adds
    its own, :mod:`workbench.estimate.mixed`). Times in seconds per step."""

    step_time_s: float
    """The pipeline's period (``pipeline_period_s``) + the exposed data-parallel reduction + the optimizer step."""
    pipeline_s: float
    """The pipeline's period alone."""
    breakdown: StepBreakdown
    bubble_fraction: float
    """The critical rank's idle time, pipeline sends excluded, over ``step_time_s`` (``metrics.bubble_fraction``)."""
    memory: pl.DataFrame
    """``workbench.specs.estimate.MEMORY_COLUMNS`` per pipeline rank, with total_bytes."""
    timeline: pl.DataFrame
    """``TIMELINE_COLUMNS``: the simulated actions and the pipeline sends (op ``comm``)."""
    activation_timeline: pl.DataFrame
    notes: tuple[str, ...]


def assemble_step(costs: PlanCosts) -> StepAssembly:
    """Simulate ``costs.schedule`` on ``costs.stages`` and total the step (see the module docstring)."""
    sim = simulate(costs.schedule, costs.stages)
    breakdown = _breakdown(sim, costs, costs.schedule.num_microbatches)
    period = pipeline_period_s(sim, tiled=costs.tiled)
    step = period + costs.dp_comm_s + costs.optimizer_s
    return StepAssembly(
        step_time_s=step,
        pipeline_s=period,
        breakdown=breakdown,
        bubble_fraction=float(bubble_fraction(breakdown.bubble_s, step)),
        memory=_memory(costs, sim),
        timeline=_timeline(sim),
        activation_timeline=sim.inflight.select("rank", "time_s", "activation_bytes"),
        notes=costs.notes + _overlap_note(sim, costs.tiled),
    )


def assemble(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    plan: ParallelPlan,
    costs: PlanCosts,
    *,
    backend: str,
) -> Estimate:
    """The ``Estimate`` of ``plan`` on ``cluster``: ``assemble_step`` of ``costs`` and the throughput figures
    (:func:`workbench.estimate.metrics.throughput` over the plan's devices and the device's dense peak)."""
    from workbench.cost.memory import RECOMPUTE_CODES
    from workbench.cost.step import plan_columns, recompute_share

    step = assemble_step(costs)
    figures = throughput(
        model,
        workload,
        step_time_s=step.step_time_s,
        num_devices=plan.num_devices,
        peak_flop_per_s=cluster.device.peak(workload.dtype),
        recompute_code=RECOMPUTE_CODES[plan.recompute.value],
        recompute_share=float(recompute_share(model, plan_columns(plan, workload))),
    )
    return Estimate(
        backend=backend,
        model=model,
        cluster=cluster,
        workload=workload,
        plan=plan,
        step_time_s=step.step_time_s,
        tokens_per_s=float(figures["tokens_per_s"]),
        mfu=float(figures["mfu"]),
        hfu=float(figures["hfu"]),
        model_flop_per_s_per_device=float(figures["model_flop_per_s_per_device"]),
        bubble_fraction=step.bubble_fraction,
        breakdown=step.breakdown,
        memory=step.memory,
        memory_capacity_bytes=cluster.device.hbm_bytes,
        timeline=step.timeline,
        activation_timeline=step.activation_timeline,
        notes=step.notes,
    )


def _overlap_note(sim: SimResult, tiled: bool) -> tuple[str, ...]:
    """What the timeline cannot show when consecutive steps overlap: its drawn makespan is longer than the
    step."""
    period = pipeline_period_s(sim, tiled=tiled)
    if not tiled or period >= sim.makespan_s:
        return ()
    return (
        f"steps overlap (optimizer post-validation): the next step's warm-up runs in this one's cool-down, so "
        f"the pipeline adds its longest rank span, {period:.4g} s, not the {sim.makespan_s:.4g} s the timeline "
        "draws",
    )


def critical_rank(sim: SimResult) -> int:
    """The busiest pipeline rank, whose parts the breakdown reports."""
    return int(np.argmax(sim.busy_s))


def _breakdown(sim: SimResult, costs: PlanCosts, m: int) -> StepBreakdown:
    r = critical_rank(sim)
    idle = max(pipeline_period_s(sim, tiled=costs.tiled) - sim.busy_s[r], 0.0)
    pp_exposed = min(idle, 2 * (sim.schedule.num_stages - 1) * costs.stages.p2p_s)
    comm = {k: float(v[r]) * m for k, v in costs.rank_comm_s.items()}
    hidden = {k: float(v[r]) * m for k, v in costs.rank_hidden_s.items()}
    received = sim.comm.filter(pl.col("dst_rank") == r) if sim.comm.height else sim.comm
    sends = float((received["end_s"] - received["start_s"]).sum()) if received.height else 0.0
    return StepBreakdown(
        compute_s=float(costs.rank_compute_s[r]) * m,
        exposed_tp_comm_s=comm.get("tp", 0.0),
        exposed_cp_comm_s=comm.get("cp", 0.0),
        exposed_ep_comm_s=comm.get("ep", 0.0),
        exposed_pp_comm_s=pp_exposed + comm.get("vocab", 0.0) + comm.get("pp", 0.0),
        exposed_dp_comm_s=comm.get("fsdp", 0.0) + costs.dp_comm_s,
        bubble_s=idle - pp_exposed,
        optimizer_s=costs.optimizer_s,
        overlapped_tp_comm_s=hidden.get("tp", 0.0),
        overlapped_cp_comm_s=hidden.get("cp", 0.0),
        overlapped_ep_comm_s=hidden.get("ep", 0.0),
        overlapped_pp_comm_s=max(sends - pp_exposed, 0.0),
        overlapped_dp_comm_s=hidden.get("fsdp", 0.0) + costs.dp_hidden_s,
    )


def _memory(costs: PlanCosts, sim: SimResult) -> pl.DataFrame:
    cols = memory_columns(
        costs.rank_memory,
        np.asarray(sim.peak_activation_bytes_per_rank, dtype=float),
        overhead_bytes=costs.overhead_bytes,
        fragmentation_frac=costs.fragmentation_frac,
    )
    pp = sim.schedule.pp
    frame = pl.DataFrame(
        {
            "rank": np.arange(pp),
            **{k: np.broadcast_to(np.asarray(cols[k], dtype=float), pp) for k in MEMORY_COLUMNS},
        }
    )
    return frame.with_columns(total_bytes=pl.sum_horizontal(list(MEMORY_COLUMNS)))


def _timeline(sim: SimResult) -> pl.DataFrame:
    tl = sim.timeline.select(TIMELINE_COLUMNS)
    if sim.comm.height == 0:
        return tl
    chunk = {s: sim.schedule.chunk_of_stage(s) for s in range(sim.schedule.num_stages)}
    comm = sim.comm.select(
        pl.col("dst_rank").alias("rank"),
        "stage",
        pl.col("stage").replace_strict(chunk, return_dtype=pl.Int64).alias("chunk"),
        "microbatch",
        pl.lit("comm").alias("op"),
        "start_s",
        "end_s",
    )
    return pl.concat([tl, comm.cast(tl.schema)])
