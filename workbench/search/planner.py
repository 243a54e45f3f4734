"""``search``: the planner's entry point (screen everything, refine the top K, explain the winner)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from workbench.search import rank
from workbench.search.frontier import TIE_FRAC, tied_mask
from workbench.search.refine import estimator, explain_win, refine_rows
from workbench.search.result import (
    METRIC_COLUMNS,
    PLAN_COLUMNS,
    SearchResult,
    apply_estimate,
    frame,
    rows_from_pool,
)
from workbench.search.run import Pool, Progress, ScreenOutcome, screen_all
from workbench.search.space import Constraints, build_space, framework_constraints
from workbench.specs.axes import PROFILE_AXES, plan_axis
from workbench.specs.plan import ParallelPlan

if TYPE_CHECKING:
    from workbench.goodput import FailureModel, GoodputOptions
    from workbench.presets.calibration import Calibration
    from workbench.specs.estimate import Estimate
    from workbench.specs.framework import FrameworkProfile
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload
    from workbench.specs.price import PriceSpec

COLUMNS = ("rank", *PLAN_COLUMNS, *METRIC_COLUMNS)

BAND_COLUMNS = ("step_time_low_s", "step_time_high_s", "tokens_per_s_low", "tokens_per_s_high", "band_note")
"""The ranked plans' 80 % error band (:mod:`workbench.estimate.band`): step time and whole-cluster tokens/s
at its ends, and why it is widened ('' when the plan's regime was validated)."""


def add_bands(rows: list[dict], model: ModelSpec, workload: Workload, stack: str) -> None:
    """Set ``BAND_COLUMNS`` on ``rows`` (in place) from the committed band table; nothing without one."""
    from workbench.estimate.band import cached_band, regime_of
    from workbench.search.refine import plan_from_row

    for r in rows:
        band = cached_band(regime_of(model, workload, plan_from_row(r), stack=stack))
        if band is None:
            continue
        r["step_time_low_s"], r["step_time_high_s"] = band.time_range(float(r["step_time_s"]))
        r["tokens_per_s_low"], r["tokens_per_s_high"] = band.throughput_range(float(r["tokens_per_s"]))
        r["band_note"] = "; ".join(band.notes)


def _clusters(cluster: ClusterSpec, nodes: Sequence[int] | None) -> list[ClusterSpec]:
    if not nodes:
        return [cluster]
    bad = [n for n in nodes if not isinstance(n, int) or n < 1]
    if bad:
        raise ValueError(f"nodes must be integers >= 1, got {bad}")
    return [cluster.with_nodes(n) for n in sorted(set(nodes))]


@dataclass(frozen=True, kw_only=True, slots=True)
class ScreenOptions:
    """What the closed-form screen ranks and keeps by: the arguments of ``screen_all`` besides the space."""

    calibration: Calibration
    objective: str
    """A failure-free objective (``rank.OBJECTIVES``): a goodput objective screens by its ``time``/``cost``."""
    keep: int
    """Best plans kept per screen (at least the ``top_k`` refined)."""
    token_budget: float
    """Tokens of the training run the ``time`` and ``cost`` objectives price."""

    def screen(
        self,
        model: ModelSpec,
        clusters: Sequence[ClusterSpec],
        workload: Workload,
        constraints: Constraints,
        progress: Progress | None,
    ) -> ScreenOutcome:
        """``screen_all`` under these options."""
        return screen_all(
            model,
            clusters,
            workload,
            constraints,
            calibration=self.calibration,
            objective=self.objective,
            keep=self.keep,
            token_budget=self.token_budget,
            progress=progress,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class GoodputInputs:
    """What ``add_goodput`` prices failures with: the run, one cluster per device count, the failure model and
    the checkpoint/recovery options."""

    model: ModelSpec
    clusters: dict[int, ClusterSpec]
    """Cluster of each searched size, by its device count."""
    workload: Workload
    cal: Calibration
    failures: FailureModel
    options: GoodputOptions


def _merge(outcomes: list[ScreenOutcome]) -> ScreenOutcome:
    """One outcome from the screens of several cluster sizes: pools concatenated, frontier and misses
    re-selected (the best pool keeps every size's ``keep`` best)."""
    from workbench.search import run

    def cat(name: str) -> dict:
        return run._concat([p for o in outcomes if (p := getattr(o, name))])

    front, miss = cat("frontier"), cat("misses")
    if front:
        front = run._take(front, run.memory_frontier(front))
    if miss:
        miss = run._take(miss, rank.best_indices(-miss["memory_frac"], run.NUM_MISSES))
    rejections = {k: sum(o.rejections.get(k, 0) for o in outcomes) for k in outcomes[0].rejections}
    return ScreenOutcome(
        best=cat("best"),
        frontier=front,
        misses=miss,
        rejections=rejections,
        num_plans=sum(o.num_plans for o in outcomes),
        num_costed=sum(o.num_costed for o in outcomes),
        num_feasible=sum(o.num_feasible for o in outcomes),
        num_skipped=sum(o.num_skipped for o in outcomes),
        screen_s=sum(o.screen_s for o in outcomes),
        screen_cpu_s=sum(o.screen_cpu_s for o in outcomes),
        clusters=tuple(c for o in outcomes for c in o.clusters),
        schedule_names=next((o.schedule_names for o in outcomes if o.schedule_names), ()),
    )


def _screen_per_size(
    model: ModelSpec,
    clusters: list[ClusterSpec],
    workload: Workload,
    constraints: Constraints,
    progress: Progress | None,
    options: ScreenOptions,
) -> ScreenOutcome:
    """``screen_all`` of each cluster size on its own (so each keeps its best plans), merged; progress over
    the whole search."""
    sizes = [build_space(model, c, constraints).size for c in clusters]
    total, done, outcomes = sum(sizes), 0, []
    for cluster, size in zip(clusters, sizes, strict=True):
        offset = done
        step = None if progress is None else (lambda n, _t, o=offset: progress(o + n, total))
        outcomes.append(options.screen(model, [cluster], workload, constraints, step))
        done += size
    return _merge(outcomes)


def checkpoint_state_bytes(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, cal: Calibration
) -> float:
    """Bytes of one checkpoint of any plan of ``model`` (``workbench.goodput.checkpoint.state_bytes``) with the
    weight and optimizer bytes per parameter the step model counts under ``cal``'s framework."""
    from workbench.cost.step import StepContext
    from workbench.goodput.checkpoint import state_bytes

    ctx = StepContext.build(model, cluster, workload, cal)
    return state_bytes(
        model,
        weight_bytes_per_param=ctx.param_bytes,
        optimizer_bytes_per_param=ctx.optimizer_bytes,
        num_devices=cluster.num_devices,
    ).total_bytes


def add_goodput(rows: list[dict], g: GoodputInputs) -> None:
    """Set ``rank.GOODPUT_COLUMNS`` on ``rows`` (in place), one numpy pass per cluster size over its rows."""
    import numpy as np

    from workbench.goodput import cluster_goodput_columns, run_totals

    for num_devices, cluster in g.clusters.items():
        group = [r for r in rows if int(r["num_devices"]) == num_devices]
        if not group:
            continue
        col = {k: np.array([r[k] for r in group], dtype=np.float64) for k in ("dp", "tp", "cp", "pp")}
        step = np.array([r["step_time_s"] for r in group], dtype=np.float64)
        ttt = np.array([r["time_to_train_s"] for r in group], dtype=np.float64)
        size = checkpoint_state_bytes(g.model, cluster, g.workload, g.cal)
        cols = cluster_goodput_columns(
            cluster,
            **col,
            checkpoint_bytes=size,
            step_time_s=step,
            failures=g.failures,
            options=g.options,
        )
        cols.update(run_totals(ttt, cluster.num_devices, cols["goodput_frac"], cols["spare_devices"]))
        cols["checkpoint_bytes"] = size
        for i, r in enumerate(group):
            r.update({k: float(np.broadcast_to(cols[k], step.shape)[i]) for k in rank.GOODPUT_COLUMNS})


def layout_key(row: dict) -> str:
    """What makes a parallel layout: the device count, every degree and the schedule (with pp > 1); plans that
    differ only in virtual stages, micro-batch, ZeRO stage, recompute, sequence parallelism or rank order are
    its variants."""
    sched = f" {row['schedule']}" if row["pp"] > 1 else ""
    uly = row.get("ulysses", 1)
    cp = f" cp{row['cp']}" + (f"/u{uly}" if uly > 1 else "") if row["cp"] > 1 else ""
    return f"{row['num_devices']} dp{row['dp']} tp{row['tp']} pp{row['pp']}{cp} ep{row['ep']}{sched}"


def _order(rows: list[dict], objective: str) -> list[dict]:
    """Refined plans that fit first (by objective), then refined ones that do not, then screened ones; inside
    each tier distinct layouts come in objective order with the variants of a layout folded under it (its best
    plan, then the others: ``layout_rank``, ``variant``). ``tied`` marks the plans within ``TIE_FRAC`` of the
    best one."""
    col, higher = _rank_column(objective, rows), rank.OBJECTIVES[objective][1]
    sign = -1.0 if higher else 1.0
    ranked = sorted(rows, key=lambda r: (not r["refined"], not r["fits"], sign * r[col]))
    tiers: dict[tuple[bool, bool], dict[str, list[dict]]] = {}
    for r in ranked:
        tiers.setdefault((not r["refined"], not r["fits"]), {}).setdefault(layout_key(r), []).append(r)
    ordered: list[dict] = []
    layouts: dict[str, int] = {}
    for groups in tiers.values():
        for key, members in groups.items():
            layouts.setdefault(key, len(layouts) + 1)
            for i, r in enumerate(members):
                r.update(layout=key, layout_rank=layouts[key], variant=i > 0)
                ordered.append(r)
    if ordered:
        tied = tied_mask([float(r[col]) for r in ordered], float(ordered[0][col]))
        for r, t in zip(ordered, tied, strict=True):
            r["tied"] = bool(t)
    return ordered


def _next_layout(ordered: list[dict]) -> int:
    """Index of the first plan of the second distinct layout (1 when every plan is one layout's variant)."""
    return next((i for i, r in enumerate(ordered) if r["layout_rank"] != ordered[0]["layout_rank"]), 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Setup:
    """A search's checked inputs: what ``_setup`` derives from the arguments of ``search``."""

    cal: Calibration
    constraints: Constraints
    """The caller's constraints narrowed to what the framework runs."""
    clusters: list[ClusterSpec]
    """One cluster per node count searched, fewest nodes first."""
    screen: ScreenOptions
    goodput_options: GoodputOptions | None
    """The failure model's practice unless given; None without a failure model."""


def _setup(
    cluster: ClusterSpec,
    workload: Workload,
    constraints: Constraints | None,
    *,
    nodes: Sequence[int] | None,
    objective: str,
    top_k: int,
    keep: int,
    token_budget: float,
    calibration: Calibration | str | None,
    failures: FailureModel | None,
    goodput_options: GoodputOptions | None,
) -> _Setup:
    """Check the arguments of ``search`` (ValueError as it documents) and derive its ``_Setup``."""
    from workbench.presets.calibration import Calibration as _Cal
    from workbench.presets.calibration import load_calibration
    from workbench.specs.limits import check_token_budget

    rank.check_objective(objective)
    check_token_budget(token_budget)
    if objective in rank.GOODPUT_OBJECTIVES and failures is None:
        raise ValueError(f"objective {objective!r} needs a failure model (failures=..., --failures PRESET)")
    if failures is not None and goodput_options is None:
        goodput_options = failures.practice
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
    screen = ScreenOptions(
        calibration=cal,
        objective=rank.GOODPUT_OBJECTIVES.get(objective, objective),
        keep=max(keep, top_k),
        token_budget=token_budget,
    )
    return _Setup(
        cal=cal, constraints=constraints, clusters=clusters, screen=screen, goodput_options=goodput_options
    )


def _screen(
    model: ModelSpec, workload: Workload, setup: _Setup, objective: str, progress: Progress | None
) -> ScreenOutcome:
    """The screen of every cluster size at once, or, for a goodput objective over several sizes, of each size on
    its own (so that every size keeps its best plans); once per combination of the values the stack offers on
    the plan axes that choose a profile field (``_offered_choices``), each screen's plans tagged with theirs."""
    choices = _offered_choices(setup.cal.framework, workload)
    if len(choices) == 1:
        return _screen_once(model, workload, setup, objective, progress)
    outcomes = []
    for i, values in enumerate(choices):
        fw = setup.cal.framework.running(ParallelPlan(**values))
        screen = replace(setup.screen, calibration=replace(setup.cal, framework=fw))
        step = None if progress is None else (lambda n, t, i=i: progress(i * t + n, len(choices) * t))
        outcome = _screen_once(model, workload, replace(setup, screen=screen), objective, step)
        outcomes.append(_tagged(outcome, values))
    # the same cluster sizes, screened once per choice
    return replace(_merge(outcomes), clusters=outcomes[0].clusters)


def _screen_once(
    model: ModelSpec, workload: Workload, setup: _Setup, objective: str, progress: Progress | None
) -> ScreenOutcome:
    """``_screen`` under one calibration."""
    if objective in rank.GOODPUT_OBJECTIVES and len(setup.clusters) > 1:
        return _screen_per_size(model, setup.clusters, workload, setup.constraints, progress, setup.screen)
    return setup.screen.screen(model, setup.clusters, workload, setup.constraints, progress)


def _offered_choices(framework: FrameworkProfile, workload: Workload) -> list[dict[str, Any]]:
    """Every combination of the values ``framework`` offers on the plan axes that choose a profile field
    (``PlanAxis.profile_field``, enumerated ``OFFERED``) and matter under the workload's dtype; ``[{}]`` when it
    offers one value on each (the plan keeps None: the stack's own)."""
    axes = [
        a
        for a in PROFILE_AXES
        if (a.dtype is None or a.dtype == str(workload.dtype))
        and len(framework.offered(a.profile_field or "")) > 1
    ]
    combos = itertools.product(*(framework.offered(a.profile_field or "") for a in axes))
    return [dict(zip((a.name for a in axes), combo, strict=True)) for combo in combos] or [{}]


def _tagged(outcome: ScreenOutcome, values: dict[str, Any]) -> ScreenOutcome:
    """``outcome`` with a column per axis of ``values`` on every pool (numpy strings, one value each: the value's
    name, ``PlanAxis.face_value``)."""
    import numpy as np

    def tag(pool: Pool) -> Pool:
        n = len(pool.get("tp", ()))
        return pool | {k: np.full(n, plan_axis(k).face_value(v)) for k, v in values.items()} if pool else pool

    return replace(
        outcome, best=tag(outcome.best), frontier=tag(outcome.frontier), misses=tag(outcome.misses)
    )


def _refined_best(
    model: ModelSpec,
    workload: Workload,
    setup: _Setup,
    out: ScreenOutcome,
    *,
    capacity_bytes: float,
    objective: str,
    top_k: int,
    backend: str,
    refine_progress: Callable[[int], None] | None,
    goodput: GoodputInputs | None,
) -> tuple[list[dict], list[Estimate], float]:
    """The screen's best plans as rows in objective order (with goodput columns when ``goodput``), the first
    ``top_k`` re-priced by ``backend`` (``capacity_bytes``: a device's memory): the rows, the ``top_k`` estimates and the refinement's wall seconds."""
    best = rows_from_pool(out.best, out.schedule_names, capacity_bytes)
    if goodput is not None:
        add_goodput(best, goodput)
    col, higher = rank.OBJECTIVES[objective]
    best.sort(key=lambda r: -r[col] if higher else r[col])
    start = time.perf_counter()
    estimates: list[Estimate] = []
    if top_k and best:
        estimate = estimator(backend, setup.cal)
        by_devices = {c.num_devices: c for c in out.clusters}
        estimates = refine_rows(model, by_devices, workload, best[:top_k], estimate, refine_progress)
        best[:top_k] = [
            apply_estimate(r, e, setup.screen.token_budget, setup.constraints.memory_headroom_frac)
            for r, e in zip(best[:top_k], estimates, strict=True)
        ]
        if goodput is not None:
            add_goodput(best[:top_k], goodput)
    return best, estimates, time.perf_counter() - start


def _ranked(best: list[dict], frontier: list[dict], objective: str) -> list[dict]:
    """``best`` in ``_order`` with ``rank`` (1 = best) and ``pareto`` (the plan is one of ``frontier``'s) set;
    every ``frontier`` row gets ``pareto`` True. Rows are updated in place."""
    pareto_keys = {r["plan"] + str(r["num_devices"]) for r in frontier}
    for r in best:
        r["pareto"] = r["plan"] + str(r["num_devices"]) in pareto_keys
    ordered = _order(best, objective)
    for i, r in enumerate(ordered):
        r["rank"] = i + 1
    for r in frontier:
        r["pareto"] = True
    return ordered


def _result_columns(failures: bool, priced: bool) -> tuple[str, ...]:
    """Columns of ``SearchResult.plans``: the plan, its metrics, the error band, and the goodput and dollar
    columns when the search has a failure model and a price."""
    columns = COLUMNS + BAND_COLUMNS + (rank.GOODPUT_COLUMNS if failures else ())
    if priced:
        columns += rank.PRICE_COLUMNS + (("goodput_usd_to_train",) if failures else ())
    return columns


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
    failures: FailureModel | None = None,
    goodput_options: GoodputOptions | None = None,
    price: PriceSpec | None = None,
) -> SearchResult:
    """Rank every parallel plan of ``model`` on ``cluster`` (or on each of ``nodes`` node counts).

    Screens the whole space in closed form (``keep`` best plans kept, Pareto frontier of tokens/s against
    peak memory, rejections counted by reason), then re-prices the ``top_k`` best with ``backend`` (default:
    the analytic backend with the same ``calibration``, i.e. the schedule simulation) and re-ranks them.
    ``objective``: ``throughput``, ``time``, ``cost``, ``goodput-time`` or ``goodput-cost`` (see
    ``workbench.search.rank``). With ``failures`` (a ``workbench.goodput.FailureModel``; required by the goodput
    objectives) every plan also gets ``rank.GOODPUT_COLUMNS`` (checkpointing and recovery as
    ``goodput_options`` say), and for a goodput objective each cluster size is screened on its own so that
    every size keeps its best plans. With ``price`` (a ``workbench.specs.price.PriceSpec``) every plan also gets
    ``rank.PRICE_COLUMNS`` and ``cost``/``goodput-cost`` rank by dollars. Raises ValueError for an unknown objective, a goodput objective without
    failures, bad node counts or an unavailable backend. No feasible plan is not an error:
    ``plans`` is empty and ``closest_misses`` lists the plans that failed only on memory. A token budget
    outside ``workbench.specs.limits`` raises ValueError.
    """
    s = _setup(cluster, workload, constraints, nodes=nodes, objective=objective, top_k=top_k, keep=keep,
               token_budget=token_budget, calibration=calibration, failures=failures,
               goodput_options=goodput_options)  # fmt: skip
    out = _screen(model, workload, s, objective, progress)
    goodput = None
    if failures is not None and s.goodput_options is not None:
        goodput = GoodputInputs(model=model, clusters={c.num_devices: c for c in out.clusters}, workload=workload,
                                cal=s.cal, failures=failures, options=s.goodput_options)  # fmt: skip
    capacity = cluster.device.hbm_bytes
    best, estimates, refine_s = _refined_best(model, workload, s, out, capacity_bytes=capacity, objective=objective,
                                              top_k=top_k, backend=backend, refine_progress=refine_progress,
                                              goodput=goodput)  # fmt: skip
    if price is not None:
        _add_dollars(best, price.usd_per_device_hour)
    frontier = sorted(
        rows_from_pool(out.frontier, out.schedule_names, capacity), key=lambda r: r["peak_memory_bytes"]
    )
    est_by_key = {id(r): e for r, e in zip(best[:top_k], estimates, strict=False)}
    ordered = _ranked(best, frontier, objective)
    add_bands(ordered, model, workload, s.cal.framework.group)
    misses = sorted(rows_from_pool(out.misses, out.schedule_names, capacity), key=lambda r: r["memory_frac"])
    return SearchResult(
        model=model,
        clusters=out.clusters,
        workload=workload,
        constraints=s.constraints,
        objective=objective,
        token_budget=token_budget,
        plans=frame(ordered, _result_columns(failures is not None, price is not None)),
        pareto=frame(frontier, COLUMNS[1:]),
        closest_misses=frame(misses, COLUMNS[1:]),
        rejections=out.rejections,
        num_plans=out.num_plans,
        num_feasible=out.num_feasible,
        screen_s=out.screen_s,
        screen_cpu_s=out.screen_cpu_s,
        refine_s=refine_s,
        estimates=tuple(est_by_key[id(r)] for r in ordered if id(r) in est_by_key),
        explanation=_explanation(ordered, _rank_column(objective, ordered)),
        goodput=None if failures is None else _settings(failures, s.goodput_options),
        framework=s.cal.framework.id,
        framework_version=s.cal.framework.version,
        price=None if price is None else _price_settings(price),
    )


def _add_dollars(rows: list[dict], usd_per_device_hour: float) -> None:
    """``rank.PRICE_COLUMNS`` on ``rows`` (in place): device-hours (and failure-priced ones) times the price."""
    for r in rows:
        r["usd_to_train"] = r["device_hours"] * usd_per_device_hour
        if "goodput_device_hours" in r:
            r["goodput_usd_to_train"] = r["goodput_device_hours"] * usd_per_device_hour


def _rank_column(objective: str, rows: list[dict]) -> str:
    """The column ``objective`` ranks by: dollars when the rows have them, else ``rank.OBJECTIVES``'."""
    priced = rank.PRICED_OBJECTIVES.get(objective)
    if priced is not None and rows and priced in rows[0]:
        return priced
    return rank.OBJECTIVES[objective][0]


def _price_settings(price: PriceSpec) -> dict[str, object]:
    """The price a search used (plain JSON)."""
    return {
        "usd_per_device_hour": price.usd_per_device_hour,
        "kind": price.kind,
        "provider": price.provider,
        "region": price.region,
        "date_read": price.date_read,
        "source": price.source,
        "describe": price.describe(),
    }


def _explanation(ordered: list[dict], col: str) -> str:
    """Why #1 beats the best plan of the next distinct layout (not a variant of its own), and whether the
    model can tell them apart (``TIE_FRAC``)."""
    if len(ordered) < 2:
        return ""
    j = _next_layout(ordered)
    text = explain_win(ordered[0], ordered[j], col, runner_label=f"#{j + 1}")
    if ordered[j]["tied"]:
        text += (
            f" They are tied: within {TIE_FRAC:.1%}, the model's worst plan-ranking miss on published runs."
        )
    return text


def _settings(failures: FailureModel, options: GoodputOptions | None) -> dict[str, object]:
    """The failure model and checkpoint/recovery options a goodput search used (plain JSON)."""
    opts = options or failures.practice
    return {
        "failures": failures.id,
        "checkpoint": opts.checkpoint,
        "spare_nodes": opts.spare_nodes,
        "spare_frac": opts.spare_frac,
        "on_failure": opts.on_failure,
        "restart_overhead_s": failures.restart_s,
        "repair_s": failures.repair_s,
    }
