"""DeepEP's low-latency kernels (workbench.cost.deepep) against DeepEP's own kernel benchmark, and their use for the
decode iterations of an engine dispatching with DeepEP (workbench.serving.cost_layers)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost.deepep import (
    DEEPEP_LL_FIXED_S,
    DEEPEP_LL_NIC_FRAC,
    DEEPEP_LL_NVLINK_FRAC,
    deepep_low_latency_s,
    dispatch_bytes_per_value,
)
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.serving.cost import ReplicaCost
from workbench.specs.serving import ServingPlan

# deepseek-ai/DeepEP README (docs/legacy.md since V2), "Low-latency kernels with pure RDMA": H800 with one CX7
# 400 Gb/s NIC each, 128 tokens per batch, hidden 7168, top-8, FP8 dispatch, BF16 combine; EP -> latency, us
README_DISPATCH_US = {8: 77, 16: 118, 32: 155, 64: 173, 128: 192, 256: 194}
README_COMBINE_US = {8: 114, 16: 195, 32: 273, 64: 314, 128: 369, 256: 360}
README_RDMA_GBPS = {16: (63, 74), 32: (48, 53), 64: (43, 46), 128: (39, 39), 256: (39, 40)}
HIDDEN, TOPK, TOKENS = 7168, 8, 128


def _h800(ep: int):
    return load_cluster("hgx-h800", max(1, ep // 8))


@pytest.mark.parametrize("ep", sorted(README_DISPATCH_US))
def test_low_latency_kernels_reproduce_deepeps_table(ep: int) -> None:
    cluster = _h800(ep)
    dispatch = float(
        deepep_low_latency_s(cluster, TOKENS * HIDDEN * dispatch_bytes_per_value("fp8"), TOPK, ep, 1)
    )
    combine = float(deepep_low_latency_s(cluster, TOKENS * HIDDEN * 2.0, TOPK, ep, 1))
    assert dispatch * 1e6 == pytest.approx(README_DISPATCH_US[ep], rel=0.08)
    assert combine * 1e6 == pytest.approx(README_COMBINE_US[ep], rel=0.08)


def test_the_tables_bandwidth_column_is_the_logical_bytes_the_model_sends() -> None:
    # the README's "RDMA bandwidth" = all top-k copies' bytes (FP8 values + one float scale per 128) / latency
    dispatch_bytes = TOKENS * TOPK * (HIDDEN + HIDDEN // 128 * 4)
    combine_bytes = TOKENS * TOPK * HIDDEN * 2
    assert dispatch_bytes == TOKENS * TOPK * HIDDEN * dispatch_bytes_per_value("fp8")
    for ep, (d_gbps, c_gbps) in README_RDMA_GBPS.items():
        assert dispatch_bytes / README_DISPATCH_US[ep] / 1e3 == pytest.approx(d_gbps, rel=0.03)
        assert combine_bytes / README_COMBINE_US[ep] / 1e3 == pytest.approx(c_gbps, rel=0.03)


def test_a_few_tokens_per_rank_cost_the_fixed_time_and_their_bytes() -> None:
    cluster = load_cluster("dgx-h200", 2)  # EP16 over two nodes: half of the copies leave the node
    token_bytes = 2 * HIDDEN * dispatch_bytes_per_value("fp8")  # two decode tokens on a rank
    network = token_bytes * TOPK * 8 / 16 / (50e9 * DEEPEP_LL_NIC_FRAC)
    assert float(deepep_low_latency_s(cluster, token_bytes, TOPK, 16, 1)) == pytest.approx(
        DEEPEP_LL_FIXED_S + network, rel=1e-9
    )
    assert network < 0.1 * DEEPEP_LL_FIXED_S  # 59 KB over the NIC: the fixed time dominates
    tokens = np.array([0.0, 1.0, 64.0, 128.0])  # affine in the tokens, broadcasting
    t = deepep_low_latency_s(cluster, tokens * HIDDEN * 2, TOPK, 16, 1)
    assert (t[3] - t[2]) / 64 == pytest.approx((t[2] - t[1]) / 63, rel=1e-9)
    assert t[0] == pytest.approx(DEEPEP_LL_FIXED_S)


def test_nvlink_only_groups_never_touch_the_network() -> None:
    nvl72 = load_cluster("gb200-nvl72", 18)  # EP48 inside one NVLink domain
    token_bytes = 1024 * HIDDEN * 2.0
    expected = DEEPEP_LL_FIXED_S + token_bytes * TOPK * 47 / 48 / (900e9 * DEEPEP_LL_NVLINK_FRAC)
    assert float(deepep_low_latency_s(nvl72, token_bytes, TOPK, 48, 1)) == pytest.approx(expected, rel=1e-9)
    assert float(deepep_low_latency_s(nvl72, token_bytes, TOPK, 1, 1)) == 0.0


def test_dispatch_bytes_per_value() -> None:
    assert dispatch_bytes_per_value(None) == 2.0
    assert dispatch_bytes_per_value("fp4") == pytest.approx(0.5 + 1 / 16)  # E2M1 + one E4M3 scale per 16
    with pytest.raises(ValueError, match="'fp8', 'fp4' or None"):
        dispatch_bytes_per_value("int4")


def test_sglang_decode_iterations_run_the_low_latency_kernels() -> None:
    # DeepSeek-V3 on 16 H200 with DP attention and EP16 (the LMSYS MTP blog's decode engine), 2 tokens per rank
    plan = ServingPlan(tp=1, attention_dp=16, ep=16, weight_dtype="fp8", activation_dtype="fp8",
                       num_redundant_experts=32, engine="sglang")  # fmt: skip
    cluster = load_cluster("dgx-h200", 2)
    layers = ReplicaCost.of(load_model("deepseek-v3"), cluster, plan, Calibration()).layers
    tokens = np.array([32.0])
    dispatch = deepep_low_latency_s(cluster, 2 * HIDDEN * dispatch_bytes_per_value("fp8"), TOPK, 16, 1)
    combine = deepep_low_latency_s(cluster, 2 * HIDDEN * 2.0, TOPK, 16, 1)
    assert float(layers.layer_comm_s(True, tokens)[0]) == pytest.approx(float(dispatch + combine), rel=1e-9)
    assert float(layers.layer_comm_s(False, tokens)[0]) == 0.0  # dense layers: tp 1, nothing to move
