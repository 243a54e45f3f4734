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


def test_report_shows_the_host_held_experts_and_the_all_reduce_kernels() -> None:
    """DeepSeek-V3 on 2 GB200 with SGLang's offloader (group 8: layers 7, 15, .., 55 host-held): the report's
    bytes per device and copy per forward against the experts' bytes by hand (config.json: hidden 7168,
    moe_intermediate_size 2048, 256 routed experts, 128 per device at ep 2; NVFP4 = 0.5 byte + one FP8 scale per
    16 values) over the GB200 preset's device-host link (NVLink-C2C, 225 GB/s per GPU and direction)."""
    plan = ServingPlan(tp=2, ep=2, weight_dtype="fp4", activation_dtype="fp4", kv_cache_dtype="fp8",
                       engine="sglang", offload_group_size=8)  # fmt: skip
    work = ServingWorkload(
        arrival="closed", concurrency=8, num_requests=16, input_tokens=2000, output_tokens=32
    )
    est = serve_estimate(load_model("deepseek-v3"), load_cluster("gb200-nvl72"), plan, work, CAL)
    offloaded_bytes = 7 * 3 * 7168 * 2048 * 128 * (0.5 + 1 / 16)
    copy_s = offloaded_bytes / 225e9
    assert est.host_offload_bytes_per_device == pytest.approx(offloaded_bytes, rel=1e-12)
    assert est.offload_copy_s == pytest.approx(copy_s, rel=1e-12)
    assert 0.0 < est.offload_wait_s <= copy_s and est.offload_decode_batch >= 1
    text = render_serving_report(est)
    assert (
        f"the last layer of every 8 (SGLang offload), {offloaded_bytes / 2**30:,.2f} GiB per device" in text
    )
    assert f"copying them takes {copy_s * 1e3:,.2f} ms per forward" in text
    assert (
        f"a decode step of {est.offload_decode_batch:,} sequences waits {est.offload_wait_s * 1e3:,.2f} ms"
        in text
    )
    # sglang's profile runs NCCL's kernels (profiles/engines/sglang.toml names no family): NCCL's model prices them
    assert "NCCL at tp 2, priced by NCCL&#39;s tuning model" in text


def test_report_names_a_table_priced_all_reduce(est) -> None:
    """TensorRT-LLM's profile (profiles/engines/trtllm.toml, read with tomllib) names its custom kernels, which
    sgl-project/sglang PR #2904 timed on H100 at tp 8: the report says so; the plain plan runs NCCL."""
    import tomllib
    from pathlib import Path

    from workbench.presets.engines import engines_dir

    assert "NCCL at tp 8, priced by NCCL&#39;s tuning model" in render_serving_report(est)
    family = tomllib.loads(Path(engines_dir(), "trtllm.toml").read_text(encoding="utf-8"))["tp_all_reduce"]
    assert family == "trtllm_custom"
    trt = serve_estimate(est.model, est.cluster, replace(est.plan, engine="trtllm"), est.workload, CAL)
    assert trt.tp_all_reduce == family and trt.tp_all_reduce_table
    text = render_serving_report(trt)
    assert (
        "TensorRT-LLM&#39;s custom one-shot/two-shot kernels at tp 8, priced by its published latency table"
        in text
    )
    assert "host-held experts" not in text


def test_report_names_the_memory_share_as_the_engines_flag(est) -> None:
    """The plan's memory share is each engine's own flag (EngineProfile.kv_memory_share): vLLM's share of the
    device, SGLang's --mem-fraction-static of weights and KV, TensorRT-LLM's share of the memory left free."""
    labels = {
        "generic": "GPU memory utilisation (of the device: weights, activations and KV)",
        "sglang": "static memory share (weights and KV)",
        "trtllm": "KV share of the memory left free",
    }
    for engine, label in labels.items():
        text = render_serving_report(
            serve_estimate(est.model, est.cluster, replace(est.plan, engine=engine), est.workload, CAL)
        )
        assert label in text, engine
        assert all(other not in text for other in labels.values() if other != label), engine
