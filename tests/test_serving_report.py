"""The serving report: self-contained (no linked script or stylesheet, bokeh inlined), escaped, refuses to
overwrite, shows the simulation's numbers; and ``workbench serve estimate --report``."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import polars as pl
import pytest

pytest.importorskip("bokeh")

from click.testing import CliRunner  # noqa: E402
from workbench_cli import cli  # noqa: E402
from workbench_widgets.report import render_serving_report, write_serving_report  # noqa: E402

from workbench.presets.calibration import load_calibration  # noqa: E402
from workbench.presets.catalog import load_cluster, load_model  # noqa: E402
from workbench.serving.estimate import serve_estimate  # noqa: E402
from workbench.serving.sweep import rate_sweep  # noqa: E402
from workbench.specs.serving import SLO, ServingPlan, ServingWorkload  # noqa: E402

EVIL = "<script>alert(1)</script>"
LINKS = re.compile(r"<script[^>]*\ssrc=|<link[^>]*stylesheet|static/extensions", re.IGNORECASE)
CAL = load_calibration("default")


@pytest.fixture(scope="module")
def est():
    work = ServingWorkload(
        arrival="closed", concurrency=16, num_requests=64, input_tokens=1024, output_tokens=64
    )
    return serve_estimate(
        load_model("llama-3.1-70b"), load_cluster("dgx-h100", 1), ServingPlan(tp=8), work, CAL
    )


def test_report_is_self_contained_and_escapes_user_strings(tmp_path, est) -> None:
    evil = replace(est, model=replace(est.model, name=EVIL))
    sweep = rate_sweep(est.model, est.cluster, est.plan, est.workload, CAL, [1.0, 4.0])
    slo = SLO(ttft_s=0.5, tpot_s=0.05)
    out = write_serving_report(
        tmp_path / "serve.html", evil, sweep=sweep, slo=slo, command=f"workbench {EVIL}"
    )
    text = out.read_text(encoding="utf-8")
    assert EVIL not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert not LINKS.search(text)
    assert "Bokeh" in text and text.count("data-root-id") == 5  # CDFs x 2, sweep, KV, batch
    for anchor in ("inputs", "summary", "kv-cache", "figures", "sweep", "requests"):
        assert f'id="{anchor}"' in text
    assert 'id="search"' not in text
    s = est.summary()
    assert f"{s['ttft_s_p99'] * 1e3:,.1f}" in text and f"{est.kv_cache_capacity_tokens:,} tokens" in text
    assert "SLO TTFT &lt;= 500 ms and TPOT &lt;= 50 ms at p99" in text
    assert "The first 50 of 64 requests" in text


def test_report_refuses_to_overwrite(tmp_path, est) -> None:
    path = tmp_path / "serve.html"
    path.write_text("mine", encoding="utf-8")
    with pytest.raises(FileExistsError, match="force"):
        write_serving_report(path, est)
    assert path.read_text(encoding="utf-8") == "mine"
    write_serving_report(path, est, force=True)
    assert "Serving plan" in path.read_text(encoding="utf-8")
    with pytest.raises(FileNotFoundError):
        write_serving_report(tmp_path / "missing" / "serve.html", est)
    with pytest.raises(ValueError, match="request_rows"):
        render_serving_report(est, request_rows=-1)


def test_report_renders_a_serving_search(est) -> None:
    search_mod = pytest.importorskip("workbench.search.serving")
    from workbench.search.serving import ServingSearchConstraints

    small = ServingSearchConstraints(num_devices=2, weight_dtypes=("bf16",), kv_cache_dtypes=("bf16",),
                                     max_num_seqs=(64,), max_num_batched_tokens=(2048,), top_k=3)  # fmt: skip
    work = ServingWorkload(
        arrival="poisson", request_rate_per_s=4.0, num_requests=60, input_tokens=512, output_tokens=64
    )
    result = search_mod.serve_search(
        load_model("llama-3.1-8b"), est.cluster, work, SLO(ttft_s=1.0, tpot_s=0.05), CAL, constraints=small
    )
    text = render_serving_report(result.best_estimate(), search=result, slo=result.slo)
    assert (
        'id="search"' in text and "Pareto frontier" in text and text.count("data-root-id") == 6
    )  # + 2 search
    best = result.table.row(0, named=True)
    assert best["plan"] in text and f"{best['ttft_s_at_goodput'] * 1e3:,.1f}" in text
    assert "goodput output tokens/s per device" in text
    for reason, count in result.rejection_counts().items():
        text_of = dict(zip(result.rejections["reason"], result.rejections["description"], strict=True))[
            reason
        ]
        assert (text_of in text) == (count > 0)
    fake = SimpleNamespace(table=pl.DataFrame({"plan": ["a", "b"], "ttft_s_at_goodput": [0.4, 0.2]}),
                           pareto=pl.Series([True, False]), rejections={"does not fit": 7, "other": 0})  # fmt: skip
    text = render_serving_report(
        est, search=fake
    )  # any result with those parts, as frames, masks or mappings
    assert (
        "ttft at goodput (ms)" in text
        and "400.0" in text
        and "does not fit" in text
        and ">other<" not in text
    )


def test_cli_writes_the_report_and_refuses_to_overwrite(tmp_path) -> None:
    path = tmp_path / "serve.html"
    args = ["serve", "estimate", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1",
            "--input-tokens", "256", "--output-tokens", "16", "--concurrency", "4", "--num-requests", "16",
            "--report", str(path)]  # fmt: skip
    first = CliRunner().invoke(cli, [*args, "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["ttft_s"] > 0
    text = path.read_text(encoding="utf-8")
    assert "llama-3.1-8b" in text and "Reproduce" in text and not LINKS.search(text)
    assert 'id="sweep"' in text and text.count("data-root-id") == 5  # the CLI adds a rate sweep
    again = CliRunner().invoke(cli, args)
    assert again.exit_code != 0 and "--force" in again.output
    assert path.read_text(encoding="utf-8") == text
    forced = CliRunner().invoke(cli, [*args, "--force"])
    assert forced.exit_code == 0 and "report written to" in forced.output


def test_wide_tables_scroll_inside_the_page(est) -> None:
    """Issue 51: the serving report was 1,716 px wide in a 1,440 px window (a table of many columns); every
    table (the inputs' captioned tables excepted) now sits in a box that scrolls sideways by itself."""
    import re

    text = render_serving_report(est)
    tables = [m.start() for m in re.finditer(r"<table>(?!<caption>)", text)]
    wrapped = [m.end() - len("<table>") for m in re.finditer(r'<div class="scroll"><table>', text)]
    assert tables and set(tables) == set(wrapped)
    assert ".scroll { overflow-x: auto; max-width: 100%; }" in text
