"""``SearchResult`` and the schema of its frames.

``plans`` (polars, one row per plan, best first): ``rank`` (1 = best), ``num_nodes``, ``num_devices``, the plan
columns (one per plan axis, ``workbench.specs.axes.AXIS_NAMES``: ``dp tp pp cp ulysses ep etp vpp
micro_batch_size zero_stage zero_shard loss_chunks recompute_num_layers`` int or null, ``sequence_parallel
offload_optimizer offload_activations vocab_parallel`` bool, ``recompute schedule rank_order`` str), ``plan``
(the ``ParallelPlan.describe()`` text), ``num_microbatches``, then

- ``step_time_s``, ``tokens_per_s`` (whole cluster), ``mfu`` (0..1, PaLM model FLOPs over the dense peak),
  ``time_to_train_s`` (token budget / tokens_per_s), ``device_hours`` (time * devices / 3600);
- ``peak_memory_bytes`` (largest rank), ``memory_capacity_bytes``, ``memory_frac`` (peak over capacity),
  ``fits`` (bool);
- the step breakdown in seconds: ``compute_s``, ``exposed_{tp,cp,ep,pp,dp}_comm_s``, ``bubble_s``,
  ``optimizer_s``; ``bubble_fraction`` (the critical rank's bubble over the step, :mod:`workbench.estimate.metrics`); ``bottleneck`` (str, e.g. ``bubble 12%``);
- with a failure model (``search(..., failures=...)``), ``workbench.search.rank.GOODPUT_COLUMNS``:
  ``mtbf_s``, ``checkpoint_bytes``, ``checkpoint_write_s``, ``checkpoint_stall_s``, ``checkpoint_interval_s``,
  ``restart_s``, ``goodput_frac`` (0..1), ``goodput_time_to_train_s`` and ``goodput_device_hours`` (spares in);
- ``refined`` (bool: the numbers come from the full backend) and ``tier`` (``refined``/``screened``),
  ``screen_step_time_s`` and ``screen_peak_memory_bytes`` (the closed-form screen's figures), ``pareto``
  (bool: on the frontier), ``rejected_reason`` (null, or why the plan does not fit).

``pareto`` holds the frontier's rows (same columns), sorted by peak memory; ``closest_misses`` the plans
that failed only on memory, smallest overshoot first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.search.grid import REASONS
from workbench.search.refine import BREAKDOWN_LABELS, bottleneck, plan_from_row
from workbench.search.space import RECOMPUTE_CODES
from workbench.specs.axes import AXIS_NAMES, PLAN_AXES
from workbench.specs.plan import RANK_ORDERS, ParallelPlan

ORDER_NAMES: tuple[str, ...] = tuple(RANK_ORDERS)
"""``order_code`` i of a plan column means ``ORDER_NAMES[i]`` (``workbench.search.space``)."""

if TYPE_CHECKING:
    import polars as pl

    from workbench.search.space import Constraints
    from workbench.specs.estimate import Estimate
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

PLAN_COLUMNS = ("num_nodes", "num_devices", *AXIS_NAMES, "plan", "num_microbatches")
"""The plan's columns: one per plan axis (``workbench.specs.axes``; an axis the planner does not search holds
``ParallelPlan``'s default), its text and its micro-batch count."""
_RENAMED = tuple(a for a in PLAN_AXES if a.cost_column not in (None, a.name))
"""The axes whose cost column (``PlanAxis.cost_column``, what the search's pools hold) has another name."""
DEFAULT_VALUES: dict[str, Any] = {a.name: getattr(ParallelPlan(), a.name) for a in PLAN_AXES}
"""``ParallelPlan``'s value on each axis, held by a searched plan on every axis its screen's pool has no column
for (an axis the planner does not search, or one the stack offers a single value on)."""
METRIC_COLUMNS = (
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "time_to_train_s",
    "device_hours",
    "peak_memory_bytes",
    "memory_capacity_bytes",
    "memory_frac",
    "fits",
    *BREAKDOWN_LABELS,
    "bubble_fraction",
    "bottleneck",
    "refined",
    "tier",
    "screen_step_time_s",
    "screen_peak_memory_bytes",
    "pareto",
    "rejected_reason",
    "layout",
    "layout_rank",
    "variant",
    "tied",
)


def rows_from_pool(
    pool: dict[str, np.ndarray], schedule_names: tuple[str, ...], capacity_bytes: float
) -> list[dict]:
    """Plain dict rows (Python scalars, decoded names, derived columns) of a numpy pool."""
    n = len(pool.get("tp", ()))
    rows = []
    for i in range(n):
        row: dict[str, Any] = {k: v[i].item() for k, v in pool.items()}
        row["recompute"] = RECOMPUTE_CODES[row.pop("recompute_code")]
        for a in _RENAMED:  # a cost column named apart from its axis (recompute_layers): the plan's value
            if a.cost_column in row:
                row[a.name] = a.plan_value(row.pop(a.cost_column))
        row["schedule"] = schedule_names[row.pop("schedule_code")]
        row["rank_order"] = ORDER_NAMES[row.pop("order_code", 0)]
        row |= {k: v for k, v in DEFAULT_VALUES.items() if k not in row}
        row["plan"] = plan_from_row(row).describe()
        row["memory_capacity_bytes"] = capacity_bytes
        row["fits"] = bool(row["memory_frac"] <= 1.0)
        row.setdefault("screen_step_time_s", row.get("step_time_s", float("nan")))
        row.setdefault("screen_peak_memory_bytes", row["peak_memory_bytes"])
        if "step_time_s" in row:
            row["bottleneck"] = bottleneck(row)
        row.setdefault("refined", False)
        row["tier"] = "screened"
        row.setdefault("pareto", False)
        row["rejected_reason"] = None if row["fits"] else "exceeds the device memory"
        rows.append(row)
    return rows


def apply_estimate(
    row: dict[str, Any], est: Estimate, token_budget: float, headroom_frac: float = 0.0
) -> dict[str, Any]:
    """``row`` with its metrics replaced by the full backend's ``est`` (screen figures kept); it fits when the
    estimate's peak leaves ``headroom_frac`` of the device memory free (``Constraints.memory_headroom_frac``,
    the rule the screen applied)."""
    out = dict(
        row,
        refined=True,
        tier="refined",
        step_time_s=est.step_time_s,
        tokens_per_s=est.tokens_per_s,
        mfu=est.mfu,
        hfu=est.hfu,
        peak_memory_bytes=est.peak_memory_bytes,
        memory_capacity_bytes=est.memory_capacity_bytes,
    )
    out.update(est.breakdown.as_dict())
    out["time_to_train_s"] = token_budget / est.tokens_per_s
    out["device_hours"] = out["time_to_train_s"] * int(row["num_devices"]) / 3600.0
    out["memory_frac"] = est.peak_memory_bytes / est.memory_capacity_bytes
    out["fits"] = bool(est.peak_memory_bytes <= est.memory_capacity_bytes * (1.0 - headroom_frac))
    out["rejected_reason"] = None if out["fits"] else "exceeds the usable device memory (full estimate)"
    out["bubble_fraction"] = est.bubble_fraction
    out["bottleneck"] = bottleneck(out)
    return out


def frame(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pl.DataFrame:
    """A polars frame of ``rows`` with exactly ``columns`` (missing values null), in that order."""
    import polars as pl

    if not rows:
        return pl.DataFrame(schema=dict.fromkeys(columns, pl.Float64))
    return pl.DataFrame([{c: r.get(c) for c in columns} for r in rows], infer_schema_length=None)


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """What ``search`` found. Frames follow the module docstring's schema."""

    model: ModelSpec
    clusters: tuple[ClusterSpec, ...]
    """One per node count searched."""
    workload: Workload
    constraints: Constraints
    objective: str
    token_budget: float
    plans: pl.DataFrame
    pareto: pl.DataFrame
    closest_misses: pl.DataFrame
    rejections: dict[str, int]
    """Plans rejected per reason key of ``workbench.search.grid.REASONS`` (first broken rule counts)."""
    num_plans: int
    """Plans in the searched space (every one screened)."""
    num_feasible: int
    screen_s: float
    """Wall time of the screen, s."""
    refine_s: float
    estimates: tuple[Estimate, ...]
    """Full-backend estimates of the refined plans, in ``plans`` order."""
    explanation: str
    """Why #1 beats #2, one line ('' with fewer than two plans)."""
    framework: str = ""
    """The stack the plans are for (framework profile id): the search offers only what it runs."""
    framework_version: str = ""
    """The release(s) of that stack (``FrameworkProfile.version``)."""
    goodput: dict[str, Any] | None = None
    """With a failure model: its id and the checkpoint/recovery options (``plans`` then has
    ``workbench.search.rank.GOODPUT_COLUMNS``); None otherwise."""
    price: dict[str, Any] | None = None
    """With a price: the ``PriceSpec`` used (``plans`` then has ``workbench.search.rank.PRICE_COLUMNS``)."""
    screen_cpu_s: float = 0.0
    """CPU time of the screen (``time.process_time``), s; 0 when not measured."""

    @property
    def feasible(self) -> bool:
        return self.plans.height > 0

    @property
    def plans_per_s(self) -> float:
        """Plans screened per second of CPU time (``screen_cpu_s``; wall time when that was not measured): on a
        loaded machine wall time also counts the waits for a core."""
        seconds = self.screen_cpu_s or self.screen_s
        return self.num_plans / seconds if seconds > 0 else float("inf")

    @property
    def plans_per_wall_s(self) -> float:
        """Plans screened per second of wall time."""
        return self.num_plans / self.screen_s if self.screen_s > 0 else float("inf")

    def rejection_table(self) -> list[tuple[str, str, int]]:
        """(key, sentence, count) per reason, in checking order."""
        return [(k, text, self.rejections.get(k, 0)) for k, text in REASONS]

    def report_frame(self) -> pl.DataFrame:
        """Ranked plans, then the frontier's other plans, then the closest misses (the report's input)."""
        import polars as pl

        seen = set(self.plans["plan"].to_list()) if self.plans.height else set()
        extra = self.pareto.filter(~pl.col("plan").is_in(list(seen))) if self.pareto.height else self.pareto
        parts = [
            f.drop("rank") if "rank" in f.columns else f for f in (self.plans, extra, self.closest_misses)
        ]
        parts = [p for p in parts if p.height]
        return pl.concat(parts, how="diagonal_relaxed") if parts else self.plans

    def summary(self) -> dict[str, Any]:
        """Plain-JSON summary (what ``workbench plan --json`` prints)."""
        return {
            "framework": self.framework,
            "framework_version": self.framework_version,
            "model": self.model.name,
            "clusters": [
                {"id": c.id, "num_nodes": c.num_nodes, "num_devices": c.num_devices} for c in self.clusters
            ],
            "seq_len": self.workload.seq_len,
            "global_batch_size": self.workload.global_batch_size,
            "objective": self.objective,
            "token_budget": self.token_budget,
            "num_plans": self.num_plans,
            "num_feasible": self.num_feasible,
            "screen_s": self.screen_s,
            "refine_s": self.refine_s,
            "screen_cpu_s": self.screen_cpu_s,
            "plans_per_s": self.plans_per_s,
            "plans_per_wall_s": self.plans_per_wall_s,
            "rejections": dict(self.rejections),
            "explanation": self.explanation,
            **({"goodput": dict(self.goodput)} if self.goodput is not None else {}),
            **({"price": dict(self.price)} if self.price is not None else {}),
            "plans": _finite(self.plans.to_dicts()),
            "pareto": _finite(self.pareto.to_dicts()),
            "closest_misses": _finite(self.closest_misses.to_dicts()),
        }


def _finite(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with NaN/inf floats (e.g. the step time of a plan never costed) as None, so they are JSON."""
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in rows
    ]
