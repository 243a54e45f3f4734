"""The greedy zero-bubble builder (``workbench.pipeline.schedules.greedy``) gives, action for action, the rows its
previous implementation gave: SHA-256 prefixes of the rows as ``stage op micro-batch`` text, computed with the
implementation of commit b41a62d (before its candidates became tuples) on these shapes."""

from __future__ import annotations

import hashlib

import pytest

from workbench.pipeline.schedules.greedy import greedy_zero_bubble

GOLDEN = {
    (4, 8, 1, 4): "cef57d7ebbd2cbd6",
    (8, 32, 2, 9): "45b250b9ec7aa4e9",
    (16, 64, 2, 17): "8c32b0093269059c",
    (32, 256, 1, 32): "ff87091e2c918631",
}


@pytest.mark.parametrize(("pp", "m", "v", "cap"), list(GOLDEN))
def test_greedy_rows_are_unchanged(pp: int, m: int, v: int, cap: int) -> None:
    stages = list(range(pp)) if v == 1 else [*range(pp), *reversed(range(pp))]  # V placement for v = 2
    rows = greedy_zero_bubble(stage_to_rank=stages, num_microbatches=m, cap_chunks=[cap] * pp)
    text = "\n".join(",".join(f"{a.stage}{a.op}{a.microbatch}" for a in r) for r in rows)
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == GOLDEN[(pp, m, v, cap)]
