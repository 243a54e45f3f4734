"""The rule table: one record per rule, checked the same way for one plan (``ParallelPlan.violations``), for
a batch of plans (the planner's grid) and for the app's choice lists."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from workbench.pipeline.schedules import SCHEDULE_NAMES
from workbench.presets.catalog import load_cluster, load_model
from workbench.search import grid
from workbench.specs.plan import ParallelPlan, Workload
from workbench.specs.rule_table import passes, rule_table
from workbench.specs.rules import (
    CONTROLS,
    PLAN_FIELDS,
    PLAN_RULES,
    REJECTION_REASONS,
    RULE_COLUMNS,
    Rule,
    RuleContext,
    index_rules,
)

MIXTRAL = load_model("mixtral-8x7b")
CLUSTER = load_cluster("dgx-h100", num_nodes=2)
WL = Workload(seq_len=4096, global_batch_size=24)


def test_table_is_well_formed() -> None:
    table = rule_table()
    assert len({r.key for r in table}) == len(table)
    assert set(PLAN_FIELDS) <= set(CONTROLS) and {r.control for r in table} <= set(CONTROLS)
    assert all(hasattr(ParallelPlan(), c) for c in RULE_COLUMNS[:8])
    assert {r.reason for r in table} - {None} == {k for k, _ in REJECTION_REASONS}
    assert grid.REASONS[:-2] == REJECTION_REASONS and [k for k, _ in grid.REASONS[-2:]] == ["stack", "memory"]


def test_table_refuses_duplicates_and_unknown_controls() -> None:
    with pytest.raises(ValueError, match="'devices' appears twice"):
        index_rules((*PLAN_RULES, PLAN_RULES[0]))
    with pytest.raises(ValueError, match="control must be one of"):
        dataclasses.replace(PLAN_RULES[0], control="nodes")
    with pytest.raises(ValueError, match="reads unknown columns"):
        dataclasses.replace(PLAN_RULES[0], reads=("devices",))


def _plans() -> list[ParallelPlan]:
    out = []
    for dp, tp, pp, cp, ep, vpp, mbs, sched in itertools.product(
        (1, 3),
        (1, 3, 8),
        (1, 3, 4),
        (1, 3),
        (1, 2, 3),
        (1, 2),
        (1, 4),
        ("1f1b", "zbv", "dualpipev", "interleaved-1f1b"),
    ):
        out.append(
            ParallelPlan(
                cp=cp,
                dp=dp,
                tp=tp,
                pp=pp,
                ep=ep,
                vpp=vpp,
                micro_batch_size=mbs,
                schedule=sched,
                sequence_parallel=tp == 1,
            )
        )
    return out


def test_batch_masks_equal_one_plan_at_a_time() -> None:
    plans = _plans()
    rows = [p.rule_row(WL) for p in plans]
    names = tuple(SCHEDULE_NAMES)
    cols = {c: np.array([r[c] for r in rows]) for c in RULE_COLUMNS}
    cols["schedule_code"] = np.array([names.index(p.schedule) for p in plans])
    ctx = RuleContext(
        model=MIXTRAL,
        cluster=CLUSTER,
        seq_len=WL.seq_len,
        global_batch_size=WL.global_batch_size,
        schedule_names=names,
    )
    batch = {r.key: r.violated(cols, ctx) for r in rule_table()}
    seen = set()
    for i, plan in enumerate(plans):
        one = {v.key for v in plan.violations(MIXTRAL, CLUSTER, WL)}
        assert one == {k for k, bad in batch.items() if bad[i]}, plan.describe()
        seen |= one
    assert len(seen) >= 12  # the sample breaks most rules


def test_each_violation_names_its_control() -> None:
    plan = ParallelPlan(
        dp=3, tp=6, pp=4, vpp=3, ep=2, micro_batch_size=5, sequence_parallel=False, schedule="zbv"
    )
    llama = load_model("llama-3.1-70b")
    by_key = {
        v.key: v for v in plan.violations(llama, CLUSTER, Workload(seq_len=8192, global_batch_size=256))
    }
    assert by_key["devices"].control == "cluster"
    assert by_key["tp_divides_heads"].control == "tp" and by_key["ep_needs_moe"].control == "ep"
    assert by_key["batch"].control == "micro_batch_size" and by_key["layers"].control == "pp"
    plan = ParallelPlan(dp=4, tp=4, pp=2, vpp=1, micro_batch_size=1, schedule="zbv")
    (v,) = plan.violations(
        llama, load_cluster("dgx-h100", num_nodes=4), Workload(seq_len=8192, global_batch_size=256)
    )
    assert (v.key, v.control, str(v)) == (
        "schedule_vpp",
        "schedule",
        v.sentence,
    ) and "needs vpp=2" in v.sentence
    assert plan.validate(
        llama, load_cluster("dgx-h100", num_nodes=4), Workload(seq_len=8192, global_batch_size=256)
    ) == [v.sentence]


def test_passes_reads_only_the_given_columns() -> None:
    ctx = RuleContext(model=MIXTRAL, seq_len=WL.seq_len, global_batch_size=WL.global_batch_size)
    tp = np.array([1, 2, 3, 4, 8, 16])
    assert passes(("tp_divides_heads", "tp_kv_heads"), {"tp": tp}, ctx).tolist() == [1, 1, 0, 1, 1, 1]
    b = np.arange(1, 7)
    assert passes(("batch",), {"dp": 4, "micro_batch_size": b}, ctx).tolist() == [1, 1, 1, 0, 0, 1]
    with pytest.raises(ValueError, match="reads the cluster"):
        passes(("devices",), {"dp": 1, "tp": 1, "pp": 1, "cp": 1}, ctx)


def test_rule_is_a_frozen_record() -> None:
    assert isinstance(PLAN_RULES[0], Rule)
    with pytest.raises(dataclasses.FrozenInstanceError):
        PLAN_RULES[0].key = "x"  # type: ignore[misc]
