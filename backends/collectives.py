"""Collective micro-benchmarks over ``torch.distributed`` (gloo on CPU, NCCL on GPU) and their alpha-beta fit.

``run_collectives`` spawns ``num_ranks`` processes with ``torch.multiprocessing`` on one host, times
all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over message sizes (median of repeats,
rank 0's clock after a barrier), and fits one latency and one bandwidth per network level to all of them
with least squares on the algorithmic factors of :mod:`workbench.cost.comm` (Thakur, Rabenseifner & Gropp,
IJHPCA 2005): t = c_alpha(n) alpha + c_beta(n) P / B, e.g. all-reduce c_alpha = 2(n-1), c_beta = 2(n-1)/n.
On one host every message crosses the ``host`` level (loopback or shared memory; NVLink on a GPU node).
"""

from __future__ import annotations

import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
DEFAULT_SIZES_BYTES = tuple(2**k for k in range(12, 23, 2))
"""4 KiB .. 4 MiB per rank: enough to separate the latency and the bandwidth terms on a host."""


def factors(collective: str, n: int) -> tuple[float, float]:
    """(latency steps, bandwidth share) of one collective of a P-byte buffer over n ranks (ring algorithms)."""
    table = {
        "all_reduce": (2 * (n - 1), 2 * (n - 1) / n),
        "all_gather": (n - 1, (n - 1) / n),
        "reduce_scatter": (n - 1, (n - 1) / n),
        "all_to_all": (n - 1, (n - 1) / n),
        "send_recv": (1, 1.0),
    }
    return table[collective]


def fit_alpha_beta(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(latency_s, bytes_per_s) by least squares over timed rows (collective, num_ranks, message_bytes, time_s).
    Raises ValueError with fewer than 2 rows or a non-positive fitted bandwidth."""
    if len(rows) < 2:
        raise ValueError(f"need at least 2 timed collectives to fit alpha and beta, got {len(rows)}")
    a = np.array(
        [
            [
                factors(r["collective"], r["num_ranks"])[0],
                factors(r["collective"], r["num_ranks"])[1] * r["message_bytes"],
            ]
            for r in rows
        ]
    )
    t = np.array([r["time_s"] for r in rows])
    (alpha, inv_bw), *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)  # relative error
    if inv_bw <= 0:
        raise ValueError("fitted bandwidth is not positive: the timings are dominated by noise")
    return max(float(alpha), 0.0), 1.0 / float(inv_bw)


def _time_one(
    dist: Any, torch: Any, op: str, nbytes: int, rank: int, n: int, device: Any, repeats: int
) -> float:
    numel = max(n, nbytes // 4 // n * n)
    buf = torch.ones(numel, device=device)
    out = torch.empty_like(buf)
    parts = list(buf.chunk(n))

    def run() -> None:
        if op == "all_reduce":
            dist.all_reduce(buf)
        elif op == "all_gather":
            getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, parts[rank].contiguous())
        elif op == "reduce_scatter":
            getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(parts[rank].clone(), buf)
        elif op == "all_to_all":
            dist.all_to_all_single(out, buf)
        elif rank == 0:
            dist.send(buf, 1)
        elif rank == 1:
            dist.recv(buf, 0)

    times = []
    for k in range(repeats + 2):
        dist.barrier()
        t0 = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if k >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _worker(
    rank: int, n: int, backend: str, init_file: str, sizes: tuple[int, ...], repeats: int, result_file: str
) -> None:
    import json

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=n)
    rows = []
    try:
        for op in COLLECTIVES:
            for size in sizes:
                t = _time_one(dist, torch, op, size, rank, n, device, repeats)
                rows.append(
                    {"collective": op, "num_ranks": n, "message_bytes": size, "time_s": t, "level": "host"}
                )
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(result_file).write_text(json.dumps(rows))


def run_collectives(
    *,
    backend: str = "gloo",
    num_ranks: int = 2,
    sizes: tuple[int, ...] = DEFAULT_SIZES_BYTES,
    repeats: int = 5,
) -> tuple[Any, list[dict[str, Any]]]:
    """Time every collective over ``num_ranks`` local processes; returns (polars table, fit per level).

    ValueError for fewer than 2 ranks, or NCCL without enough GPUs.
    """
    import json

    import polars as pl
    import torch
    import torch.multiprocessing as mp

    if num_ranks < 2:
        raise ValueError(f"num_ranks must be >= 2 for a collective, got {num_ranks}")
    if backend == "nccl" and torch.cuda.device_count() < num_ranks:
        raise ValueError(f"nccl needs {num_ranks} GPUs, {torch.cuda.device_count()} visible")
    with tempfile.TemporaryDirectory() as tmp:
        init_file, result = os.path.join(tmp, "init"), os.path.join(tmp, "rows.json")
        mp.spawn(
            _worker, args=(num_ranks, backend, init_file, sizes, repeats, result), nprocs=num_ranks, join=True
        )
        rows = json.loads(Path(result).read_text())
    alpha, bw = fit_alpha_beta(rows)
    fit = [
        {
            "level": "host",
            "num_ranks": num_ranks,
            "latency_s": alpha,
            "bytes_per_s": bw,
            "backend": backend,
            "host": socket.gethostname(),
        }
    ]
    return pl.DataFrame(rows), fit
