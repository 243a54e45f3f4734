"""``workbench plan`` through the real console script."""

from __future__ import annotations

import json

import pytest

MAIN = (
    "plan",
    "--model",
    "llama-3.1-70b",
    "--cluster",
    "dgx-h100",
    "--nodes",
    "8",
    "--seq-len",
    "8192",
    "--global-batch",
    "256",
)
SMALL = (
    "plan",
    "--model",
    "llama-3.1-8b",
    "--cluster",
    "dgx-h100",
    "--nodes",
    "1",
    "--seq-len",
    "4096",
    "--global-batch",
    "32",
    "--top",
    "3",
)


def test_readme_main_job_prints_a_ranked_table(workbench_cli):
    proc = workbench_cli(*MAIN, check=True)
    out = proc.stdout
    assert "plans screened" in out and "Best plans" in out
    assert "why: #1 beats #2" in out and "Rejected plans" in out
    assert "Traceback" not in proc.stderr


def test_json_is_one_object_with_ranked_plans(workbench_cli):
    proc = workbench_cli(*SMALL, "--json", check=True)
    data = json.loads(proc.stdout)
    assert data["num_plans"] > 0 and data["num_feasible"] > 0
    plans = data["plans"]
    assert [p["rank"] for p in plans[:3]] == [1, 2, 3] and all(p["refined"] for p in plans[:3])
    assert plans[0]["tokens_per_s"] >= plans[1]["tokens_per_s"] or not plans[1]["fits"]
    assert set(data["rejections"]) >= {"memory", "schedule", "batch"}


def test_csv_is_written_and_never_overwritten_without_force(workbench_cli, tmp_path):
    out = tmp_path / "plans.csv"
    workbench_cli(*SMALL, "--csv", str(out), check=True)
    header = out.read_text().splitlines()[0].split(",")
    assert header[:3] == ["rank", "num_nodes", "num_devices"] and "tokens_per_s" in header
    again = workbench_cli(*SMALL, "--csv", str(out))
    assert again.returncode != 0 and "--force" in again.stderr and "Traceback" not in again.stderr
    workbench_cli(*SMALL, "--csv", str(out), "--force", check=True)


def test_no_feasible_plan_lists_the_closest_misses(workbench_cli):
    proc = workbench_cli(
        "plan",
        "--model",
        "llama-3.1-405b",
        "--cluster",
        "dgx-a100",
        "--nodes",
        "1",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--top",
        "2",
    )
    assert proc.returncode == 1
    assert "no feasible plan" in proc.stdout and "Closest misses" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--fix", "tp=x"), "AXIS=N"),
        (("--fix", "zz=2"), "unknown axis"),
        (("--schedules", "1f1b,warp"), "schedules"),
        (("--objective", "speed"), "objective"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(workbench_cli, extra, needle):
    proc = workbench_cli(*SMALL, *extra)
    assert proc.returncode != 0 and needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_model_is_one_line(workbench_cli):
    proc = workbench_cli(
        "plan", "--model", "llama-9", "--cluster", "dgx-h100", "--seq-len", "4096", "--global-batch", "8"
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "unknown model" in proc.stderr


def test_report_is_written(workbench_cli, tmp_path):
    out = tmp_path / "plan.html"
    workbench_cli(*SMALL, "--report", str(out), check=True)
    assert out.stat().st_size > 100_000 and "<html" in out.read_text()[:2000].lower()


def test_top_n_shows_n_plans(workbench_cli):
    """``--top 3`` refines and shows three plans (it showed ten: the refined ones padded with screened ones)."""
    out = workbench_cli(*SMALL, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("│ ") and line[2:4].strip().isdigit()]
    assert [r.split("│")[1].strip() for r in rows] == ["1", "2", "3"]
