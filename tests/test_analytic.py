"""The analytic backend end to end: invariances, Estimate completeness, Korthikanti Table 5 golden rows."""

from __future__ import annotations

import dataclasses

import pytest
from workbench_backends.analytic import AnalyticBackend

from workbench.estimate.analytic import _cached_schedule, estimate_plan
from workbench.estimate.registry import get_backend
from workbench.presets.calibration import Calibration, load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.estimate import MEMORY_COLUMNS, TIMELINE_COLUMNS, Backend
from workbench.specs.limits import SCHEDULE_CACHE_SIZE
from workbench.specs.plan import ParallelPlan, Workload
from workbench.validate import DEFAULT_DATA

MODEL = load_model("llama-3.1-8b")
CLUSTER = load_cluster("dgx-h100", num_nodes=1)
WORK = Workload(seq_len=4096, global_batch_size=32)
DATA = DEFAULT_DATA


def test_backend_is_registered_and_conforms() -> None:
    backend = get_backend("analytic")
    assert isinstance(backend, Backend) and backend.unavailable_reason() is None
    assert isinstance(AnalyticBackend(), Backend)


def test_estimate_is_complete_and_adds_up() -> None:
    plan = ParallelPlan(
        tp=2,
        pp=2,
        dp=2,
        vpp=2,
        micro_batch_size=1,
        schedule="interleaved-1f1b",
        sequence_parallel=True,
        recompute="selective",
        zero_stage=1,
    )
    est = estimate_plan(MODEL, CLUSTER, WORK, plan)
    assert est.breakdown.total_s == pytest.approx(est.step_time_s, rel=1e-9)
    assert est.tokens_per_s == pytest.approx(WORK.tokens_per_step / est.step_time_s)
    assert 0 < est.mfu < est.hfu < 1
    assert list(est.memory.columns) == ["rank", *MEMORY_COLUMNS, "total_bytes"] and est.memory.height == 2
    assert set(TIMELINE_COLUMNS) <= set(est.timeline.columns)
    assert {"F", "B", "comm"} <= set(est.timeline["op"].unique())
    assert est.activation_timeline is not None and est.notes


def test_infeasible_plan_names_the_rule() -> None:
    with pytest.raises(ValueError, match="must equal the cluster"):
        estimate_plan(MODEL, CLUSTER, WORK, ParallelPlan(tp=2, dp=2))


def test_single_device_has_no_communication_or_bubble() -> None:
    one = dataclasses.replace(CLUSTER, num_nodes=1, devices_per_node=1)
    est = estimate_plan(
        MODEL, one, Workload(seq_len=2048, global_batch_size=4), ParallelPlan(micro_batch_size=1)
    )
    b = est.breakdown
    assert b.exposed_tp_comm_s == b.exposed_dp_comm_s == b.exposed_pp_comm_s == 0.0
    assert b.bubble_s == pytest.approx(0.0, abs=1e-12)
    row = est.memory.row(0, named=True)
    assert row["parameters_bytes"] == pytest.approx(2 * MODEL.total_parameters())


def test_doubling_the_batch_doubles_compute() -> None:
    plan = ParallelPlan(tp=2, pp=2, dp=2, micro_batch_size=1)
    a = estimate_plan(MODEL, CLUSTER, WORK, plan)
    b = estimate_plan(MODEL, CLUSTER, dataclasses.replace(WORK, global_batch_size=64), plan)
    assert b.breakdown.compute_s == pytest.approx(2 * a.breakdown.compute_s, rel=1e-9)


def test_neutral_calibration_is_a_plain_roofline() -> None:
    plan = ParallelPlan(tp=8, micro_batch_size=1)
    neutral = estimate_plan(MODEL, CLUSTER, WORK, plan, calibration=Calibration())
    fitted = estimate_plan(MODEL, CLUSTER, WORK, plan)
    assert neutral.step_time_s != fitted.step_time_s


@pytest.mark.skipif(not DATA.is_file(), reason="validation file not present")
def test_korthikanti_table5_golden() -> None:
    """Korthikanti et al. 2022 Table 5 iteration times: MAPE <= 5% (Calculon: 3.65%)."""
    from workbench.validate import read_rows, validate_rows

    rows = [r for r in read_rows(DATA) if r["source_key"] == "KORTHIKANTI22_T5"]
    result = validate_rows(rows, calibration=load_calibration())
    assert len(result["rows"]) == 8 and not result["skipped"]
    assert result["mape"] <= 0.05


@pytest.mark.skipif(not DATA.is_file(), reason="validation file not present")
def test_korthikanti_figure1_memory_golden() -> None:
    """Korthikanti et al. 2022 Fig. 1 memory (no recompute, no SP; computed requirements): MAPE <= 5%."""
    from workbench.validate import read_rows, validate_rows

    rows = [r for r in read_rows(DATA) if r["source_key"] == "KORTHIKANTI22_F1"]
    result = validate_rows(rows, calibration=load_calibration())
    assert len(result["rows"]) == 4 and result["memory_mape"] <= 0.05


def test_plans_of_one_pipeline_shape_build_their_schedule_once() -> None:
    """Refining plans that differ in their costs but not in (schedule, pp, micro-batches, vpp) builds the schedule
    once (issue 52: a plan run's refinement built the same greedy zero-bubble schedule again per plan); the cache is
    bounded by ``limits.SCHEDULE_CACHE_SIZE``."""
    _cached_schedule.cache_clear()
    cal = load_calibration("default").with_framework("zero-bubble-2024")
    steps = set()
    for recompute, sp in (("none", False), ("selective", True), ("full", True)):
        plan = ParallelPlan(
            tp=2,
            pp=2,
            dp=2,
            vpp=2,
            micro_batch_size=1,
            schedule="v-half",
            recompute=recompute,
            sequence_parallel=sp,
        )
        steps.add(estimate_plan(MODEL, CLUSTER, WORK, plan, calibration=cal).step_time_s)
    assert len(steps) == 3  # three different costings
    info = _cached_schedule.cache_info()
    assert (info.misses, info.hits, info.maxsize) == (1, 2, SCHEDULE_CACHE_SIZE)
