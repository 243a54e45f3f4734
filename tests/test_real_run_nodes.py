"""The real-run backend across "nodes": two torchrun agents on this machine meeting at a c10d rendezvous on
127.0.0.1 (``workbench run --nnodes 2``), the launch path of a multi-node job. The losses equal the
single-process run's, each agent runs its half of the ranks, and killing either agent leaves no process behind
(the helpers and the kill protocol of tests/test_run_safety.py)."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import pytest
from workbench_backends.real_run import real_run

from tests.test_real_run import STEPS, TINY, _reference
from tests.test_run_safety import (
    SURVIVAL_S,
    _one_line_error,
    _run_dirs,
    assert_nothing_left,
    processes_of,
    start_run,
    wait_for,
)
from workbench.specs.hardware import DType
from workbench.specs.plan import ParallelPlan, Workload


def test_two_agents_train_like_one_process(tmp_path: Path) -> None:
    workload = Workload(seq_len=32, global_batch_size=8, dtype=DType.FP32)
    plan = ParallelPlan(pp=2, schedule="1f1b", micro_batch_size=1)
    run = real_run(
        TINY, workload, plan, steps=STEPS, check_loss=False, timeout_s=120, run_dir=tmp_path / "run", nnodes=2
    )
    reference = _reference(workload)
    assert len(run.losses()) == STEPS
    for got, ref in zip(run.losses(), reference, strict=True):
        assert abs(got - ref) <= 1e-4 * abs(ref), (run.losses(), reference)
    assert sorted((r["rank"], r["node_rank"]) for r in run.ranks) == [(0, 0), (1, 1)]  # one rank per agent
    assert (tmp_path / "run" / "torchrun.log").is_file() and (
        tmp_path / "run" / "torchrun-node1.log"
    ).is_file()
    assert not processes_of(tmp_path / "run")


def test_nnodes_must_divide_the_workers() -> None:
    workload = Workload(seq_len=32, global_batch_size=8, dtype=DType.FP32)
    with pytest.raises(ValueError, match="nnodes must divide the plan's 2 workers, got 3"):
        real_run(TINY, workload, ParallelPlan(pp=2, schedule="1f1b"), nnodes=3)


@pytest.mark.parametrize("agent", [0, 1])
def test_killing_either_agent_ends_the_run_and_every_process(tmp_path: Path, agent: int) -> None:
    proc, tmpdir = start_run(tmp_path, "--nnodes", "2")
    wait_for("mid-run", proc, tmpdir)
    agents = sorted(p for p, cmd in processes_of(tmpdir).items() if "torch.distributed.run" in cmd)
    assert len(agents) == 2, agents
    killed = time.monotonic()
    os.kill(agents[agent], signal.SIGKILL)
    _, err = proc.communicate(timeout=SURVIVAL_S + 30)
    assert proc.returncode == 1
    assert "real run failed:" in _one_line_error(err)
    assert_nothing_left(tmpdir, killed)
    assert _run_dirs(tmpdir) == []
    assert tempfile.gettempdir() != str(tmpdir)
