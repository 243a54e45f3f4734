"""Each engine's KV pool as its memory flag sizes it (issue 49, rows read as their engine ran them): SGLang's
``--mem-fraction-static`` bounds the weights and the KV pool only, (free memory at start) x share - weights (sglang
``ModelRunner.profile_max_num_token``), its default by the engine's GPUs is server_args.py's table, and a share the
row's notes quote is read; TensorRT-LLM's ``--kv_cache_free_gpu_memory_fraction`` is a share of the memory left
after weights, activations and the rest (``KvCacheCreator._cal_max_memory``); vLLM's is of the whole device."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.engines import load_engine
from workbench.serving.cost import ReplicaCost
from workbench.serving.memory import (
    NON_TORCH_BYTES_MULTI_DEVICE,
    NON_TORCH_BYTES_ONE_DEVICE,
    kv_capacity_tokens,
    weight_bytes_per_device,
)
from workbench.specs.serving import ServingPlan
from workbench.validate.serving import row_case
from workbench.validate.serving_csv import read_serving_rows
from workbench.validate.serving_specs import quoted_flag, quoted_fraction

LLAMA_8B = load_model("llama-3.1-8b")


def _sglang_pool_by_hand(share: float, tp: int) -> int:
    """Llama-3.1-8B's SGLang pool on one DGX H100 engine of ``tp`` GPUs: (HBM - reserve) x share - weights, over
    32 layers x 2 x (8 / tp) KV heads x 128 x 2 B a token, in whole 16-token blocks."""
    device = load_cluster("dgx-h100").device
    reserve = NON_TORCH_BYTES_ONE_DEVICE if tp == 1 else NON_TORCH_BYTES_MULTI_DEVICE
    free = (device.hbm_bytes - reserve) * share - weight_bytes_per_device(LLAMA_8B, ServingPlan(tp=tp))
    return 16 * math.floor(free / (32 * 2 * (8 // tp) * 128 * 2) / 16)


def test_sglang_pool_is_the_static_share_less_the_weights_by_hand() -> None:
    """One H100 at share 0.88: (HBM - 0.25 GiB) x 0.88 - weights over 32 layers x 2 x 8 x 128 x 2 B a token, in
    whole blocks; no activation term (vLLM's sizing, the default, subtracts one and so holds fewer tokens)."""
    plan = ServingPlan(tp=1, gpu_memory_utilization_frac=0.88)
    device = load_cluster("dgx-h100").device
    tokens = _sglang_pool_by_hand(0.88, 1)
    assert kv_capacity_tokens(LLAMA_8B, device, plan, share_rule="weights_and_kv") == tokens
    assert kv_capacity_tokens(LLAMA_8B, device, plan) < tokens
    rc = ReplicaCost.of(LLAMA_8B, load_cluster("dgx-h100"), plan, load_calibration(), engine="sglang")
    assert load_engine("sglang").kv_memory_share == "weights_and_kv"
    assert rc.kv_capacity_tokens == tokens


def test_trtllm_pool_is_the_share_of_the_memory_left_free_by_hand() -> None:
    """One H100 at fraction 0.9: (HBM - weights - activation peak - 0.25 GiB) x 0.9 in whole blocks."""
    plan = ServingPlan(tp=1, gpu_memory_utilization_frac=0.9)
    cluster = load_cluster("dgx-h100")
    rc = ReplicaCost.of(LLAMA_8B, cluster, plan, load_calibration(), engine="trtllm")
    left = cluster.device.hbm_bytes - rc.weight_bytes_per_device() - rc.activation_peak_bytes()
    free = (left - NON_TORCH_BYTES_ONE_DEVICE) * 0.9
    tokens = math.floor(free / (32 * 2 * 8 * 128 * 2) / plan.kv_block_tokens) * plan.kv_block_tokens
    assert load_engine("trtllm").kv_memory_share == "of_free"
    assert rc.kv_capacity_tokens == tokens
    with pytest.raises(ValueError, match="share_rule must be one of of_total, weights_and_kv, of_free"):
        kv_capacity_tokens(LLAMA_8B, cluster.device, plan, share_rule="half")


def test_a_trtllm_row_with_a_whole_device_share_keeps_that_pool() -> None:
    """A TensorRT-LLM row that gives vLLM's gpu_memory_utilization_frac (the README's share of the whole device)
    is priced with the share of the free memory that holds the same pool: the vLLM sizing at that share."""
    row = {**_public()["TRT-04"], "gpu_memory_utilization_frac": "0.85", "kv_cache_free_mem_frac": ""}
    case = row_case(row)
    assert any("the share of the free memory that gives the pool" in a for a in case.assumed)
    trt = ReplicaCost.of(case.model, case.cluster, case.plan, load_calibration(), engine="trtllm")
    vllm_plan = replace(case.plan, gpu_memory_utilization_frac=0.85)
    vllm_tokens = kv_capacity_tokens(case.model, case.cluster.device, vllm_plan, 0.0)
    assert abs(trt.kv_capacity_tokens - vllm_tokens) <= case.plan.kv_block_tokens


@pytest.mark.parametrize(
    ("gpus", "share"), [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81), (16, 0.79), (48, 0.79)]
)
def test_sglang_default_share_follows_server_args_by_gpus(gpus: int, share: float) -> None:
    """sglang server_args.py __post_init__ (0.4 series): --tp-size >= 16 0.79, >= 8 0.81, >= 4 0.85, >= 2 0.87,
    else 0.88; vLLM's --gpu-memory-utilization and TensorRT-LLM's free_gpu_memory_fraction are 0.9 at any size."""
    assert load_engine("sglang").default_memory_share(gpus) == share
    assert load_engine("vllm-v1").default_memory_share(gpus) == 0.9
    assert load_engine("trtllm").default_memory_share(gpus) == 0.9


@pytest.mark.parametrize("table", [[[2, 0.9]], [[1, 0.9], [1, 0.8]], [[1, 1.2]], [], [[1, 0.9, 3]]])
def test_a_bad_memory_share_table_is_refused_naming_the_field(table: list) -> None:
    from workbench.specs.engine import EngineProfile

    with pytest.raises(ValueError, match="memory_share_by_gpus"):
        EngineProfile(id="x", name="x", memory_share_by_gpus=table)


def test_serve_estimate_takes_the_engines_own_share_unless_given() -> None:
    from workbench_cli.serve_cmd import serve_estimate_cmd

    args = ["--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--tp", "2", "--concurrency", "4",
            "--input-tokens", "128", "--output-tokens", "8", "--engine", "sglang"]  # fmt: skip
    from click.testing import CliRunner

    runner = CliRunner()
    default = runner.invoke(serve_estimate_cmd, [*args, "--json"])
    given = runner.invoke(serve_estimate_cmd, [*args, "--gpu-memory-utilization", "0.7", "--json"])
    assert default.exit_code == 0 and given.exit_code == 0, default.output + given.output
    # SGLang at 2 GPUs per engine: --mem-fraction-static 0.87, so the pool is (HBM - reserve) x 0.87 - weights
    cap = {
        name: json.loads(r.output)["kv_cache_capacity_tokens"] for name, r in (("d", default), ("g", given))
    }
    assert cap["d"] == _sglang_pool_by_hand(0.87, 2)
    assert cap["g"] == _sglang_pool_by_hand(0.7, 2)


def _public() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in read_serving_rows()}


def test_a_quoted_mem_fraction_static_is_read_and_a_blank_takes_the_default() -> None:
    rows = _public()
    quoted = row_case(rows["SGLM-01"])  # notes quote --mem-fraction-static 0.8
    assert quoted.plan.gpu_memory_utilization_frac == 0.8
    assert any("--mem-fraction-static the notes quote" in a for a in quoted.assumed)
    default = row_case(rows["SGLG-03"])  # 4 GPUs, nothing quoted
    assert default.plan.gpu_memory_utilization_frac == 0.85
    assert any("engine profile sglang's default at 4 GPU(s)" in a for a in default.assumed)


def test_quoted_values_are_read_whole_or_as_fractions_only() -> None:
    row = {"notes": "--mem-fraction-static 0.8 --max-running-requests=32 --tp-size 1.5 --x 2"}
    assert quoted_fraction(row, "--mem-fraction-static") == 0.8
    assert quoted_flag(row, "--max-running-requests") == 32
    assert quoted_flag(row, "--tp-size") is None  # 1.5 is not a whole number
    assert quoted_fraction(row, "--x") is None  # 2 is not a share
    assert quoted_flag(row, "--mem-fraction-static") is None


def test_weights_above_vllms_share_still_fit_under_tensorrt_llms_share_of_the_rest() -> None:
    """Mixtral-8x7B in bf16 (93.4 GB) on one H100 NVL (94 GiB): above 0.9 x HBM, so vLLM's flag leaves no KV and
    serve plan's screen refuses the one-device engine for its weights; TensorRT-LLM's flag is a share of what the
    weights leave, so the same engine runs with a small pool, (HBM - weights - activations - reserve) x 0.9."""
    from workbench.search.serving.screen import CostCache

    model, cluster = load_model("mixtral-8x7b"), load_cluster("pcie-h100-nvl")
    assert 0.9 * cluster.device.hbm_bytes < 2.0 * model.total_parameters() < cluster.device.hbm_bytes
    with pytest.raises(ValueError, match="leave no room for one KV block"):
        ReplicaCost.of(model, cluster, ServingPlan(tp=1), load_calibration())
    trt = ReplicaCost.of(model, cluster, ServingPlan(tp=1, engine="trtllm"), load_calibration())
    left = cluster.device.hbm_bytes - trt.weight_bytes_per_device() - trt.activation_peak_bytes()
    per_token = 32 * 2 * 8 * 128 * 2  # layers x (K, V) x kv heads x head_dim x bf16
    assert trt.kv_capacity_tokens == 16 * math.floor((left - trt.reserve_bytes()) * 0.9 / per_token / 16)
    screen = CostCache(model, cluster, load_calibration())
    assert screen.get(ServingPlan(tp=1)) == "weights"  # vLLM's share cannot hold them
    assert screen.get(ServingPlan(tp=1, engine="trtllm")).kv_capacity_tokens == trt.kv_capacity_tokens
    assert screen.get(ServingPlan(tp=1, engine="sglang")) == "weights"  # (HBM - reserve) x 0.9 < weights


def test_serve_plan_searches_at_the_engines_own_share_unless_given() -> None:
    """serve plan's plans carry the engine's default flag (SGLang at 1 GPU: --mem-fraction-static 0.88), or the
    --gpu-memory-utilization given; the KV capacity of the best one-device plan shows which."""
    from click.testing import CliRunner
    from workbench_cli import cli

    args = ["serve", "plan", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--devices", "1",
            "--input-tokens", "512", "--output-tokens", "64", "--rate", "2", "--ttft-slo-ms", "2000",
            "--engine", "sglang", "--no-disaggregation", "--weight-dtypes", "bf16", "--kv-dtypes", "bf16",
            "--simulate", "1", "--top", "1", "--json"]  # fmt: skip
    runs = {share: CliRunner().invoke(cli, args + ([] if share is None else ["--gpu-memory-utilization", share]))
            for share in (None, "0.5")}  # fmt: skip
    best = {}
    for share, run in runs.items():
        assert run.exit_code == 0, run.output
        best[share] = json.loads(run.output)["plans"][0]
    assert best[None]["kv_cache_capacity_tokens"] == _sglang_pool_by_hand(0.88, 1)
    assert best["0.5"]["kv_cache_capacity_tokens"] == _sglang_pool_by_hand(0.5, 1)
