"""The serving faces: ``serve_estimate``, ``workbench serve estimate`` and ``workbench validate`` on the serving
file. Closed forms: one request alone has TTFT = its prefill and TPOT = one decode iteration at each context;
the KV capacity is the cost model's; the validation output has the documented keys and its MAPE is the mean
of the row errors it lists."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from workbench_cli import cli

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.serving.cost import ReplicaCost
from workbench.serving.estimate import serve_estimate
from workbench.specs.serving import Disaggregation, ServingPlan, ServingWorkload

MODEL, CLUSTER, CAL = load_model("llama-3.1-8b"), load_cluster("dgx-h100", 1), load_calibration("default")


def test_one_request_alone_is_one_prefill_then_decodes():
    plan = ServingPlan(tp=1, scheduler="vllm", max_num_batched_tokens=2048)
    est = serve_estimate(
        MODEL, CLUSTER, plan, ServingWorkload(num_requests=1, input_tokens=1000, output_tokens=5), CAL
    )
    cost = ReplicaCost.of(MODEL, CLUSTER, plan, CAL)
    s = est.summary()
    assert s["ttft_s"] == pytest.approx(cost.prefill_s(1000), rel=1e-9)
    # tokens 2..5: each decode reads the prompt and every token generated before it (1001, 1002, ...)
    decodes = [cost.decode_s(1, 1001 + k) for k in range(4)]
    assert s["tpot_s"] == pytest.approx(sum(decodes) / 4, rel=1e-6)
    assert s["kv_cache_capacity_tokens"] == cost.kv_capacity_tokens


def test_disaggregated_plan_runs_both_pools():
    plan = ServingPlan(
        disaggregation=Disaggregation(prefill_workers=2, prefill_tp=1, decode_workers=1, decode_tp=2)
    )
    work = ServingWorkload(
        arrival="poisson", request_rate_per_s=4.0, num_requests=40, input_tokens=512, output_tokens=32
    )
    est = serve_estimate(MODEL, CLUSTER, plan, work, CAL)
    engines = set(est.sim.requests["engine"].to_list())
    assert engines <= {2} and est.summary()["num_devices"] == 4  # decode engine id 2 after the 2 prefill ones
    with pytest.raises(ValueError, match="devices"):
        serve_estimate(MODEL, CLUSTER, ServingPlan(tp=8, replicas=2), work, CAL)


def test_serve_estimate_command_gives_the_issue_keys():
    result = CliRunner().invoke(
        cli,
        ["serve", "estimate", "--model", "llama-3.1-70b", "--cluster", "dgx-h100", "--nodes", "1", "--tp", "8",
         "--input-tokens", "1024", "--output-tokens", "64", "--concurrency", "8", "--num-requests", "32", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    for key in ("ttft_s", "tpot_s", "output_tokens_per_s", "kv_cache_capacity_tokens"):
        assert out[key] > 0
    assert out["ttft_s_p99"] >= out["ttft_s_p50"]
    bad = CliRunner().invoke(cli, ["serve", "estimate", "--model", "llama-3.1-8b", "--cluster", "dgx-h100",
                                   "--input-tokens", "8", "--output-tokens", "8", "--rate", "1", "--concurrency", "2"])  # fmt: skip
    assert bad.exit_code != 0 and "--concurrency or --rate" in bad.output


def test_validate_scores_the_serving_file():
    result = CliRunner().invoke(
        cli, ["validate", "--data", "profiles/validation/serving_public.csv", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert {"rows", "skipped", "mape_by_metric", "mape_by_source"} <= set(out)
    assert {"ttft", "tpot", "throughput"} <= set(out["mape_by_metric"])
    tpot = [r["ape"] for r in out["rows"] if r["group"] == "tpot"]
    assert out["mape_by_metric"]["tpot"] == pytest.approx(sum(tpot) / len(tpot))
    trt = [r["ape"] for r in out["rows"] if r["engine"] == "trtllm" and r["group"] == "throughput"]
    assert trt and out["mape_by_engine_metric"]["trtllm"]["throughput"] == pytest.approx(sum(trt) / len(trt))
    assert set(out["mape_by_engine_metric"]) == {r["engine"] for r in out["rows"]}
    assert all(s["reason"] for s in out["skipped"])
    assert len({r["id"] for r in out["rows"]}) + len(out["skipped"]) == 46  # every row scored or skipped
