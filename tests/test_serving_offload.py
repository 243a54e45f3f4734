"""MoE expert weights held in host memory as SGLang runs them (workbench.serving.offload), and the GB200 row that
uses them (SGLG-01, LMSYS GB200 part II: DeepSeek-V3 prefill on 2 GB200, NVFP4 MoE, EP2, "offload weights to the
host memory with prefetching")."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from workbench_cli import cli

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.serving.cost import ReplicaCost
from workbench.serving.memory import kv_capacity_tokens, weight_bytes_per_device
from workbench.serving.offload import HostOffload, offload_unavailable, offloaded_layers
from workbench.specs.serving import ServingPlan
from workbench.validate.serving import row_case
from workbench.validate.serving_csv import read_serving_rows

CAL = load_calibration("default")
V3 = load_model("deepseek-v3")
GB200 = load_cluster("gb200-nvl72")
PLAN = ServingPlan(
    tp=2, ep=2, weight_dtype="fp4", activation_dtype="fp4", kv_cache_dtype="fp8", engine="sglang"
)

# One DeepSeek-V3 MoE layer's routed experts on one of 2 devices, by hand (config.json: hidden 7168,
# moe_intermediate_size 2048, 256 routed experts): gate, up and down are 3 x 7168 x 2048 parameters per expert,
# 128 experts per device, NVFP4 = 0.5 byte + one FP8 scale per 16 values.
EXPERT_LAYER_BYTES = 3 * 7168 * 2048 * 128 * (0.5 + 1 / 16)


def test_the_layers_sglang_offloads_are_the_last_of_each_group():
    # SGLang's ModuleOffloader: layer i is offloaded when i % group_size >= group_size - num_in_group (1)
    assert offloaded_layers(V3, 8) == (7, 15, 23, 31, 39, 47, 55)
    assert offloaded_layers(V3, 61) == (60,)
    assert offloaded_layers(V3, 0) == ()
    # DeepSeek-V3's first 3 layers are dense: group size 3 would pick layer 2, which has no mlp.experts
    with pytest.raises(ValueError, match="layer 2 .* is dense"):
        offloaded_layers(V3, 3)


def test_offloaded_experts_leave_the_device_but_for_the_two_in_flight():
    full = weight_bytes_per_device(V3, PLAN)
    off = weight_bytes_per_device(V3, replace(PLAN, offload_group_size=8))
    assert full - off == pytest.approx((7 - 2) * EXPERT_LAYER_BYTES, rel=1e-12)


def test_the_copy_is_the_layer_bytes_over_the_grace_link():
    off = HostOffload.of(V3, GB200, replace(PLAN, offload_group_size=8))
    assert off is not None and off.num_offloaded_layers == 7
    # NVLink-C2C 900 GB/s bidirectional per Grace and its two GPUs: 225 GB/s per GPU and direction (cluster preset)
    assert off.copy_s == pytest.approx(EXPERT_LAYER_BYTES / 225e9, rel=1e-12)
    assert off.copy_s == pytest.approx(14.09e-3, rel=1e-3)


def test_a_copy_waits_only_for_what_the_layers_between_do_not_hide():
    off = HostOffload(group_size=8, num_offloaded_layers=7, num_layers=61, copy_s=14e-3)
    # 1 ms per layer: 7 layers between two offloaded ones hide 7 of the 14 ms, each of 7 layers waits 7 ms
    assert off.wait_s(61e-3) == pytest.approx(7 * 7e-3, rel=1e-12)
    assert off.wait_s(61 * 2.0e-3) == 0.0  # 14 ms of layers between: fully hidden (prefetched)
    assert off.wait_s(0.0) == pytest.approx(off.copy_per_forward_s)  # nothing to hide behind: every copy


def test_the_engine_waits_for_copies_at_small_batch_and_not_at_a_full_prefill():
    # on 4 GPUs the model fits without offload, so the same iteration is priced with and without it
    base_plan = replace(PLAN, tp=4, ep=4)
    base = ReplicaCost.of(V3, GB200, base_plan, CAL)
    off = ReplicaCost.of(V3, GB200, replace(base_plan, offload_group_size=8), CAL)
    copy_s = EXPERT_LAYER_BYTES / 2 / 225e9  # 64 experts per device
    empty = np.zeros(0, dtype=np.int64)
    decode = (empty, empty, np.full(8, 2000))
    t0, t1 = base.iteration_s(*decode), off.iteration_s(*decode)
    # 7 copies, each hidden by at most the 7 layers before it (7/61 of the forward's layer time <= t0)
    assert 7 * (copy_s - 7 / 61 * t0) <= t1 - t0 <= 7 * copy_s * (1 + 1e-9)
    assert t1 - t0 > 0.5 * 7 * copy_s  # a small decode step hides little of them
    prefill = (np.full(8, 2000), np.zeros(8, dtype=np.int64), empty)
    assert off.iteration_s(*prefill) == base.iteration_s(*prefill)  # 7 layers of a 16k prefill hide each copy
    assert 7 / 61 * base.iteration_s(*prefill) > copy_s


def test_sglg01_is_priced_with_the_least_offload_that_leaves_room_for_its_batch():
    row = next(r for r in read_serving_rows() if r["id"] == "SGLG-01")
    case = row_case(row)
    # SGLang's pool on 2 GPUs: (HBM - reserve) x 0.87 (its default share) - weights
    assert case.plan.gpu_memory_utilization_frac == 0.87
    assert case.plan.offload_group_size == 7
    assert any("host offload" in a and "offload_group_size 7" in a for a in case.assumed)
    room = kv_capacity_tokens(V3, GB200.device, case.plan, 0.0, share_rule="weights_and_kv")
    assert room >= 16384
    # one group size more (less offload) leaves less KV than the prefill batch of 16384 tokens, or none
    try:
        room = kv_capacity_tokens(
            V3, GB200.device, replace(case.plan, offload_group_size=8), 0.0, share_rule="weights_and_kv"
        )
    except ValueError:
        room = 0
    assert room < 16384


def test_serve_estimate_takes_the_offload_and_decode_pays_the_copies():
    args = ["serve", "estimate", "--model", "deepseek-v3", "--cluster", "gb200-nvl72", "--tp", "2", "--ep", "2",
            "--weight-dtype", "fp4", "--activation-dtype", "fp4", "--kv-dtype", "fp8", "--engine", "sglang",
            "--offload-group-size", "8", "--num-requests", "16", "--input-tokens", "2000", "--output-tokens", "32",
            "--gpu-memory-utilization", "0.9", "--json"]  # fmt: skip
    # at SGLang's own default for 2 GPUs (0.87) one offloaded layer in 8 leaves no KV block: asked for 0.9
    default = CliRunner().invoke(cli, [a for a in args if a not in ("--gpu-memory-utilization", "0.9")])
    assert default.exit_code == 1 and "no room for one KV block" in default.output
    assert "gpu_memory_utilization_frac=0.87" in default.output
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert "host-offload1/8" in out["plan"]
    assert out["host_offload_bytes_per_device"] == pytest.approx(7 * EXPERT_LAYER_BYTES, rel=1e-12)
    assert out["offload_copy_s"] == pytest.approx(7 * EXPERT_LAYER_BYTES / 225e9, rel=1e-12)
    # a decode step t waits 7 (copy - 7/61 of its layers) >= 7 (copy - 7/61 t): t >= 7 copy / (1 + 49/61)
    copy_s = EXPERT_LAYER_BYTES / 225e9
    assert out["tpot_s_p50"] >= 7 * copy_s / (1 + 49 / 61)


def test_the_wait_of_a_decode_step_is_the_step_less_the_same_step_without_offload():
    # on 4 GPUs the model fits without offload: the wait is the difference to a cost built without it
    base_plan = replace(PLAN, tp=4, ep=4)
    base = ReplicaCost.of(V3, GB200, base_plan, CAL)
    off = ReplicaCost.of(V3, GB200, replace(base_plan, offload_group_size=8), CAL)
    assert base.offload is None and base.offload_wait_s(8, 2000) == 0.0
    wait = off.offload_wait_s(8, 2000)
    assert wait == pytest.approx(off.decode_s(8, 2000) - base.decode_s(8, 2000), rel=1e-12)
    assert 0.0 < wait <= off.offload.copy_per_forward_s
    assert off.decode_s(8, 2000) > base.decode_s(8, 2000)  # the bare copy priced it without touching the cost


def test_a_dense_model_says_why_it_takes_no_offload():
    llama = load_model("llama-3.1-70b")
    assert offload_unavailable(V3) == ""
    why = offload_unavailable(llama)
    assert "no MoE layers" in why
    with pytest.raises(ValueError, match="no MoE layers"):
        offloaded_layers(llama, 4)


def test_a_disaggregated_estimate_reports_the_decode_engines_offload():
    # decode pool tp4 ep4: 64 experts per device, half of one EP2 device's (EXPERT_LAYER_BYTES is 128 experts)
    from workbench.serving.estimate import serve_estimate
    from workbench.specs.serving import Disaggregation, ServingWorkload

    split = Disaggregation(
        prefill_workers=1, prefill_tp=2, prefill_ep=2, decode_workers=1, decode_tp=4, decode_ep=4
    )
    plan = replace(PLAN, tp=1, ep=None, disaggregation=split, offload_group_size=8)
    work = ServingWorkload(
        arrival="closed", concurrency=4, num_requests=8, input_tokens=1000, output_tokens=16
    )
    est = serve_estimate(V3, GB200, plan, work, CAL)
    assert est.host_offload_bytes_per_device == pytest.approx(7 * EXPERT_LAYER_BYTES / 2, rel=1e-12)
    assert est.offload_copy_s == pytest.approx(7 * EXPERT_LAYER_BYTES / 2 / 225e9, rel=1e-12)
    assert est.offload_decode_batch >= 1 and 0.0 < est.offload_wait_s <= est.offload_copy_s
