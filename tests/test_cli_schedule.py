"""``workbench schedule`` through the installed console script."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "workbench"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_json_output() -> None:
    out = cli("schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["actions"][0][:4] == ["0F0", "0F1", "0F2", "0F3"]
    assert data["makespan"] == pytest.approx(33.0)
    assert data["mean_idle_fraction"] == pytest.approx(3 / 11)
    assert data["idle_over_busy"] == pytest.approx(3 / 8)
    assert data["idle_per_rank"] == pytest.approx([9.0, 6.0, 3.0, 0.0])
    assert data["peak_inflight_per_rank"] == [4, 3, 2, 1]


def test_table_trace_csv_and_no_overwrite(tmp_path: Path) -> None:
    args = (
        "schedule",
        "zbv",
        "--pp",
        "2",
        "--microbatches",
        "4",
        "--p2p-time",
        "0.1",
        "--trace",
        "t.json",
        "--csv",
        "s.csv",
    )
    out = cli(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "makespan" in out.stdout and "mean idle" in out.stdout and "2F0" in out.stdout
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    again = cli(*args, cwd=tmp_path)
    assert again.returncode != 0 and "exists" in again.stderr
    assert cli(*args, "--force", cwd=tmp_path).returncode == 0
    loaded = cli("schedule", "custom", "--from-csv", str(tmp_path / "s.csv"), "--json")
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["actions"][1][:2] == ["1F0", "2F0"]  # V placement: rank 1 holds 1 and 2


def test_rule_violation_is_one_line() -> None:
    out = cli("schedule", "1f1b", "--pp", "4", "--microbatches", "2")
    assert out.returncode == 1
    assert "at least pp=4 micro-batches" in out.stderr and "Traceback" not in out.stderr
    bad = cli("schedule", "nope", "--pp", "2", "--microbatches", "2")
    assert bad.returncode == 2 and "gpipe" in bad.stderr


# What a user sees (issue 19, item 8), in-process through click's CliRunner. -----------------------------------


def invoke(*args: str):
    from click.testing import CliRunner
    from workbench_cli import cli

    return CliRunner().invoke(cli, list(args))


def test_times_carry_their_unit_and_idle_shares_are_percentages() -> None:
    """1F1B, p = 4, m = 8, F = 1, B = 2: makespan (m + p - 1)(F + B) = 33; every rank busy m(F + B) = 24;
    mean idle (p - 1)/(m + p - 1) = 3/11, idle over busy 9/24 (PipeDream-Flush, Narayanan et al. 2021)."""
    out = invoke("schedule", "1f1b", "--pp", "4", "--microbatches", "8").stdout
    assert "makespan: 33 slots" in out and "(times in slots)" in out and "busy (slots)" in out
    assert f"mean idle (bubble), share of pp x makespan: {3 / 11:.1%}" in out
    assert f"idle over busy: {9 / 24:.1%}" in out
    assert f"per-rank idle in its own span: {9 / 33:.1%}, {6 / 30:.1%}, {3 / 27:.1%}, 0.0%" in out
    ms = invoke("schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--time-unit", "ms").stdout
    assert "makespan: 33 ms" in ms and "busy (ms)" in ms
    data = json.loads(invoke("schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--json").stdout)
    assert data["time_unit"] == "slot" and data["makespan"] == pytest.approx(33.0)
    bad = invoke("schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--time-unit", " ")
    assert bad.exit_code == 2 and "--time-unit" in bad.stderr


def test_written_files_are_confirmed(tmp_path: Path) -> None:
    trace, table = tmp_path / "t.json", tmp_path / "s.csv"
    out = invoke(
        "schedule", "gpipe", "--pp", "2", "--microbatches", "2", "--trace", str(trace), "--csv", str(table)
    )
    assert out.exit_code == 0, out.stderr
    assert f"wrote trace to {trace}" in out.stderr and f"wrote schedule CSV to {table}" in out.stderr
    assert json.loads(trace.read_text())["traceEvents"] and table.read_text().strip()


def test_schedule_names_are_read_in_any_case() -> None:
    upper = invoke("schedule", "ZB-H1", "--pp", "2", "--microbatches", "4", "--json")
    assert upper.exit_code == 0, upper.stderr
    lower = invoke("schedule", "zb-h1", "--pp", "2", "--microbatches", "4", "--json")
    assert json.loads(upper.stdout) == json.loads(lower.stdout)
    assert (
        json.loads(invoke("schedule", "1F1B", "--pp", "2", "--microbatches", "2", "--json").stdout)["name"]
        == "1f1b"
    )
    for module, command in (("estimate_cmd", "estimate_cmd"), ("run_cmd", "run_cmd")):
        cmd = getattr(importlib.import_module(f"workbench_cli.{module}"), command)
        (opt,) = [p for p in cmd.params if p.name == "schedule"]
        assert opt.type.convert("Interleaved-1F1B", opt, None) == "interleaved-1f1b", module
    est = invoke(
        "estimate", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--seq-len", "2048",
        "--global-batch", "16", "--tp", "4", "--pp", "2", "--schedule", "ZB-H1", "--framework", "generic", "--json",
    )  # fmt: skip
    assert est.exit_code == 0, est.stderr
    assert "zb-h1" in json.loads(est.stdout)["plan"]
