"""The torchrun worker of the real-run backend: one process per rank, ``python -m workbench_backends.run_worker --run-dir D``.

Reads ``D/config.json`` (written by ``workbench_backends.real_run``), trains the model slice for ``steps`` optimizer
steps with PyTorch's own parallelism and writes ``D/rank<k>.json``:

- a ``DeviceMesh`` in the plan's rank order (``plan.rank_order`` is innermost first, the mesh outermost first);
- pipeline stages with ``torch.distributed.pipelining`` and the plan's schedule (``workbench_backends.real_schedule``);
- tensor parallelism with DTensor ``parallelize_module`` (Megatron split: q/k/v/gate/up column-wise, o/down
  row-wise; Shoeybi et al. 2019, arXiv:1909.08053, section 3);
- data parallelism with FSDP2 ``fully_shard`` (zero_stage >= 1, or tp > 1) or DDP (zero_stage 0);
- AdamW, random tokens of the workload's shape, the same seeds as the single-process reference.

Measurement (all ranks): every F/B/I/W and every wait on a pipeline neighbour, timed with ``perf_counter``
from an origin taken right after a barrier at the start of each step (the common clock); the step time runs
to the end of the optimizer step; peak memory (CUDA allocator peak, or the RSS high-water mark minus the RSS
before the model was built on CPU); per-step losses on last-stage ranks. On any exception the rank writes
``D/error-rank<k>.txt`` with its traceback and exits with code 1. Each finished step prints one line
(``rank <k>: step <i> done``) to the rank's stdout log.

Started by ``workbench_backends.launch`` behind its ``worker_guard`` (death signal, parent check and
``D/pid-rank<k>`` before this module imports torch); ``main`` calls the guard again after the imports, so a
worker started without it (a hand-written torchrun command) still dies with torchrun and exits at once if
its torchrun died while torch was being imported.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from workbench_backends import real_schedule
from workbench_backends.launch import worker_guard
from workbench_backends.real_run import check_plan
from workbench_backends.real_stages import (
    StageModule,
    build_stage_modules,
    full_reference_losses,
    make_batch,
    parallelize_stage,
    precision,
)
from workbench_backends.torch_model import loss_fn

from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

PG_TIMEOUT_S = 120.0
"""Collective timeout: a hung neighbour fails the run after this long (torchrun's timeout is the outer one)."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path)
    run_dir = parser.parse_args(argv).run_dir
    rank = int(os.environ.get("RANK", "0"))
    worker_guard(run_dir)  # again, after the imports: torchrun may have died while torch was imported
    try:
        config = json.loads((run_dir / "config.json").read_text())
        result = run(config, rank)
        tmp = run_dir / f"rank{rank}.json.tmp"
        tmp.write_text(json.dumps(result))
        tmp.rename(run_dir / f"rank{rank}.json")
    except BaseException:
        (run_dir / f"error-rank{rank}.txt").write_text(f"rank {rank}:\n{traceback.format_exc()}")
        sys.stderr.write(traceback.format_exc())
        os._exit(1)  # skip process-group teardown: neighbours may be gone
    if dist.is_initialized():
        dist.destroy_process_group()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(config: dict[str, Any], rank: int) -> dict[str, Any]:
    """Train ``config['steps']`` steps on this rank; return the per-rank result (plain JSON)."""
    torch.set_num_threads(1)
    spec = ModelSpec(**config["model"])
    workload = Workload(**config["workload"])
    plan = ParallelPlan(**config["plan"])
    device = _init_distributed(config)
    mesh = build_mesh(plan, device.type)
    coords = {name: mesh[name].get_local_rank() for name in mesh.mesh_dim_names or ()}
    schedule = check_plan(plan, spec, workload)
    my_stages = [s for s in range(schedule.num_stages) if schedule.stage_to_rank[s] == coords["pp"]]
    rss_before = _rss_bytes()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    built = build_stage_modules(spec, my_stages, schedule.num_stages, seed=config["seed"], device=device)
    modules = [parallelize_stage(module, plan, mesh) for module in built]
    params = [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.AdamW(params, lr=config["lr"], foreach=False)
    runner = real_schedule.make_runner(
        plan,
        schedule,
        modules,
        my_stages,
        mesh,
        device,
        loss_fn,
        executor=config["executor"],
        csv_path=config.get("schedule_csv"),
    )
    steps = []
    for step in range(config["steps"]):
        steps.append(_one_step(runner, optimizer, spec, workload, plan, coords, config, step, device))
        print(f"rank {rank}: step {step} done", flush=True)
    peak = (
        torch.cuda.max_memory_allocated(device)
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    )
    result = {
        "rank": rank,
        "node_rank": int(os.environ.get("GROUP_RANK", "0")),  # torchrun's agent ("node") of this rank
        "coords": coords,
        "stages": my_stages,
        "device": str(device),
        "expected_order": runner.expected_order(),
        "steps": steps,
        "memory": _memory(modules, optimizer, peak, device.type),
        "torch_version": torch.__version__,
        "schedule_class": runner.class_name,
    }
    dist.barrier()
    if rank == 0 and config["check_loss"]:
        result["reference_losses"] = full_reference_losses(spec, workload, config, device)
    return result


def _init_distributed(config: dict[str, Any]) -> torch.device:
    if config["device"] == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", timeout=timedelta(seconds=PG_TIMEOUT_S))
        return torch.device("cuda", local)
    dist.init_process_group("gloo", timeout=timedelta(seconds=PG_TIMEOUT_S))
    return torch.device("cpu")


def build_mesh(plan: ParallelPlan, device_type: str) -> Any:
    """A ``DeviceMesh`` with dims pp, dp, tp laid out in ``plan.rank_order`` (outermost dim first)."""
    from torch.distributed.device_mesh import init_device_mesh

    sizes = {"pp": plan.pp, "dp": plan.dp, "tp": plan.tp}
    names = tuple(str(a) for a in reversed(plan.rank_order) if str(a) in sizes)
    return init_device_mesh(device_type, tuple(sizes[n] for n in names), mesh_dim_names=names)


def _one_step(
    runner: real_schedule.Runner,
    optimizer: torch.optim.Optimizer,
    spec: ModelSpec,
    workload: Workload,
    plan: ParallelPlan,
    coords: dict[str, int],
    config: dict[str, Any],
    step: int,
    device: torch.device,
) -> dict[str, Any]:
    inputs, targets = make_batch(
        spec, workload, plan, coords["dp"], seed=config["seed"] + 1 + step, device=device
    )
    _sync(device)
    dist.barrier()
    origin = time.perf_counter()
    runner.recorder.start(origin)
    with precision(workload, device):
        losses = runner.step(inputs, targets)
    t_opt = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _sync(device)
    end = time.perf_counter()
    return {
        "step": step,
        "step_time_s": end - origin,
        "optimizer_s": end - t_opt,
        "actions": runner.recorder.take(),
        "loss": float(torch.stack(losses).mean()) if losses else None,
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def _memory(
    modules: list[StageModule] | list[nn.Module],
    optimizer: torch.optim.Optimizer,
    peak_bytes: int,
    device_type: str,
) -> dict[str, Any]:
    params = [p for m in modules for p in m.parameters()]
    states = [v for st in optimizer.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    return {
        "parameters_bytes": sum(_local_bytes(p) for p in params),
        "gradients_bytes": sum(_local_bytes(p) for p in params if p.requires_grad),
        "optimizer_states_bytes": sum(_local_bytes(s) for s in states),
        "peak_bytes": int(peak_bytes),
        "peak_kind": "cuda-allocator" if device_type == "cuda" else "rss-delta",
    }


if __name__ == "__main__":
    main()
