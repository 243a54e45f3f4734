"""``--failures`` on ``workbench estimate`` and ``workbench plan`` through the real console script."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli_estimate import ARGS

GOODPUT_KEYS = {
    "mtbf_s",
    "checkpoint_bytes",
    "checkpoint_write_s",
    "checkpoint_stall_s",
    "checkpoint_interval_s",
    "checkpoint_interval_steps",
    "restart_s",
    "goodput_frac",
}


def test_estimate_failures_json(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    out = json.loads(
        workbench_cli(*ARGS, "--failures", "llama3", "--checkpoint", "sync", "--json", check=True).stdout
    )
    g = out["goodput"]
    assert set(g) >= GOODPUT_KEYS and 0 < g["goodput_frac"] < 1
    assert g["checkpoint_stall_s"] == g["checkpoint_write_s"] and g["checkpoint_mode"] == "sync"
    # 1 node of 8 GPUs: 2,048 times fewer devices and nodes than Llama 3's 16,384 GPUs (Table 5: 419 in 54 days)
    assert abs(g["mtbf_s"] / (54 * 86400 / 419 * 2048) - 1) < 1e-9
    assert "goodput" not in json.loads(workbench_cli(*ARGS, "--json", check=True).stdout)


def test_estimate_failures_text_and_errors(workbench_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = workbench_cli(*ARGS, "--failures", "opt-175b", "--spare-nodes", "1", check=True)
    assert "goodput" in proc.stdout and "checkpoint interval" in proc.stdout and "1 spare node" in proc.stdout
    bad = workbench_cli(*ARGS, "--failures", "llama4")
    assert bad.returncode != 0 and "unknown failure preset 'llama4'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    path = tmp_path / "f.toml"
    path.write_text(
        'id = "x"\nname = "x"\n[recovery]\nrestart_s = 60\nrepair_s = 0\n[[causes]]\nname = "g"\nkind = "gpu"\n'
    )
    bad = workbench_cli(*ARGS, "--failures", str(path))
    assert (
        bad.returncode != 0
        and str(path) in bad.stderr
        and "count, per_device_hour or per_node_hour" in bad.stderr
    )
    bad = workbench_cli(*ARGS, "--spare-nodes", "2")
    assert bad.returncode == 2 and "needs --failures" in bad.stderr


def test_plan_goodput_objective(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    args = [
        "plan",
        "--model",
        "llama-3.1-8b",
        "--cluster",
        "dgx-h100",
        "--nodes",
        "1,8",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--fix",
        "tp=8",
        "--fix",
        "pp=1",
        "--zero",
        "1",
        "--recompute",
        "none",
        "--top",
        "2",
        "--objective",
        "goodput-cost",
    ]
    bad = workbench_cli(*args)
    assert bad.returncode == 2 and "needs --failures" in bad.stderr
    out = json.loads(workbench_cli(*args, "--failures", "opt-175b", "--json", check=True).stdout)
    assert out["objective"] == "goodput-cost" and out["goodput"]["failures"] == "opt-175b"
    costs = [p["goodput_device_hours"] for p in out["plans"] if p["refined"]]
    assert costs == sorted(costs) and all(0 < p["goodput_frac"] < 1 for p in out["plans"])
    text = workbench_cli(*args, "--failures", "llama3", check=True).stdout
    assert "Goodput by node count" in text and "cost the fewest device-hours" in text
