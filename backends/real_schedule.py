"""Map a plan's schedule onto ``torch.distributed.pipelining`` and time every action of it.

Schedules torch ships run through torch's own classes (the record's ``ScheduleSpec.torch_class``); the others run from their
CSV form (``workbench.pipeline.schedules.write_schedule_csv``) through torch's ``_PipelineScheduleRuntime``. With pp = 1
the step is plain gradient accumulation (F then B per micro-batch).

Timing: the stage's ``forward_one_chunk`` (F), ``backward_one_chunk`` (B when ``full_backward`` else I) and
``backward_weight_one_chunk`` (W) are wrapped, and so is ``schedules._wait_batch_p2p`` (op ``wait``: time spent
blocked on a neighbour's send or receive; it is labelled with the next compute action of the rank, the one it
was waiting for). In torch's zero-bubble classes stage 0's I does nothing and its W does the whole backward.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from workbench.pipeline.schedules import REGISTRY, Schedule
from workbench.specs.plan import ParallelPlan

_SINGLE_STAGE = ("ScheduleGPipe", "Schedule1F1B")
"""torch classes that take one stage per rank (``PipelineScheduleSingle``) rather than a list."""


def torch_class_of(name: str) -> str | None:
    """The ``torch.distributed.pipelining.schedules`` class that runs schedule ``name`` (its record's
    ``torch_class``); None for a schedule torch does not ship or a custom (CSV) schedule."""
    spec = REGISTRY.get(name)
    return spec.torch_class if spec is not None else None


class Recorder:
    """Collects (stage, op, microbatch, start_s, end_s) of one step, times relative to the step's origin."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.rows: list[list[Any]] = []

    def start(self, origin: float) -> None:
        self.origin, self.rows = origin, []

    def add(self, stage: int, op: str, microbatch: int, start: float, end: float) -> None:
        self.rows.append([stage, op, microbatch, start - self.origin, end - self.origin])

    def take(self) -> list[list[Any]]:
        """The step's rows in start order, each wait labelled with the next compute action's stage and micro-batch."""
        rows = sorted(self.rows, key=lambda r: r[3])
        label = (-1, -1)
        for row in reversed(rows):
            if row[1] == "wait":
                row[0], row[2] = label
            else:
                label = (row[0], row[2])
        return rows


def _timed(
    recorder: Recorder, stage: int, op_of: Callable[..., str], fn: Callable[..., Any]
) -> Callable[..., Any]:
    def wrapper(chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = fn(chunk_id, *args, **kwargs)
        recorder.add(stage, op_of(*args, **kwargs), chunk_id, start, time.perf_counter())
        return out

    return wrapper


def _backward_op(loss: Any = None, full_backward: bool = True, last_backward: bool = False) -> str:
    return "B" if full_backward else "I"


def instrument_stage(stage: Any, recorder: Recorder) -> None:
    """Wrap a PipelineStage's F/B/I/W entry points so each call is recorded."""
    idx = stage.stage_index
    stage.forward_one_chunk = _timed(recorder, idx, lambda *a, **k: "F", stage.forward_one_chunk)
    stage.backward_one_chunk = _timed(recorder, idx, _backward_op, stage.backward_one_chunk)
    stage.backward_weight_one_chunk = _timed(
        recorder, idx, lambda *a, **k: "W", stage.backward_weight_one_chunk
    )


def instrument_waits(recorder: Recorder) -> None:
    """Time every blocking wait on point-to-point work inside torch's schedules."""
    from torch.distributed.pipelining import schedules

    original = getattr(schedules._wait_batch_p2p, "__wrapped_original__", schedules._wait_batch_p2p)

    def timed_wait(work: Any) -> Any:
        start = time.perf_counter()
        out = original(work)
        recorder.add(-1, "wait", -1, start, time.perf_counter())
        return out

    timed_wait.__wrapped_original__ = original  # type: ignore[attr-defined]
    schedules._wait_batch_p2p = timed_wait


_OP_LETTERS = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}


def _action_texts(order: list[Any]) -> list[str]:
    """Compute actions of torch's ``pipeline_order`` row as ``"0F3"`` text (idle steps skipped, overlapped
    F/B pairs expanded)."""
    out = []
    for action in order:
        if action is None:
            continue
        for a in getattr(action, "sub_actions", None) or [action]:
            letter = _OP_LETTERS.get(a.computation_type.name)
            if letter is not None:
                out.append(f"{a.stage_index}{letter}{a.microbatch_index}")
    return out


class PipelineRunner:
    """Runs one step of the pipeline schedule on this rank's stages; ``step`` returns the micro-batch losses."""

    def __init__(
        self,
        plan: ParallelPlan,
        schedule: Schedule,
        modules: list[nn.Module],
        stages: list[int],
        mesh: Any,
        device: torch.device,
        loss: Callable[..., torch.Tensor],
        *,
        executor: str,
        csv_path: str | None,
    ) -> None:
        from torch.distributed.pipelining import PipelineStage, schedules

        self.recorder = Recorder()
        self.schedule, self.pp_rank = schedule, mesh["pp"].get_local_rank()
        group = mesh["pp"].get_group()
        self.stages = [
            PipelineStage(m, s, schedule.num_stages, device, group=group)
            for m, s in zip(modules, stages, strict=True)
        ]
        for st in self.stages:
            instrument_stage(st, self.recorder)
        instrument_waits(self.recorder)
        self.holds_first = 0 in stages
        self.holds_last = schedule.num_stages - 1 in stages
        name = torch_class_of(schedule.name) if executor == "auto" else None
        m = schedule.num_microbatches
        if name is None:
            if csv_path is None:
                raise ValueError(f"schedule {schedule.name!r} runs from CSV but no schedule_csv was given")
            self.runtime: Any = schedules._PipelineScheduleRuntime(
                self.stages, m, loss_fn=loss, scale_grads=True
            )
            self.runtime._load_csv(csv_path)
            self.class_name = "_PipelineScheduleRuntime (CSV)"
        else:
            cls = getattr(schedules, name)
            target = self.stages[0] if name in _SINGLE_STAGE else self.stages
            self.runtime = cls(target, m, loss_fn=loss, scale_grads=True)
            self.class_name = name

    def expected_order(self) -> list[str]:
        """This rank's compute actions in the order the schedule object runs them."""
        if self.class_name in _SINGLE_STAGE:  # torch 2.13 lists a wrong pipeline_order for 1F1B's last rank
            return [str(a) for a in self.schedule.actions[self.pp_rank]]
        return _action_texts(self.runtime.pipeline_order[self.pp_rank])

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
        losses: list[torch.Tensor] = []
        args = (inputs,) if self.holds_first else ()
        kwargs: dict[str, Any] = {"target": targets, "losses": losses} if self.holds_last else {}
        self.runtime.step(*args, **kwargs)
        return [x.detach() for x in losses]


class LocalRunner:
    """pp = 1: forward and backward per micro-batch (gradient accumulation), timed as F and B of stage 0."""

    class_name = "gradient accumulation (pp=1)"

    def __init__(self, schedule: Schedule, module: nn.Module, loss: Callable[..., torch.Tensor]) -> None:
        self.recorder, self.schedule, self.module, self.loss = Recorder(), schedule, module, loss

    def expected_order(self) -> list[str]:
        return [str(a) for a in self.schedule.actions[0]]

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
        m = self.schedule.num_microbatches
        losses = []
        for mb, (x, y) in enumerate(zip(inputs.tensor_split(m), targets.tensor_split(m), strict=True)):
            last = mb == m - 1
            _set_grad_sync(self.module, last)
            t0 = time.perf_counter()
            loss = self.loss(self.module(x), y)
            t1 = time.perf_counter()
            self.recorder.add(0, "F", mb, t0, t1)
            (loss / m).backward()
            self.recorder.add(0, "B", mb, t1, time.perf_counter())
            losses.append(loss.detach())
        return losses


def _set_grad_sync(module: Any, enabled: bool) -> None:
    if hasattr(module, "set_requires_gradient_sync"):  # FSDP2
        module.set_requires_gradient_sync(enabled)
    elif hasattr(module, "require_backward_grad_sync"):  # DDP
        module.require_backward_grad_sync = enabled


Runner = PipelineRunner | LocalRunner


def make_runner(
    plan: ParallelPlan,
    schedule: Schedule,
    modules: list[nn.Module],
    stages: list[int],
    mesh: Any,
    device: torch.device,
    loss: Callable[..., torch.Tensor],
    *,
    executor: str,
    csv_path: str | None,
) -> Runner:
    """A runner for this rank: ``LocalRunner`` for pp = 1, else ``PipelineRunner``."""
    if plan.pp == 1:
        return LocalRunner(schedule, modules[0], loss)
    return PipelineRunner(
        plan, schedule, modules, stages, mesh, device, loss, executor=executor, csv_path=csv_path
    )
