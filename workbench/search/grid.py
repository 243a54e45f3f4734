"""The plan grid in chunks: plan columns for a range of flat indices, and the first rule each plan breaks.

A chunk is a dict of equal-length numpy arrays (one entry per plan): tp, cp, pp, dp, ep, vpp,
micro_batch_size, zero_stage, recompute_code, sequence_parallel, schedule_code and num_microbatches
(0 where dp * micro_batch_size does not divide the global batch). ``rule_reasons`` evaluates the masks of the
rule table (``workbench.specs.rule_table.rule_table``) that ``ParallelPlan.validate`` reads, grouped by their
planner reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from workbench.specs.rule_table import rule_table
from workbench.specs.rules import REJECTION_REASONS, RuleContext

if TYPE_CHECKING:
    from workbench.search.space import PlanSpace
    from workbench.specs.framework import FrameworkProfile
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

REASONS: tuple[tuple[str, str], ...] = (
    *REJECTION_REASONS,
    ("stack", "the framework does not run this ZeRO stage with pipeline parallelism"),
    ("memory", "exceeds the device memory"),
)
"""Rejection reasons in the order they are checked: a plan is counted under the first one it breaks. All but
the last two are the rule table's (``Rule.reason``); ``stack`` is the framework's (``stack_mask``)."""

REASON_INDEX = {key: i for i, (key, _) in enumerate(REASONS)}
MEMORY_REASON = REASON_INDEX["memory"]

DEFAULT_CHUNK = 1 << 19


def chunk_bounds(space: PlanSpace, chunk_plans: int = DEFAULT_CHUNK) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges of layout rows, each holding at most ``chunk_plans`` plans (at least one row)."""
    rows = len(space.layout["tp"])
    step = max(1, chunk_plans // max(space.inner_size, 1))
    for start in range(0, rows, step):
        yield start, min(start + step, rows)


def rule_columns(space: PlanSpace, start: int, stop: int, global_batch_size: int) -> dict[str, np.ndarray]:
    """Columns of layout rows ``start..stop`` times every ep and micro_batch_size: everything the rules read.
    Each such row stands for ``len(zero_stage) * len(recompute_code)`` plans (no rule reads those two)."""
    inner = len(space.ep) * len(space.micro_batch_size)
    cols = {k: np.repeat(v[start:stop], inner) for k, v in space.layout.items()}
    cols["layout_index"] = np.repeat(np.arange(start, stop), inner)
    ep, mbs = np.meshgrid(space.ep, space.micro_batch_size, indexing="ij")
    cols["ep"] = np.tile(ep.ravel(), stop - start)
    cols["micro_batch_size"] = np.tile(mbs.ravel(), stop - start)
    cols["etp"] = np.zeros_like(cols["ep"])  # the planner prices the default expert tensor parallelism
    per_step = cols["dp"] * cols["micro_batch_size"]
    cols["num_microbatches"] = np.where(global_batch_size % per_step == 0, global_batch_size // per_step, 0)
    return cols


def stack_mask(cols: dict[str, np.ndarray], framework: FrameworkProfile) -> np.ndarray:
    """True where an expanded plan (``expand``) runs a ZeRO stage its stack refuses under a pipeline
    (``FrameworkProfile.pipeline_zero_stages``): pp > 1 and zero_stage not among them. All False when the
    stack has no such restriction (the space's ZeRO stages are already among ``zero_stages``)."""
    if framework.pipeline_zero_stages is None:
        return np.zeros(len(cols["pp"]), dtype=bool)
    return (np.asarray(cols["pp"]) > 1) & ~np.isin(cols["zero_stage"], framework.pipeline_zero_stages)


def expand(space: PlanSpace, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every plan of the rule rows ``cols``: each row times every zero_stage and recompute_code (full recompute
    is of every layer; ``screen.trimmed_recompute`` makes the partial variants)."""
    inner = len(space.zero_stage) * len(space.recompute_code)
    out = {k: np.repeat(v, inner) for k, v in cols.items()}
    zero, rc = np.meshgrid(space.zero_stage, space.recompute_code, indexing="ij")
    n = len(next(iter(cols.values()))) if cols else 0
    out["zero_stage"] = np.tile(zero.ravel(), n)
    out["recompute_code"] = np.tile(rc.ravel(), n)
    return out


def plan_columns(space: PlanSpace, start: int, stop: int, global_batch_size: int) -> dict[str, np.ndarray]:
    """Columns of every plan built on layout rows ``start..stop`` (each row times all inner values, in the
    order ep, micro_batch_size, zero_stage, recompute_code)."""
    return expand(space, rule_columns(space, start, stop, global_batch_size))


def schedule_rule_mask(
    names: tuple[str, ...], code: np.ndarray, pp: np.ndarray, vpp: np.ndarray, m: np.ndarray
) -> np.ndarray:
    """True where (schedule, pp, vpp, m) breaks a rule of the schedules (``workbench.specs.schedule_traits.SCHEDULE_RULES``; pp > 1
    only), ``code`` indexing ``names``."""
    from workbench.specs.schedule_traits import SCHEDULE_RULES

    cols = {"schedule_code": code, "pp": pp, "vpp": vpp, "num_microbatches": m}
    ctx = RuleContext(schedule_names=names)
    bad = np.zeros(np.shape(code), dtype=bool)
    for rule in SCHEDULE_RULES:
        bad |= rule.violated(cols, ctx)
    return bad


def rule_reasons(
    cols: dict[str, np.ndarray],
    model: ModelSpec,
    workload: Workload,
    schedule_names: tuple[str, ...],
    *,
    uneven_stages: bool = False,
) -> np.ndarray:
    """Index into ``REASONS`` of the first rule each plan breaks, -1 if none (memory is not checked here).

    Every rule of the table with a ``reason`` is evaluated on the columns; rules without one never break in
    the planner's space (``workbench.search.space``). ``uneven_stages``: the stack runs stages of different
    layer counts (``RuleContext.uneven_stages``)."""
    ctx = RuleContext(
        model=model,
        seq_len=workload.seq_len,
        global_batch_size=workload.global_batch_size,
        schedule_names=schedule_names,
        uneven_stages=uneven_stages,
    )
    n = len(cols["tp"])
    broken = {key: np.zeros(n, dtype=bool) for key, _ in REJECTION_REASONS}
    for rule in rule_table():
        if rule.reason is not None:
            broken[rule.reason] |= rule.violated(cols, ctx)
    reason = np.full(n, -1, dtype=np.int8)
    for i in range(len(REJECTION_REASONS) - 1, -1, -1):
        reason[broken[REJECTION_REASONS[i][0]]] = i
    return reason
