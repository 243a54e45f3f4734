"""The device presets a held-out validation row may name beyond the README's ids (H100 PCIe and NVL, L40S, HGX
B300, MI300X-class): each loads with the vendor's datasheet figures, has a node, a power row and a kernel table, and
a published serving row moved onto it is priced, not skipped."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_device, preset_names
from workbench.presets.kernels import load_kernel_table
from workbench.presets.power import load_power_table
from workbench.presets.prices import load_price_table
from workbench.validate.rows import DEFAULT_CLUSTER, build_cases
from workbench.validate.serving import row_case, score_serving_case
from workbench.validate.serving_csv import read_serving_rows

GIB = 2**30

# (bf16, fp8, fp32) dense TFLOP/s, capacity GiB, bandwidth TB/s, TDP W: each as its vendor prints it.
DATASHEET = {
    # NVIDIA H100 datasheet, H100 PCIe column, "with sparsity" (dense = half): BF16 1,513, FP8 3,026; FP32 51;
    # 80 GB HBM2e, 2,000 GB/s; H100 PCIe product brief PB-11133-001: TDP 350 W.
    "h100-pcie-80gb": ((1513 / 2, 3026 / 2, 51.0), 80, 2.0, 350),
    # NVIDIA H100 NVL datasheet, "with sparsity": BF16 1,671, FP8 3,341; FP32 60; 94 GB, 3.9 TB/s; 350-400 W.
    "h100-nvl-94gb": ((1671 / 2, 3341 / 2, 60.0), 94, 3.9, 400),
    # NVIDIA L40S datasheet, dense column: BF16 362.05, FP8 733, FP32 91.6; 864 GB/s; 350 W. Capacity: nvidia-smi's
    # 46,068 MiB with ECC on (the "48 GB" card).
    "l40s-48gb": ((362.05, 733.0, 91.6), 46068 / 1024, 0.864, 350),
    # NVIDIA HGX B300, 8 GPUs, "with sparsity": FP16/BF16 36 PFLOPS, FP8 72 PFLOPS; FP32 600 TFLOPS; 8 TB/s per GPU;
    # nvidia-smi: 275,040 MiB and a 1,100 W limit.
    "b300-sxm-288gb": ((36e3 / 8 / 2, 72e3 / 8 / 2, 600 / 8), 275040 / 1024, 8.0, 1100),
    # AMD Instinct MI325X data sheet: BF16 1,307.4, FP8 2,614.9, FP32 vector 163.4; 256 GB HBM3E, 6 TB/s; 1,000 W.
    "mi325x": ((1307.4, 2614.9, 163.4), 256, 6.0, 1000),
    # AMD Instinct MI355X: "2.5 PFLOPS" BF16 = 256 CUs x 2.4 GHz x 4,096 FLOP/clk; FP8 twice; FP32 vector 157.3;
    # 288 GB HBM3E, 8 TB/s; 1,400 W.
    "mi355x": ((256 * 2.4e9 * 4096 / 1e12, 256 * 2.4e9 * 8192 / 1e12, 157.3), 288, 8.0, 1400),
}


@pytest.mark.parametrize("device", sorted(DATASHEET))
def test_each_new_device_carries_its_datasheet_figures(device: str) -> None:
    (bf16, fp8, fp32), capacity_gib, tbps, _ = DATASHEET[device]
    dev = load_device(device)
    assert dev.peak("bf16") == pytest.approx(bf16 * 1e12, rel=1e-4)
    assert dev.peak("fp16") == dev.peak("bf16")
    assert dev.peak("fp8") == pytest.approx(fp8 * 1e12, rel=1e-4)
    assert dev.peak("fp32") == pytest.approx(fp32 * 1e12, rel=1e-4)
    assert dev.hbm_bytes == pytest.approx(capacity_gib * GIB, rel=2e-3)
    assert dev.hbm_bytes_per_s == pytest.approx(tbps * 1e12)
    assert dev.source


def test_b300_differs_from_gb300_only_where_nvidia_says() -> None:
    # Same Blackwell Ultra chip: GB300 NVL72 rack 360 PFLOPS BF16 sparse / 72 / 2 = 2.5 PFLOPS dense per GPU,
    # HGX B300 36 / 8 / 2 = 2.25; both 8 TB/s.
    b300, gb300 = load_device("b300-sxm-288gb"), load_device("gb300")
    assert gb300.peak("bf16") / b300.peak("bf16") == pytest.approx((360e3 / 72) / (36e3 / 8))
    assert gb300.hbm_bytes_per_s == b300.hbm_bytes_per_s


# Per-device one-direction bandwidth of each node's first level, from the vendor's link figures.
FIRST_LEVEL_GBPS = {
    "hgx-b300": 1800 / 2,  # NVLink5 1.8 TB/s bidirectional per GPU
    "pcie-h100-nvl": 600 / 2,  # H100 NVL bridge 600 GB/s per pair
    "amd-mi300x-platform": 7 * 48,  # 7 xGMI links, 48 of 64 GB/s usable each way (AMD ROCm blog)
    "amd-mi325x-platform": 7 * 48,
    "amd-mi355x-platform": 7 * 153.6 / 2 * 48 / 64,  # 153.6 GB/s bidirectional links, same usable share
    "pcie-h100": 22.2,  # default-NCCL all-reduce bus bandwidth, 8 Gen5 x16 cards (voipmonitor/rtx6kpro)
    "pcie-l40s": 22.2 * 16 / 32,  # the same at PCIe Gen4's 16 GT/s
}


@pytest.mark.parametrize("device", [*sorted(DATASHEET), "mi300x"])
def test_each_new_device_has_a_node_a_power_row_a_kernel_table_and_a_price_or_a_reason(device: str) -> None:
    node = load_cluster(DEFAULT_CLUSTER[device])
    assert node.device.id == device and node.devices_per_node == 8
    assert node.levels[0].bytes_per_s == pytest.approx(FIRST_LEVEL_GBPS[node.id] * 1e9)
    if device in DATASHEET:
        assert load_power_table().device(device).tdp_w == DATASHEET[device][3]
    table = load_kernel_table(device)
    assert table.device == device and not table.measured and table.source
    prices = load_price_table()
    assert prices.for_device(device) or device in prices.unpriced


# Bekman MAMF table (stas00/ml-engineering compute/accelerator/README.md): BF16 TFLOPS at the best shape.
MAMF_BF16 = {"b300-sxm-288gb": 1769.0, "mi325x": 784.9, "mi355x": 1565.0}


@pytest.mark.parametrize("device", sorted(MAMF_BF16))
def test_gemm_plateau_is_the_published_mamf_over_the_datasheet_peak(device: str) -> None:
    table = load_kernel_table(device)
    peak_tflops = DATASHEET[device][0][0]
    plateau = table.gemm["bf16"][-1][1]
    assert plateau == pytest.approx(MAMF_BF16[device] / peak_tflops, abs=1e-3)


def test_the_derived_hopper_tables_follow_the_h100_rule() -> None:
    # t = 10 us + F / (0.803 x peak): at F = 1e10 FLOPs on the H100 PCIe's 756.5 TFLOP/s the fraction is
    # 1e10 / (10e-6 + 1e10 / (0.803 x 756.5e12)) / 756.5e12.
    fraction = 1e10 / (10e-6 + 1e10 / (0.803 * 756.5e12)) / 756.5e12
    points = dict(load_kernel_table("h100-pcie-80gb").gemm["bf16"])
    assert points[1e10] == pytest.approx(fraction, abs=1e-3)


def test_a_published_serving_row_moved_onto_each_new_device_is_priced_not_skipped() -> None:
    row = next(r for r in read_serving_rows() if r["id"] == "LSS-01")  # vLLM, Llama-3.1-8B, 1 GPU, bf16
    moved = [{**row, "id": f"LSS-01@{d}", "device": d, "cluster": ""} for d in [*DATASHEET, "mi300x"]]
    cases, skipped = build_cases(moved, row_case)
    assert skipped == [] and len(cases) == len(moved)
    calibration = load_calibration("default")
    for case in cases:
        device = case.row["device"]
        assert f"cluster={DEFAULT_CLUSTER[device]} (the device's node)" in case.assumed
        scored = score_serving_case(case, calibration)
        assert {s["metric"] for s in scored} >= {"output_tokens_per_s", "ttft_mean_s"}
        assert all(s["predicted"] > 0 for s in scored)


def test_an_unknown_device_is_still_skipped_with_its_name() -> None:
    row = next(r for r in read_serving_rows() if r["id"] == "LSS-01")
    assert "a10g-24gb" not in preset_names("device")
    _, skipped = build_cases([{**row, "device": "a10g-24gb", "cluster": ""}], row_case)
    # read as the training rows' devices (training_codes.row_device): named, with the ids that exist
    assert "device 'a10g-24gb' is not a device id" in skipped[0].reason
    assert "known: " in skipped[0].reason and "h100-sxm5-80gb" in skipped[0].reason


def test_mi355x_runs_fp4_gemms_on_its_fp4_rate_and_mi325x_does_not() -> None:
    # AMD: MI355X MXFP4 10.1 PFLOPS dense, twice its OCP-FP8 5.0; CDNA 3 (MI325X) has no FP4 rate. A compute-bound
    # 16k-token prefill of Llama-3.1-70B at tp8 is therefore faster with fp4 inputs on MI355X and the same on MI325X.
    from workbench.presets.catalog import load_model
    from workbench.presets.engines import load_engine
    from workbench.serving.cost_layers import LayerCost
    from workbench.specs.serving import ServingDType, ServingPlan

    model, calibration, engine = load_model("llama-3.1-70b"), load_calibration("default"), load_engine()

    def prefill_s(cluster_id: str, dtype: str) -> float:
        cluster = load_cluster(cluster_id)
        kind = ServingDType(dtype)
        plan = ServingPlan(tp=8, weight_dtype=kind, activation_dtype=kind, kv_cache_dtype=ServingDType.FP8)
        layers = LayerCost(
            model, cluster, plan, calibration, engine, hbm_bytes_per_s=cluster.device.hbm_bytes_per_s
        )
        return float(layers.by_tokens_s(np.array([16384.0]), prefill=True)[0])

    assert prefill_s("amd-mi355x-platform", "fp4") < 0.9 * prefill_s("amd-mi355x-platform", "fp8")
    assert prefill_s("amd-mi325x-platform", "fp4") == prefill_s("amd-mi325x-platform", "fp8")
