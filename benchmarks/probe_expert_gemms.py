"""The GEMMs of MoE experts on a CUDA GPU: per-expert shapes by tokens per expert, and 16 experts on 1 or 4 streams.

Why: the kernel table's GEMM curve is by FLOPs alone, keeping the most efficient shape of each FLOP bin
(``workbench microbench``); an expert's GEMMs are narrow (Qwen3-30B-A3B: hidden 2048, expert FFN 768), so the
curve may be optimistic for them. And Transformer Engine's GroupedLinear runs one cuBLAS GEMM per expert
round-robin on 4 streams (``moe_grouped_gemm_streams`` of the Megatron-Core profile): how much of the device
those concurrent small GEMMs fill is measured here, apart from any step time. Output of the run on the lent
H200: ``profiles/measured/real-runs/expert-gemms-h200.csv`` (one row per GEMM or group) and
``expert-gemms-h200.txt``.

Rows (``kind``):
- ``expert``: one expert's GEMM of ``model`` (hidden, expert FFN from each model's config.json), ``proj``
  ``fc1`` (up+gate, out = 2 x FFN) or ``fc2`` (down), ``pass`` fwd (tokens, out, in) ``nt``, dgrad (tokens, in,
  out) ``nn`` or wgrad (out, in, tokens) ``tn``, at ``tokens`` routed copies per expert; bf16 and fp8
  (``torch._scaled_mm``, unit scales), timed by ``workbench_backends.microbench.measure_gemms`` (CUDA graph
  replays).
- ``group``: Qwen3-30B-A3B's 16 local experts at ep 8, fc1 forward, ``streams`` 1 (one after another) or 4
  (round-robin, as TE's multi-stream cuBLAS), captured in one CUDA graph; ``time_s`` for all 16.

Usage (CUDA only): ``python benchmarks/probe_expert_gemms.py OUT.csv``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import polars as pl
import torch
from workbench_backends.microbench import (
    Gemm,
    default_sweep,
    gemm_fn,
    measure_gemms,
    time_per_call_s,
    training_gemms,
)

MODELS = (
    ("qwen3-30b-a3b", 2048, 768),  # Qwen/Qwen3-30B-A3B: hidden_size, moe_intermediate_size
    ("qwen3-235b-a22b", 4096, 1536),  # Qwen/Qwen3-235B-A22B
    ("deepseek-v3", 7168, 2048),  # deepseek-ai/DeepSeek-V3
    ("gpt-oss-120b", 2880, 2880),  # openai/gpt-oss-120b: hidden_size, intermediate_size
    ("mixtral-8x7b", 4096, 14336),  # mistralai/Mixtral-8x7B-v0.1
)
TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192)
GROUP_EXPERTS, GROUP_TOKENS, STREAMS = 16, (256, 1024, 2048, 4096), (1, 4)


def expert_gemms() -> list[Gemm]:
    out = []
    for name, hidden, ffn in MODELS:
        for proj, fan_in, fan_out in (("fc1", hidden, 2 * ffn), ("fc2", ffn, hidden)):
            for t in TOKENS:
                out += training_gemms(t, fan_in, fan_out, f"{name} {proj} t{t}")
    return out


def group_rows(dev: torch.device) -> list[dict[str, object]]:
    sweep = default_sweep("cuda")
    _, hidden, ffn = MODELS[0]
    rows: list[dict[str, object]] = []
    for t in GROUP_TOKENS:
        fns = [gemm_fn("bf16", Gemm(t, 2 * ffn, hidden, "nt"), dev) for _ in range(GROUP_EXPERTS)]
        for n in STREAMS:
            streams = [torch.cuda.Stream(dev) for _ in range(n)]

            def group(
                fns: list[Callable[[], torch.Tensor]] = fns, streams: list[torch.cuda.Stream] = streams
            ) -> None:
                cur = torch.cuda.current_stream(dev)
                for s in streams:
                    s.wait_stream(cur)
                for i, fn in enumerate(fns):
                    with torch.cuda.stream(streams[i % len(streams)]):
                        fn()
                for s in streams:
                    cur.wait_stream(s)

            time_s = time_per_call_s(
                group, dev, warmup=1, repeats=3, min_sample_s=sweep.min_sample_s, graph=True
            )
            flop = 2.0 * GROUP_EXPERTS * t * 2 * ffn * hidden
            rows.append(
                dict(kind="group", what=f"{MODELS[0][0]} fc1 fwd x{GROUP_EXPERTS} streams{n}", dtype="bf16")
                | dict(m=t, n=2 * ffn, k=hidden, flop=flop, time_s=time_s, achieved_flop_per_s=flop / time_s)
            )
    return rows


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("probe_expert_gemms: needs a CUDA device")
    if len(sys.argv) != 2:
        raise SystemExit("usage: python benchmarks/probe_expert_gemms.py OUT.csv")
    dev = torch.device("cuda")
    sweep = default_sweep("cuda")
    shapes = expert_gemms()
    parts = [
        measure_gemms(dtype, shapes, dev, warmup=1, repeats=3, sweep=sweep).with_columns(
            kind=pl.lit("expert")
        )
        for dtype in ("bf16", "fp8")
    ]
    cols = ["kind", "what", "dtype", "m", "n", "k", "flop", "time_s", "achieved_flop_per_s"]
    table = pl.concat([p.select(cols) for p in parts] + [pl.DataFrame(group_rows(dev)).select(cols)])
    table.write_csv(sys.argv[1])
    with pl.Config(tbl_rows=-1, tbl_width_chars=200):
        print(table.filter(pl.col("kind") == "group"))


if __name__ == "__main__":
    main()
