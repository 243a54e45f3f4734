"""Serving engine profiles (profiles/engines/), the engine settings the validation rows take (trtllm-bench's own
batch sizing worked by hand, its FP8 KV rule, vLLM data-parallel caps) and the device presets the serving rows
need, checked against their datasheet figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from workbench.cost.flops import matmul_efficiency_frac
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_device, load_model
from workbench.presets.engines import engine_from_dict, engine_names, load_engine
from workbench.serving.cost import ReplicaCost
from workbench.serving.engine_defaults import trtllm_bench_settings
from workbench.specs.engine import EngineProfile
from workbench.specs.serving import Scheduler, ServingDType, ServingPlan
from workbench.validate.rows import Unexpressible
from workbench.validate.serving import ServingCase, row_case
from workbench.validate.serving_csv import read_serving_rows

GIB = 2.0**30


def test_every_profile_loads_and_cites_what_it_sets() -> None:
    assert {"generic", "vllm-v0", "vllm-v1", "sglang", "trtllm"} <= set(engine_names())
    for name in engine_names():
        prof = load_engine(name)
        assert prof.id == name
        assert "step_overhead_s" in prof.sources and "kv_admission" in prof.sources


def test_published_engine_facts() -> None:
    v0, trt = load_engine("vllm-v0"), load_engine("trtllm")
    assert v0.step_overhead_s == pytest.approx(4e-3)  # vLLM RFC #6854: ~4 ms GPU bubble per decode step
    assert v0.max_graph_batch == 256 and not v0.mixed_cuda_graphs and v0.async_output
    assert trt.kv_admission == "full" and trt.chunked_prefill is False  # GUARANTEED_NO_EVICT, no chunking
    assert v0.graph_launched(0, 256) and not v0.graph_launched(0, 257) and not v0.graph_launched(10, 1)


def test_profile_errors_name_the_file_and_field() -> None:
    base = {"id": "x", "name": "x"}
    with pytest.raises(ValueError, match=r"f\.toml: unknown key\(s\) \['warp'\]"):
        engine_from_dict({**base, "warp": 1}, where="f.toml")
    with pytest.raises(ValueError, match="given twice"):
        engine_from_dict({**base, "step_overhead_ms": 1.0, "step_overhead_us": 1.0}, where="f.toml")
    with pytest.raises(ValueError, match="step_overhead_s must be a finite number"):
        engine_from_dict({**base, "step_overhead_ms": -1.0}, where="f.toml")
    with pytest.raises(ValueError, match="kv_admission must be one of prompt, full"):
        EngineProfile(id="x", name="x", kv_admission="lazy")
    with pytest.raises(ValueError, match="layer_kernels must be an integer in 0..64"):
        EngineProfile(id="x", name="x", layer_kernels=100)
    with pytest.raises(ValueError, match="unknown; known: generic"):
        load_engine("tgi")
    with pytest.raises(ValueError, match="engine must be an engine profile id"):
        ServingPlan(engine="")
    h100 = load_cluster("dgx-h100")
    with pytest.raises(ValueError, match="engine 'tgi': unknown"):
        ReplicaCost.of(
            load_model("llama-3.1-8b"), h100, ServingPlan(engine="tgi"), load_calibration("default")
        )


def test_a_profile_states_only_what_differs_from_its_base(tmp_path: Path) -> None:
    """``vllm-v0-inproc`` names ``vllm-v0`` as its base: every field but the four it sets is vllm-v0's, sources
    included; a key in another unit replaces the base's; unknown bases and cycles name the file."""
    v0, inproc = load_engine("vllm-v0"), load_engine("vllm-v0-inproc")
    own = {"id", "name", "versions", "description", "frontend_host_per_request_s", "sources"}
    for f in dataclasses.fields(EngineProfile):
        if f.name not in own:
            assert getattr(inproc, f.name) == getattr(v0, f.name), f.name
    assert (
        inproc.frontend_host_per_request_s == pytest.approx(127e-6) and v0.frontend_host_per_request_s == 0.0
    )
    assert inproc.sources["step_overhead_s"] == v0.sources["step_overhead_s"]
    assert "PR #6883" in inproc.sources["frontend_host_per_request_s"]

    def write(name: str, body: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(f'id = "{name}"\nname = "{name}"\n{body}')
        return path

    write("a", 'step_overhead_ms = 4.0\n[sources]\nstep_overhead_s = "a"\n')
    b = load_engine(write("b", 'base = "a"\nstep_overhead_us = 30.0\n'))
    assert b.step_overhead_s == pytest.approx(30e-6) and b.sources == {"step_overhead_s": "a"}
    with pytest.raises(ValueError, match=r"c\.toml: base 'zz': unknown engine; known: a, b, c"):
        load_engine(write("c", 'base = "zz"\n'))
    write("d", 'base = "e"\n')
    with pytest.raises(ValueError, match=r"d\.toml: base 'e' makes a cycle \(e -> d -> e\)"):
        load_engine(write("e", 'base = "d"\n'))


def test_graph_padding_follows_the_engines_capture_sizes() -> None:
    """TensorRT-LLM (perf-overview llm_options.yml, ``_round_up_batch_size``, ``_filter_cuda_graph_batch_sizes``)
    and vLLM V0 (``_get_graph_batch_size``), worked by hand."""
    trt, v0, generic = load_engine("trtllm"), load_engine("vllm-v0"), load_engine("generic")
    assert [
        trt.padded_decode_batch(n, trt.kept_graph_sizes(640)) for n in (1, 3, 200, 257, 385, 600, 640)
    ] == [
        1,
        4,
        256,
        384,
        512,
        640,
        640,
    ]
    # a 300-sequence limit keeps 1..256 and pads past it to 300; a limit on a kept size adds nothing
    assert [trt.padded_decode_batch(n, trt.kept_graph_sizes(300)) for n in (256, 257, 300)] == [256, 300, 300]
    assert trt.padded_decode_batch(300, trt.kept_graph_sizes(384)) == 384
    assert [v0.padded_decode_batch(n, v0.kept_graph_sizes(256)) for n in (3, 5, 9, 250, 257)] == [
        4,
        8,
        16,
        256,
        257,
    ]  # 257: eager
    assert generic.padded_decode_batch(270, generic.kept_graph_sizes(512)) == 270
    with pytest.raises(ValueError, match="graph_batch_sizes must rise strictly, got \\[4, 2\\]"):
        EngineProfile(id="x", name="x", graph_batch_sizes=(4, 2))
    with pytest.raises(
        ValueError, match="graph_batch_sizes entry must be an integer in 1..512 .max_graph_batch"
    ):
        EngineProfile(id="x", name="x", graph_batch_sizes=(1, 1024))
    with pytest.raises(ValueError, match="f.toml: .*graph_batch_sizes must be a list"):
        engine_from_dict({"id": "x", "name": "x", "graph_batch_sizes": 8}, where="f.toml")


def test_a_padded_decode_costs_what_its_dummies_add() -> None:
    """A decode-only iteration of a padding engine costs the same iteration of a non-padding one with the dummy
    sequences (one cached token each) added; mixed iterations are not padded."""
    model, h100, cal = load_model("llama-3.1-70b"), load_cluster("dgx-h100"), load_calibration("default")
    plan = ServingPlan(tp=2, max_num_seqs=384, max_num_batched_tokens=2048, engine="trtllm")
    trt = load_engine("trtllm")
    padded = ReplicaCost.of(model, h100, plan, cal, engine=trt)
    exact = ReplicaCost.of(model, h100, plan, cal, engine=dataclasses.replace(trt, graph_batch_sizes=()))
    none = np.array([], dtype=int)
    ctx = np.full(270, 1500)
    with_dummies = np.concatenate([ctx, np.ones(384 - 270, dtype=int)])
    assert padded.iteration_s(none, none, ctx) == exact.iteration_s(none, none, with_dummies)
    assert padded.iteration_s(none, none, ctx) > 1.05 * exact.iteration_s(none, none, ctx)
    mixed = (np.array([1000]), np.array([0]), ctx)
    assert padded.iteration_s(*mixed) == exact.iteration_s(*mixed)


def test_trtllm_bench_settings_worked_by_hand() -> None:
    """tensorrt_llm/bench/build/tuning.py for Llama-3.1-8B FP8 with an FP8 KV cache on one 80 GiB H100, 1000/1000
    tokens, 0.9 of the free memory: KV 2 x 32 layers x 8 heads x 128 x 1 byte = 64 KiB a token; weights
    8,030,261,248 x 1 byte = 7.479 GiB; (80 - 7.479) x 0.9 / (64 KiB x 2000 / GiB) = 534.7 requests; batch
    128 x ceil(534.7 / 128) = 640; tokens 534.7 x 2 = 1,069 -> the 2,048 floor, above ISL + batch = 1,640."""
    model, h100 = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    kw = {"tp": 1, "pp": 1, "input_tokens": 1000, "output_tokens": 1000, "weight_dtype": ServingDType.FP8}
    assert trtllm_bench_settings(model, h100, kv_cache_dtype=ServingDType.FP8, **kw) == (640, 2048)  # type: ignore[arg-type]
    # a 16-bit KV cache halves the requests (267.4): batch 128 x 3 = 384, tokens max(2048, 1000 + 384)
    assert trtllm_bench_settings(model, h100, kv_cache_dtype=ServingDType.BF16, **kw) == (384, 2048)  # type: ignore[arg-type]
    # 20,000-token prompts: 25.5 requests -> the batch floor 64, and whole prompts: 20,000 + 64 tokens
    long = {**kw, "input_tokens": 20_000, "output_tokens": 2000}
    assert trtllm_bench_settings(model, h100, kv_cache_dtype=ServingDType.BF16, **long) == (64, 20_064)  # type: ignore[arg-type]


def _case(row_id: str) -> ServingCase:
    row = next(r for r in read_serving_rows() if r["id"] == row_id)
    case = row_case(row)
    assert isinstance(case, ServingCase), case
    return case


def test_rows_take_their_engine_settings() -> None:
    trt = _case("TRT-02")  # trtllm-bench, FP8 checkpoint, KV dtype not stated
    assert trt.plan.engine == "trtllm" and trt.plan.kv_cache_dtype is ServingDType.FP8
    assert (trt.plan.max_num_seqs, trt.plan.max_num_batched_tokens) == (640, 2048)
    assert any("trtllm-bench" in a for a in trt.assumed)
    assert _case("APEX-01").plan.engine == "vllm-v0-inproc"  # vLLM 0.6.0, the API server in its process
    lss = _case("LSS-04")  # vLLM 0.19 (async scheduling on), data_parallel_size 2, max_num_seqs 128 per rank
    assert lss.plan.engine == "vllm-v1-async" and lss.plan.attention_dp == 2
    assert (lss.plan.max_num_seqs, lss.plan.max_num_batched_tokens) == (256, 4096)


def test_vllm_versions_and_v1_batch_defaults() -> None:
    """V1 became the default engine in vLLM 0.8.0; asynchronous scheduling from ~0.14. A V1 server without
    --max-num-seqs / --max-num-batched-tokens takes (1024, 8192) on a device of >= 70 GiB that is not an A100, else
    (256, 2048) (vllm/engine/arg_utils.py get_batch_defaults, OPENAI_API_SERVER context)."""
    row = next(r for r in read_serving_rows() if r["id"] == "LSS-02")
    blank = {"max_batch_size": "", "max_num_batched_tokens": ""}
    for version, engine in (
        ("0.7.3", "vllm-v0"),
        ("0.8.5", "vllm-v1"),
        ("0.10.1rc2", "vllm-v1"),
        ("0.19.0", "vllm-v1-async"),
        ("v0.6.3.post1", "vllm-v0"),  # as sources also write it: a leading v, a runtime or image prefix
        ("vLLM 0.8.5", "vllm-v1"),
        ("vllm/vllm-openai:v0.6.0", "vllm-v0"),
        ("~0.14.1", "vllm-v1-async"),
        ("nightly", "vllm-v1"),  # no release number: read as a blank version (V1)
    ):
        case = row_case({**row, "engine_version": version})
        assert isinstance(case, ServingCase) and case.plan.engine == engine, version
    pro = row_case({**row, **blank})  # 96 GB RTX PRO 6000
    assert isinstance(pro, ServingCase)
    assert (pro.plan.max_num_seqs, pro.plan.max_num_batched_tokens) == (1024, 8192)
    small = row_case({**row, **blank, "device": "rtx4090-24gb", "gpu_memory_utilization_frac": "0.9"})
    assert isinstance(small, ServingCase)
    assert (small.plan.max_num_seqs, small.plan.max_num_batched_tokens) == (256, 2048)
    a100 = row_case({**row, **blank, "device": "a100-sxm4-80gb", "cluster": "dgx-a100"})
    assert isinstance(a100, ServingCase)
    assert (a100.plan.max_num_seqs, a100.plan.max_num_batched_tokens) == (256, 2048)  # A100s excepted


def test_lss_rows_replay_their_trace() -> None:
    """LLMServingSim replays its workload file strictly: 300 requests arriving over 29.1 s, 257,239 prompt and 195,753
    output tokens for Llama-3.1-8B (sums of input_toks / output_toks in the run's requests.jsonl)."""
    case = _case("LSS-01")
    trace = case.workload.trace
    assert case.workload.arrival.value == "trace" and trace is not None and len(trace) == 300
    assert sum(t[1] for t in trace) == 257_239 and sum(t[2] for t in trace) == 195_753
    assert trace[-1][0] - trace[0][0] == pytest.approx(29.14, abs=0.01)
    row = next(r for r in read_serving_rows() if r["id"] == "LSS-01")
    other = row_case({**row, "num_requests": "299"})  # not the run's trace: Poisson with the means, said so
    assert other.workload.arrival.value == "poisson"
    assert any("does not describe this run (300 requests, not num_requests=299)" in a for a in other.assumed)
    counted = row_case(
        {**row, "num_requests": "", "ignore_eos": ""}
    )  # the file gives the count and the lengths
    assert (
        counted.workload.trace == trace
        and "num_requests=300 (blank): the requests of the trace file" in counted.assumed
    )
    assert (
        row_case({**row, "ignore_eos": "false"}).workload.arrival.value == "poisson"
    )  # generated total unknown
    apex = _case("APEX-06")  # no trace file shipped: Poisson at the row's rate with the mean lengths
    assert apex.workload.arrival.value == "poisson"


def test_serving_device_presets_match_their_datasheets() -> None:
    rtx4090 = load_device("rtx4090-24gb")  # Ada whitepaper, FP32 accumulation
    assert rtx4090.peak("bf16") == pytest.approx(165.2e12) and rtx4090.peak("fp8") == pytest.approx(330.3e12)
    assert rtx4090.hbm_bytes_per_s == pytest.approx(384 * 21e9 / 8)  # 384-bit GDDR6X at 21 Gbps
    assert rtx4090.hbm_bytes == pytest.approx(23.5 * GIB)  # 25,250,627,584 bytes reported by the card
    pro = load_device("rtx-pro-6000-96gb")  # Server Edition datasheet: 1,597 GB/s, 120 TFLOPS FP32
    assert pro.hbm_bytes_per_s == pytest.approx(1597e9) and pro.peak("fp32") == pytest.approx(120e12)
    # RTX PRO Blackwell whitepaper: Workstation Edition 503.8 TFLOPS dense BF16 at 125 TFLOPS FP32, same SMs
    assert pro.peak("bf16") == pytest.approx(503.8e12 * 120 / 125, rel=1e-3)
    assert pro.hbm_bytes == 96 * GIB and pro.peak("fp8") == pytest.approx(2 * pro.peak("bf16"))
    assert load_cluster("pcie-rtx-pro-6000").device.id == pro.id
    assert load_cluster("pcie-rtx4090").device.id == rtx4090.id
    # PCIe Gen4 x16 in NCCL's topology model: 16 lanes x 120 x 100 Mb/s / 8 (topo.cc kvDictPciGen)
    assert load_cluster("pcie-rtx4090").levels[0].bytes_per_s == pytest.approx(16 * 120 * 1e8 / 8)


def test_rtx_kernel_tables_reproduce_their_microbenchmarks() -> None:
    """Published kernel times (LLMServingSim@5daddb2 profiler/perf, vLLM 0.19): Llama-3.1-8B gate_up_proj (4096 x
    28672 bf16) at 1 token reads 235 MB in 159.5 us on the RTX PRO 6000 and 247.3 us on the RTX 4090; at 2048
    tokens (4.81e11 FLOPs) it takes 1,152.8 us / 2,896.8 us."""
    cal = load_calibration("default")
    for device, gemv_us, gemm_us in (("rtx-pro-6000-96gb", 159.5, 1152.8), ("rtx4090-24gb", 247.3, 2896.8)):
        spec = cal.device(load_device(device))
        weights = 4096 * 28672 * 2
        assert weights / (spec.hbm_bytes_per_s * spec.hbm_efficiency_frac) == pytest.approx(
            gemv_us * 1e-6, rel=0.1
        )
        flop = 2 * 2048 * 4096 * 28672
        frac = float(matmul_efficiency_frac(flop, cal.gemm_curve(spec, "bf16")))
        assert flop / (spec.peak("bf16") * frac) == pytest.approx(gemm_us * 1e-6, rel=0.1)


def test_a_blank_replica_count_or_tensor_degree_is_what_the_devices_leave() -> None:
    """A TRT-LLM row set to 4 replicas of TP2 on 8 H100s: either blank cell comes back from the other and the
    device count; both blank, or degrees that do not divide the devices, skip the row with the reason."""
    row = next(r for r in read_serving_rows() if r["id"] == "TRT-02")
    row = {**row, "num_devices_total": "8", "replicas": "4", "tp": "2", "pp": "1"}
    for blank in ("replicas", "tp"):
        case = row_case({**row, blank: ""})
        assert isinstance(case, ServingCase), case
        assert (case.plan.replicas, case.plan.tp) == (4, 2)
        assert any(a.startswith(f"{blank}=") for a in case.assumed)
    with pytest.raises(Unexpressible, match="tp is blank"):
        row_case({**row, "replicas": "", "tp": ""})
    with pytest.raises(Unexpressible, match="not a multiple of tp x pp x attention_dp = 3"):
        row_case({**row, "replicas": "", "tp": "3"})


def test_serving_code_cells_are_read_case_insensitively(tmp_path: Path) -> None:
    import csv

    from workbench.validate.serving_csv import SERVING_COLUMNS

    row = next(r for r in read_serving_rows() if r["id"] == "TRT-02")
    shouted = {**row, "engine": "TRTLLM", "weight_dtype": "FP8 ", "activation_dtype": "Fp8", "phase": "E2E"}
    path = tmp_path / "s.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(SERVING_COLUMNS))
        w.writeheader()
        w.writerow(shouted)
    (read,) = read_serving_rows(path)
    case, plain = row_case(read), row_case(row)
    assert isinstance(case, ServingCase) and isinstance(plain, ServingCase)
    assert (case.plan, case.workload) == (plain.plan, plain.workload)


def test_vllm_v0_chunks_prefills_only_for_a_long_context() -> None:
    """vLLM 0.5-0.7 turns chunked prefill on by default only when max_model_len > 32768 (EngineArgs), with a
    512-token budget; below it whole prompts are prefilled with max(max_model_len, 2048) tokens per iteration
    (SchedulerConfig). APEX's TP2 servers ran with --max-model-len 24272 (Llama) and 20560 (Mistral); its TP4/TP8
    servers took Llama 3.1's 131k context."""
    for row_id, budget in (("APEX-03", 24272), ("APEX-05", 24272), ("APEX-10", 24272), ("APEX-13", 20560)):
        case = _case(row_id)
        assert (case.plan.scheduler, case.plan.max_num_batched_tokens) == (Scheduler.VLLM, budget), row_id
        assert any("--max-model-len" in a for a in case.assumed)
    long = _case("APEX-01")
    assert (long.plan.scheduler, long.plan.max_num_batched_tokens) == (Scheduler.SARATHI, 512)
    row = next(r for r in read_serving_rows() if r["id"] == "APEX-03")
    above = row_case({**row, "notes": "launched with --max-model-len 52720"})
    assert (above.plan.scheduler, above.plan.max_num_batched_tokens) == (Scheduler.SARATHI, 512)
    short = row_case({**row, "notes": "launched with --max-model-len 1024"})
    assert (short.plan.scheduler, short.plan.max_num_batched_tokens) == (Scheduler.VLLM, 2048)


def test_redundant_experts_are_read_from_the_quoted_launch_flag() -> None:
    """The LMSYS MTP rows leave num_redundant_experts blank, but their notes quote the decode launch line of
    sgl-project/sglang issue #7998 with --ep-num-redundant-experts 32: 256 + 32 expert slots over the 16 EP ranks.
    A filled column wins over the notes; a row with neither has none."""
    for row_id in ("SGLM-01", "SGLM-02", "SGLM-03"):
        case = _case(row_id)
        assert case.plan.num_redundant_experts == 32, row_id
        assert any("--ep-num-redundant-experts" in a for a in case.assumed)
    assert _case("SGLB-04").plan.num_redundant_experts == 32  # the column, as its notes' flag says
    row = next(r for r in read_serving_rows() if r["id"] == "SGLM-01")
    assert row_case({**row, "num_redundant_experts": "0"}).plan.num_redundant_experts == 0
    assert (
        row_case({**row, "notes": "launched with --ep-num-redundant-experts=64"}).plan.num_redundant_experts
        == 64
    )
    plain = row_case({**row, "notes": "no flag quoted"})
    assert plain.plan.num_redundant_experts == 0
    assert not any("redundant" in a for a in plain.assumed)


def test_the_mlperf_v40_profile_states_the_harness_settings_over_trtllm() -> None:
    """``trtllm-mlperf-v4`` (NVIDIA's v4.0 harness_llm on TensorRT-LLM's C++ runtime) differs from ``trtllm`` only
    where the harness says so: main_llm.cc ``use_graphs`` false (no CUDA graphs, so no padding to captured sizes),
    ``trtllm_batch_sched_policy`` "max_util" (MAX_UTILIZATION: admit on the context's blocks, pause when full),
    ``enable_trt_overlap`` false with no measured host time of that runtime (left unpriced)."""
    base, v4 = load_engine("trtllm"), load_engine("trtllm-mlperf-v4")
    own = {
        "decode_cuda_graphs",
        "mixed_cuda_graphs",
        "graph_batch_sizes",
        "kv_admission",
        "host_per_request_s",
    }
    for f in dataclasses.fields(EngineProfile):
        if f.name not in own | {"id", "name", "versions", "description", "sources"}:
            assert getattr(v4, f.name) == getattr(base, f.name), f.name
    assert (v4.decode_cuda_graphs, v4.mixed_cuda_graphs, v4.graph_batch_sizes) == (False, False, ())
    assert (base.kv_admission, v4.kv_admission) == ("full", "prompt")
    assert v4.host_per_request_s == 0.0 and v4.step_overhead_s == 0.0
    assert v4.padded_decode_batch(897, v4.kept_graph_sizes(1024)) == 897  # the base pads 897 to 1024
    assert base.padded_decode_batch(897, base.kept_graph_sizes(1024)) == 1024
    assert "use_graphs" in v4.sources["decode_cuda_graphs"] and "max_util" in v4.sources["kv_admission"]
    assert "NO published measurement" in v4.sources["host_per_request_s"]


def test_the_mlperf_rows_run_in_nvidias_v40_harness() -> None:
    for row_id in ("MLP-01", "MLP-02", "MLP-03", "MLP-04"):
        case = _case(row_id)
        assert case.plan.engine == "trtllm-mlperf-v4", row_id
        # code/llama2-70b/tensorrt/builder.py: --max_num_tokens=16384 (the engine's build setting)
        assert case.plan.max_num_batched_tokens == 16384, row_id
        assert any(a.startswith("engine profile trtllm-mlperf-v4") for a in case.assumed)
    assert _case("TRT-02").plan.engine == "trtllm"  # trtllm-bench rows keep the 1.0 profile


def test_the_v40_harness_follows_the_results_repository_not_the_source_key() -> None:
    """A TensorRT-LLM row that names MLPerf v4.0's results (a partner's submission runs NVIDIA's harness code) gets the
    v4.0 harness under any source key; a later round's row, whose harness settings were not read, keeps trtllm."""
    mlp = next(r for r in read_serving_rows() if r["id"] == "MLP-01")
    partner = mlp | {
        "source_key": "MLPERF_INF40_PARTNER",
        "source": "MLPerf Inference v4.0 closed division, a partner's submission",
        "locator": "mlcommons/inference_results_v4.0@3c4a1cf closed/HPE/results/x/llama2-70b-99/Offline/...",
    }
    case = row_case(partner)
    assert isinstance(case, ServingCase)
    assert case.plan.engine == "trtllm-mlperf-v4" and case.plan.max_num_batched_tokens == 16384
    later = partner | {
        "source": "MLPerf Inference v4.1 closed division",
        "locator": "mlcommons/inference_results_v4.1@0000000 closed/NVIDIA/results/x/llama2-70b-99/Offline/...",
    }
    assert _plan_engine(later) == "trtllm"
    assert _plan_engine(partner | {"engine": "vllm"}) != "trtllm-mlperf-v4"


def _plan_engine(row: dict[str, str]) -> str:
    case = row_case(row)
    assert isinstance(case, ServingCase), case
    return case.plan.engine
