"""``workbench estimate`` and ``workbench validate`` through the real console script."""

from __future__ import annotations

import json
from pathlib import Path

ARGS = [
    "estimate",
    "--model",
    "llama-3.1-8b",
    "--cluster",
    "dgx-h100",
    "--nodes",
    "1",
    "--seq-len",
    "4096",
    "--global-batch",
    "16",
    "--tp",
    "2",
    "--pp",
    "2",
    "--micro-batch",
    "1",
]
KEYS = {
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "tflops_per_device",
    "peak_memory_bytes",
    "memory_capacity_bytes",
    "fits",
    "bubble_fraction",
    "breakdown",
    "memory",
}


def test_estimate_json(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    proc = workbench_cli(*ARGS, "--json", check=True)
    out = json.loads(proc.stdout)
    assert set(out) >= KEYS and out["fits"] is True
    assert abs(sum(out["breakdown"].values()) - out["step_time_s"]) < 1e-9 * out["step_time_s"]


def test_estimate_human_and_trace(workbench_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.json"
    proc = workbench_cli(*ARGS, "--trace", str(trace), check=True)
    assert "step time" in proc.stdout and trace.is_file()
    assert json.loads(trace.read_text())["traceEvents"]
    again = workbench_cli(*ARGS, "--trace", str(trace))
    assert again.returncode != 0 and "--force" in again.stderr


def test_infeasible_plan_is_one_line(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    proc = workbench_cli(*ARGS[:-6], "--tp", "3", "--dp", "2")
    assert proc.returncode != 0 and "infeasible plan" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_validate_cli_on_a_missing_file(workbench_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = workbench_cli("validate", "--data", str(tmp_path / "none.csv"))
    assert proc.returncode != 0 and "no such file" in proc.stderr
