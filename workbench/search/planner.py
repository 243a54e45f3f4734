"""``search``: the planner's entry point (screen everything, refine the top K, explain the winner)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from workbench.search import rank
from workbench.search.refine import estimator, explain_win, refine_rows
from workbench.search.result import (
    METRIC_COLUMNS,
    PLAN_COLUMNS,
    SearchResult,
    apply_estimate,
    frame,
    rows_from_pool,
)
from workbench.search.run import Progress, screen_all
from workbench.search.space import Constraints, framework_constraints

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

COLUMNS = ("rank", *PLAN_COLUMNS, *METRIC_COLUMNS)


def _clusters(cluster: ClusterSpec, nodes: Sequence[int] | None) -> list[ClusterSpec]:
    if not nodes:
        return [cluster]
    bad = [n for n in nodes if not isinstance(n, int) or n < 1]
    if bad:
        raise ValueError(f"nodes must be integers >= 1, got {bad}")
    return [cluster.with_nodes(n) for n in sorted(set(nodes))]


def _order(rows: list[dict], objective: str) -> list[dict]:
    """Refined plans that fit first (by objective), then refined ones that do not, then screened ones."""
    col, higher = rank.OBJECTIVES[objective]
    sign = -1.0 if higher else 1.0
    return sorted(rows, key=lambda r: (not r["refined"], not r["fits"], sign * r[col]))


def search(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    constraints: Constraints | None = None,
    *,
    nodes: Sequence[int] | None = None,
    objective: str = "throughput",
    top_k: int = 20,
    keep: int = 200,
    token_budget: float = rank.DEFAULT_TOKEN_BUDGET,
    calibration: Calibration | str | None = None,
    backend: str = "analytic",
    progress: Progress | None = None,
    refine_progress: Callable[[int], None] | None = None,
) -> SearchResult:
    """Rank every parallel plan of ``model`` on ``cluster`` (or on each of ``nodes`` node counts).

    Screens the whole space in closed form (``keep`` best plans kept, Pareto frontier of tokens/s against
    peak memory, rejections counted by reason), then re-prices the ``top_k`` best with ``backend`` (default:
    the analytic backend with the same ``calibration``, i.e. the schedule simulation) and re-ranks them.
    ``objective``: ``throughput``, ``time`` or ``cost`` (see ``workbench.search.rank``). Raises ValueError
    for an unknown objective, bad node counts or an unavailable backend. No feasible plan is not an error:
    ``plans`` is empty and ``closest_misses`` lists the plans that failed only on memory. A token budget
    outside ``workbench.specs.limits`` raises ValueError.
    """
    from workbench.presets.calibration import Calibration as _Cal
    from workbench.presets.calibration import load_calibration
    from workbench.specs.limits import check_token_budget

    rank.check_objective(objective)
    check_token_budget(token_budget)
    if top_k < 0 or keep < 1:
        raise ValueError(f"top_k must be >= 0 and keep >= 1, got top_k={top_k}, keep={keep}")
    constraints = constraints or Constraints()
    cal = calibration if isinstance(calibration, _Cal) else load_calibration(calibration or "default")
    unsupported = cal.framework.unsupported_dtype(workload.dtype)
    if unsupported:
        raise ValueError(f"framework {cal.framework.id} does not run {', '.join(unsupported)}")
    constraints = framework_constraints(constraints, cal.framework)
    clusters = _clusters(cluster, nodes)
    if constraints.max_devices is not None and all(c.num_devices > constraints.max_devices for c in clusters):
        sizes = ", ".join(str(c.num_devices) for c in clusters)
        raise ValueError(
            f"max_devices={constraints.max_devices} excludes every cluster size searched ({sizes} devices)"
        )
    out = screen_all(
        model,
        clusters,
        workload,
        constraints,
        calibration=cal,
        objective=objective,
        keep=max(keep, top_k),
        token_budget=token_budget,
        progress=progress,
    )
    capacity = cluster.device.hbm_bytes
    best = rows_from_pool(out.best, out.schedule_names, capacity)
    col, higher = rank.OBJECTIVES[objective]
    best.sort(key=lambda r: -r[col] if higher else r[col])
    start = time.perf_counter()
    estimates = []
    if top_k and best:
        estimate = estimator(backend, cal)
        by_devices = {c.num_devices: c for c in out.clusters}
        estimates = refine_rows(model, by_devices, workload, best[:top_k], estimate, refine_progress)
        best[:top_k] = [
            apply_estimate(r, e, token_budget) for r, e in zip(best[:top_k], estimates, strict=True)
        ]
    refine_s = time.perf_counter() - start
    pareto_keys = {
        r["plan"] + str(r["num_devices"]) for r in rows_from_pool(out.frontier, out.schedule_names, capacity)
    }
    for r in best:
        r["pareto"] = r["plan"] + str(r["num_devices"]) in pareto_keys
    est_by_key = {id(r): e for r, e in zip(best[:top_k], estimates, strict=False)}
    ordered = _order(best, objective)
    for i, r in enumerate(ordered):
        r["rank"] = i + 1
    frontier = sorted(
        rows_from_pool(out.frontier, out.schedule_names, capacity), key=lambda r: r["peak_memory_bytes"]
    )
    for r in frontier:
        r["pareto"] = True
    misses = sorted(rows_from_pool(out.misses, out.schedule_names, capacity), key=lambda r: r["memory_frac"])
    return SearchResult(
        model=model,
        clusters=out.clusters,
        workload=workload,
        constraints=constraints,
        objective=objective,
        token_budget=token_budget,
        plans=frame(ordered, COLUMNS),
        pareto=frame(frontier, COLUMNS[1:]),
        closest_misses=frame(misses, COLUMNS[1:]),
        rejections=out.rejections,
        num_plans=out.num_plans,
        num_feasible=out.num_feasible,
        screen_s=out.screen_s,
        refine_s=refine_s,
        estimates=tuple(est_by_key[id(r)] for r in ordered if id(r) in est_by_key),
        explanation=explain_win(ordered[0], ordered[1], col) if len(ordered) > 1 else "",
    )
