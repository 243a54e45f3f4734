"""Partial recompute (``ParallelPlan.recompute_num_layers``, Megatron's block method): the share of layers it
recomputes, its step time, activation memory and HFU against closed forms, the torch-profile backend's
measured blocks, the plan's and the framework profiles' refusals, and the CLI flag."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.test_profile_table import SPEC, _write
from tests.test_torch_profile_backend import _cluster
from workbench.cost.memory import RECOMPUTE_CODES, layer_activation_bytes
from workbench.cost.step import StepContext, plan_columns, recompute_share, tokens
from workbench.estimate.analytic import estimate_plan
from workbench.estimate.registry import get_backend
from workbench.pipeline.schedules import uses_v_placement
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.search import Constraints, grid, screen, search
from workbench.search.refine import plan_from_row
from workbench.search.result import rows_from_pool
from workbench.search.space import build_space
from workbench.specs.plan import ParallelPlan, Workload

MODEL = load_model("llama-3.1-8b")  # 32 layers
CLUSTER = load_cluster("dgx-h100", num_nodes=1)
WORKLOAD = Workload(seq_len=4096, global_batch_size=64)


def _plan(n: int | None, **kw: object) -> ParallelPlan:
    base = {"dp": 8, "micro_batch_size": 1, "zero_stage": 1, "recompute": "full", "recompute_num_layers": n}
    return ParallelPlan(**{**base, **kw})  # type: ignore[arg-type]


def _share(plan: ParallelPlan) -> float:
    return float(recompute_share(MODEL, plan_columns(plan, WORKLOAD)))


def test_share_is_n_over_the_layers_of_a_chunk() -> None:
    assert _share(_plan(8)) == pytest.approx(8 / 32)
    # pp 4 x vpp 2 = 8 chunks of 4 layers: 3 of each chunk is 3/4 of the layers; 4 or more is every layer
    piped = {"dp": 2, "pp": 4, "vpp": 2, "schedule": "interleaved-1f1b"}
    assert _share(_plan(3, **piped)) == pytest.approx(3 / 4)
    assert _share(_plan(4, **piped)) == _share(_plan(9, **piped)) == _share(_plan(None, **piped)) == 1.0
    assert _share(replace(_plan(None), recompute="selective")) == 0.0
    assert _share(replace(_plan(None), recompute="none")) == 0.0


def test_step_time_is_linear_in_the_recomputed_layers() -> None:
    """pp = 1: every layer adds its forward once more when recomputed, so the step is the no-recompute step
    plus N/L of what recomputing every layer adds."""
    none = estimate_plan(MODEL, CLUSTER, WORKLOAD, replace(_plan(None), recompute="none"))
    full = estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(None))
    for n in (1, 8, 16, 31):
        part = estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(n))
        expected = none.breakdown.compute_s + n / 32 * (full.breakdown.compute_s - none.breakdown.compute_s)
        assert part.breakdown.compute_s == pytest.approx(expected, rel=1e-9)
        assert part.plan.describe().endswith(f"rc-full{n}")
    assert estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(32)).step_time_s == pytest.approx(full.step_time_s)


def test_each_kept_layer_stores_its_activations_instead_of_its_input() -> None:
    """Recomputing k fewer layers stores k x (a layer's activations without recompute - its input) more:
    Korthikanti et al. 2022 (arXiv:2205.05198) section 4 for the layer, tokens x hidden x 2 bytes (tp 1, no
    sequence parallelism) for the input full recompute keeps."""
    cols = plan_columns(_plan(8), WORKLOAD)
    ctx = StepContext.build(MODEL, CLUSTER, WORKLOAD, load_calibration("default", framework="generic"))
    kw = {"tokens": tokens(ctx, cols), "seq_len": WORKLOAD.seq_len, "tp": 1, "sequence_parallel": False}
    kept = float(layer_activation_bytes(ctx.dense_parts, recompute=RECOMPUTE_CODES["none"], **kw))
    layer_input = float(layer_activation_bytes(ctx.dense_parts, recompute=RECOMPUTE_CODES["full"], **kw))
    assert layer_input == pytest.approx(1 * 4096 * MODEL.hidden_size * 2)
    act = {
        n: float(estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(n)).memory["activations_bytes"][0])
        for n in (8, 16, 24)
    }
    assert act[8] - act[16] == pytest.approx(8 * (kept - layer_input), rel=1e-9)
    assert act[16] - act[24] == pytest.approx(8 * (kept - layer_input), rel=1e-9)


def test_hfu_counts_only_the_recomputed_layers() -> None:
    """Megatron's hardware FLOPs (Narayanan et al. 2021, eq. 3): each recomputed layer adds its forward, 2 x its
    parameters plus a third of its attention FLOPs per token."""
    part = estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(8))
    layers = MODEL.non_embedding_active_parameters() - MODEL.lm_head_parameters()
    extra = 8 / 32 * (2 * layers + MODEL.attention_flop_per_token(WORKLOAD.seq_len) / 3)
    hardware = (MODEL.model_flop_per_token(WORKLOAD.seq_len) + extra) * WORKLOAD.tokens_per_step
    peak = CLUSTER.device.peak(WORKLOAD.dtype)
    assert part.hfu == pytest.approx(hardware / part.step_time_s / 8 / peak, rel=1e-9)


def test_torch_profile_recomputes_the_share_of_its_measured_blocks(tmp_path: Path) -> None:
    """The synthetic profile: embedding, 2 blocks and the head, each F = 1.2 ms, B = 2.4 ms and 1000 bytes of
    activations; 4 micro-batches of one rank. Recomputing 1 of the 2 blocks adds one block forward per
    micro-batch and keeps one block's input instead of its 1000 bytes."""
    _write(tmp_path)
    wl = Workload(seq_len=128, global_batch_size=4, dtype="fp32")
    plan = ParallelPlan(recompute="full", recompute_num_layers=1)
    est = get_backend("torch-profile", profile=str(tmp_path)).estimate(SPEC, _cluster(1), wl, plan)
    optimizer_s = SPEC.total_parameters() * 1e-8
    assert est.step_time_s == pytest.approx(4 * (4 * 3.6e-3 + 1.2e-3) + optimizer_s)
    layer_input = 128 * SPEC.hidden_size * 4  # fp32
    assert est.memory["activations_bytes"][0] == pytest.approx(3 * 1000 + layer_input + 1000)


def test_refusals_name_the_field_and_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="recompute_num_layers=4 needs recompute full"):
        ParallelPlan(recompute="selective", recompute_num_layers=4)
    with pytest.raises(ValueError, match="recompute_num_layers"):
        ParallelPlan(recompute="full", recompute_num_layers=0)
    foundry, fsdp = load_framework("llm-foundry-2023"), _plan(4, zero_stage=3)
    assert foundry.unsupported(fsdp) == ["recompute_num_layers=4 (recomputes every layer or none)"]
    assert foundry.admitting(fsdp).partial_recompute
    cal = replace(load_calibration("default", framework="generic"), framework=foundry)
    with pytest.raises(ValueError, match="llm-foundry-2023 does not run: recompute_num_layers=4"):
        estimate_plan(MODEL, CLUSTER, WORKLOAD, fsdp, calibration=cal)
    assert load_framework("megatron-core-2024").partial_recompute


def test_screen_plans_recompute_every_layer() -> None:
    """The planner's columns carry no recompute_layers: full recompute there means every layer."""
    cols = {k: np.atleast_1d(v) for k, v in plan_columns(_plan(None), WORKLOAD).items()}
    del cols["recompute_layers"]
    assert recompute_share(MODEL, cols)[0] == 1.0


def test_cli_flag(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    args = ["estimate", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1"]
    args += ["--micro-batch", "1", "--global-batch", "64", "--seq-len", "4096", "--zero", "1"]
    out = workbench_cli(*args, "--recompute", "full", "--recompute-num-layers", "8", check=True)
    assert "rc-full8" in out.stdout
    bad = workbench_cli(*args, "--recompute", "none", "--recompute-num-layers", "8")
    assert bad.returncode != 0 and "needs recompute full" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


AGREEMENT_CASES = [
    ("llama-3.1-70b", "dgx-h100", 8, 8192, 256, 0),
    ("llama-3.1-8b", "dgx-h100", 1, 8192, 64, 1),
    ("mixtral-8x7b", "dgx-h100", 4, 4096, 256, 3),
]


@pytest.mark.parametrize(("model_id", "cluster_id", "nodes", "seq", "batch", "seed"), AGREEMENT_CASES)
def test_screen_prices_partial_recompute_as_the_estimate(model_id, cluster_id, nodes, seq, batch, seed):
    """Random valid plans with full recompute of a random count of layers per chunk: the screen's time and
    memory against the full estimate, with the tolerances of ``test_search_agreement`` (the pipeline's closed
    forms are the only difference) and exact agreement without a pipeline."""
    model, cluster = load_model(model_id), load_cluster(cluster_id, num_nodes=nodes)
    workload, cal = (
        Workload(seq_len=seq, global_batch_size=batch),
        load_calibration("default", framework="generic"),
    )
    space = build_space(model, cluster, Constraints(recompute=("full",)))
    ctx = screen.ScreenContext.build(model, cluster, workload, cal, space)
    cols = grid.rule_columns(space, 0, len(space.layout["tp"]), workload.global_batch_size)
    ok = grid.rule_reasons(cols, model, workload, space.schedule_names) < 0
    plans = grid.expand(space, {k: v[ok] for k, v in cols.items()})
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(plans["tp"]), size=min(30, len(plans["tp"])), replace=False)
    sample = {k: v[pick] for k, v in plans.items()}
    chunk = model.num_layers // (sample["pp"] * sample["vpp"])
    sample["recompute_layers"] = np.maximum(1, (rng.random(len(pick)) * chunk).astype(np.int64))
    sample["num_devices"] = np.full(len(pick), cluster.num_devices)
    sample["num_nodes"] = np.full(len(pick), cluster.num_nodes)
    sample.update(screen.screen_memory(ctx, sample))
    sample.update(screen.screen_time(ctx, sample))
    for row in rows_from_pool(sample, space.schedule_names, cluster.device.hbm_bytes):
        plan = plan_from_row(row)
        assert plan.recompute_num_layers == row["recompute_num_layers"] >= 1
        est = estimate_plan(model, cluster, workload, plan, calibration=cal)
        t = abs(row["step_time_s"] / est.step_time_s - 1)
        m = abs(row["peak_memory_bytes"] / est.peak_memory_bytes - 1)
        if row["pp"] == 1:
            assert t <= 1e-9 and m <= 1e-9, (row["plan"], t, m)
        else:
            assert m <= (0.05 if row["num_microbatches"] >= row["pp"] else 0.10), (row["plan"], m)
            if row["num_microbatches"] >= 2 * row["pp"]:
                assert t <= (0.08 if uses_v_placement(row["schedule"]) else 0.05), (row["plan"], t)


def test_trimmed_variants_recompute_the_fewest_layers_that_fit() -> None:
    """Llama 3.1 8B on one DGX H100 at seq 8192 (none of the pp = 1 plans fits without recompute at 16 GiB
    headroom): each variant the screen adds fits under the limit by the full estimate, and with one recomputed
    layer fewer it does not; its time lies between recomputing none and all of its layers."""
    cal = load_calibration("default", framework="generic")
    wl = Workload(seq_len=8192, global_batch_size=64)
    space = build_space(MODEL, CLUSTER, Constraints(fixed={"pp": 1}, recompute=("full",)))
    ctx = screen.ScreenContext.build(MODEL, CLUSTER, wl, cal, space)
    cols = grid.rule_columns(space, 0, len(space.layout["tp"]), wl.global_batch_size)
    ok = grid.rule_reasons(cols, MODEL, wl, space.schedule_names) < 0
    plans = grid.expand(space, {k: v[ok] for k, v in cols.items()})
    plans["num_devices"] = np.full(len(plans["tp"]), CLUSTER.num_devices)
    plans["num_nodes"] = np.full(len(plans["tp"]), 1)
    plans.update(screen.screen_memory(ctx, plans))
    limit = 64 * 2**30
    fitting = {k: v[plans["peak_memory_bytes"] <= limit] for k, v in plans.items()}
    trimmed = screen.trimmed_recompute(ctx, fitting, limit)
    assert len(trimmed["tp"]) >= 3
    for row in rows_from_pool(trimmed, space.schedule_names, CLUSTER.device.hbm_bytes)[:6]:
        plan = plan_from_row(row)
        n = plan.recompute_num_layers
        assert n is not None and 1 <= n < 32
        est = estimate_plan(MODEL, CLUSTER, wl, plan, calibration=cal)
        assert est.peak_memory_bytes <= limit
        if n > 1:
            fewer = estimate_plan(
                MODEL, CLUSTER, wl, replace(plan, recompute_num_layers=n - 1), calibration=cal
            )
            assert fewer.peak_memory_bytes > limit
        none = estimate_plan(
            MODEL, CLUSTER, wl, replace(plan, recompute="none", recompute_num_layers=None), calibration=cal
        )
        every = estimate_plan(MODEL, CLUSTER, wl, replace(plan, recompute_num_layers=None), calibration=cal)
        assert none.peak_memory_bytes > limit and none.step_time_s < est.step_time_s < every.step_time_s


def test_the_planner_offers_partial_recompute_only_on_stacks_that_run_it() -> None:
    wl = Workload(seq_len=8192, global_batch_size=64)

    def partial_rows(framework: str) -> int:
        cal = load_calibration("default").with_framework(load_framework(framework))
        found = search(MODEL, CLUSTER, wl, Constraints(memory_headroom_frac=0.2), top_k=5, calibration=cal)
        return found.plans.filter(found.plans["recompute_num_layers"].is_not_null()).height

    assert partial_rows("megatron-core-2024") > 0
    assert partial_rows("llm-foundry-2023") == 0
