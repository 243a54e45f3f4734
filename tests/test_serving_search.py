"""The serving plan search (``workbench.search.serving.planner``) and ``workbench serve plan``.

Independent checks: the best plan meets the SLO when ``serve_estimate`` simulates it again; weights that cannot
fit one device (Llama-3.1-70B in bf16: 2 bytes x 70.6e9 parameters = 141 GB > 0.9 x 80 GB) are rejected for that
reason; the goodput of an M/D/1 engine against a median TTFT target equal to the service time is 0.5 / S (the
median wait is zero while at least half the arrivals find the server idle, P(idle) = 1 - rho by PASTA); the
rate search agrees with a threshold it is given; the Pareto flags agree with a brute-force dominance check.
"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from workbench_cli import cli

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.search.serving import REASONS, TABLE_COLUMNS, ServingSearchConstraints, serve_search
from workbench.search.serving.planner import _max_rate
from workbench.search.serving.result import GoodputPoint
from workbench.serving.cost import ReplicaCost
from workbench.specs.serving import SLO, ServingPlan, ServingWorkload

CAL = load_calibration("default")
H100 = load_cluster("dgx-h100", 1)
SMALL = ServingSearchConstraints(
    num_devices=2, weight_dtypes=("bf16",), kv_cache_dtypes=("bf16",), max_num_seqs=(64,),
    max_num_batched_tokens=(2048,), top_k=4,
)  # fmt: skip


def _poisson(n: int, n_in: int, n_out: int, rate: float = 1e-3) -> ServingWorkload:
    return ServingWorkload(arrival="poisson", request_rate_per_s=rate, num_requests=n, input_tokens=n_in,
                           output_tokens=n_out)  # fmt: skip


@pytest.fixture(scope="module")
def small_search():
    slo = SLO(ttft_s=0.5, tpot_s=0.03, percentile="p90")
    return serve_search(load_model("llama-3.1-8b"), H100, _poisson(100, 512, 64), slo, CAL, constraints=SMALL)


def test_best_plan_meets_the_slo_when_simulated_again(small_search):
    r = small_search
    assert r.best is not None and r.best.num_devices <= 2
    assert r.table.columns == list(TABLE_COLUMNS) and r.table["rank"].to_list() == list(
        range(1, r.table.height + 1)
    )
    est = r.best_estimate()
    s = est.summary()
    assert s["ttft_s_p90"] <= r.slo.ttft_s and s["tpot_s_p90"] <= r.slo.tpot_s
    assert est.workload.request_rate_per_s == pytest.approx(r.table["goodput_requests_per_s"][0])
    per_device = r.table["goodput_requests_per_s_per_device"].to_list()
    assert per_device == sorted(per_device, reverse=True)
    # every plan enumerated is either kept or counted under exactly one reason
    assert r.num_candidates == r.table.height + sum(r.rejection_counts().values())
    assert list(r.rejection_counts()) == [k for k, _ in REASONS]


def test_pareto_flags_match_brute_force(small_search):
    t = small_search.table
    x = t["goodput_output_tokens_per_s_per_device"].to_numpy()
    for side in ("ttft", "tpot"):
        y = t[f"{side}_s_at_goodput"].fill_null(math.nan).to_numpy()
        flags = t[f"pareto_{side}"].to_numpy()
        for i in range(len(x)):
            dominated = any(
                (x[j] > x[i] and y[j] <= y[i]) or (x[j] >= x[i] and y[j] < y[i]) for j in range(len(x))
            )
            if flags[i]:
                assert not dominated
            elif (
                math.isfinite(y[i]) and not dominated
            ):  # only an exact duplicate of a kept row may be left out
                assert any(j != i and x[j] == x[i] and y[j] == y[i] and flags[j] for j in range(len(x)))
    assert t["pareto"].to_list() == (t["pareto_ttft"] | t["pareto_tpot"]).to_list()


def test_weights_that_do_not_fit_one_device_are_rejected_for_that_reason():
    model = load_model("llama-3.1-70b")
    assert 2.0 * model.total_parameters() > 0.9 * H100.device.hbm_bytes  # 141 GB > 72 GB
    c = ServingSearchConstraints(num_devices=1, weight_dtypes=("bf16",), kv_cache_dtypes=("bf16",))
    r = serve_search(model, H100, _poisson(50, 1024, 1024), SLO(ttft_s=2.0), CAL, constraints=c)
    assert r.best is None and r.table.height == 0 and r.num_simulations == 0
    counts = r.rejection_counts()
    # the one-device plans of the default batching grid: 2 schedulers x 2 max_num_seqs x 2 token budgets
    assert counts["weights"] == 8
    assert counts["devices"] == r.num_candidates - 8  # engines of 2, 4 and 8 devices


def test_ttft_target_between_two_prefill_times_rejects_the_slower_layout():
    model = load_model("llama-3.1-8b")
    c = ServingSearchConstraints(num_devices=2, weight_dtypes=("bf16",), kv_cache_dtypes=("bf16",),
                                 max_num_seqs=(64,), max_num_batched_tokens=(8192,), schedulers=("vllm",),
                                 disaggregation=False, top_k=1)  # fmt: skip
    prefill = {tp: ReplicaCost.of(model, H100, ServingPlan(tp=tp, scheduler="vllm", max_num_seqs=64),
                               CAL).prefill_s(4096) for tp in (1, 2)}  # fmt: skip
    assert prefill[2] < prefill[1]
    slo = SLO(ttft_s=(prefill[1] + prefill[2]) / 2, percentile="p50")
    r = serve_search(model, H100, _poisson(20, 4096, 2), slo, CAL, constraints=c)
    assert r.rejection_counts()["ttft_alone"] == 1  # 2x tp1
    assert r.screened["plan"].to_list() == [ServingPlan(tp=2, scheduler="vllm", max_num_seqs=64).describe()]


def test_goodput_of_an_md1_engine_against_a_median_ttft_of_its_service_time():
    # One engine, whole prompts of exactly the token budget and one output token: each iteration prefills one
    # prompt in S seconds, so the engine is an M/D/1 queue; the median TTFT is S while P(idle) = 1 - rho >= 1/2.
    model = load_model("llama-3.1-8b")
    c = ServingSearchConstraints(num_devices=1, weight_dtypes=("bf16",), kv_cache_dtypes=("bf16",),
                                 max_num_seqs=(64,), max_num_batched_tokens=(512,), schedulers=("vllm",),
                                 disaggregation=False, top_k=1, rate_rel_tol=0.02)  # fmt: skip
    cost = ReplicaCost.of(
        model, H100, ServingPlan(scheduler="vllm", max_num_seqs=64, max_num_batched_tokens=512), CAL
    )
    service_s = cost.prefill_s(512)
    slo = SLO(ttft_s=(service_s + cost.emit_delay_s) * (1 + 1e-6), percentile="p50")
    r = serve_search(model, H100, _poisson(2000, 512, 1), slo, CAL, constraints=c)
    assert r.table["goodput_requests_per_s"][0] == pytest.approx(0.5 / service_s, rel=0.08)


@pytest.mark.parametrize("threshold", [0.37, 3.0, 55.0])
def test_rate_search_finds_a_given_threshold(threshold):
    calls = []

    def probe(rate: float) -> GoodputPoint:
        calls.append(rate)
        return GoodputPoint(rate, rate <= threshold, None, 0.0, 0.0, 1.0, rate, rate)  # type: ignore[arg-type]

    found = _max_rate(probe, target=0.01, start=2.0, top=40.0, rel_tol=0.05)
    assert found is not None
    expected = min(threshold, 40.0)
    assert expected / 1.05 <= found.rate_per_s <= expected
    assert len(calls) < 20
    assert _max_rate(probe, target=threshold * 2, start=2.0, top=40.0, rel_tol=0.05) is None


def test_constraints_name_the_bad_field():
    with pytest.raises(ValueError, match="weight_dtypes"):
        ServingSearchConstraints(weight_dtypes=("fp7",))
    with pytest.raises(ValueError, match="max_num_seqs"):
        ServingSearchConstraints(max_num_seqs=(0,))
    with pytest.raises(ValueError, match="num_devices=16 exceeds"):
        serve_search(load_model("llama-3.1-8b"), H100, _poisson(10, 8, 8), SLO(ttft_s=1.0), CAL,
                     constraints=ServingSearchConstraints(num_devices=16))  # fmt: skip


PLAN_ARGS = ["serve", "plan", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1", "--devices", "2",
             "--input-tokens", "256", "--output-tokens", "32", "--num-requests", "50", "--weight-dtypes", "bf16",
             "--kv-dtypes", "bf16", "--simulate", "2"]  # fmt: skip


def test_serve_plan_json_gives_the_documented_keys():
    result = CliRunner().invoke(cli, [*PLAN_ARGS, "--ttft-slo-ms", "500", "--tpot-slo-ms", "50", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    for key in ("best", "plans", "pareto", "rejections", "num_candidates", "num_simulations", "notes", "slo"):
        assert key in out
    assert out["best"]["goodput_requests_per_s"] > 0 and set(out["rejections"]) == {k for k, _ in REASONS}
    assert out["slo"] == {"ttft_s": 0.5, "tpot_s": 0.05, "percentile": "p99"}


def test_serve_plan_prints_tables():
    result = CliRunner().invoke(cli, [*PLAN_ARGS, "--tpot-slo-ms", "50", "--top", "1"])
    assert result.exit_code == 0, result.output
    assert "Top plans" in result.output and "Rejected plans" in result.output and "best:" in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ttft-slo-ms", "-5"], "--ttft-slo-ms"),
        (["--tpot-slo-ms", "0"], "--tpot-slo-ms"),
        ([], "give --ttft-slo-ms, --tpot-slo-ms or both"),
        (["--ttft-slo-ms", "100", "--rate", "2", "--offline"], "--rate and --offline"),
        (["--ttft-slo-ms", "100", "--weight-dtypes", "fp7"], "--weight-dtypes"),
    ],
)
def test_serve_plan_bad_input_is_one_clear_line(extra, message):
    result = CliRunner().invoke(cli, [*PLAN_ARGS, *extra])
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output


def test_serve_plan_report_is_written_once_and_shows_the_search(tmp_path):
    path = tmp_path / "plan.html"
    args = [*PLAN_ARGS, "--tpot-slo-ms", "50", "--top", "1", "--report", str(path)]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    text = path.read_text(encoding="utf-8")
    assert "report written to" in first.output and "Pareto" in text and "<script src=" not in text
    again = CliRunner().invoke(cli, args)
    assert again.exit_code != 0 and "--force" in again.output
    assert path.read_text(encoding="utf-8") == text


def test_engine_option_reaches_the_cost_model():
    """vLLM 0.6 pays a 4 ms host step per iteration that TensorRT-LLM's overlap scheduler hides
    (profiles/engines/*.toml): the same plan's TPOT must differ by about that much."""
    args = ["serve", "estimate", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1",
            "--input-tokens", "128", "--output-tokens", "64", "--concurrency", "1", "--num-requests", "2", "--json"]  # fmt: skip
    tpot = {}
    for engine in ("vllm-v0", "trtllm"):
        result = CliRunner().invoke(cli, [*args, "--engine", engine])
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert engine in out["plan"]
        tpot[engine] = out["tpot_s"]
    assert tpot["vllm-v0"] - tpot["trtllm"] > 3e-3
    bad = CliRunner().invoke(cli, [*args, "--engine", "nope"])
    assert bad.exit_code != 0 and "nope" in bad.output
