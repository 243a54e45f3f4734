"""The update after the last backward: the data-parallel gradient reduction (and the parameter all-gather of
ZeRO 1-2) and the optimizer step, on device or offloaded to the host.

Sources: ZeRO sharding and its communication (Rajbhandari et al. 2020, arXiv:1910.02054, sections 5.1-5.3);
ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840); Adam's HBM traffic per parameter
(``workbench.cost.context.OPTIMIZER_BYTES_PER_PARAM``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from workbench.cost.comm import all_gather_s, all_reduce_s, reduce_scatter_s
from workbench.cost.context import (
    OPTIMIZER_BYTES_PER_PARAM,
    Array,
    Cols,
    StepContext,
    expert_dp,
    expert_tp,
    host_path,
    shard_group,
    strides,
    zero_exec,
)
from workbench.cost.overlap import Overlapped, overlap

HOST_ADAM_BYTES_PER_PARAM = 28.0
"""Host-memory bytes an optimizer step offloaded to the CPUs streams per parameter: it reads the fp32 master
weight and the two fp32 moments (12) and the 16-bit gradient (2), writes the three back (12) and the 16-bit
weight for the device (2). ZeRO-Offload's CPU-Adam (Ren et al. 2021, arXiv:2101.06840, section 5.1) is
vectorised so that this stream, not arithmetic, bounds it (ASSUMED: priced at the host's DRAM bandwidth)."""


def grad_buckets(
    ctx: StepContext, params: Array, units: Array, dp_ranks: Array
) -> tuple[Array, Array, Array]:
    """How a rank's data-parallel reduction is issued: (bucket, full buckets, remainder), parameters. Each
    bucket is its own collective with its own latency terms, so at hundreds of ranks many small buckets cost
    more than one message of the same bytes. Stacks that reduce per FSDP unit (``grad_bucket_per_layer``:
    each wrapped block, plus the root unit with the embedding and head) issue ``units`` equal buckets; the
    others fill buckets of max(``grad_bucket_params``, ``grad_bucket_params_per_rank`` x ``dp_ranks``) and
    send the remainder last. ``params``: the rank's parameters in the group, an array over plans; ``units``:
    the FSDP units holding them; ``dp_ranks``: the data-parallel group (dp*cp)."""
    fw = ctx.cal.framework
    if fw.grad_bucket_per_layer:
        return params / units, units, 0.0 * params
    bucket = np.minimum(params, np.maximum(fw.grad_bucket_params, fw.grad_bucket_params_per_rank * dp_ranks))
    full = np.floor(params / np.maximum(bucket, 1e-300))
    return bucket, full, params - full * bucket


class _GroupReduction(NamedTuple):
    """One data-parallel group's reduction, seconds: all of it, and the bucket a stack cannot hide (the last
    gradient bucket, the first parameter-gather bucket); 0 where a plan does not reduce over the group."""

    reduce_s: Array
    gather_s: Array
    reduce_tail_s: Array
    gather_tail_s: Array


def _dp_groups(
    ctx: StepContext, cols: Cols, z: Array, dense_params: Array, expert_params: Array
) -> tuple[tuple[Array, Array, Array, Array, Array], ...]:
    """(parameters, ranks, stride, shard group within them, FSDP units holding them) of the non-expert weights
    (over dp*cp) and of the experts (over the expert-data-parallel group). ``z``: the executed ZeRO stage."""
    s, model = strides(cols), ctx.model
    dpcp = cols["dp"] * cols["cp"]
    layers = np.ceil(model.num_layers / cols["pp"])
    return (
        (dense_params, dpcp, s["dpcp"], np.where(z > 0, shard_group(cols), dpcp), layers + 1),
        (
            expert_params,
            expert_dp(cols),
            cols["ep"] * expert_tp(cols),
            expert_dp(cols),
            np.maximum(np.ceil(model.num_moe_layers / cols["pp"]), 1),
        ),
    )


def _group_reduction(
    ctx: StepContext, z: Array, dpcp: Array, params: Array, n: Array, stride: Array, k: Array, units: Array
) -> _GroupReduction:
    """The reduction of one group of ``_dp_groups`` in the buckets of ``grad_buckets``: ZeRO 0 all-reduces
    over the n ranks; 1-3 reduce-scatter inside the shard group of k (ZeRO-3 does it per layer) and all-reduce
    the 1/k shard over the r = n/k replicas (HSDP); ZeRO 1-2 all-gather the updated weights in the shard group.
    Each collective is priced only when some plan of the batch needs it (the same values, less work)."""
    fw = ctx.cal.framework
    eff, g = fw.collective_efficiency_frac, fw.reduce_bytes_per_param
    replicas = np.maximum(n // np.maximum(k, 1), 1)

    def reduction(count: Array) -> Array:
        ar = all_reduce_s(ctx.cluster, count * g, n, stride, eff) if np.any(z == 0) else 0.0
        rs = (
            np.where(z < 3, reduce_scatter_s(ctx.cluster, count * g, k, stride, eff), 0.0)
            if np.any((z > 0) & (z < 3))
            else 0.0
        )
        across = (
            all_reduce_s(ctx.cluster, count * g / np.maximum(k, 1), replicas, stride * k, eff)
            if np.any(replicas > 1)
            else 0.0
        )
        return np.where(z == 0, ar, rs + across)

    bucket, full, rest = grad_buckets(ctx, params, units, dpcp)
    on = (params > 0) & (n > 1) & ((z < 3) | (replicas > 1))
    gathers = np.any(on & (z > 0) & (z < 3))

    def gathered(count: Array) -> Array:
        return all_gather_s(ctx.cluster, count * ctx.param_bytes, k, stride, eff) if gathers else 0.0

    red_bucket, ag_bucket = reduction(bucket), gathered(bucket)
    red_all, ag = full * red_bucket, full * ag_bucket
    has_rest = rest > 0
    if np.any(has_rest):  # FSDP units split evenly: no remainder to price
        red_all = red_all + np.where(has_rest, reduction(rest), 0.0)
        ag = ag + np.where(has_rest, gathered(rest), 0.0)
    gathering = on & (z > 0) & (z < 3)
    return _GroupReduction(
        reduce_s=np.where(on, red_all, 0.0),
        gather_s=np.where(gathering, ag, 0.0),
        reduce_tail_s=np.where(on, red_bucket, 0.0),
        gather_tail_s=np.where(gathering, ag_bucket, 0.0),
    )


def dp_comm_s(
    ctx: StepContext, cols: Cols, dense_params: Array, expert_params: Array, whole: Mapping[str, Array]
) -> Overlapped:
    """Data-parallel reduction of one step after the last backward, seconds (exposed, hidden). ZeRO 0
    all-reduces the gradients; 1-2 reduce-scatter them and all-gather the updated weights; 3 does its work per
    layer (``fsdp_layer_s``); by the stage the stack executes (``zero_exec``). Non-expert weights reduce over
    dp*cp, experts over the expert-data-parallel group. With hybrid sharding (``zero_shard``: shard groups of k
    ranks, replicated r = dp*cp/k times) the reduce-scatter and all-gather stay inside a shard group and each
    rank's 1/k shard of the gradients is all-reduced over the r replicas (for ZeRO-3 too, once per step). With
    ``overlap_grad_reduce`` the reduction runs in buckets of ``grad_bucket_params`` behind the last
    micro-batch's backward on a pipeline rank (``whole``: the whole model's ``share_s``, of which a rank runs
    1/pp), the last bucket exposed, unless pp > 1 and the stack reduces after the schedule
    (``grad_reduce_overlaps_pipeline`` false); with ``overlap_param_gather`` the all-gather runs behind the
    next step's first forward, the first bucket exposed (:mod:`workbench.cost.overlap`)."""
    fw, z = ctx.cal.framework, zero_exec(ctx, cols)
    dpcp = cols["dp"] * cols["cp"]
    parts = [
        _group_reduction(ctx, z, dpcp, *group)
        for group in _dp_groups(ctx, cols, z, dense_params, expert_params)
        if np.any(group[0] > 0)  # a dense model's expert group: nothing to reduce
    ]
    reduce: Array = 0.0
    gather: Array = 0.0
    for part in parts:
        reduce = reduce + part.reduce_s
        gather = gather + part.gather_s
    # the non-expert weights' bucket (the embedding's) is the last to reduce
    red_tail, gat_tail = (parts[0].reduce_tail_s, parts[0].gather_tail_s) if parts else (0.0, 0.0)
    mix = fw.comm_interference_frac
    back, fore = whole["compute_b"] / cols["pp"], whole["compute_f"] / cols["pp"]
    behind = fw.overlap_grad_reduce & ((cols["pp"] == 1) | fw.grad_reduce_overlaps_pipeline)
    red = overlap(reduce, back, on=behind, tail=red_tail, interference=mix)
    gat = overlap(gather, fore, on=fw.overlap_param_gather, tail=gat_tail, interference=mix)
    return Overlapped(red.exposed + gat.exposed, red.hidden + gat.hidden)


def optimizer_s(ctx: StepContext, cols: Cols, dense_params: Array, expert_params: Array) -> Array:
    """The optimizer step, HBM-bound: ``OPTIMIZER_BYTES_PER_PARAM`` (or the stack's own
    ``optimizer_bytes_per_param``) per locally owned parameter (ZeRO >= 1
    shards them over the shard group: dp*cp, or ``zero_shard`` with HSDP) over the achievable HBM bandwidth.
    Offloaded (``offload_optimizer``, ZeRO-Offload: Ren et al. 2021, arXiv:2101.06840): the step runs on the
    host, ``HOST_ADAM_BYTES_PER_PARAM`` over the host DRAM bandwidth per device, then the updated 16-bit
    weights cross to the device; the gradients' trip to the host overlaps the backward pass (paper section
    4.2) and is not counted."""
    shard = np.where(cols["zero_stage"] >= 1, shard_group(cols), 1)
    local = (dense_params + expert_params) / shard
    pcie, host = host_path(ctx)
    offloaded = local * HOST_ADAM_BYTES_PER_PARAM / host + local * ctx.param_bytes / pcie
    on = np.asarray(cols.get("offload_optimizer", False), dtype=bool)
    step_bytes = ctx.cal.framework.optimizer_bytes_per_param or OPTIMIZER_BYTES_PER_PARAM
    return np.where(on, offloaded, local * step_bytes / ctx.hbm_bytes_per_s)
