"""Searches across cluster sizes: the best plan of each node count with the time/cost frontier across them
(``best_per_size``, what ``workbench plan --nodes A,B,C`` prints), and one plan scaled over data parallelism to
other node counts with its goodput (``goodput_scaling``, what the goodput figure draws).

The ranked table of a search over several node counts is led by one size (under ``--objective throughput``
the largest), so it says nothing about the others. ``best_per_size`` searches each node count on its own, with
the same options, and keeps its #1; a size is on the frontier when no other size trains the token budget both
faster and for fewer device-hours (ties count as no better).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import polars as pl

from workbench.search.frontier import pareto_mask
from workbench.specs.plan import data_parallel_degree

if TYPE_CHECKING:
    from workbench.goodput import FailureModel, GoodputOptions
    from workbench.search.result import SearchResult
    from workbench.specs.estimate import Estimate

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
    """For each (time, cost) pair: True when no other pair is at most as slow and as costly and better in one
    (equal pairs are all on the frontier). A missing pair (None) is never on the frontier and dominates
    nothing."""
    t = [math.nan if v is None else v for v in times]
    c = [math.nan if v is None else v for v in costs]
    if len(t) != len(c):
        raise ValueError(f"frontier_flags: {len(t)} times but {len(c)} costs")
    return pareto_mask((t, c), (False, False), keep_duplicates=True).tolist()


def best_per_size(
    search_one: Callable[[int], SearchResult], node_counts: Sequence[int], objective: str
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


def best_fitting_per_size(plans: pl.DataFrame) -> dict[int, dict[str, Any]]:
    """The first plan that fits of each ``num_nodes`` in a ranked ``SearchResult.plans`` frame (best first),
    by node count in increasing order."""
    best: dict[int, dict[str, Any]] = {}
    for r in plans.iter_rows(named=True):
        if r["fits"] and r["num_nodes"] not in best:
            best[r["num_nodes"]] = r
    return dict(sorted(best.items()))


SCALING_COLUMNS = (
    "num_nodes",
    "num_devices",
    "plan",
    "tokens_per_s",
    "mtbf_s",
    "checkpoint_interval_s",
    "goodput_frac",
    "goodput_tokens_per_s",
)
"""Columns of ``goodput_scaling``: the plan scaled over data parallelism, its failure-free and goodput
throughput (tokens/s over the cluster)."""


def goodput_scaling(
    est: Estimate,
    failures: FailureModel,
    options: GoodputOptions | None = None,
    node_counts: Sequence[int] | None = None,
) -> pl.DataFrame:
    """``est``'s plan scaled over data parallelism to other node counts (the same tp, pp, cp, ep and micro-batch;
    counts where the scaled plan breaks a rule, e.g. dp not dividing the global batch, are left out), each
    priced by the analytic backend and :func:`workbench.goodput.estimate_goodput`: the ``SCALING_COLUMNS``.
    Default node counts: the cluster's, and powers of two from 1/8 to 8 x of it. More nodes fail more often, so
    goodput falls with size."""
    from workbench.estimate.analytic import estimate_plan
    from workbench.goodput import estimate_goodput

    cluster, plan = est.cluster, est.plan
    base = cluster.num_nodes
    counts = node_counts or sorted({base, *(max(1, int(base * 2.0**k)) for k in range(-3, 4))})
    rows: dict[str, list[Any]] = {k: [] for k in SCALING_COLUMNS}
    for nodes in counts:
        devices = nodes * cluster.devices_per_node
        try:  # a node count whose devices tp*pp*cp does not divide is left out
            dp = data_parallel_degree(devices, tp=plan.tp, pp=plan.pp, cp=plan.cp)
        except ValueError:
            continue
        scaled = replace(plan, dp=dp)
        try:  # estimate_plan applies every plan rule, with the default framework's uneven stages
            point = estimate_plan(est.model, cluster.with_nodes(nodes), est.workload, scaled)
        except ValueError:
            continue
        g = estimate_goodput(point, failures, options)
        for key, value in (
            ("num_nodes", nodes),
            ("num_devices", devices),
            ("plan", scaled.describe()),
            ("tokens_per_s", point.tokens_per_s),
            ("mtbf_s", g.mtbf_s),
            ("checkpoint_interval_s", g.checkpoint_interval_s),
            ("goodput_frac", g.goodput_frac),
            ("goodput_tokens_per_s", point.tokens_per_s * g.goodput_frac),
        ):
            rows[key].append(value)
    return pl.DataFrame(rows, schema_overrides={"plan": pl.String})
