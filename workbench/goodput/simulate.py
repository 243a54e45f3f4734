"""A Monte-Carlo simulation of the failure process that :mod:`workbench.goodput.interval` prices in closed form.

Same process, drawn event by event: inter-failure times exponential with mean ``mtbf_s`` (memoryless, so the
next failure is drawn afresh whenever a phase starts); the run computes ``interval_s`` then stalls
``stall_s`` for a checkpoint, again and again; the checkpoint becomes durable ``lag_s`` after its stall (0 for
a synchronous save) while the next segment computes; a failure rolls back to the last durable checkpoint, waits
``downtime_s`` (no failure can strike then) and restarts for ``restart_s`` (a failure there starts the
restart over, after another ``downtime_s``). Used by the tests to check the closed form; deterministic for a
given ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.specs.limits import check_real


@dataclass(frozen=True, kw_only=True, slots=True)
class SimulatedRun:
    """What one simulated run did."""

    useful_s: float
    """Compute that ended up in the final state (the work target)."""
    wall_s: float
    num_failures: int

    @property
    def goodput_frac(self) -> float:
        return self.useful_s / self.wall_s


def _recover(
    now: float, rng: np.random.Generator, mtbf_s: float, restart_s: float, downtime_s: float
) -> tuple[float, float, int]:
    """(time the job runs again, its next failure time, failures during the restart) after a failure at ``now``."""
    extra = 0
    while True:
        now += downtime_s
        fail_at = now + rng.exponential(mtbf_s)
        if fail_at >= now + restart_s:
            return now + restart_s, fail_at, extra
        now, extra = fail_at, extra + 1


def simulate_run(
    *,
    work_s: float,
    interval_s: float,
    stall_s: float,
    mtbf_s: float,
    restart_s: float,
    downtime_s: float = 0.0,
    lag_s: float = 0.0,
    seed: int = 0,
) -> SimulatedRun:
    """Simulate until ``work_s`` seconds of compute are durable (module docstring). ``lag_s <= interval_s``.
    ValueError for non-finite or out-of-range inputs (``mtbf_s``, ``interval_s``, ``work_s`` > 0; the rest >= 0)."""
    for name, value in (("work_s", work_s), ("interval_s", interval_s), ("mtbf_s", mtbf_s)):
        check_real("simulate_run", name, value)
    for name, value in (
        ("stall_s", stall_s),
        ("restart_s", restart_s),
        ("downtime_s", downtime_s),
        ("lag_s", lag_s),
    ):
        check_real("simulate_run", name, value, min_open=False)
    if lag_s > interval_s:
        raise ValueError(
            f"simulate_run: lag_s must be <= interval_s (one write in flight), got {lag_s} > {interval_s}"
        )
    rng = np.random.default_rng(seed)
    now, fail_at = 0.0, rng.exponential(mtbf_s)
    durable = 0.0  # work in the last durable checkpoint
    failures = 0
    # the segment under way: work from `start_work` to `start_work + interval_s`, then the stall
    while durable < work_s:
        # one attempt from the last durable checkpoint: segments until durable covers work_s or a failure
        done, t = durable, now
        pending: float | None = (
            None  # (work of a checkpoint whose write is in flight, durable at `pending_at`)
        )
        pending_at = 0.0
        failed = False
        while True:
            seg = min(interval_s, work_s - done)
            last = done + seg >= work_s
            end = t + seg + (0.0 if last else stall_s)
            if pending is not None and pending_at <= min(end, fail_at):
                durable, pending = pending, None
            if fail_at < end:
                failed = True
                now = fail_at
                break
            t, done = end, done + seg
            if last:
                durable, now = work_s, t
                break
            if lag_s > 0:
                pending, pending_at = done, t + lag_s
            else:
                durable = done
        if not failed:
            break
        failures += 1
        now, fail_at, extra = _recover(now, rng, mtbf_s, restart_s, downtime_s)
        failures += extra
    return SimulatedRun(useful_s=work_s, wall_s=now, num_failures=failures)
