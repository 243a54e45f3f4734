"""Start a worker module under ``torchrun`` (``python -m torch.distributed.run``), wait with a timeout, and
make sure no process of the job outlives it.

One machine (what ``workbench run`` does): ``--nnodes 1 --nproc-per-node N --rdzv-backend c10d
--rdzv-endpoint 127.0.0.1:<free port>``, one rendezvous per run, ``--max-restarts 0``.

Several machines (a real cluster; written, not tested here): start the same command on every node with the
same ``--rdzv-id`` and an endpoint every node can reach, e.g. on each of 4 nodes with 8 GPUs::

    python -m torch.distributed.run --nnodes 4 --nproc-per-node 8 \\
        --rdzv-backend c10d --rdzv-endpoint node0.example:29500 --rdzv-id wb-run-42 \\
        -m workbench_backends.run_worker --run-dir /shared/runs/wb-run-42

``--rdzv-endpoint`` is host:port of the c10d store (the first node that reaches it hosts it); ``--rdzv-id``
names the job so two jobs on one endpoint do not mix; ``--nnodes MIN:MAX`` allows elastic sizes (our
worker needs a fixed size). Static alternative: ``--node-rank k --master-addr node0 --master-port 29500``.
``run_dir`` must be on a file system all nodes share (each rank writes ``rank<k>.json`` there); set
``NCCL_SOCKET_IFNAME``/``GLOO_SOCKET_IFNAME`` to the interface the nodes talk over. ``LaunchConfig`` builds
these arguments; ``torchrun_command`` prints them for one node.

Failure handling: the worker writes ``error-rank<k>.txt`` (its traceback) before it exits; torchrun names
the first rank that failed ("Root Cause"); ``LaunchError`` carries that rank and its traceback. The whole
tree is ended on failure and on timeout: torchrun runs in its own session and is signalled as a group
(``os.killpg``); its workers each run in a session of their own (torchrun starts them so), so every worker
pid the run recorded (``pid-rank<k>``) is signalled too.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

KILL_GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL when a job is ended."""


class LaunchError(RuntimeError):
    """A distributed run failed or timed out. ``rank`` is the first failing global rank (None if unknown)."""

    def __init__(self, message: str, *, rank: int | None = None, traceback_text: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback_text = traceback_text


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchConfig:
    """How torchrun places the job. Defaults: this machine only, rendezvous on 127.0.0.1 at a free port."""

    nproc_per_node: int
    """Worker processes on this node (one per GPU, or CPU processes)."""
    nnodes: int = 1
    """Nodes taking part; every node runs the same command."""
    rdzv_endpoint: str | None = None
    """host:port of the c10d rendezvous store; None: 127.0.0.1 and a free port picked here."""
    rdzv_id: str = "workbench"
    """Job id shared by all nodes of one run."""
    timeout_s: float = 300.0
    """Wall-clock limit of the whole job, seconds."""

    def __post_init__(self) -> None:
        for name in ("nproc_per_node", "nnodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"LaunchConfig: {name} must be an integer >= 1, got {value!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"LaunchConfig: timeout_s must be > 0, got {self.timeout_s!r}")
        if self.nnodes > 1 and self.rdzv_endpoint is None:
            raise ValueError(
                "LaunchConfig: rdzv_endpoint (host:port reachable from every node) is required "
                f"when nnodes > 1, got nnodes={self.nnodes} and no endpoint"
            )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def torchrun_command(config: LaunchConfig, module: str, args: Sequence[str], *, log_dir: Path) -> list[str]:
    """The ``python -m torch.distributed.run`` command line that runs ``python -m module args`` per rank."""
    endpoint = config.rdzv_endpoint or f"127.0.0.1:{free_port()}"
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={config.nnodes}",
        f"--nproc-per-node={config.nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={config.rdzv_id}",
        "--max-restarts=0",
        "--monitor-interval=0.1",
        f"--log-dir={log_dir}",
        "--redirects=3",
        "-m",
        module,
        *args,
    ]


def run_torchrun(
    config: LaunchConfig,
    module: str,
    args: Sequence[str],
    *,
    run_dir: Path,
    env: dict[str, str] | None = None,
) -> float:
    """Run the job to completion; return its wall time in seconds.

    ``run_dir`` must exist; torchrun's own output goes to ``run_dir/torchrun.log`` and each rank's stdout and
    stderr under ``run_dir/logs``. Raises ``LaunchError`` (rank and traceback of the first failure, or the
    timeout) after every process of the job has ended.
    """
    log_dir = run_dir / "logs"
    cmd = torchrun_command(config, module, args, log_dir=log_dir)
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    full_env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": path,
        **(env or {}),
    }
    start = time.perf_counter()
    with (run_dir / "torchrun.log").open("w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        try:
            code = proc.wait(timeout=config.timeout_s)
        except subprocess.TimeoutExpired:
            end_job(proc, run_dir)
            raise LaunchError(
                f"the run did not finish within {config.timeout_s:.0f} s and was stopped (logs: {run_dir})"
            ) from None
        except BaseException:
            end_job(proc, run_dir)
            raise
    end_job(proc, run_dir)
    if code != 0:
        raise failure_error(run_dir, code)
    return time.perf_counter() - start


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL torchrun if this process dies (its workers follow: they set the
    same for themselves), so even a killed caller leaves nothing behind (Linux only)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def end_job(proc: subprocess.Popen[bytes], run_dir: Path) -> None:
    """SIGTERM torchrun's process group (torchrun then stops its workers), wait, SIGKILL what is left of it
    and of every worker pid recorded in ``run_dir``."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
    _signal_group(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait()
    for pid in recorded_worker_pids(run_dir):
        _signal_group(pid, signal.SIGKILL)
        _signal_pid(pid, signal.SIGKILL)


def recorded_worker_pids(run_dir: Path) -> list[int]:
    """Worker pids written to ``run_dir/pid-rank*`` that are still alive and still run our worker."""
    alive = []
    for path in sorted(run_dir.glob("pid-rank*")):
        try:
            pid = int(path.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if str(run_dir) in cmdline:
            alive.append(pid)
    return alive


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


_ROOT_CAUSE_RE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def failure_error(run_dir: Path, exit_code: int) -> LaunchError:
    """The clearest error for a failed run: torchrun's first failing rank with its worker traceback; else
    the earliest traceback any worker wrote; else the tail of torchrun's log."""
    log_text = _read(run_dir / "torchrun.log")
    match = _ROOT_CAUSE_RE.search(log_text)
    rank = int(match.group(1)) if match else None
    if rank is None:
        rank = _earliest_error_rank(run_dir)
    if rank is not None:
        tb = _read(run_dir / f"error-rank{rank}.txt").strip()
        if tb:
            last = tb.splitlines()[-1]
            where = run_dir / f"error-rank{rank}.txt"
            return LaunchError(
                f"rank {rank} failed: {last} (traceback: {where})\n{tb}", rank=rank, traceback_text=tb
            )
        code = match.group(2) if match else str(exit_code)
        why = _signal_name(int(code))
        return LaunchError(
            f"rank {rank} failed: exit code {code}{why} with no Python traceback (logs: {run_dir / 'logs'})",
            rank=rank,
        )
    tail = "\n".join(log_text.strip().splitlines()[-15:])
    return LaunchError(f"torchrun exited with code {exit_code} before any rank reported an error:\n{tail}")


def _earliest_error_rank(run_dir: Path) -> int | None:
    files = sorted(run_dir.glob("error-rank*.txt"), key=lambda p: p.stat().st_mtime)
    return int(files[0].stem.removeprefix("error-rank")) if files else None


def _signal_name(code: int) -> str:
    if code >= 0:
        return ""
    try:
        return f" (killed by {signal.Signals(-code).name})"
    except ValueError:
        return ""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
