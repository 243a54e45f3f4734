"""Alpha-beta collectives on a two-level cluster, checked against the closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost.comm import all_reduce_s, all_to_all_s, p2p_s, reduce_scatter_s, ring_all_reduce_s
from workbench.specs.hardware import ClusterSpec, DeviceSpec, NetworkLevel

NV, IB = 300e9, 25e9
NV_LAT, IB_LAT = 3e-6, 10e-6
DEV = DeviceSpec(id="d", name="d", peak_flop_per_s={"bf16": 1e14}, hbm_bytes=8e10, hbm_bytes_per_s=2e12)
CLUSTER = ClusterSpec(
    id="c",
    name="c",
    device=DEV,
    devices_per_node=8,
    num_nodes=4,
    levels=(
        NetworkLevel(name="nvlink", bytes_per_s=NV, latency_s=NV_LAT, span=8),
        NetworkLevel(name="ib", bytes_per_s=IB, latency_s=IB_LAT),
    ),
)
P = 1e9


def test_single_level_ring() -> None:
    expected = 2 * 7 * NV_LAT + 2 * 7 / 8 * P / NV  # Thakur et al. 2005
    assert all_reduce_s(CLUSTER, P, 8, 1) == pytest.approx(expected)
    assert ring_all_reduce_s(P, 8, NV, NV_LAT) == pytest.approx(expected)


def test_group_across_nodes_uses_the_network() -> None:
    expected = 2 * 3 * IB_LAT + 2 * 3 / 4 * P / IB  # 4 members, one per node (stride 8)
    assert all_reduce_s(CLUSTER, P, 4, 8) == pytest.approx(expected)


def test_hierarchical_reduce_scatter() -> None:
    inner = 7 * NV_LAT + 7 / 8 * P / NV
    outer = 1 * IB_LAT + 1 / 2 * (P / 8) / IB
    assert reduce_scatter_s(CLUSTER, P, 16, 1) == pytest.approx(inner + outer)


def test_trivial_group_and_vectorised() -> None:
    n = np.array([1, 8, 32])
    t = all_reduce_s(CLUSTER, P, n, 1)
    assert t[0] == 0.0 and t[1] < t[2]


def test_p2p_and_all_to_all() -> None:
    assert p2p_s(CLUSTER, P, 1) == pytest.approx(NV_LAT + P / NV)
    assert p2p_s(CLUSTER, P, 8) == pytest.approx(IB_LAT + P / IB)
    assert all_to_all_s(CLUSTER, P, 8, 1) == pytest.approx(7 * NV_LAT + 7 / 8 * P / NV)
    # 16 ranks over 2 nodes: 8 peers over IB carry half the data, slower than the 7 NVLink peers
    assert all_to_all_s(CLUSTER, P, 16, 1) == pytest.approx(8 * IB_LAT + 8 / 16 * P / IB)
