"""One rule for FP8 / FP4 KV caches per engine and device (issue 49): ``kv_precision``'s readings and refusals,
the KV bytes per token at fp8 and bf16 on A100 (closed form from Llama 3.1 8B's config.json), the decode pricing
of vLLM's FlashInfer path, and the three entry points (``serve_estimate``, ``serve_search``, the app's Serving
tab) agreeing on the same inputs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_serving_precision import WORKLOAD, search_a100
from workbench.presets import catalog
from workbench.presets.calibration import load_calibration
from workbench.presets.engines import load_engine
from workbench.search.serving.result import ServingSearchResult
from workbench.serving.cost import ReplicaCost
from workbench.serving.estimate import serve_estimate
from workbench.serving.precision import AS_IS, KERNEL_PATH, kv_dtypes, kv_precision
from workbench.specs.serving import ServingDType, ServingPlan

FP8, BF16 = ServingDType.FP8, ServingDType.BF16
A100 = catalog.load_cluster("dgx-a100")
"""DGX A100: 8 A100 SXM4 80GB (compute capability 8.0, no fp8 peak)."""


def _kv(engine: str, cluster: str, kv: str) -> Any:
    return kv_precision(load_engine(engine), catalog.load_cluster(cluster).device, kv)


@pytest.mark.parametrize(
    ("engine", "cluster", "kv", "reading", "backend"),
    [
        ("vllm-v0", "dgx-a100", "fp8", KERNEL_PATH, "XFormers (V0 selector"),  # selector.py 0.5-0.7
        (
            "vllm-v0",
            "dgx-h100",
            "fp8",
            KERNEL_PATH,
            "XFormers (V0 selector",
        ),  # on Hopper too: FA2 takes no fp8
        ("vllm-v1", "dgx-a100", "fp8", KERNEL_PATH, "FlashInfer"),  # cuda.py priorities, FA3-only fp8 KV
        ("vllm-v1-async", "pcie-l40s", "fp8", KERNEL_PATH, "FlashInfer"),  # Ada: major 8, not FA3
        ("generic", "dgx-a100", "fp8", KERNEL_PATH, "FlashInfer"),  # vLLM's rule
        ("vllm-v1", "dgx-h100", "fp8", AS_IS, ""),  # flash_attn_supports_fp8: FA3 on major 9
        ("vllm-v1-async", "dgx-b200", "fp4", AS_IS, ""),  # PR #40177: FlashInfer trtllm-gen on SM100
        ("sglang", "dgx-a100", "fp8", AS_IS, ""),  # FlashInfer, SGLang's Ampere default, reads fp8 KV
        ("sglang", "dgx-b200", "fp4", AS_IS, ""),
        ("trtllm", "pcie-l40s", "fp8", AS_IS, ""),  # support matrix: FP8 from Ada
        ("trtllm", "dgx-a100", "bf16", AS_IS, ""),
    ],
)
def test_readings(engine: str, cluster: str, kv: str, reading: str, backend: str) -> None:
    p = _kv(engine, cluster, kv)
    assert (p.reading, p.kv_dtype.value) == (reading, kv)
    assert p.backend.startswith(backend) and (p.backend == "") == (reading == AS_IS)
    assert p.varlen_decodes == (reading == AS_IS) and (p.note == "") == (reading == AS_IS)


def test_v1_profile_spanning_the_v0_fallback_says_so() -> None:
    """vLLM 0.8-0.10 send fp8 KV off Hopper back to V0 (_is_v1_supported_oracle); the 0.8-0.13 profile prices its
    newest release (FlashInfer) and names the older ones; the >= 0.14 profile does not."""
    assert "before 0.11 fall back to V0's XFormers" in _kv("vllm-v1", "dgx-a100", "fp8").note
    assert "fall back" not in _kv("vllm-v1-async", "dgx-a100", "fp8").note


@pytest.mark.parametrize(
    ("engine", "cluster", "kv", "why", "allowed"),
    [
        ("trtllm", "dgx-a100", "fp8", "Ampere takes INT8 KV", "bf16, fp16"),  # support matrix
        ("trtllm-mlperf-v4", "dgx-a100", "fp8", "from Ada (sm89) on", "bf16, fp16"),
        ("vllm-v1", "dgx-a100", "int4", "no engine modelled here stores an int4", "bf16, fp16, fp8"),
        ("sglang", "dgx-h100", "fp4", "datacenter Blackwell", "bf16, fp16, fp8"),
        ("vllm-v1", "dgx-b200", "fp4", "arrives in 0.20, after the profile's releases", "bf16, fp16, fp8"),
        ("trtllm", "dgx-b200", "fp4", "arrives in 1.1", "bf16, fp16, fp8"),  # PR #6244 after the 1.0 branch
        ("trtllm-mlperf-v4", "dgx-b200", "fp4", "pinned to a commit", "bf16, fp16, fp8"),
    ],
)
def test_refusals_name_the_field_value_and_choices(
    engine: str, cluster: str, kv: str, why: str, allowed: str
) -> None:
    with pytest.raises(ValueError) as err:
        _kv(engine, cluster, kv)
    text = str(err.value)
    assert text.startswith(f"kv_cache_dtype={kv!r}: engine {engine!r}") and why in text
    assert text.endswith(f"choose kv_cache_dtype {allowed}")
    device = catalog.load_cluster(cluster).device
    assert ", ".join(d.value for d in kv_dtypes(load_engine(engine), device)) == allowed


def test_kv_bytes_per_token_fp8_is_half_bf16_on_a100() -> None:
    """Llama 3.1 8B (config.json: 32 layers, 8 KV heads of 128) at tp 1: K and V take 32 x 2 x 8 x 128 = 65,536
    values per token, 131,072 bytes in bf16 and 65,536 in fp8 (vLLM's fp8 cache stores 1 byte per element,
    up-converted in the attention kernel); the KV pool then holds twice the tokens, to the block."""
    model, cal = catalog.load_model("llama-3.1-8b"), load_calibration("default")
    values = 32 * 2 * 8 * 128
    costs = {
        kv: ReplicaCost.of(model, A100, ServingPlan(kv_cache_dtype=kv, engine="vllm-v1"), cal)
        for kv in (BF16, FP8)
    }
    assert costs[BF16].kv_bytes_per_token_per_device() == 2 * values == 131_072
    assert costs[FP8].kv_bytes_per_token_per_device() == values == 65_536
    block = costs[FP8].kv_block_tokens
    assert abs(costs[FP8].kv_capacity_tokens - 2 * costs[BF16].kv_capacity_tokens) <= 2 * block


def test_flashinfer_path_prices_decodes_in_their_own_kernel() -> None:
    """vLLM V1 runs bf16 decodes of a mixed batch inside one FA2 varlen call on A100 (``VARLEN_TILE_ROWS``); with
    fp8 KV it runs FlashInfer, whose decodes take their own kernel: no tile cost, and the decode reads half the
    bytes."""
    model, cal = catalog.load_model("llama-3.1-8b"), load_calibration("default")
    att = {kv: ReplicaCost.of(model, A100, ServingPlan(kv_cache_dtype=kv, engine="vllm-v1"), cal)._attention
           for kv in (BF16, FP8)}  # fmt: skip
    assert att[BF16].tile_frac is not None and att[FP8].tile_frac is None
    alone = att[FP8].decode_layer_s(64, 64 * 1024.0)
    assert att[FP8].varlen_decode_layer_s(64, 64 * 1024.0) == alone
    assert att[BF16].varlen_decode_layer_s(64, 64 * 1024.0) > att[BF16].decode_layer_s(64, 64 * 1024.0)


# ---- the three entry points ---------------------------------------------------------------------------------
def _search(engine: str) -> ServingSearchResult:
    return search_a100(engine, weight="bf16", kv="fp8")


def _store(engine: str) -> Any:
    """The Serving tab's Store for one A100 serving Llama 3.1 8B in bf16 with an fp8 KV cache under ``engine``."""
    pytest.importorskip("panel")
    from workbench_widgets.app.serving_store import ServingStore

    store = ServingStore()
    store.state.param.update(model_preset="llama-3.1-8b", cluster_preset="dgx-a100", tp=1, num_requests=16,
                             weight_dtype="bf16", activation_dtype="bf16", kv_cache_dtype="fp8", engine=engine,
                             arrival="closed", concurrency=4, input_tokens=256, output_tokens=32)  # fmt: skip
    store.refresh()
    return store


def test_the_three_entry_points_read_fp8_kv_on_a100_alike() -> None:
    """``serve plan`` keeps an fp8-KV plan on A100 under vLLM V1 and notes the FlashInfer path; ``serve_estimate``
    of that plan lists the same note under ``assumed`` and gives the row's p99 TTFT and TPOT; the tab's estimate
    lists the same notes and mean TPOT."""
    result = _search("vllm-v1")
    assert result.table.height == 1 and result.table.row(0, named=True)["kv_cache_dtype"] == "fp8"
    note = _kv("vllm-v1", "dgx-a100", "fp8").note
    assert note in result.notes
    model = catalog.load_model("llama-3.1-8b")
    est = serve_estimate(
        model, A100, result.plans[0], result.goodput_workloads[0], load_calibration("default")
    )
    s = est.summary()
    assert s["assumed"] == [note]
    row = result.table.row(0, named=True)
    assert row["ttft_s_at_goodput"] == pytest.approx(s["ttft_s_p99"], rel=1e-12)
    assert row["tpot_s_at_goodput"] == pytest.approx(s["tpot_s_p99"], rel=1e-12)
    store = _store("vllm-v1")
    assert store.estimate is not None, store.error
    assert "fp8" in store.state.param.kv_cache_dtype.objects
    _, _, plan, workload, _ = store.specs()
    tab, alone = (
        store.estimate.summary(),
        serve_estimate(model, A100, plan, workload, load_calibration("default")),
    )
    assert tab["assumed"] == alone.summary()["assumed"] == [note]
    assert tab["tpot_s_mean"] == pytest.approx(alone.summary()["tpot_s_mean"], rel=1e-12)


def test_a_refused_kv_cache_is_refused_by_all_three() -> None:
    """TensorRT-LLM stores no FP8 KV on Ampere: ``serve_estimate`` raises naming kv_cache_dtype, ``serve plan``
    counts every plan under ``dtype`` and says why, and the tab shows the same error and does not offer fp8."""
    model = catalog.load_model("llama-3.1-8b")
    plan = ServingPlan(kv_cache_dtype=FP8, engine="trtllm")
    with pytest.raises(ValueError, match="kv_cache_dtype='fp8'") as err:
        serve_estimate(model, A100, plan, WORKLOAD, load_calibration("default"))
    why = str(err.value).split(": ", 1)[1]
    result = _search("trtllm")
    assert result.table.height == 0
    counts = dict(zip(result.rejections["reason"], result.rejections["num_plans"], strict=True))
    assert counts["dtype"] == result.num_candidates > 0
    assert f"no kv-fp8 plans: {why}" in result.notes
    store = _store("trtllm")
    assert store.estimate is None and why in store.error
    assert [d for d in store.state.param.kv_cache_dtype.objects if d != "fp8"] == ["bf16", "fp16"]
