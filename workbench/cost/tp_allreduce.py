"""The tensor-parallel all-reduce a serving engine runs, priced from its kernel family's published latency table.

Serving engines do not run NCCL for the small all-reduces of a decode step: vLLM's custom all-reduce
(``csrc/custom_all_reduce.cuh``: one-stage for small buffers, two-stage above, up to its 8 MiB buffer; vLLM PR
#2192) and TensorRT-LLM's custom one-shot / two-shot kernels (``customAllReduceKernels.cu``, chosen by its AUTO
strategy below its size limits) run in one kernel over NVLink (one-shot: every rank reads every peer's buffer;
two-shot: reduce-scatter then all-gather), with no ring steps. NCCL's tuning model (:mod:`workbench.cost.comm`)
prices an all-reduce of a few KB on 8 H100 at ~15 us, where the table below gives these kernels 6-10 us.

An engine profile names its family (``EngineProfile.tp_all_reduce``); :func:`tp_all_reduce_s` prices a tensor-
parallel all-reduce with that family's table where one was published for the device and group size, and with
NCCL's model (:func:`workbench.cost.comm.all_reduce_s`, the one path training uses too) otherwise: for the
``nccl`` family, for devices or group sizes with no table, and for groups that leave one NVLink domain.

Between a table's sizes the time is interpolated linearly in bytes (alpha + beta within each segment); below
its smallest size it is the smallest size's time (the kernels are latency-bound there); above its largest size
the engine hands the call to its two-shot kernel or NCCL, priced as the larger of the table's last time and
NCCL's model (a bigger message never takes less time than the table's largest one). The tables are measured
times: ``efficiency_frac`` applies only where NCCL's model prices the call.

Known error: the one published table covering both families on H100 at tp 2, 4 and 8 (below) was timed
without CUDA graphs, on the host over 100 back-to-back calls, so it includes what launch time the kernels do not
hide (at a few KB the rate of launches, ~4-10 us a call, may be what it measures); under the engines' CUDA
graphs the kernels may run faster. The microbenchmark's ranks also start together (a barrier before the loop),
where in a forward pass the kernel waits for the slowest rank. Both are the table's own spread; nothing here is
fitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.cost.comm import all_reduce_s
from workbench.specs.engine import TP_ALL_REDUCES
from workbench.specs.hardware import ClusterSpec

Array = Any


@dataclass(frozen=True, slots=True)
class LatencyTable:
    """Published latency of one all-reduce kernel family on one device and group size.

    ``sizes_bytes``: payload (the whole buffer, as nccl-tests' size), ascending; ``seconds``: one call each."""

    kernel: str
    devices: tuple[str, ...]
    """Device preset ids the table holds for (measured on the first)."""
    n: int
    sizes_bytes: tuple[float, ...]
    seconds: tuple[float, ...]
    source: str


_SGL2904 = (
    "sgl-project/sglang PR #2904 ('optimize custom allreduce kernel', 2025-01), 'unit test performance in H100 "
    "(without cuda graph)', tables 'vllm' (vLLM's custom all-reduce) and 'custom allreduce' (TensorRT-LLM's "
    "one-shot/two-shot kernels as sgl_kernel ports them), latency in ms at tp 2/4/8 for data sizes 512, 4096, "
    "32768, 262144, 524288 and 1048576. The test (sgl-kernel tests/test_trt_reduce.py, performance_worker, as "
    "stored at sgl-project/sglang@4fd490c; ASSUMED the PR ran the same loop) makes a float32 tensor of that many "
    "elements, so the payloads are 4x: 2 KiB .. 4 MiB; it times 100 "
    "back-to-back calls on the host between two synchronizes. The H200's NVLink 4 fabric is the H100's (18 "
    "links, 900 GB/s): ASSUMED the same times"
)
_HOPPER = ("h100-sxm5-80gb", "h100-sxm5-96gb", "h200-sxm-141gb")
_SGL2904_BYTES = (2048.0, 16384.0, 131072.0, 1048576.0, 2097152.0, 4194304.0)


def _ms(*values: float) -> tuple[float, ...]:
    return tuple(v * 1e-3 for v in values)


TABLES: tuple[LatencyTable, ...] = (
    LatencyTable("vllm_custom", _HOPPER, 2, _SGL2904_BYTES, _ms(0.0095, 0.0088, 0.0087, 0.0129, 0.0177, 0.0266),
                 _SGL2904),
    LatencyTable("vllm_custom", _HOPPER, 4, _SGL2904_BYTES, _ms(0.0091, 0.0085, 0.0092, 0.0206, 0.0269, 0.0402),
                 _SGL2904),
    LatencyTable("vllm_custom", _HOPPER, 8, _SGL2904_BYTES, _ms(0.0101, 0.0093, 0.0118, 0.0241, 0.0304, 0.0450),
                 _SGL2904),
    LatencyTable("trtllm_custom", _HOPPER, 2, _SGL2904_BYTES,
                 _ms(0.0037, 0.0039, 0.0045, 0.0079, 0.0125, 0.0199), _SGL2904),
    LatencyTable("trtllm_custom", _HOPPER, 4, _SGL2904_BYTES,
                 _ms(0.0048, 0.0037, 0.0048, 0.0139, 0.0202, 0.0311), _SGL2904),
    LatencyTable("trtllm_custom", _HOPPER, 8, _SGL2904_BYTES,
                 _ms(0.0059, 0.0057, 0.0078, 0.0167, 0.0221, 0.0338), _SGL2904),
)  # fmt: skip
"""Every published table, one per (family, device, group size)."""


def kernel_table(kernel: str, device_id: str, n: int) -> LatencyTable | None:
    """The family's table for this device and group size, or None (NCCL's model prices the call).

    Raises ValueError for a family not in ``TP_ALL_REDUCES``."""
    if kernel not in TP_ALL_REDUCES:
        raise ValueError(f"tp all-reduce kernel must be one of {', '.join(TP_ALL_REDUCES)}; got {kernel!r}")
    return next((t for t in TABLES if t.kernel == kernel and t.n == n and device_id in t.devices), None)


def priced_table(cluster: ClusterSpec, n: int, kernel: str) -> LatencyTable | None:
    """The published table that prices a tp all-reduce of ``kernel`` over ``n`` adjacent ranks of ``cluster``, or
    None where NCCL's model does: the ``nccl`` family, no table for the device and ``n``, ``n`` <= 1, or a group
    that leaves the first (NVLink) level. Raises ValueError for a family not in ``TP_ALL_REDUCES``."""
    table = kernel_table(kernel, cluster.device.id, int(n))
    inside = n <= (cluster.levels[0].span or cluster.devices_per_node)
    return table if inside and n > 1 else None


def tp_all_reduce_s(
    cluster: ClusterSpec, payload_bytes: Array, n: int, kernel: str = "nccl", efficiency_frac: float = 1.0
) -> Array:
    """All-reduce of a ``payload_bytes`` buffer (any shape) over ``n`` adjacent ranks with the engine's kernel
    family (see the module docstring), seconds, same shape; 0 where n == 1.

    Raises ValueError for an unknown ``kernel``."""
    table = priced_table(cluster, n, kernel)
    nccl = all_reduce_s(cluster, payload_bytes, n, 1, efficiency_frac)
    if table is None:
        return nccl
    payload = np.asarray(payload_bytes, dtype=float)
    sizes, seconds = np.asarray(table.sizes_bytes), np.asarray(table.seconds)
    t = np.interp(payload, sizes, seconds)
    return np.where(payload > sizes[-1], np.maximum(seconds[-1], nccl), t)
