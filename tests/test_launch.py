"""The torchrun launcher: a failing rank surfaces its rank and traceback, timeouts and killed workers leave
no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest
from workbench_backends.launch import (
    LaunchConfig,
    LaunchError,
    free_port,
    recorded_worker_pids,
    run_torchrun,
    torchrun_command,
)

ROOT = Path(__file__).resolve().parents[1]

# A stand-in worker: records its pid like workbench_backends.run_worker, then all-reduces in a loop on gloo (so the
# surviving ranks are blocked in a collective when a neighbour dies). MODE picks how it ends.
WORKER = textwrap.dedent("""
    import argparse, os, sys, time, traceback
    from pathlib import Path
    p = argparse.ArgumentParser(); p.add_argument("--run-dir"); p.add_argument("--mode")
    a = p.parse_args(); rank = int(os.environ["RANK"]); run_dir = Path(a.run_dir)
    (run_dir / f"pid-rank{rank}").write_text(str(os.getpid()))
    try:
        if a.mode == "fail" and rank == 1:
            raise ZeroDivisionError("rank one divides by zero")
        if a.mode == "ok":
            sys.exit(0)
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        t = torch.ones(4)
        while True:
            dist.all_reduce(t); time.sleep(0.01)
    except Exception:
        (run_dir / f"error-rank{rank}.txt").write_text(traceback.format_exc()); raise
""")


def _launch(tmp_path: Path, mode: str, *, timeout_s: float = 60.0, nproc: int = 2) -> float:
    (tmp_path / "wb_fake_worker.py").write_text(WORKER)
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return run_torchrun(
        LaunchConfig(nproc_per_node=nproc, timeout_s=timeout_s),
        "wb_fake_worker",
        ["--run-dir", str(run_dir), "--mode", mode],
        run_dir=run_dir,
        env=env,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = (
        Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        if Path(f"/proc/{pid}").exists()
        else "X"
    )
    return state not in ("Z", "X")


def _pids(run_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in run_dir.glob("pid-rank*")]


def _torchrun_pids(run_dir: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"torch.distributed.run.*{run_dir}"], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 1024 <= port <= 65535


def test_command_uses_loopback_rendezvous_and_no_restarts(tmp_path: Path) -> None:
    cmd = torchrun_command(
        LaunchConfig(nproc_per_node=4), "workbench_backends.run_worker", ["--run-dir", "x"], log_dir=tmp_path
    )
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert "--nproc-per-node=4" in cmd and "--max-restarts=0" in cmd and "--rdzv-backend=c10d" in cmd
    endpoint = next(c for c in cmd if c.startswith("--rdzv-endpoint="))
    assert endpoint.startswith("--rdzv-endpoint=127.0.0.1:")
    assert cmd[-4:] == ["-m", "workbench_backends.run_worker", "--run-dir", "x"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"nproc_per_node": 0}, "nproc_per_node"),
        ({"nproc_per_node": 2, "nnodes": 0}, "nnodes"),
        ({"nproc_per_node": 2, "timeout_s": 0}, "timeout_s"),
        ({"nproc_per_node": 2, "nnodes": 2}, "rdzv_endpoint"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LaunchConfig(**kwargs)


def test_failing_rank_names_rank_and_traceback(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as info:
        _launch(tmp_path, "fail")
    err = info.value
    assert err.rank == 1
    assert str(err).startswith("rank 1 failed: ZeroDivisionError: rank one divides by zero (traceback: ")
    assert "Traceback" in err.traceback_text
    run_dir = tmp_path / "run"
    assert not [p for p in _pids(run_dir) if _alive(p)]


def test_timeout_stops_every_process(tmp_path: Path) -> None:
    start = time.perf_counter()
    with pytest.raises(LaunchError, match="did not finish within"):
        _launch(tmp_path, "hang", timeout_s=8)
    assert time.perf_counter() - start < 8 + 15
    run_dir = tmp_path / "run"
    assert _pids(run_dir), "the workers never started"
    assert not [p for p in _pids(run_dir) if _alive(p)]
    assert not _torchrun_pids(run_dir)


def test_killing_a_worker_mid_run_leaves_no_process(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def kill_rank_one() -> None:
        for _ in range(600):
            pid_file = run_dir / "pid-rank1"
            if pid_file.exists() and (run_dir / "pid-rank0").exists():
                time.sleep(3.0)  # let both ranks reach the all-reduce loop
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_rank_one)
    killer.start()
    with pytest.raises(LaunchError) as info:
        _launch(tmp_path, "hang", timeout_s=90)
    killer.join()
    assert info.value.rank == 1
    assert "SIGKILL" in str(info.value)
    assert not [p for p in _pids(run_dir) if _alive(p)]
    assert not recorded_worker_pids(run_dir)
    assert not _torchrun_pids(run_dir)
