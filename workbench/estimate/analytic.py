"""The analytic cost model: roofline op costs and NCCL-model collectives priced as ``PlanCosts``.

Every term comes from the step model of :mod:`workbench.cost.step`, evaluated for one plan (a batch of one)
over its pipeline stages and ranks: the planner's screen calls the same functions over millions of plans,
so the two tiers differ only in the pipeline term. :func:`workbench.estimate.assemble.assemble` simulates
the schedule and builds the ``Estimate``; ``estimate_plan`` is the entry point (CLI, validation, reports).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from workbench.cost import step
from workbench.estimate.assemble import COMM_KINDS, PlanCosts, assemble
from workbench.estimate.band import cached_band, regime_of
from workbench.pipeline import bubble
from workbench.pipeline.schedules import num_directions
from workbench.pipeline.simulate import StageCosts
from workbench.presets.calibration import Calibration, load_calibration
from workbench.specs.limits import SCHEDULE_CACHE_SIZE

if TYPE_CHECKING:
    from workbench.pipeline.schedules import Schedule
    from workbench.specs.estimate import Estimate
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan, Workload


def build_pipeline(plan: ParallelPlan, num_microbatches: int) -> Schedule:
    """The plan's schedule; pp = 1 runs its micro-batches one after another (1F1B on one rank)."""
    if plan.pp == 1:
        return _cached_schedule("1f1b", 1, num_microbatches, 1)
    return _cached_schedule(plan.schedule, plan.pp, num_microbatches, plan.vpp)


@lru_cache(maxsize=SCHEDULE_CACHE_SIZE)
def _cached_schedule(name: str, pp: int, num_microbatches: int, vpp: int) -> Schedule:
    """Schedules are frozen data; an app re-costing one plan shape reuses the built one, and a search's
    refinement the shapes its top plans share (bound and reason: ``limits.SCHEDULE_CACHE_SIZE``)."""
    from workbench.pipeline.schedules import build_schedule

    return build_schedule(name, pp=pp, num_microbatches=num_microbatches, vpp=vpp)


def pipeline_holdings(model: ModelSpec, schedule: Schedule) -> tuple[step.Holdings, step.Holdings]:
    """(per stage, per pipeline rank) holdings of a schedule's stages and ranks."""
    from workbench.pipeline.schedules import uses_v_placement

    stages = step.stage_holdings(model, schedule.num_stages, np.arange(schedule.num_stages))
    v_shape = schedule.pp > 1 and uses_v_placement(schedule.name)
    ranks = step.rank_holdings(
        model,
        pp=schedule.pp,
        vpp=schedule.vpp,
        v_shape=v_shape,
        rank=np.arange(schedule.pp),
        copies=schedule.num_directions,
    )
    return stages, ranks


def analytic_costs(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan, cal: Calibration
) -> PlanCosts:
    """Price one valid plan's pieces with the step model (see the module docstring)."""
    ctx = step.StepContext.build(model, cluster, workload, cal)
    cols = step.plan_columns(plan, workload)
    schedule = build_pipeline(plan, plan.num_microbatches(workload))
    stage_held, rank_held = pipeline_holdings(model, schedule)
    stage_held = step.spread_vocab(stage_held, cols, schedule.num_stages)
    rank_held = step.spread_vocab(rank_held, cols, plan.pp)
    pair = step.layer_pair(ctx, cols)
    fsdp = step.fsdp_layer_s(ctx, cols, step.mean_layer_compute_s(model, pair))
    blocking = plan.pp > 1 and plan.schedule in cal.framework.blocking_p2p_schedules
    hop = step.pp_hop_s(ctx, cols)
    per_stage = step.share_s(pair, stage_held, fsdp, step.pp_blocking_s(hop, blocking, 1))
    rank_actions = schedule.num_stages / plan.pp / num_directions(plan.schedule)
    per_rank = step.share_s(pair, rank_held, fsdp, step.pp_blocking_s(hop, blocking, rank_actions))
    sizes = step.activation_sizes(ctx, cols)
    dense, expert = step.params_held(ctx, cols, rank_held)
    dp = step.dp_comm_s(ctx, cols, dense, expert, step.whole_share(model, pair, fsdp))
    n = schedule.num_stages

    def stage_array(key: str) -> tuple[float, ...]:
        return tuple(np.broadcast_to(np.asarray(per_stage[key], dtype=float), n))

    stages = StageCosts(
        forward_s=stage_array("f"),
        backward_s=tuple(np.add(stage_array("i"), stage_array("w"))),
        backward_input_s=stage_array("i"),
        backward_weight_s=stage_array("w"),
        p2p_s=float(step.pp_latency_s(hop, blocking)),
        p2p_rank_s=tuple(map(tuple, step.pp_hop_table_s(ctx, cols)))
        if plan.pp > 1 and not blocking
        else None,
        activation_bytes=tuple(
            np.broadcast_to(np.asarray(step.stored_activation_bytes(sizes, stage_held), dtype=float), n)
        ),
        released_at_input_grad_frac=float(sizes.freed_at_input_grad_frac),
    )
    return PlanCosts(
        schedule=schedule,
        stages=stages,
        rank_compute_s=_per_rank(per_rank["compute"], plan.pp),
        rank_comm_s={k: _per_rank(per_rank[k], plan.pp) for k in COMM_KINDS},
        rank_hidden_s={k: _per_rank(per_rank[f"hidden_{k}"], plan.pp) for k in COMM_KINDS},
        dp_comm_s=float(np.max(dp.exposed)),
        dp_hidden_s=float(np.max(dp.hidden)),
        optimizer_s=float(np.max(step.optimizer_s(ctx, cols, dense, expert))),
        rank_memory={k: _per_rank(v, plan.pp) for k, v in step.static_memory(ctx, cols, rank_held).items()},
        overhead_bytes=cal.framework.context_bytes,
        fragmentation_frac=cal.framework.fragmentation_frac,
        tiled=bool(
            bubble.tiles((plan.schedule,), post_validation=cal.framework.optimizer_post_validation)[0]
        ),
        notes=_notes(cal, plan, model, cluster.device.id),
    )


def _per_rank(values: object, pp: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(values, dtype=float), pp).copy()


def estimate_plan(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    plan: ParallelPlan,
    *,
    calibration: Calibration | str | None = None,
    backend: str = "analytic",
    allow_uneven_layers: bool = False,
) -> Estimate:
    """Cost one plan with the analytic model. ``calibration``: a Calibration, a calibration file name or path
    (default ``profiles/calibration/default.toml``). Stages may hold different layer counts when the framework
    runs uneven stages (see :func:`workbench.cost.step.stage_holdings`); ``allow_uneven_layers`` waives the
    layers rule altogether (published runs whose layer counts are transcribed without their embedding or head
    stages). Raises ValueError listing every violated plan rule."""
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration or "default")
    broken = plan.violations(model, cluster, workload, uneven_stages=cal.framework.uneven_stages)
    problems = [v.sentence for v in broken if not (allow_uneven_layers and v.key == "layers")]
    if problems:
        raise ValueError("infeasible plan: " + " ".join(problems))
    unsupported = cal.framework.unsupported(plan, dtype=workload.dtype)
    if unsupported:
        raise ValueError(f"framework {cal.framework.id} does not run: {'; '.join(unsupported)}")
    cal = dataclasses.replace(
        cal, framework=cal.framework.running(plan)
    )  # the plan's choices among its offers
    est = assemble(
        model, cluster, workload, plan, analytic_costs(model, cluster, workload, plan, cal), backend=backend
    )
    est = dataclasses.replace(est, framework=cal.framework.id, framework_version=cal.framework.version)
    band = cached_band(regime_of(model, workload, plan, stack=cal.framework.group))
    return est if band is None else dataclasses.replace(est, band=band)


def _notes(cal: Calibration, plan: ParallelPlan, model: ModelSpec, device_id: str) -> tuple[str, ...]:
    notes = [
        f"framework: {cal.framework.label}; fitted constants: {cal.name}",
        "MFU: PaLM model FLOPs (6N + full-s^2 attention, no recompute) over the dense peak of the dtype",
        "attention: "
        + (
            "fused (FlashAttention), causal half executed"
            if cal.framework.flash_attention
            else "unfused, full s^2 executed and stored"
        ),
    ]
    if plan.ep > 1:
        notes.append(
            "experts: balanced routing, expert tensor parallel 1 (expert-data-parallel = dp*cp*tp/ep)"
        )
    recipe = cal.framework.recipe(device_id, model.name)
    if recipe:
        fields = "; ".join(
            f"{k} {', '.join(v) or 'none' if isinstance(v, list | tuple) else v}" for k, v in recipe.items()
        )
        notes.append(f"recipe of {cal.framework.id} for {model.name} on {device_id}: {fields}")
    return tuple(notes)
