"""Assembly of the analytic ``Estimate``: stage costs -> simulator -> step time, breakdown, memory, timeline.

Step time = simulated pipeline makespan (compute and exposed tp/cp/ep/ZeRO-3 communication inside each
action, p2p between stages) + exposed data-parallel gradient reduction + the optimizer step. The breakdown is
read on the critical rank (the busiest one): its compute and exposed communication by kind; its idle time
split into point-to-point (at most 2(p*v-1) transfers on the critical path) and bubble.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from workbench.analytic import (
    OPTIMIZER_BYTES_PER_PARAM,
    build_pipeline,
    dp_step_comm_s,
    fsdp_layer_comm_s,
    pp_p2p_s,
    stage_layout,
    stage_times,
)
from workbench.analytic_memory import memory_table, stage_activation_bytes, stage_param_counts
from workbench.costs import dtype_bytes
from workbench.estimate import TIMELINE_COLUMNS, Estimate, StepBreakdown
from workbench.simulate import StageCosts, simulate

if TYPE_CHECKING:
    from workbench.calibration import Calibration
    from workbench.hardware import ClusterSpec
    from workbench.model import ModelSpec
    from workbench.plan import ParallelPlan, Workload
    from workbench.simulate import SimResult


def _hardware_flop_per_token(model: ModelSpec, workload: Workload, plan: ParallelPlan) -> float:
    """Model FLOPs plus recomputed ones: full adds the layers' forward (2 N_layers + attention/3),
    selective the attention scores' forward (attention/3)."""
    attention = model.attention_flop_per_token(workload.seq_len)
    layers = model.non_embedding_active_parameters() - model.lm_head_parameters()
    extra = {"none": 0.0, "selective": attention / 3, "full": 2.0 * layers + attention / 3}[
        plan.recompute.value
    ]
    return model.model_flop_per_token(workload.seq_len) + extra


def _timeline(sim: SimResult) -> pl.DataFrame:
    tl = sim.timeline.select(TIMELINE_COLUMNS)
    if sim.comm.height == 0:
        return tl
    chunk = {s: sim.schedule.chunk_of_stage(s) for s in range(sim.schedule.num_stages)}
    comm = sim.comm.select(
        pl.col("dst_rank").alias("rank"),
        "stage",
        pl.col("stage").replace_strict(chunk, return_dtype=pl.Int64).alias("chunk"),
        "microbatch",
        pl.lit("comm").alias("op"),
        "start_s",
        "end_s",
    )
    return pl.concat([tl, comm.cast(tl.schema)])


def _breakdown(
    sim: SimResult, times, s2r: np.ndarray, m: int, p2p: float, dp_s: float, opt_s: float
) -> StepBreakdown:
    pp = sim.schedule.pp
    per_rank = {
        k: np.bincount(s2r, weights=getattr(times, k), minlength=pp) * m
        for k in ("compute_s", "tp_s", "cp_s", "ep_s", "dp_s")
    }
    r = int(np.argmax(sim.busy_s))
    idle = max(sim.makespan_s - sim.busy_s[r], 0.0)
    pp_exposed = min(idle, 2 * (sim.schedule.num_stages - 1) * p2p)
    return StepBreakdown(
        compute_s=float(per_rank["compute_s"][r]),
        exposed_tp_comm_s=float(per_rank["tp_s"][r]),
        exposed_cp_comm_s=float(per_rank["cp_s"][r]),
        exposed_ep_comm_s=float(per_rank["ep_s"][r]),
        exposed_pp_comm_s=pp_exposed,
        exposed_dp_comm_s=float(per_rank["dp_s"][r]) + dp_s,
        bubble_s=idle - pp_exposed,
        optimizer_s=opt_s,
    )


def assemble(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    plan: ParallelPlan,
    cal: Calibration,
    *,
    backend: str = "analytic",
) -> Estimate:
    """Build the Estimate of a valid plan (see the module docstring)."""
    m = plan.num_microbatches(workload)
    schedule = build_pipeline(plan, m)
    layout = stage_layout(model, schedule.num_stages)
    param_bytes = dtype_bytes(workload.dtype)
    # ZeRO-3 hides its gathers behind one layer's compute: price a layer first, then fold the comm in.
    bare = stage_times(model, cluster, workload, plan, cal, layout, (0.0, 0.0))
    layers = np.array(layout.num_dense_layers) + np.array(layout.num_moe_layers)
    per_layer = bare.compute_s.max() / max(int(layers.max()), 1)
    fsdp = fsdp_layer_comm_s(model, cluster, plan, cal, param_bytes, per_layer / 3, 2 * per_layer / 3)
    times = stage_times(model, cluster, workload, plan, cal, layout, fsdp) if any(fsdp) else bare
    acts, freed, work = stage_activation_bytes(model, workload, plan, cal, layout)
    p2p = pp_p2p_s(model, cluster, workload, plan, cal)
    costs = StageCosts(
        forward_s=tuple(times.f_s),
        backward_s=tuple(times.i_s + times.w_s),
        backward_input_s=tuple(times.i_s),
        backward_weight_s=tuple(times.w_s),
        p2p_s=p2p,
        activation_bytes=tuple(acts),
        released_at_input_grad_frac=freed,
    )
    sim = simulate(schedule, costs)
    s2r = np.array(schedule.stage_to_rank)
    dense, expert = stage_param_counts(model, plan, layout)
    dense_r = np.bincount(s2r, weights=dense, minlength=plan.pp)
    expert_r = np.bincount(s2r, weights=expert, minlength=plan.pp)
    dp_s = max(
        dp_step_comm_s(
            cluster, plan, cal, dense_params=float(d), expert_params=float(e), param_bytes=param_bytes
        )
        for d, e in zip(dense_r, expert_r, strict=True)
    )
    shard = plan.dp * plan.cp if plan.zero_stage >= 1 else 1
    device = cal.device(cluster.device)
    opt_s = (
        float(((dense_r + expert_r) / shard).max())
        * OPTIMIZER_BYTES_PER_PARAM
        / (device.hbm_bytes_per_s * device.hbm_efficiency_frac)
    )
    breakdown = _breakdown(sim, times, s2r, m, p2p, dp_s, opt_s)
    step = sim.makespan_s + dp_s + opt_s
    tokens = workload.tokens_per_step
    peak = cluster.device.peak(workload.dtype)
    model_flop = model.model_flop_per_token(workload.seq_len) * tokens
    memory = memory_table(
        model,
        workload,
        plan,
        cal,
        schedule,
        layout,
        sim.peak_activation_bytes_per_rank,
        param_bytes=param_bytes,
        recompute_work_bytes=work,
    )
    activation = sim.inflight.select("rank", "time_s", "activation_bytes")
    return Estimate(
        backend=backend,
        model=model,
        cluster=cluster,
        workload=workload,
        plan=plan,
        step_time_s=step,
        tokens_per_s=tokens / step,
        mfu=model_flop / step / plan.num_devices / peak,
        hfu=_hardware_flop_per_token(model, workload, plan) * tokens / step / plan.num_devices / peak,
        model_flop_per_s_per_device=model_flop / step / plan.num_devices,
        bubble_fraction=sim.bubble_fraction_of_step,
        breakdown=breakdown,
        memory=memory,
        memory_capacity_bytes=cluster.device.hbm_bytes,
        timeline=_timeline(sim),
        activation_timeline=activation,
        notes=_notes(cal, plan),
    )


def _notes(cal: Calibration, plan: ParallelPlan) -> tuple[str, ...]:
    notes = [
        f"calibration: {cal.name}",
        "MFU: PaLM model FLOPs (6N + full-s^2 attention, no recompute) over the dense peak of the dtype",
        "attention: "
        + (
            "fused (FlashAttention), causal half executed"
            if cal.flash_attention
            else "unfused, full s^2 executed and stored"
        ),
    ]
    if plan.ep > 1:
        notes.append(
            "experts: balanced routing, expert tensor parallel 1 (expert-data-parallel = dp*cp*tp/ep)"
        )
    return tuple(notes)
