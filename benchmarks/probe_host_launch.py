"""Host cost of launching kernels from eager PyTorch, and of a dropless MoE expert block, on a CUDA GPU's host.

Why: ``host_s_per_kernel`` of the execution profiles (``profiles/frameworks/*.toml``) prices the CPU time a stack
spends issuing one kernel; a MoE layer that syncs the host on its token counts (dropless routing, grouped GEMMs
taking their splits from the host) cannot queue work ahead, so that CPU time is a floor under the layer. Its
prior was a round figure ("eager PyTorch issues an op in ~10-20 us"); this probe measures it on the host of the
lent GPU, apart from any step time. Output of the run on the lent H200:
``profiles/measured/real-runs/host-launch-probe-h200.txt``.

What it times (CUDA events for the GPU, ``time.perf_counter`` for the host; kernels counted with
``torch.profiler``):

1. ``add``: ``torch.add(a, b, out=c)`` on 1,024-element tensors, ``CALLS`` back to back: host seconds per call.
2. ``linear_chain``: a chain of ``CHAIN`` small ``nn.Linear`` layers (256 x 256, 64 tokens), forward and backward
   with autograd: host seconds per kernel launched (the tiny kernels finish before the next launch, so the
   wall time is the host's).
3. ``experts_loop``: one dropless expert block of Qwen3-30B-A3B at expert parallelism 8 (16 local experts,
   hidden 2048, expert FFN 768 gated, 4096 tokens x top-8 routed copies evenly spread: 2,048 per expert), bf16:
   token counts read on the host (``tolist``, the sync), then per expert the gate/up GEMM, SiLU x up and the down
   GEMM, forward and backward; wall time, GPU busy time (the profiler's kernel durations, summed) and kernels.
4. ``experts_grouped``: the same block with ``torch._grouped_mm`` (one grouped GEMM per projection), where this
   torch has it.

Usage (CUDA only): ``python benchmarks/probe_host_launch.py``. Each figure: median of ``REPEATS`` timed runs
after ``WARMUP`` untimed ones.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

CALLS = 2000
CHAIN = 32
WARMUP, REPEATS = 3, 7
HIDDEN, EXPERT_FFN, LOCAL_EXPERTS, PER_EXPERT = 2048, 768, 16, 2048
"""Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, moe_intermediate_size 768, 128 experts,
top-8) at ep 8: 16 experts per rank, 4096 x 8 / 16 = 2048 routed copies per local expert when balanced."""


def _median_s(fn: Callable[[], object]) -> float:
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _kernels(fn: Callable[[], object]) -> tuple[int, float]:
    """(CUDA kernels launched, their summed device seconds) of one call of ``fn``."""
    fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.device_time_total for e in kernels)
    return len(kernels), busy_us * 1e-6


def probe_add(dev: torch.device) -> str:
    a, b, c = (torch.randn(1024, device=dev) for _ in range(3))

    def run() -> None:
        for _ in range(CALLS):
            torch.add(a, b, out=c)

    wall = _median_s(run)
    return f"add: {CALLS} calls in {wall * 1e3:.2f} ms -> {wall / CALLS * 1e6:.2f} us of host per eager call"


def probe_linear_chain(dev: torch.device) -> str:
    layers = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(CHAIN)]).to(dev)
    x = torch.randn(64, 256, device=dev, requires_grad=True)

    def run() -> None:
        layers(x).sum().backward()

    wall = _median_s(run)
    n, busy = _kernels(run)
    return (
        f"linear_chain: {CHAIN} Linear(256,256) fwd+bwd: wall {wall * 1e3:.3f} ms, {n} kernels, GPU busy "
        f"{busy * 1e3:.3f} ms -> {wall / n * 1e6:.2f} us of wall per kernel"
    )


def _expert_weights(dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    w_in = torch.randn(LOCAL_EXPERTS, 2 * EXPERT_FFN, HIDDEN, device=dev, dtype=torch.bfloat16) * 0.02
    w_out = torch.randn(LOCAL_EXPERTS, HIDDEN, EXPERT_FFN, device=dev, dtype=torch.bfloat16) * 0.02
    return w_in.requires_grad_(), w_out.requires_grad_()


def probe_experts_loop(dev: torch.device) -> str:
    w_in, w_out = _expert_weights(dev)
    x = torch.randn(LOCAL_EXPERTS * PER_EXPERT, HIDDEN, device=dev, dtype=torch.bfloat16, requires_grad=True)
    counts = torch.full((LOCAL_EXPERTS,), PER_EXPERT, device=dev, dtype=torch.int64)
    grad = torch.randn(LOCAL_EXPERTS * PER_EXPERT, HIDDEN, device=dev, dtype=torch.bfloat16)

    def run() -> None:
        splits = counts.tolist()  # the host sync of dropless routing
        outs = []
        for e, part in enumerate(torch.split(x, splits)):
            gate, up = F.linear(part, w_in[e]).chunk(2, dim=-1)
            outs.append(F.linear(F.silu(gate) * up, w_out[e]))
        torch.cat(outs).backward(grad)

    wall = _median_s(run)
    n, busy = _kernels(run)
    flop = 3 * 2 * LOCAL_EXPERTS * PER_EXPERT * HIDDEN * 3 * EXPERT_FFN
    return (
        f"experts_loop: {LOCAL_EXPERTS} experts x {PER_EXPERT} tokens, hidden {HIDDEN}, ffn {EXPERT_FFN}, bf16, "
        f"fwd+bwd: wall {wall * 1e3:.3f} ms, GPU busy {busy * 1e3:.3f} ms, {n} kernels, "
        f"{flop / wall / 1e12:.0f} TFLOP/s of wall, {flop / busy / 1e12:.0f} TFLOP/s of busy"
    )


def probe_experts_grouped(dev: torch.device) -> str:
    grouped = getattr(torch, "_grouped_mm", None)
    if grouped is None:
        return "experts_grouped: this torch has no torch._grouped_mm"
    w_in, w_out = _expert_weights(dev)
    x = torch.randn(LOCAL_EXPERTS * PER_EXPERT, HIDDEN, device=dev, dtype=torch.bfloat16, requires_grad=True)
    offs = torch.arange(1, LOCAL_EXPERTS + 1, device=dev, dtype=torch.int32) * PER_EXPERT
    grad = torch.randn(LOCAL_EXPERTS * PER_EXPERT, HIDDEN, device=dev, dtype=torch.bfloat16)

    def run() -> None:
        h = grouped(x, w_in.transpose(-2, -1), offs=offs)
        gate, up = h.chunk(2, dim=-1)
        out = grouped(F.silu(gate) * up, w_out.transpose(-2, -1), offs=offs)
        out.backward(grad)  # a dense gradient: the grouped GEMM's backward refuses sum()'s stride-0 one

    try:
        wall = _median_s(run)
        n, busy = _kernels(run)
    except (RuntimeError, NotImplementedError) as exc:
        return f"experts_grouped: torch._grouped_mm failed: {str(exc).splitlines()[0]}"
    flop = 3 * 2 * LOCAL_EXPERTS * PER_EXPERT * HIDDEN * 3 * EXPERT_FFN
    return (
        f"experts_grouped: same block with torch._grouped_mm: wall {wall * 1e3:.3f} ms, GPU busy "
        f"{busy * 1e3:.3f} ms, {n} kernels, {flop / wall / 1e12:.0f} TFLOP/s of wall, "
        f"{flop / busy / 1e12:.0f} TFLOP/s of busy"
    )


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("probe_host_launch: needs a CUDA device")
    dev = torch.device("cuda")
    print(
        f"# {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"host {platform.processor() or platform.machine()}, python {platform.python_version()}"
    )
    for probe in (probe_add, probe_linear_chain, probe_experts_loop, probe_experts_grouped):
        print(probe(dev), flush=True)


if __name__ == "__main__":
    main()
