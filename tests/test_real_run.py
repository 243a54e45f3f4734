"""Real torchrun runs of a tiny model: loss equals a single-process reference, the timeline is the schedule's.

The two CI runs: a 2-process pipeline (pp=2, 1f1b, m=8) and a 4-process pp=2 x dp=2 run, 3 steps each.
Also: the temporary run folder is removed however the run ends (unless kept), stale ones are swept, and a
plan needing more workers than the machine takes is refused before anything starts.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import workbench_backends.launch as launch
from workbench_backends.launch import ENV_RUN_MARKER, WORKER_BYTES, LaunchError, process_start
from workbench_backends.real_estimate import pipeline_idle
from workbench_backends.real_run import (
    OWNER_FILE,
    RunResult,
    bubble_fraction,
    local_cluster,
    real_run,
    sweep_stale_run_dirs,
    to_estimate,
    worker_bytes,
)
from workbench_backends.real_schedule import Recorder

from workbench.estimate.metrics import throughput
from workbench.pipeline.schedules import build_schedule
from workbench.specs.estimate import TIMELINE_COLUMNS
from workbench.specs.hardware import DType
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

TINY = ModelSpec(
    name="tiny",
    num_layers=4,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    ffn_hidden_size=128,
    vocab_size=256,
)
STEPS = 3


def _reference(workload: Workload) -> list[float]:
    import torch
    from workbench_backends.real_stages import full_reference_losses

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return full_reference_losses(TINY, workload, {"seed": 0, "lr": 1e-3, "steps": STEPS})
    finally:
        torch.set_num_threads(threads)


def _check_loss(run: RunResult, workload: Workload) -> None:
    ref = _reference(workload)
    got = run.losses()
    assert len(got) == STEPS
    for a, b in zip(got, ref, strict=True):
        assert abs(a - b) <= 1e-4 * abs(b), (got, ref)


def _check_timeline(run: RunResult, plan: ParallelPlan, m: int) -> None:
    ours = build_schedule(plan.schedule, pp=plan.pp, num_microbatches=m).as_text()
    assert len(run.ranks) == plan.num_devices
    for r in run.ranks:
        expected = ours[r["coords"]["pp"]]
        assert r["expected_order"] == expected
        for step in r["steps"]:
            done = [f"{a[0]}{a[1]}{a[2]}" for a in step["actions"] if a[1] in "FBIW"]
            assert done == expected, f"rank {r['rank']} step {step['step']}"
            starts = [a[3] for a in step["actions"]]
            assert starts == sorted(starts) and all(a[4] >= a[3] >= 0 for a in step["actions"])


def tiny_run(plan: ParallelPlan, workload: Workload, run_dir: Path | None) -> RunResult:
    """A real torchrun job of the tiny model for ``STEPS`` steps (loss checked by the tests, not the run)."""
    return real_run(TINY, workload, plan, steps=STEPS, check_loss=False, timeout_s=120, run_dir=run_dir)


@pytest.fixture(scope="module")
def pp2_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, ParallelPlan, Workload]:
    """The pp=2 run, in a temporary run folder made in a temporary directory of its own."""
    workload = Workload(seq_len=32, global_batch_size=8, dtype=DType.FP32)
    plan = ParallelPlan(pp=2, schedule="1f1b", micro_batch_size=1)
    previous, tempfile.tempdir = tempfile.tempdir, str(tmp_path_factory.mktemp("pp2"))
    try:
        run = tiny_run(plan, workload, None)
    finally:
        tempfile.tempdir = previous
    return run, plan, workload


def test_pp2_1f1b_loss_matches_single_process(pp2_run: tuple[RunResult, ParallelPlan, Workload]) -> None:
    run, _, workload = pp2_run
    _check_loss(run, workload)
    assert run.wall_s < 60


def test_pp2_temporary_run_folder_is_removed(pp2_run: tuple[RunResult, ParallelPlan, Workload]) -> None:
    run, _, _ = pp2_run
    assert run.run_dir.name.startswith("wb-run-")
    assert not run.run_dir.exists() and list(run.run_dir.parent.iterdir()) == []


def test_pp2_1f1b_timeline_is_complete_and_ordered(pp2_run: tuple[RunResult, ParallelPlan, Workload]) -> None:
    run, plan, _ = pp2_run
    _check_timeline(run, plan, m=8)
    assert run.timeline_problems() == []


def test_pp2_measured_estimate(pp2_run: tuple[RunResult, ParallelPlan, Workload]) -> None:
    run, plan, workload = pp2_run
    est = to_estimate(run, TINY, local_cluster(plan.num_devices), workload, plan)
    assert est.measured and est.backend == "real-run"
    assert tuple(est.timeline.columns) == TIMELINE_COLUMNS
    assert sorted(set(est.timeline["rank"].to_list())) == [0, 1]
    times = run.step_times_s()  # the median step's own time (the lower middle one of an even count)
    assert est.step_time_s == times[run.median_step() - run.warmup_steps]
    assert min(times) <= est.step_time_s <= statistics.median(times)
    assert est.tokens_per_s == pytest.approx(workload.tokens_per_step / est.step_time_s)
    assert 0.0 <= est.bubble_fraction < 1.0
    # One definition of each figure (workbench.estimate.metrics): the bubble is the critical rank's idle time
    # over the step, and the breakdown's parts add up to the step time.
    assert est.bubble_fraction == pytest.approx(est.breakdown.bubble_s / est.step_time_s)
    assert est.breakdown.total_s == pytest.approx(est.step_time_s)
    figures = throughput(
        TINY,
        workload,
        step_time_s=est.step_time_s,
        num_devices=plan.num_devices,
        peak_flop_per_s=est.cluster.device.peak(workload.dtype),
        recompute_code=0,
    )
    assert (est.mfu, est.hfu) == pytest.approx((figures["mfu"], figures["hfu"]))
    assert est.memory.height == 2 and (est.memory["parameters_bytes"] > 0).all()
    # Memory columns mean what they mean for every backend: the measured peak beyond the counted model
    # states is not split into activations and buffers, it is other_bytes.
    assert (est.memory["activations_bytes"] == 0).all() and (est.memory["buffers_bytes"] == 0).all()
    # stage 0 holds the embedding (256 x 64) and blocks 0-1; stage 1 blocks 2-3 and the head (64 + 64 x 256)
    block = 2 * 64 + 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128
    params = est.memory.sort("rank")["parameters_bytes"].to_list()
    assert params == [4.0 * (256 * 64 + 2 * block), 4.0 * (2 * block + 64 + 64 * 256)]


def test_bubble_fraction_closed_form() -> None:
    # Pipeline span 4 s; rank 0 busy 2.5 s (the critical rank), rank 1 busy 2 s: the bubble is the critical
    # rank's idle 1.5 s over the step (5 s with the optimizer), not the mean idle share (8 - 4.5) / 8.
    rows = [
        {"rank": 0, "op": "F", "start_s": 0.0, "end_s": 1.0},
        {"rank": 0, "op": "B", "start_s": 2.0, "end_s": 3.5},
        {"rank": 1, "op": "F", "start_s": 1.0, "end_s": 2.0},
        {"rank": 1, "op": "B", "start_s": 3.0, "end_s": 4.0},
        {"rank": 1, "op": "wait", "start_s": 0.0, "end_s": 1.0},
    ]
    assert pipeline_idle(rows) == (0, pytest.approx(2.5), pytest.approx(1.5), pytest.approx(4.0))
    assert bubble_fraction(rows, step_time_s=5.0) == pytest.approx(1.5 / 5.0)


def test_recorder_labels_waits_with_the_next_compute_action() -> None:
    rec = Recorder()
    rec.start(10.0)
    rec.add(1, "F", 3, 10.5, 11.0)
    rec.add(-1, "wait", -1, 10.1, 10.5)
    rec.add(-1, "wait", -1, 11.0, 11.2)
    rows = rec.take()
    assert rows[0] == [1, "wait", 3, pytest.approx(0.1), pytest.approx(0.5)]
    assert rows[2][:3] == [-1, "wait", -1]


def test_unsupported_plans_are_refused() -> None:
    workload = Workload(seq_len=16, global_batch_size=4, dtype=DType.FP32)
    with pytest.raises(ValueError, match="cp=1"):
        real_run(TINY, workload, ParallelPlan(cp=2))
    with pytest.raises(ValueError, match="not divisible"):
        real_run(TINY, workload, ParallelPlan(dp=3))
    with pytest.raises(ValueError, match="steps must be"):
        real_run(TINY, workload, ParallelPlan(), steps=1, warmup_steps=1)


@pytest.mark.parametrize("keep", [False, True])
def test_a_failed_run_removes_its_temporary_folder_unless_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    from tests.test_run_safety import processes_of

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    workload = Workload(seq_len=16, global_batch_size=4, dtype=DType.FP32)
    with pytest.raises(LaunchError, match="did not finish within 1 s") as info:
        real_run(
            TINY, workload, ParallelPlan(pp=2), steps=2, check_loss=False, timeout_s=1, keep_run_dir=keep
        )
    left = list(tmp_path.glob("wb-run-*"))
    assert not processes_of(tmp_path)  # the run's processes carry the folder's path in their environment
    if keep:  # kept: named in the message, and no longer a stale folder for the next sweep
        (run_dir,) = left
        assert str(run_dir) in str(info.value) and not (run_dir / OWNER_FILE).exists()
        assert sweep_stale_run_dirs(tmp_path) == [] and run_dir.exists()
    else:  # removed: the message names no file that is gone
        assert left == [] and str(tmp_path) not in str(info.value)


def test_more_workers_than_the_machine_takes_are_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(launch, "usable_cores", lambda: 1)
    workload = Workload(seq_len=16, global_batch_size=4, dtype=DType.FP32)
    with pytest.raises(
        ValueError, match=r"^the plan .* needs 4 worker processes but this machine allows at most 2 "
    ):
        real_run(TINY, workload, ParallelPlan(pp=4), steps=2, check_loss=False, device="cpu")
    assert list(tmp_path.iterdir()) == []


def test_worker_memory_counts_the_model_states() -> None:
    plan = ParallelPlan(pp=2, dp=2)
    params = TINY.total_parameters()
    assert worker_bytes(TINY, plan, check_loss=False) == WORKER_BYTES + 16 * params // 2
    assert worker_bytes(TINY, plan, check_loss=True) == WORKER_BYTES + 16 * params // 2 + 16 * params // 4


def test_sweep_removes_only_folders_whose_owner_is_gone(tmp_path: Path) -> None:
    me = os.getpid()
    folders = {name: tmp_path / name for name in ("wb-run-stale", "wb-run-live", "wb-run-kept", "other")}
    for folder in folders.values():
        folder.mkdir()
    (folders["wb-run-stale"] / OWNER_FILE).write_text(f"{me} 0\n")  # this pid, another start: a reused pid
    (folders["wb-run-live"] / OWNER_FILE).write_text(f"{me} {process_start(me)}\n")
    (folders["other"] / OWNER_FILE).write_text(f"{me} 0\n")
    # a straggler of the stale run (its owner was SIGKILLed): ended before the folder goes
    env = {**os.environ, ENV_RUN_MARKER: str(folders["wb-run-stale"].resolve())}
    straggler = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        # until exec completes, /proc shows the parent's environment (no marker): wait for the exec
        needle = f"{ENV_RUN_MARKER}={env[ENV_RUN_MARKER]}".encode()
        deadline = time.monotonic() + 10
        while needle not in Path(f"/proc/{straggler.pid}/environ").read_bytes().split(b"\0"):
            assert time.monotonic() < deadline, "the straggler never exec'd"
            time.sleep(0.01)
        assert sweep_stale_run_dirs(tmp_path) == [folders["wb-run-stale"]]
        assert straggler.wait(timeout=5) < 0
    finally:
        straggler.kill()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "wb-run-kept", "wb-run-live"]
