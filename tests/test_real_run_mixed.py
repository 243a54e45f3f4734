"""The 4-process CI run: pp=2 x dp=2 (DDP) of the tiny model, 3 steps; loss and timeline as in test_real_run."""

from __future__ import annotations

import pytest
from workbench_backends.real_run import RunResult

from tests.test_real_run import _check_loss, _check_timeline, tiny_run
from workbench.specs.hardware import DType
from workbench.specs.plan import ParallelPlan, Workload


@pytest.fixture(scope="module")
def pp2_dp2_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, ParallelPlan, Workload]:
    workload = Workload(seq_len=32, global_batch_size=8, dtype=DType.FP32)
    plan = ParallelPlan(pp=2, dp=2, schedule="1f1b", micro_batch_size=1)
    run = tiny_run(plan, workload, tmp_path_factory.mktemp("pp2dp2"))
    return run, plan, workload


def test_pp2_dp2_loss_matches_single_process(pp2_dp2_run: tuple[RunResult, ParallelPlan, Workload]) -> None:
    run, _, workload = pp2_dp2_run
    _check_loss(run, workload)
    assert run.wall_s < 60


def test_pp2_dp2_timeline_and_mesh(pp2_dp2_run: tuple[RunResult, ParallelPlan, Workload]) -> None:
    run, plan, _ = pp2_dp2_run
    _check_timeline(run, plan, m=4)
    # default rank order: tp innermost, then dp, then pp outermost -> rank = pp * 2 + dp
    for r in run.ranks:
        assert r["rank"] == r["coords"]["pp"] * 2 + r["coords"]["dp"]


@pytest.mark.slow
def test_pp2_tp2_with_interleaved_schedule_matches_single_process(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    workload = Workload(seq_len=32, global_batch_size=4, dtype=DType.FP32)
    plan = ParallelPlan(pp=2, tp=2, vpp=2, schedule="interleaved-1f1b", micro_batch_size=1)
    run = tiny_run(plan, workload, tmp_path_factory.mktemp("pp2tp2"))
    _check_loss(run, workload)
    assert run.timeline_problems() == []
