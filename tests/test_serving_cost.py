"""Per-iteration serving cost against independent values: published KV sizes, the memory formula worked by hand,
closed-form rooflines, and rejection of plans that cannot run."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.serving.cost import (
    MIN_KERNEL_S,
    IterationCost,
    ReplicaCost,
    expected_experts_touched,
    kv_bytes_per_token,
)
from workbench.specs.engine import EngineProfile
from workbench.specs.serving import Disaggregation, ServingDType, ServingPlan
from workbench.validate.rows import Unexpressible
from workbench.validate.serving import row_case, row_cases
from workbench.validate.serving_csv import DEFAULT_SERVING_DATA, read_serving_rows

GIB = 2**30
H100_BYTES_PER_S = 3.35e12  # H100 SXM5 datasheet
H100_BF16_FLOP_PER_S = 989.4e12  # dense, Hopper whitepaper
HBM_ACHIEVED_FRAC = 0.896  # profiles/kernels/h100-sxm5-80gb.toml [hbm] (FlashMLA README)
GEMM_PLATEAU_FRAC = 0.803  # same file, [gemm.bf16] plateau (Bekman MAMF table)


@pytest.fixture(scope="module")
def cal():
    return load_calibration("default")


@pytest.fixture(scope="module")
def h100():
    return load_cluster("dgx-h100")


def test_kv_bytes_per_token_published_figures() -> None:
    # Llama-3.1-70B: 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 bytes (~0.31 MiB) per token, the
    # figure quoted for Llama-3-70B in serving write-ups (e.g. PagedAttention's formula, Kwon et al. 2023).
    llama = load_model("llama-3.1-70b")
    assert kv_bytes_per_token(llama, "bf16") == 327_680
    assert kv_bytes_per_token(llama, "fp8") == 163_840
    assert kv_bytes_per_token(llama, "bf16", tp=8) == 327_680 / 8  # one KV head per rank
    assert kv_bytes_per_token(llama, "bf16", tp=16) == 327_680 / 8  # heads replicated beyond 8 ranks
    # DeepSeek-V3 MLA: (kv_lora_rank 512 + rope 64) x 61 layers per token, whole on every tp rank
    # (DeepSeek-V2 arXiv:2405.04434 section 2.1.2).
    ds = load_model("deepseek-v3")
    assert kv_bytes_per_token(ds, "bf16") == (512 + 64) * 61 * 2 == 70_272
    assert kv_bytes_per_token(ds, "fp8", tp=8) == (512 + 64) * 61


def test_expected_experts_touched() -> None:
    assert expected_experts_touched(1, 256, 8) == pytest.approx(8.0)  # one token: its top-k
    assert expected_experts_touched(0, 256, 8) == 0.0
    assert expected_experts_touched(10_000, 256, 8) == pytest.approx(256.0)
    # two tokens: 8 + 8 * (248/256) distinct on average
    assert expected_experts_touched(2, 256, 8) == pytest.approx(8 + 8 * 248 / 256)


def test_replica_cost_is_an_iteration_cost(cal, h100) -> None:
    rc = ReplicaCost.of(load_model("llama-3.1-8b"), h100.with_nodes(1), ServingPlan(), cal)
    assert isinstance(rc, IterationCost)
    assert rc.kv_block_tokens == 16
    empty = np.array([], dtype=int)
    assert rc.iteration_s(empty, empty, empty) == 0.0
    assert rc.kv_transfer_s(1000) == 0.0  # aggregated plan


def test_kv_capacity_from_the_memory_formula(cal, h100) -> None:
    """Llama-3.1-8B, bf16, one H100, vLLM defaults, worked by hand."""
    h, f, v, layers = 4096, 14336, 128256, 32
    per_layer = 4096 * (4096 * 2 + 1024 * 2) + 3 * h * f + 2 * h  # q,o + k,v; gated MLP; 2 RMSNorms
    params = layers * per_layer + 2 * v * h + h  # + embedding, LM head, final norm
    assert params == 8_030_261_248  # the published 8.03B
    weights = 2 * params
    t = 8192  # max_num_batched_tokens
    activation = (
        2 * (2 * t * h + 3 * t * f) + 256 * v * 4
    )  # residual + normed, MLP intermediates; fp32 logits
    reserve = 0.25 * GIB
    kv_per_token = layers * 2 * 8 * 128 * 2
    tokens = (80 * GIB * 0.9 - weights - activation - reserve) / kv_per_token
    expected = math.floor(tokens / 16) * 16
    rc = ReplicaCost.of(load_model("llama-3.1-8b"), h100, ServingPlan(), cal)
    assert rc.weight_bytes_per_device() == pytest.approx(weights, rel=1e-6)
    assert rc.kv_capacity_tokens == expected
    assert rc.kv_capacity_tokens % 16 == 0


def test_capacity_counts_attention_dp_ranks_and_pp_stages(cal, h100) -> None:
    model = load_model("qwen3-30b-a3b")  # 48 layers, 4 KV heads of 128
    adp = ReplicaCost.of(model, h100, ServingPlan(tp=1, attention_dp=2, ep=2), cal)
    # each of the 2 attention-DP ranks keeps all 4 KV heads of its own sequences in its own cache
    kv_per_token = 48 * 2 * 4 * 128 * 2
    assert adp.kv_bytes_per_token_per_device() == kv_per_token
    free = 80 * GIB * 0.9 - adp.weight_bytes_per_device() - adp.activation_peak_bytes() - adp.reserve_bytes()
    assert adp.kv_capacity_tokens == 2 * (math.floor(free / kv_per_token / 16) * 16)
    llama = load_model("llama-3.1-70b")
    pp2 = ReplicaCost.of(llama, h100, ServingPlan(tp=4, pp=2), cal)
    tp8 = ReplicaCost.of(llama, h100, ServingPlan(tp=8), cal)
    # pp=2 x tp=4 holds 40 layers x 2 KV heads per device; tp=8 holds 80 layers x 1 head: the same KV per token
    assert pp2.kv_bytes_per_token_per_device() == tp8.kv_bytes_per_token_per_device() == 40 * 2 * 2 * 128 * 2


BARE = EngineProfile(id="bare", name="no host time, no small kernels", step_overhead_s=0.0, layer_kernels=0)
"""An engine whose iterations are only their GEMMs, attention and collectives."""


def test_decode_is_memory_bound_closed_form(cal, h100) -> None:
    """Small-batch decode reads every weight (but the embedding table, a gather) and every cached K/V once."""
    model = load_model("llama-3.1-8b")
    rc = ReplicaCost.of(model, h100, ServingPlan(), cal, engine=BARE)
    batch, context = 8, 1024
    weights_read = 2 * (8_030_261_248 - 128256 * 4096)
    kv_read = batch * context * 32 * 2 * 8 * 128 * 2
    expected = (weights_read + kv_read) / (HBM_ACHIEVED_FRAC * H100_BYTES_PER_S)
    assert rc.decode_s(batch, context) == pytest.approx(expected, rel=0.05)
    assert rc.decode_s(batch, context) >= expected * 0.999  # activations only add


def test_small_kernels_floor_a_batch_one_decode(cal, h100) -> None:
    """At batch 1 a layer's norms, rotary, KV write and activation move a few kB each: every one of the engine's
    ``layer_kernels`` less the attention kernel costs the minimum kernel time instead (32 layers x 5 x 3.8 us)."""
    model = load_model("llama-3.1-8b")
    bare = ReplicaCost.of(model, h100, ServingPlan(), cal, engine=BARE)
    six = ReplicaCost.of(model, h100, ServingPlan(), cal, engine=replace(BARE, layer_kernels=6))
    assert six.decode_s(1, 100) - bare.decode_s(1, 100) == pytest.approx(32 * 5 * MIN_KERNEL_S, rel=0.01)
    assert six.decode_s(1, 100) > bare.decode_s(1, 100) + 0.5e-3


def test_engine_host_time_and_eager_prefill(cal, h100) -> None:
    """vLLM V0 (profiles/engines/vllm-v0.toml): 4 ms of host time per iteration, decode replayed from a CUDA graph,
    a short prefill launched eagerly: 80 layers x (4 GEMMs + 5 small + attention + 2 all-reduces) x 26 us of CPU
    launches, more than its GPU time on 8 H100s."""
    model = load_model("llama-3.1-70b")
    v0 = ReplicaCost.of(model, h100, ServingPlan(tp=8, engine="vllm-v0"), cal)
    graph = ReplicaCost.of(model, h100, ServingPlan(tp=8, engine="vllm-v0"), cal, engine=replace(v0.engine,
                        mixed_cuda_graphs=True))  # fmt: skip
    assert v0.prefill_s(64) == pytest.approx(80 * 12 * 26e-6 + 4e-3)
    assert graph.prefill_s(64) < v0.prefill_s(64) - 5e-3
    assert v0.decode_s(1, 100) == pytest.approx(graph.decode_s(1, 100))  # decodes replay a graph either way
    generic = ReplicaCost.of(model, h100, ServingPlan(tp=8), cal)
    generic = ReplicaCost.of(model, h100, ServingPlan(tp=8), cal, engine=replace(generic.engine,
                             tp_all_reduce="vllm_custom"))  # fmt: skip  # the same all-reduce kernels as V0's
    assert v0.decode_s(1, 100) - generic.decode_s(1, 100) == pytest.approx(4e-3 - 1e-3)
    assert v0.emit_delay_s == 4e-3 and generic.emit_delay_s == 0.0  # vLLM 0.6 asynchronous output processing
    # its outputs callback also waits for the next iteration's eager launch (none when prefills replay graphs)
    assert v0.eager_emit_delay_s == pytest.approx(80 * 12 * 26e-6)
    assert graph.eager_emit_delay_s == 0.0 and generic.eager_emit_delay_s == 0.0


def test_fp8_activation_quantisation_kernels(cal, h100) -> None:
    """fp8 GEMM inputs add the engine's quantisation kernels per GEMM input: 4 per dense layer (qkv, out, gate-up,
    down) x 2 for vLLM V0's dynamic scales, each at least the minimum kernel time at batch 1."""
    model = load_model("llama-3.1-70b")
    fp8 = ServingPlan(
        tp=8, weight_dtype=ServingDType.FP8, activation_dtype=ServingDType.FP8, engine="vllm-v0"
    )
    with_quant = ReplicaCost.of(model, h100, fp8, cal)
    without = ReplicaCost.of(model, h100, fp8, cal, engine=replace(with_quant.engine, fp8_quant_kernels=0))
    extra = with_quant.decode_s(1, 100) - without.decode_s(1, 100)
    assert extra == pytest.approx(80 * 4 * 2 * MIN_KERNEL_S, rel=0.05)


def test_prefill_is_compute_bound_closed_form(cal, h100) -> None:
    """A long prompt runs at the GEMM plateau and the FA3 causal fraction (kernel table), within the roofline."""
    model = load_model("llama-3.1-8b")
    rc = ReplicaCost.of(model, h100, ServingPlan(max_num_batched_tokens=8192), cal, step_overhead_s=0.0)
    t = 8192
    gemm_params = 32 * (4096 * (4096 * 2 + 1024 * 2) + 3 * 4096 * 14336)
    gemm_s = 2 * t * gemm_params / (H100_BF16_FLOP_PER_S * GEMM_PLATEAU_FRAC)
    attention_flop = 32 * 2 * t * (t + 1) / 2 * 32 * (128 + 128)  # causal, 32 heads, d_qk + d_v
    attention_s = attention_flop / (H100_BF16_FLOP_PER_S * 0.608)  # FA3 causal hdim 128 at 8192 keys
    lower = gemm_s + attention_s
    predicted = rc.prefill_s(t)
    assert lower <= predicted <= 1.15 * lower  # the rest: norms, activations, LM head of one token


def test_chunked_prefill_adds_chunks(cal, h100) -> None:
    model = load_model("llama-3.1-8b")
    rc = ReplicaCost.of(model, h100, ServingPlan(max_num_batched_tokens=512), cal)
    empty = np.array([], dtype=int)
    chunks = [rc.iteration_s(np.array([512]), np.array([c]), empty) for c in (0, 512, 1024, 1536)]
    assert rc.prefill_s(2048) == pytest.approx(sum(chunks))
    whole = ReplicaCost.of(model, h100, ServingPlan(max_num_batched_tokens=512, scheduler="vllm"), cal)
    assert whole.prefill_s(2048) < rc.prefill_s(2048)  # one iteration: one step overhead, one weight read


def test_mixed_batch_costs_more_than_its_parts_alone_less_than_their_sum(cal, h100) -> None:
    rc = ReplicaCost.of(load_model("llama-3.1-70b"), h100, ServingPlan(tp=8), cal)
    empty = np.array([], dtype=int)
    prefill = rc.iteration_s(np.array([256]), np.array([0]), empty)
    decode = rc.iteration_s(empty, empty, np.full(32, 1000))
    mixed = rc.iteration_s(np.array([256]), np.array([0]), np.full(32, 1000))
    assert max(prefill, decode) < mixed < prefill + decode  # weights are read once for both


def test_varlen_mixed_batch_decode_tiles_against_published_kernel_times(cal) -> None:
    """LLMServingSim's vLLM 0.19 attention microbenchmarks on an RTX PRO 6000 (casys-kaist/LLMServingSim@5daddb2
    profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp1/attention.csv), per layer: 128 decodes over 1024
    cached tokens alone 404.9 us; beside a 1024-token prompt chunk 824.6 us (the chunk alone 61.1 us). vLLM V1 runs
    both in one FlashAttention-2 varlen call: each decode query takes a 128-row tile per query head, 2 x 128 x 131,072
    keys x 32 heads x 256 = 2.75e11 FLOPs at 0.565 of 483.6 TFLOP/s (the card's fa2 table plateau) = 1.006 ms."""
    cluster = load_cluster("pcie-rtx-pro-6000")
    model = load_model("llama-3.1-8b")
    rc = ReplicaCost.of(model, cluster, ServingPlan(engine="vllm-v1-async", max_num_batched_tokens=2048), cal)
    split = ReplicaCost.of(model, cluster, ServingPlan(engine="vllm-v0", max_num_batched_tokens=2048), cal)
    assert rc.attention.varlen_decode_layer_s(128, 128 * 1024.0) == pytest.approx(
        2.75e11 / (483.6e12 * 0.565), rel=0.01
    )
    assert rc.attention.varlen_decode_layer_s(128, 128 * 1024.0) == pytest.approx(
        824.6e-6 - 61.1e-6, rel=0.35
    )
    assert rc.attention.decode_layer_s(128, 128 * 1024.0) == pytest.approx(404.9e-6, rel=0.15)
    assert split.attention.varlen_decode_layer_s(128, 128 * 1024.0) == split.attention.decode_layer_s(
        128, 128 * 1024.0
    )  # V0: split
    empty = np.array([], dtype=int)
    decodes = np.full(128, 1024)
    extra = rc.iteration_s(np.array([1024]), np.array([0]), decodes) - rc.iteration_s(
        np.array([1024]), np.array([0]), empty
    )
    assert extra > rc.iteration_s(empty, empty, decodes)  # the decodes cost more inside the mixed call
    h100 = load_cluster("dgx-h100")  # FA3 on Hopper packs GQA heads: no tile penalty
    assert ReplicaCost.of(model, h100, ServingPlan(engine="vllm-v1-async"), cal).attention.tile_frac is None


def test_moe_allgather_dispatch_moves_one_copy_per_token(cal) -> None:
    """vLLM's allgather_reducescatter backend: an MoE layer with attention DP 2 all-gathers the 2 ranks' hidden
    states and reduce-scatters them back (T h 16-bit values each), where an all-to-all moves top-k (8) copies of
    each token."""
    from workbench.cost.comm import all_gather_s, reduce_scatter_s

    cluster = load_cluster("pcie-rtx-pro-6000")
    model = load_model("qwen3-30b-a3b")
    plan = ServingPlan(tp=1, ep=2, attention_dp=2, engine="vllm-v1-async", max_num_batched_tokens=4096)
    rc = ReplicaCost.of(model, cluster, plan, cal)
    eff = cal.framework.collective_efficiency_frac
    tokens = np.array([256.0])
    buffer = 2.0 * 256 * model.hidden_size
    expected = all_gather_s(cluster, buffer, 2, 1, eff) + reduce_scatter_s(cluster, buffer, 2, 1, eff)
    assert float(rc.layers.layer_comm_s(True, tokens)[0]) == pytest.approx(float(expected))
    a2a = ReplicaCost.of(model, cluster, replace(plan, engine="generic"), cal)
    assert float(a2a.layers.layer_comm_s(True, tokens)[0]) > 2 * float(expected)


def test_moe_decode_reads_only_touched_experts(cal, h100) -> None:
    ds = load_model("deepseek-v3")
    cluster = load_cluster("dgx-h200")
    plan = ServingPlan(tp=8, ep=8, weight_dtype="fp8", activation_dtype="fp8", kv_cache_dtype="fp8")
    rc = ReplicaCost.of(ds, cluster, plan, cal, step_overhead_s=0.0)
    one, many = rc.decode_s(1, 1000), rc.decode_s(256, 1000)
    # batch 1 touches 8 of 256 routed experts per layer, batch 256 nearly all of them (E (1 - (1 - 8/256)^256) =
    # 256 (1 - e^-8.1) ~ 256): several times the bytes (batch 1 also pays the floors of MLA's seven projection
    # kernels and the router's top-k), far less than 256 single decodes
    assert 4 * one < many < 256 * one


def test_disaggregated_kv_transfer_closed_form(cal) -> None:
    cluster = load_cluster("dgx-h100", num_nodes=2)
    plan = ServingPlan(
        disaggregation=Disaggregation(prefill_workers=1, prefill_tp=8, decode_workers=1, decode_tp=8)
    )
    model = load_model("llama-3.1-70b")
    rc = ReplicaCost.of(model, cluster, plan, cal, role="decode")
    # each of the 8 prefill devices sends its KV head (1000 tokens x 80 layers x 2 x 128 x 2 bytes) to its peer on
    # the next node over InfiniBand: 10 us + bytes / 50 GB/s (dgx-h100 preset)
    share = 1000 * 80 * 2 * 128 * 2
    assert rc.kv_transfer_s(1000) == pytest.approx(10e-6 + share / 50e9)
    assert rc.kv_transfer_s(0) == 0.0
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        rc.kv_transfer_s(-1)


def test_plans_that_cannot_run_are_refused(cal, h100) -> None:
    with pytest.raises(ValueError, match="leave no room for one KV block"):
        ReplicaCost.of(load_model("llama-3.1-405b"), h100, ServingPlan(tp=1), cal)
    with pytest.raises(ValueError, match="tp=3 must divide num_attention_heads=64"):
        ReplicaCost.of(load_model("llama-3.1-70b"), h100, ServingPlan(tp=3), cal)
    with pytest.raises(ValueError, match="ep=2 needs an MoE model"):
        ReplicaCost.of(load_model("llama-3.1-70b"), h100, ServingPlan(tp=2, ep=2), cal)
    with pytest.raises(ValueError, match="role must be one of"):
        ReplicaCost.of(load_model("llama-3.1-8b"), h100, ServingPlan(), cal, role="router")
    rc = ReplicaCost.of(load_model("llama-3.1-8b"), h100, ServingPlan(), cal)
    with pytest.raises(ValueError, match="one entry per prefill chunk"):
        rc.iteration_s(np.array([1, 2]), np.array([0]), np.array([], dtype=int))
    with pytest.raises(ValueError, match="must be >= 1"):
        rc.iteration_s(np.array([], dtype=int), np.array([], dtype=int), np.array([0]))


def test_validation_rows_shipped_and_read() -> None:
    rows = read_serving_rows()
    assert DEFAULT_SERVING_DATA.name == "serving_public.csv"
    assert len(rows) == 46
    cases, skipped = row_cases(rows)
    assert len(cases) + len(skipped) == 46
    reasons = {s.id: s.reason for s in skipped}
    assert "TRT-07" not in reasons  # ep blank: the stack's default scored, the others priced (readings)
    assert "MLP-01" not in reasons  # its data set's mean input length: profiles/validation/datasets.toml
    assert "MLP-02" not in reasons  # MLPerf Server without num_requests: LoadGen's own run length
    assert "SGLG-01" not in reasons  # weights offloaded to Grace memory: workbench.serving.offload
    assert (
        "prefill_workers" in reasons["SGL-01"]
    )  # README: no prefill:decode split; the skip names the column
    assert set(reasons) == {"SGL-01"}
    apex = next(c for c in cases if c.id == "APEX-01")
    assert apex.plan.tp == 8 and apex.plan.num_devices == 8
    assert apex.measured["ttft_mean_s"] == pytest.approx(0.038)
    assert apex.workload is not None and apex.workload.output_lengths()[0] == round(
        81287 / 1024
    )  # generated tokens, EOS not ignored


def test_row_reasons_are_raised_by_a_case_and_returned_by_the_file() -> None:
    row = dict(read_serving_rows()[0])
    row["tp"] = "3"
    with pytest.raises(Unexpressible, match=r"replicas \* tp \* pp"):
        row_case(row)
    cases, skipped = row_cases([row])
    assert cases == [] and skipped[0].id == row["id"] and "replicas * tp * pp" in skipped[0].reason


def test_read_serving_rows_rejects_bad_files(tmp_path) -> None:
    text = DEFAULT_SERVING_DATA.read_text(encoding="utf-8")
    bad_header = tmp_path / "header.csv"
    bad_header.write_text("id,source_key\nA,B\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the header must be the serving columns"):
        read_serving_rows(bad_header)
    lines = text.splitlines(keepends=True)
    dup = tmp_path / "dup.csv"
    dup.write_text(lines[0] + lines[1] + lines[1], encoding="utf-8")
    with pytest.raises(ValueError, match="duplicate row ids"):
        read_serving_rows(dup)
    bad_number = tmp_path / "num.csv"
    bad_number.write_text(lines[0] + lines[1].replace(",8192,64,", ",8192,sixty-four,", 1), encoding="utf-8")
    with pytest.raises(ValueError, match="column num_attention_heads"):
        read_serving_rows(bad_number)
