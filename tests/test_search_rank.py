"""Objectives and best-k against brute force (the Pareto mask: ``test_search_frontier``)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.search.rank import best_indices, check_objective, objective_columns, score


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
