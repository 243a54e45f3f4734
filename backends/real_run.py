"""The ``real-run`` backend: run the plan as a real small torchrun job here and return a measured ``Estimate``.

``RealRunBackend(steps=3).estimate(model, cluster, workload, plan)`` writes ``config.json`` (and the schedule's
CSV) into a run folder, starts ``plan.num_devices`` workers with ``workbench_backends.launch.run_torchrun`` (gloo on CPU,
NCCL when CUDA is present), reads the per-rank results (``workbench_backends.run_worker``) into a ``RunResult`` and
turns it into the measured Estimate with ``workbench_backends.real_estimate.to_estimate`` (what each number is: see
that module).

The model is the one given (shrink it first: ``workbench run --layers/--hidden``); the run is in fp32.

Guarantees: the number of workers is checked against this machine before anything starts
(``check_workers``: ``workbench_backends.launch.worker_limit`` with ``worker_bytes`` per worker); no process
of the job outlives ``real_run`` (``workbench_backends.launch``); a temporary run folder (``wb-run-*`` in the
temporary directory, made when no ``run_dir`` is given) is removed on every exit path, success, failure,
timeout, KeyboardInterrupt, unless ``keep_run_dir``. A caller killed with SIGKILL cannot remove its folder:
each temporary folder holds an ``owner`` file (pid and start time of the process that made it) and the next
``real_run`` removes folders whose owner is gone (``sweep_stale_run_dirs``), ending any process still
marked with that folder first.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from workbench_backends.launch import (
    WORKER_BYTES,
    LaunchConfig,
    LaunchError,
    WorkerLimit,
    check_worker_count,
    free_port,
    kill_job_processes,
    process_start,
    run_torchrun,
)
from workbench_backends.real_estimate import (
    COMPUTE_OPS,
    RunResult,
    bubble_fraction,
    memory_rows,
    timeline_rows,
    to_estimate,
)

from workbench.pipeline.schedules import Schedule, build_schedule, write_schedule_csv
from workbench.specs.estimate import Estimate
from workbench.specs.hardware import ClusterSpec, DeviceSpec, DType, NetworkLevel
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

RUN_DIR_PREFIX = "wb-run-"
"""Name prefix of temporary run folders (in ``tempfile.gettempdir()``, i.e. ``$TMPDIR`` or /tmp)."""
OWNER_FILE = "owner"
"""In a temporary run folder: ``<pid> <start time>`` of the process that made it (``sweep_stale_run_dirs``)."""
STATE_BYTES_PER_PARAM = 16
"""fp32 weights, gradients and AdamW's two moments: 4 x 4 bytes per parameter."""


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
    for field, off in (
        ("loss_chunks", 1),
        ("offload_optimizer", False),
        ("offload_activations", False),
        ("vocab_parallel", False),
    ):
        if getattr(plan, field) != off:
            raise ValueError(f"the real run supports {field}={off} only, got {field}={getattr(plan, field)}")
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
    schedule = build_schedule(plan.schedule, pp=plan.pp, num_microbatches=m, vpp=plan.vpp)
    if schedule.num_directions > 1:
        raise ValueError(
            f"schedule {plan.schedule!r} feeds micro-batches from both ends of the pipeline; the real run executes "
            "one chain of stages (torch.distributed.pipelining): choose a one-direction schedule"
        )
    return schedule


def worker_bytes(model: ModelSpec, plan: ParallelPlan, *, check_loss: bool) -> int:
    """Memory one worker is assumed to need: ``WORKER_BYTES`` (torch, gloo, a small model's activations) plus
    ``STATE_BYTES_PER_PARAM`` per parameter of its pp x tp share of the model, plus, with ``check_loss``,
    rank 0's single-process reference (the whole model's states) spread over the workers."""
    total = model.total_parameters()
    share = STATE_BYTES_PER_PARAM * total // (plan.pp * plan.tp)
    reference = STATE_BYTES_PER_PARAM * total // plan.num_devices if check_loss else 0
    return WORKER_BYTES + share + reference


def check_workers(
    model: ModelSpec, plan: ParallelPlan, *, check_loss: bool, device: str | None, asked: str | None = None
) -> WorkerLimit:
    """ValueError (one line naming ``asked``, default the plan, and this machine's limit) when the plan needs
    more worker processes than this machine takes (``workbench_backends.launch.worker_limit``; with
    ``device="cuda"`` also no more than the visible devices; ``device=None`` checks cores and memory only,
    without importing torch)."""
    devices = None
    if device == "cuda":
        import torch

        devices = torch.cuda.device_count()
    return check_worker_count(
        plan.num_devices,
        asked=asked or f"the plan {plan.describe()}",
        per_worker_bytes=worker_bytes(model, plan, check_loss=check_loss),
        devices=devices,
    )


def make_run_dir(parent: Path | None = None) -> Path:
    """A new temporary run folder ``wb-run-*`` in ``parent`` (default: the temporary directory) with its
    ``owner`` file, after removing stale ones there (``sweep_stale_run_dirs``)."""
    sweep_stale_run_dirs(parent)
    run_dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX, dir=parent))
    try:
        (run_dir / OWNER_FILE).write_text(f"{os.getpid()} {process_start(os.getpid())}\n")
        return run_dir.resolve()
    except BaseException:  # KeyboardInterrupt (or a SIGTERM turned into one) right after mkdtemp
        shutil.rmtree(run_dir, ignore_errors=True)
        raise


def sweep_stale_run_dirs(parent: Path | None = None) -> list[Path]:
    """Remove this user's ``wb-run-*`` folders in ``parent`` (default: the temporary directory) whose
    ``owner`` process is gone (a run whose caller was SIGKILLed), after SIGKILLing any process still marked
    with the folder; return them. Folders without an ``owner`` file (kept ones, ``--run-dir`` ones) stay."""
    folder = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    removed = []
    for run_dir in sorted(folder.glob(RUN_DIR_PREFIX + "*")):
        try:
            if run_dir.is_symlink() or not run_dir.is_dir() or run_dir.stat().st_uid != os.getuid():
                continue
            pid, start = (run_dir / OWNER_FILE).read_text().split()
            alive = process_start(int(pid)) == start if start != "None" else _pid_exists(int(pid))
        except (OSError, ValueError):
            continue
        if not alive:
            kill_job_processes(run_dir.resolve(), timeout_s=2.0)
            shutil.rmtree(run_dir, ignore_errors=True)
            removed.append(run_dir)
    return removed


def _pid_exists(pid: int) -> bool:
    """For a system without ``/proc`` start times: whether ``pid`` names a process (reused pids count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    keep_run_dir: bool = False,
    device: str | None = None,
    nnodes: int = 1,
) -> RunResult:
    """Launch the job and collect its per-rank results.

    ``nnodes`` > 1 runs the job as that many torchrun agents ("nodes") on this machine, each with
    ``plan.num_devices / nnodes`` workers, meeting at a c10d rendezvous on 127.0.0.1 (the multi-node launch path
    of a cluster, run here; ``workbench_backends.launch.agents_here``).

    ``run_dir`` must be empty or absent and is kept; None: a temporary folder (``make_run_dir``), removed
    before this returns or raises unless ``keep_run_dir`` (``RunResult.run_dir`` then names a folder that is
    gone). Raises ValueError for an unsupported plan or more workers than this machine takes (before anything
    starts), ``LaunchError`` when a rank fails or it times out (for a removed temporary folder its message is
    the pathless ``summary``, since the files it would name are gone)."""
    if steps <= warmup_steps:
        raise ValueError(f"steps must be > warmup_steps={warmup_steps}, got steps={steps}")
    if executor not in ("auto", "csv"):
        raise ValueError(
            f"executor must be 'auto' (torch's class when torch has one) or 'csv', got {executor!r}"
        )
    schedule = check_plan(plan, model, workload)
    if not isinstance(nnodes, int) or nnodes < 1 or plan.num_devices % nnodes:
        raise ValueError(f"nnodes must divide the plan's {plan.num_devices} workers, got {nnodes!r}")
    device = device or device_kind()
    check_workers(model, plan, check_loss=check_loss, device=device)
    temporary = run_dir is None
    remove = temporary and not keep_run_dir
    if run_dir is not None:
        run_dir = Path(run_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        if any(run_dir.iterdir()):
            raise ValueError(f"run folder {run_dir} is not empty; give a new or empty folder")
    try:
        if run_dir is None:
            run_dir = make_run_dir()
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
        launch = LaunchConfig(
            nproc_per_node=plan.num_devices // nnodes,
            nnodes=nnodes,
            rdzv_endpoint=f"127.0.0.1:{free_port()}" if nnodes > 1 else None,
            rdzv_id=run_dir.name,
            timeout_s=timeout_s,
        )
        wall_s = run_torchrun(
            launch, "workbench_backends.run_worker", ["--run-dir", str(run_dir)], run_dir=run_dir
        )
        ranks = [json.loads((run_dir / f"rank{k}.json").read_text()) for k in range(plan.num_devices)]
    except LaunchError as exc:
        if remove:  # the message's paths are about to go: keep what they held (rank, traceback)
            raise LaunchError(
                exc.summary, rank=exc.rank, traceback_text=exc.traceback_text, summary=exc.summary
            ) from None
        raise
    finally:
        if run_dir is not None:
            # run_torchrun did; again in case it was cut short while ending the job
            kill_job_processes(run_dir)
            if remove:
                shutil.rmtree(run_dir, ignore_errors=True)
            elif temporary:  # kept on request: not a stale folder for the next sweep
                with contextlib.suppress(OSError):
                    (run_dir / OWNER_FILE).unlink()
    return RunResult(
        run_dir=run_dir,
        ranks=ranks,
        schedule=schedule,
        warmup_steps=warmup_steps,
        wall_s=wall_s,
        reference_losses=ranks[0].get("reference_losses"),
    )


__all__ = [
    "COMPUTE_OPS",
    "LOOPBACK_BYTES_PER_S",
    "LOOPBACK_LATENCY_S",
    "OWNER_FILE",
    "RUN_DIR_PREFIX",
    "RealRunBackend",
    "RunResult",
    "bubble_fraction",
    "check_plan",
    "check_workers",
    "device_kind",
    "local_cluster",
    "make_run_dir",
    "memory_rows",
    "real_run",
    "sweep_stale_run_dirs",
    "timeline_rows",
    "to_estimate",
    "worker_bytes",
    "write_config",
]


class RealRunBackend:
    """Backend ``real-run``: ``estimate`` runs the plan for real with torchrun and returns a measured Estimate.

    Options: ``steps`` (optimizer steps, > warmup_steps), ``warmup_steps`` (steps left out of the timing),
    ``timeout_s`` (whole job), ``run_dir`` (where config, logs and per-rank results go, kept; None: a temp
    folder, removed however the run ends unless ``keep_run_dir``), ``check_loss`` (rank 0 also trains the single-process
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
        nnodes: int = 1,
    ) -> None:
        self.options: dict[str, Any] = {
            "nnodes": nnodes,
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
        Raises ValueError for an unsupported plan and ``workbench_backends.launch.LaunchError`` for a failed run."""
        run = real_run(
            model, workload, plan, run_dir=self.run_dir, keep_run_dir=self.keep_run_dir, **self.options
        )
        self.last_run = run
        return to_estimate(run, model, cluster, workload, plan)


LOOPBACK_BYTES_PER_S = 2e9
"""Assumed gloo bandwidth between processes of one host over loopback TCP (order of magnitude, not measured
here); a profile's collective fit replaces it for the torch-profile backend."""
LOOPBACK_LATENCY_S = 50e-6
"""Assumed gloo message start-up over loopback TCP (order of magnitude, not measured here)."""


def local_cluster(num_devices: int) -> ClusterSpec:
    """This machine as a one-node cluster of ``num_devices`` workers, with measured device peaks.

    CPU: device id ``host-cpu`` (the id ``workbench profile`` gives CPU profiles), fp32 peak = best square
    matmul on one thread, memory bandwidth = best tensor copy (``workbench_backends.profile_record``), capacity = the
    host's RAM shared by the workers. CUDA: the catalog preset of this GPU (``guess_device_id``, the id
    ``workbench profile`` and ``workbench microbench`` file it under, so the analytic backend reads its kernel
    table and torch-profile finds its profiles) with the capacity torch reports; a GPU without a preset: id =
    the device name, fp32 and bf16 peaks measured the same way as on the CPU.
    """
    import os

    import torch
    from workbench_backends.profile_record import copy_bytes_per_s, device_name, gemm_peak_flop_per_s

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    preset = _gpu_preset(dev) if dev.type == "cuda" else None
    if preset is not None:
        capacity = float(torch.cuda.get_device_properties(dev).total_memory)
        return _one_node(replace(preset, hbm_bytes=capacity), num_devices)
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
    return _one_node(device, num_devices)


def _gpu_preset(dev: Any) -> DeviceSpec | None:
    """The catalog preset of this GPU, None when it has none."""
    from workbench_backends.profile_record import guess_device_id

    from workbench.presets.catalog import load_device, preset_names

    device_id = guess_device_id(dev)
    return load_device(device_id) if device_id in preset_names("device") else None


def _one_node(device: DeviceSpec, num_devices: int) -> ClusterSpec:
    level = NetworkLevel(name="host", bytes_per_s=LOOPBACK_BYTES_PER_S, latency_s=LOOPBACK_LATENCY_S)
    return ClusterSpec(
        id="local",
        name=f"this host ({device.name})",
        device=device,
        devices_per_node=num_devices,
        levels=(level,),
        source="this machine",
    )
