"""The ``real-run`` backend: run the plan as a real small torchrun job here and return a measured ``Estimate``.

``RealRunBackend(steps=3).estimate(model, cluster, workload, plan)`` writes ``config.json`` (and the schedule's
CSV) into a run folder, starts ``plan.num_devices`` workers with ``backends.launch.run_torchrun`` (gloo on CPU,
NCCL when CUDA is present), reads the per-rank results (``backends.run_worker``) and assembles:

- ``step_time_s``: median over the steps after ``warmup_steps`` of the slowest rank's step (barrier to end of
  the optimizer step); the spread (min..max) is in the notes;
- ``timeline``: the actions of the median step on the ranks with dp = tp = 0 (``rank`` is the pipeline rank;
  ops F, B, I, W and ``wait``; seconds from the step's barrier);
- ``bubble_fraction``: idle share of pp x makespan over the compute actions (GPipe's convention, the
  simulator's ``bubble_fraction_of_step``);
- ``memory``: parameters, gradients and optimizer states counted from the live tensors; activations_bytes is
  the measured peak (CUDA allocator; on CPU the RSS high-water mark minus the RSS before the model was built)
  minus those three, so it also holds allocator and framework overhead;
- MFU from ``model.model_flop_per_token`` (PaLM's definition) over ``cluster.device.peak(workload.dtype)``.

The model is the one given (shrink it first: ``workbench run --layers/--hidden``); the run is in fp32.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.launch import LaunchConfig, run_torchrun
from workbench.estimate import MEMORY_COLUMNS, TIMELINE_COLUMNS, Estimate, StepBreakdown
from workbench.hardware import ClusterSpec, DType
from workbench.model import ModelSpec
from workbench.plan import ParallelPlan, Workload
from workbench.schedules import Schedule, build_schedule, write_schedule_csv

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


def device_kind() -> str:
    """``cuda`` when torch sees a CUDA device, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def write_config(
    run_dir: Path,
    model: ModelSpec,
    workload: Workload,
    plan: ParallelPlan,
    schedule: Schedule,
    *,
    steps: int,
    seed: int,
    lr: float,
    check_loss: bool,
    executor: str,
    device: str,
) -> Path:
    """Write the worker's ``config.json`` (and ``schedule.csv``) into ``run_dir``."""
    csv_path = write_schedule_csv(schedule, run_dir / "schedule.csv", force=True)
    config = {
        "model": model.to_dict(),
        "workload": {
            "seq_len": workload.seq_len,
            "global_batch_size": workload.global_batch_size,
            "dtype": str(workload.dtype),
            "optimizer": str(workload.optimizer),
        },
        "plan": {
            "dp": plan.dp,
            "tp": plan.tp,
            "pp": plan.pp,
            "vpp": plan.vpp,
            "micro_batch_size": plan.micro_batch_size,
            "zero_stage": plan.zero_stage,
            "schedule": plan.schedule,
            "rank_order": [str(a) for a in plan.rank_order],
        },
        "steps": steps,
        "seed": seed,
        "lr": lr,
        "check_loss": check_loss,
        "executor": executor,
        "device": device,
        "schedule_csv": str(csv_path),
    }
    path = run_dir / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def check_plan(plan: ParallelPlan, model: ModelSpec, workload: Workload) -> Schedule:
    """The schedule the run will execute; ValueError for what the real run does not support."""
    for axis in ("cp", "ep"):
        if getattr(plan, axis) != 1:
            raise ValueError(f"the real run supports {axis}=1 only, got {axis}={getattr(plan, axis)}")
    if model.attention.value == "mla":
        raise ValueError(
            f"model {model.name!r}: the real run does not build MLA attention; allowed: mha, gqa"
        )
    if model.num_layers < plan.pp * plan.vpp:
        raise ValueError(
            f"the model has {model.num_layers} layers but the plan has pp * vpp = {plan.pp * plan.vpp} "
            "pipeline stages; use --layers >= pp * vpp"
        )
    m = plan.num_microbatches(workload)
    if m == 0:
        raise ValueError(
            f"global_batch_size={workload.global_batch_size} is not divisible by dp * micro_batch_size"
            f" = {plan.dp * plan.micro_batch_size}"
        )
    if plan.pp == 1:
        return build_schedule("1f1b", pp=1, num_microbatches=m)
    return build_schedule(plan.schedule, pp=plan.pp, num_microbatches=m, vpp=plan.vpp)


def real_run(
    model: ModelSpec,
    workload: Workload,
    plan: ParallelPlan,
    *,
    steps: int = 3,
    warmup_steps: int = 1,
    seed: int = 0,
    lr: float = 1e-3,
    check_loss: bool = True,
    executor: str = "auto",
    timeout_s: float = 300.0,
    run_dir: Path | None = None,
    device: str | None = None,
) -> RunResult:
    """Launch the job and collect its per-rank results. ``run_dir`` must be empty or absent (None: a temp
    folder). Raises ValueError for an unsupported plan, ``LaunchError`` when a rank fails or it times out."""
    if steps <= warmup_steps:
        raise ValueError(f"steps must be > warmup_steps={warmup_steps}, got steps={steps}")
    if executor not in ("auto", "csv"):
        raise ValueError(
            f"executor must be 'auto' (torch's class when torch has one) or 'csv', got {executor!r}"
        )
    schedule = check_plan(plan, model, workload)
    run_dir = Path(tempfile.mkdtemp(prefix="wb-run-")) if run_dir is None else Path(run_dir)
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    if any(run_dir.iterdir()):
        raise ValueError(f"run folder {run_dir} is not empty; give a new or empty folder")
    device = device or device_kind()
    write_config(
        run_dir,
        model,
        workload,
        plan,
        schedule,
        steps=steps,
        seed=seed,
        lr=lr,
        check_loss=check_loss,
        executor=executor,
        device=device,
    )
    launch = LaunchConfig(nproc_per_node=plan.num_devices, timeout_s=timeout_s)
    wall_s = run_torchrun(launch, "backends.run_worker", ["--run-dir", str(run_dir)], run_dir=run_dir)
    ranks = [json.loads((run_dir / f"rank{k}.json").read_text()) for k in range(plan.num_devices)]
    return RunResult(
        run_dir=run_dir,
        ranks=ranks,
        schedule=schedule,
        warmup_steps=warmup_steps,
        wall_s=wall_s,
        reference_losses=ranks[0].get("reference_losses"),
    )


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


def bubble_fraction(rows: list[dict[str, Any]], pp: int) -> float:
    """Idle share of pp x makespan over compute actions (GPipe, arXiv:1811.06965; the simulator's convention 1)."""
    compute = [r for r in rows if r["op"] in COMPUTE_OPS]
    if not compute:
        return 0.0
    makespan = max(r["end_s"] for r in compute) - min(r["start_s"] for r in compute)
    busy = sum(r["end_s"] - r["start_s"] for r in compute)
    return max(0.0, (pp * makespan - busy) / (pp * makespan)) if makespan > 0 else 0.0


def memory_rows(run: RunResult) -> list[dict[str, Any]]:
    """One row per pipeline rank: the largest of its dp/tp ranks' counted and measured bytes."""
    by_pp: dict[int, dict[str, Any]] = {}
    for r in run.ranks:
        mem = r["memory"]
        counted = mem["parameters_bytes"] + mem["gradients_bytes"] + mem["optimizer_states_bytes"]
        row = {
            "rank": r["coords"].get("pp", 0),
            "parameters_bytes": float(mem["parameters_bytes"]),
            "gradients_bytes": float(mem["gradients_bytes"]),
            "optimizer_states_bytes": float(mem["optimizer_states_bytes"]),
            "activations_bytes": float(max(0, mem["peak_bytes"] - counted)),
            "buffers_bytes": 0.0,
            "other_bytes": 0.0,
        }
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
    step_s = statistics.median(times)
    step = run.median_step()
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
    bubble = bubble_fraction(rows, plan.pp)
    optimizer_s = max(r["steps"][step]["optimizer_s"] for r in run.ranks)
    waits_s = max(
        (
            sum(x["end_s"] - x["start_s"] for x in rows if x["op"] == "wait" and x["rank"] == k)
            for k in range(plan.pp)
        ),
        default=0.0,
    )
    compute_s = max(0.0, step_s - optimizer_s - bubble * step_s)
    tokens = workload.tokens_per_step
    flop_per_s = model.model_flop_per_token(workload.seq_len) * tokens / step_s / plan.num_devices
    notes = _notes(run, times, waits_s)
    peak, inv_peak = _peak(cluster, workload)
    if peak is None:
        notes.append(f"MFU not computed: device {cluster.device.id!r} has no {workload.dtype} peak")
    return Estimate(
        backend="real-run",
        model=model,
        cluster=cluster,
        workload=workload,
        plan=plan,
        step_time_s=step_s,
        tokens_per_s=tokens / step_s,
        mfu=inv_peak * flop_per_s,
        hfu=inv_peak * flop_per_s,
        model_flop_per_s_per_device=flop_per_s,
        bubble_fraction=bubble,
        breakdown=StepBreakdown(compute_s=compute_s, bubble_s=bubble * step_s, optimizer_s=optimizer_s),
        memory=pl.DataFrame(memory_rows(run)),
        memory_capacity_bytes=cluster.device.hbm_bytes,
        timeline=timeline,
        measured=True,
        notes=tuple(notes),
    )


def _peak(cluster: ClusterSpec, workload: Workload) -> tuple[float | None, float]:
    peak = cluster.device.peak_flop_per_s.get(DType(workload.dtype))
    return peak, (1.0 / peak if peak else 0.0)


def _notes(run: RunResult, times: list[float], waits_s: float) -> list[str]:
    ranks = run.ranks[0]
    notes = [
        f"measured on {ranks['device']} with torch {ranks['torch_version']}, schedule run by "
        f"{ranks['schedule_class']}; step time: median of {len(times)} steps after {run.warmup_steps} warm-up "
        f"(min {min(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms); run folder {run.run_dir}",
        f"time blocked on pipeline neighbours (wait) on the worst rank: {waits_s * 1e3:.1f} ms per step",
        "activations_bytes = measured peak - parameters - gradients - optimizer states "
        f"({run.ranks[0]['memory']['peak_kind']}; includes allocator and framework overhead)",
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


class RealRunBackend:
    """Backend ``real-run``: ``estimate`` runs the plan for real with torchrun and returns a measured Estimate.

    Options: ``steps`` (optimizer steps, > warmup_steps), ``warmup_steps`` (steps left out of the timing),
    ``timeout_s`` (whole job), ``run_dir`` (where config, logs and per-rank results go; None: a temp folder,
    deleted afterwards unless ``keep_run_dir``), ``check_loss`` (rank 0 also trains the single-process
    reference; the difference is in the notes), ``executor`` (``auto``: torch's schedule class where one
    exists; ``csv``: always our CSV through torch's ``_PipelineScheduleRuntime``), ``seed``, ``lr``.
    """

    name = "real-run"

    def __init__(
        self,
        *,
        steps: int = 3,
        warmup_steps: int = 1,
        timeout_s: float = 300.0,
        run_dir: str | Path | None = None,
        keep_run_dir: bool = False,
        check_loss: bool = True,
        executor: str = "auto",
        seed: int = 0,
        lr: float = 1e-3,
    ) -> None:
        self.options: dict[str, Any] = {
            "steps": steps,
            "warmup_steps": warmup_steps,
            "timeout_s": timeout_s,
            "seed": seed,
            "lr": lr,
            "check_loss": check_loss,
            "executor": executor,
        }
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.keep_run_dir = keep_run_dir or run_dir is not None
        self.last_run: RunResult | None = None

    def unavailable_reason(self) -> str | None:
        import importlib.util

        return None if importlib.util.find_spec("torch") is not None else "torch is not installed"

    def local_cluster(self, num_devices: int) -> ClusterSpec:
        """This machine as a cluster (see ``local_cluster``)."""
        return local_cluster(num_devices)

    def estimate(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
    ) -> Estimate:
        """Run the plan (``plan.num_devices`` processes on this machine) and return the measured Estimate.
        Raises ValueError for an unsupported plan and ``backends.launch.LaunchError`` for a failed run."""
        run = real_run(model, workload, plan, run_dir=self.run_dir, **self.options)
        self.last_run = run
        try:
            return to_estimate(run, model, cluster, workload, plan)
        finally:
            if not self.keep_run_dir:
                shutil.rmtree(run.run_dir, ignore_errors=True)


LOOPBACK_BYTES_PER_S = 2e9
"""Assumed gloo bandwidth between processes of one host over loopback TCP (order of magnitude, not measured
here); a profile's collective fit replaces it for the torch-profile backend."""
LOOPBACK_LATENCY_S = 50e-6
"""Assumed gloo message start-up over loopback TCP (order of magnitude, not measured here)."""


def local_cluster(num_devices: int) -> ClusterSpec:
    """This machine as a one-node cluster of ``num_devices`` workers, with measured device peaks.

    CPU: device id ``host-cpu`` (the id ``workbench profile`` gives CPU profiles), fp32 peak = best square
    matmul on one thread, memory bandwidth = best tensor copy (``backends.profile_record``), capacity = the
    host's RAM shared by the workers. CUDA: id = the device name, fp32 and bf16 peaks measured the same way.
    """
    import os

    import torch

    from backends.profile_record import copy_bytes_per_s, device_name, gemm_peak_flop_per_s
    from workbench.hardware import DeviceSpec, NetworkLevel

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        dtypes = {DType.FP32: torch.float32} | ({DType.BF16: torch.bfloat16} if dev.type == "cuda" else {})
        peaks = {
            k: gemm_peak_flop_per_s(v, dev, size=512 if dev.type == "cpu" else None)
            for k, v in dtypes.items()
        }
        bandwidth = copy_bytes_per_s(dev)
    finally:
        torch.set_num_threads(threads)
    if dev.type == "cuda":
        capacity = float(torch.cuda.get_device_properties(dev).total_memory)
    else:
        capacity = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / num_devices
    name = device_name(dev)
    device = DeviceSpec(
        id="host-cpu" if dev.type == "cpu" else name,
        name=name,
        peak_flop_per_s=peaks,
        hbm_bytes=capacity,
        hbm_bytes_per_s=bandwidth,
        source="measured on this host (matmul and copy micro-benchmarks)",
    )
    level = NetworkLevel(name="host", bytes_per_s=LOOPBACK_BYTES_PER_S, latency_s=LOOPBACK_LATENCY_S)
    return ClusterSpec(
        id="local",
        name=f"this host ({name})",
        device=device,
        devices_per_node=num_devices,
        levels=(level,),
        source="this machine",
    )
