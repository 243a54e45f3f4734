"""TP communication overlap as a plan axis (issue 48 item 5, issue 44's measure of an axis): a plan chooses
whether the tensor-parallel collectives overlap the GEMMs among what its stack offers (torchtitan: async TP,
opt-in; Megatron-Core: on), priced exactly as a profile whose own setting it is, screened per offered value by
the planner, exported as each stack's switch, refused by name where a stack does not offer it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from workbench_backends.analytic import AnalyticBackend

from tests.test_launch_export import torchtitan_config_manager  # noqa: F401 (the fixture)
from workbench.estimate.analytic import estimate_plan
from workbench.launch.export import export_training
from workbench.launch.stacks import ExportRefused, ModelRef
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework, profile_from_dict
from workbench.search.planner import search
from workbench.search.refine import plan_from_row
from workbench.specs.plan import ParallelPlan, Workload

MODEL = load_model("llama-3.1-70b")
CLUSTER = load_cluster("dgx-h100", num_nodes=8)
WORK = Workload(seq_len=8192, global_batch_size=256)
PLAN = dict(dp=2, tp=8, pp=4, zero_stage=3, sequence_parallel=True)
TITAN = "torchtitan-2024"


def test_torchtitan_offers_async_tp_beside_its_own_off() -> None:
    # profiles/frameworks/torchtitan-*.toml [offers]: enable_async_tensor_parallel is opt-in (default False)
    assert load_framework("torchtitan-2024").offered("tp_comm_overlap") == (False, True)
    assert load_framework("torchtitan-2025").offered("tp_comm_overlap") == (False, True)
    assert load_framework("megatron-core-2024").offered("tp_comm_overlap") == (True,)
    assert "tp_comm_overlap: off, on" in load_framework(TITAN).describe()["offers"]


@pytest.mark.parametrize("on", [True, False])
def test_the_choice_prices_as_the_profile_whose_own_it_is(on: bool) -> None:
    cal = load_calibration("default", framework=TITAN)
    chosen = estimate_plan(MODEL, CLUSTER, WORK, ParallelPlan(**PLAN, tp_comm_overlap=on), calibration=cal)
    own = dataclasses.replace(cal, framework=dataclasses.replace(cal.framework, tp_comm_overlap=on))
    reference = estimate_plan(MODEL, CLUSTER, WORK, ParallelPlan(**PLAN), calibration=own)
    assert chosen.step_time_s == pytest.approx(reference.step_time_s, rel=1e-12)
    assert chosen.breakdown.as_dict() == pytest.approx(reference.breakdown.as_dict(), rel=1e-12)


def test_async_tp_hides_tensor_parallel_communication() -> None:
    """workbench.cost.layer_comm.tp_layer_comm: with the overlap on, one of tp chunks stays exposed; the rest hides behind
    the GEMMs (less the interference), so the exposed tp time falls and the step with it, the compute unchanged."""
    cal = load_calibration("default", framework=TITAN)
    off, on = (
        estimate_plan(MODEL, CLUSTER, WORK, ParallelPlan(**PLAN, tp_comm_overlap=v), calibration=cal)
        for v in (False, True)
    )
    on_tp, off_tp = on.breakdown, off.breakdown
    assert on_tp.exposed_tp_comm_s < off_tp.exposed_tp_comm_s and off_tp.overlapped_tp_comm_s == 0
    assert on_tp.overlapped_tp_comm_s > 0
    assert on_tp.exposed_tp_comm_s >= off_tp.exposed_tp_comm_s / PLAN["tp"] * 0.999  # the tail chunk
    assert on.step_time_s < off.step_time_s
    assert ParallelPlan(**PLAN, tp_comm_overlap=True).describe().endswith("tp-overlap")


def test_a_choice_the_stack_does_not_offer_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"tp_comm_overlap off \(offers: on\)"):
        AnalyticBackend(framework="megatron-core-2024").estimate(
            MODEL, CLUSTER, WORK, ParallelPlan(**PLAN, tp_comm_overlap=False)
        )
    with pytest.raises(ValueError, match="tp_comm_overlap must be one of on, off or None"):
        ParallelPlan(tp_comm_overlap="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"x.toml.*offers.tp_comm_overlap must be a list among True, False"):
        profile_from_dict({"id": "x", "name": "X", "offers": {"tp_comm_overlap": ["on"]}}, where="x.toml")


def test_the_planner_screens_each_offered_value() -> None:
    cal = load_calibration("default", framework=TITAN)
    only_own = dataclasses.replace(cal, framework=dataclasses.replace(cal.framework, offers={}))
    kw = dict(top_k=4, keep=30)
    model, small = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=1)
    each = search(model, small, WORK, calibration=cal, **kw)
    own = search(model, small, WORK, calibration=only_own, **kw)
    assert each.num_plans == 2 * own.num_plans  # the same space once per offered value
    assert set(each.plans["tp_comm_overlap"].to_list()) <= {"on", "off"}
    assert set(own.plans["tp_comm_overlap"].to_list()) == {None}
    for row in each.plans.filter(each.plans["refined"]).head(2).iter_rows(named=True):
        plan = plan_from_row(row)
        assert plan.tp_comm_overlap == (row["tp_comm_overlap"] == "on")
        again = estimate_plan(model, small, WORK, plan, calibration=cal)
        assert again.step_time_s == pytest.approx(row["step_time_s"], rel=1e-9)


def _titan_estimate(**plan: Any) -> Any:
    backend = AnalyticBackend(framework="torchtitan-2025")
    work = Workload(seq_len=4096, global_batch_size=32)
    return backend.estimate(
        load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=1), work, ParallelPlan(**plan)
    )


def test_torchtitan_job_enables_async_tp(tmp_path: Path, torchtitan_config_manager: Any) -> None:  # noqa: F811
    """The plan's async TP becomes ``parallelism.enable_async_tensor_parallel`` with compile on, as torchtitan's
    own config manager reads the job file; without it, or at tp 1, the key is left at its default (off)."""
    tt = load_framework("torchtitan-2025")
    ref = ModelRef(name="llama-3.1-8b", hf_id="meta-llama/Llama-3.1-8B")
    plan = dict(dp=2, tp=4, zero_stage=3, sequence_parallel=True)
    on = export_training(_titan_estimate(**plan, tp_comm_overlap=True), "torchtitan", ref, framework=tt)
    off = export_training(_titan_estimate(**plan), "torchtitan", ref, framework=tt)
    assert "enable_async_tensor_parallel = true" in on.files["job.toml"]
    assert "enable_async_tensor_parallel" not in off.files["job.toml"]
    path = tmp_path / "job.toml"
    path.write_text(on.files["job.toml"])
    job = torchtitan_config_manager().parse_args(["--job.config_file", str(path)])
    assert job.parallelism.enable_async_tensor_parallel and job.compile.enable
    no_compile = dataclasses.replace(tt, fused_elementwise=False)
    with pytest.raises(ExportRefused, match="tp_comm_overlap=on: its async TP needs torch.compile"):
        export_training(
            _titan_estimate(**plan, tp_comm_overlap=True), "torchtitan", ref, framework=no_compile
        )


def test_torch_profile_refuses_the_choice_from_the_row() -> None:
    """The row's pricing (measured ops) refuses it in the torch-profile backend with no line of its own there."""
    from workbench_backends.torch_profile import PLAN_FIELD_PRICING, unsupported

    assert "tp_comm_overlap" not in PLAN_FIELD_PRICING
    said = " ".join(unsupported(MODEL, WORK, ParallelPlan(**PLAN, tp_comm_overlap=True)))
    assert "tp_comm_overlap=True (refused unless tp_comm_overlap=None" in said
