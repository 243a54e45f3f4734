"""The closed-form screen: step time and peak memory of many plans at once (numpy arrays, one entry per plan).

It prices with the analytic backend's own cost functions, called on arrays: per-layer compute and exposed
tp/cp/ep communication (:func:`workbench.costs.layer_costs`), embedding and LM head
(:func:`workbench.costs.edge_costs`), the collectives of :mod:`workbench.comm` and the memory formulas of
:mod:`workbench.memory`. Only the pipeline differs: a closed-form makespan per schedule
(:mod:`workbench.search.bubble`, checked against the simulator) and a closed-form activation peak
(:mod:`workbench.search.peak_memory`) replace the simulation. The assembly mirrors
:func:`workbench.analytic_assembly.assemble` step by step (with pp = 1 the two agree to rounding; a test
guards it): step = makespan + exposed data-parallel reduction + optimizer; the critical pipeline rank is the
first or the last one, whichever is busier; the bubble follows the other ranks' mean work. Plans use the
default rank order (tp innermost, then cp, dp, pp), so tp groups have stride 1, cp groups stride tp, dp groups
stride tp*cp and pipeline neighbours stride tp*cp*dp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.analytic import OPTIMIZER_BYTES_PER_PARAM
from workbench.comm import all_gather_s, all_reduce_s, p2p_s, reduce_scatter_s
from workbench.costs import ACT_BYTES, dtype_bytes, edge_costs, layer_costs
from workbench.memory import activation_parts
from workbench.schedules import uses_v_placement
from workbench.search import bubble, peak_memory

if TYPE_CHECKING:
    from workbench.calibration import Calibration
    from workbench.hardware import ClusterSpec
    from workbench.memory import ActivationParts
    from workbench.model import ModelSpec
    from workbench.plan import Workload
    from workbench.search.space import PlanSpace

Cols = dict[str, np.ndarray]


def _layout_layers(model: ModelSpec, space: PlanSpace) -> dict[str, dict[str, np.ndarray]]:
    lay = space.layout
    v_shape = np.array([uses_v_placement(n) for n in space.schedule_names])[lay["schedule_code"]]
    return {
        name: peak_memory.rank_layers(model, pp=lay["pp"], vpp=lay["vpp"], v_shape=v_shape, rank=rank)
        for name, rank in (("first", 0), ("last", lay["pp"] - 1))
    }


@dataclass(frozen=True, kw_only=True)
class ScreenContext:
    """Everything the screen needs that does not change from plan to plan."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    cal: Calibration
    schedule_names: tuple[str, ...]
    family: np.ndarray
    """Per schedule code: its ``peak_memory.PEAK_FAMILIES`` index."""
    layout_layers: dict[str, dict[str, np.ndarray]]
    """For the first and the last pipeline rank ("first", "last"): ``peak_memory.rank_layers`` of every
    layout row of the space (gathered per plan by ``layout_index``)."""
    bubble_family: np.ndarray
    """Per schedule code: its ``bubble.FAMILIES`` index."""
    param_bytes: float
    optimizer_bytes: float
    capacity_bytes: float
    dense_parts: ActivationParts
    moe_parts: ActivationParts
    model_flop_per_step: float
    peak_flop_per_s: float
    hbm_bytes_per_s: float
    """Achievable HBM bandwidth (calibrated device)."""

    def rank_layers(self, cols: Cols, rank: str) -> dict[str, np.ndarray]:
        """Layer counts and embedding/head flags of the ``first`` or ``last`` pipeline rank of every plan."""
        idx = cols["layout_index"]
        return {k: v[idx] for k, v in self.layout_layers[rank].items()}

    @classmethod
    def build(
        cls,
        model: ModelSpec,
        cluster: ClusterSpec,
        workload: Workload,
        cal: Calibration,
        space: PlanSpace,
    ) -> ScreenContext:
        optimizer_bytes = (12.0 if workload.optimizer.value == "adamw" else 8.0) - (
            0.0 if cal.master_weights else 4.0
        )
        parts = dict(flash=cal.flash_attention, dropout=cal.dropout, act_bytes=ACT_BYTES)
        device = cal.device(cluster.device)
        return cls(
            model=model,
            cluster=cluster,
            workload=workload,
            cal=cal,
            schedule_names=space.schedule_names,
            family=peak_memory.family_codes(space.schedule_names),
            layout_layers=_layout_layers(model, space),
            bubble_family=bubble.family_of(space.schedule_names),
            param_bytes=dtype_bytes(workload.dtype),
            optimizer_bytes=optimizer_bytes,
            capacity_bytes=cluster.device.hbm_bytes,
            dense_parts=activation_parts(model, **parts),  # type: ignore[arg-type]
            moe_parts=activation_parts(model, moe_layer=True, capacity_factor=cal.capacity_factor, **parts)  # type: ignore[arg-type]
            if model.is_moe
            else activation_parts(model, **parts),  # type: ignore[arg-type]
            model_flop_per_step=model.model_flop_per_token(workload.seq_len) * workload.tokens_per_step,
            peak_flop_per_s=cluster.device.peak(workload.dtype),
            hbm_bytes_per_s=device.hbm_bytes_per_s * device.hbm_efficiency_frac,
        )


def screen_memory(ctx: ScreenContext, cols: Cols) -> Cols:
    """peak_memory_bytes and memory_frac (of the device capacity) of every plan."""
    peak = peak_memory.peak_memory_bytes(ctx, cols)
    return {"peak_memory_bytes": peak, "memory_frac": peak / ctx.capacity_bytes}


def _layers(ctx: ScreenContext, cols: Cols) -> tuple[Any, Any, Any]:
    """Dense-layer costs, MoE-layer costs (None for a dense model) and edge costs, elementwise."""
    w, tp, cp = ctx.workload, cols["tp"], cols["cp"]
    tokens = cols["micro_batch_size"] * w.seq_len / cp
    kw = dict(
        dtype=w.dtype,
        tokens=tokens,
        seq_len=w.seq_len,
        tp=tp,
        cp=cp,
        ep=cols["ep"],
        sequence_parallel=cols["sequence_parallel"],
        recompute=cols["recompute_code"],
        tp_stride=1,
        cp_stride=tp,
    )
    dense = layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=False, **kw)  # type: ignore[arg-type]
    moe = layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=True, **kw) if ctx.model.is_moe else None  # type: ignore[arg-type]
    edges = edge_costs(ctx.model, ctx.cluster, ctx.cal, dtype=w.dtype, tokens=tokens, tp=tp)
    return dense, moe, edges


def _dp_comm_s(ctx: ScreenContext, cols: Cols, dense: Any, expert: Any) -> Any:
    """Exposed gradient reduction after the pipeline (as ``workbench.analytic.dp_step_comm_s``)."""
    cal, tp, ep, z = ctx.cal, cols["tp"], cols["ep"], cols["zero_stage"]
    eff, g = cal.collective_efficiency_frac, cal.grad_bytes_per_param
    etp = np.where(ep > 1, 1, tp)
    groups = (
        (dense, cols["dp"] * cols["cp"], tp),
        (expert, cols["dp"] * cols["cp"] * tp // (ep * etp), ep * etp),
    )
    total: Any = 0.0
    for params, n, stride in groups:
        n_safe = np.maximum(n, 1)
        ar = all_reduce_s(ctx.cluster, params * g, n_safe, stride, eff)
        rs_ag = reduce_scatter_s(ctx.cluster, params * g, n_safe, stride, eff) + all_gather_s(
            ctx.cluster, params * ctx.param_bytes, n_safe, stride, eff
        )
        part = np.where(z == 0, ar, rs_ag)
        total = total + np.where((params > 0) & (n > 1) & (z < 3), part, 0.0)
    return total * (1 - cal.dp_comm_overlap_frac)


def _fsdp_s(ctx: ScreenContext, cols: Cols, per_layer_compute_s: Any) -> tuple[Any, Any]:
    """ZeRO-3 exposed gathers per layer and micro-batch, forward and backward (``analytic.fsdp_layer_comm_s``)."""
    model, cal, tp = ctx.model, ctx.cal, cols["tp"]
    n = cols["dp"] * cols["cp"]
    layer_bytes = model.layer_parameters(model.num_layers - 1) / tp * ctx.param_bytes
    eff = cal.collective_efficiency_frac
    ag = all_gather_s(ctx.cluster, layer_bytes, n, tp, eff)
    rs = reduce_scatter_s(ctx.cluster, layer_bytes / ctx.param_bytes * cal.grad_bytes_per_param, n, tp, eff)
    keep = 1 - cal.fsdp_comm_overlap_frac
    on = (cols["zero_stage"] >= 3) & (n > 1)
    f = np.maximum(ag * keep, ag - per_layer_compute_s / 3)
    b = np.maximum((ag + rs) * keep, ag + rs - 2 * per_layer_compute_s / 3)
    return np.where(on, f, 0.0), np.where(on, b, 0.0)


def _stage_compute_s(ctx: ScreenContext, cols: Cols, dense: Any, moe: Any, edges: Any) -> Any:
    """Largest per-stage compute (F + I + W) of the first and the last stage, divided by layers per stage:
    the per-layer compute ZeRO-3's gathers hide behind (``assemble``'s ``per_layer``)."""
    model = ctx.model
    stages = cols["pp"] * cols["vpp"]
    per = model.num_layers // stages
    dense_total = model.num_layers - model.num_moe_layers
    d_layer = dense.compute_f_s + dense.compute_i_s + dense.compute_w_s
    m_layer = moe.compute_f_s + moe.compute_i_s + moe.compute_w_s if moe is not None else 0.0
    first_d = np.clip(dense_total, 0, per)
    last_d = np.clip(dense_total - (stages - 1) * per, 0, per)
    emb = edges.embedding_f_s + edges.embedding_b_s
    head = edges.head_f_s + edges.head_i_s + edges.head_w_s
    one = stages == 1
    first = first_d * d_layer + (per - first_d) * m_layer + emb + np.where(one, head, 0.0)
    last = last_d * d_layer + (per - last_d) * m_layer + head + np.where(one, emb, 0.0)
    return np.maximum(first, last) / np.maximum(per, 1)


def _rank_share(
    dense: Any, moe: Any, edges: Any, layers: dict[str, Any], fsdp: tuple[Any, Any]
) -> dict[str, Any]:
    """One rank's F, I, W seconds per micro-batch and their parts (as ``workbench.analytic.stage_times``)."""
    nd, nm = layers["dense"], layers["moe"]
    emb, head = layers["embedding"], layers["head"]

    def both(field: str) -> Any:
        return nd * getattr(dense, field) + (nm * getattr(moe, field) if moe is not None else 0.0)

    comp_f = both("compute_f_s") + emb * edges.embedding_f_s + head * edges.head_f_s
    comp_i = both("compute_i_s") + emb * edges.embedding_b_s + head * edges.head_i_s
    comp_w = both("compute_w_s") + head * edges.head_w_s
    dp_f, dp_b = (nd + nm) * fsdp[0], (nd + nm) * fsdp[1]
    tp_f, tp_b = both("tp_f_s"), both("tp_b_s")
    cp_f, cp_b = both("cp_f_s"), both("cp_b_s")
    ep_f, ep_b = both("ep_f_s"), both("ep_b_s")
    return {
        "f": comp_f + tp_f + cp_f + ep_f + dp_f,
        "i": comp_i + tp_b + cp_b + ep_b + dp_b,
        "w": comp_w,
        "compute": comp_f + comp_i + comp_w,
        "tp": tp_f + tp_b,
        "cp": cp_f + cp_b,
        "ep": ep_f + ep_b,
        "fsdp": dp_f + dp_b,
    }


def screen_time(ctx: ScreenContext, cols: Cols) -> Cols:
    """Closed-form step time of every plan, its breakdown (seconds, ``StepBreakdown`` names), tokens_per_s
    and mfu. The pipeline makespan is ``workbench.search.bubble.makespan_s`` on the first and the last rank's
    share; the slower one is the critical rank whose parts the breakdown reports."""
    dense, moe, edges = _layers(ctx, cols)
    pp, vpp, m, code = cols["pp"], cols["vpp"], cols["num_microbatches"], cols["schedule_code"]
    fsdp = _fsdp_s(ctx, cols, _stage_compute_s(ctx, cols, dense, moe, edges))
    payload = (
        cols["micro_batch_size"]
        * ctx.workload.seq_len
        / cols["cp"]
        * ctx.model.hidden_size
        * ACT_BYTES
        / cols["tp"]
    )
    pp_stride = cols["tp"] * cols["cp"] * cols["dp"]
    p2p = np.where(pp > 1, p2p_s(ctx.cluster, payload, pp_stride, ctx.cal.collective_efficiency_frac), 0.0)
    hops = np.where(pp > 1, 2 * (pp * vpp - 1), 0)
    best: dict[str, Any] = {}
    dp_s: Any = 0.0
    opt_s: Any = 0.0
    shard = np.where(cols["zero_stage"] >= 1, cols["dp"] * cols["cp"], 1)
    model = ctx.model
    everything = {
        "dense": model.num_layers - model.num_moe_layers,
        "moe": model.num_moe_layers,
        "embedding": True,
        "head": True,
    }
    whole = _rank_share(dense, moe, edges, everything, fsdp)
    for rank in ("first", "last"):
        layers = ctx.rank_layers(cols, rank)
        share = _rank_share(dense, moe, edges, layers, fsdp)
        others = tuple((whole[k] - share[k]) / np.maximum(pp - 1, 1) for k in ("f", "i", "w"))
        share["makespan"] = bubble.makespan_s(
            ctx.bubble_family[code],
            pp=pp,
            vpp=vpp,
            m=m,
            f_s=share["f"],
            i_s=share["i"],
            w_s=share["w"],
            p2p_time_s=p2p,
            others=others,
        )
        d_params, e_params = peak_memory.rank_params(ctx, cols, layers)
        dp_s = np.maximum(dp_s, _dp_comm_s(ctx, cols, d_params, e_params))
        opt_s = np.maximum(
            opt_s, (d_params + e_params) / shard * OPTIMIZER_BYTES_PER_PARAM / ctx.hbm_bytes_per_s
        )
        take = share["makespan"] >= best["makespan"] if best else True
        best = {k: np.where(take, v, best[k]) if best else v for k, v in share.items()}
    step = best["makespan"] + dp_s + opt_s
    busy = m * (best["f"] + best["i"] + best["w"])
    pp_comm = np.minimum(np.maximum(best["makespan"] - busy, 0.0), hops * p2p)
    return {
        "step_time_s": step,
        "tokens_per_s": ctx.workload.tokens_per_step / step,
        "mfu": ctx.model_flop_per_step / step / cols["num_devices"] / ctx.peak_flop_per_s,
        "compute_s": m * best["compute"],
        "exposed_tp_comm_s": m * best["tp"],
        "exposed_cp_comm_s": m * best["cp"],
        "exposed_ep_comm_s": m * best["ep"],
        "exposed_pp_comm_s": pp_comm,
        "exposed_dp_comm_s": m * best["fsdp"] + dp_s,
        "bubble_s": np.maximum(best["makespan"] - busy, 0.0) - pp_comm,
        "optimizer_s": opt_s,
    }
