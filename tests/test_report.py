"""The self-contained HTML report: offline, escaped, no broken panel tags, refuses to overwrite, small."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import textwrap
from dataclasses import replace

import polars as pl
import pytest
from workbench_widgets.report import cli_command, render_report, write_csv_tables, write_report
from workbench_widgets.sample import renamed, sample_cluster, sample_estimate

from tests.conftest import ROOT
from workbench.specs.plan import ParallelPlan

EVIL = "<script>alert(1)</script>"
LINKS = re.compile(r"<script[^>]*\ssrc=|<link[^>]*stylesheet|static/extensions", re.IGNORECASE)


@pytest.fixture(scope="module")
def estimates():
    best = renamed(
        sample_estimate(plan=ParallelPlan(pp=4, dp=2, tp=8, schedule="1f1b"), num_microbatches=8), EVIL
    )
    other = renamed(
        sample_estimate(plan=ParallelPlan(pp=2, dp=4, tp=8, schedule="zb-h1"), num_microbatches=4), EVIL
    )
    return [best, other]


@pytest.fixture(scope="module")
def search():
    return pl.DataFrame(
        {
            "plan": ["dp2 tp8 pp4", "dp4 tp8 pp2", "<b>odd</b>"],
            "tokens_per_s": [3e5, 2e5, 1e5],
            "mfu": [0.5, 0.4, 0.2],
            "peak_memory_bytes": [50e9, 60e9, 90e9],
            "fits": [True, True, False],
            "pp": [4, 2, 1],
            "rejected_reason": [None, None, "does not fit"],
        }
    )


def test_report_is_self_contained_and_escapes_user_strings(tmp_path, estimates, search):
    out = write_report(
        tmp_path / "plan.html",
        estimates=estimates,
        search_results=search,
        plan_index=1,
        command="workbench plan --model '<b>m</b>'",
        notes=["<img src=x onerror=alert(2)>"],
        validation={"analytic": 0.123},
    )
    text = out.read_text(encoding="utf-8")
    assert EVIL not in text and html.escape(EVIL) in text
    assert "<img src=x" not in text and "<b>odd</b>" not in text and "<b>m</b>" not in text
    assert LINKS.search(text) is None
    assert "12.3 %" in text  # the validation error, shown as a percentage
    assert "#1 (chosen plan)" in text and "#0 (best plan)" in text
    assert text.count('class="bk-root"') + text.count("data-root-id") >= 5


def test_refuses_to_overwrite_and_checks_the_index(tmp_path, estimates):
    path = tmp_path / "r.html"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="--force"):
        write_report(path, estimates=estimates, command="x")
    assert path.read_text() == "keep me"
    write_report(path, estimates=estimates, command="x", force=True)
    assert path.read_text() != "keep me"
    with pytest.raises(ValueError, match="plan_index"):
        render_report(estimates=estimates, command="x", plan_index=2)
    with pytest.raises(ValueError, match="at least one"):
        render_report(estimates=[], command="x")
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "missing" / "r.html", estimates=estimates, command="x")


def test_export_after_importing_panel_has_no_relative_extension_tag(tmp_path):
    script = textwrap.dedent(f"""
        import panel  # registers panel's bokeh extension, which adds a static/extensions/panel script tag
        from workbench.specs.plan import ParallelPlan
        from workbench_widgets.report import write_report
        from workbench_widgets.sample import sample_estimate
        est = sample_estimate(plan=ParallelPlan(pp=2, schedule="1f1b"), num_microbatches=4)
        write_report({str(tmp_path / "p.html")!r}, estimates=[est], command="x")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "p.html").read_text(encoding="utf-8")
    assert "static/extensions" not in text and LINKS.search(text) is None


def test_csv_tables(tmp_path, estimates, search):
    paths = write_csv_tables(tmp_path / "tables", estimates=estimates, search_results=search)
    assert sorted(p.name for p in paths) == [
        "activation.csv",
        "memory.csv",
        "plans.csv",
        "search.csv",
        "timeline.csv",
    ]
    timeline = pl.read_csv(tmp_path / "tables" / "timeline.csv")
    assert timeline.height == 4 * 8 * 2  # 1F1B: one F and one B per stage and micro-batch
    assert pl.read_csv(tmp_path / "tables" / "plans.csv").height == 2
    with pytest.raises(FileExistsError):
        write_csv_tables(tmp_path / "tables", estimates=estimates)


def test_cli_command_is_shell_quoted():
    assert cli_command(["estimate", "--model", "a b"]) == "workbench estimate --model 'a b'"


@pytest.mark.slow
def test_report_for_64_ranks_and_256_microbatches_is_under_3_mb(tmp_path):
    est = sample_estimate(
        plan=ParallelPlan(pp=64, schedule="1f1b"), num_microbatches=256, cluster=sample_cluster(8)
    )
    assert est.timeline.height == 64 * 256 * 2
    out = write_report(tmp_path / "big.html", estimates=[est], command="x")
    assert out.stat().st_size < 3 * 1024**2


def test_cli_estimate_writes_a_report(tmp_path, workbench_cli):
    args = [
        "estimate",
        "--model",
        "llama-3.1-8b",
        "--cluster",
        "dgx-h100",
        "--nodes",
        "1",
        "--seq-len",
        "2048",
        "--global-batch",
        "16",
        "--tp",
        "4",
        "--pp",
        "2",
    ]
    out = tmp_path / "e.html"
    proc = workbench_cli(*args, "--report", str(out), "--csv", str(tmp_path / "csv"))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert "llama-3.1-8b" in text and "--report" in text and LINKS.search(text) is None
    assert (tmp_path / "csv" / "timeline.csv").exists()
    again = workbench_cli(*args, "--report", str(out))
    assert again.returncode != 0 and "exists" in again.stderr and "Traceback" not in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    bad = workbench_cli(*args, "--report", str(tmp_path / "x.html"), "--plan-index", "3")
    assert bad.returncode != 0 and "--plan-index" in bad.stderr and "Traceback" not in bad.stderr


def _predicted_and_measured():
    """GPipe p=4, m=8 simulated with F = 2 ms ("predicted", backend named EVIL) and F = 3 ms ("measured")."""
    plan = ParallelPlan(pp=4, schedule="gpipe")
    predicted = renamed(sample_estimate(plan=plan, num_microbatches=8, forward_s=2e-3), EVIL)
    measured = renamed(sample_estimate(plan=plan, num_microbatches=8, forward_s=3e-3), EVIL)
    return replace(predicted, backend=EVIL), replace(measured, backend="real-run", measured=True)


def _gpipe_step_ms(forward_s: float, pp: int = 4, m: int = 8) -> tuple[float, float]:
    """(step time ms, bubble fraction) of the sample GPipe estimate in closed form: makespan
    (m + p - 1)(F + B) + 2 (p - 1) c with B = 2F, c = F/20, plus the sample's DP (2F) and optimizer (F)
    terms; bubble = the critical rank's idle (p - 1)(F + B) over the step, pipeline sends excluded (GPipe,
    arXiv:1811.06965; ``workbench.estimate.metrics``)."""
    makespan_s = (m + pp - 1) * 3 * forward_s + 2 * (pp - 1) * forward_s / 20
    step_s = makespan_s + 3 * forward_s
    return step_s * 1e3, (pp - 1) * 3 * forward_s / step_s


def test_report_overlays_predicted_and_measured_with_a_table(tmp_path):
    predicted, measured = _predicted_and_measured()
    out = write_report(
        tmp_path / "run.html",
        estimates=[measured, predicted],
        command="workbench run --model '<b>m</b>'",
        comparison=(predicted, measured),
    )
    text = out.read_text(encoding="utf-8")
    assert text.count(">Predicted vs measured</h2>") == 1
    section = text[
        text.index(">Predicted vs measured</h2>") : text.index("</table>", text.index("Predicted vs"))
    ]
    step_pred, bubble_pred = _gpipe_step_ms(2e-3)
    step_meas, bubble_meas = _gpipe_step_ms(3e-3)
    tokens_per_step = 4096 * 8
    assert f"{step_pred:,.2f}" in section and f"{step_meas:,.2f}" in section
    assert f"{(step_pred / step_meas - 1) * 100:+.1f} %" in section
    assert f"{bubble_pred * 100:.1f}" in section and f"{bubble_meas * 100:.1f}" in section
    assert f"{tokens_per_step / (step_pred / 1e3):,.0f}" in section
    assert f"{(step_meas / step_pred - 1) * 100:+.1f} %" in section  # tokens/s error: inverse of the step's
    # sample memory: 8 + 8 + 24 + 1 + 2 GiB, plus GPipe's rank 0 holding all m = 8 activations of 2 GiB
    assert f"{8 + 8 + 24 + 1 + 2 + 8 * 2:,.3f}" in section and "peak memory per rank (GiB)" in section
    assert EVIL not in text and html.escape(EVIL) in section and "<b>m</b>" not in text
    assert LINKS.search(text) is None
    assert text.count("data-root-id") == 1 + render_report(
        estimates=[measured, predicted], command="x"
    ).count("data-root-id")


def test_report_without_comparison_has_no_overlay_section(estimates):
    text = render_report(estimates=estimates, command="x")
    assert "Predicted vs measured" not in text
