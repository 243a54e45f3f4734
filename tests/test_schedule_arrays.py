"""The array build of the schedules (``build_schedule``, issue 52) equals the records' generators
(``reference_schedule``: one ``Action`` at a time) action for action, for every registered schedule; the lazily
decoded ``ActionRows`` behave as the tuple of tuples they stand for; a packed schedule is checked as strictly as
one built from rows. For the looping family the generators are independent readable code (``classic``); ZB-V,
DualPipeV and DualPipe write ints as they go and their rows are decoded from those, so their oracles are torch's
``pipeline_order`` (tests/test_schedules.py) and DualPipe's rules (tests/test_dualpipe.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from workbench.pipeline.schedules import (
    SCHEDULE_NAMES,
    Action,
    Schedule,
    arrays,
    build_schedule,
    classic,
    get_schedule,
)
from workbench.pipeline.schedules.actions import OPS, ActionRows
from workbench.pipeline.schedules.registry import reference_schedule, schedule_rule_violations


def _shapes(name: str) -> list[tuple[int, int, int]]:
    """A few valid (pp, vpp, m) of the schedule: small, odd and uneven rounds included."""
    traits = get_schedule(name).traits
    vpps = (traits.required_vpp,) if traits.required_vpp else (1, 2, 3)
    out = []
    for pp, vpp in itertools.product((1, 2, 3, 4, 6), vpps):
        valid = [
            m
            for m in (1, 2, 3, pp, pp + 1, 2 * pp, 2 * pp + 2, 3 * pp, 5 * pp + 5)
            if not schedule_rule_violations(name, pp=pp, vpp=vpp, num_microbatches=m)
        ]
        out += [(pp, vpp, m) for m in sorted(set(valid))[:4]]
    return out


CASES = [(name, *shape) for name in SCHEDULE_NAMES for shape in _shapes(name)]


def test_every_schedule_has_cases() -> None:
    assert {c[0] for c in CASES} == set(SCHEDULE_NAMES)
    assert len(CASES) > 100


@pytest.mark.parametrize(("name", "pp", "vpp", "m"), CASES)
def test_build_equals_the_reference_action_for_action(name: str, pp: int, vpp: int, m: int) -> None:
    built = build_schedule(name, pp=pp, vpp=vpp, num_microbatches=m)
    ref = reference_schedule(name, pp=pp, vpp=vpp, num_microbatches=m)
    assert isinstance(ref.actions, tuple)
    assert built == ref
    assert tuple(built.actions) == ref.actions  # decoded rows, Action for Action
    assert [list(row) for row in built.as_text(overlap=True)] == ref.as_text(overlap=True)
    assert np.array_equal(built.packed, ref.packed) and np.array_equal(built.rank_offsets, ref.rank_offsets)
    assert built.overlap_pairs == ref.overlap_pairs


@pytest.mark.parametrize(
    ("arrayed", "readable"),
    [
        (arrays.interleaved_1f1b, classic.interleaved_1f1b),
        (arrays.zb_h1, classic.zb_h1),
        (arrays.looped_bfs, classic.looped_bfs),
    ],
)
def test_array_generators_follow_the_readable_ones_off_the_rules_too(arrayed, readable) -> None:  # type: ignore[no-untyped-def]
    """Also where the rules refuse the shape (m not a multiple of the rounds, m < pp): the two agree anyway."""
    for pp, vpp, m in itertools.product((1, 2, 3, 5, 8), (1, 2, 3, 4), (1, 2, 3, 5, 7, 12, 17, 24)):
        rows = readable(pp, vpp, m)
        packed, offsets, _ = arrayed(pp, vpp, m)
        expected = [(a.stage, OPS.index(a.op), a.microbatch) for row in rows for a in row]
        assert packed.tolist() == [list(t) for t in expected], (pp, vpp, m)
        assert offsets.tolist() == list(itertools.accumulate((len(r) for r in rows), initial=0))


def test_action_rows_read_as_the_tuple() -> None:
    s = build_schedule("interleaved-1f1b", pp=2, vpp=2, num_microbatches=4)
    assert isinstance(s.actions, ActionRows)
    expected = reference_schedule("interleaved-1f1b", pp=2, vpp=2, num_microbatches=4).actions
    assert len(s.actions) == 2 and s.actions[0] == expected[0] and s.actions[-1][-1] == expected[1][-1]
    assert s.actions == expected and expected == s.actions and hash(s.actions) == hash(expected)
    assert s.actions[0][0] == Action(0, "F", 0) and str(s.actions[1][0]) == "1F0"
    assert hash(s) == hash(reference_schedule("interleaved-1f1b", pp=2, vpp=2, num_microbatches=4))
    assert s != build_schedule("interleaved-1f1b", pp=2, vpp=2, num_microbatches=6)


def test_a_packed_schedule_is_checked_like_rows() -> None:
    good = arrays.gpipe(1, 1, 2)
    ok = {"name": "x", "pp": 1, "vpp": 1, "num_microbatches": 2, "num_stages": 1, "stage_to_rank": (0,)}
    assert Schedule(**ok, actions=ActionRows(good.packed, good.offsets)).num_actions == 4
    dup = good.packed.copy()
    dup[1] = dup[0]  # 0F0 twice, 0F1 missing
    with pytest.raises(ValueError, match="0F0 appears more than once"):
        Schedule(**ok, actions=ActionRows(dup, good.offsets))
    far = good.packed.copy()
    far[0, 2] = 9
    with pytest.raises(ValueError, match="out of range"):
        Schedule(**ok, actions=ActionRows(far, good.offsets))
    with pytest.raises(ValueError, match="one row per rank"):
        Schedule(
            **{**ok, "pp": 2, "num_stages": 2, "stage_to_rank": (0, 1)},
            actions=ActionRows(good.packed, good.offsets),
        )
