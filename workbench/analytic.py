"""The analytic cost model end to end: model + cluster + workload + plan -> stage costs -> simulator -> Estimate.

Pieces: per-layer roofline compute and exposed collectives (:mod:`workbench.costs`), the pipeline schedule
priced by the discrete simulator (:mod:`workbench.simulate`), data-parallel gradient reduction and the
optimizer step after the pipeline flush, memory per pipeline rank (:mod:`workbench.memory`, with in-flight
activations from the simulated schedule). ``estimate_plan`` is the reusable entry point (CLI, validation,
reports); :mod:`workbench.search.screen` is the planner's simulation-free twin.

MFU follows PaLM (Chowdhery et al. 2022, appendix B): ``ModelSpec.model_flop_per_token`` (6N + attention,
full s^2, no recompute) over the dense peak of the workload's dtype (FP8 runs: the FP8 peak). HFU adds the
recomputed FLOPs (full: the layers' forward; selective: the attention scores' forward), the convention of
Megatron's eq. 3 (Narayanan et al. 2021).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from workbench.calibration import Calibration, load_calibration
from workbench.comm import all_gather_s, all_reduce_s, p2p_s, reduce_scatter_s
from workbench.costs import ACT_BYTES, EdgeCosts, LayerCosts, edge_costs, layer_costs
from workbench.estimate import Estimate
from workbench.memory import RECOMPUTE_CODES
from workbench.placement import axis_stride
from workbench.plan import Axis, ParallelPlan, Workload

if TYPE_CHECKING:
    from workbench.hardware import ClusterSpec
    from workbench.model import ModelSpec
    from workbench.schedules import Schedule

OPTIMIZER_BYTES_PER_PARAM = 30.0
"""HBM traffic of one Adam step per locally owned parameter: read the fp32 gradient (4), read and write the
fp32 master weight and both moments (24), write the 16-bit weight (2)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StagePlan:
    """What each global pipeline stage holds (tuples indexed by stage)."""

    num_dense_layers: tuple[int, ...]
    num_moe_layers: tuple[int, ...]
    has_embedding: tuple[bool, ...]
    has_head: tuple[bool, ...]


def stage_layout(model: ModelSpec, num_stages: int) -> StagePlan:
    """Layers split over the stages in order (dense-first layers land on the first stages). When the stages
    do not divide the layers, the remainder goes one each to the middle stages, sparing the first and last
    (which hold the embedding and the LM head), as Megatron-LM's uneven pipeline split does."""
    base, extra = divmod(model.num_layers, num_stages)
    order = sorted(range(num_stages), key=lambda s: (s in (0, num_stages - 1), abs(s - (num_stages - 1) / 2)))
    counts = np.full(num_stages, base)
    counts[order[:extra]] += 1
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    dense_total = model.num_layers - model.num_moe_layers
    dense = tuple(int(np.clip(dense_total - st, 0, c)) for st, c in zip(starts, counts, strict=True))
    return StagePlan(
        num_dense_layers=dense,
        num_moe_layers=tuple(int(c) - d for c, d in zip(counts, dense, strict=True)),
        has_embedding=tuple(s == 0 for s in range(num_stages)),
        has_head=tuple(s == num_stages - 1 for s in range(num_stages)),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class StageTimes:
    """Seconds per micro-batch per stage, by part. Arrays of length num_stages."""

    f_s: np.ndarray
    i_s: np.ndarray
    w_s: np.ndarray
    compute_s: np.ndarray
    tp_s: np.ndarray
    cp_s: np.ndarray
    ep_s: np.ndarray
    dp_s: np.ndarray


def _layer_pair(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan, cal: Calibration
) -> tuple[LayerCosts, LayerCosts | None, EdgeCosts]:
    kw = dict(
        dtype=workload.dtype,
        tokens=plan.micro_batch_size * workload.seq_len / plan.cp,
        seq_len=workload.seq_len,
        tp=plan.tp,
        cp=plan.cp,
        ep=plan.ep,
        sequence_parallel=plan.sequence_parallel,
        recompute=RECOMPUTE_CODES[plan.recompute.value],
        tp_stride=axis_stride(plan, Axis.TP),
        cp_stride=axis_stride(plan, Axis.CP),
    )
    dense = layer_costs(model, cluster, cal, moe_layer=False, **kw)  # type: ignore[arg-type]
    moe = layer_costs(model, cluster, cal, moe_layer=True, **kw) if model.is_moe else None  # type: ignore[arg-type]
    edges = edge_costs(model, cluster, cal, dtype=workload.dtype, tokens=kw["tokens"], tp=plan.tp)
    return dense, moe, edges


def stage_times(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    plan: ParallelPlan,
    cal: Calibration,
    layout: StagePlan,
    fsdp_per_layer: tuple[float, float],
) -> StageTimes:
    """Per-stage F, I, W durations for one micro-batch, with the exposed communication folded in."""
    dense, moe, edges = _layer_pair(model, cluster, workload, plan, cal)
    nd = np.array(layout.num_dense_layers, dtype=float)
    nm = np.array(layout.num_moe_layers, dtype=float)
    emb = np.array(layout.has_embedding, dtype=float)
    head = np.array(layout.has_head, dtype=float)

    def both(field: str) -> np.ndarray:
        d = float(getattr(dense, field))
        return nd * d + (nm * float(getattr(moe, field)) if moe is not None else 0.0)

    comp_f = both("compute_f_s") + emb * float(edges.embedding_f_s) + head * float(edges.head_f_s)
    comp_i = both("compute_i_s") + emb * float(edges.embedding_b_s) + head * float(edges.head_i_s)
    comp_w = both("compute_w_s") + head * float(edges.head_w_s)
    fs_f, fs_b = fsdp_per_layer
    dp_f, dp_b = (nd + nm) * fs_f, (nd + nm) * fs_b
    tp_f, tp_b = both("tp_f_s"), both("tp_b_s")
    cp_f, cp_b = both("cp_f_s"), both("cp_b_s")
    ep_f, ep_b = both("ep_f_s"), both("ep_b_s")
    return StageTimes(
        f_s=comp_f + tp_f + cp_f + ep_f + dp_f,
        i_s=comp_i + tp_b + cp_b + ep_b + dp_b,
        w_s=comp_w,
        compute_s=comp_f + comp_i + comp_w,
        tp_s=tp_f + tp_b,
        cp_s=cp_f + cp_b,
        ep_s=ep_f + ep_b,
        dp_s=dp_f + dp_b,
    )


def fsdp_layer_comm_s(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: ParallelPlan,
    cal: Calibration,
    param_bytes: float,
    compute_f_s: float,
    compute_b_s: float,
) -> tuple[float, float]:
    """ZeRO-3/FSDP per layer and micro-batch: all-gather the layer's weights forward, again backward, and
    reduce-scatter its gradients (Rajbhandari et al. 2020 section 5.3), exposed beyond the overlap share and
    beyond the compute it hides behind."""
    if plan.zero_stage < 3 or plan.dp * plan.cp == 1:
        return 0.0, 0.0
    n, stride = plan.dp * plan.cp, axis_stride(plan, Axis.CP if plan.cp > 1 else Axis.DP)
    layer_bytes = model.layer_parameters(model.num_layers - 1) / plan.tp * param_bytes
    ag = float(all_gather_s(cluster, layer_bytes, n, stride, cal.collective_efficiency_frac))
    rs = float(
        reduce_scatter_s(
            cluster,
            layer_bytes / param_bytes * cal.grad_bytes_per_param,
            n,
            stride,
            cal.collective_efficiency_frac,
        )
    )
    keep = 1 - cal.fsdp_comm_overlap_frac
    return max(ag * keep, ag - compute_f_s), max((ag + rs) * keep, ag + rs - compute_b_s)


def build_pipeline(plan: ParallelPlan, num_microbatches: int) -> Schedule:
    """The plan's schedule; pp = 1 runs its micro-batches one after another (1F1B on one rank)."""
    if plan.pp == 1:
        return _cached_schedule("1f1b", 1, num_microbatches, 1)
    return _cached_schedule(plan.schedule, plan.pp, num_microbatches, plan.vpp)


@lru_cache(maxsize=128)
def _cached_schedule(name: str, pp: int, num_microbatches: int, vpp: int) -> Schedule:
    """Schedules are frozen data; an app re-costing one plan shape reuses the built one."""
    from workbench.schedules import build_schedule

    return build_schedule(name, pp=pp, num_microbatches=num_microbatches, vpp=vpp)


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
    (default ``profiles/calibration/default.toml``). ``allow_uneven_layers`` waives the rule that pp*vpp
    divides the layers (see ``stage_layout``). Raises ValueError listing every violated plan rule."""
    from workbench.analytic_assembly import assemble

    problems = plan.validate(model, cluster, workload)
    if allow_uneven_layers:
        problems = [p for p in problems if "must divide the" not in p or "layers" not in p]
    if problems:
        raise ValueError("infeasible plan: " + " ".join(problems))
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration or "default")
    return assemble(model, cluster, workload, plan, cal, backend=backend)


def dp_step_comm_s(
    cluster: ClusterSpec,
    plan: ParallelPlan,
    cal: Calibration,
    *,
    dense_params: float,
    expert_params: float,
    param_bytes: float,
) -> float:
    """Gradient reduction after the last backward (ZeRO 0: all-reduce; 1-2: reduce-scatter + all-gather of
    the updated weights; 3: per micro-batch, see ``fsdp_layer_comm_s``), over dp*cp for dense weights and
    over the expert-data-parallel group for experts; the overlap share is hidden."""
    eff, g = cal.collective_efficiency_frac, cal.grad_bytes_per_param
    etp = 1 if plan.ep > 1 else plan.tp
    groups = (
        (dense_params, plan.dp * plan.cp, axis_stride(plan, Axis.CP if plan.cp > 1 else Axis.DP)),
        (expert_params, plan.dp * plan.cp * plan.tp // (plan.ep * etp), plan.ep * etp),
    )
    total = 0.0
    for params, n, stride in groups:
        if params <= 0 or n <= 1 or plan.zero_stage >= 3:
            continue
        if plan.zero_stage == 0:
            total += float(all_reduce_s(cluster, params * g, n, stride, eff))
        else:
            total += float(reduce_scatter_s(cluster, params * g, n, stride, eff))
            total += float(all_gather_s(cluster, params * param_bytes, n, stride, eff))
    return total * (1 - cal.dp_comm_overlap_frac)


def pp_p2p_s(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan, cal: Calibration
) -> float:
    """One activation (or gradient) transfer between pipeline stages; Megatron's scatter-gather sends 1/tp
    of it when tp > 1 (Narayanan et al. 2021 section 4.1). The simulator takes one p2p time for every hop,
    so the slowest hop sets it: the level that joins the first and the last stage's ranks."""
    if plan.pp == 1:
        return 0.0
    payload = plan.micro_batch_size * workload.seq_len / plan.cp * model.hidden_size * ACT_BYTES / plan.tp
    span = axis_stride(plan, Axis.PP) * (plan.pp - 1)
    return float(p2p_s(cluster, payload, span, cal.collective_efficiency_frac))
