"""The serving figures draw the simulation's own numbers, checked against closed forms: the CDF is the sorted
per-request latencies; a prompt is prefilled once and every request decodes output - 1 tokens, so the batch
bars sum to the workload's tokens; KV bytes per token from the attention shape; the rate sweep's SLO columns
from a direct count."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

pytest.importorskip("bokeh")

from bokeh.models import ColumnDataSource, Span  # noqa: E402
from workbench_widgets.plots import serving_run  # noqa: E402
from workbench_widgets.plots.serving import (  # noqa: E402
    latency_cdf,
    latency_cdf_figure,
    log_ticks,
    serving_figures,
    throughput_latency_figure,
)
from workbench_widgets.plots.serving_run import (  # noqa: E402
    batch_composition,
    batch_composition_figure,
    kv_bytes_per_token_per_device,
    kv_cache_data,
    kv_cache_figure,
)

from workbench.presets.calibration import load_calibration  # noqa: E402
from workbench.presets.catalog import load_cluster, load_model  # noqa: E402
from workbench.serving.cost import ReplicaCost  # noqa: E402
from workbench.serving.estimate import serve_estimate  # noqa: E402
from workbench.serving.sweep import (  # noqa: E402
    SWEEP_COLUMNS,
    meets_slo,
    poisson_workload,
    rate_sweep,
    sweep_table,
)
from workbench.specs.serving import SLO, Disaggregation, ServingPlan, ServingWorkload  # noqa: E402

CAL = load_calibration("default")
NODE = load_cluster("dgx-h100", num_nodes=1)
SLO_P99 = SLO(ttft_s=0.5, tpot_s=0.02)
OUTPUTS = tuple(1 if i % 10 == 0 else 16 + i % 48 for i in range(120))  # some requests of one output token


@pytest.fixture(scope="module")
def est():
    """Llama-3.1-70B on one DGX H100, tp8, Poisson arrivals of mixed output lengths."""
    work = ServingWorkload(
        arrival="poisson", request_rate_per_s=6.0, num_requests=120, input_tokens=1024, output_tokens=OUTPUTS
    )
    return serve_estimate(load_model("llama-3.1-70b"), NODE, ServingPlan(tp=8), work, CAL)


@pytest.fixture(scope="module")
def disagg():
    plan = ServingPlan(
        disaggregation=Disaggregation(prefill_workers=2, prefill_tp=1, decode_workers=1, decode_tp=2)
    )
    work = ServingWorkload(
        arrival="poisson", request_rate_per_s=8.0, num_requests=80, input_tokens=512, output_tokens=32
    )
    return serve_estimate(load_model("llama-3.1-8b"), NODE, plan, work, CAL)


def _source(fig, name):
    return next(r for r in fig.renderers if r.name == name).data_source.data


def _spans(fig) -> dict[str, float]:
    return {m.name: m.location for m in fig.center if isinstance(m, Span)}


def test_cdf_is_the_sorted_request_latencies(est) -> None:
    req = est.sim.requests
    fig = latency_cdf_figure(est, "ttft")
    data = _source(fig, "cdf")
    ttft = np.sort(req["ttft_s"].to_numpy())
    assert np.allclose(data["latency_ms"], ttft * 1e3)
    assert np.allclose(data["share_pct"], np.arange(1, ttft.size + 1) / ttft.size * 100)
    tpot = latency_cdf(est, "tpot")
    # TPOT is (finish - first token) / (output - 1): requests of one output token have none
    assert tpot["latency_s"].size == sum(o > 1 for o in OUTPUTS)
    two_or_more = req.filter(pl.col("output_tokens") > 1)
    expected = (two_or_more["finish_s"] - two_or_more["first_token_s"]) / (two_or_more["output_tokens"] - 1)
    assert np.allclose(tpot["latency_s"], np.sort(expected.to_numpy()))
    with pytest.raises(ValueError, match="ttft, tpot"):
        latency_cdf(est, "e2e")


def test_cdf_draws_the_slo(est) -> None:
    fig = latency_cdf_figure(est, "tpot", slo=SLO_P99)
    assert _spans(fig) == {"slo": pytest.approx(20.0), "slo_percentile": pytest.approx(99.0)}
    from bokeh.models import Label

    labels = {a.name: a for a in fig.center if isinstance(a, Label)}  # each line says what it is (issue 51)
    assert labels["slo_label"].text == "SLO TPOT 20 ms" and labels["slo_label"].x == pytest.approx(20.0)
    assert labels["slo_percentile_label"].text == "SLO share: 99% of requests"
    within = np.mean(latency_cdf(est, "tpot")["latency_s"] <= 0.02)
    assert f"{within:.1%} within 20 ms" in fig.title.text
    assert not _spans(latency_cdf_figure(est, "tpot", slo=SLO(ttft_s=1.0)))  # no TPOT target: no line


def test_kv_bytes_per_token_is_the_attention_shape(est) -> None:
    # Llama-3.1-70B: 80 layers x K and V x 8 KV heads / tp 8 x head_dim 128 x 2 bytes (bf16) = 40,960 bytes
    assert kv_bytes_per_token_per_device(est) == 80 * 2 * 1 * 128 * 2
    cost = ReplicaCost.of(est.model, est.cluster, est.plan, CAL)
    assert kv_bytes_per_token_per_device(est) == cost.kv_bytes_per_token_per_device()
    pp2 = ServingPlan(tp=4, pp=2, kv_cache_dtype="fp8")
    pp2_est = serve_estimate(
        est.model, est.cluster, pp2, ServingWorkload(num_requests=2, input_tokens=8, output_tokens=2), CAL
    )
    assert (
        kv_bytes_per_token_per_device(pp2_est) == 40 * 2 * 2 * 128 * 1
    )  # 40 layers per stage, 2 heads, 1 byte


def test_kv_in_use_never_exceeds_the_capacity(est, disagg) -> None:
    for e in (est, disagg):
        for engine in e.sim.iterations["engine"].unique().to_list():
            data = kv_cache_data(e, engine)
            assert data["used_tokens"].size and np.all(data["used_tokens"] <= data["capacity_tokens"])
            assert np.all(data["used_bytes"] <= data["capacity_bytes"])
    data = kv_cache_data(est, 0)
    assert data["capacity_tokens"][0] == est.kv_cache_capacity_tokens
    fig = kv_cache_figure(est)
    assert _spans(fig)["capacity_0"] == pytest.approx(est.kv_cache_capacity_tokens * 40_960 / 2**30)
    assert max(_source(fig, "kv_0")["used_gib"]) <= _spans(fig)["capacity_0"]
    # the disaggregated plan: prefill engines on tp1 and the decode engine on tp2 hold different capacities
    assert len(_spans(kv_cache_figure(disagg))) == 2


def test_batch_tokens_sum_to_the_workload(est) -> None:
    data = batch_composition(est, 0)
    it = est.sim.iterations
    assert data["prefill_tokens"].sum() == it["num_prefill_tokens"].sum()
    assert data["decode_tokens"].sum() == it["num_decode_seqs"].sum()
    assert est.summary()["num_preemptions"] == 0
    # each prompt is prefilled once, and a request of O output tokens decodes O - 1 of them
    assert data["prefill_tokens"].sum() == 1024 * len(OUTPUTS)
    assert data["decode_tokens"].sum() == sum(o - 1 for o in OUTPUTS)
    fig = batch_composition_figure(est)
    bars = _source(fig, "decode")
    assert np.allclose(np.asarray(bars["total"]) - np.asarray(bars["prefill"]), data["decode_tokens"])


def test_long_runs_are_grouped_and_keep_their_sums(est, monkeypatch) -> None:
    monkeypatch.setattr(serving_run, "MAX_ITERATION_POINTS", 50)
    it = est.sim.iterations
    data = batch_composition(est, 0)
    assert data["num_iterations"].size <= 50 and data["num_iterations"].sum() == it.height
    assert (data["prefill_tokens"] * data["num_iterations"]).sum() == pytest.approx(
        it["num_prefill_tokens"].sum()
    )
    assert (data["decode_tokens"] * data["num_iterations"]).sum() == pytest.approx(
        it["num_decode_seqs"].sum()
    )
    assert data["start_s"][0] == it["start_s"][0] and data["end_s"][-1] == it["end_s"][-1]
    kv = kv_cache_data(est, 0)
    assert kv["used_tokens"].max() == it["kv_used_tokens"].max()  # each group keeps its peak


def test_disaggregated_plan_draws_both_pools(disagg) -> None:
    figs = serving_figures(disagg)
    assert "batch_decode" in figs and "throughput_latency" not in figs
    prefill = batch_composition(disagg, 0)
    decode = batch_composition(disagg, 2)
    assert prefill["decode_tokens"].sum() == 0 and decode["prefill_tokens"].sum() == 0
    assert decode["decode_tokens"].sum() == 80 * 31  # every request decodes 31 tokens on the decode engine


def test_sweep_runs_the_same_requests_at_each_rate() -> None:
    model = load_model("llama-3.1-8b")
    work = ServingWorkload(
        arrival="closed", concurrency=8, num_requests=60, input_tokens=512, output_tokens=(32, 64) * 30
    )
    moved = poisson_workload(work, 3.0)
    assert moved.arrival.value == "poisson" and moved.request_rate_per_s == 3.0
    assert moved.input_lengths() == work.input_lengths() and moved.output_lengths() == work.output_lengths()
    points = rate_sweep(model, NODE, ServingPlan(tp=1), work, CAL, rates_per_s=[20.0, 2.0])
    assert [r for r, _ in points] == [2.0, 20.0]
    table = sweep_table(points, SLO(ttft_s=0.1, tpot_s=0.01))
    assert table.columns == list(SWEEP_COLUMNS) and table.height == 2
    for row, (_, e) in zip(table.iter_rows(named=True), points, strict=True):
        req = e.sim.requests
        tpot = req["tpot_s"].fill_null(0.0)
        assert row["slo_attained_frac"] == pytest.approx(((req["ttft_s"] <= 0.1) & (tpot <= 0.01)).mean())
        p99 = float(np.percentile(req["ttft_s"].to_numpy(), 99))
        assert row["ttft_s_p99"] == pytest.approx(p99)
        assert row["meets_slo"] == (p99 <= 0.1 and row["tpot_s_p99"] <= 0.01)
    assert sweep_table(points)["meets_slo"].null_count() == 2
    with pytest.raises(ValueError, match="at least one rate"):
        rate_sweep(model, NODE, ServingPlan(tp=1), work, CAL, rates_per_s=[])


def test_meets_slo_reads_the_slo_percentile() -> None:
    s = {"ttft_s_p50": 0.1, "ttft_s_p99": 0.9, "tpot_s_p50": 0.01, "tpot_s_p99": math.nan}
    assert meets_slo(s, SLO(ttft_s=0.5, tpot_s=0.02, percentile="p50"))
    assert not meets_slo(s, SLO(ttft_s=0.5, percentile="p99"))
    assert meets_slo(s, SLO(tpot_s=0.001, percentile="p99"))  # no TPOT measured: nothing to miss


def test_throughput_latency_figure_draws_the_sweep(est) -> None:
    table = sweep_table(rate_sweep(est.model, est.cluster, est.plan, est.workload, CAL, [2.0, 8.0]), SLO_P99)
    fig = throughput_latency_figure(table, slo=SLO_P99)
    data = _source(fig, "ttft_p99")
    assert np.allclose(data["ttft_ms_p99"], table.sort("output_tokens_per_s")["ttft_s_p99"] * 1e3)
    assert _spans(fig) == {"slo_ttft": pytest.approx(500.0), "slo_tpot": pytest.approx(20.0)}
    from bokeh.models import Label

    texts = {a.name: a.text for a in fig.center if isinstance(a, Label)}  # the SLO lines are labelled
    assert texts == {"slo_ttft_label": "SLO TTFT 500 ms", "slo_tpot_label": "SLO TPOT 20 ms"}
    assert {r.name for r in fig.renderers} >= {"ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"}
    with pytest.raises(ValueError, match="sweep_table"):
        throughput_latency_figure(table.head(0))


def test_log_ticks_cover_the_values() -> None:
    assert log_ticks(np.array([12.0, 340.0])) == [10.0, 20.0, 50.0, 100.0, 200.0, 500.0]
    assert log_ticks(np.array([math.nan])) == [1.0]


def test_figures_hold_only_their_sources(est) -> None:
    figs = serving_figures(est, slo=SLO_P99, sweep=[(6.0, est)])
    assert list(figs) == ["ttft_cdf", "tpot_cdf", "throughput_latency", "kv_cache", "batch"]
    for fig in figs.values():
        assert fig.select(type=ColumnDataSource)
