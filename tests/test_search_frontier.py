"""The shared frontier tools (``workbench.search.frontier``): the Pareto mask against a brute-force O(n^2)
reference on random data with ties and NaNs, the divisors against the closed form of the divisor-count function,
and the tie band."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest

from workbench.search.frontier import TIE_FRAC, pareto_mask, tied_mask
from workbench.search.sizes import frontier_flags
from workbench.specs.degrees import divisors


def brute_force(cols: list[np.ndarray], maximise: list[bool], keep_duplicates: bool) -> np.ndarray:
    """The definition, row by row: i is off the frontier if some j is no worse on every objective and better on
    one (or, without keep_duplicates, an equal row with a lower index); a NaN row is off and beats nothing."""
    n = len(cols[0])
    rows = [tuple(c[i] if up else -c[i] for c, up in zip(cols, maximise, strict=True)) for i in range(n)]
    nan = [any(math.isnan(v) for v in r) for r in rows]
    out = []
    for i, ri in enumerate(rows):
        beaten = any(
            not nan[j]
            and all(a >= b for a, b in zip(rj, ri, strict=True))
            and (any(a > b for a, b in zip(rj, ri, strict=True)) or (not keep_duplicates and j < i))
            for j, rj in enumerate(rows)
            if j != i
        )
        out.append(not nan[i] and not beaten)
    return np.array(out, dtype=bool)


@pytest.mark.parametrize(("k", "keep"), list(product((1, 2, 3, 4), (False, True))))
def test_mask_equals_brute_force_on_random_data_with_ties_and_nans(k: int, keep: bool) -> None:
    rng = np.random.default_rng(100 * k + keep)
    for trial in range(40):
        n = int(rng.integers(1, 80))
        levels = int(rng.integers(2, 12))  # few levels: many ties on one objective and exact duplicates
        cols = [rng.integers(0, levels, n).astype(float) for _ in range(k)]
        if trial % 3 == 0:
            cols[int(rng.integers(k))][rng.random(n) < 0.15] = math.nan
        if trial % 5 == 0:
            cols[int(rng.integers(k))][rng.random(n) < 0.1] = -math.inf if trial % 2 else math.inf
        maximise = [bool(b) for b in rng.integers(0, 2, k)]
        got = pareto_mask(cols, maximise, keep_duplicates=keep)
        assert got.dtype == bool and got.shape == (n,)
        assert got.tolist() == brute_force(cols, maximise, keep).tolist(), (trial, cols, maximise)


def test_mask_on_continuous_data_and_with_more_rows_than_a_block() -> None:
    rng = np.random.default_rng(5)
    cols = [rng.normal(size=1500) for _ in range(3)]
    got = pareto_mask(cols, [True, False, True])
    assert got.tolist() == brute_force(cols, [True, False, True], False).tolist()
    a, b = rng.normal(size=3000), rng.normal(size=3000)
    assert pareto_mask((a, b), (False, False)).tolist() == brute_force([a, b], [False, False], False).tolist()


def test_mask_by_hand() -> None:
    tokens = np.array([10.0, 20.0, 20.0, 5.0, 30.0, 30.0])
    memory = np.array([1.0, 2.0, 3.0, 0.5, 9.0, 9.0])
    # (20, 3) loses to (20, 2); the second (30, 9) is a duplicate of the first
    assert pareto_mask((tokens, memory), (True, False)).tolist() == [True, True, False, True, True, False]
    assert pareto_mask((tokens, memory), (True, False), keep_duplicates=True)[5]
    assert pareto_mask(([], []), (True, False)).tolist() == []
    assert pareto_mask(([math.nan, 1.0],), (True,)).tolist() == [False, True]


def test_mask_refuses_mismatched_input() -> None:
    with pytest.raises(ValueError, match="one maximise flag each"):
        pareto_mask(([1.0], [2.0]), (True,))
    with pytest.raises(ValueError, match="one maximise flag each"):
        pareto_mask((), ())
    with pytest.raises(ValueError, match="1-D arrays of one length"):
        pareto_mask(([1.0, 2.0], [2.0]), (True, False))


def _factorise(n: int) -> dict[int, int]:
    """n = prod p^e as {p: e}, by trial division (independent of ``divisors``)."""
    out: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            n //= p
            out[p] = out.get(p, 0) + 1
        p += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


def _divisor_count(n: int) -> int:
    """d(n) = prod (e + 1), the divisor function's closed form."""
    return math.prod(e + 1 for e in _factorise(n).values())


def _divisor_sum(n: int) -> int:
    """sigma(n) = prod (p^(e + 1) - 1) / (p - 1), the divisor-sum closed form."""
    return math.prod((p ** (e + 1) - 1) // (p - 1) for p, e in _factorise(n).items())


def test_divisors_against_closed_forms() -> None:
    rng = np.random.default_rng(11)
    for n in [1, 2, 8, 12, 97, 1024, 720_720, 2**20, 1_048_573, *rng.integers(1, 2**20, 200).tolist()]:
        d = divisors(int(n))
        assert d == sorted(set(d)) and all(n % x == 0 for x in d)
        assert len(d) == _divisor_count(int(n)) and sum(d) == _divisor_sum(int(n))
    assert divisors(2**10) == [2**k for k in range(11)]  # a power of two: every smaller power
    assert len(divisors(720_720)) == 240  # 2^4 3^2 5 7 11 13: 5 x 3 x 2^4


def test_divisors_refuse_out_of_range() -> None:
    for bad in (0, -4, 2**20 + 1, 2.0, True):
        with pytest.raises(ValueError, match="n must be an integer in 1..1048576"):
            divisors(bad)  # type: ignore[arg-type]


def test_tie_band() -> None:
    best = 1000.0
    values = [best, best * (1 - TIE_FRAC), best * (1 - TIE_FRAC) - 1e-6, best * (1 + TIE_FRAC) + 1.0]
    assert tied_mask(values, best).tolist() == [True, True, False, False]
    assert tied_mask([-990.0, -1100.0], -1000.0).tolist() == [
        True,
        False,
    ]  # lower-is-better objectives negated


def test_size_frontier_keeps_ties_and_skips_missing_sizes() -> None:
    # (time, cost) per node count: equal pairs are both on; a size without a plan is off and beats nothing
    times = [10.0, 5.0, None, 10.0, 12.0, 5.0]
    costs = [100.0, 200.0, 1.0, 100.0, 100.0, None]
    assert frontier_flags(times, costs) == [True, True, False, True, False, False]
    with pytest.raises(ValueError, match="2 times but 1 costs"):
        frontier_flags([1.0, 2.0], [1.0])
