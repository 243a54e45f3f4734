"""The NVIDIA GH200 presets (issue 48's held-out rows, issue 49): the two GH200 devices carry NVIDIA's figures,
their kernel tables are the H100/H200 ones with the HBM part on the GH200's own bandwidth, a 4-GPU all-reduce on
the 4x GH200 nodes is a ring over the switchless NVLink mesh, and a training row naming "GH200" is priced."""

from __future__ import annotations

import pytest

from workbench.cost.comm import collective
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_device
from workbench.presets.kernels import load_kernel_table
from workbench.presets.power import load_power_table
from workbench.presets.prices import load_price_table
from workbench.specs.hardware import NetworkLevel
from workbench.validate.training import row_case, validate_rows
from workbench.validate.training_codes import read_device
from workbench.validate.training_csv import DEFAULT_DATA, read_rows

MIB = 2**20

# NVIDIA GH200 product page, "with sparsity" (dense = half): FP8 3,958, BF16/FP16 1,979 TFLOPS; FP32 67 TFLOPS.
# HBM: 96 GB HBM3 at 4 TB/s, 144 GB HBM3e at 4.9 TB/s; nvidia-smi memory.total 97871 MiB ("NVIDIA GH200 480GB")
# and 146831 MiB ("NVIDIA GH200 144G HBM3e").
DATASHEET = {"gh200-96gb": (97871, 4.0e12), "gh200-144gb": (146831, 4.9e12)}


@pytest.mark.parametrize("device", sorted(DATASHEET))
def test_each_gh200_carries_the_product_page_figures(device: str) -> None:
    smi_mib, hbm_bytes_per_s = DATASHEET[device]
    dev = load_device(device)
    assert dev.peak("bf16") == pytest.approx(1979e12 / 2, rel=1e-3)
    assert dev.peak("fp16") == dev.peak("bf16")
    assert dev.peak("fp8") == pytest.approx(3958e12 / 2, rel=1e-3)
    assert dev.peak("fp32") == pytest.approx(67e12, rel=2e-3)
    assert dev.hbm_bytes_per_s == hbm_bytes_per_s
    assert dev.hbm_bytes == pytest.approx(
        smi_mib * MIB, rel=5e-3
    )  # the vendor "GB" is binary, as nvidia-smi shows
    assert dev.compute_capability == (9, 0) and dev.source


@pytest.mark.parametrize(
    ("device", "base"), [("gh200-96gb", "h100-sxm5-80gb"), ("gh200-144gb", "h200-sxm-141gb")]
)
def test_kernel_tables_are_the_hopper_ones_with_hbm_on_the_gh200_bandwidth(device: str, base: str) -> None:
    table, hopper = load_kernel_table(device), load_kernel_table(base)
    assert table.device == device and not table.measured and "DERIVED" in table.source
    assert table.gemm == hopper.gemm  # same GH100 SMs, clocks and dense peaks
    assert [a.fwd_frac for a in table.attention] == [a.fwd_frac for a in hopper.attention]
    assert all("DERIVED" in a.source for a in table.attention)
    # Achieved HBM bandwidth: the published base fraction of peak on the GH200's own peak. H100: FlashMLA's
    # 3000 GB/s of 3.35 TB/s; H200: cuDNN RMSNorm's 0.80 of 4.8 TB/s (cudnn-frontend results).
    published = {"h100-sxm5-80gb": 3000 / 3350, "h200-sxm-141gb": 0.80}[base]
    achieved = table.hbm_frac * load_device(device).hbm_bytes_per_s
    assert achieved == pytest.approx(published * DATASHEET[device][1], rel=1e-3)
    assert achieved > hopper.hbm_frac * load_device(base).hbm_bytes_per_s


@pytest.mark.parametrize("cluster_id", ["hpe-cray-ex254n-gh200", "bullsequana-xh3515-gh200"])
def test_a_four_gpu_all_reduce_is_a_ring_over_the_nvlink_mesh(cluster_id: str) -> None:
    cluster = load_cluster(cluster_id)
    assert cluster.devices_per_node == 4 and cluster.device.id == "gh200-96gb"
    nvlink, network = cluster.levels
    # CSCS / JSC: no NVSwitch; 6 NVLink4 links to each of 3 peers, 150 GB/s per pair per direction.
    assert (
        nvlink.bytes_per_s == 3 * 150e9 and nvlink.mesh and not nvlink.nvls and nvlink.nvlink_generation == 4
    )
    assert network.bytes_per_s == 200e9 / 8  # one 200 Gb/s NIC (Slingshot-11 or NDR200) per GPU
    payload, n = 2.0**30, 4
    # Ring all-reduce (Thakur et al. 2005): 2(n-1) steps, each rank moves 2(n-1)/n of the payload, at NCCL's NVLink4
    # rate per link (topo.h SM90_NVLINK_BW 20.6 of 25 GB/s), after NCCL's Simple ring latency: tuning.cc base
    # 8.4 us + 2(n-1) NVLink hops of 3.4 us.
    nccl_bytes_per_s = 3 * 6 * 20.6e9
    expected = (8.4 + 2 * (n - 1) * 3.4) * 1e-6 + 2 * (n - 1) / n * payload / nccl_bytes_per_s
    priced = collective(cluster, "all_reduce", payload, n)
    assert (priced.algorithm, priced.protocol) == ("ring", "Simple")
    assert priced.seconds == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("members", [2, 3])
def test_a_smaller_group_of_the_mesh_reaches_only_its_direct_links(members: int) -> None:
    # Switchless mesh: a ring over k of the four uses the k - 1 peers' 6 links each, (k - 1) x 6 x 20.6 GB/s at
    # NCCL's NVLink4 rate; same latency rule as above.
    cluster = load_cluster("hpe-cray-ex254n-gh200")
    payload = 2.0**30
    nccl_bytes_per_s = (members - 1) * 6 * 20.6e9
    expected = (8.4 + 2 * (members - 1) * 3.4) * 1e-6 + 2 * (
        members - 1
    ) / members * payload / nccl_bytes_per_s
    assert collective(cluster, "all_reduce", payload, members).seconds == pytest.approx(expected, rel=1e-9)


def test_a_send_inside_the_mesh_uses_one_pairs_links() -> None:
    cluster = load_cluster("bullsequana-xh3515-gh200")
    payload = 2.0**30
    # alpha-beta send at the preset's 3 us over one pair's 150 GB/s per direction (JSC), not the GPU's 450.
    expected = 3e-6 + payload / 150e9
    assert collective(cluster, "send_recv", payload, 2, stride=1).seconds == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"span": None}, "mesh needs a span >= 2"),
        ({"nvls": True}, "nvls off"),
        ({"mesh": "yes"}, "true or false"),
    ],
)
def test_a_mesh_level_without_a_span_or_with_nvls_is_refused(changes: dict, message: str) -> None:
    level = {"name": "nvlink", "bytes_per_s": 450e9, "latency_s": 3e-6, "span": 4, "nvlink_generation": 4}
    with pytest.raises(ValueError, match=message):
        NetworkLevel(**{**level, "mesh": True, **changes})


def test_the_host_path_is_the_gh200s_own_c2c_link_and_grace_memory() -> None:
    storage = load_cluster("bullsequana-xh3515-gh200").storage
    assert storage is not None
    assert storage.device_to_host_bytes_per_s == 900e9 / 2  # NVLink-C2C 900 GB/s bidirectional, one per GPU
    assert storage.host_memory_bytes_per_s == 4 * 512e9  # four Grace, LPDDR5X at 512 GB/s each (JSC)


@pytest.mark.parametrize("device", sorted(DATASHEET))
def test_each_gh200_has_a_power_row_and_a_price_or_a_reason(device: str) -> None:
    power = load_power_table().device(device)
    assert (power.tdp_w, power.min_cap_w) == (1000, 450)  # product page: module 450 W to 1,000 W
    prices = load_price_table()
    assert prices.for_device(device) or device in prices.unpriced


@pytest.mark.parametrize(
    ("written", "device"),
    [
        ("GH200", "gh200-96gb"),
        ("NVIDIA GH200 480GB", "gh200-96gb"),
        ("NVIDIA-GH200-480GB", "gh200-96gb"),
        ("GH200 96GB", "gh200-96gb"),
        ("GH200 96GB/144GB", "gh200-96gb"),
        ("Grace Hopper", "gh200-96gb"),
        ("GH200 144GB", "gh200-144gb"),
        ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
        ("GH200 141GB HBM3e", "gh200-144gb"),
        ("NVIDIA H200 141GB HBM3e", "h200-sxm-141gb"),
        ("NVIDIA Grace Blackwell GB200", "gb200"),
    ],
)
def test_each_gh200_spelling_reads_to_its_preset(written: str, device: str) -> None:
    assert read_device(written)[0] == device


def test_a_bare_gh200_says_it_took_the_first_shipped_part() -> None:
    _, why = read_device("GH200")
    assert why is not None and "96 GB HBM3" in why and "first shipped" in why


def test_a_training_row_naming_gh200_is_priced_not_skipped() -> None:
    row = next(r for r in read_rows(DEFAULT_DATA) if r["id"] == "NARAYANAN21_T1-001")  # 32 GPUs, tp 1, pp 1
    moved = {**row, "id": "gh200", "device": "GH200", "cluster": ""}
    case = row_case(moved)
    assert case.cluster.id == "hpe-cray-ex254n-gh200" and case.cluster.num_devices == 32
    result = validate_rows([moved], calibration=load_calibration("default"))
    assert result["skipped"] == [] and [r["id"] for r in result["rows"]] == ["gh200"]
    priced = result["rows"][0]
    assert priced["predicted"] > 0
    assert any("read as gh200-96gb" in a for a in priced["assumed"])
