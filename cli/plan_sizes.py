"""``workbench plan --nodes A,B,C``: prints the best plan of each node count and the time/cost frontier across
them (``workbench.search.sizes.best_per_size``), and, with a failure model, each count's goodput
(``print_goodput_sizes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from workbench_cli._common import fmt_count, print_table, say

if TYPE_CHECKING:
    from workbench.search.sizes import SizeBest


def print_sizes(sizes: Sequence[SizeBest], token_budget: float, objective: str) -> None:
    """The per-node-count table and one line naming the fastest and the cheapest size."""
    from workbench.search.sizes import TIME_COST_COLUMNS

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
    from workbench.search.sizes import best_fitting_per_size

    g = result.goodput
    best = best_fitting_per_size(result.plans)
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
        for n, r in best.items()
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
