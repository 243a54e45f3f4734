"""One Llama 3.1 8B decoder layer on a CUDA GPU: bf16 weights against fp32 weights under ``torch.autocast``.

Why: ``workbench run --dtype bf16`` keeps fp32 weights under autocast (as mixed-precision training keeps its
master weights), while ``workbench profile --dtype bf16`` times layers whose weights are bf16. The gap between
the two is part of what separates a torch-profile prediction from a real bf16 run. Output of the run on the
lent H100: ``profiles/measured/real-runs/autocast-layer-probe.txt``.

Usage (CUDA only): ``python benchmarks/probe_autocast_layer.py``. Times: mean of 10 forward and backward
passes of one layer at 1 x 4096 tokens after 5 warm-ups, CUDA events.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from workbench_backends.torch_model import DecoderLayer

from workbench.presets.catalog import load_model

TOKENS = 4096
WARMUP, REPEATS = 5, 10


def time_layer(
    layer: torch.nn.Module, precision: Callable[[], Any], input_dtype: torch.dtype, hidden: int
) -> tuple[float, float]:
    """Mean (forward, backward) milliseconds of ``layer`` on one (1, TOKENS, hidden) input."""
    dev = next(layer.parameters()).device
    x = torch.randn(1, TOKENS, hidden, device=dev, dtype=input_dtype, requires_grad=True)

    def forward() -> torch.Tensor:
        with precision():
            return layer(x)

    for _ in range(WARMUP):
        y = forward()
        y.backward(torch.ones_like(y))
    start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    fwd_ms = bwd_ms = 0.0
    for _ in range(REPEATS):
        layer.zero_grad(set_to_none=False)
        torch.cuda.synchronize()
        start.record()
        y = forward()
        mid.record()
        y.backward(torch.ones_like(y))
        end.record()
        end.synchronize()
        fwd_ms += start.elapsed_time(mid)
        bwd_ms += mid.elapsed_time(end)
    return fwd_ms / REPEATS, bwd_ms / REPEATS


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("probe_autocast_layer: needs a CUDA device")
    spec = load_model("llama-3.1-8b")
    dev = torch.device("cuda")
    bf16 = DecoderLayer(spec, dtype=torch.bfloat16, device=dev)
    fp32 = DecoderLayer(spec, dtype=torch.float32, device=dev)

    def autocast() -> Any:
        return torch.autocast("cuda", dtype=torch.bfloat16)

    cases = [
        ("bf16 weights", bf16, contextlib.nullcontext, torch.bfloat16),
        ("fp32 weights + autocast", fp32, autocast, torch.float32),
        ("bf16 weights again", bf16, contextlib.nullcontext, torch.bfloat16),
        ("fp32 weights + autocast, bf16 input", fp32, autocast, torch.bfloat16),
    ]
    for name, layer, precision, dtype in cases:
        fwd, bwd = time_layer(layer, precision, dtype, spec.hidden_size)
        print(f"{name}: fwd {fwd:.2f} ms bwd {bwd:.2f} ms")


if __name__ == "__main__":
    main()
