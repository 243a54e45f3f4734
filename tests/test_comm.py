"""Collectives priced with NCCL's tuning model (NVIDIA/nccl v2.30.7 src/graph/tuning.cc), checked against
closed forms worked out by hand from NCCL's constants."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost import comm
from workbench.cost.comm import (
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    collective,
    p2p_s,
    reduce_scatter_s,
)
from workbench.presets.catalog import load_cluster
from workbench.specs.hardware import ClusterSpec, DeviceSpec, NetworkLevel

GIB = 2**30
DEV = DeviceSpec(id="d", name="d", peak_flop_per_s={"bf16": 1e15}, hbm_bytes=8e10, hbm_bytes_per_s=3e12)
NVL = NetworkLevel(name="nvlink", bytes_per_s=450e9, latency_s=3e-6, span=8, nvlink_generation=4, nvls=True)
IB = NetworkLevel(name="ib", bytes_per_s=50e9, latency_s=10e-6)


def cluster(nodes: int, nvl: NetworkLevel = NVL) -> ClusterSpec:
    return ClusterSpec(id="c", name="c", device=DEV, devices_per_node=8, num_nodes=nodes, levels=(nvl, IB))


NVLINK_BW = 450e9 * 20.6 / 25  # topo.h SM90_NVLINK_BW 20.6 GB/s per 25 GB/s NVLink4 link: 370.8 GB/s
NIC_BW = 48e9  # search.cc sm90SpeedArrayInter: largest speed <= 50 GB/s (one 400 Gb/s NIC)


def test_single_node_ring_all_gather_closed_form() -> None:
    # Ring/Simple: base 8.4 us + 7 NVLink hops x 3.4 us; bus bandwidth 370.8 GB/s, algbw = bus x n/(n-1)
    expected = (8.4 + 7 * 3.4) * 1e-6 + GIB * 7 / 8 / NVLINK_BW
    assert all_gather_s(cluster(1), GIB, 8, 1) == pytest.approx(expected, rel=1e-12)
    assert reduce_scatter_s(cluster(1), GIB, 8, 1) == pytest.approx(expected, rel=1e-12)
    got = collective(cluster(1), "all_gather", GIB, 8)
    assert (got.algorithm, got.protocol) == ("ring", "Simple")


def test_one_member_per_node_uses_one_nic_each() -> None:
    # 4 ranks, stride 8: 6 network steps at the tree's network latency (ppn = 1) 14 us, x1.4 ring plateau
    lat_s = (8.4 + 6 * 14.0) * 1.4 * 1e-6
    expected = lat_s + GIB / (NIC_BW * 4 / 6)
    assert all_reduce_s(cluster(4), GIB, 4, 8) == pytest.approx(expected, rel=1e-12)
    assert collective(cluster(4), "all_reduce", GIB, 4, 8).algorithm == "ring"


def test_group_shares_its_nodes_nics() -> None:
    # 8 ranks, stride 2: 4 per node on 2 nodes -> 4 NICs x 48 GB/s; 6 NVLink steps (3.4 us) + 1 network (14 us)
    expected = (8.4 + 6 * 3.4 + 14.0) * 1e-6 + GIB * 7 / 8 / (4 * NIC_BW)
    assert reduce_scatter_s(cluster(2), GIB, 8, 2) == pytest.approx(expected, rel=1e-12)
    # all 8 per node: 8 x 48 = 384 GB/s of NICs, NVLink's 370.8 GB/s is the bottleneck
    full = (8.4 + 14 * 3.4 + 14.0) * 1e-6 + GIB * 15 / 16 / NVLINK_BW
    assert reduce_scatter_s(cluster(2), GIB, 16, 1) == pytest.approx(full, rel=1e-12)


def test_nvls_tree_closed_form_across_nodes() -> None:
    # 16 nodes x 8: NVLS-Tree bus = min(NVLS 2 x 0.85 x 370.8 x 7/9, NICs 8 x 48, 16 ch x 45.5) = 384 GB/s;
    # latency 25 us (NVLink NVLS) + 2 log2(16) x 20.9 us (network NVLS-Tree)
    bus = min(2 * 0.85 * 15 / 16 * NVLINK_BW, 8 * NIC_BW, 16 * 45.5e9)
    expected = (25 + 8 * 20.9) * 1e-6 + GIB / (bus * 128 / 254)
    got = collective(cluster(16), "all_reduce", GIB, 128)
    assert (got.algorithm, got.protocol) == ("nvls_tree", "Simple")
    assert got.seconds == pytest.approx(expected, rel=1e-12)
    assert got.busbw_bytes_per_s == pytest.approx(GIB / expected * 2 * 127 / 128, rel=1e-12)


def test_all_to_all_closed_form() -> None:
    # 2 nodes x 8: 7/16 of P over NVLink, 8/16 over the member's own NIC at once; one grouped start-up
    expected = (8.4 + 14.0) * 1e-6 + max(GIB * 7 / 16 / NVLINK_BW, GIB * 8 / 16 / NIC_BW)
    assert all_to_all_s(cluster(2), GIB, 16, 1) == pytest.approx(expected, rel=1e-12)
    one = (8.4 + 3.4) * 1e-6 + GIB * 7 / 8 / NVLINK_BW
    assert all_to_all_s(cluster(1), GIB, 8, 1) == pytest.approx(one, rel=1e-12)


@pytest.mark.parametrize(
    ("nodes", "size", "algo", "proto"),
    [
        (16, 1024, "tree", "LL"),  # small, many nodes: the tree's log latency and LL
        (16, GIB, "nvls_tree", "Simple"),  # large on NVSwitch systems: NVLS-Tree
        (1, GIB, "nvls", "Simple"),  # one node: NVLink SHARP
        (1, 1024, "ring", "LL"),  # tiny on one node: LL
    ],
)
def test_algorithm_choice(nodes: int, size: int, algo: str, proto: str) -> None:
    got = collective(cluster(nodes), "all_reduce", size, 8 * nodes)
    assert (got.algorithm, got.protocol) == (algo, proto)


def test_without_nvls_large_messages_pick_ring_simple() -> None:
    a100 = NetworkLevel(name="nvlink", bytes_per_s=300e9, latency_s=3e-6, span=8, nvlink_generation=3)
    got = collective(cluster(16, a100), "all_reduce", GIB, 128)
    assert (got.algorithm, got.protocol) == ("ring", "Simple")
    assert collective(cluster(16, a100), "all_reduce", 4096, 128).algorithm == "tree"


def test_vectorised_equals_scalar_and_trivial_groups() -> None:
    c = cluster(16)
    sizes = np.array([1e3, 1e6, 3e7, 1e9, 4e9])
    ns = np.array([1, 2, 8, 16, 128])
    strides = np.array([1, 8, 4])
    p, n, s = (a.ravel() for a in np.meshgrid(sizes, ns, strides))
    n = np.minimum(n, 128 // s)
    for fn in (all_reduce_s, reduce_scatter_s, all_gather_s, all_to_all_s):
        vec = fn(c, p, n, s, 0.8)
        scalar = [float(fn(c, float(a), int(b), int(d), 0.8)) for a, b, d in zip(p, n, s, strict=True)]
        assert np.allclose(vec, scalar, rtol=1e-12, atol=0)
        assert np.all(vec[n == 1] == 0.0) and np.all(vec[n > 1] > 0)
    assert collective(c, "all_reduce", GIB, 1).seconds == 0.0


def test_long_repeated_inputs_priced_once_per_run_match_the_scalar_path() -> None:
    """The planner's columns repeat each layout row over its inner axes; long inputs are priced once per run of
    equal arguments (``comm._runs``). The values must be the scalar path's, run by run, whatever the runs."""
    c = cluster(16)
    rng = np.random.default_rng(7)
    cases = [(1e3, 1, 1), (3e7, 8, 1), (1e9, 16, 8), (4e9, 128, 1), (2e6, 2, 64), (5e8, 32, 4)]
    picks = rng.integers(0, len(cases), size=400)
    reps = rng.integers(1, 60, size=400)
    p, n, s = (np.repeat(np.array([cases[i][j] for i in picks]), reps) for j in range(3))
    assert len(p) >= comm.DEDUP_MIN_SIZE
    for fn in (all_reduce_s, reduce_scatter_s, all_gather_s, all_to_all_s):
        scalar = {case: float(fn(c, *case, 0.8)) for case in cases}
        expected = np.repeat([scalar[cases[i]] for i in picks], reps)
        assert np.array_equal(fn(c, p, n, s, 0.8), expected)
        per_run = [float(fn(c, cases[i][0], cases[i][1], 1, 0.8)) for i in picks]  # a scalar stride
        assert np.array_equal(fn(c, p, n, 1, 0.8), np.repeat(per_run, reps))


def test_efficiency_scales_bandwidth_only() -> None:
    c = cluster(1)
    lat = (8.4 + 7 * 3.4) * 1e-6
    assert all_gather_s(c, GIB, 8, 1, 0.5) == pytest.approx(lat + GIB * 7 / 8 / (0.5 * NVLINK_BW), rel=1e-12)


def test_p2p_is_alpha_beta_on_the_joining_level() -> None:
    assert p2p_s(cluster(2), GIB, 1) == pytest.approx(3e-6 + GIB / 450e9)
    assert p2p_s(cluster(2), GIB, 8) == pytest.approx(10e-6 + GIB / 50e9)


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="op must be one of"):
        collective(cluster(1), "broadcast", GIB, 8)
    with pytest.raises(ValueError, match="nvls"):
        NetworkLevel(name="x", bytes_per_s=1e9, latency_s=0, nvls=True)
    with pytest.raises(ValueError, match="nvlink_generation must be one of 3, 4, 5"):
        NetworkLevel(name="x", bytes_per_s=1e9, latency_s=0, nvlink_generation=2)
    with pytest.raises(ValueError, match="sharp must be true or false"):
        NetworkLevel(name="x", bytes_per_s=1e9, latency_s=0, sharp="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nics_per_node"):
        NetworkLevel(name="x", bytes_per_s=1e9, latency_s=0, nics_per_node=0)


def test_presets_carry_the_nvlink_features() -> None:
    assert load_cluster("dgx-h100").levels[0].nvls and load_cluster("gb200-nvl72").levels[0].nvls
    a100 = load_cluster("dgx-a100").levels[0]
    assert a100.nvlink_generation == 3 and not a100.nvls
