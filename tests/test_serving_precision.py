"""One rule for FP8 weights on a device without an FP8 tensor-core peak (issue 49): ``gemm_precision``'s readings
per engine, the weight bytes of a W8A16 decode step (closed form from Llama 3.1 8B's config.json), and the three
entry points (``serve_estimate``, ``serve_search``, the app's Serving tab) agreeing on the same inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from workbench.presets import catalog
from workbench.presets.calibration import load_calibration
from workbench.presets.engines import load_engine
from workbench.search.serving.planner import serve_search
from workbench.search.serving.result import ServingSearchResult
from workbench.search.serving.space import ServingSearchConstraints
from workbench.serving.cost import ReplicaCost
from workbench.serving.estimate import serve_estimate
from workbench.serving.precision import AS_IS, WEIGHT_ONLY, gemm_precision, gemm_runs, newest_release
from workbench.specs.hardware import DType
from workbench.specs.serving import SLO, Arrival, ServingDType, ServingPlan, ServingWorkload

FP8, BF16 = ServingDType.FP8, ServingDType.BF16
A100 = catalog.load_cluster("dgx-a100")
"""DGX A100: 8 A100 SXM4 80GB, no fp8 peak (A100 datasheet: no FP8 tensor cores)."""


def _reading(engine: str, cluster: str, weight: ServingDType, act: ServingDType, *, moe: bool = False) -> str:
    device = catalog.load_cluster(cluster).device
    return gemm_precision(load_engine(engine), device, weight, act, moe=moe).reading


@pytest.mark.parametrize(
    ("engine", "cluster", "moe", "expected"),
    [
        ("vllm-v1", "dgx-h100", False, AS_IS),  # H100 has an fp8 peak: W8A8 as given
        ("trtllm", "pcie-l40s", False, AS_IS),  # L40S (Ada) has an fp8 peak too
        ("vllm-v0", "dgx-a100", False, WEIGHT_ONLY),  # vLLM PR #5975 (0.5.1): FP8 Marlin for dense layers
        ("vllm-v1", "dgx-a100", True, WEIGHT_ONLY),  # vLLM PR #16850: Marlin MoE, within 0.8-0.13
        ("vllm-v1-async", "dgx-a100", True, WEIGHT_ONLY),
        ("sglang", "dgx-a100", False, WEIGHT_ONLY),  # SGLang PR #8990: linear layers only
        ("generic", "dgx-a100", True, WEIGHT_ONLY),
    ],
)
def test_readings(engine: str, cluster: str, moe: bool, expected: str) -> None:
    assert _reading(engine, cluster, FP8, FP8, moe=moe) == expected


@pytest.mark.parametrize(
    ("engine", "moe", "why"),
    [
        ("trtllm", False, "no weight-only FP8 kernel"),  # support matrix: Ampere FP32/FP16/BF16/INT8/INT4
        ("trtllm-mlperf-v4", False, "no weight-only FP8 kernel"),
        (
            "vllm-v0",
            True,
            "arrives in 0.9, after the profile's releases (0.5-0.7)",
        ),  # Triton fused MoE, #7322
        ("sglang", True, "none of its releases has one"),  # PR #9754 closed, #30681 open
    ],
)
def test_refusals_name_the_field_value_and_choices(engine: str, moe: bool, why: str) -> None:
    with pytest.raises(ValueError) as err:
        _reading(engine, "dgx-a100", FP8, BF16, moe=moe)
    text = str(err.value)
    assert "weight_dtype='fp8'" in text and why in text and "choose weight_dtype bf16, fp16 or int4" in text


def test_narrow_inputs_need_fp8_weights_without_an_fp8_peak() -> None:
    for act in (FP8, ServingDType.FP4):
        with pytest.raises(
            ValueError, match=f"activation_dtype='{act.value}'.*choose activation_dtype bf16 or"
        ):
            _reading("vllm-v1", "dgx-a100", BF16, act)
    for act in (ServingDType.FP4, ServingDType.INT4):  # fp8 weights take 16-bit (or fp8 read as bf16) inputs
        with pytest.raises(ValueError, match=f"activation_dtype='{act.value}'"):
            _reading("vllm-v1", "dgx-a100", FP8, act)


def test_weight_only_prices_16_bit_inputs_at_the_16_bit_peak() -> None:
    p = gemm_precision(load_engine("vllm-v1"), A100.device, FP8, FP8, moe=False)
    assert (p.compute_dtype, p.activation_dtype, p.dequant_kernels) == (DType.BF16, BF16, 0)
    assert "weight-only W8A16" in p.note and "a100-sxm4-80gb" in p.note
    fp16 = gemm_precision(load_engine("vllm-v1"), A100.device, FP8, ServingDType.FP16, moe=False)
    assert (fp16.compute_dtype, fp16.activation_dtype) == (DType.FP16, ServingDType.FP16)


def test_gemm_runs_is_whether_gemm_precision_accepts() -> None:
    """On an A100 (no fp8 peak) fp8 weights with fp8 inputs run as W8A16 under vLLM and are refused under
    TensorRT-LLM (its support matrix: no FP8 on Ampere); fp4 inputs beside bf16 weights run nowhere there."""
    a100 = catalog.load_device("a100-sxm4-80gb")
    vllm, trtllm = load_engine("vllm-v1"), load_engine("trtllm")
    assert gemm_runs(vllm, a100, "fp8", "fp8", moe=False)
    assert not gemm_runs(trtllm, a100, "fp8", "fp8", moe=False)
    assert not gemm_runs(vllm, a100, "bf16", "fp4", moe=False)
    assert gemm_runs(trtllm, catalog.load_device("h100-sxm5-80gb"), "fp8", "fp8", moe=False)


def test_newest_release() -> None:
    assert newest_release("0.5-0.7") == (0, 7)
    assert newest_release("0.8 to ~0.13") == (0, 13)
    assert newest_release("~1.0") == (1, 0)
    assert newest_release(">= ~0.14") is None and newest_release("") is None
    assert newest_release("0ab9d17 (2024-02-06)") is None


def test_w8a16_decode_step_reads_half_the_bf16_weight_bytes() -> None:
    """One decoder layer of Llama 3.1 8B at tp 1 (config.json: hidden 4096, 32 heads, 8 KV heads of 128, gated
    MLP 14336): 4096 x (4096 + 2 x 1024) QKV + 4096 x 4096 out + 3 x 4096 x 14336 MLP = 218,103,808 weights,
    read once by a decode step: 218,103,808 bytes under W8A16 on A100, twice that in bf16."""
    model, cal = catalog.load_model("llama-3.1-8b"), load_calibration("default")
    per_layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336
    assert per_layer == 218_103_808
    zero = np.zeros(1)  # no tokens: the ops' bytes are their weights alone
    weights = {}
    for w, a in ((FP8, FP8), (BF16, BF16)):
        layers = ReplicaCost.of(model, A100, ServingPlan(weight_dtype=w, activation_dtype=a, engine="vllm-v1"),
                                cal)._layers  # fmt: skip
        h, q_out = 4096, 32 * 128 + 2 * 8 * 128
        ops = [layers._gemm("qkv", zero, h * q_out, h, q_out), layers._gemm("out", zero, h * h, h, h),
               layers._mlp_op(zero, model.mlp_parameters(), model.ffn_hidden_size)]  # fmt: skip
        weights[w] = sum(float(op.bytes[0]) for op in ops)
    assert weights[FP8] == per_layer and weights[BF16] == 2 * per_layer


# ---- the three entry points ---------------------------------------------------------------------------------
LLAMA8 = {"model": "llama-3.1-8b", "cluster": "dgx-a100"}
WORKLOAD = ServingWorkload(
    arrival=Arrival.CLOSED, concurrency=4, num_requests=16, input_tokens=256, output_tokens=32
)


def search_a100(engine: str, weight: str = "fp8", kv: str = "bf16") -> ServingSearchResult:
    """``serve_search`` of Llama 3.1 8B on one A100 (``WORKLOAD``) trying only ``weight`` and ``kv`` dtypes."""
    c = ServingSearchConstraints(num_devices=1, weight_dtypes=(weight,), kv_cache_dtypes=(kv,),
                                 max_num_seqs=(64,), max_num_batched_tokens=(2048,), schedulers=("sarathi",),
                                 disaggregation=False, engine=engine, top_k=1)  # fmt: skip
    model = catalog.load_model(LLAMA8["model"])
    return serve_search(model, A100, WORKLOAD, SLO(ttft_s=60.0, tpot_s=10.0), load_calibration("default"),
                        constraints=c)  # fmt: skip


def _store(engine: str) -> Any:
    """The Serving tab's Store for one A100 serving Llama 3.1 8B with fp8 weights and GEMM inputs under
    ``engine``, refreshed."""
    pytest.importorskip("panel")
    from workbench_widgets.app.serving_store import ServingStore

    store = ServingStore()
    store.state.param.update(model_preset="llama-3.1-8b", cluster_preset="dgx-a100", tp=1, num_requests=16,
                             weight_dtype="fp8", activation_dtype="fp8", engine=engine, arrival="closed",
                             concurrency=4, input_tokens=256, output_tokens=32)  # fmt: skip
    store.refresh()
    return store


def test_serve_plan_prices_what_serve_estimate_prices() -> None:
    """The plan ``serve plan`` keeps on one A100 (fp8 weights, vLLM V1) reads weight-only in its row and its
    row's p99 TTFT and TPOT are ``serve_estimate``'s for the same plan and workload; the estimate names the
    reading under ``assumed``."""
    result = search_a100("vllm-v1")
    assert result.table.height == 1
    row = result.table.row(0, named=True)
    assert row["gemm_precision"] == WEIGHT_ONLY and row["weight_dtype"] == "fp8"
    assert any("weight-only W8A16" in n for n in result.notes)
    model = catalog.load_model(LLAMA8["model"])
    est = serve_estimate(
        model, A100, result.plans[0], result.goodput_workloads[0], load_calibration("default")
    )
    s = est.summary()
    assert s["gemm_precision"] == WEIGHT_ONLY and "weight-only W8A16" in s["assumed"][0]
    assert row["ttft_s_at_goodput"] == pytest.approx(s["ttft_s_p99"], rel=1e-12)
    assert row["tpot_s_at_goodput"] == pytest.approx(s["tpot_s_p99"], rel=1e-12)


def test_a_refused_engine_is_refused_by_all_three() -> None:
    """TensorRT-LLM has no FP8 on Ampere: ``serve_estimate`` raises naming weight_dtype, ``serve plan`` counts
    every fp8 plan under ``dtype`` and says why, and the tab shows the same error."""
    model = catalog.load_model(LLAMA8["model"])
    plan = ServingPlan(weight_dtype=FP8, activation_dtype=FP8, engine="trtllm")
    with pytest.raises(ValueError, match="weight_dtype='fp8'") as err:
        serve_estimate(model, A100, plan, WORKLOAD, load_calibration("default"))
    result = search_a100("trtllm")
    assert result.table.height == 0
    counts = dict(zip(result.rejections["reason"], result.rejections["num_plans"], strict=True))
    assert counts["dtype"] == result.num_candidates > 0
    assert any("no fp8 plans" in n and "weight_dtype='fp8'" in n for n in result.notes)
    store = _store(engine="trtllm")
    assert store.estimate is None and "weight_dtype='fp8'" in store.error
    assert str(err.value).split(": ", 1)[1] in store.error


def test_the_tab_prices_what_serve_estimate_prices() -> None:
    store = _store(engine="vllm-v1")
    state = store.state
    assert store.estimate is not None, store.error
    assert list(state.param.activation_dtype.objects) == [
        "bf16",
        "fp16",
        "fp8",
    ]  # fp4 and int4 inputs refused
    model, _, plan, workload, _ = store.specs()
    est = serve_estimate(model, A100, plan, workload, load_calibration("default"))
    tab = store.estimate.summary()
    assert tab["gemm_precision"] == WEIGHT_ONLY and tab["assumed"] == est.summary()["assumed"]
    assert tab["tpot_s_mean"] == pytest.approx(est.summary()["tpot_s_mean"], rel=1e-12)
