"""Collective and point-to-point times in the alpha-beta model, on a cluster's network levels.

Single level, n ranks, payload P bytes per rank, link bandwidth B (one direction per device), latency a
(Thakur, Rabenseifner & Gropp, IJHPCA 2005; Chan et al. 2007):

- ring all-reduce: 2(n-1) a + 2 (n-1)/n P / B
- ring reduce-scatter or all-gather: (n-1) a + (n-1)/n P / B (P: the full, unsharded buffer)
- double-binary-tree all-reduce (NCCL's tree): 2 log2(n) a + 2 P / B (bandwidth term of Sanders et al. 2009)
- all-to-all (pairwise): (n-1) a + (n-1)/n P / B
- point-to-point: a + P / B

Hierarchical collectives (a group that spans levels, e.g. NVLink inside a node and InfiniBand across):
the reduce-scatter runs level by level from the innermost outward on a shrinking payload (P / fan-outs
below), and the all-gather mirrors it; ``placement.level_fanouts`` gives the fan-out per level. With one
NIC per GPU this equals NCCL's multi-ring bandwidth across nodes (every GPU drives its own NIC).
All-to-all traffic splits by destination: the share of peers reached over each level travels on that
level's links in parallel; the slowest level sets the time.

``efficiency_frac`` scales every bandwidth (achieved bus bandwidth over the link's, a calibration value).
All functions take scalars or numpy arrays for payloads, sizes and strides and broadcast elementwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.cost.placement import level_fanouts, p2p_level_index
from workbench.specs.hardware import ClusterSpec

Array = Any


def ring_all_reduce_s(payload_bytes: Array, n: Array, bytes_per_s: float, latency_s: float) -> Array:
    """One-level ring all-reduce: 2(n-1) alpha + 2(n-1)/n P / B (0 when n = 1)."""
    return 2 * (n - 1) * latency_s + 2 * (n - 1) / n * payload_bytes / bytes_per_s


def ring_reduce_scatter_s(payload_bytes: Array, n: Array, bytes_per_s: float, latency_s: float) -> Array:
    """One-level ring reduce-scatter (or all-gather) of a P-byte buffer: (n-1) alpha + (n-1)/n P / B."""
    return (n - 1) * latency_s + (n - 1) / n * payload_bytes / bytes_per_s


def tree_all_reduce_s(payload_bytes: Array, n: Array, bytes_per_s: float, latency_s: float) -> Array:
    """One-level double binary tree all-reduce: 2 log2(n) alpha + 2 P / B for n > 1, else 0."""
    return np.where(n > 1, 2 * np.log2(np.maximum(n, 1)) * latency_s + 2 * payload_bytes / bytes_per_s, 0.0)


def reduce_scatter_s(
    cluster: ClusterSpec, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float = 1.0
) -> Array:
    """Hierarchical reduce-scatter of a P-byte buffer over a group of ``n`` ranks spaced ``stride`` apart."""
    total: Array = 0.0
    remaining = payload_bytes
    for level, k in zip(cluster.levels, level_fanouts(cluster, stride, n), strict=True):
        total = total + ring_reduce_scatter_s(
            remaining, k, level.bytes_per_s * efficiency_frac, level.latency_s
        )
        remaining = remaining / k
    return total


def all_gather_s(
    cluster: ClusterSpec, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float = 1.0
) -> Array:
    """Hierarchical all-gather into a P-byte buffer: the mirror of ``reduce_scatter_s``, same time."""
    return reduce_scatter_s(cluster, payload_bytes, n, stride, efficiency_frac)


def all_reduce_s(
    cluster: ClusterSpec, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float = 1.0
) -> Array:
    """Hierarchical ring all-reduce = reduce-scatter + all-gather (Rabenseifner's decomposition)."""
    return 2 * reduce_scatter_s(cluster, payload_bytes, n, stride, efficiency_frac)


def all_to_all_s(
    cluster: ClusterSpec, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float = 1.0
) -> Array:
    """All-to-all where each rank holds P bytes and keeps 1/n: per level, the peers reached over it get their
    share at that level's bandwidth; levels work in parallel, the slowest one sets the time."""
    worst: Array = 0.0
    reach_below: Array = 1
    for level, k in zip(cluster.levels, level_fanouts(cluster, stride, n), strict=True):
        reach = reach_below * k
        peers = reach - reach_below
        bw = level.bytes_per_s * efficiency_frac
        worst = np.maximum(worst, peers * level.latency_s + peers / n * payload_bytes / bw)
        reach_below = reach
    return worst


def p2p_s(cluster: ClusterSpec, payload_bytes: Array, stride: Array, efficiency_frac: float = 1.0) -> Array:
    """Point-to-point send between ranks ``stride`` apart: alpha + P / B on the level that joins them."""
    idx = p2p_level_index(cluster, stride)
    bw = np.array([lvl.bytes_per_s for lvl in cluster.levels]) * efficiency_frac
    lat = np.array([lvl.latency_s for lvl in cluster.levels])
    return lat[idx] + payload_bytes / bw[idx]
