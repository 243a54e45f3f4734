"""Measure one module's forward, backward-for-inputs (I), backward-for-weights (W) and fused backward (B).

The split follows the zero-bubble decomposition (Qi et al. 2023, arXiv:2401.10241, section 2): I is the
backward with respect to the module's input only (``torch.autograd.grad(out, x)``; autograd then skips
every weight-gradient matmul), W is the weight-gradient matmuls of every ``nn.Linear``, dW = g^T a, from
the output gradients g captured during I and the inputs a saved in the forward, plus the small elementwise
weight gradients of norms are taken inside I (they are elementwise and cheap). For a module whose input is
token ids (the embedding) I is 0 and W is the whole backward. I + W should equal the fused B up to noise;
``consistency_frac`` reports (I + W) / B - 1.

Timing: ``time.perf_counter`` on the CPU; CUDA events (``torch.cuda.Event(enable_timing=True)``) and
``torch.cuda.max_memory_allocated`` on a GPU. Activation bytes are counted on every device with
``torch.autograd.graph.saved_tensors_hooks``: the unique storages saved for backward in the forward, the
module's parameters excluded. Each quantity is the median of ``repeats`` runs after ``warmup`` runs; the
spread is the interquartile range over the median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


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
        """(I + W) / B - 1: how far the split backward is from the fused one."""
        return (self.backward_input_s + self.backward_weight_s) / self.backward_s - 1.0


class Clock:
    """Wall time of a callable on ``device``: perf_counter on the CPU, CUDA events on a GPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

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
        t0 = time.perf_counter()
        result = fn()
        return time.perf_counter() - t0, result


@contextmanager
def count_saved_bytes(exclude: list[torch.Tensor]) -> Iterator[dict[str, int]]:
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
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield total


class _LinearGrads:
    """Forward hooks on every ``nn.Linear`` that keep (input, output-gradient) pairs for a later W pass."""

    def __init__(self, module: nn.Module) -> None:
        self.pairs: list[tuple[nn.Linear, torch.Tensor, list[torch.Tensor]]] = []
        self.handles = [
            m.register_forward_hook(self._hook) for m in module.modules() if isinstance(m, nn.Linear)
        ]

    def _hook(self, mod: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        box: list[torch.Tensor] = []
        if out.requires_grad:
            out.register_hook(lambda g: box.append(g))
        self.pairs.append((mod, args[0].detach(), box))  # type: ignore[arg-type]

    def weight_grads(self) -> None:
        """The W pass: dW = g^T a (and db = sum g) for every captured linear call."""
        for mod, inp, box in self.pairs:
            if not box:
                continue
            g = box[0].reshape(-1, box[0].shape[-1])
            grad_w = g.t() @ inp.reshape(-1, inp.shape[-1])
            mod.weight.grad = grad_w if mod.weight.grad is None else mod.weight.grad + grad_w
            if mod.bias is not None:
                mod.bias.grad = g.sum(0)

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.pairs.clear()


def _other_params(module: nn.Module) -> list[nn.Parameter]:
    linear = {
        id(p) for m in module.modules() if isinstance(m, nn.Linear) for p in m.parameters(recurse=False)
    }
    return [p for p in module.parameters() if id(p) not in linear and p.requires_grad]


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
    grads = _LinearGrads(module)
    try:
        out, seed = _scalar(run(x))
        if x.requires_grad:
            i_s, _ = clock.time(lambda: _input_pass(out, seed, x, _other_params(module)))
            w_s, _ = clock.time(grads.weight_grads)
        else:  # token ids: no input gradient, the whole backward is weight gradients
            i_s = 0.0
            w_s, _ = clock.time(lambda: torch.autograd.backward(out, seed))
    finally:
        grads.close()
    return {"f": f_s, "b": b_s, "i": i_s, "w": w_s}


def _input_pass(out: torch.Tensor, seed: torch.Tensor, x: torch.Tensor, others: list[nn.Parameter]) -> None:
    """I: gradient of the input; the cheap elementwise weight gradients (norms) ride along."""
    grads = torch.autograd.grad(out, [x, *others], seed)
    for param, grad in zip(others, grads[1:], strict=True):
        param.grad = grad


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
