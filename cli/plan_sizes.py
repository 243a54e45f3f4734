"""``workbench plan --nodes A,B,C``: the best plan of each node count and the time/cost frontier across them
(and, with a failure model, each count's goodput: ``print_goodput_sizes``).

The ranked table of a search over several node counts is led by one size (under ``--objective throughput``
the largest), so it says nothing about the others. Here each node count is searched on its own, with the same
options, and its #1 is kept; a size is on the frontier when no other size trains the token budget both faster
and for fewer device-hours (ties count as no better).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from workbench_cli._common import fmt_count, print_table, say

TIME_COST_COLUMNS = {
    "goodput-time": ("goodput_time_to_train_s", "goodput_device_hours"),
    "goodput-cost": ("goodput_time_to_train_s", "goodput_device_hours"),
}
"""Objective -> (time to train column, device-hours column) of ``SearchResult.plans``; other objectives use
``time_to_train_s`` and ``device_hours`` (failures not counted)."""


@dataclass(frozen=True, kw_only=True)
class SizeBest:
    """The best plan of one node count (``plan`` None: no feasible plan at that size)."""

    num_nodes: int
    num_devices: int
    plan: str | None
    step_time_s: float | None
    tokens_per_s: float | None
    time_to_train_s: float | None
    """Token budget over tokens/s (with a goodput objective: the wall time once failures count)."""
    device_hours: float | None
    """``time_to_train_s`` x devices / 3600 (with a goodput objective: spares included)."""
    refined: bool
    on_frontier: bool


def frontier_flags(times: Sequence[float | None], costs: Sequence[float | None]) -> list[bool]:
    """For each (time, cost) pair: True when no other pair is at most as slow and as costly and better in one.
    A missing pair (None) is never on the frontier and dominates nothing."""
    pairs = [(t, c) if t is not None and c is not None else None for t, c in zip(times, costs, strict=True)]

    def dominated(t: float, c: float) -> bool:
        return any(o is not None and o[0] <= t and o[1] <= c and (o[0] < t or o[1] < c) for o in pairs)

    return [p is not None and not dominated(*p) for p in pairs]


def best_per_size(
    search_one: Callable[[int], Any], node_counts: Sequence[int], objective: str
) -> list[SizeBest]:
    """``search_one(num_nodes)`` (a ``SearchResult`` of that size alone) for each node count; its best plan
    that fits, the time to train and device-hours under ``objective``, and the frontier flag."""
    time_col, cost_col = TIME_COST_COLUMNS.get(objective, ("time_to_train_s", "device_hours"))
    found: list[dict[str, Any]] = []
    for n in node_counts:
        result = search_one(n)
        rows = [r for r in result.plans.iter_rows(named=True) if r["fits"]] if result.plans.height else []
        devices = result.clusters[0].num_devices if result.clusters else 0
        found.append({"num_nodes": n, "num_devices": devices, "row": rows[0] if rows else None})
    times = [f["row"][time_col] if f["row"] else None for f in found]
    costs = [f["row"][cost_col] if f["row"] else None for f in found]
    flags = frontier_flags(times, costs)
    out = []
    for f, t, c, on in zip(found, times, costs, flags, strict=True):
        r = f["row"] or {}
        out.append(
            SizeBest(
                num_nodes=f["num_nodes"],
                num_devices=f["num_devices"],
                plan=r.get("plan"),
                step_time_s=r.get("step_time_s"),
                tokens_per_s=r.get("tokens_per_s"),
                time_to_train_s=t,
                device_hours=c,
                refined=bool(r.get("refined", False)),
                on_frontier=on,
            )
        )
    return out


def sizes_json(sizes: Sequence[SizeBest]) -> list[dict[str, Any]]:
    """Plain-JSON rows of ``best_per_size`` (the ``best_per_node_count`` key of ``plan --json``)."""
    return [asdict(s) for s in sizes]


def print_sizes(sizes: Sequence[SizeBest], token_budget: float, objective: str) -> None:
    """The per-node-count table and one line naming the fastest and the cheapest size."""
    failures = " once failures count" if objective in TIME_COST_COLUMNS else ""
    rows = [
        [
            s.num_nodes,
            s.plan or "no feasible plan",
            "-" if s.step_time_s is None else f"{s.step_time_s:.3f}",
            "-" if s.tokens_per_s is None else f"{s.tokens_per_s:,.0f}",
            "-" if s.time_to_train_s is None else f"{s.time_to_train_s / 86400:.1f}",
            "-" if s.device_hours is None else fmt_count(s.device_hours),
            "yes" if s.on_frontier else "no",
        ]
        for s in sizes
    ]
    title = (
        f"Best plan per node count (days and device-hours for {fmt_count(token_budget)} tokens{failures}; "
        "on frontier: no other node count is both faster and cheaper)"
    )
    cols = ["nodes", "best plan", "step s", "tokens/s", "days to train", "device-hours", "on frontier"]
    print_table(title, cols, rows)
    done = [s for s in sizes if s.time_to_train_s is not None and s.device_hours is not None]
    if len(done) > 1:
        fastest = min(done, key=lambda s: s.time_to_train_s or 0.0)
        cheapest = min(done, key=lambda s: s.device_hours or 0.0)
        say(
            f"sizes: {fastest.num_nodes} nodes train fastest, {cheapest.num_nodes} nodes cost the fewest "
            "device-hours (best plan of each size, each size searched on its own)"
        )


def print_goodput_sizes(result: Any) -> None:
    """Per node count: the best plan's goodput figures, and the size that minimises wall time and cost."""
    g = result.goodput
    best: dict[int, dict[str, Any]] = {}
    for r in result.plans.iter_rows(named=True):
        if r["fits"] and r["num_nodes"] not in best:
            best[r["num_nodes"]] = r
    if not best:
        return
    rows = [
        [
            n,
            f"{r['mtbf_s'] / 3600:.2f}",
            f"{r['checkpoint_write_s']:.1f}",
            f"{r['checkpoint_interval_s'] / 60:.1f}",
            f"{r['goodput_frac']:.1%}",
            f"{r['goodput_time_to_train_s'] / 86400:.1f}",
            fmt_count(r["goodput_device_hours"]),
        ]
        for n, r in sorted(best.items())
    ]
    title = (
        f"Goodput by node count (failures {g['failures']}, {g['checkpoint']} checkpoints, "
        f"{g['spare_nodes']} spare nodes, on failure {g['on_failure']})"
    )
    cols = ["nodes", "MTBF h", "ckpt write s", "interval min", "goodput", "days", "device-hours"]
    print_table(title, cols, rows)
    if len(best) > 1:
        fastest = min(best.values(), key=lambda r: r["goodput_time_to_train_s"])
        cheapest = min(best.values(), key=lambda r: r["goodput_device_hours"])
        say(
            f"with failures: {fastest['num_nodes']} nodes train fastest, {cheapest['num_nodes']} nodes cost the "
            "fewest device-hours (best plan of each size)"
        )
