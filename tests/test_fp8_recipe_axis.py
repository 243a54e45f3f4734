"""The FP8 recipe as a plan axis (issue 44's measure): a plan chooses among the recipes its stack offers
(``FrameworkProfile.offered``), the estimate prices the chosen one exactly as a profile whose own recipe it is,
the planner screens each offered recipe, and a recipe the stack does not offer is refused by name."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework, profile_from_dict
from workbench.search.planner import search
from workbench.search.refine import plan_from_row
from workbench.specs.plan import ParallelPlan, Workload

MODEL = load_model("llama-3.1-70b")
CLUSTER = load_cluster("dgx-h100", num_nodes=8)
FP8 = Workload(seq_len=8192, global_batch_size=128, dtype="fp8")
PLAN = dict(dp=2, tp=4, pp=8, vpp=5, schedule="interleaved-1f1b", zero_stage=1, sequence_parallel=True)


def test_megatron_core_offers_its_own_recipe_then_the_others() -> None:
    # profiles/frameworks/megatron-core-2024.toml: current scaling (FP8-CS) is the recipe the performance
    # rows run; Megatron's --fp8-recipe also takes delayed and blockwise on Hopper
    assert load_framework("megatron-core-2024").offered("fp8_recipe") == ("current", "delayed", "blockwise")
    assert load_framework("torchtitan-2024").offered("fp8_recipe") == ("tensorwise",)


@pytest.mark.parametrize("recipe", ["current", "delayed", "blockwise"])
def test_a_chosen_recipe_prices_as_the_profile_whose_own_it_is(recipe: str) -> None:
    cal = load_calibration("default")
    chosen = estimate_plan(MODEL, CLUSTER, FP8, ParallelPlan(**PLAN, fp8_recipe=recipe), calibration=cal)
    own = dataclasses.replace(cal, framework=dataclasses.replace(cal.framework, fp8_recipe=recipe))
    reference = estimate_plan(MODEL, CLUSTER, FP8, ParallelPlan(**PLAN), calibration=own)
    assert chosen.step_time_s == pytest.approx(reference.step_time_s, rel=1e-12)
    assert chosen.peak_memory_bytes == pytest.approx(reference.peak_memory_bytes, rel=1e-12)


def test_delayed_scaling_casts_fewer_bytes_than_current() -> None:
    # workbench.cost.flops.FP8_CAST_BYTES: delayed reads 2 and writes 1 byte per value, current also re-reads the
    # input for its amax: the same plan is faster under delayed scaling, the rest of the step unchanged
    cal = load_calibration("default")
    times = {
        r: estimate_plan(MODEL, CLUSTER, FP8, ParallelPlan(**PLAN, fp8_recipe=r), calibration=cal).step_time_s
        for r in ("current", "delayed")
    }
    assert times["delayed"] < times["current"]


def test_a_recipe_the_stack_does_not_offer_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"fp8_recipe rowwise \(offers: current, delayed, blockwise\)"):
        estimate_plan(MODEL, CLUSTER, FP8, ParallelPlan(**PLAN, fp8_recipe="rowwise"))
    bf16 = dataclasses.replace(FP8, dtype="bf16")
    with pytest.raises(ValueError, match="fp8_recipe delayed without dtype fp8"):
        estimate_plan(MODEL, CLUSTER, bf16, ParallelPlan(**PLAN, fp8_recipe="delayed"))
    with pytest.raises(ValueError, match="fp8_recipe must be one of"):
        ParallelPlan(fp8_recipe="fp4")


def test_an_offer_the_workbench_does_not_price_is_refused_with_its_file() -> None:
    with pytest.raises(ValueError, match=r"x.toml.*offers.fp8_recipe must be a list among"):
        profile_from_dict({"id": "x", "name": "X", "offers": {"fp8_recipe": ["fp4"]}}, where="x.toml")
    with pytest.raises(ValueError, match=r"offers.moe_dispatcher: no plan axis chooses"):
        profile_from_dict({"id": "x", "name": "X", "offers": {"moe_dispatcher": ["deepep"]}}, where="x.toml")


def test_the_planner_screens_each_offered_recipe() -> None:
    only_own = load_calibration("default")
    only_own = dataclasses.replace(only_own, framework=dataclasses.replace(only_own.framework, offers={}))
    kw = dict(top_k=6, keep=50)
    each = search(MODEL, CLUSTER, FP8, **kw)
    own = search(MODEL, CLUSTER, FP8, calibration=only_own, **kw)
    assert each.num_plans == 3 * own.num_plans  # the same space once per recipe
    recipes = set(each.plans["fp8_recipe"].to_list())
    assert recipes <= {"current", "delayed", "blockwise"} and len(recipes) > 1
    assert set(own.plans["fp8_recipe"].to_list()) == {None}
    for row in each.plans.filter(each.plans["refined"]).head(3).iter_rows(named=True):
        plan = plan_from_row(row)
        assert plan.fp8_recipe == row["fp8_recipe"] and f"fp8-{plan.fp8_recipe}" in row["plan"]
        again = estimate_plan(MODEL, CLUSTER, FP8, plan)
        assert again.step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)
    bf16 = search(MODEL, CLUSTER, dataclasses.replace(FP8, dtype="bf16"), **kw)
    assert bf16.num_plans == own.num_plans and set(bf16.plans["fp8_recipe"].to_list()) == {None}
