"""The whole rule table: the plan's own rules (``workbench.specs.rules.PLAN_RULES``) and the schedules' rules
(``workbench.specs.schedule_traits.SCHEDULE_RULES``), and the ways a plan or a batch of plans is checked
against it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from workbench.specs.rules import (
    PLAN_RULES,
    RULE_COLUMNS,
    Columns,
    Row,
    Rule,
    RuleContext,
    Violation,
    index_rules,
)
from workbench.specs.schedule_traits import SCHEDULE_RULES

_TABLE: Mapping[str, Rule] = index_rules((*PLAN_RULES, *SCHEDULE_RULES))


def rule_table() -> tuple[Rule, ...]:
    """Every rule: ``PLAN_RULES`` then the schedules' ``SCHEDULE_RULES`` (unique keys)."""
    return tuple(_TABLE.values())


def rule(key: str) -> Rule:
    """The rule named ``key``; ValueError listing the keys if there is none."""
    if key not in _TABLE:
        raise ValueError(f"unknown rule {key!r}; valid keys: {', '.join(_TABLE)}")
    return _TABLE[key]


def passes(keys: Iterable[str], cols: Columns, ctx: RuleContext) -> np.ndarray:
    """True where the columns break none of the rules ``keys`` (columns broadcast, e.g. a candidate array
    against fixed scalars). Only the columns those rules read need be given."""
    bad: Any = False
    for key in keys:
        bad = bad | rule(key).violated(cols, ctx)
    return ~np.asarray(bad, dtype=bool)


def plan_violations(row: Row, ctx: RuleContext) -> list[Violation]:
    """Every rule of ``rule_table()`` that the plan ``row`` (one value per ``RULE_COLUMNS`` entry) breaks,
    in table order; the row is checked as a batch of one. ``ParallelPlan.violations`` is the usual entry."""
    cols = {c: np.array([row[c]]) for c in RULE_COLUMNS}
    return [
        Violation(key=r.key, control=r.control, sentence=r.sentence(row, ctx))
        for r in _TABLE.values()
        if r.violated(cols, ctx)[0]
    ]
