"""What lets the screen price fewer rows: layer costs shared between plans that differ only in columns a layer
does not read, and the bound on tokens/s that skips plans which cannot reach the pools. Both must leave every
screened number as it was; these tests check that against the unshared, unskipped computation."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost import step
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.search import Constraints, grid, screen
from workbench.search.run import screen_all
from workbench.search.space import build_space
from workbench.specs.plan import Workload

CASES = {
    "llama-70b": ("llama-3.1-70b", "dgx-h100", 4, 4096, 128, Constraints()),
    # 61 layers (uneven stages), 3 dense layers, MTP, 256 experts; a narrowed space keeps it small
    "deepseek-v3": (
        "deepseek-v3",
        "hgx-h800",
        16,
        4096,
        1024,
        Constraints(micro_batch_sizes=(1,), zero_stages=(0, 1), rank_orders=("tp-cp-ep-dp-pp",)),
    ),
}


def _valid_columns(key: str, limit: int = 60_000) -> tuple[screen.ScreenContext, dict[str, np.ndarray]]:
    """The plans of case ``key`` that break no rule (at most ``limit``, spread over the space)."""
    name, cluster_name, nodes, seq, batch, constraints = CASES[key]
    model, cluster = load_model(name), load_cluster(cluster_name, num_nodes=nodes)
    workload, cal = (
        Workload(seq_len=seq, global_batch_size=batch),
        load_calibration("default", framework="generic"),
    )
    space = build_space(model, cluster, constraints)
    ctx = screen.ScreenContext.build(model, cluster, workload, cal, space)
    cols = grid.rule_columns(space, 0, len(space.layout["tp"]), batch)
    cols["num_devices"] = np.full(len(cols["tp"]), cluster.num_devices)
    reasons = grid.rule_reasons(
        cols, model, workload, space.schedule_names, uneven_stages=cal.framework.uneven_stages
    )
    valid = grid.expand(space, {k: v[reasons < 0] for k, v in cols.items()})
    pick = np.unique(np.linspace(0, len(valid["tp"]) - 1, min(limit, len(valid["tp"]))).astype(np.int64))
    return ctx, {k: v[pick] for k, v in valid.items()}


def _assert_same(a: object, b: object) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    elif a is None:
        assert b is None
    else:
        np.testing.assert_array_equal(np.broadcast_to(a, np.shape(b)), b)


@pytest.mark.parametrize("key", list(CASES))
def test_layer_costs_read_only_the_columns_they_declare(key):
    """Shuffling every other column across the plans leaves each plan's ``layer_pair`` and
    ``activation_sizes`` (and ``peak_terms``) as they were."""
    ctx, cols = _valid_columns(key, limit=5_000)
    rng = np.random.default_rng(0)
    for partial in (False, True):
        if partial:  # plans recomputing only some layers read pp, vpp and the count too
            cols = {**cols, "recompute_layers": rng.integers(0, 4, len(cols["tp"]))}
        names = step.layer_columns(cols)
        assert names is not None and ("pp" in names) == partial
        shuffled = {k: (v if k in names else rng.permutation(v)) for k, v in cols.items()}
        assert any(not np.array_equal(shuffled[k], cols[k]) for k in ("dp", "zero_stage", "schedule_code"))
        _assert_same(step.layer_pair(ctx.step_ctx, cols), step.layer_pair(ctx.step_ctx, shuffled))
        _assert_same(step.activation_sizes(ctx.step_ctx, cols), step.activation_sizes(ctx.step_ctx, shuffled))
    # the closed-form pipeline peak reads only its own four columns
    shuffled = {k: (v if k in screen.PEAK_COLUMNS else rng.permutation(v)) for k, v in cols.items()}
    _assert_same(screen.peak_terms(ctx, cols), screen.peak_terms(ctx, shuffled))


@pytest.mark.parametrize("key", list(CASES))
def test_shared_layer_costs_equal_the_per_plan_ones(key, monkeypatch):
    ctx, cols = _valid_columns(key, limit=20_000)
    first, inverse = screen.distinct_rows(cols, step.layer_columns(cols))
    assert len(first) * 2 <= len(cols["tp"])  # fewer layer costs than plans (zero stages alone: half)
    pair, fsdp = screen.layer_terms(ctx, cols)
    _assert_same(pair, step.layer_pair(ctx.step_ctx, cols))
    # and the memory screen, which shares the activation sizes and the pipeline peak terms the same way:
    # the same peaks with every plan worked out on its own
    shared = screen.screen_memory(ctx, cols)["peak_memory_bytes"]
    monkeypatch.setattr(screen, "shared_by", lambda fn, plans, names: fn(plans))
    unshared = screen.screen_memory(ctx, cols)["peak_memory_bytes"]
    np.testing.assert_array_equal(shared, unshared)


def test_distinct_rows_groups_equal_rows_and_falls_back_past_int64():
    rng = np.random.default_rng(1)
    n = 1_000
    cols = {
        "tp": rng.integers(0, 3, n),
        "flag": rng.integers(0, 2, n).astype(bool),
        "big": rng.integers(0, 4, n),
    }
    for big in (rng.integers(0, 4, n), rng.integers(0, 4, n) * (1 << 60)):  # the second: past int64
        cols["big"] = big
        first, inverse = screen.distinct_rows(cols, ("tp", "flag", "big"))
        for k in cols:
            np.testing.assert_array_equal(cols[k][first][inverse], cols[k])
        assert len(first) == len(
            {(a, b, c) for a, b, c in zip(cols["tp"], cols["flag"], cols["big"], strict=True)}
        )
    assert screen.distinct_rows({**cols, "x": np.linspace(0, 1, n)}, ("tp", "x")) is None


@pytest.mark.parametrize("key", list(CASES))
def test_the_tokens_bound_is_never_below_the_priced_throughput(key):
    """Every schedule family, both edge ranks and (DeepSeek-V3) uneven stages: the bound holds plan by plan,
    and it is no empty promise (the best plans come within a factor of two of it)."""
    ctx, cols = _valid_columns(key)
    cols = {k: v[cols["num_microbatches"] > 0] for k, v in cols.items()}
    layers = screen.layer_terms(ctx, cols)
    bound = screen.tokens_per_s_bound(ctx, cols, layers)
    priced = screen.screen_time(ctx, cols, layers)["tokens_per_s"]
    assert np.all(priced <= bound * (1 + 1e-12))
    assert len(set(cols["schedule_code"].tolist())) == len(ctx.schedule_names)
    assert np.max(priced / bound) > 0.5


@pytest.mark.parametrize(("objective", "nodes"), [("throughput", (4,)), ("cost", (2, 4))])
def test_skipping_hopeless_plans_changes_no_pool(objective, nodes):
    """Small chunks (pools full early, many plans skipped) give the pools of one chunk (nothing skipped),
    partial-recompute variants included (the default stack makes them)."""
    model = load_model("llama-3.1-70b")
    clusters = [load_cluster("dgx-h100", num_nodes=n) for n in nodes]
    workload, cal = (
        Workload(seq_len=4096, global_batch_size=128),
        load_calibration("default", framework="generic"),
    )
    assert cal.framework.partial_recompute

    def run(chunk: int):
        return screen_all(
            model, clusters, workload, Constraints(), calibration=cal, objective=objective, chunk_plans=chunk
        )

    whole, small = run(1 << 24), run(20_000)
    assert whole.num_skipped == 0 and small.num_skipped > 1_000
    assert small.num_feasible == whole.num_feasible and small.rejections == whole.rejections
    assert set(whole.best) == set(small.best) and set(whole.frontier) == set(small.frontier)
    # plans of equal score may swap places where the pools are cut (chunk order), never the scores
    np.testing.assert_array_equal(whole.best["tokens_per_s"], small.best["tokens_per_s"])
    above = [set(_rows(p, p["tokens_per_s"] > p["tokens_per_s"].min())) for p in (whole.best, small.best)]
    assert above[0] == above[1] and len(above[0]) > 100
    assert set(_rows(whole.frontier)) == set(_rows(small.frontier))
    np.testing.assert_array_equal(whole.misses["memory_frac"], small.misses["memory_frac"])
    assert np.any(whole.best["recompute_layers"] > 0)


def _rows(pool: dict[str, np.ndarray], mask: np.ndarray | None = None) -> list[tuple]:
    keep = np.ones(len(pool["tp"]), dtype=bool) if mask is None else mask
    names = sorted(pool)
    return list(zip(*(pool[k][keep].tolist() for k in names), strict=True))
