"""``workbench run`` killed at every stage leaves no process and no temporary folder behind.

Each test starts the real console module (``python -m workbench_cli run``, the tiny pp=2 model) with a
``TMPDIR`` of its own: every process of the run inherits it in its environment, and the run folder
(``wb-run-*``) is made in it, so a scan of ``/proc/*/environ`` and ``/proc/*/cmdline`` for that path finds
every process of this run and nothing else. The run is killed when a stage is reached (polled, not slept):

- ``folder``: the temporary run folder exists (torchrun is about to start or starting);
- ``workers``: torchrun has child processes (workers still starting Python or importing torch: the window in
  which a worker without an early death signal is orphaned);
- ``mid-run``: a rank logged its second finished step (workers in gloo collectives).

Then, within ``SURVIVAL_S``, no process of the run may be left, and no ``wb-run-*`` folder: the CLI removes
it itself after SIGTERM or a killed torchrun; after SIGKILL of the CLI the next run's sweep removes it.
Six runs (about 30 s on 2 idle cores): SIGTERM to the CLI at ``folder`` and ``workers``; SIGKILL to the CLI
and SIGKILL to torchrun, each at ``workers`` and ``mid-run``. ``tests/test_launch.py`` kills the launcher the same way
with a stand-in worker, and checks the worker's start-up guard on its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from workbench_backends.real_run import OWNER_FILE, sweep_stale_run_dirs

from tests.conftest import ROOT
from tests.test_cli_run import TINY_HF

SURVIVAL_S = 10.0
"""No process of a killed run may be alive this long after the kill."""
STAGE_TIMEOUT_S = 120.0
"""Generous: the stage is reached in 5-20 s on 2 idle cores, later when other tests share them."""


def _proc_text(pid: int, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _state_and_parent(pid: int) -> tuple[str, int]:
    fields = _proc_text(pid, "stat").rsplit(")", 1)[-1].split()
    return (fields[0], int(fields[1])) if len(fields) > 1 else ("X", 0)


def processes_of(tmpdir: Path) -> dict[int, str]:
    """Live processes (zombies excluded) whose environment or command line names ``tmpdir``: pid -> cmdline."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        environ, cmdline = _proc_text(pid, "environ"), _proc_text(pid, "cmdline")
        if str(tmpdir) in environ or str(tmpdir) in cmdline:
            state, _ = _state_and_parent(pid)
            if state not in ("Z", "X"):
                found[pid] = cmdline
    return found


def _torchrun(tmpdir: Path) -> int | None:
    return next((p for p, cmd in processes_of(tmpdir).items() if "torch.distributed.run" in cmd), None)


def _workers(tmpdir: Path) -> list[int]:
    procs = processes_of(tmpdir)
    agents = {p for p, cmd in procs.items() if "torch.distributed.run" in cmd}
    return [p for p in procs if _state_and_parent(p)[1] in agents]


def _run_dirs(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob("wb-run-*"))


def _logged(tmpdir: Path, text: str) -> bool:
    for log in tmpdir.glob("wb-run-*/logs/**/stdout.log"):
        try:
            if text in log.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


STAGES: dict[str, Callable[[Path], object]] = {
    "folder": lambda tmpdir: _run_dirs(tmpdir),
    "workers": _workers,
    "mid-run": lambda tmpdir: _logged(tmpdir, "step 1 done"),
}


def start_run(tmp_path: Path, *extra: str, steps: int = 200) -> tuple[subprocess.Popen[str], Path]:
    """``python -m workbench_cli run`` of the tiny model (pp=2, ``steps`` steps, no reference run) with a
    TMPDIR of its own (``tmp_path/tmp``, returned) and ``tmp_path`` as working folder."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_HF))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir)}
    env.pop("WORKBENCH_DEBUG", None)
    args = ["--model", str(config), "--layers", "2", "--hidden", "64", "--seq-len", "16"]
    args += ["--global-batch", "4", "--pp", "2", "--steps", str(steps), "--no-check-loss", *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench_cli", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    return proc, tmpdir


def wait_for(stage: str, proc: subprocess.Popen[str], tmpdir: Path) -> object:
    """Poll until ``stage`` is reached; fail if the run ends first or it takes ``STAGE_TIMEOUT_S``."""
    deadline = time.monotonic() + STAGE_TIMEOUT_S
    while time.monotonic() < deadline:
        got = STAGES[stage](tmpdir)
        if got:
            return got
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended (code {proc.returncode}) before stage {stage}: {err[-2000:]}")
        time.sleep(0.01)
    proc.kill()
    pytest.fail(f"stage {stage} not reached within {STAGE_TIMEOUT_S:.0f} s")


def assert_nothing_left(tmpdir: Path, since: float) -> None:
    """No process of the run is alive by ``since + SURVIVAL_S`` (polled)."""
    while True:
        left = processes_of(tmpdir)
        if not left:
            return
        if time.monotonic() > since + SURVIVAL_S:
            for pid in left:  # do not leave them to the next test
                os.kill(pid, signal.SIGKILL)
            pytest.fail(f"{len(left)} processes of the run alive {SURVIVAL_S:.0f} s after the kill: {left}")
        time.sleep(0.05)


def _one_line_error(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("stage", ["folder", "workers"])
def test_sigterm_to_the_cli_ends_every_process_and_removes_the_folder(tmp_path: Path, stage: str) -> None:
    proc, tmpdir = start_run(tmp_path)
    wait_for(stage, proc, tmpdir)
    killed = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=SURVIVAL_S + 20)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in _one_line_error(err)
    assert_nothing_left(tmpdir, killed)
    assert _run_dirs(tmpdir) == []


@pytest.mark.parametrize("stage", ["workers", "mid-run"])
def test_sigkill_to_the_cli_leaves_no_process(tmp_path: Path, stage: str) -> None:
    # Workers still starting (Python, torch import) or training: they must die with torchrun, which dies
    # with the CLI. The killed CLI cannot remove its folder; the next run's sweep does (owner gone).
    proc, tmpdir = start_run(tmp_path)
    wait_for(stage, proc, tmpdir)
    killed = time.monotonic()
    proc.kill()
    proc.communicate(timeout=SURVIVAL_S)
    assert_nothing_left(tmpdir, killed)
    (left,) = _run_dirs(tmpdir)
    assert (left / OWNER_FILE).read_text().split()[0] == str(proc.pid)
    assert sweep_stale_run_dirs(tmpdir) == [left]
    assert _run_dirs(tmpdir) == []


@pytest.mark.parametrize("stage", ["workers", "mid-run"])
def test_sigkill_to_torchrun_fails_the_run_cleanly(tmp_path: Path, stage: str) -> None:
    proc, tmpdir = start_run(tmp_path)
    wait_for(stage, proc, tmpdir)
    agent = _torchrun(tmpdir)
    assert agent is not None
    killed = time.monotonic()
    os.kill(agent, signal.SIGKILL)
    _, err = proc.communicate(timeout=SURVIVAL_S + 20)
    assert proc.returncode == 1
    line = _one_line_error(err)
    assert "real run failed:" in line and "--run-dir" in line and str(tmpdir) not in line
    assert_nothing_left(tmpdir, killed)
    assert _run_dirs(tmpdir) == []
