"""The measured ``Estimate`` of a real run: per-rank results (``RunResult``) to timeline, memory and breakdown.

``workbench_backends.real_run.real_run`` collects one ``rank<k>.json`` per worker (``workbench_backends.run_worker``) into a
``RunResult``; ``to_estimate`` assembles it with the conventions every backend shares (a measured run is not
simulated, so :func:`workbench.estimate.assemble.assemble` does not apply, but its figures are defined alike):

- ``step_time_s``: the median step's time (the steps after ``warmup_steps``, each the slowest rank's barrier to
  end of the optimizer step; the lower middle one for an even count), so that the step time, the timeline and
  the breakdown describe one step; the spread (min..max) is in the notes;
- ``timeline``: the actions of the median step on the ranks with dp = tp = 0 (``rank`` is the pipeline rank;
  ops F, B, I, W and ``wait``; seconds from the step's barrier);
- the breakdown on the critical rank (the pipeline rank with the most compute in that step): ``compute_s`` its
  compute actions, ``bubble_s`` its idle time inside the pipeline's span (first compute start to last compute
  end over the ranks; waits on pipeline sends included: a measurement does not separate them), ``optimizer_s``
  the measured optimizer step, ``exposed_dp_comm_s`` the rest of the step (outside the pipeline's span and the
  optimizer: the gradient reduction left after the last backward, the step's barrier and runtime overhead).
  The parts add up to ``step_time_s``: each rank times from its own barrier exit, so where the span and the
  slowest optimizer overrun the step, the later parts are cut to what the step leaves;
- tokens/s, MFU, HFU (with the plan's recompute) and ``bubble_fraction`` (= bubble_s / step_time_s) from
  :mod:`workbench.estimate.metrics`, the one definition of each;
- ``memory`` (the columns mean what they mean for every backend): parameters, gradients and optimizer states
  counted from the live tensors; ``other_bytes`` the measured peak (CUDA allocator; on CPU the RSS
  high-water mark minus the RSS before the model was built) minus those three, i.e. activations, buffers and
  allocator and framework overhead together (a measured peak does not split them); ``activations_bytes`` and
  ``buffers_bytes`` 0. ``total_bytes`` is the measured peak (or the counted states where they exceed it).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from workbench.cost.memory import RECOMPUTE_CODES
from workbench.cost.step import plan_columns, recompute_share
from workbench.estimate import metrics
from workbench.pipeline.schedules import Schedule
from workbench.specs.estimate import MEMORY_COLUMNS, TIMELINE_COLUMNS, Estimate, StepBreakdown
from workbench.specs.hardware import ClusterSpec, DType
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Recompute, Workload

COMPUTE_OPS = ("F", "B", "I", "W")


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """What a real run produced: the per-rank results (``rank<k>.json``) and where they are."""

    run_dir: Path
    ranks: list[dict[str, Any]]
    """Per global rank: coords, stages, expected_order, steps (step_time_s, actions, loss), memory."""
    schedule: Schedule
    warmup_steps: int
    wall_s: float
    reference_losses: list[float] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def losses(self) -> list[float]:
        """Per step, the training loss averaged over data-parallel replicas (from the last-stage ranks)."""
        last = self.schedule.stage_to_rank[self.schedule.num_stages - 1]
        rows = [r for r in self.ranks if r["coords"].get("pp", 0) == last and r["coords"].get("tp", 0) == 0]
        return [statistics.fmean(r["steps"][i]["loss"] for r in rows) for i in range(len(rows[0]["steps"]))]

    def step_times_s(self) -> list[float]:
        """Per measured step (after warm-up), the slowest rank's step time."""
        num = len(self.ranks[0]["steps"])
        return [max(r["steps"][i]["step_time_s"] for r in self.ranks) for i in range(self.warmup_steps, num)]

    def median_step(self) -> int:
        """Index of the measured step whose time is the median (the lower one for an even count)."""
        times = self.step_times_s()
        order = sorted(range(len(times)), key=times.__getitem__)
        return self.warmup_steps + order[(len(order) - 1) // 2]

    def timeline_problems(self) -> list[str]:
        """Every rank and step whose compute actions are not exactly its schedule's, once each, in order."""
        problems = []
        for r in self.ranks:
            for s in r["steps"]:
                got = [f"{a[0]}{a[1]}{a[2]}" for a in s["actions"] if a[1] in COMPUTE_OPS]
                if got != r["expected_order"]:
                    problems.append(
                        f"rank {r['rank']} step {s['step']}: ran {got}, expected {r['expected_order']}"
                    )
        return problems


def _pipeline_ranks(run: RunResult) -> list[dict[str, Any]]:
    rows = [r for r in run.ranks if r["coords"].get("dp", 0) == 0 and r["coords"].get("tp", 0) == 0]
    return sorted(rows, key=lambda r: r["coords"].get("pp", 0))


def timeline_rows(run: RunResult, step: int) -> list[dict[str, Any]]:
    """Rows (TIMELINE_COLUMNS) of ``step`` on the dp = tp = 0 ranks; ``rank`` is the pipeline rank."""
    out = []
    for r in _pipeline_ranks(run):
        pp_rank = r["coords"].get("pp", 0)
        for stage, op, mb, start, end in r["steps"][step]["actions"]:
            chunk = run.schedule.chunk_of_stage(stage) if stage >= 0 else -1
            out.append(
                {
                    "rank": pp_rank,
                    "stage": stage,
                    "chunk": chunk,
                    "microbatch": mb,
                    "op": op,
                    "start_s": start,
                    "end_s": end,
                }
            )
    return out


class PipelineIdle(NamedTuple):
    """The critical rank of one step's timeline: the pipeline rank with the most compute."""

    rank: int
    busy_s: float
    """Its compute actions (F, B, I, W), seconds."""
    idle_s: float
    """The pipeline's span minus its busy time, seconds (the bubble, waits on pipeline sends included)."""
    span_s: float
    """First compute start to last compute end over all pipeline ranks, seconds."""


def pipeline_idle(rows: list[dict[str, Any]]) -> PipelineIdle:
    """The critical rank's compute and idle time in one step's timeline rows (the simulator's ``busy_s`` and
    makespan - busy_s of :func:`workbench.estimate.assemble.critical_rank`)."""
    compute = [r for r in rows if r["op"] in COMPUTE_OPS]
    if not compute:
        return PipelineIdle(0, 0.0, 0.0, 0.0)
    span = max(r["end_s"] for r in compute) - min(r["start_s"] for r in compute)
    busy: dict[int, float] = {}
    for r in compute:
        busy[r["rank"]] = busy.get(r["rank"], 0.0) + r["end_s"] - r["start_s"]
    rank = max(sorted(busy), key=busy.__getitem__)
    return PipelineIdle(rank, busy[rank], max(0.0, span - busy[rank]), span)


def bubble_fraction(rows: list[dict[str, Any]], step_time_s: float) -> float:
    """The critical rank's idle time over the step time (:func:`workbench.estimate.metrics.bubble_fraction`)."""
    return float(metrics.bubble_fraction(pipeline_idle(rows).idle_s, step_time_s)) if step_time_s > 0 else 0.0


def memory_rows(run: RunResult) -> list[dict[str, Any]]:
    """One row per pipeline rank (``MEMORY_COLUMNS`` + total_bytes): the largest of its dp/tp ranks. Model
    states are counted from the live tensors; other_bytes is the rest of the measured peak."""
    by_pp: dict[int, dict[str, Any]] = {}
    for r in run.ranks:
        mem = r["memory"]
        row = {"rank": r["coords"].get("pp", 0)} | dict.fromkeys(MEMORY_COLUMNS, 0.0)
        for k in ("parameters_bytes", "gradients_bytes", "optimizer_states_bytes"):
            row[k] = float(mem[k])
        counted = row["parameters_bytes"] + row["gradients_bytes"] + row["optimizer_states_bytes"]
        row["other_bytes"] = float(max(0, mem["peak_bytes"] - counted))
        row["total_bytes"] = sum(row[c] for c in MEMORY_COLUMNS)
        if row["rank"] not in by_pp or row["total_bytes"] > by_pp[row["rank"]]["total_bytes"]:
            by_pp[row["rank"]] = row
    return [by_pp[k] for k in sorted(by_pp)]


def to_estimate(
    run: RunResult, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
) -> Estimate:
    """The measured ``Estimate`` of a run (see the module docstring for what each number is)."""
    import polars as pl

    times = run.step_times_s()
    step = run.median_step()
    step_s = times[step - run.warmup_steps]
    rows = timeline_rows(run, step)
    timeline = pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int64,
            "stage": pl.Int64,
            "chunk": pl.Int64,
            "microbatch": pl.Int64,
            "op": pl.Utf8,
            "start_s": pl.Float64,
            "end_s": pl.Float64,
        },
    ).select(TIMELINE_COLUMNS)
    idle = pipeline_idle(rows)
    optimizer_s = max(r["steps"][step]["optimizer_s"] for r in run.ranks)
    waits_s = max(
        (
            sum(x["end_s"] - x["start_s"] for x in rows if x["op"] == "wait" and x["rank"] == k)
            for k in range(plan.pp)
        ),
        default=0.0,
    )
    notes = _notes(run, times, waits_s)
    peak = cluster.device.peak_flop_per_s.get(DType(workload.dtype))
    if peak is None:
        notes.append(f"MFU not computed: device {cluster.device.id!r} has no {workload.dtype} peak")
    if plan.recompute is not Recompute.NONE:
        notes.append(
            f"HFU counts the plan's recompute ({plan.recompute.value}); the real run does not apply it"
        )
    figures = metrics.throughput(
        model,
        workload,
        step_time_s=step_s,
        num_devices=plan.num_devices,
        peak_flop_per_s=peak or math.inf,
        recompute_code=RECOMPUTE_CODES[plan.recompute.value],
        recompute_share=float(recompute_share(model, plan_columns(plan, workload))),
    )
    busy_s = min(idle.busy_s, step_s)
    bubble_s = min(idle.idle_s, step_s - busy_s)
    tail_s = step_s - busy_s - bubble_s
    breakdown = StepBreakdown(
        compute_s=busy_s,
        exposed_dp_comm_s=tail_s - min(optimizer_s, tail_s),
        bubble_s=bubble_s,
        optimizer_s=min(optimizer_s, tail_s),
    )
    return Estimate(
        backend="real-run",
        model=model,
        cluster=cluster,
        workload=workload,
        plan=plan,
        step_time_s=step_s,
        tokens_per_s=float(figures["tokens_per_s"]),
        mfu=float(figures["mfu"]),
        hfu=float(figures["hfu"]),
        model_flop_per_s_per_device=float(figures["model_flop_per_s_per_device"]),
        bubble_fraction=float(metrics.bubble_fraction(breakdown.bubble_s, step_s)),
        breakdown=breakdown,
        memory=pl.DataFrame(memory_rows(run)),
        memory_capacity_bytes=cluster.device.hbm_bytes,
        timeline=timeline,
        measured=True,
        notes=tuple(notes),
    )


def _notes(run: RunResult, times: list[float], waits_s: float) -> list[str]:
    ranks = run.ranks[0]
    notes = [
        f"measured on {ranks['device']} with torch {ranks['torch_version']}, schedule run by "
        f"{ranks['schedule_class']}; step time: median of {len(times)} steps after {run.warmup_steps} warm-up "
        f"(min {min(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms)"
        + (f"; run folder {run.run_dir}" if run.run_dir.exists() else ""),
        f"time blocked on pipeline neighbours (wait) on the worst rank: {waits_s * 1e3:.1f} ms per step",
        "bubble: the critical rank's idle time in the pipeline's span (waits on pipeline sends included); "
        "exposed_dp_comm_s: the step outside that span and the optimizer (gradient reduction, barrier, "
        "runtime overhead)",
        "other_bytes = measured peak - parameters - gradients - optimizer states "
        f"({run.ranks[0]['memory']['peak_kind']}; activations, buffers, allocator and framework overhead)",
    ]
    if run.reference_losses is not None:
        got = run.losses()
        err = max(abs(a - b) / abs(b) for a, b in zip(got, run.reference_losses, strict=True))
        notes.append(
            f"loss vs single-process reference: max relative difference {err:.2e} over {len(got)} steps"
        )
    problems = run.timeline_problems()
    if problems:
        notes.append(f"timeline differs from the schedule on {len(problems)} rank-steps: {problems[0]}")
    return notes
