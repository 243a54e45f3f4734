"""Start a worker module under ``torchrun`` (``python -m torch.distributed.run``), wait with a timeout, and
make sure no process of the job outlives it, however the job or its caller ends.

One machine (what ``workbench run`` does): ``--nnodes 1 --nproc-per-node N --rdzv-backend c10d
--rdzv-endpoint 127.0.0.1:<free port>``, one rendezvous per run, ``--max-restarts 0``. ``N`` is capped by
this machine (``worker_limit``): at most ``WORKERS_PER_CORE`` processes per usable CPU core and no more than
``MemAvailable`` holds at ``WORKER_BYTES`` (plus the model's states) each; ``check_worker_count`` refuses a
larger job with one line before anything starts.

Several machines (a real cluster; written, not tested here): start the same command on every node with the
same ``--rdzv-id`` and an endpoint every node can reach, e.g. on each of 4 nodes with 8 GPUs::

    python -m torch.distributed.run --nnodes 4 --nproc-per-node 8 \\
        --rdzv-backend c10d --rdzv-endpoint node0.example:29500 --rdzv-id wb-run-42 \\
        -m workbench_backends.launch --pid-dir /shared/runs/wb-run-42 \\
        workbench_backends.run_worker --run-dir /shared/runs/wb-run-42

``--rdzv-endpoint`` is host:port of the c10d store (the first node that reaches it hosts it); ``--rdzv-id``
names the job so two jobs on one endpoint do not mix; ``--nnodes MIN:MAX`` allows elastic sizes (our
worker needs a fixed size). Static alternative: ``--node-rank k --master-addr node0 --master-port 29500``.
``run_dir`` must be on a file system all nodes share (each rank writes ``rank<k>.json`` there); set
``NCCL_SOCKET_IFNAME``/``GLOO_SOCKET_IFNAME`` to the interface the nodes talk over. ``LaunchConfig`` builds
these arguments; ``torchrun_command`` prints them for one node.

Failure handling: the worker writes ``error-rank<k>.txt`` (its traceback) before it exits; torchrun names
the first rank that failed ("Root Cause"); ``LaunchError`` carries that rank and its traceback.

No orphans. The process tree is caller -> torchrun (own session) -> one worker per rank (torchrun gives each
a session of its own, so signalling torchrun's group does not reach them). Every link dies with its parent:

- torchrun gets ``PR_SET_PDEATHSIG = SIGKILL`` between fork and exec, then checks that its parent is still
  the caller (if the caller died before the ``prctl``, the kernel would never send the signal);
- each worker starts as ``python -m workbench_backends.launch --pid-dir D MODULE ARGS`` (``worker_guard``):
  before the worker module imports anything heavy (``import torch`` takes seconds) it sets the same death
  signal, checks that its parent is still the torchrun that the caller started (``ENV_LAUNCHER_PID``: the
  parent's parent is the caller), writes ``D/pid-rank<k>`` and only then runs ``MODULE`` as ``__main__``;
- every process of the job inherits ``ENV_RUN_MARKER=<run_dir>`` in its environment: ``end_job`` ends
  torchrun's group (SIGTERM, ``KILL_GRACE_S``, SIGKILL), then SIGKILLs every recorded worker pid and every
  process of this user whose environment carries the marker, and waits until none is left.

So a job ends with its caller whether the caller returns, raises (timeout, failure, KeyboardInterrupt, a
SIGTERM turned into an exception by the caller), or is SIGKILLed; ``tests/test_run_safety.py`` kills the CLI
and torchrun at every stage and finds no process left within seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

KILL_GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL when a job is ended."""
STOP_POLL_S = 0.1
"""How often ``run_torchrun`` checks for a ``request_stop`` while it waits for the job."""
END_WAIT_S = 10.0
"""Seconds ``end_job`` keeps SIGKILLing the job's processes until none is left (they die in milliseconds)."""

WORKERS_PER_CORE = 2
"""Worker processes allowed per usable CPU core. Each worker runs one compute thread; two per core keep the
CI runs (pp=2 and pp=2 x dp=2 on 2 cores) possible while a typo such as ``--pp 1000`` is refused. Beyond one
per core the measured times are those of a shared core (``workbench run`` compares schedules best at one)."""
WORKER_BYTES = 400 * 2**20
"""Memory one CPU worker needs before its model states (measured here, torch 2.13.0 CPU, gloo, the tiny
test model, pp=2 and pp=2 x dp=2: resident set 316-325 MiB per worker, of which 220-250 MiB private, the rest
shared libraries; 400 MiB leaves room for the activations of a small shrunk model)."""

ENV_RUN_MARKER = "WORKBENCH_RUN_MARKER"
"""Environment variable every process of a job inherits (value: the run folder); ``end_job`` and the stale
run-folder sweep find stragglers by it."""
ENV_LAUNCHER_PID = "WORKBENCH_LAUNCHER_PID"
"""The pid of the process that started torchrun; a worker checks that its parent's parent is still it."""

EXIT_PARENT_GONE = 75
"""Exit status of a worker that found its torchrun (or the launcher) already gone at start."""

_PR_SET_PDEATHSIG = 1
_GUARD_MODULE = "workbench_backends.launch"
"""This module: ``python -m workbench_backends.launch --pid-dir D MODULE ARGS`` runs MODULE behind ``worker_guard``."""


class LaunchError(RuntimeError):
    """A distributed run failed or timed out. ``rank`` is the first failing global rank (None if unknown);
    ``summary`` is the first line of the message without file paths (for callers that delete the run folder);
    ``traceback_text`` the failing rank's Python traceback ("" if it left none)."""

    def __init__(
        self, message: str, *, rank: int | None = None, traceback_text: str = "", summary: str | None = None
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback_text = traceback_text
        self.summary = summary if summary is not None else message.splitlines()[0] if message else ""


class Stopped(KeyboardInterrupt):
    """The job was asked to stop (``request_stop``: a SIGTERM or SIGHUP the caller's handler caught).

    A KeyboardInterrupt, so no ``except Exception`` swallows it and every ``finally`` on the way out runs."""

    def __init__(self, signum: int | None = None) -> None:
        name = signal.Signals(signum).name if signum is not None else "a stop request"
        super().__init__(f"stopped by {name}")
        self.signum = signum


_stop_requested = threading.Event()
_stop_signum: list[int | None] = [None]


def request_stop(signum: int | None = None) -> None:
    """Ask a running (or the next) ``run_torchrun`` of this process to end its job and raise ``Stopped``.
    Safe from a signal handler or another thread. A handler should also raise ``Stopped`` itself (the job may
    not have started yet), but Python drops an exception raised while it runs an at-fork or ``__del__``
    callback; this request is not lost that way: ``run_torchrun`` polls it every ``STOP_POLL_S``."""
    _stop_signum[0] = signum
    _stop_requested.set()


def clear_stop() -> None:
    """Forget a stop request (the caller has handled it)."""
    _stop_requested.clear()
    _stop_signum[0] = None


def check_stop() -> None:
    """Raise ``Stopped`` if a stop was requested."""
    if _stop_requested.is_set():
        raise Stopped(_stop_signum[0])


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


# How many workers this machine takes ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerLimit:
    """The most worker processes this machine runs at once, and why."""

    cores: int
    """Usable CPU cores (this process's CPU affinity)."""
    per_core: int
    available_bytes: int | None
    """Memory available now (``MemAvailable``, or less under a cgroup limit); None when unknown."""
    per_worker_bytes: int
    devices: int | None = None
    """CUDA devices, when the workers each need one."""

    @property
    def by_cpu(self) -> int:
        return self.cores * self.per_core

    @property
    def by_memory(self) -> int | None:
        return None if self.available_bytes is None else self.available_bytes // max(1, self.per_worker_bytes)

    @property
    def max_workers(self) -> int:
        limits = [self.by_cpu, self.by_memory, self.devices]
        return min(x for x in limits if x is not None)

    def describe(self) -> str:
        parts = [f"{self.cores} usable CPU cores x {self.per_core} = {self.by_cpu}"]
        if self.by_memory is not None and self.available_bytes is not None:
            parts.append(
                f"{self.available_bytes / 2**30:.1f} GiB memory available / "
                f"{self.per_worker_bytes / 2**30:.2f} GiB per worker = {self.by_memory}"
            )
        if self.devices is not None:
            parts.append(f"{self.devices} CUDA devices")
        return "; ".join(parts)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo``, lowered to what the memory cgroup at ``/sys/fs/cgroup``
    still allows (v2 ``memory.max``, v1 ``memory.limit_in_bytes``; reclaimable file cache counted free);
    None where neither is known."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    for limit, usage, stat, key in (
        ("memory.max", "memory.current", "memory.stat", "inactive_file"),
        (
            "memory/memory.limit_in_bytes",
            "memory/memory.usage_in_bytes",
            "memory/memory.stat",
            "total_inactive_file",
        ),
    ):
        with contextlib.suppress(OSError, ValueError):
            cg = Path("/sys/fs/cgroup")
            cap = int((cg / limit).read_text().strip())  # "max" (no limit) raises ValueError
            used = int((cg / usage).read_text().strip())
            cache = dict(line.split() for line in (cg / stat).read_text().splitlines() if " " in line)
            if cap < 2**60:
                found.append(max(0, cap - used + int(cache.get(key, 0))))
    return min(found) if found else None


def worker_limit(*, per_worker_bytes: int = WORKER_BYTES, devices: int | None = None) -> WorkerLimit:
    """This machine's cap on worker processes (see ``WorkerLimit``, ``WORKERS_PER_CORE``, ``WORKER_BYTES``)."""
    return WorkerLimit(
        cores=usable_cores(),
        per_core=WORKERS_PER_CORE,
        available_bytes=available_memory_bytes(),
        per_worker_bytes=per_worker_bytes,
        devices=devices,
    )


def check_worker_count(
    n: int, *, asked: str, per_worker_bytes: int = WORKER_BYTES, devices: int | None = None
) -> WorkerLimit:
    """Raise ValueError (one line: ``asked``, ``n`` and what this machine allows) when ``n`` workers exceed
    ``worker_limit``; return the limit otherwise. ``asked`` names what the user gave, e.g. ``--pp 1000``."""
    limit = worker_limit(per_worker_bytes=per_worker_bytes, devices=devices)
    if n > limit.max_workers:
        raise ValueError(
            f"{asked} needs {n} worker processes but this machine allows at most {limit.max_workers} "
            f"({limit.describe()})"
        )
    return limit


# Starting and ending the job ------------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def torchrun_command(
    config: LaunchConfig,
    module: str,
    args: Sequence[str],
    *,
    log_dir: Path,
    pid_dir: Path | None = None,
) -> list[str]:
    """The ``python -m torch.distributed.run`` command line that runs ``python -m module args`` per rank.

    With ``pid_dir`` each rank starts through ``worker_guard`` (``-m workbench_backends.launch --pid-dir D
    module args``): death signal, parent check and ``D/pid-rank<k>`` before ``module`` imports anything."""
    endpoint = config.rdzv_endpoint or f"127.0.0.1:{free_port()}"
    target = [module, *args] if pid_dir is None else [_GUARD_MODULE, "--pid-dir", str(pid_dir), module, *args]
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
        *target,
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

    ``run_dir`` must exist; torchrun's own output goes to ``run_dir/torchrun.log``, each rank's stdout and
    stderr under ``run_dir/logs``, its pid to ``run_dir/pid-rank<k>``. Raises ``LaunchError`` (rank and
    traceback of the first failure, or the timeout) after every process of the job has ended; any other
    exception on the way (KeyboardInterrupt, ``Stopped`` after ``request_stop``) ends the job too.
    """
    check_stop()
    run_dir = Path(run_dir).resolve()
    log_dir = run_dir / "logs"
    cmd = torchrun_command(config, module, args, log_dir=log_dir, pid_dir=run_dir)
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    full_env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": path,
        **(env or {}),
        ENV_RUN_MARKER: str(run_dir),
        ENV_LAUNCHER_PID: str(os.getpid()),
    }
    start = time.perf_counter()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for node in range(agents_here(config)):
            name = "torchrun.log" if node == 0 else f"torchrun-node{node}.log"
            with (run_dir / name).open("w") as log:
                procs.append(
                    subprocess.Popen(
                        cmd,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=full_env,
                        start_new_session=True,
                        preexec_fn=_die_with_parent(os.getpid()),
                    )
                )
        code = _wait_all(procs, config.timeout_s)
    except subprocess.TimeoutExpired:
        _end_all(procs, run_dir)
        msg = f"the run did not finish within {config.timeout_s:.0f} s and was stopped"
        raise LaunchError(f"{msg} (logs: {run_dir})", summary=msg) from None
    except BaseException:
        _end_all(procs, run_dir)
        raise
    _end_all(procs, run_dir)
    if code != 0:
        raise failure_error(run_dir, code)
    return time.perf_counter() - start


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Rendezvous hosts that mean "this machine": with one of them and ``nnodes > 1`` every node's agent starts here."""


def agents_here(config: LaunchConfig) -> int:
    """torchrun agents ``run_torchrun`` starts on this machine: all ``nnodes`` when the rendezvous endpoint is a
    loopback address (several "nodes" on one machine, each agent with ``nproc_per_node`` workers; the c10d store
    is hosted by the first agent that binds the port, the others connect to it), else one (this node's)."""
    host = (config.rdzv_endpoint or "127.0.0.1").rsplit(":", 1)[0].strip("[]")
    return config.nnodes if host in LOOPBACK_HOSTS else 1


def _wait_all(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> int:
    """Wait until every agent exited (0) or one failed (its code: the others are ended by the caller)."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = next((c for c in codes if c not in (None, 0)), None)
        if failed is not None:
            return failed
        if all(c == 0 for c in codes):
            return 0
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise subprocess.TimeoutExpired(procs[0].args, timeout_s)
        running = next(p for p, c in zip(procs, codes, strict=True) if c is None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            _wait(running, min(STOP_POLL_S, remaining))


def _end_all(procs: list[subprocess.Popen[bytes]], run_dir: Path) -> None:
    for proc in procs:
        end_job(proc, run_dir)
    if not procs:
        kill_job_processes(run_dir)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    """``proc.wait(timeout_s)`` that raises ``Stopped`` within ``STOP_POLL_S`` of a ``request_stop``."""
    deadline = time.monotonic() + timeout_s
    while True:
        check_stop()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=min(STOP_POLL_S, remaining))


def _prctl() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    fn: Callable[[int, int], int] = ctypes.CDLL(None, use_errno=True).prctl
    return fn


def _die_with_parent(parent: int) -> Callable[[], None]:
    """For ``preexec_fn`` (in the child, before exec): SIGKILL the child when ``parent`` dies, and exit at once
    if it died before the ``prctl`` (then the kernel would never send the signal). Linux only."""
    prctl = _prctl()  # loaded here, in the parent: the child only calls it

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(EXIT_PARENT_GONE)

    return preexec


def end_job(proc: subprocess.Popen[bytes] | None, run_dir: Path) -> None:
    """SIGTERM torchrun's process group (torchrun then stops its workers), wait, SIGKILL what is left of it;
    then ``kill_job_processes``: no process of the job is left when this returns."""
    if proc is not None:
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_GRACE_S)
        _signal_group(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()
    kill_job_processes(run_dir)


def kill_job_processes(run_dir: Path, *, timeout_s: float = END_WAIT_S) -> list[int]:
    """SIGKILL every worker pid recorded in ``run_dir`` and every process of this user whose environment
    carries ``ENV_RUN_MARKER=<run_dir>``, until none is left or ``timeout_s`` passed; return the pids found."""
    run_dir = Path(run_dir).resolve()
    deadline = time.monotonic() + timeout_s
    seen: set[int] = set()
    while True:
        pids = set(recorded_worker_pids(run_dir)) | set(marked_processes(str(run_dir)))
        if not pids or time.monotonic() > deadline:
            return sorted(seen | pids)
        seen |= pids
        for pid in pids:
            _signal_group(pid, signal.SIGKILL)
            _signal_pid(pid, signal.SIGKILL)
        time.sleep(0.02)


def recorded_worker_pids(run_dir: Path) -> list[int]:
    """Worker pids written to ``run_dir/pid-rank*`` that are still alive and still run our worker."""
    alive = []
    for path in sorted(Path(run_dir).glob("pid-rank*")):
        try:
            pid = int(path.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if str(run_dir) in cmdline:
            alive.append(pid)
    return alive


def marked_processes(marker: str) -> list[int]:
    """Live (not zombie) processes of this user, other than this one, whose environment holds
    ``ENV_RUN_MARKER=marker``."""
    needle = f"{ENV_RUN_MARKER}={marker}".encode()
    me, uid = os.getpid(), os.getuid()
    found = []
    with contextlib.suppress(OSError):
        entries = list(os.scandir("/proc"))
        for entry in entries:
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                environ = Path(entry.path, "environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0") and _state(int(entry.name)) not in ("Z", "X", ""):
                found.append(int(entry.name))
    return found


def process_start(pid: int) -> str | None:
    """The start time of a live (not zombie) process (clock ticks after boot, ``/proc/<pid>/stat`` field 22),
    None if there is none: with the pid it names one process, even after the pid is reused."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


# The worker side ------------------------------------------------------------------------------------------


def parent_problem() -> str | None:
    """Why this worker must not run (its torchrun or the launcher is gone), or None. The parent must be a
    torchrun process, and with ``ENV_LAUNCHER_PID`` set, that torchrun's parent must be the launcher: a
    process whose parent died is re-parented to pid 1 or a subreaper, which is neither."""
    if not sys.platform.startswith("linux"):
        return None
    ppid = os.getppid()
    if ppid <= 1:
        return "its parent is gone (re-parented to pid 1)"
    cmd = _cmdline(ppid)
    if "torch.distributed.run" not in cmd and "torchrun" not in cmd:
        return f"its parent (pid {ppid}) is not torchrun: the torchrun that started it is gone"
    launcher = os.environ.get(ENV_LAUNCHER_PID, "")
    if launcher.isdigit() and _parent_of(ppid) != int(launcher):
        return f"the launcher (pid {launcher}) that started its torchrun is gone"
    return None


def worker_guard(pid_dir: Path | None = None) -> None:
    """First thing in a worker: SIGKILL this process when its parent (torchrun) dies, exit now (status
    ``EXIT_PARENT_GONE``) if the parent or the launcher is already gone, and record the pid in
    ``pid_dir/pid-rank<RANK>``. Cheap (no torch import); safe to call twice."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    problem = parent_problem()
    if problem is not None:
        sys.stderr.write(f"workbench worker (pid {os.getpid()}): {problem}; exiting\n")
        sys.stderr.flush()
        os._exit(EXIT_PARENT_GONE)
    if pid_dir is not None:
        rank = os.environ.get("RANK", "0")
        tmp = Path(pid_dir) / f".pid-rank{rank}.{os.getpid()}"
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, Path(pid_dir) / f"pid-rank{rank}")


def _worker_main(argv: list[str]) -> None:
    """``python -m workbench_backends.launch [--pid-dir D] MODULE [ARGS...]``: ``worker_guard`` then run
    ``MODULE`` as ``__main__`` with ``ARGS``."""
    pid_dir = None
    if argv[:1] == ["--pid-dir"] and len(argv) >= 2:
        pid_dir, argv = Path(argv[1]), argv[2:]
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: python -m workbench_backends.launch [--pid-dir D] MODULE [ARGS...]")
    worker_guard(pid_dir)
    module, *args = argv
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


# Failures --------------------------------------------------------------------------------------------------

_ROOT_CAUSE_RE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def failure_error(run_dir: Path, exit_code: int) -> LaunchError:
    """The clearest error for a failed run: torchrun's first failing rank with its worker traceback; else
    the earliest traceback any worker wrote; else the tail of torchrun's log. ``summary`` is the message's
    first line without the paths into ``run_dir``."""
    log_text = _read(run_dir / "torchrun.log")
    match = _ROOT_CAUSE_RE.search(log_text)
    rank = int(match.group(1)) if match else None
    if rank is None:
        rank = _earliest_error_rank(run_dir)
    if rank is not None:
        tb = _read(run_dir / f"error-rank{rank}.txt").strip()
        if tb:
            summary = f"rank {rank} failed: {tb.splitlines()[-1]}"
            where = run_dir / f"error-rank{rank}.txt"
            return LaunchError(
                f"{summary} (traceback: {where})\n{tb}", rank=rank, traceback_text=tb, summary=summary
            )
        code = match.group(2) if match else str(exit_code)
        summary = f"rank {rank} failed: exit code {code}{_signal_name(int(code))} with no Python traceback"
        return LaunchError(f"{summary} (logs: {run_dir / 'logs'})", rank=rank, summary=summary)
    tail = "\n".join(log_text.strip().splitlines()[-15:])
    summary = (
        f"torchrun exited with code {exit_code}{_signal_name(exit_code)} before any rank reported an error"
    )
    return LaunchError(f"{summary}:\n{tail}", summary=summary)


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


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
