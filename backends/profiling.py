"""Measure one module's forward, backward-for-inputs (I), backward-for-weights (W) and fused backward (B).

The split is the zero-bubble decomposition (Qi et al. 2023, arXiv:2401.10241, section 2) exactly as
``torch.distributed.pipelining`` executes it (``_backward.stage_backward_input`` / ``stage_backward_weight``,
called by ``PipelineStage.backward_one_chunk(full_backward=False)`` / ``backward_weight_one_chunk``): I walks
the autograd graph to find, per parameter group, the nodes where the weight subgraph joins the input path,
runs ``autograd.grad(out, x, retain_graph=True)`` while hooks keep the gradients reaching those nodes; W
runs one ``autograd.grad`` per group from them to the weights. Both are called here on the module, so the
profile carries the runtime's graph walks and the re-entry into autograd. For a module whose input is token
ids (the embedding, and any pipeline stage 0, whose I the runtime skips and whose W is the fused backward)
I is 0 and W is the fused backward. B is ``torch.autograd.backward`` (what ``stage_backward`` runs).
``consistency_frac`` reports (I + W) / B - 1: on a CPU with one thread it is about +0.15..+0.5 for a decoder
block, more for small ones (the split's overhead, seen in real pipelined runs too); it is not ~0.

Timing (:class:`Clock`): the thread's CPU time on a CPU with one torch thread, else ``time.perf_counter``; CUDA events (``torch.cuda.Event(enable_timing=True)``) and
``torch.cuda.max_memory_allocated`` on a GPU. Activation bytes are counted on every device with
``torch.autograd.graph.saved_tensors_hooks``: the unique storages saved for backward in the forward, the
module's parameters excluded. Each quantity is the median of ``repeats`` runs after ``warmup`` runs; the
spread is the interquartile range over the median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight


@dataclass(frozen=True, kw_only=True, slots=True)
class OpTiming:
    """Medians of one module at one input shape; seconds and bytes."""

    forward_s: float
    backward_s: float
    """Fused backward (inputs and weights together)."""
    backward_input_s: float
    backward_weight_s: float
    forward_spread_frac: float
    """Interquartile range / median of the forward times (same for the other ``*_spread_frac``)."""
    backward_spread_frac: float
    backward_input_spread_frac: float
    backward_weight_spread_frac: float
    activation_bytes: int
    """Unique tensor storages saved for backward by one forward, parameters excluded."""
    peak_allocated_bytes: int | None
    """GPU only: ``max_memory_allocated`` during a forward minus the memory before it; None on the CPU."""
    num_repeats: int

    @property
    def consistency_frac(self) -> float:
        """(I + W) / B - 1: the split backward's overhead over the fused one (about +0.15..+0.5 per CPU block)."""
        return (self.backward_input_s + self.backward_weight_s) / self.backward_s - 1.0


class Clock:
    """Time of a callable on ``device``: CUDA events on a GPU; on the CPU with one torch thread the calling
    thread's CPU time (``time.thread_time``: every op runs in this thread, and processes sharing the cores do
    not inflate it), else wall time (``time.perf_counter``: intra-op threads work in parallel)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.counter = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        """(seconds, result) of one call."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3, result
        t0 = self.counter()
        result = fn()
        return self.counter() - t0, result


@contextmanager
def count_saved_bytes(exclude: Sequence[torch.Tensor]) -> Iterator[dict[str, int]]:
    """Within the block, sum the bytes of unique storages autograd saves (``exclude``'s storages skipped)."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: set[int] = set()
    total = {"bytes": 0}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in skip and ptr not in seen:
            seen.add(ptr)
            total["bytes"] += storage.nbytes()
        # a detached alias: returning ``t`` itself would let an op that saves its own output hold that output
        # from its grad_fn, a cycle through C++ that the garbage collector cannot see (the graph, and every
        # activation in it, then outlived each measured op: `workbench profile` ran out of GPU memory)
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield total


def _spread(values: list[float]) -> tuple[float, float]:
    med = statistics.median(values)
    if len(values) < 4 or med <= 0:
        return med, 0.0
    q = statistics.quantiles(values, n=4)
    return med, (q[2] - q[0]) / med


def _scalar(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return out, torch.ones_like(out) if out.dim() else torch.ones((), dtype=out.dtype, device=out.device)


def measure_module(
    module: nn.Module,
    make_input: Callable[[], torch.Tensor],
    *,
    warmup: int = 2,
    repeats: int = 5,
    output_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> OpTiming:
    """Median F, B, I and W times of ``output_fn(module(make_input()))`` and its saved activation bytes.

    ``make_input`` returns a fresh input (float inputs should have ``requires_grad=True``; an integer
    input, e.g. tokens, has no input gradient and I is then 0). ``output_fn`` maps the module output to what
    the backward starts from (default: the output itself, seeded with a ones gradient).
    Raises ValueError if ``repeats < 1`` or ``warmup < 0``.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    device = next(module.parameters()).device
    clock, params = Clock(device), list(module.parameters())
    run = (lambda x: output_fn(module(x))) if output_fn else module
    samples: dict[str, list[float]] = {"f": [], "b": [], "i": [], "w": []}
    for step in range(warmup + repeats):
        one = _one_round(module, run, make_input, clock, params)
        if step >= warmup:
            for key, value in one.items():
                samples[key].append(value)
    stats = {k: _spread(v) for k, v in samples.items()}
    act, peak = _activation_bytes(module, run, make_input, params, device)
    return OpTiming(
        forward_s=stats["f"][0],
        backward_s=stats["b"][0],
        backward_input_s=stats["i"][0],
        backward_weight_s=stats["w"][0],
        forward_spread_frac=stats["f"][1],
        backward_spread_frac=stats["b"][1],
        backward_input_spread_frac=stats["i"][1],
        backward_weight_spread_frac=stats["w"][1],
        activation_bytes=act,
        peak_allocated_bytes=peak,
        num_repeats=repeats,
    )


def _one_round(
    module: nn.Module,
    run: Callable[[torch.Tensor], torch.Tensor],
    make_input: Callable[[], torch.Tensor],
    clock: Clock,
    params: list[nn.Parameter],
) -> dict[str, float]:
    """One forward + fused backward, then one forward + split backward; seconds per phase."""
    module.zero_grad(set_to_none=True)
    x = make_input()
    clock.sync()
    f_s, out = clock.time(lambda: run(x))
    out, seed = _scalar(out)
    b_s, _ = clock.time(lambda: torch.autograd.backward(out, seed))
    module.zero_grad(set_to_none=True)
    del out
    x = make_input()
    out, seed = _scalar(run(x))
    if x.requires_grad:
        i_s, groups = clock.time(lambda: backward_input(out, seed, x, params))
        w_s, _ = clock.time(lambda: backward_weight(params, groups))
    else:  # token ids, as on pipeline stage 0: no I, W is the whole (fused) backward
        i_s = 0.0
        w_s, _ = clock.time(lambda: torch.autograd.backward(out, seed))
    return {"f": f_s, "b": b_s, "i": i_s, "w": w_s}


def backward_input(
    out: torch.Tensor, seed: torch.Tensor, x: torch.Tensor, params: list[nn.Parameter]
) -> list[dict[str, Any]]:
    """I as torch's pipelining runtime runs it (``stage_backward_input``): the input gradient, keeping the
    graph and the gradients at the weight subgraphs' entry nodes for W. Returns the parameter groups."""
    _, groups = stage_backward_input([out], [seed], [x], iter(params))
    return groups


def backward_weight(params: list[nn.Parameter], groups: list[dict[str, Any]]) -> None:
    """W as torch's pipelining runtime runs it (``stage_backward_weight``): one ``autograd.grad`` per
    parameter group from the entry-node gradients I kept; accumulates into ``.grad``."""
    stage_backward_weight(iter(params), groups)


def _activation_bytes(
    module: nn.Module,
    run: Callable[[torch.Tensor], torch.Tensor],
    make_input: Callable[[], torch.Tensor],
    params: list[nn.Parameter],
    device: torch.device,
) -> tuple[int, int | None]:
    x = make_input()
    peak = None
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    with count_saved_bytes(params) as saved:
        out = run(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = int(torch.cuda.max_memory_allocated() - base)
    del out
    return saved["bytes"], peak
