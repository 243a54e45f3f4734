"""The torchrun launcher: a failing rank surfaces its rank and traceback, timeouts and killed workers leave
no process behind, a killed launcher takes its workers with it, the worker count is capped by the machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import workbench_backends.launch as launch
from workbench_backends.launch import (
    ENV_LAUNCHER_PID,
    ENV_RUN_MARKER,
    EXIT_PARENT_GONE,
    LaunchConfig,
    LaunchError,
    check_worker_count,
    free_port,
    kill_job_processes,
    recorded_worker_pids,
    run_torchrun,
    torchrun_command,
)

from tests.test_run_safety import SURVIVAL_S, assert_nothing_left, processes_of

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
    guarded = torchrun_command(
        LaunchConfig(nproc_per_node=2), "mod", ["--run-dir", "x"], log_dir=tmp_path, pid_dir=tmp_path
    )
    assert guarded[-7:] == [
        "-m",
        "workbench_backends.launch",
        "--pid-dir",
        str(tmp_path),
        "mod",
        "--run-dir",
        "x",
    ]


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
    assert err.summary == "rank 1 failed: ZeroDivisionError: rank one divides by zero"
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


# The worker's start-up guard: it runs the module only under a live torchrun started by a live launcher.
PROBE = "import pathlib, sys; pathlib.Path(sys.argv[1], 'ran').write_text('yes')\n"


def _guarded(tmp_path: Path, launcher_pid: int, *, fake_torchrun: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "wb_probe.py").write_text(PROBE)
    guard = [
        sys.executable,
        "-m",
        "workbench_backends.launch",
        "--pid-dir",
        str(tmp_path),
        "wb_probe",
        str(tmp_path),
    ]
    # A parent whose command line names torch.distributed.run, started by this test process.
    parent = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[2:]))"]
    cmd = [*parent, "torch.distributed.run", *guard] if fake_torchrun else guard
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "RANK": "3",
        ENV_LAUNCHER_PID: str(launcher_pid),
    }
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def test_worker_guard_runs_the_module_under_torchrun_of_a_live_launcher(tmp_path: Path) -> None:
    proc = _guarded(tmp_path, os.getpid(), fake_torchrun=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ran").read_text() == "yes"
    assert (tmp_path / "pid-rank3").read_text().strip().isdigit()


@pytest.mark.parametrize(
    ("fake_torchrun", "launcher", "why"),
    [
        (False, "self", "is not torchrun"),
        (True, "other", "the launcher (pid 1) that started its torchrun is gone"),
    ],
)
def test_worker_guard_exits_when_its_torchrun_or_launcher_is_gone(
    tmp_path: Path, fake_torchrun: bool, launcher: str, why: str
) -> None:
    # A worker whose torchrun died before the worker set its death signal has been re-parented (pid 1 or a
    # subreaper): not torchrun, or not a child of the launcher. It must exit before importing anything.
    proc = _guarded(tmp_path, os.getpid() if launcher == "self" else 1, fake_torchrun=fake_torchrun)
    assert proc.returncode == EXIT_PARENT_GONE
    assert why in proc.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "pid-rank3").exists()


DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from workbench_backends.launch import LaunchConfig, run_torchrun
    run_dir = Path(sys.argv[1])
    run_torchrun(LaunchConfig(nproc_per_node=2, timeout_s=120), "wb_fake_worker",
                 ["--run-dir", str(run_dir), "--mode", "hang"], run_dir=run_dir)
""")


def test_sigkill_to_the_launcher_while_workers_start_leaves_no_process(tmp_path: Path) -> None:
    # The race the worker guard closes: the launcher (hence torchrun) dies while the workers are still
    # starting Python or importing torch, before a death signal set after the imports would exist.
    (tmp_path / "wb_fake_worker.py").write_text(WORKER)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "TMPDIR": str(tmp_path)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(run_dir)], env=env)
    deadline = time.monotonic() + 120
    while True:
        procs = processes_of(tmp_path)
        agents = {p for p, cmd in procs.items() if "torch.distributed.run" in cmd}
        workers = [p for p in procs if Path(f"/proc/{p}/stat").exists() and _parent(p) in agents]
        if workers:
            break
        assert driver.poll() is None and time.monotonic() < deadline, "the workers never started"
        time.sleep(0.005)
    killed = time.monotonic()
    driver.kill()
    driver.wait()
    assert_nothing_left(tmp_path, killed)
    assert time.monotonic() - killed < SURVIVAL_S


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def test_kill_job_processes_ends_every_process_marked_with_the_run(tmp_path: Path) -> None:
    # A straggler in a session of its own, not recorded anywhere: found by the marker in its environment.
    env = {**os.environ, ENV_RUN_MARKER: str(tmp_path.resolve())}
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    marked = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        # until the child has exec'd, /proc shows the parent's environment (no marker): wait for it under load
        marker = f"{ENV_RUN_MARKER}={tmp_path.resolve()}".encode()
        deadline = time.monotonic() + 10
        while marker not in Path(f"/proc/{marked.pid}/environ").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert kill_job_processes(tmp_path, timeout_s=5) == [marked.pid]
        assert marked.wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        other.kill()
        marked.kill()
        other.wait()


def test_worker_count_is_capped_by_cores_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    monkeypatch.setattr(launch, "available_memory_bytes", lambda: 10 * launch.WORKER_BYTES)
    assert check_worker_count(4, asked="--pp 2 --dp 2").max_workers == 2 * launch.WORKERS_PER_CORE >= 4
    with pytest.raises(ValueError) as info:
        check_worker_count(1000, asked="--pp 1000")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("--pp 1000 needs 1000 worker processes but this machine allows at most 4 (")
    assert "2 usable CPU cores x 2 = 4" in msg and "per worker = 10" in msg
    monkeypatch.setattr(launch, "available_memory_bytes", lambda: 3 * launch.WORKER_BYTES)
    with pytest.raises(ValueError, match="allows at most 3 .*per worker = 3"):
        check_worker_count(4, asked="--pp 4")
    with pytest.raises(ValueError, match="allows at most 1 .*1 CUDA devices"):
        check_worker_count(2, asked="--pp 2", devices=1)


def test_available_memory_is_read_from_this_machine() -> None:
    available = launch.available_memory_bytes()
    assert available is not None and 0 < available <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 1 <= launch.usable_cores() <= (os.cpu_count() or 1)
