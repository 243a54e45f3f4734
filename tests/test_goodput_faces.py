"""The faces of goodput: its figures, the report section, the app's Goodput tab and ``estimate --report``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("panel")

from workbench_widgets.plots.goodput import (  # noqa: E402
    goodput_interval_figure,
    goodput_scale_figure,
    interval_curve,
)
from workbench_widgets.report import render_report  # noqa: E402

from tests.test_cli_estimate import ARGS  # noqa: E402
from workbench.estimate.analytic import estimate_plan  # noqa: E402
from workbench.goodput import GoodputOptions, estimate_goodput, load_failures, optimal_interval_s  # noqa: E402
from workbench.presets.catalog import load_cluster, load_model  # noqa: E402
from workbench.search.sizes import goodput_scaling  # noqa: E402
from workbench.specs.plan import ParallelPlan, Workload  # noqa: E402


@pytest.fixture(scope="module")
def priced():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=8)
    est = estimate_plan(
        model, cluster, Workload(seq_len=4096, global_batch_size=512), ParallelPlan(dp=64, zero_stage=1)
    )
    failures, options = load_failures("llama3"), GoodputOptions(checkpoint="sync")
    return est, failures, options, estimate_goodput(est, failures, options)


def test_interval_figure_peaks_at_the_optimal_interval(priced) -> None:  # type: ignore[no-untyped-def]
    _, _, _, g = priced
    curve = interval_curve(g, points=2001)
    best = curve["interval_s"][np.argmax(curve["goodput_frac"])]
    # the closed-form optimum M (1 + W0(-exp(-(1 + delta/M)))) is where the sampled curve peaks
    assert best == pytest.approx(float(optimal_interval_s(g.checkpoint_stall_s, g.mtbf_s)), rel=0.01)
    assert curve["goodput_frac"].max() <= 1.0
    fig = goodput_interval_figure(g)
    spans = {m.name: m.location for m in fig.center if m.name in ("chosen", "young", "daly")}
    assert spans["chosen"] == pytest.approx(g.checkpoint_interval_s / 60)
    assert set(spans) == {"chosen", "young", "daly"}


def test_scaling_loses_goodput_as_the_cluster_grows(priced) -> None:  # type: ignore[no-untyped-def]
    est, failures, options, g = priced
    frame = goodput_scaling(est, failures, options, node_counts=[1, 2, 4, 8, 16, 3])
    assert frame["num_nodes"].to_list() == [1, 2, 4, 8, 16]  # 3 nodes: dp 24 does not divide the batch of 512
    goodput = frame["goodput_frac"].to_numpy()
    assert np.all(np.diff(goodput) < 0)
    # interruption rates are per device-hour and per node-hour: MTBF x size is constant on one node shape
    products = frame["mtbf_s"].to_numpy() * frame["num_nodes"].to_numpy()
    assert np.allclose(products, products[0])
    row = frame.filter(frame["num_nodes"] == 8).row(0, named=True)
    assert row["goodput_frac"] == pytest.approx(g.goodput_frac)
    assert row["goodput_tokens_per_s"] == pytest.approx(est.tokens_per_s * g.goodput_frac)
    fig = goodput_scale_figure(frame)
    assert {r.name for r in fig.renderers} >= {"goodput", "ideal", "effective"}
    with pytest.raises(ValueError, match="goodput_scaling"):
        goodput_scale_figure(frame.head(0))


def test_report_section_and_app_tab(priced) -> None:  # type: ignore[no-untyped-def]
    from workbench_widgets.app.app import WorkbenchApp, report_html

    est, failures, options, g = priced
    html = render_report(estimates=[est], command="x", goodput=(g, goodput_scaling(est, failures, options)))
    assert 'id="goodput"' in html and f"{g.goodput_frac * 100:.1f} %" in html
    assert 'id="goodput"' not in render_report(estimates=[est], command="x")
    app = WorkbenchApp()
    app.panel()
    view = app.views["goodput"]
    view.store.state.checkpoint = "sync"
    view.compute()
    assert app.store.goodput is not None and app.store.goodput[0] is app.store.estimate
    assert view.interval.visible and view.scale.visible and "Goodput" in view.text.object
    assert 'id="goodput"' in report_html(app.store)
    app.state.num_nodes = 4  # another estimate: the goodput of the old one leaves the report
    assert 'id="goodput"' not in report_html(app.store)


def test_estimate_report_has_the_goodput_section(workbench_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r.html"
    workbench_cli(*ARGS, "--failures", "llama3", "--report", str(out), check=True)
    assert 'id="goodput"' in out.read_text(encoding="utf-8")
