"""DeepEP's low-latency MoE kernels (``low_latency_dispatch`` / ``low_latency_combine``), priced from DeepEP's own
kernel benchmark: a fixed time per kernel plus the bytes that leave the node at the NIC's achieved rate, beside the
bytes that stay on NVLink at NVLink's achieved rate.

The benchmark (deepseek-ai/DeepEP README, "Low-latency kernels with pure RDMA"; since the V2 release
``docs/legacy.md``; H800, one ConnectX-7 400 Gb/s NIC per GPU, 128 tokens per rank, hidden 7168, top-8, FP8
dispatch, BF16 combine) gives one time per EP size:

==========  =================  ================
EP          dispatch latency   combine latency
==========  =================  ================
8           77 us              114 us
16          118 us             195 us
32          155 us             273 us
64          173 us             314 us
128         192 us             369 us
256         194 us             360 us
==========  =================  ================

Its "RDMA bandwidth" column is the logical bytes of all top-k copies (local ones included) over that time: 128 x 8
x 7,392 bytes (7,168 FP8 values and 56 float scales, one per 128 channels) = 7.57 MB dispatched, 128 x 8 x 14,336
BF16 bytes = 14.68 MB combined. A copy goes to the GPU holding its expert; of an EP group of n GPUs with p on one
NVLink domain, (n - p) / n of the copies cross the network and (p - 1) / n move over NVLink. Least squares of
t = ``DEEPEP_LL_FIXED_S`` + network bytes / (``DEEPEP_LL_NIC_FRAC`` x 50 GB/s) over the ten internode times
(EP16-256, both kernels) gives 20.0 us and 41.8 GB/s (0.837 of the 400 Gb/s NIC) for both kernels alike; the EP8
times (one node, NVLink only, H800's 200 GB/s a direction) then give 129 GB/s on NVLink (``DEEPEP_LL_NVLINK_FRAC``,
0.645). The twelve times are reproduced within 8% (``tests/test_deepep.py``).

How it scales to a few tokens per rank: the bytes fall with the tokens and the fixed time stays. The fixed time is
what a kernel costs with no payload: its launch, the count signal every rank sends to every expert's owner (one
small RDMA write per expert and rank) and the wait for all of them, which no token count removes; a decode step of
2 tokens per rank at EP16 moves 59 KB over the network per dispatch (1.4 us at 41.8 GB/s), so it costs about the
fixed 20 us. ASSUMPTION: the fixed time is one number for every EP size, both kernels and NVLink-only groups (the
table has one token count, so the fixed time is read from how the times grow with the network share), and the two
achieved fractions carry over to other NICs and NVLink generations in proportion to their line rate.

Known error: the fixed time is the least certain number. Fitted to each kernel alone it is 35 us (dispatch) and 6 us
(combine); from the EP16 and EP32 rows alone, 44 and 39 us. It is a benchmark figure (ranks released together by a
barrier): in a running engine every dispatch also waits for the slowest rank, which it does not contain. Pplx's
IBGDA kernels, a different implementation, take 102.7 + 62.7 us at one token per GPU at EP16 (pplx-kernels README,
"Benchmark Results"), so another kernel design can carry several times this fixed time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.cost.placement import level_fanouts
from workbench.specs.hardware import ClusterSpec

Array = Any

DEEPEP_LL_FIXED_S = 20.0e-6
"""Time of one low-latency dispatch or combine kernel with no payload, seconds (module docstring: least squares
over DeepEP's internode low-latency times)."""

DEEPEP_LL_NIC_FRAC = 0.837
"""Achieved share of the NIC's line rate under the low-latency kernels: 41.8 GB/s of a 50 GB/s ConnectX-7 400 Gb/s
(module docstring)."""

DEEPEP_LL_NVLINK_FRAC = 0.645
"""Achieved share of NVLink's one-direction rate under the low-latency kernels: 129 GB/s of H800's 200 GB/s, from
DeepEP's EP8 row less the fixed time (module docstring)."""

DEEPEP_LL_SCALE_GROUP = 128
"""Channels per FP8 scale of the dispatch (DeepEP ``low_latency_dispatch(use_fp8=True)``: one float32 scale per
128 channels of a token, per-token 1x128 blocks as DeepSeek-V3's FP8 recipe, arXiv:2412.19437 section 3.3)."""

NVFP4_SCALE_GROUP = 16
"""Values per 1-byte FP8 (E4M3) scale of NVFP4 (NVIDIA's NVFP4 format: 16-value micro-blocks)."""


def dispatch_bytes_per_value(narrow: str | None) -> float:
    """Bytes one hidden value takes in a low-latency dispatch: ``fp8`` 1 plus a 4-byte scale per
    ``DEEPEP_LL_SCALE_GROUP`` values; ``fp4`` (NVFP4) half a byte plus a 1-byte scale per ``NVFP4_SCALE_GROUP``;
    None (BF16) 2. Raises ValueError for another name."""
    if narrow is None:
        return 2.0
    if narrow == "fp8":
        return 1.0 + 4.0 / DEEPEP_LL_SCALE_GROUP
    if narrow == "fp4":
        return 0.5 + 1.0 / NVFP4_SCALE_GROUP
    raise ValueError(f"dispatch_bytes_per_value: narrow must be 'fp8', 'fp4' or None, got {narrow!r}")


def deepep_low_latency_s(
    cluster: ClusterSpec, token_bytes: Array, copies: int, n: Array, stride: Array
) -> Array:
    """One low-latency dispatch or combine kernel of an EP group of ``n`` GPUs spaced ``stride`` apart on
    ``cluster``, where each rank holds ``token_bytes`` bytes of tokens (tokens x hidden x bytes per value, as sent)
    and each token goes to ``copies`` experts spread uniformly over the group: ``DEEPEP_LL_FIXED_S`` plus the
    slower of the network bytes (token_bytes x copies x (n - p) / n, p = the group's GPUs on one NVLink domain)
    at ``DEEPEP_LL_NIC_FRAC`` of the network level's per-GPU rate and the NVLink bytes (token_bytes x copies x
    (p - 1) / n) at ``DEEPEP_LL_NVLINK_FRAC`` of the NVLink level's rate, seconds; 0 where n <= 1. Broadcasts over
    arrays. Source and accuracy: the module docstring (DeepEP README's low-latency table, within 8%)."""
    n_arr = np.asarray(n, dtype=float)
    fans = level_fanouts(cluster, np.asarray(stride), n_arr)
    ppn = np.asarray(fans[0], dtype=float)
    copy_bytes = np.asarray(token_bytes, dtype=float) * copies
    nvlink = cluster.levels[0].bytes_per_s * DEEPEP_LL_NVLINK_FRAC
    nic: Array = np.inf  # the slowest level the group crosses beyond NVLink, per GPU
    for level, fan in zip(cluster.levels[1:], fans[1:], strict=True):
        nic = np.where(np.asarray(fan) > 1, np.minimum(nic, level.bytes_per_s * DEEPEP_LL_NIC_FRAC), nic)
    with np.errstate(divide="ignore", invalid="ignore"):
        on_nvlink = copy_bytes * (ppn - 1.0) / n_arr / nvlink
        on_network = copy_bytes * (n_arr - ppn) / n_arr / nic
    t = DEEPEP_LL_FIXED_S + np.maximum(np.nan_to_num(on_nvlink), np.nan_to_num(on_network))
    return np.where(n_arr > 1, t, 0.0)
