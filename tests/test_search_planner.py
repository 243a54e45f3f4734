"""``search`` end to end: sanity against practice, bookkeeping, chunking, refinement."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.search import Constraints, search
from workbench.search.refine import plan_from_row
from workbench.search.run import screen_all
from workbench.search.space import build_space
from workbench.specs.plan import Workload


def test_gpt3_175b_on_1024_a100_uses_tp8_inside_a_node_and_a_pipeline():
    """Megatron-LM 2021 (Narayanan et al., arXiv:2104.04473, Table 1) trained GPT-3 175B on 1,024 A100 with
    tp=8 inside each DGX node and pp>1. Searched in that system's own option space: no ZeRO, no sequence or
    context parallelism, unfused attention with dropout, 1F1B or interleaved schedules."""
    cal = load_calibration("default", framework="megatron-lm-2021")
    constraints = Constraints(
        zero_stages=(0,),
        sequence_parallel=(False,),
        maximum={"cp": 1},
        schedules=("1f1b", "interleaved-1f1b"),
        recompute=("none", "full"),
    )
    result = search(
        load_model("gpt3-175b"),
        load_cluster("dgx-a100", num_nodes=128),
        Workload(seq_len=2048, global_batch_size=1536),
        constraints,
        calibration=cal,
        top_k=5,
    )
    top = result.plans.row(0, named=True)
    assert top["tp"] == 8 and top["pp"] > 1
    assert (result.plans.head(5)["pp"] > 1).all()


def test_llama_8b_on_8_h100_needs_no_pipeline():
    result = search(
        load_model("llama-3.1-8b"),
        load_cluster("dgx-h100", num_nodes=1),
        Workload(seq_len=8192, global_batch_size=64),
        top_k=5,
    )
    assert result.plans.row(0, named=True)["pp"] == 1


def test_unfittable_model_reports_no_plan_and_the_closest_misses():
    # 405B parameters x 2 bytes of bf16 weights alone exceed 8 x 80 GiB.
    model, cluster = load_model("llama-3.1-405b"), load_cluster("dgx-a100", num_nodes=1)
    assert model.total_parameters() * 2 > cluster.num_devices * cluster.device.hbm_bytes
    result = search(model, cluster, Workload(seq_len=4096, global_batch_size=64), top_k=3)
    assert not result.feasible and result.plans.height == 0 and result.estimates == ()
    fracs = result.closest_misses["memory_frac"].to_list()
    assert fracs and fracs == sorted(fracs) and min(fracs) > 1.0
    assert result.rejections["memory"] > 0


def test_counts_add_up_and_chunking_changes_nothing():
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", num_nodes=4)
    workload, cal, c = (
        Workload(seq_len=4096, global_batch_size=128),
        load_calibration("default"),
        Constraints(),
    )
    whole = screen_all(model, [cluster], workload, c, calibration=cal, keep=50)
    small = screen_all(model, [cluster], workload, c, calibration=cal, keep=50, chunk_plans=3000)
    assert whole.num_plans == small.num_plans == build_space(model, cluster, c).size
    assert sum(whole.rejections.values()) + whole.num_feasible == whole.num_plans
    assert whole.rejections == small.rejections and whole.num_feasible == small.num_feasible
    assert np.array_equal(whole.best["tokens_per_s"], small.best["tokens_per_s"])
    assert len(whole.frontier["tp"]) == len(small.frontier["tp"])


def test_refined_rows_carry_the_full_estimate_and_objectives_follow():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=1)
    workload = Workload(seq_len=4096, global_batch_size=64)
    result = search(model, cluster, workload, nodes=[1, 2], objective="cost", top_k=3, token_budget=1e11)
    assert {c.num_nodes for c in result.clusters} == {1, 2}
    rows = result.plans.head(3).to_dicts()
    for row, est in zip(rows, result.estimates, strict=True):
        assert row["refined"]
        again = estimate_plan(model, cluster.with_nodes(row["num_nodes"]), workload, plan_from_row(row))
        assert row["step_time_s"] == pytest.approx(again.step_time_s, rel=1e-12)
        assert est.plan == plan_from_row(row)
        assert row["device_hours"] == pytest.approx(1e11 / row["tokens_per_s"] * row["num_devices"] / 3600)
    # distinct layouts in objective order, a layout's variants folded under its best plan (planner._order)
    leaders = [r["device_hours"] for r in rows if not r["variant"]]
    assert leaders == sorted(leaders)
    best_of = {r["layout"]: r["device_hours"] for r in rows if not r["variant"]}
    assert all(r["device_hours"] >= best_of[r["layout"]] for r in rows)
    runner = next(i for i, r in enumerate(rows) if r["layout"] != rows[0]["layout"])  # next distinct layout
    assert result.explanation.startswith(f"#1 beats #{runner + 1}")


def test_pareto_frontier_is_not_dominated():
    result = search(
        load_model("llama-3.1-8b"),
        load_cluster("dgx-h100", num_nodes=1),
        Workload(seq_len=8192, global_batch_size=32),
        top_k=0,
    )
    front = result.pareto
    t, m = front["tokens_per_s"].to_numpy(), front["peak_memory_bytes"].to_numpy()
    assert front.height > 1 and (np.diff(m) >= 0).all() and (np.diff(t) > 0).all()
    best = result.plans.row(0, named=True)
    assert best["tokens_per_s"] == pytest.approx(t.max())


def test_bad_arguments_raise_value_errors():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=1)
    workload = Workload(seq_len=4096, global_batch_size=64)
    with pytest.raises(ValueError, match="objective"):
        search(model, cluster, workload, objective="fastest")
    with pytest.raises(ValueError, match="nodes"):
        search(model, cluster, workload, nodes=[0])
    with pytest.raises(ValueError, match="backend"):
        search(model, cluster, workload, backend="nope", top_k=1)


def test_report_frame_marks_tiers_and_misses():
    result = search(
        load_model("llama-3.1-8b"),
        load_cluster("dgx-h100", num_nodes=1),
        Workload(seq_len=4096, global_batch_size=32),
        top_k=3,
    )
    frame = result.report_frame()
    assert frame.filter(frame["tier"] == "refined").height == 3
    assert set(frame["tier"].unique().to_list()) == {"refined", "screened"}
    assert {"tokens_per_s", "peak_memory_bytes", "fits", "rejected_reason"} <= set(frame.columns)
