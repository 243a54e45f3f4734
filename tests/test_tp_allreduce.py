"""The tensor-parallel all-reduce of a serving engine's kernel family against the published table it comes from
(sgl-project/sglang PR #2904, H100), NCCL's model where no table holds, and a decode layer's two all-reduces
worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost.comm import all_reduce_s
from workbench.cost.tp_allreduce import TABLES, kernel_table, priced_table, tp_all_reduce_s
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.engines import engine_names, load_engine
from workbench.serving.cost import ReplicaCost
from workbench.specs.engine import TP_ALL_REDUCES, EngineProfile
from workbench.specs.serving import ServingPlan

FP32_BYTES = 4
"""sgl-kernel tests/test_trt_reduce.py performance_worker: the timed tensor is float32 with ``sz`` elements."""

PR2904_MS = {
    # (family, tp): {elements: ms}, as the PR's two H100 tables print them
    ("vllm_custom", 8): {512: 0.0101, 4096: 0.0093, 32768: 0.0118, 262144: 0.0241, 524288: 0.0304,
                         1048576: 0.0450},
    ("trtllm_custom", 8): {512: 0.0059, 4096: 0.0057, 32768: 0.0078, 262144: 0.0167, 524288: 0.0221,
                           1048576: 0.0338},
    ("vllm_custom", 2): {32768: 0.0087, 1048576: 0.0266},
    ("trtllm_custom", 4): {4096: 0.0037, 262144: 0.0139},
}  # fmt: skip


@pytest.fixture(scope="module")
def h100():
    return load_cluster("dgx-h100")


@pytest.mark.parametrize(("family", "tp"), sorted(PR2904_MS))
def test_table_reproduces_the_published_latencies(h100, family: str, tp: int) -> None:
    for elements, ms in PR2904_MS[(family, tp)].items():
        t = float(tp_all_reduce_s(h100, float(FP32_BYTES * elements), tp, family))
        assert t == pytest.approx(ms * 1e-3, rel=1e-9)


def test_between_below_and_above_the_table(h100) -> None:
    table = kernel_table("trtllm_custom", "h100-sxm5-80gb", 8)
    assert table is not None
    # Halfway between 128 KiB (7.8 us) and 1 MiB (16.7 us): the segment's mean, alpha + beta linear in bytes.
    mid = (131072.0 + 1048576.0) / 2
    assert float(tp_all_reduce_s(h100, mid, 8, "trtllm_custom")) == pytest.approx((7.8 + 16.7) / 2 * 1e-6)
    # Below the smallest size the kernel is latency-bound: the 2 KiB time.
    assert float(tp_all_reduce_s(h100, 64.0, 8, "trtllm_custom")) == pytest.approx(5.9e-6)
    # Above the largest (4 MiB, 33.8 us): never below it, and NCCL's model once that is slower.
    for size in (5e6, 64e6):
        nccl = float(all_reduce_s(h100, size, 8, 1))
        assert float(tp_all_reduce_s(h100, size, 8, "trtllm_custom")) == pytest.approx(max(33.8e-6, nccl))
    assert float(tp_all_reduce_s(h100, 64e6, 8, "trtllm_custom")) > 33.8e-6


def test_every_table_rises_from_its_smallest_payload_and_names_its_source() -> None:
    for t in TABLES:
        assert t.kernel in TP_ALL_REDUCES and t.kernel != "nccl"
        assert len(t.sizes_bytes) == len(t.seconds) and list(t.sizes_bytes) == sorted(t.sizes_bytes)
        assert t.seconds[-1] > t.seconds[0] > 0 and "PR #" in t.source


def test_nccl_family_and_uncovered_groups_are_nccls_model(h100) -> None:
    sizes = np.array([4096.0, 262144.0, 8e6])
    assert np.array_equal(tp_all_reduce_s(h100, sizes, 8, "nccl", 0.9), all_reduce_s(h100, sizes, 8, 1, 0.9))
    b200 = load_cluster("dgx-b200")  # no published table for B200: NCCL's model, efficiency applied
    assert np.array_equal(
        tp_all_reduce_s(b200, sizes, 8, "trtllm_custom", 0.9), all_reduce_s(b200, sizes, 8, 1, 0.9)
    )
    two_nodes = load_cluster("dgx-h100", num_nodes=2)  # tp 16 leaves the NVLink domain
    assert np.array_equal(
        tp_all_reduce_s(two_nodes, sizes, 16, "vllm_custom"), all_reduce_s(two_nodes, sizes, 16, 1)
    )
    assert np.array_equal(tp_all_reduce_s(h100, sizes, 6, "vllm_custom"), all_reduce_s(h100, sizes, 6, 1))
    assert float(tp_all_reduce_s(h100, 4096.0, 1, "vllm_custom")) == 0.0


def test_bad_kernel_names_the_allowed_values(h100) -> None:
    with pytest.raises(ValueError, match="nccl, vllm_custom, trtllm_custom; got 'msccl'"):
        tp_all_reduce_s(h100, 4096.0, 8, "msccl")
    with pytest.raises(ValueError, match="tp_all_reduce must be one of"):
        EngineProfile(id="x", name="x", tp_all_reduce="ring")


def test_every_engine_profile_names_a_family_with_its_source() -> None:
    for name in engine_names():
        engine = load_engine(name)
        assert engine.tp_all_reduce in TP_ALL_REDUCES
        if engine.tp_all_reduce != "nccl":
            assert "tp_all_reduce" in engine.sources


def test_decode_layer_pays_two_table_all_reduces(h100) -> None:
    """Llama-3.1-70B at tp 8, 8 decode tokens: each all-reduce carries 8 x 8192 bf16 values = 131,072 bytes, the
    table's 32768-element point (vLLM's custom all-reduce 11.8 us, TensorRT-LLM's 7.8 us): two per layer."""
    cal = load_calibration("default")
    model = load_model("llama-3.1-70b")
    tokens = np.array([8.0])
    assert 2 * 8 * model.hidden_size == FP32_BYTES * 32768
    for engine, us in (("vllm-v0", 11.8), ("trtllm", 7.8)):
        rc = ReplicaCost.of(model, h100, ServingPlan(tp=8, engine=engine), cal)
        assert float(rc.layers.layer_comm_s(False, tokens)[0]) == pytest.approx(2 * us * 1e-6)


def test_apex_tp2_servers_ran_nccl() -> None:
    """microsoft/apex_plus vllm/scale_2TP_*.sh and 4DP2TP.sh pass --disable-custom-all-reduce; the tp-4 and tp-8
    scripts do not: APEX's tp-2 rows are priced with NCCL's all-reduce, the others with vLLM's custom one."""
    from workbench.validate.serving import row_case
    from workbench.validate.serving_csv import DEFAULT_SERVING_DATA, read_serving_rows

    rows = {r["id"]: r for r in read_serving_rows(DEFAULT_SERVING_DATA) if r["source_key"] == "APEX_VLLM"}
    for rid, row in rows.items():
        case = row_case(row)
        engine = load_engine(case.plan.engine)
        expected = "nccl" if case.plan.tp == 2 else "vllm_custom"
        assert engine.tp_all_reduce == expected, rid
    assert {r["tp"] for r in rows.values()} >= {"2", "4", "8"}


def test_priced_table_is_the_table_inside_the_nvlink_domain_only(h100) -> None:
    assert priced_table(h100, 8, "vllm_custom") is kernel_table("vllm_custom", "h100-sxm5-80gb", 8)
    assert priced_table(h100, 8, "trtllm_custom") is not None
    assert priced_table(h100, 8, "nccl") is None  # NCCL's model
    assert priced_table(h100, 1, "vllm_custom") is None  # no all-reduce
    two = load_cluster("dgx-h100", 2)
    assert priced_table(two, 16, "vllm_custom") is None  # leaves the 8-GPU NVLink domain
    payload = np.array([2048.0, 1e6])
    assert np.array_equal(tp_all_reduce_s(two, payload, 16, "vllm_custom"), all_reduce_s(two, payload, 16, 1))
