"""The schedule rules as rows of the rule table (``workbench.specs.rules.Rule``), read off the records.

Each rule is generic over the ``ScheduleSpec`` fields (required and minimum vpp, the micro-batch rules, the
number of directions), so a new schedule states its rules as data in its record. They apply to pipelined plans only (pp > 1) whose
micro-batch count is defined (dp * micro_batch_size divides the global batch), and sit under the
``schedule`` control and the planner's ``schedule`` rejection reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.pipeline.schedules.spec import Placement, ScheduleSpec
from workbench.specs.rules import Columns, Row, Rule, RuleContext

_READS = ("pp", "vpp", "schedule_code", "num_microbatches")


def _field(registry: Mapping[str, ScheduleSpec], ctx: RuleContext, get: Any, unknown: Any) -> np.ndarray:
    """Per schedule code of ``ctx``: ``get(record)``, or ``unknown`` for a name not in the registry."""
    return np.array([get(registry[n]) if n in registry else unknown for n in ctx.schedule_names])


def _spec(registry: Mapping[str, ScheduleSpec], r: Row, ctx: RuleContext) -> ScheduleSpec:
    return registry[ctx.schedule_names[r["schedule_code"]]]


def _pipelined(c: Columns) -> Any:
    return (np.asarray(c["pp"]) > 1) & (np.asarray(c["num_microbatches"]) > 0)


def _vpp_sentence(registry: Mapping[str, ScheduleSpec], r: Row, ctx: RuleContext) -> str:
    spec = _spec(registry, r, ctx)
    fixed = spec.required_vpp
    why = "V placement: stages r and 2p-1-r" if spec.placement is Placement.V else "one stage per rank"
    why = why if fixed in (1, 2) else f"{fixed} stages per rank"
    return f"{spec.name} needs vpp={fixed} ({why}), got vpp={r['vpp']}."


def _microbatch_sentence(registry: Mapping[str, ScheduleSpec], r: Row, ctx: RuleContext) -> str:
    spec, pp = _spec(registry, r, ctx), r["pp"]
    k = spec.min_microbatches_per_rank
    need = f"pp={pp}" if k == 1 else f"{k}*pp = {k * pp}"
    return (
        f"{spec.name} needs at least {need} micro-batches, got {r['num_microbatches']} (raise the global "
        "batch, lower dp*micro_batch_size, or use gpipe)."
    )


def _rounds_sentence(registry: Mapping[str, ScheduleSpec], r: Row, ctx: RuleContext) -> str:
    m, pp = r["num_microbatches"], r["pp"]
    return (
        f"{_spec(registry, r, ctx).name} with vpp={r['vpp']} needs micro-batches divisible by the number of "
        f"rounds max(1, m // pp) = {max(1, m // pp)}, got m={m} (a multiple of pp={pp} always works)."
    )


def _directions_sentence(registry: Mapping[str, ScheduleSpec], r: Row, ctx: RuleContext) -> str:
    spec = _spec(registry, r, ctx)
    d = spec.num_directions
    return (
        f"{spec.name} feeds the micro-batches from {d} ends in equal shares and pairs rank r with rank p-1-r: it "
        f"needs pp and the micro-batches to be multiples of {d}, got pp={r['pp']}, m={r['num_microbatches']}."
    )


def schedule_rules(registry: Mapping[str, ScheduleSpec], *, plans_only: bool = True) -> tuple[Rule, ...]:
    """The rules of every schedule of ``registry`` (name -> record), vectorised over schedule codes.

    ``plans_only``: the rules hold only where a plan runs the schedule (pp > 1 and a defined micro-batch
    count; ``ParallelPlan`` ignores the schedule otherwise); False checks them for any pp (building a
    schedule on its own).
    """
    reg = registry

    def _applies(c: Columns) -> Any:
        return _pipelined(c) if plans_only else True

    def known(c: Columns, ctx: RuleContext) -> Any:
        return _applies(c) & ~_field(reg, ctx, lambda s: True, False)[c["schedule_code"]]

    def fixed_vpp(c: Columns, ctx: RuleContext) -> Any:
        need = _field(reg, ctx, lambda s: s.required_vpp or 0, 0)[c["schedule_code"]]
        return _applies(c) & (need > 0) & (c["vpp"] != need)

    def min_vpp(c: Columns, ctx: RuleContext) -> Any:
        least = _field(reg, ctx, lambda s: s.min_vpp if s.required_vpp is None else 1, 1)[c["schedule_code"]]
        return _applies(c) & (c["vpp"] < least)

    def microbatches(c: Columns, ctx: RuleContext) -> Any:
        k = _field(reg, ctx, lambda s: s.min_microbatches_per_rank, 0)[c["schedule_code"]]
        return _applies(c) & (c["num_microbatches"] < k * np.asarray(c["pp"]))

    def rounds(c: Columns, ctx: RuleContext) -> Any:
        on = _field(reg, ctx, lambda s: s.microbatches_in_rounds, False)[c["schedule_code"]]
        m = np.maximum(np.asarray(c["num_microbatches"]), 1)
        per = np.maximum(1, m // np.maximum(np.asarray(c["pp"]), 1))
        return _applies(c) & on & (np.asarray(c["vpp"]) >= 2) & (m % per != 0)

    def directions(c: Columns, ctx: RuleContext) -> Any:
        d = _field(reg, ctx, lambda s: s.num_directions, 1)[c["schedule_code"]]
        return _applies(c) & ((np.asarray(c["num_microbatches"]) % d != 0) | (np.asarray(c["pp"]) % d != 0))

    def rule(key: str, mask: Any, sentence: Any) -> Rule:
        return Rule(
            key=key, control="schedule", reason="schedule", reads=_READS, mask=mask, sentence=sentence
        )

    return (
        rule(
            "schedule_known",
            known,
            lambda r, ctx: (
                f"unknown schedule {ctx.schedule_names[r['schedule_code']]!r}; valid names: {', '.join(reg)}."
            ),
        ),
        rule("schedule_vpp", fixed_vpp, lambda r, ctx: _vpp_sentence(reg, r, ctx)),
        rule(
            "schedule_min_vpp",
            min_vpp,
            lambda r, ctx: (
                f"{_spec(reg, r, ctx).name} needs vpp >= {_spec(reg, r, ctx).min_vpp} stages per rank, "
                f"got vpp={r['vpp']}."
            ),
        ),
        rule("schedule_microbatches", microbatches, lambda r, ctx: _microbatch_sentence(reg, r, ctx)),
        rule("schedule_rounds", rounds, lambda r, ctx: _rounds_sentence(reg, r, ctx)),
        rule("schedule_directions", directions, lambda r, ctx: _directions_sentence(reg, r, ctx)),
    )
