"""``workbench schedule`` through the installed console script."""

from __future__ import annotations

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
