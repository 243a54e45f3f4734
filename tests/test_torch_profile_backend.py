"""The torch-profile backend: registry, closed-form pipeline step from a synthetic profile, missing-profile error,
and (slow) predicted vs measured single-process step time on this CPU."""

from __future__ import annotations

import statistics
import time
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from workbench_backends.torch_profile import (
    MEASURED_HERE,
    PLAN_FIELD_PRICING,
    WORKLOAD_FIELD_PRICING,
    _fitted_cluster,
    field_pricing,
    profile_costs,
    unsupported,
)

from tests.test_profile_table import SPEC, _row, _write
from workbench.cost import step
from workbench.cost.step import OPTIMIZER_BYTES_PER_PARAM, StepContext
from workbench.estimate.analytic import analytic_costs, estimate_plan
from workbench.estimate.metrics import hardware_flop_per_token, throughput
from workbench.estimate.registry import get_backend
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_model
from workbench.presets.profile_table import find_profile, host_cluster, read_profile
from workbench.specs.axes import PLAN_AXES, plan_axis
from workbench.specs.axis_types import Pricing
from workbench.specs.estimate import Backend
from workbench.specs.hardware import ClusterSpec, DeviceSpec, NetworkLevel
from workbench.specs.plan import ParallelPlan, Workload

FAST_LINK = NetworkLevel(name="host", bytes_per_s=1e18, latency_s=0.0)


def _cluster(n: int, device_id: str = "host-cpu") -> ClusterSpec:
    dev = DeviceSpec(
        id=device_id, name="test", peak_flop_per_s={"fp32": 1e11}, hbm_bytes=2**34, hbm_bytes_per_s=1e10
    )
    return ClusterSpec(id="t", name="t", device=dev, devices_per_node=n, levels=(FAST_LINK,))


def test_registered_and_protocol(tmp_path: Path) -> None:
    backend = get_backend("torch-profile", profile=str(tmp_path))
    assert isinstance(backend, Backend) and backend.name == "torch-profile"
    assert "workbench profile" in (
        get_backend("torch-profile", profile=str(tmp_path / "no")).unavailable_reason() or ""
    )


def test_single_rank_step_is_sum_of_op_costs(tmp_path: Path) -> None:
    _write(tmp_path)
    est = get_backend("torch-profile", profile=str(tmp_path)).estimate(
        SPEC, _cluster(1), Workload(seq_len=128, global_batch_size=4, dtype="fp32"), ParallelPlan()
    )
    # 4 ops per micro-batch (embedding, 2 layers, head), each F = 1.2 ms and B = 2.4 ms; 4 micro-batches;
    # AdamW 1e-8 s per parameter over the parameters the rank holds (the model's count, as the step model has it).
    assert est.step_time_s == pytest.approx(4 * 4 * 3.6e-3 + SPEC.total_parameters() * 1e-8)
    assert est.bubble_fraction == pytest.approx(0.0)
    assert est.memory["activations_bytes"][0] == pytest.approx(4 * 1000)  # one micro-batch in flight


def test_pipeline_matches_1f1b_closed_form(tmp_path: Path) -> None:
    _write(tmp_path)
    est = get_backend("torch-profile", profile=str(tmp_path)).estimate(
        SPEC, _cluster(2), Workload(seq_len=128, global_batch_size=4, dtype="fp32"), ParallelPlan(pp=2)
    )
    # Two equal stages (embedding + block 0, block 1 + head), F = 2.4 ms, B = 4.8 ms: (m + p - 1)(F + B)
    # (Narayanan et al. 2021, section 2.2.1); the optimizer runs over the larger rank's parameters.
    rank_params = max(
        SPEC.embedding_parameters() + SPEC.layer_parameters(0),
        SPEC.layer_parameters(1) + SPEC.lm_head_parameters(),
    )
    step_s = 5 * 7.2e-3 + rank_params * 1e-8
    assert est.step_time_s == pytest.approx(step_s)
    # The bubble as metrics defines it: the critical rank's idle time (p - 1)(F + B) over the step time.
    assert est.bubble_fraction == pytest.approx(7.2e-3 / step_s, rel=1e-6)


@pytest.mark.parametrize("pp", [1, 2])
def test_gradient_accumulation_priced_for_every_micro_batch_after_the_first(tmp_path: Path, pp: int) -> None:
    """m = 4 micro-batches: 3 of them add into the gradients the first left, at the probe's 1e-9 s per
    parameter of the stage. pp = 1: the step grows by 3 x 1e-9 x the model's parameters. pp = 2: each stage's
    B grows by 1e-9 x its parameters x 3/4 (Narayanan et al. 2021, section 2.2.1, for the 1F1B path)."""
    plain = _write(tmp_path / "plain")
    acc = _write(tmp_path / "acc", grad_accumulate_s_per_parameter=1e-9)
    wl = Workload(seq_len=128, global_batch_size=4, dtype="fp32")
    before, after = (
        get_backend("torch-profile", profile=str(folder)).estimate(
            SPEC, _cluster(pp), wl, ParallelPlan(pp=pp)
        )
        for folder in (plain, acc)
    )
    if pp == 1:
        assert after.step_time_s - before.step_time_s == pytest.approx(3 * SPEC.total_parameters() * 1e-9)
    else:  # 1F1B, p = 2: F0 + m (F1 + B1) + B0 is the critical path, so B0 counts once and B1 m times
        first = SPEC.embedding_parameters() + SPEC.layer_parameters(0)
        last = SPEC.total_parameters() - first  # block 1, the final norm and the head
        added = (first + 4 * last) * 1e-9 * 3 / 4
        assert after.step_time_s - before.step_time_s == pytest.approx(added)
    assert any("predates the step probe" in n for n in before.notes)
    assert not any("predates the step probe" in n for n in after.notes)


def test_step_probe_cuts_layers_under_its_cap() -> None:
    from workbench_backends.profile_record import PROBE_MAX_PARAMETERS, probe_layers

    assert probe_layers(SPEC) == SPEC.num_layers  # 3.6 M parameters: the whole model
    big = replace(SPEC, num_layers=400, vocab_size=1000)  # 787k per block, 0.5 M of embedding and head
    assert probe_layers(big) == (PROBE_MAX_PARAMETERS - 2 * 1000 * 256) // big.layer_parameters(0) == 169
    assert probe_layers(load_model("llama-3.1-70b")) == 1  # its embedding and head alone exceed the cap


def test_stage_zero_backward_is_one_fused_w_in_zero_bubble(tmp_path: Path) -> None:
    _write(tmp_path)
    est = get_backend("torch-profile", profile=str(tmp_path)).estimate(
        SPEC,
        _cluster(2),
        Workload(seq_len=128, global_batch_size=4, dtype="fp32"),
        ParallelPlan(pp=2, schedule="zb-h1"),
    )
    ops = est.timeline.with_columns(dur_s=pl.col("end_s") - pl.col("start_s"))
    by = {
        (r["stage"], r["op"]): r["dur_s"]
        for r in ops.group_by("stage", "op").agg(pl.col("dur_s").max()).to_dicts()
    }
    # Per op at mbs 1: F = 1.2 ms, I = W = 1.2 ms, B = 2.4 ms. Stage 0 (embedding + block 0) as torch runs it:
    # no I, W = the fused B of both, 4.8 ms; stage 1 (block 1 + head) keeps its split, I = W = 2.4 ms.
    assert by.get((0, "I"), 0.0) == pytest.approx(0.0)
    assert by[(0, "W")] == pytest.approx(4.8e-3)
    assert by[(1, "I")] == pytest.approx(2.4e-3) and by[(1, "W")] == pytest.approx(2.4e-3)


def test_interpolated_shape_is_noted(tmp_path: Path) -> None:
    _write(tmp_path)
    est = get_backend("torch-profile", profile=str(tmp_path)).estimate(
        SPEC,
        _cluster(1),
        Workload(seq_len=128, global_batch_size=4, dtype="fp32"),
        ParallelPlan(micro_batch_size=2),
    )
    assert any("interpolated" in n for n in est.notes)


def test_missing_profile_says_what_to_record(tmp_path: Path) -> None:
    _write(tmp_path)
    backend = get_backend("torch-profile", profile=str(tmp_path))
    with pytest.raises(LookupError, match="record one with: workbench profile --model tiny --device cuda"):
        backend.estimate(
            SPEC,
            _cluster(1, "h100-sxm5-80gb"),
            Workload(seq_len=128, global_batch_size=4, dtype="fp32"),
            ParallelPlan(),
        )
    with pytest.raises(LookupError, match="--tp 2"):
        backend.estimate(
            SPEC, _cluster(2), Workload(seq_len=128, global_batch_size=4, dtype="fp32"), ParallelPlan(tp=2)
        )


# ---- one cost path: the same stage split, communication and memory accounting as the analytic backend ------
EXAMPLE_PROFILE = (
    Path(__file__).resolve().parents[1] / "profiles" / "measured" / "llama-3.1-8b-L2-H512-cpu-fp32"
)
SLOW_LINK = NetworkLevel(name="host", bytes_per_s=1e9, latency_s=1e-5)
STATE_AND_BUFFERS = ("parameters_bytes", "gradients_bytes", "optimizer_states_bytes", "buffers_bytes")


def _both_costs(root: Path, model, cluster: ClusterSpec, wl: Workload, plan: ParallelPlan):
    """(torch-profile, analytic with the neutral calibration) PlanCosts of one plan on the fitted cluster."""
    prof = find_profile(root, model, cluster.device.id, str(wl.dtype))
    fitted = _fitted_cluster(cluster, prof)
    ours = profile_costs(prof, model, fitted, wl, plan)
    return prof, fitted, ours, analytic_costs(model, fitted, wl, plan, Calibration())


def _assert_same_step_model_terms(ours, theirs, ctx: StepContext, seconds_per_param: float) -> None:
    """Everything that does not come from the measured op table is the step model's, term for term."""
    assert (ours.schedule.name, ours.schedule.pp, ours.schedule.num_stages) == (
        theirs.schedule.name,
        theirs.schedule.pp,
        theirs.schedule.num_stages,
    )
    assert ours.stages.p2p_s == pytest.approx(theirs.stages.p2p_s, rel=1e-12)
    assert ours.dp_comm_s == pytest.approx(theirs.dp_comm_s, rel=1e-12)
    for kind in ("tp", "cp", "ep"):
        np.testing.assert_allclose(ours.rank_comm_s[kind], theirs.rank_comm_s[kind], rtol=1e-12)
    for part in STATE_AND_BUFFERS:
        np.testing.assert_allclose(ours.rank_memory[part], theirs.rank_memory[part], rtol=1e-12)
    # The optimizer runs over the same locally owned parameters: measured s/parameter here, 30 B per
    # parameter over the HBM bandwidth there.
    assert ours.optimizer_s / theirs.optimizer_s == pytest.approx(
        seconds_per_param * ctx.hbm_bytes_per_s / OPTIMIZER_BYTES_PER_PARAM, rel=1e-9
    )


@pytest.mark.parametrize(
    "plan",
    [
        ParallelPlan(pp=2),
        ParallelPlan(pp=2, schedule="zb-h1"),
        ParallelPlan(dp=2),
        ParallelPlan(dp=2, zero_stage=1),
        ParallelPlan(dp=2, zero_stage=2),
        ParallelPlan(dp=4, zero_stage=3, recompute="full"),
        ParallelPlan(pp=2, dp=2, zero_stage=1, micro_batch_size=2),
        ParallelPlan(dp=4, zero_stage=1, zero_shard=2),
        ParallelPlan(dp=4, zero_stage=3, zero_shard=2),
    ],
    ids=lambda p: p.describe(),
)
def test_example_profile_shares_the_step_model_with_analytic(plan: ParallelPlan) -> None:
    prof = read_profile(EXAMPLE_PROFILE)
    model, wl = prof.model, Workload(seq_len=128, global_batch_size=8, dtype="fp32")
    base = host_cluster(prof, num_devices=plan.num_devices)
    cluster = replace(base, levels=(replace(base.levels[0], bytes_per_s=1e8, latency_s=1e-3),))
    _, fitted, ours, theirs = _both_costs(EXAMPLE_PROFILE, model, cluster, wl, plan)
    assert fitted.levels[0].bytes_per_s == prof.manifest["collective_fit"][0]["bytes_per_s"]  # fit applied
    ctx = StepContext.build(model, fitted, wl, Calibration())
    _assert_same_step_model_terms(ours, theirs, ctx, prof.manifest["optimizer_s_per_parameter"])
    if plan.zero_stage == 3:  # ZeRO-3 gathers priced by the step model, behind the measured compute
        assert (ours.rank_comm_s["fsdp"] > 0).all()
    est = get_backend("torch-profile", profile=str(EXAMPLE_PROFILE)).estimate(model, cluster, wl, plan)
    analytic = estimate_plan(model, fitted, wl, plan, calibration=Calibration())
    for part in STATE_AND_BUFFERS:  # the memory table: same column meanings, same model states
        assert est.memory[part].to_list() == pytest.approx(analytic.memory[part].to_list(), rel=1e-12)
    assert est.breakdown.total_s == pytest.approx(est.step_time_s, rel=1e-9)


def test_offloaded_optimizer_is_the_step_models_host_path() -> None:
    """ZeRO-Offload's step runs on the host, which the profile does not time: the backend takes the step model's
    host path (the analytic backend's figure under the same neutral calibration) and says so; the device keeps no
    optimizer states."""
    prof = read_profile(EXAMPLE_PROFILE)
    model, wl = prof.model, Workload(seq_len=128, global_batch_size=8, dtype="fp32")
    plan = ParallelPlan(dp=2, zero_stage=1, offload_optimizer=True)
    _, _, ours, theirs = _both_costs(EXAMPLE_PROFILE, model, host_cluster(prof, num_devices=2), wl, plan)
    on_device = profile_costs(
        prof, model, host_cluster(prof, num_devices=2), wl, replace(plan, offload_optimizer=False)
    )
    assert ours.optimizer_s == pytest.approx(theirs.optimizer_s, rel=1e-12)
    assert ours.optimizer_s != pytest.approx(on_device.optimizer_s, rel=1e-3)
    assert any("offloaded to the host" in n for n in ours.notes)
    assert (ours.rank_memory["optimizer_states_bytes"] == 0).all()


def test_every_plan_and_workload_field_is_priced_or_refused_by_name() -> None:
    """A new plan axis must say how this backend prices it (or refuses it), not pass through silently."""
    plan_fields = {f.name for f in fields(ParallelPlan)}
    assert set(PLAN_FIELD_PRICING) <= plan_fields and plan_fields >= MEASURED_HERE
    for axis in PLAN_AXES:  # a line of its own, else the row's pricing
        line = field_pricing(axis)
        assert line == PLAN_FIELD_PRICING.get(axis.name, line) and line
        if axis.name not in PLAN_FIELD_PRICING:
            assert ("step model" in line) == (axis.pricing is Pricing.STEP_MODEL)


def test_a_field_that_changes_the_measured_ops_is_refused_from_its_row() -> None:
    """A measured-ops axis with no rule of its own here is refused by name unless it holds the plan's default
    (the partial activation offload: no line in PLAN_FIELD_PRICING); a step-model axis passes."""
    prof = read_profile(EXAMPLE_PROFILE)
    wl = Workload(seq_len=128, global_batch_size=8, dtype="fp32")
    axis = plan_axis("offload_activation_layers")
    assert axis.pricing is Pricing.MEASURED_OPS and axis.name not in {*PLAN_FIELD_PRICING, *MEASURED_HERE}
    said = unsupported(prof.model, wl, ParallelPlan(offload_activations=True, offload_activation_layers=1))
    assert "offload_activation_layers=1 (refused unless offload_activation_layers=None" in " ".join(said)
    assert unsupported(prof.model, wl, ParallelPlan(dp=2, zero_stage=1, zero_shard=2)) == []
    assert set(WORKLOAD_FIELD_PRICING) == {f.name for f in fields(Workload)}


MOE_PROFILE = EXAMPLE_PROFILE.with_name("mixtral-8x7b-L2-H256-cpu-fp32")


@pytest.mark.parametrize(
    ("moe", "workload", "plan", "said"),
    [
        (False, {}, ParallelPlan(loss_chunks=4), ("loss_chunks=4", "supports loss_chunks=1")),
        (False, {}, ParallelPlan(pp=2, vocab_parallel=True), ("vocab_parallel=True with pp=2", "supports")),
        (False, {}, ParallelPlan(offload_activations=True), ("offload_activations=True", "supports")),
        (False, {"optimizer": "sgd"}, ParallelPlan(), ("optimizer=sgd", "supports optimizer=adamw")),
        (
            True,
            {},
            ParallelPlan(dp=2, tp=2, ep=2),
            ("etp=1 (the default with ep > 1)", "supports etp=tp: etp=2"),
        ),
        (True, {}, ParallelPlan(tp=2, ep=2, etp=1), ("etp=1 (the profile", "etp=2")),
        (True, {"capacity_factor": 1.25}, ParallelPlan(), ("capacity_factor=1.25", "dropless")),
    ],
    ids=[
        "loss_chunks",
        "vocab_parallel",
        "offload_activations",
        "optimizer",
        "etp_default",
        "etp",
        "capacity",
    ],
)
def test_refuses_what_a_profile_cannot_price_by_name(
    moe: bool, workload: dict, plan: ParallelPlan, said
) -> None:
    root = MOE_PROFILE if moe else EXAMPLE_PROFILE
    prof = read_profile(root)
    wl = Workload(seq_len=128, global_batch_size=8, dtype="fp32", **workload)
    cluster = host_cluster(prof, num_devices=plan.num_devices)
    assert unsupported(prof.model, wl, plan)
    for price in (
        lambda: get_backend("torch-profile", profile=str(root)).estimate(prof.model, cluster, wl, plan),
        lambda: profile_costs(prof, prof.model, cluster, wl, plan),
    ):
        with pytest.raises(ValueError, match="torch-profile backend does not price") as err:
            price()
        for words in said:
            assert words in str(err.value)


def test_what_it_prices_is_not_refused() -> None:
    """vocab_parallel without a pipeline changes nothing (priced as without); an expert tp equal to tp is the
    profile's own split (the next stop is the profile's missing tp=2 rows, not a refusal)."""
    prof = read_profile(EXAMPLE_PROFILE)
    wl = Workload(seq_len=128, global_batch_size=8, dtype="fp32")
    backend = get_backend("torch-profile", profile=str(EXAMPLE_PROFILE))
    plain = backend.estimate(prof.model, host_cluster(prof), wl, ParallelPlan())
    spread = backend.estimate(prof.model, host_cluster(prof), wl, ParallelPlan(vocab_parallel=True))
    assert spread.step_time_s == plain.step_time_s and spread.peak_memory_bytes == plain.peak_memory_bytes
    moe = read_profile(MOE_PROFILE)
    plan = ParallelPlan(dp=2, tp=2, ep=2, etp=2)
    assert unsupported(moe.model, wl, plan) == []
    with pytest.raises(LookupError, match="no embedding rows for tp=2 cp=1 ep=2"):
        get_backend("torch-profile", profile=str(MOE_PROFILE)).estimate(
            moe.model, host_cluster(moe, num_devices=4), wl, plan
        )


def test_tensor_and_context_parallel_communication_is_the_step_models(tmp_path: Path) -> None:
    rows = [
        {**_row(op, b, tp=2), "cp": 2, "num_tokens": b * 64}
        for op in ("embedding", "layer", "head")
        for b in (1, 4)
    ]
    root = _write_rows(tmp_path, rows)
    wl = Workload(seq_len=128, global_batch_size=4, dtype="fp32")
    plan = ParallelPlan(tp=2, cp=2, sequence_parallel=True)
    cluster = replace(_cluster(4), levels=(SLOW_LINK,))
    prof, fitted, ours, theirs = _both_costs(root, SPEC, cluster, wl, plan)
    assert (ours.rank_comm_s["tp"] > 0).all() and (ours.rank_comm_s["cp"] > 0).all()
    _assert_same_step_model_terms(ours, theirs, StepContext.build(SPEC, fitted, wl, Calibration()), 1e-8)
    # stage time = measured compute of 4 ops (F = 1.2 ms each) + the step model's exposed forward
    # communication of the 2 blocks
    pair = step.layer_pair(StepContext.build(SPEC, fitted, wl, Calibration()), step.plan_columns(plan, wl))
    comm_f = 2 * float(pair.dense.tp_f_s + pair.dense.cp_f_s)
    assert comm_f > 0 and ours.stages.forward_s[0] == pytest.approx(4 * 1.2e-3 + comm_f, rel=1e-12)


def _write_rows(tmp: Path, rows: list[dict]) -> Path:
    folder = _write(tmp)
    pl.DataFrame([*pl.read_parquet(folder / "ops.parquet").to_dicts(), *rows]).write_parquet(
        folder / "ops.parquet"
    )
    return folder


def test_uneven_split_is_the_step_models(tmp_path: Path) -> None:
    """6 blocks over 4 stages: the remainder goes to the middle stages (1, 2, 2, 1 blocks), as
    ``step.stage_holdings`` (Megatron's uneven split) has it, so every stage runs 2 ops of 1.2 ms forward."""
    _write(tmp_path)
    model = replace(SPEC, num_layers=6)
    wl = Workload(seq_len=128, global_batch_size=4, dtype="fp32")
    plan = ParallelPlan(pp=4)
    prof = find_profile(tmp_path, model, "host-cpu", "fp32")
    costs = profile_costs(prof, model, _cluster(4), wl, plan)
    held = step.stage_holdings(model, 4, np.arange(4))
    assert held["dense"].tolist() == [1, 2, 2, 1]
    assert costs.stages.forward_s == pytest.approx((2.4e-3,) * 4)
    assert costs.stages.activation_bytes == pytest.approx((2000.0,) * 4)


def test_hfu_follows_metrics_not_four_thirds_of_mfu() -> None:
    prof = read_profile(EXAMPLE_PROFILE)
    model, wl = prof.model, Workload(seq_len=128, global_batch_size=8, dtype="fp32")
    est = get_backend("torch-profile", profile=str(EXAMPLE_PROFILE)).estimate(
        model, host_cluster(prof), wl, ParallelPlan(recompute="full")
    )
    figures = throughput(
        model,
        wl,
        step_time_s=est.step_time_s,
        num_devices=1,
        peak_flop_per_s=host_cluster(prof).device.peak(wl.dtype),
        recompute_code=2,
    )
    assert est.hfu == pytest.approx(float(figures["hfu"]), rel=1e-12)
    assert est.mfu == pytest.approx(float(figures["mfu"]), rel=1e-12)
    assert est.hfu / est.mfu == pytest.approx(
        hardware_flop_per_token(model, 128, 2) / model.model_flop_per_token(128), rel=1e-12
    )
    assert est.hfu != pytest.approx(est.mfu * 4 / 3, rel=1e-3)


# ---- real measurement -------------------------------------------------------------------------------------
TOLERANCE_FRAC = 0.15
"""The issue's bound. On a quiet 2-core machine the prediction lands within ~5% of the measured median step;
medians of 7 repeats of either side move by up to ~10% when other processes share the cores, so one attempt
can exceed 15% by noise alone: the test re-measures both sides up to 3 times and passes on the first attempt
within the bound (noise only ever inflates a timing, so an agreeing attempt is not a fluke)."""


def _measured_step_s(torch, spec, *, seq_len: int, micro_batch: int, num_micro: int, repeats: int) -> float:
    from workbench_backends.torch_model import build_model, random_tokens

    model = build_model(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = random_tokens(spec, micro_batch * num_micro, seq_len + 1)
    times = []
    for k in range(repeats + 2):
        t0 = time.thread_time()  # the clock the profile's ops were timed with (one torch thread)
        for mb in tokens.split(micro_batch):
            model.loss(mb).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if k >= 2:
            times.append(time.thread_time() - t0)
    return statistics.median(times)


@pytest.mark.slow
def test_predicts_single_process_step_within_15_percent(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from workbench_backends.profile_record import Shape, record_profile

    from workbench.presets.profile_table import host_cluster, read_profile, write_profile

    torch.set_num_threads(1)
    spec = replace(SPEC, name="tiny-real")
    wl = Workload(seq_len=128, global_batch_size=8, dtype="fp32")
    errors = []
    for attempt in range(3):
        manifest, ops = record_profile(
            spec, [Shape(micro_batch_size=2, seq_len=128)], repeats=7, progress=False
        )
        folder = write_profile(tmp_path / f"a{attempt}", manifest, ops)
        prof = read_profile(folder)
        predicted = (
            get_backend("torch-profile", profile=str(folder))
            .estimate(spec, host_cluster(prof), wl, ParallelPlan(micro_batch_size=2))
            .step_time_s
        )
        measured = _measured_step_s(torch, spec, seq_len=128, micro_batch=2, num_micro=4, repeats=7)
        errors.append(predicted / measured - 1)
        if abs(errors[-1]) < TOLERANCE_FRAC:
            return
    pytest.fail(f"predicted/measured - 1 over 3 attempts: {[f'{e:+.1%}' for e in errors]}")
