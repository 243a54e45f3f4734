"""Longest path through a static pipeline schedule's DAG: the start and end of every action.

``workbench.pipeline.simulate`` builds the per-action arrays (rank offsets, one dependency per action, the latency
on that edge and the duration) and calls ``longest_path``; this module only walks the DAG. Start =
max(end of the rank's previous action, end of the dependency + latency, end of an optional second dependency
+ its latency: the forward of an overlapped F&B pair waits for both inputs), the critical-path recurrence of a
static list schedule (the same recurrence as a PERT/CPM forward pass, Kelley & Walker 1959). A per-rank
order that can never finish raises ValueError naming the stuck actions.
"""

from __future__ import annotations

import numpy as np

from workbench.pipeline.schedules.actions import Schedule


def longest_path(
    schedule: Schedule,
    offsets: np.ndarray,
    dep_a: np.ndarray,
    lat_a: np.ndarray,
    dur_a: np.ndarray,
    *,
    dep2_a: np.ndarray | None = None,
    lat2_a: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (seconds, arrays of length n) of the n actions, in one pass over the ranks.

    Inputs, all in ``schedule.packed`` order (rank-major, each rank's actions in execution order):
    ``offsets`` (pp + 1 ints, rank r owns actions offsets[r]:offsets[r+1]), ``dep_a`` (index of each
    action's one data dependency, -1 for none), ``lat_a`` (seconds added on that edge), ``dur_a``
    (duration, seconds); optionally ``dep2_a`` and ``lat2_a``, a second dependency (-1: none) and its latency.
    Raises ValueError if the per-rank orders deadlock.

    An action whose dependency is none or an earlier action of its own rank ("free": F of stage 0,
    most W) can never wait, so only the other ("constrained") actions go through the Python loop:
    each carries the free actions after it as a tail, and a dependency on a free action becomes a
    dependency on the constrained action owning it plus a fixed offset. The constrained actions are
    then priced in lock-step rounds over all ranks at once (``_run_rounds``).
    """
    n = len(dep_a)
    rank = np.repeat(np.arange(schedule.pp), np.diff(offsets))
    idx = np.arange(n)
    dep2_a = np.full(n, -1, dtype=np.int64) if dep2_a is None else dep2_a
    lat2_a = np.zeros(n) if lat2_a is None else lat2_a

    def local(d: np.ndarray) -> np.ndarray:  # none, or an earlier action of the same rank
        return (d < 0) | ((rank[np.maximum(d, 0)] == rank) & (d < idx))

    free = local(dep_a) & local(dep2_a)
    cidx = np.flatnonzero(~free)
    marked = np.maximum.accumulate(np.where(free, -1, idx))
    own = np.where(marked >= offsets[rank], marked, -1)  # owning constrained action, -1: rank start
    c0 = np.concatenate(([0.0], np.cumsum(dur_a)))
    base = np.where(own >= 0, c0[np.maximum(own, 0) + 1], c0[offsets[rank]])
    offset = c0[idx + 1] - base  # end of x = end of own(x) (0 at rank start) + offset
    compact = np.full(n + 1, -1, dtype=np.int64)
    compact[cidx] = np.arange(len(cidx))
    dep_c, dep2_c = dep_a[cidx], dep2_a[cidx]
    dep_k = compact[own[dep_c]]
    lat_k = lat_a[cidx] + offset[dep_c]
    has2 = dep2_c >= 0
    dep2_k = np.where(has2, compact[own[np.maximum(dep2_c, 0)]], -1)
    lat2_k = np.where(has2, lat2_a[cidx] + offset[np.maximum(dep2_c, 0)], 0.0)
    nxt = np.append(cidx[1:], n)
    tail = c0[np.minimum(nxt, offsets[rank[cidx] + 1])] - c0[cidx + 1]
    kptr = np.searchsorted(cidx, offsets[:-1])
    kstop = np.searchsorted(cidx, offsets[1:])
    lead = (
        c0[np.minimum(cidx[np.minimum(kptr, len(cidx) - 1)], offsets[1:])] if len(cidx) else c0[offsets[1:]]
    )
    lead = np.where(kptr < kstop, lead, c0[offsets[1:]]) - c0[offsets[:-1]]
    end_c = _run_rounds(
        schedule,
        kptr,
        kstop,
        lead,
        (dep_k, dep2_k),
        (lat_k, lat2_k),
        dur_a[cidx],
        tail,
        cidx,
        (dep_a, dep2_a),
        offsets,
    )
    end = np.append(end_c, 0.0)[compact[own]] + offset
    return end - dur_a, end


def _run_rounds(
    schedule: Schedule,
    ptr: np.ndarray,
    stop: np.ndarray,
    lead: np.ndarray,
    deps: tuple[np.ndarray, np.ndarray],
    lats: tuple[np.ndarray, np.ndarray],
    dur: np.ndarray,
    tail: np.ndarray,
    cidx: np.ndarray,
    deps_a: tuple[np.ndarray, np.ndarray],
    offsets: np.ndarray,
) -> np.ndarray:
    """End of every constrained action, advancing all ranks in lock-step rounds (vectorised over ranks).

    In each round every rank whose next constrained action has its dependency finished runs it:
    start = max(rank clock, each dependency's end + its latency). Pipelines advance about one action per rank per
    round, so the loop runs about (actions per rank + pp) rounds of a few numpy calls on pp-sized
    arrays. A round in which no rank can move while some still have actions is a deadlock.
    """
    dep, dep2 = deps
    lat, lat2 = lats
    k = len(dep)
    end = np.full(k + 1, np.inf)
    end[k] = 0.0  # dep == -1 reads the rank start / no dependency
    dep = np.where(dep < 0, k, dep)
    dep2 = np.where(dep2 < 0, k, dep2)
    ptr = ptr.copy()
    clock = lead.astype(float).copy()
    ranks = np.flatnonzero(ptr < stop)
    while ranks.size:
        i = ptr[ranks]
        ready_at = np.maximum(end[dep[i]] + lat[i], end[dep2[i]] + lat2[i])
        ok = ready_at < np.inf
        if not ok.all():
            if not ok.any():
                _raise_deadlock(
                    schedule,
                    offsets,
                    [
                        int(cidx[p]) if p < s else int(offsets[r + 1])
                        for r, (p, s) in enumerate(zip(ptr, stop, strict=True))
                    ],
                    offsets[1:].tolist(),
                    [d.tolist() for d in deps_a],
                )
            ranks, i, ready_at = ranks[ok], i[ok], ready_at[ok]
        finish = np.maximum(clock[ranks], ready_at) + dur[i]
        end[i] = finish
        clock[ranks] = finish + tail[i]
        ptr[ranks] = i + 1
        ranks = np.flatnonzero(ptr < stop)
    return end[:k]


def _raise_deadlock(
    schedule: Schedule, offsets: np.ndarray, ptr: list[int], stop: list[int], deps: list[list[int]]
) -> None:
    flat = [a for row in schedule.actions for a in row]
    stuck = []
    for r in range(schedule.pp):
        if ptr[r] < stop[r]:
            i = ptr[r]
            # the dependency not yet run: at or past the position its own rank is stuck at
            waits = [d for d in (deps[1][i], deps[0][i]) if d >= 0]
            pending = [d for d in waits if d >= ptr[int(np.searchsorted(offsets, d, side="right")) - 1]]
            needed = flat[(pending or waits)[0]]
            stuck.append(
                f"rank {r} at {flat[i]} (position {i - offsets[r]}) waits for {needed} on rank "
                f"{schedule.stage_to_rank[needed.stage]}"
            )
    raise ValueError(f"schedule {schedule.name!r} deadlocks: " + "; ".join(stuck))
