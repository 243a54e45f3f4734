"""The schedule registry: every record agrees with its generator, its closed forms and its rules; the
registry refuses a duplicate name; a new record brings its rules with it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from workbench.pipeline import bubble, peak
from workbench.pipeline.schedules import (
    REGISTRY,
    SCHEDULE_NAMES,
    SCHEDULES,
    Placement,
    ScheduleSpec,
    build_schedule,
    default_vpp,
    get_schedule,
    num_directions,
    required_vpp,
    schedule_rule_violations,
    uses_split_backward,
    uses_v_placement,
)
from workbench.pipeline.schedules.actions import flatten_cells
from workbench.pipeline.schedules.spec import index_schedules
from workbench.specs.rules import RuleContext
from workbench.specs.schedule_traits import SCHEDULE_TRAITS, TRAITS, index_traits, schedule_rules

SPECS = {s.name: s for s in SCHEDULES}


def _first_valid(spec: ScheduleSpec, pp: int) -> int:
    return next(
        m
        for m in range(1, 8 * pp)
        if not schedule_rule_violations(spec.name, pp=pp, vpp=spec.traits.default_vpp, num_microbatches=m)
    )


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
@pytest.mark.parametrize("pp", (2, 4))
def test_generator_matches_the_record(name: str, pp: int) -> None:
    spec = SPECS[name]
    m = max(_first_valid(spec, pp), 2 * pp)
    s = build_schedule(name, pp=pp, num_microbatches=m)
    assert s.vpp == spec.traits.default_vpp and s.stage_to_rank == spec.stage_to_rank(pp, s.vpp)
    rows, _ = flatten_cells(spec.generator(pp, s.vpp, m))  # overlapped F&B pairs as their two actions
    for rank, row in enumerate(rows):  # every action on a stage its rank holds
        assert {a.stage for a in row} == {st for st, r in enumerate(s.stage_to_rank) if r == rank}
    if spec.traits.placement is Placement.V:
        assert s.stage_to_rank == tuple(range(pp)) + tuple(reversed(range(pp)))
    assert s.uses_split_backward() == spec.split_backward  # I/W actions exactly for split records
    assert s.num_directions == spec.traits.num_directions == num_directions(name)


@pytest.mark.parametrize("spec", SCHEDULES, ids=SCHEDULE_NAMES)
def test_record_fields_are_consistent(spec: ScheduleSpec) -> None:
    assert spec.bubble_family in bubble.FAMILIES
    assert spec.peak_family in peak.PEAK_FAMILIES
    assert spec.source and (spec.torch_class is None or spec.torch_class.startswith("Schedule"))
    assert spec.frameworks, "name at least one stack that runs it"
    assert (
        required_vpp(spec.name) == spec.traits.required_vpp
        and default_vpp(spec.name) == spec.traits.default_vpp
    )
    assert uses_split_backward(spec.name) == spec.split_backward
    assert uses_v_placement(spec.name) == (spec.traits.placement is Placement.V)
    if spec.traits.required_vpp is not None:
        other = spec.traits.required_vpp + 1
        assert schedule_rule_violations(spec.name, pp=4, vpp=other, num_microbatches=16)


def test_families_are_read_from_the_records() -> None:
    fam = bubble.family_of(SCHEDULE_NAMES)
    codes = peak.family_codes(SCHEDULE_NAMES)
    for i, spec in enumerate(SCHEDULES):
        assert bubble.FAMILIES[fam[i]] == spec.bubble_family
        assert peak.PEAK_FAMILIES[codes[i]] == spec.peak_family
    with pytest.raises(ValueError, match="valid names"):
        bubble.family_of(("pipedream",))


def test_registry_refuses_a_duplicate_name() -> None:
    with pytest.raises(ValueError, match="'gpipe' is registered twice"):
        index_schedules((SCHEDULES[0], *SCHEDULES))
    assert list(REGISTRY) == list(SCHEDULE_NAMES)
    with pytest.raises(TypeError):
        REGISTRY["x"] = SCHEDULES[0]  # type: ignore[index]


def test_record_refuses_inconsistent_fields() -> None:
    zbv = get_schedule("zbv").traits
    with pytest.raises(ValueError, match="V placement needs required_vpp=2"):
        dataclasses.replace(zbv, required_vpp=1, default_vpp=1)
    with pytest.raises(ValueError, match="default_vpp must equal required_vpp"):
        dataclasses.replace(zbv, default_vpp=3)
    with pytest.raises(ValueError, match="below min_vpp"):
        dataclasses.replace(get_schedule("interleaved-1f1b").traits, default_vpp=1)


def test_a_new_record_brings_its_rules() -> None:
    new = dataclasses.replace(TRAITS["1f1b"], name="3f1b", min_microbatches_per_rank=3)
    rules = schedule_rules(index_traits((*SCHEDULE_TRAITS, new)))
    ctx = RuleContext(schedule_names=("3f1b",))
    row = {"pp": 4, "vpp": 1, "schedule_code": 0, "num_microbatches": 11}
    cols = {k: np.array([v]) for k, v in row.items()}
    broken = [r for r in rules if r.violated(cols, ctx)[0]]
    assert [r.key for r in broken] == ["schedule_microbatches"]
    assert "3f1b needs at least 3*pp = 12 micro-batches" in broken[0].sentence(row, ctx)


def test_torch_classes_come_from_the_records() -> None:
    real_schedule = pytest.importorskip("workbench_backends.real_schedule")
    for spec in SCHEDULES:
        assert real_schedule.torch_class_of(spec.name) == spec.torch_class
    assert real_schedule.torch_class_of("custom") is None
