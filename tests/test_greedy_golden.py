"""The greedy zero-bubble builders (``workbench.pipeline.schedules.greedy``) give, action for action, the rows the
rule's first implementation gave: SHA-256 prefixes of the rows as ``stage op micro-batch`` text, computed with the
implementation of commit b41a62d (before its candidates became tuples) on these shapes. The array builder
(``greedy_zero_bubble_arrays``, counters instead of finish steps, issue 52) equals the readable one on 1,500+
shapes: placements of one, two and three stages per rank, uniform and uneven caps, few and many micro-batches."""

from __future__ import annotations

import hashlib
import itertools
import random
import re

import numpy as np
import pytest

from workbench.pipeline.schedules import build_schedule, greedy
from workbench.pipeline.schedules.actions import OPS, decoded_rows
from workbench.pipeline.schedules.greedy import greedy_zero_bubble, greedy_zero_bubble_arrays

GOLDEN = {
    (4, 8, 1, 4): "cef57d7ebbd2cbd6",
    (8, 32, 2, 9): "45b250b9ec7aa4e9",
    (16, 64, 2, 17): "8c32b0093269059c",
    (32, 256, 1, 32): "ff87091e2c918631",
}


def _digest(rows) -> str:  # type: ignore[no-untyped-def]
    text = "\n".join(",".join(f"{a.stage}{a.op}{a.microbatch}" for a in r) for r in rows)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize(("pp", "m", "v", "cap"), list(GOLDEN))
def test_greedy_rows_are_unchanged(pp: int, m: int, v: int, cap: int) -> None:
    stages = list(range(pp)) if v == 1 else [*range(pp), *reversed(range(pp))]  # V placement for v = 2
    kwargs = {"stage_to_rank": stages, "num_microbatches": m, "cap_chunks": [cap] * pp}
    assert _digest(greedy_zero_bubble(**kwargs)) == GOLDEN[(pp, m, v, cap)]
    packed = greedy_zero_bubble_arrays(**kwargs)
    assert _digest(decoded_rows(packed.packed, packed.offsets)) == GOLDEN[(pp, m, v, cap)]


def _placements(pp: int, rng: random.Random) -> list[list[int]]:
    """Looping (1 and 2 stages per rank), V, shuffled ranks with 1 and 2 stages, one rank with two, and 3 stages
    per rank or a rank without any (the array builder's fallback)."""
    shuffled = [list(range(pp)), list(range(pp)) * 2]
    for order in shuffled:
        rng.shuffle(order)
    return [
        list(range(pp)),
        list(range(pp)) * 2,
        [*range(pp), *reversed(range(pp))],
        *shuffled,
        [*range(pp), 0],  # rank 0 holds two stages, the others one
        list(range(pp)) * 3,
        [*range(pp - 1), 0] if pp > 1 else [0],  # the last rank holds none
    ]


def _cases() -> list[tuple[list[int], int, list[int]]]:
    """Distinct (placement, micro-batches, caps)."""
    rng = random.Random(52)
    out: list[tuple[list[int], int, list[int]]] = []
    for pp in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12):
        for stages in _placements(pp, rng):
            floor = 1 if len(stages) == pp else 2
            for m, cap in itertools.product(
                (1, 2, 3, pp, 2 * pp + 1, 4 * pp), (floor, floor + 1, pp, 2 * pp)
            ):
                out.append((stages, m, [max(cap, floor)] * pp))
            for _ in range(6):  # uneven caps
                caps = [rng.randint(floor, 2 * pp + 1) for _ in range(pp)]
                out.append((stages, rng.randint(1, 5 * pp), caps))
    distinct = {(tuple(s), m, tuple(c)): (s, m, c) for s, m, c in out}
    return list(distinct.values())


def test_array_builder_equals_the_readable_one_on_many_shapes() -> None:
    cases = _cases()
    assert len(cases) > 1500
    stuck: list[tuple[list[int], int, list[int]]] = []
    for stages, m, caps in cases:
        kwargs = {"stage_to_rank": stages, "num_microbatches": m, "cap_chunks": caps}
        try:
            rows = greedy_zero_bubble(**kwargs)
        except ValueError as exc:  # a cap too small for the placement: the same refusal
            stuck.append((stages, m, caps))
            with pytest.raises(ValueError, match=re.escape(str(exc))):
                greedy_zero_bubble_arrays(**kwargs)
            continue
        built = greedy_zero_bubble_arrays(**kwargs)
        expected = [(a.stage, OPS.index(a.op), a.microbatch) for row in rows for a in row]
        assert built.packed.tolist() == [list(e) for e in expected], (stages, m, caps)
        offsets = list(itertools.accumulate(map(len, rows), initial=0))
        assert built.offsets.tolist() == offsets, (stages, m, caps)
    uniform = [s for s, _, caps in stuck if len(set(s)) == len(caps) and len(s) in (len(caps), 2 * len(caps))]
    assert not uniform  # every rank holding one stage, or two: never stalls (the registered schedules)
    assert len(stuck) < len(cases) // 4


@pytest.mark.parametrize(("name", "pp", "m"), [("zb-h2", 16, 64), ("v-half", 12, 72), ("v-min", 24, 48)])
def test_registered_schedules_at_plan_size_equal_the_readable_rule(name: str, pp: int, m: int) -> None:
    """Beyond the small shapes above: the registry's array builds at sizes a plan refines."""
    built = build_schedule(name, pp=pp, num_microbatches=m)
    stages = built.stage_to_rank
    caps = (
        [2 * pp - 1] * pp
        if name == "zb-h2"
        else [2 * ((pp + 2) // 2 if name == "v-half" else (pp + 4) // 3)] * pp
    )
    rows = greedy_zero_bubble(stage_to_rank=stages, num_microbatches=m, cap_chunks=caps)
    assert tuple(built.actions) == tuple(tuple(r) for r in rows)
    assert np.array_equal(built.rank_offsets, np.cumsum([0, *map(len, rows)]))


def test_array_builder_refuses_a_cap_too_small_as_the_readable_one_does() -> None:
    for stages, caps in (([0, 1], [0, 1]), ([0, 1, 1, 0], [2, 1])):
        with pytest.raises(ValueError, match="cap_chunks must be >= "):
            greedy_zero_bubble_arrays(stage_to_rank=stages, num_microbatches=4, cap_chunks=caps)


def test_repeated_steady_state_equals_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """One stage per rank: the array builder repeats the period it finds (``greedy._SteadyState``); the rows
    equal the readable rule's where it does, on ZB-H2's caps and others, looping and shuffled placements."""
    repeated = []
    rows_of = greedy._SteadyState.rows
    monkeypatch.setattr(
        greedy._SteadyState, "rows", lambda self: repeated.append(self.repeats is not None) or rows_of(self)
    )
    rng = random.Random(6)
    for pp, m_per_pp in itertools.product((2, 3, 4, 6, 8, 12, 16), (3, 4, 8, 11)):
        stages = list(range(pp))
        rng.shuffle(stages)
        for placement, cap in itertools.product((list(range(pp)), stages), (2 * pp - 1, pp, pp + 2)):
            kwargs = {"stage_to_rank": placement, "num_microbatches": m_per_pp * pp, "cap_chunks": [cap] * pp}
            built = greedy_zero_bubble_arrays(**kwargs)
            rows = greedy_zero_bubble(**kwargs)
            assert decoded_rows(built.packed, built.offsets) == rows, kwargs
    assert sum(repeated) > len(repeated) // 2  # most of these shapes do repeat a period
