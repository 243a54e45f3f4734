"""NVLS all-reduce inside one NVLink domain: NCCL's NVLS graph (one channel per GPU, the head GPU's traffic
counted twice) gives bus bandwidth 2 x 0.85 x B x (n-1)/(n+1); checked against the closed form and nccl-tests."""

from __future__ import annotations

import pytest

from workbench.cost.comm import collective
from workbench.presets.catalog import load_cluster

GIB = 2**30
B_H100 = 450e9 * 20.6 / 25  # topo.h SM90_NVLINK_BW 20.6 GB/s per 25 GB/s NVLink4 link, 18 links


@pytest.mark.parametrize("n", [5, 6, 7, 8])
def test_nvls_bus_bandwidth_matches_the_closed_form(n: int) -> None:
    r = collective(load_cluster("dgx-h100"), "all_reduce", 4 * GIB, n)
    algbw = 0.85 * B_H100 / (1 + 1 / n)  # every GPU moves (1 + 1/n) x the payload each way
    # start-up: the 80 us measured on 8x H100 (comm.NVLS_STARTUP_US, tests/test_comm_nccl_tests.py) in place of
    # tuning.cc's hwLatencies NVLink NVLS 25 us (no base latency)
    seconds = 80e-6 + 4 * GIB / algbw
    assert r.algorithm == "nvls"
    assert r.seconds == pytest.approx(seconds, rel=1e-9)


def test_eight_h100_reach_the_published_480_gbps() -> None:
    # nccl-tests on 8x H100 with NVLS: ~480 GB/s bus bandwidth (NVIDIA/nccl-tests#212, NVIDIA/nccl#1455)
    r = collective(load_cluster("dgx-h100"), "all_reduce", GIB, 8)
    assert r.busbw_bytes_per_s >= 430e9
    assert r.busbw_bytes_per_s == pytest.approx(480e9, rel=0.10)


def test_small_groups_keep_the_ring() -> None:
    # 2 and 3 GPUs: NVLS moves 1.5x / 1.33x the payload per GPU; the ring's ~370 GB/s wins (nccl#1455: 365-370)
    for n in (2, 3):
        assert collective(load_cluster("dgx-h100"), "all_reduce", GIB, n).algorithm == "ring"
