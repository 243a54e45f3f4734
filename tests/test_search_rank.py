"""Objectives, best-k and the Pareto frontier against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.search.rank import best_indices, check_objective, objective_columns, pareto_mask, score


def _pareto_brute(t, m):
    keep = []
    for i in range(len(t)):
        dominated = any(
            (t[j] >= t[i] and m[j] <= m[i]) and (t[j] > t[i] or m[j] < m[i]) for j in range(len(t))
        )
        keep.append(not dominated)
    return np.array(keep)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=40, unique=True))
def test_pareto_mask_equals_brute_force(points):
    t = np.array([p[0] for p in points], dtype=float)
    m = np.array([p[1] for p in points], dtype=float)
    assert pareto_mask(t, m).tolist() == _pareto_brute(t, m).tolist()


def test_best_indices_are_the_k_largest_in_order():
    rng = np.random.default_rng(1)
    values = rng.normal(size=1000)
    got = best_indices(values, 25)
    assert got.tolist() == np.argsort(-values, kind="stable")[:25].tolist()
    assert best_indices(values[:3], 10).tolist() == np.argsort(-values[:3]).tolist()


def test_objectives_follow_their_definitions():
    tps = np.array([1e6, 2e6])
    cols = objective_columns(tps, np.array([1024, 4096]), token_budget=1e12)
    assert cols["time_to_train_s"].tolist() == [1e6, 5e5]
    assert cols["device_hours"].tolist() == pytest.approx([1e6 * 1024 / 3600, 5e5 * 4096 / 3600])
    both = {"tokens_per_s": tps, **cols}
    assert best_indices(score(both, "throughput"), 1).tolist() == [1]
    assert best_indices(score(both, "cost"), 1).tolist() == [
        0
    ]  # the smaller cluster spends fewer device-hours
    with pytest.raises(ValueError, match="valid: throughput, time, cost"):
        check_objective("speed")
