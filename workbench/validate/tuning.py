"""Tuning what a published row leaves blank the way a tuned run would (for :func:`workbench.validate.training.row_case`):
the micro-batch of a stack's rule or the largest that fits, full recompute when it lets a larger micro-batch
run faster, and a global batch the data-parallel ranks split into whole micro-batches."""

from __future__ import annotations

import dataclasses

from workbench.presets.calibration import Calibration
from workbench.specs.framework import FrameworkProfile
from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Recompute, Workload
from workbench.validate.rows import cell_number, fit_verdict


def whole_micro_batches(row: dict[str, str], gbs: int, replica_batch: int, assumed: list[str]) -> int:
    """The global batch a row is priced with: the published one, or, when the data-parallel ranks cannot split
    it into whole micro-batches (a source that rounds its batch, e.g. "2M tokens" over 124 replicas), the
    nearest multiple of dp x micro-batch (``replica_batch``), listed in ``assumed``. Tokens per second and
    FLOP/s per device do not depend on how many micro-batches a step has without pipeline stages and barely
    with them; a step time does, so a row measured by its step time keeps the published batch (and is refused
    as infeasible)."""
    if gbs % replica_batch == 0 or cell_number(row, "measured_step_time_s") is not None:
        return gbs
    whole = max(round(gbs / replica_batch), 1) * replica_batch
    assumed.append(f"global_batch_size:{whole} (published {gbs}, not a multiple of dp x micro-batch)")
    return whole


def _tuning_calibration(plan: ParallelPlan, fw: FrameworkProfile, workload: Workload) -> Calibration:
    """The calibration a row's plan is tuned with (micro-batch, recompute): the default fit, ``fw`` admitting
    ``plan``."""
    from workbench.presets.calibration import load_calibration

    return load_calibration().with_framework(fw.admitting(plan, dtype=str(workload.dtype)))


def memory_fit(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan, fw: FrameworkProfile
) -> tuple[bool, str]:
    """Whether ``plan`` fits the device by the planner's rule (:func:`workbench.validate.rows.fit_verdict`:
    the peak rank's need within the usable memory), priced as a row's plan is tuned, and what it needs
    (``"197.9 of 171.0 GiB usable"``; an infeasible plan: ``(False, "infeasible: <why>")``)."""
    from workbench.estimate.analytic import estimate_plan

    cal = _tuning_calibration(plan, fw, workload)
    try:
        est = estimate_plan(model, cluster, workload, plan, calibration=cal, allow_uneven_layers=True)
    except ValueError as exc:
        return False, f"infeasible: {' '.join(str(exc).split())}"
    verdict = fit_verdict(est, cal.framework, cal.framework)
    return verdict["fits"], f"{verdict['predicted_need_GiB']:.1f} of {verdict['usable_GiB']:.1f} GiB usable"


def largest_fitting_micro_batch(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan, fw: FrameworkProfile
) -> ParallelPlan:
    """``plan`` with the largest micro-batch that divides the data-parallel rank's batch and whose predicted
    peak memory fits the device: a run without pipeline stages that names no micro-batch accumulates no more
    gradient steps than memory forces (fewer, larger GEMMs), as tuned published runs do. ``plan`` itself
    when no larger one fits or the batch does not split evenly."""
    from workbench.estimate.analytic import estimate_plan

    replicas = plan.dp * plan.cp
    local = workload.global_batch_size // replicas
    if local <= 1 or workload.global_batch_size % replicas:
        return plan
    cal = _tuning_calibration(plan, fw, workload)
    for mbs in sorted((d for d in range(2, local + 1) if local % d == 0), reverse=True):
        candidate = dataclasses.replace(plan, micro_batch_size=mbs)
        try:
            est = estimate_plan(
                model, cluster, workload, candidate, calibration=cal, allow_uneven_layers=True
            )
        except ValueError:
            continue
        if est.fits:
            return candidate
    return plan


def tuned_recompute(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    plan: ParallelPlan,
    fw: FrameworkProfile,
    assumed: list[str],
) -> ParallelPlan:
    """A run without pipeline stages that names neither its micro-batch nor its recompute: ``plan`` (no
    recompute at the largest micro-batch that fits) or full recompute at the largest micro-batch that fits
    with it, whichever the model prices faster, as a tuned run would choose; full recompute is listed in
    ``assumed``. (Sharded runs at small micro-batches are bound by their per-layer gathers; recomputing lets a
    larger micro-batch fit and hide them: OPT-175B's 124-way FSDP at one sequence per rank.)"""
    from workbench.estimate.analytic import estimate_plan

    full = largest_fitting_micro_batch(
        model, cluster, workload, dataclasses.replace(plan, recompute=Recompute.FULL), fw
    )
    cal = _tuning_calibration(plan, fw, workload)
    try:
        kept, redone = (
            estimate_plan(model, cluster, workload, p, calibration=cal, allow_uneven_layers=True)
            for p in (plan, full)
        )
    except ValueError:
        return plan
    if redone.fits and (not kept.fits or redone.tokens_per_s > kept.tokens_per_s):
        assumed.append(f"recompute:full (micro-batch {full.micro_batch_size} fits with it and runs faster)")
        return full
    return plan


def default_micro_batch_size(row: dict[str, str], fw: FrameworkProfile, *, dp: int, pp: int, vpp: int) -> int:
    """The micro-batch size of a row that gives none: the stack's ``default_microbatches`` rule (``stages``:
    the data-parallel rank's batch split into pp x vpp micro-batches, ``pp``: into pp micro-batches, when the
    row gives the global batch and pp > 1), else 1."""
    gbs = cell_number(row, "global_batch_size")
    count = microbatches_per_rank(fw, pp=pp, vpp=vpp)
    if fw.default_microbatches != "mbs1" and pp > 1 and gbs is not None and dp > 0:
        local = int(gbs) // dp
        if local % count == 0 and local >= count:
            return local // count
    return 1


def microbatches_per_rank(fw: FrameworkProfile, *, pp: int, vpp: int) -> int:
    """Micro-batches per step of a data-parallel rank under the stack's ``default_microbatches`` rule when
    pp > 1 (``stages``: pp x vpp; ``pp``: pp; ``mbs1``: 2 pp, this module's own default, as many as keep a
    1F1B pipeline full twice over); 1 when pp = 1."""
    if pp <= 1:
        return 1
    return {"stages": pp * vpp, "pp": pp}.get(fw.default_microbatches, 2 * pp)
