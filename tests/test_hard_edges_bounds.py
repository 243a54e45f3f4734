"""Bounded work (issue 52): the mixed-pool layouts are enumerated once up to the symmetry between identical pools
and refused beyond ``MAX_MIXED_LAYOUTS`` with the size of the work; the plan header's plans/s is CPU time."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from workbench.presets.catalog import load_model
from workbench.presets.pools import load_mixed_cluster
from workbench.search.mixed.layouts import (
    Layout,
    identical_groups,
    layouts,
    num_tp_assignments,
    tp_assignments,
    tp_choices,
)
from workbench.search.mixed.planner import MixedOptions, plan_mixed
from workbench.specs.plan import Workload

MODEL = "llama-3.1-8b"
WORKLOAD = Workload(seq_len=4096, global_batch_size=64)
OPTS = MixedOptions(micro_batch_sizes=(1,), zero_stages=(0,), recompute=("none",), schedules=("1f1b",))


def _key(lay: Layout, kind: dict[int, int]) -> tuple:
    """What a layout is up to renaming identical pools: the kinds, tps and stages along the pipeline."""
    return (
        tuple(kind[k] for k in lay.order),
        lay.tps,
        lay.stages,
        lay.dp,
        lay.micro_batch_size,
        lay.zero_stage,
        lay.recompute,
        lay.schedule,
    )


def _brute_force(mixed, model, opts) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """Every (order, tps in pool order, dp) of the plain product, the enumeration before issue 52."""
    pools = mixed.pools
    tps = [tp_choices(model, p, opts.tp) for p in pools]
    g = math.gcd(*(p.num_devices for p in pools))
    out = []
    for dp in [d for d in range(1, g + 1) if g % d == 0]:
        for tp_set in itertools.product(*tps):
            if any(p.num_devices % (dp * t) for p, t in zip(pools, tp_set, strict=True)):
                continue
            stages = [p.num_devices // (dp * t) for p, t in zip(pools, tp_set, strict=True)]
            if sum(stages) > min(model.num_layers, opts.max_pp):
                continue
            for order in itertools.permutations(range(len(pools))):
                out.append((order, tuple(tp_set[k] for k in order), tuple(stages[k] for k in order), dp))
    return out


@pytest.mark.parametrize("spec", ["dgx-h100:1+dgx-h100:1+dgx-h100:1", "dgx-h100:1+dgx-a100:1+dgx-h100:1"])
def test_layouts_cover_every_distinct_layout_once(spec: str) -> None:
    model, mixed = load_model(MODEL), load_mixed_cluster(spec)
    kind = {k: i for i, g in enumerate(identical_groups(mixed.pools)) for k in g}
    got = [_key(lay, kind) for lay in layouts(mixed, model, WORKLOAD, OPTS)]
    want = {
        (tuple(kind[k] for k in order), tps, stages, dp, 1, 0, "none", "1f1b")
        for order, tps, stages, dp in _brute_force(mixed, model, OPTS)
    }
    assert len(got) == len(set(got)), "a layout is yielded twice"
    assert set(got) == want
    assert len(_brute_force(mixed, model, OPTS)) > len(got)  # the symmetry saved work


def test_tp_assignments_count_multisets_per_group() -> None:
    groups, tps = [[0, 1, 2, 3, 4, 5]], [[1, 2, 4, 8]] * 6
    got = list(tp_assignments(groups, tps))
    assert len(got) == num_tp_assignments(groups, tps) == 84  # C(4 + 6 - 1, 6)
    assert len({tuple(sorted(t)) for t in got}) == 84  # each multiset once


def test_six_identical_pools_are_planned() -> None:
    spec = "+".join(["dgx-h100:1"] * 6)
    result = plan_mixed(load_model(MODEL), load_mixed_cluster(spec), WORKLOAD, options=OPTS)
    assert result.num_layouts > 0 and result.best is not None


def test_too_many_layouts_are_refused_with_the_size_of_the_work() -> None:
    spec = "+".join(["dgx-h100:1", "dgx-a100:1", "dgx-h100:2", "dgx-a100:2"] * 4)  # 16 pools, 4 kinds
    with pytest.raises(ValueError, match=r"more than 40,000 pipeline layouts .*MAX_MIXED_LAYOUTS"):
        plan_mixed(load_model(MODEL), load_mixed_cluster(spec), Workload(seq_len=4096, global_batch_size=256))


def test_plan_header_reports_cpu_time(capsys: pytest.CaptureFixture[str]) -> None:
    from workbench_cli import main

    args = [
        "plan",
        "--model",
        MODEL,
        "--cluster",
        "dgx-h100",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--top",
        "0",
    ]
    main(args)
    out = capsys.readouterr().out
    assert "plans per CPU-s; wall" in out
    main([*args, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["screen_cpu_s"] > 0
    assert doc["plans_per_s"] == pytest.approx(doc["num_plans"] / doc["screen_cpu_s"])
    assert doc["plans_per_wall_s"] == pytest.approx(doc["num_plans"] / doc["screen_s"])


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from workbench_cli import main

    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "limit"),
    [(["serve", "estimate"], 2**20), (["serve", "plan", "--ttft-slo-ms", "500"], 2**15)],
)
def test_serving_request_counts_are_bounded_to_a_minute(
    command: list[str], limit: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from workbench.specs import limits

    assert (limits.MAX_SIMULATED_REQUESTS, limits.MAX_SERVE_PLAN_REQUESTS) == (2**20, 2**15)
    args = [
        *command,
        "--model",
        MODEL,
        "--cluster",
        "dgx-h100",
        "--input-tokens",
        "128",
        "--output-tokens",
        "16",
    ]
    code, err = _cli([*args, "--num-requests", str(limit + 1)], capsys)
    assert code == 2 and "--num-requests" in err and f"1<=x<={limit}" in err


def test_a_trace_longer_than_the_bound_stops_reading(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.serving import requests as requests_mod

    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i},8,4\n" for i in range(5)))
    assert len(requests_mod.Requests.from_trace_csv(trace).arrival_s) == 5
    monkeypatch.setattr(requests_mod, "MAX_SIMULATED_REQUESTS", 3)
    with pytest.raises(
        ValueError, match=r"trace.csv:5: more than 3 requests; at most 3 \(MAX_SIMULATED_REQUESTS"
    ):
        requests_mod.Requests.from_trace_csv(trace)
