"""Closed-form step time of many plans at once, for the planner's screen (no schedule simulation).

Uses the same cost functions as the analytic backend (:func:`workbench.costs.layer_costs`,
:func:`workbench.costs.edge_costs`, :mod:`workbench.comm`) so the two cannot drift; the pipeline part is
:func:`workbench.costs.pipeline_time_s` (the schedule's closed-form bubble) instead of the simulator.
Plan fields are numpy arrays (or scalars) broadcast elementwise; the rank order is the default
(tp innermost, then cp, dp, pp). Differences from ``estimate_plan``: layers are spread evenly (pp divides
the layers), the last rank's LM head is added to the per-rank time, and ZeRO-3 gathers are hidden behind
the layer's whole compute share.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.calibration import Calibration
from workbench.comm import all_gather_s, all_reduce_s, p2p_s, reduce_scatter_s
from workbench.costs import ACT_BYTES, dtype_bytes, edge_costs, layer_costs, pipeline_time_s
from workbench.hardware import ClusterSpec
from workbench.model import ModelSpec
from workbench.plan import Workload

Array = Any


def closed_form_step_time_s(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    cal: Calibration,
    *,
    dp: Array,
    tp: Array,
    pp: Array,
    cp: Array = 1,
    ep: Array = 1,
    vpp: Array = 1,
    micro_batch_size: Array = 1,
    zero_stage: Array = 0,
    sequence_parallel: Array = False,
    recompute: Array = 0,
    schedule: Array = 0,
) -> Array:
    """Step time in seconds per plan. ``recompute``: codes of ``memory.RECOMPUTE_CODES``; ``schedule``: codes
    of ``costs.SCHEDULE_CODES``. Plans whose global batch does not divide give ``inf``."""
    dp, tp, pp, cp, ep, vpp, mbs = (np.asarray(x) for x in (dp, tp, pp, cp, ep, vpp, micro_batch_size))
    per_step = dp * mbs
    m = np.where(workload.global_batch_size % per_step == 0, workload.global_batch_size // per_step, 0)
    tokens = mbs * workload.seq_len / cp
    kw = dict(
        dtype=workload.dtype,
        tokens=tokens,
        seq_len=workload.seq_len,
        tp=tp,
        cp=cp,
        ep=ep,
        sequence_parallel=sequence_parallel,
        recompute=np.asarray(recompute),
        tp_stride=1,
        cp_stride=tp,
    )
    layer = layer_costs(model, cluster, cal, moe_layer=False, **kw)
    dense_share = 1.0 - model.num_moe_layers / model.num_layers
    parts = [(layer, dense_share)]
    if model.is_moe:
        parts.append((layer_costs(model, cluster, cal, moe_layer=True, **kw), 1.0 - dense_share))
    per_rank = model.num_layers / pp
    f = sum(w * (c.compute_f_s + c.tp_f_s + c.cp_f_s + c.ep_f_s) for c, w in parts) * per_rank
    i = sum(w * (c.compute_i_s + c.tp_b_s + c.cp_b_s + c.ep_b_s) for c, w in parts) * per_rank
    w_ = sum(w * c.compute_w_s for c, w in parts) * per_rank
    edges = edge_costs(model, cluster, cal, dtype=workload.dtype, tokens=tokens, tp=tp)
    f, i, w_ = f + edges.head_f_s, i + edges.head_i_s, w_ + edges.head_w_s
    pbytes = dtype_bytes(workload.dtype)
    f_fsdp, b_fsdp = _fsdp_per_microbatch(model, cluster, cal, dp * cp, tp, zero_stage, pbytes, per_rank)
    f, i = f + np.maximum(f_fsdp - f, 0.0), i + np.maximum(b_fsdp - (i + w_), 0.0)
    hop = p2p_s(
        cluster,
        tokens * model.hidden_size * ACT_BYTES / tp,
        tp * cp * dp * (pp - 1),
        cal.collective_efficiency_frac,
    )
    pipe = pipeline_time_s(
        np.asarray(schedule),
        pp=pp,
        vpp=vpp,
        num_microbatches=m,
        f_s=f,
        b_s=i + w_,
        w_s=w_,
        p2p_time_s=np.where(pp > 1, hop, 0.0),
    )
    local = (model.total_parameters() / pp) / tp
    dp_s = _dp_step_s(cluster, cal, local, dp * cp, tp, zero_stage, pbytes)
    return np.where(m > 0, pipe + dp_s, np.inf)


def _fsdp_per_microbatch(
    model: ModelSpec,
    cluster: ClusterSpec,
    cal: Calibration,
    n: Array,
    tp: Array,
    zero_stage: Array,
    pbytes: float,
    layers: Array,
) -> tuple[Array, Array]:
    """ZeRO-3 forward and backward communication per micro-batch on one rank, before overlap."""
    layer_bytes = model.layer_parameters(model.num_layers - 1) / tp * pbytes
    eff = cal.collective_efficiency_frac
    ag = all_gather_s(cluster, layer_bytes, n, tp, eff) * layers
    rs = reduce_scatter_s(cluster, layer_bytes / pbytes * cal.grad_bytes_per_param, n, tp, eff) * layers
    on = (zero_stage >= 3) & (n > 1)
    keep = 1 - cal.fsdp_comm_overlap_frac
    return np.where(on, ag * keep, 0.0), np.where(on, (ag + rs) * keep, 0.0)


def _dp_step_s(
    cluster: ClusterSpec,
    cal: Calibration,
    local_params: Array,
    n: Array,
    tp: Array,
    zero_stage: Array,
    pbytes: float,
) -> Array:
    """Gradient reduction after the last backward (ZeRO 0: all-reduce; 1-2: reduce-scatter + all-gather)."""
    g, eff = cal.grad_bytes_per_param, cal.collective_efficiency_frac
    ar = all_reduce_s(cluster, local_params * g, n, tp, eff)
    rs_ag = reduce_scatter_s(cluster, local_params * g, n, tp, eff) + all_gather_s(
        cluster, local_params * pbytes, n, tp, eff
    )
    t = np.select([zero_stage == 0, zero_stage < 3], [ar, rs_ag], 0.0)
    return np.where(n > 1, t, 0.0) * (1 - cal.dp_comm_overlap_frac)
