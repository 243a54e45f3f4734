"""The compare section of the report: ``workbench compare RUN --report FILE.html`` lays a real run read back beside
its prediction in a self-contained page.

The run is tests/fixtures/launch/megatron_pretrain_gpt.log (Megatron-LM's ``training_log`` and ``report_memory``
lines; see tests/test_launch_compare.py for its provenance). The measured numbers expected below are worked out
here from the fixture's own numbers (the mean of the steady iterations after the two warm-up ones), the predicted
ones are read from the export's ``prediction.json``; neither is read back from the report code.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

pytest.importorskip("bokeh")

from click.testing import CliRunner  # noqa: E402
from workbench_cli import cli  # noqa: E402
from workbench_widgets.report import render_compare_report  # noqa: E402

from workbench.launch.compare import check_prediction, compare_run  # noqa: E402
from workbench.launch.runlogs import read_run_output  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "launch"
LINKS = re.compile(r"<script[^>]*\ssrc=|<link[^>]*stylesheet|static/extensions", re.IGNORECASE)
EXPORT = ["export", "--to", "megatron-core", "--model", "llama-3.1-8b", "--cluster", "dgx-h100",
          "--seq-len", "4096", "--global-batch", "64", "--tp", "2", "--framework", "megatron-core-2024"]  # fmt: skip
STEADY_MS = [2001.0, 2003.0, 1999.0, 2000.0, 1997.0]  # iterations 3..7 of the fixture
STEADY_TFLOPS = [401.0, 400.6, 401.4, 401.0, 401.8]
MAX_ALLOCATED_MB = 52345.25  # report_memory's "max allocated", MB = 2^20 bytes


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compare") / "export"
    r = CliRunner().invoke(cli, [*EXPORT, "--out", str(out)])
    assert r.exit_code == 0, r.output
    (out / "run.log").write_text((FIXTURES / "megatron_pretrain_gpt.log").read_text())
    return out


def _cells(html: str) -> list[list[str]]:
    """The rows of the predicted-vs-measured table, as the cells' text."""
    section = html[html.index('id="predicted-vs-measured"') :]
    table = section[: section.index("</table>")]
    return [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in table.split("<tr")[2:]]


def test_cli_writes_measured_beside_predicted(export: Path, tmp_path: Path) -> None:
    report = tmp_path / "compare.html"
    args = ["compare", str(export / "run.log"), "--report", str(report)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    html = report.read_text(encoding="utf-8")
    assert not LINKS.search(html) and "data-root-id" not in html  # offline, and no figure: no bokeh code
    predicted = json.loads((export / "prediction.json").read_text())["summary"]
    step_ms = statistics.fmean(STEADY_MS)
    rows = {row[0]: row[1:] for row in _cells(html)}
    assert rows["step time (ms)"] == [
        f"{step_ms:,.1f}",
        f"{predicted['step_time_s'] * 1e3:,.1f}",
        f"{(predicted['step_time_s'] * 1e3 - step_ms) / step_ms:+.1%}",
    ]
    tflops = statistics.fmean(STEADY_TFLOPS)
    assert rows["throughput per device (TFLOP/s)"][:2] == [
        f"{tflops:,.1f}",
        f"{predicted['tflops_per_device']:,.1f}",
    ]
    assert rows["peak memory per device (GiB)"][:2] == [
        f"{MAX_ALLOCATED_MB / 1024:,.2f}",
        f"{predicted['peak_memory_bytes'] / 2**30:,.2f}",
    ]
    assert set(rows) == {"step time (ms)", "throughput per device (TFLOP/s)", "peak memory per device (GiB)"}
    assert "megatron output" in html and "the mean of 5 steady steps" in html
    plan = json.loads((export / "prediction.json").read_text())["plan"]["describe"]
    assert f"<td>{plan}</td>" in html and "<td>llama-3.1-8b</td>" in html
    again = CliRunner().invoke(cli, args)
    assert again.exit_code != 0 and "--force" in again.output
    assert CliRunner().invoke(cli, [*args, "--force"]).exit_code == 0


def test_the_page_shows_the_rows_of_the_compare_code_and_escapes(export: Path) -> None:
    """The section shows exactly ``compare_run``'s rows (a serving run too), with user strings escaped."""
    log = export / "run.log"
    measured = read_run_output(log.read_text(), str(log))
    prediction = check_prediction(json.loads((export / "prediction.json").read_text()), "p.json")
    rows = compare_run(measured, prediction)
    evil = "<script>alert(1)</script>"
    html = render_compare_report(
        rows, prediction, run=evil, prediction_name="p.json", command=f"workbench {evil}"
    )
    assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    shown = _cells(html)
    assert len(shown) == len(rows)
    for row, cells in zip(rows, shown, strict=True):
        assert cells[3] == f"{row.error_frac:+.1%}"


def test_a_serving_benchmark_beside_its_serving_prediction(tmp_path: Path) -> None:
    """vLLM's ``bench serve`` result (tests/fixtures/launch/vllm_bench_serve.json: mean_ttft_ms 1830.2,
    mean_tpot_ms 38.1, output_throughput 595.3) beside a ``serve export`` of the model it ran."""
    serve = tmp_path / "serve"
    r = CliRunner().invoke(cli, ["serve", "export", "--engine", "vllm-v1", "--out", str(serve), "--model",
                                 "llama-3.1-70b", "--cluster", "dgx-h100", "--tp", "8", "--input-tokens", "1000",
                                 "--output-tokens", "200", "--num-requests", "16"])  # fmt: skip
    assert r.exit_code == 0, r.output
    run = serve / "vllm.json"
    run.write_text((FIXTURES / "vllm_bench_serve.json").read_text())
    report = tmp_path / "serve.html"
    r = CliRunner().invoke(cli, ["compare", str(run), "--report", str(report)])
    assert r.exit_code == 0, r.output
    predicted = json.loads((serve / "prediction.json").read_text())["summary"]
    rows = {row[0]: row[1:] for row in _cells(report.read_text(encoding="utf-8"))}
    assert rows["mean TTFT (ms)"][:2] == ["1,830.2", f"{predicted['ttft_s'] * 1e3:,.1f}"]
    assert rows["mean TPOT (ms)"][:2] == ["38.10", f"{predicted['tpot_s'] * 1e3:,.2f}"]
    assert rows["output tokens/s"] == [
        "595.3",
        f"{predicted['output_tokens_per_s']:,.1f}",
        f"{(predicted['output_tokens_per_s'] - 595.3) / 595.3:+.1%}",
    ]
