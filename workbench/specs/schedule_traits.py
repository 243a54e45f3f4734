"""What the rules need to know of every pipeline schedule: its placement, its vpp and micro-batch rules.

One ``ScheduleTraits`` record per built-in schedule (``SCHEDULE_TRAITS``), and the rule-table rows they imply
(``SCHEDULE_RULES``, built by ``schedule_rules``). The generators, closed forms and torch classes that complete
a schedule live one room up, in ``workbench.pipeline.schedules.registry``, whose records read these traits: the
plan's rules never import the pipeline.

Each rule is generic over the traits (required and minimum vpp, the micro-batch rules, the number of
directions), so a new schedule states its rules as data in its record. The rules apply to pipelined plans only
(pp > 1) whose micro-batch count is defined (dp * micro_batch_size divides the global batch), and sit under the
``schedule`` control and the planner's ``schedule`` rejection reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from workbench.specs.errors import unique_index
from workbench.specs.rules import Columns, Row, Rule, RuleContext


class Placement(StrEnum):
    """Which stages a pipeline rank holds."""

    LOOPING = "looping"
    """Rank r holds stages r, r + p, r + 2p, ... (Megatron-LM interleaving, arXiv:2104.04473 Sec. 2.2)."""
    V = "v"
    """Rank r holds stages r and 2p-1-r: two chunks, first and last stage on rank 0 (arXiv:2401.10241 Sec. 6).
    With two directions (DualPipe) the same placement holds stage r of the first copy and stage p-1-r of the
    second."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleTraits:
    """The shape and the rules of one pipeline schedule (what a plan's rules read of it)."""

    name: str
    """Name used by plans, the CLI and the app, e.g. ``"zb-h1"``."""
    placement: Placement
    required_vpp: int | None
    """Stages per rank the schedule needs exactly; None: any vpp >= ``min_vpp``."""
    default_vpp: int
    """Stages per rank when the caller gives none (``required_vpp`` when that is set)."""
    min_vpp: int = 1
    """Fewest stages per rank when ``required_vpp`` is None (interleaved 1F1B: 2)."""
    min_microbatches_per_rank: int = 0
    """Micro-batch rule: m >= this * pp (1F1B's warm-up of pp-1 forwards: 1; DualPipeV: 2); 0: any m."""
    num_directions: int = 1
    """Copies of the model fed from opposite ends (DualPipe: 2, one per direction, so every rank holds two
    copies' stages: 2x parameters, DeepSeek-V3 Table 2); it must divide pp and the micro-batches (rule
    ``schedule_directions``: ranks pair up as r and p-1-r). 1: one pipeline."""
    microbatches_in_rounds: bool = False
    """Micro-batch rule with vpp >= 2: m divisible by the number of rounds max(1, m // pp) (torch's
    relaxation of Megatron's m % pp == 0 for interleaved schedules)."""
    without_vpp: str | None = None
    """The schedule that runs the pipeline when no vpp >= ``min_vpp`` divides the layers into pp * vpp stages
    (interleaved 1F1B: ``"1f1b"``, as Megatron-Core picks the non-interleaved 1F1B when no virtual pipeline
    size is set, ``megatron/core/pipeline_parallel/schedules.py`` ``get_forward_backward_func``); None: the
    plan is refused by the vpp rule instead."""

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower():
            raise ValueError(f"ScheduleTraits: name must be lower-case and non-empty, got {self.name!r}")
        if self.required_vpp is not None and self.default_vpp != self.required_vpp:
            raise ValueError(
                f"ScheduleTraits {self.name!r}: default_vpp must equal required_vpp={self.required_vpp}, "
                f"got {self.default_vpp}"
            )
        if self.default_vpp < self.min_vpp:
            raise ValueError(
                f"ScheduleTraits {self.name!r}: default_vpp={self.default_vpp} is below min_vpp={self.min_vpp}"
            )
        if self.placement is Placement.V and self.required_vpp != 2:
            raise ValueError(f"ScheduleTraits {self.name!r}: V placement needs required_vpp=2")
        if self.num_directions not in (1, 2) or (
            self.num_directions == 2 and self.placement is not Placement.V
        ):
            raise ValueError(
                f"ScheduleTraits {self.name!r}: num_directions must be 1, or 2 with V placement, got "
                f"{self.num_directions!r}"
            )
        if self.min_microbatches_per_rank < 0:
            raise ValueError(f"ScheduleTraits {self.name!r}: min_microbatches_per_rank must be >= 0")
        if self.without_vpp is not None and (self.required_vpp is not None or self.min_vpp < 2):
            raise ValueError(
                f"ScheduleTraits {self.name!r}: without_vpp applies to schedules that need vpp >= 2 "
                "(required_vpp None, min_vpp >= 2)"
            )


LOOPING, V = Placement.LOOPING, Placement.V

SCHEDULE_TRAITS: tuple[ScheduleTraits, ...] = (
    ScheduleTraits(name="gpipe", placement=LOOPING, required_vpp=1, default_vpp=1),
    ScheduleTraits(
        name="1f1b", placement=LOOPING, required_vpp=1, default_vpp=1, min_microbatches_per_rank=1
    ),
    ScheduleTraits(
        name="interleaved-1f1b",
        placement=LOOPING,
        required_vpp=None,
        default_vpp=2,
        min_vpp=2,
        microbatches_in_rounds=True,
        without_vpp="1f1b",
    ),
    ScheduleTraits(name="looped-bfs", placement=LOOPING, required_vpp=None, default_vpp=1),
    ScheduleTraits(
        name="zb-h1", placement=LOOPING, required_vpp=None, default_vpp=1, microbatches_in_rounds=True
    ),
    ScheduleTraits(name="zb-h2", placement=LOOPING, required_vpp=1, default_vpp=1),
    ScheduleTraits(name="zbv", placement=V, required_vpp=2, default_vpp=2),
    ScheduleTraits(name="v-half", placement=V, required_vpp=2, default_vpp=2),
    ScheduleTraits(name="v-min", placement=V, required_vpp=2, default_vpp=2),
    ScheduleTraits(name="dualpipev", placement=V, required_vpp=2, default_vpp=2, min_microbatches_per_rank=2),
    # github.com/deepseek-ai/DualPipe dualpipe/dualpipe.py, DualPipe.step asserts "num_ranks % 2 == 0" and
    # "num_chunks % 2 == 0 and num_chunks >= num_ranks * 2": pp and m even (rule schedule_directions, from
    # num_directions=2) and m >= 2 pp (rule schedule_microbatches, from min_microbatches_per_rank=2)
    ScheduleTraits(
        name="dualpipe",
        placement=V,
        required_vpp=2,
        default_vpp=2,
        min_microbatches_per_rank=2,
        num_directions=2,
    ),
)
"""Every built-in schedule's traits, in the order of the literature (the registry's records follow it)."""


def index_traits(traits: Iterable[ScheduleTraits]) -> Mapping[str, ScheduleTraits]:
    """Read-only name -> record, in the given order. Raises ValueError on a duplicate name, or on a
    ``without_vpp`` that names no schedule of one stage per rank (``required_vpp`` 1) among them."""
    index = unique_index(traits, lambda t: t.name, "schedule {} is registered twice")
    for t in index.values():
        fallback = index.get(t.without_vpp) if t.without_vpp is not None else None
        if t.without_vpp is not None and (fallback is None or fallback.required_vpp != 1):
            raise ValueError(
                f"ScheduleTraits {t.name!r}: without_vpp={t.without_vpp!r} must name a registered schedule "
                "with required_vpp=1"
            )
    return index


TRAITS: Mapping[str, ScheduleTraits] = index_traits(SCHEDULE_TRAITS)
"""Name -> traits (read-only)."""


def schedule_traits(name: str) -> ScheduleTraits:
    """The traits of schedule ``name``. Raises ValueError listing the valid names."""
    if name not in TRAITS:
        raise ValueError(f"unknown schedule {name!r}; valid names: {', '.join(TRAITS)}")
    return TRAITS[name]


_READS = ("pp", "vpp", "schedule_code", "num_microbatches")


def _field(registry: Mapping[str, ScheduleTraits], ctx: RuleContext, get: Any, unknown: Any) -> np.ndarray:
    """Per schedule code of ``ctx``: ``get(record)``, or ``unknown`` for a name not in the registry."""
    return np.array([get(registry[n]) if n in registry else unknown for n in ctx.schedule_names])


def _spec(registry: Mapping[str, ScheduleTraits], r: Row, ctx: RuleContext) -> ScheduleTraits:
    return registry[ctx.schedule_names[r["schedule_code"]]]


def _pipelined(c: Columns) -> Any:
    return (np.asarray(c["pp"]) > 1) & (np.asarray(c["num_microbatches"]) > 0)


def _vpp_sentence(registry: Mapping[str, ScheduleTraits], r: Row, ctx: RuleContext) -> str:
    spec = _spec(registry, r, ctx)
    fixed = spec.required_vpp
    why = "V placement: stages r and 2p-1-r" if spec.placement is Placement.V else "one stage per rank"
    why = why if fixed in (1, 2) else f"{fixed} stages per rank"
    return f"{spec.name} needs vpp={fixed} ({why}), got vpp={r['vpp']}."


def _microbatch_sentence(registry: Mapping[str, ScheduleTraits], r: Row, ctx: RuleContext) -> str:
    spec, pp = _spec(registry, r, ctx), r["pp"]
    k = spec.min_microbatches_per_rank
    need = f"pp={pp}" if k == 1 else f"{k}*pp = {k * pp}"
    return (
        f"{spec.name} needs at least {need} micro-batches, got {r['num_microbatches']} (raise the global "
        "batch, lower dp*micro_batch_size, or use gpipe)."
    )


def _rounds_sentence(registry: Mapping[str, ScheduleTraits], r: Row, ctx: RuleContext) -> str:
    m, pp = r["num_microbatches"], r["pp"]
    return (
        f"{_spec(registry, r, ctx).name} with vpp={r['vpp']} needs micro-batches divisible by the number of "
        f"rounds max(1, m // pp) = {max(1, m // pp)}, got m={m} (a multiple of pp={pp} always works)."
    )


def _directions_sentence(registry: Mapping[str, ScheduleTraits], r: Row, ctx: RuleContext) -> str:
    spec = _spec(registry, r, ctx)
    d = spec.num_directions
    return (
        f"{spec.name} feeds the micro-batches from {d} ends in equal shares and pairs rank r with rank p-1-r: it "
        f"needs pp and the micro-batches to be multiples of {d}, got pp={r['pp']}, m={r['num_microbatches']}."
    )


def schedule_rules(registry: Mapping[str, ScheduleTraits], *, plans_only: bool = True) -> tuple[Rule, ...]:
    """The rules of every schedule of ``registry`` (name -> traits), vectorised over schedule codes.

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


SCHEDULE_RULES: tuple[Rule, ...] = schedule_rules(TRAITS)
"""The schedules' rows of the rule table (``workbench.specs.rule_table.rule_table``): they hold for plans with
pp > 1 and a defined micro-batch count."""
