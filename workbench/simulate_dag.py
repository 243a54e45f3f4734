"""Longest path through a static pipeline schedule's DAG: the start and end of every action.

``workbench.simulate`` builds the per-action arrays (rank offsets, one dependency per action, the latency
on that edge and the duration) and calls ``longest_path``; this module only walks the DAG. Start =
max(end of the rank's previous action, end of the dependency + latency), the critical-path recurrence of
a static list schedule (the same recurrence as a PERT/CPM forward pass, Kelley & Walker 1959). A per-rank
order that can never finish raises ValueError naming the stuck actions.
"""

from __future__ import annotations

import math

import numpy as np

from workbench.schedules.actions import Schedule


def longest_path(
    schedule: Schedule, offsets: np.ndarray, dep_a: np.ndarray, lat_a: np.ndarray, dur_a: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (seconds, arrays of length n) of the n actions, in one pass over the ranks.

    Inputs, all in ``schedule.packed`` order (rank-major, each rank's actions in execution order):
    ``offsets`` (pp + 1 ints, rank r owns actions offsets[r]:offsets[r+1]), ``dep_a`` (index of each
    action's one data dependency, -1 for none), ``lat_a`` (seconds added on that edge), ``dur_a``
    (duration, seconds). Raises ValueError if the per-rank orders deadlock.

    An action whose dependency is none or an earlier action of its own rank ("free": F of stage 0,
    most W) can never wait, so only the other ("constrained") actions go through the Python loop:
    each carries the free actions after it as a tail, and a dependency on a free action becomes a
    dependency on the constrained action owning it plus a fixed offset. A blocked rank parks itself
    on the action it waits for and is woken when that finishes.
    """
    n = len(dep_a)
    rank = np.repeat(np.arange(schedule.pp), np.diff(offsets))
    idx = np.arange(n)
    free = (dep_a < 0) | ((rank[np.maximum(dep_a, 0)] == rank) & (dep_a < idx))
    cidx = np.flatnonzero(~free)
    marked = np.maximum.accumulate(np.where(free, -1, idx))
    own = np.where(marked >= offsets[rank], marked, -1)  # owning constrained action, -1: rank start
    c0 = np.concatenate(([0.0], np.cumsum(dur_a)))
    base = np.where(own >= 0, c0[np.maximum(own, 0) + 1], c0[offsets[rank]])
    offset = c0[idx + 1] - base  # end of x = end of own(x) (0 at rank start) + offset
    compact = np.full(n + 1, -1, dtype=np.int64)
    compact[cidx] = np.arange(len(cidx))
    dep_c = dep_a[cidx]
    dep2 = compact[own[dep_c]]
    lat2 = lat_a[cidx] + offset[dep_c]
    nxt = np.append(cidx[1:], n)
    tail = c0[np.minimum(nxt, offsets[rank[cidx] + 1])] - c0[cidx + 1]
    kptr = np.searchsorted(cidx, offsets[:-1])
    kstop = np.searchsorted(cidx, offsets[1:])
    lead = (
        c0[np.minimum(cidx[np.minimum(kptr, len(cidx) - 1)], offsets[1:])] if len(cidx) else c0[offsets[1:]]
    )
    lead = np.where(kptr < kstop, lead, c0[offsets[1:]]) - c0[offsets[:-1]]
    end_c = _run_ranks(
        schedule,
        kptr.tolist(),
        kstop.tolist(),
        lead.tolist(),
        dep2.tolist(),
        lat2.tolist(),
        dur_a[cidx].tolist(),
        tail.tolist(),
        cidx,
        dep_a,
        offsets,
    )
    end = np.append(end_c, 0.0)[compact[own]] + offset
    return end - dur_a, end


def _run_ranks(
    schedule: Schedule,
    ptr: list[int],
    stop: list[int],
    free: list[float],
    dep: list[int],
    lat: list[float],
    dur: list[float],
    tail: list[float],
    cidx: np.ndarray,
    dep_a: np.ndarray,
    offsets: np.ndarray,
) -> np.ndarray:
    inf = math.inf
    k = len(dep)
    end = [inf] * k + [0.0]  # end[-1] is the rank start / no dependency
    waiter = [-1] * k
    more: dict[int, list[int]] = {}
    ready = list(range(schedule.pp - 1, -1, -1))
    while ready:
        r = ready.pop()
        i, e, t = ptr[r], stop[r], free[r]
        while i < e:
            ready_at = end[dep[i]] + lat[i]
            if ready_at > t:
                if ready_at == inf:
                    if waiter[dep[i]] < 0:
                        waiter[dep[i]] = r
                    else:  # two ranks wait on one owner (their dependencies share it)
                        more.setdefault(dep[i], []).append(r)
                    break
                t = ready_at
            t += dur[i]
            end[i] = t
            t += tail[i]
            if waiter[i] >= 0:
                ready.append(waiter[i])
                if more:
                    ready.extend(more.pop(i, ()))
            i += 1
        ptr[r], free[r] = i, t
    if any(p < s for p, s in zip(ptr, stop, strict=True)):
        _raise_deadlock(
            schedule,
            offsets,
            [
                int(cidx[p]) if p < s else int(offsets[r + 1])
                for r, (p, s) in enumerate(zip(ptr, stop, strict=True))
            ],
            offsets[1:].tolist(),
            dep_a.tolist(),
        )
    return np.array(end[:k])


def _raise_deadlock(
    schedule: Schedule, offsets: np.ndarray, ptr: list[int], stop: list[int], dep: list[int]
) -> None:
    flat = [a for row in schedule.actions for a in row]
    stuck = []
    for r in range(schedule.pp):
        if ptr[r] < stop[r]:
            i = ptr[r]
            needed = flat[dep[i]]
            stuck.append(
                f"rank {r} at {flat[i]} (position {i - offsets[r]}) waits for {needed} on rank "
                f"{schedule.stage_to_rank[needed.stage]}"
            )
    raise ValueError(f"schedule {schedule.name!r} deadlocks: " + "; ".join(stuck))
