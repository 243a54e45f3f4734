"""Serving as deployed (issue 49): speculative decoding, prefix caching, disaggregated pools in ``serve estimate``,
steady-state closed loops. Independent values: the acceptance arithmetic of Leviathan et al. 2023 (closed form and
a Monte Carlo of the acceptance process), KV bytes by hand, a closed loop's steady state by Little's law."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from workbench_cli import cli

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.serving.cost import ReplicaCost
from workbench.serving.estimate import serve_estimate
from workbench.serving.requests import Requests
from workbench.serving.simulate import simulate
from workbench.serving.speculative import speculative_steps
from workbench.serving.steady import steady_window
from workbench.specs.serving import Disaggregation, ServingPlan, ServingWorkload
from workbench.specs.speculative import SpeculativeDecoding, expected_accepted_length

CAL = load_calibration("default")
M70 = load_model("llama-3.1-70b")
NODE = load_cluster("dgx-h100", 1)
EAGLE = SpeculativeDecoding(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7)


def closed(concurrency: int, n: int, n_in: int = 1024, n_out: int = 256, **kw: float) -> ServingWorkload:
    return ServingWorkload(arrival="closed", concurrency=concurrency, num_requests=n, input_tokens=n_in,
                           output_tokens=n_out, **kw)  # fmt: skip


def test_accepted_length_is_leviathans_closed_form_and_the_acceptance_process():
    # (1 - a^(k+1)) / (1 - a): a = 0.7, k = 3 -> (1 - 0.2401) / 0.3
    assert expected_accepted_length(0.7, 3) == pytest.approx(0.7599 / 0.3)
    assert expected_accepted_length(0.0, 5) == 1.0 and expected_accepted_length(1.0, 4) == 5.0
    # Monte Carlo: accept each proposal with probability a until the first rejection, plus the target's token
    rng = np.random.default_rng(7)
    draws = rng.random((200_000, 3)) < 0.7
    accepted = np.where(draws.all(axis=1), 3, np.argmin(draws, axis=1)) + 1
    assert accepted.mean() == pytest.approx(EAGLE.mean_accepted_length, rel=0.01)
    assert (
        SpeculativeDecoding(method="mtp", num_speculative_tokens=2, accepted_length=2.18).mean_accepted_length
        == 2.18
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"num_speculative_tokens": 3},  # neither acceptance
        {"num_speculative_tokens": 3, "acceptance_rate": 0.5, "accepted_length": 2.0},  # both
        {"num_speculative_tokens": 3, "acceptance_rate": 1.0},
        {"num_speculative_tokens": 3, "accepted_length": 4.5},  # more than k + 1
        {"num_speculative_tokens": 0, "acceptance_rate": 0.5},
    ],
)
def test_speculative_spec_refuses_bad_input(kw):
    with pytest.raises(ValueError, match="SpeculativeDecoding"):
        SpeculativeDecoding(method="eagle", **kw)


def test_a_request_runs_its_decode_as_verification_steps():
    req = Requests.offline(2, input_tokens=1024, output_tokens=np.array([2048, 1]))
    spec = SpeculativeDecoding(method="mtp", num_speculative_tokens=3, accepted_length=2.82)
    steps = speculative_steps(req, ServingPlan(speculative=spec))
    assert steps.output_tokens.tolist() == [1 + 726, 1]  # 1 + ceil(2047 / 2.82)


def test_speculative_decoding_lowers_tpot_at_concurrency_32_but_not_throughput_at_high_load():
    base, spec = ServingPlan(tp=8), ServingPlan(tp=8, speculative=EAGLE)
    low = [serve_estimate(M70, NODE, p, closed(32, 128), CAL).summary() for p in (base, spec)]
    assert low[1]["tpot_s"] < 0.8 * low[0]["tpot_s"]  # 2.53 tokens per step for a dearer step
    # TPOT is measured over the real output tokens: the step time over the accepted length
    rc = ReplicaCost.of(M70, NODE, spec, CAL)
    assert low[1]["tpot_s"] > rc.decode_s(32, 1024) / EAGLE.mean_accepted_length
    weak = replace(
        spec, speculative=SpeculativeDecoding(method="eagle", num_speculative_tokens=5, acceptance_rate=0.4)
    )
    high = [serve_estimate(M70, NODE, p, closed(256, 512), CAL).summary() for p in (base, weak)]
    assert high[1]["output_tokens_per_s"] < high[0]["output_tokens_per_s"]  # verification of 6 positions each


def test_speculative_kv_holds_the_draft_layer_and_the_lookahead_slots():
    base = ReplicaCost.of(M70, NODE, ServingPlan(tp=8), CAL).kv_capacity_tokens
    spec = ReplicaCost.of(M70, NODE, ServingPlan(tp=8, speculative=EAGLE), CAL).kv_capacity_tokens
    # one EAGLE layer's KV beside the 80 target layers; 3 look-ahead slots for each of 256 sequences; 16-token blocks
    assert spec == int((base * 80 / 81 - 3 * 256) // 16) * 16


def test_verification_prices_k_plus_one_positions_per_sequence():
    rc = ReplicaCost.of(M70, NODE, ServingPlan(tp=8, speculative=EAGLE), CAL)
    plain = ReplicaCost.of(M70, NODE, ServingPlan(tp=8), CAL)
    # at batch 64 the verification GEMMs see 256 tokens: dearer than a plain decode of 64, plus 3 draft passes
    draft = 3 * rc.layers.draft_pass_s(False, np.array([64.0]), 3)[0]  # EAGLE-3: a dense layer, 3h -> h
    assert rc.decode_s(64, 2048) > plain.decode_s(64, 2048) + draft
    assert rc.decode_s(64, 2048) < plain.decode_s(256, 2048) + draft + 3 * plain.attention.decode_layer_s(
        64, 64 * 2048
    )


def test_prefix_hits_skip_prefill_compute_and_lower_ttft():
    hit = serve_estimate(M70, NODE, ServingPlan(tp=8), closed(32, 128, prefix_hit_rate=0.8), CAL).summary()
    miss = serve_estimate(M70, NODE, ServingPlan(tp=8), closed(32, 128), CAL).summary()
    assert hit["ttft_s"] < 0.6 * miss["ttft_s"]
    # one request alone: its only prefill computes the prompt less the whole cached blocks, on top of them
    rc = ReplicaCost.of(M70, NODE, ServingPlan(tp=8), CAL)
    sim = simulate(Requests.offline(1, input_tokens=1000, output_tokens=2), rc, policy="sarathi", max_num_seqs=8,
                   max_num_batched_tokens=8192, prefix_hit_rate=0.8)  # fmt: skip
    cached = (800 // 16) * 16
    assert sim.iterations["num_prefill_tokens"].to_list()[0] == 1000 - cached
    first = rc.iteration_s(np.array([1000 - cached]), np.array([cached]), np.zeros(0, dtype=int))
    assert sim.ttft.mean_s == pytest.approx(first, rel=1e-9)
    with pytest.raises(ValueError, match="prefix_hit_rate"):
        ServingWorkload(num_requests=1, input_tokens=10, output_tokens=1, prefix_hit_rate=1.0)


def test_disaggregated_70b_estimates_fast_and_sends_the_kv_by_hand():
    plan = ServingPlan(
        disaggregation=Disaggregation(prefill_workers=1, prefill_tp=8, decode_workers=1, decode_tp=8)
    )
    start = time.process_time()
    est = serve_estimate(M70, load_cluster("dgx-h100", 2), plan, closed(32, 256, n_in=2048), CAL)
    assert time.process_time() - start < 5.0
    # Llama 3.1 70B: 2 (K, V) x 8 KV heads x 128 x 2 bytes x 80 layers = 327,680 bytes per token
    assert est.kv_transfer_bytes_per_request == 2048 * 327_680
    assert est.kv_transfer_s > 0 and est.summary()["disaggregated"] is True


def test_layerwise_kv_transfer_hides_behind_the_prefill():
    from workbench.presets.engines import load_engine

    plan = ServingPlan(
        disaggregation=Disaggregation(prefill_workers=1, prefill_tp=8, decode_workers=1, decode_tp=8)
    )
    cluster = load_cluster("dgx-h100", 2)
    whole = ReplicaCost.of(M70, cluster, plan, CAL, role="prefill")
    layerwise = ReplicaCost.of(M70, cluster, plan, CAL, role="prefill",
                            engine=replace(load_engine("sglang"), kv_transfer_layerwise=True))  # fmt: skip
    assert layerwise.kv_transfer_s(4096) == pytest.approx(
        whole.kv_transfer_s(4096) / 80
    )  # the last layer only


class ConstantCost:
    """Every iteration takes TAU seconds whatever it holds."""

    TAU = 0.01
    kv_capacity_tokens = 10**9
    kv_block_tokens = 16

    def iteration_s(self, new, context, decode) -> float:
        return self.TAU

    def kv_transfer_s(self, tokens: int) -> float:
        return 0.0


def test_closed_loop_steady_state_is_littles_law():
    # c clients, each request one prefill iteration then O - 1 decode iterations of TAU: e2e = O TAU, so c / (O TAU)
    # requests per second, and a request sent at an iteration's end waits one iteration for its first token
    c, n_out, tau = 16, 20, ConstantCost.TAU
    req = Requests.closed_loop(c, 8 * c, input_tokens=100, output_tokens=n_out, ramp_s=n_out * tau)
    sim = simulate(req, ConstantCost(), policy="sarathi", max_num_seqs=64, max_num_batched_tokens=4096)
    steady = steady_window(sim, c)
    assert steady["requests_per_s"] == pytest.approx(c / (n_out * tau), rel=0.02)
    assert steady["ttft_mean_s"] == pytest.approx(tau, rel=1e-6)
    assert steady["tpot_mean_s"] == pytest.approx(tau, rel=1e-6)
    # token-weighted (APEX+'s reading): O - 1 decode iterations over the O tokens each request generates
    assert steady["tpot_token_weighted_s"] == pytest.approx(tau * (n_out - 1) / n_out, rel=1e-6)


def test_closed_loop_ttft_does_not_depend_on_the_run_length():
    ttft = [
        serve_estimate(M70, NODE, ServingPlan(tp=8), closed(32, n), CAL).sim.ttft.mean_s for n in (96, 768)
    ]
    assert ttft[0] == pytest.approx(ttft[1], rel=0.1)


def test_serve_estimate_command_prices_the_new_deployments():
    base = ["serve", "estimate", "--model", "llama-3.1-70b", "--cluster", "dgx-h100", "--input-tokens", "1024",
            "--output-tokens", "128", "--concurrency", "32", "--num-requests", "96", "--json"]  # fmt: skip
    runner = CliRunner()
    plain = runner.invoke(cli, [*base, "--tp", "8"])
    spec = runner.invoke(cli, [*base, "--tp", "8", "--speculative", "eagle3", "--num-speculative-tokens", "3",
                               "--acceptance-rate", "0.7"])  # fmt: skip
    disagg = runner.invoke(cli, [*base, "--nodes", "2", "--prefill-tp", "8", "--decode-tp", "8"])
    assert plain.exit_code == spec.exit_code == disagg.exit_code == 0, spec.output + disagg.output
    import json

    p, s, d = (json.loads(r.output) for r in (plain, spec, disagg))
    assert s["tpot_s"] < p["tpot_s"] and s["accepted_length"] == pytest.approx(EAGLE.mean_accepted_length)
    assert (
        d["disaggregated"] and d["num_devices"] == 16 and d["kv_transfer_bytes_per_request"] == 1024 * 327_680
    )
    missing = runner.invoke(cli, [*base, "--speculative", "mtp", "--num-speculative-tokens", "2"])
    assert missing.exit_code == 2 and "--acceptance-rate" in missing.output
    orphan = runner.invoke(cli, [*base, "--accepted-length", "2"])
    assert orphan.exit_code == 2 and "needs --speculative" in orphan.output


def test_deepep_normal_kernels_cross_the_network_once_per_node():
    from workbench.cost.comm import all_to_all_forwarded_s, all_to_all_s

    cluster = load_cluster("dgx-h100", 4)
    tokens = 4e9  # bytes of one rank's tokens: large enough that the network time dominates the start-up
    forwarded = float(all_to_all_forwarded_s(cluster, tokens, 8, 32, 1))
    per_copy = float(all_to_all_s(cluster, 8 * tokens, 32, 1))
    # per copy: 8 copies x 24/32 on other nodes = 6 token-sends over the NIC; forwarded: each of the 3 other
    # nodes once if one of the 8 experts is there, 3 (1 - (3/4)^8) = 2.70
    assert forwarded / per_copy == pytest.approx(3 * (1 - 0.75**8) / 6, rel=1e-3)
    one_node = load_cluster("dgx-h100", 1)  # inside a node only NVLink moves: every copy but the local one
    assert float(all_to_all_forwarded_s(one_node, tokens, 8, 8, 1)) == pytest.approx(
        float(all_to_all_s(one_node, 8 * tokens, 8, 1)), rel=1e-9
    )


def test_mla_decode_runs_at_the_published_flashmla_rate():
    from workbench.serving.cost_attention import AttentionCost

    ds = load_model("deepseek-v3")
    plan = ServingPlan(tp=1, attention_dp=8, ep=8, weight_dtype="fp8", activation_dtype="fp8")
    att = ReplicaCost.of(ds, load_cluster("dgx-h200", 1), plan, CAL).attention
    assert isinstance(att, AttentionCost)
    # 8 x 32 sequences x 8192 keys, all 128 heads per rank of absorbed MLA (576 + 512 wide): 242 FLOP per cached
    # byte (1,152 bytes a token), compute-bound at 660 TFLOP/s
    flop = 2.0 * 32 * 8192 * 128 * (2 * 512 + 64)
    assert att.decode_layer_s(256, 256 * 8192) == pytest.approx(flop / 660e12, rel=1e-9)


def test_mla_and_moe_layers_count_their_small_kernels():
    ds = load_model("deepseek-v3")  # q_lora_rank 1536, one shared expert
    layers = ReplicaCost.of(ds, load_cluster("dgx-h200", 1), ServingPlan(tp=8, ep=8, weight_dtype="fp8",
                         activation_dtype="fp8"), CAL).layers  # fmt: skip
    # fused q_a/kv_a, q_a_layernorm, q_b, kv_a_layernorm, W_UK bmm | W_UV bmm, o_proj
    assert layers.mla_projection_kernels() == (5, 2)
    engine_small = ReplicaCost.of(ds, load_cluster("dgx-h200", 1), ServingPlan(tp=8, ep=8, weight_dtype="fp8",
                               activation_dtype="fp8"), CAL).engine.layer_kernels - 1  # fmt: skip
    # router GEMM + top-k, permute + unpermute, two grouped GEMMs, shared experts' gate-up, activation and down
    assert layers._op_kernels(True) == (5, 2, engine_small, 2, 2, 2, 3)
    assert ReplicaCost.of(M70, NODE, ServingPlan(tp=8), CAL).layers._op_kernels(False)[:2] == (1, 1)


def test_nvfp4_gemms_run_at_the_fp4_tensor_core_rate():
    from workbench.specs.hardware import DType

    pro = load_cluster("pcie-rtx-pro-6000", 1)
    fp4 = ReplicaCost.of(M70, pro, ServingPlan(tp=1, weight_dtype="fp4", activation_dtype="fp4", kv_cache_dtype="fp8"),
                      CAL).layers  # fmt: skip
    w4a16 = ReplicaCost.of(M70, pro, ServingPlan(tp=1, weight_dtype="fp4", activation_dtype="bf16",
                                              kv_cache_dtype="fp8"), CAL).layers  # fmt: skip
    # RTX PRO 6000 Blackwell whitepaper: 4,000 FP4 vs 2,000 FP8 AI TOPS
    assert fp4._peak == 2 * pro.device.peak(DType.FP8) and w4a16._peak == pro.device.peak(DType.BF16)


def test_the_slowest_pipeline_stage_paces_the_pipeline():
    ds = load_model("deepseek-v3")  # 61 layers, 3 dense first
    plan = ServingPlan(tp=8, pp=4, ep=8, weight_dtype="fp8", activation_dtype="fp8")
    rc = ReplicaCost.of(ds, load_cluster("dgx-h200", 4), plan, CAL)
    assert rc.layers.stage_layers() == [(3, 13), (0, 15), (0, 15), (0, 15)]
    stages = rc.layers.stage_s(64.0, rc.attention.decode_layer_s(64, 64 * 2048))
    assert rc.pipeline_depth(64, 2048) == int(sum(stages) / max(stages)) < 4  # stage 0 holds 16 layers
    llama = ReplicaCost.of(M70, load_cluster("dgx-h100", 1), ServingPlan(tp=1, pp=8, weight_dtype="fp8",
                        activation_dtype="fp8"), CAL)  # fmt: skip
    assert llama.layers.stage_layers() == [(10, 0)] * 8
    assert ReplicaCost.of(M70, NODE, ServingPlan(tp=8), CAL).pipeline_depth(64, 2048) == 1


def test_a_draft_model_costs_its_own_decodes_and_kv():
    spec = SpeculativeDecoding(
        method="draft", num_speculative_tokens=4, accepted_length=3.0, draft_model="llama-3.1-8b"
    )
    rc = ReplicaCost.of(M70, NODE, ServingPlan(tp=8, speculative=spec), CAL)
    base = ReplicaCost.of(M70, NODE, ServingPlan(tp=8), CAL).kv_capacity_tokens
    # Llama 3.1 8B keeps 32 x 2 x 8 x 128 x 2 = 131,072 KV bytes a token beside the 70B's 327,680: 0.4 of them
    assert rc.kv_capacity_tokens == int((base / 1.4 - 4 * 256) // 16) * 16
    draft = ReplicaCost.of(load_model("llama-3.1-8b"), NODE, ServingPlan(tp=8), CAL, step_overhead_s=0.0)
    assert rc._draft is not None
    assert rc._draft.draft_s(32, 32 * 1024) == pytest.approx(4 * draft.decode_s(32, 1024), rel=1e-9)
    with pytest.raises(ValueError, match="draft_model"):
        SpeculativeDecoding(method="draft", num_speculative_tokens=2, acceptance_rate=0.5)


def test_each_pool_can_have_its_own_dtypes():
    split = Disaggregation(prefill_workers=1, prefill_tp=8, decode_workers=1, decode_tp=8,
                           decode_dtypes=("fp8", "fp8", "fp8"))  # fmt: skip
    plan = ServingPlan(disaggregation=split)
    assert (
        plan.role_plan("prefill").kv_cache_dtype == "bf16"
        and plan.role_plan("decode").kv_cache_dtype == "fp8"
    )
    cluster = load_cluster("dgx-h100", 2)
    bf16 = ReplicaCost.of(M70, cluster, ServingPlan(disaggregation=replace(split, decode_dtypes=(None, None, None))),
                       CAL, role="decode")  # fmt: skip
    fp8 = ReplicaCost.of(M70, cluster, plan, CAL, role="decode")
    assert fp8.kv_bytes_per_token_per_device() == bf16.kv_bytes_per_token_per_device() / 2  # 1 byte, not 2
    est = serve_estimate(M70, cluster, plan, closed(8, 24), CAL)
    assert est.kv_transfer_bytes_per_request == 1024 * 327_680  # sent as the prefill pool stores it, bf16
    with pytest.raises(ValueError, match="decode_dtypes"):
        Disaggregation(prefill_workers=1, decode_workers=1, decode_dtypes=("fp7", None, None))
    bad = CliRunner().invoke(cli, ["serve", "estimate", "--model", "llama-3.1-8b", "--cluster", "dgx-h100",
                                   "--input-tokens", "8", "--output-tokens", "8", "--decode-kv-dtype", "fp8"])  # fmt: skip
    assert bad.exit_code == 2 and "disaggregated plan" in bad.output


def test_draft_passes_follow_sglangs_eagle_worker():
    # SGLang's EAGLE worker per decode step (python/sglang/srt/speculative/eagle_worker.py): draft_forward runs
    # k - 1 single-token forwards, forward_draft_extend_after_decode one extend over k + 1 tokens a sequence
    # (EAGLEDraftExtendCudaGraphRunner.num_tokens_per_bs = speculative_num_steps + 1), logits at its last one.
    from workbench.serving.cost_speculative import DraftCost

    class Layers:  # a fake cost: one second a token, plus one a logit position
        def draft_pass_s(self, moe, tokens, fused_inputs, logits=None):
            return tokens + (tokens if logits is None else logits)

    class Attention:  # one second a query
        def decode_layer_s(self, num_seqs, cached_tokens, queries_per_seq=1):
            return float(num_seqs * queries_per_seq)

    mtp3 = SpeculativeDecoding(method="mtp", num_speculative_tokens=3, accepted_length=2.44)
    plan = ServingPlan(tp=8, max_num_seqs=64, speculative=mtp3)
    draft = DraftCost(M70, plan, (Layers(), Attention()))  # type: ignore[arg-type]
    # 32 sequences, k = 3: two decode passes of 32 tokens and 32 logits each, one extend of 128 tokens and 32
    # logits: 2 x 64 + 160 = 288; attention 2 x 32 queries + 32 x 4 = 192
    assert draft.draft_s(32, 32 * 1024) == pytest.approx(288 + 192)
