"""The step model on arrays: every cost of a training step outside the pipeline schedule, one code path.

Plans are columns (``Cols``): numpy arrays, or 0-d arrays for a single plan, of tp, cp, pp, dp, ep, vpp,
micro_batch_size, zero_stage, recompute_code (index into ``RECOMPUTE_CODES``), sequence_parallel and
num_microbatches, optionally with the group strides tp_stride, cp_stride, dp_stride and pp_stride (default:
Megatron's rank order, tp innermost, then cp, dp, pp; see :mod:`workbench.cost.placement`). What a pipeline
stage or rank holds is a ``Holdings`` dict (dense and MoE layer counts, embedding and LM-head flags) that
broadcasts against the columns: the full estimate passes one plan and arrays over its stages and ranks, the
planner's screen millions of plans and their first or last rank. Both tiers call these functions and
nothing else for compute, exposed tp/cp/ep/ZeRO-3 communication, the pipeline hop, the data-parallel
reduction, the optimizer step and every memory part; they differ only in the pipeline term (simulated
schedule vs closed forms of :mod:`workbench.pipeline.bubble` and :mod:`workbench.pipeline.peak`).

Sources: ZeRO sharding and its communication (Rajbhandari et al. 2020, arXiv:1910.02054, sections 5.1-5.3);
Megatron's pipeline hop of 1/tp of the activations (Narayanan et al. 2021, arXiv:2104.04473, section 4.1);
Adam's HBM traffic per parameter (read fp32 gradient, read and write fp32 master weight and both moments,
write the 16-bit weight: 4 + 24 + 2 bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from workbench.cost.comm import all_gather_s, all_reduce_s, p2p_s, reduce_scatter_s
from workbench.cost.layer import (
    ACT_BYTES,
    EdgeCosts,
    LayerCosts,
    dtype_bytes,
    edge_costs,
    layer_costs,
    routed_load,
)
from workbench.cost.memory import (
    RECOMPUTE_CODES,
    ActivationParts,
    activation_parts,
    layer_activation_bytes,
    logits_bytes,
    model_state_bytes,
    recompute_working_bytes,
    state_divisors,
)
from workbench.cost.overlap import Overlapped, overlap
from workbench.cost.placement import axis_stride, level_spans, pair_level_index
from workbench.specs.hardware import DEFAULT_STORAGE

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Optimizer, ParallelPlan, Workload

Array = Any
Cols = Mapping[str, Array]
Holdings = dict[str, Array]
"""dense, moe: layer counts (the blocks of multi-token-prediction modules included); embedding, head: 0/1 (or
bool) flags; mtp: multi-token-prediction modules held (their norms, projection and second head pass).
Arrays broadcast against ``Cols``."""

OPTIMIZER_BYTES_PER_PARAM = 30.0
"""HBM traffic of one Adam step per locally owned parameter, bytes (see the module docstring)."""

STATE_COLUMNS = ("parameters_bytes", "gradients_bytes", "optimizer_states_bytes")


def optimizer_state_bytes_per_param(
    optimizer: Optimizer | str, *, master_weights: bool = True, moment_bytes: float = 4.0
) -> float:
    """Optimizer-state bytes per parameter: an fp32 master weight plus two (AdamW) or one (SGD with momentum)
    moments of ``moment_bytes`` each (ZeRO section 3.1: K = 4 + 2 x 4 = 12 for mixed-precision Adam;
    DeepSeek-V3's BF16 moments: 4 + 2 x 2 = 8); without master weights 4 less."""
    moments = 2 if str(optimizer) == "adamw" else 1
    return (4.0 if master_weights else 0.0) + moments * moment_bytes


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """What does not change from plan to plan: the model, cluster, workload and calibration, and what they
    imply (bytes per weight, optimizer-state bytes, activation sizes per token, achievable HBM bandwidth)."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    cal: Calibration
    param_bytes: float
    optimizer_bytes: float
    dense_parts: ActivationParts
    moe_parts: ActivationParts
    """The MoE layer's parts (the dense layer's for a dense model)."""
    hbm_bytes_per_s: float
    fp8_copy_bytes: float = 0.0
    """Bytes per linear-layer weight of the FP8 copies an FP8 run keeps for the step (0 otherwise)."""

    @classmethod
    def build(
        cls, model: ModelSpec, cluster: ClusterSpec, workload: Workload, cal: Calibration
    ) -> StepContext:
        fw, fp8 = cal.framework.for_device(cluster.device.id, model.name), str(workload.dtype) == "fp8"
        kw: dict[str, Any] = {
            "flash": fw.flash_attention,
            "dropout": fw.dropout,
            "act_bytes": ACT_BYTES,
            "fp8_cache": fp8 and fw.fp8_activation_cache,
            "fp8_saved_inputs": fp8 and fw.fp8_saved_inputs,
            "fused_glu": fw.fused_glu,
            "recompute_cheap": fw.recompute_cheap_ops,
            "recompute_modules": fw.recompute_modules,
            "unfused_glu_clamp": "glu_clamp" in fw.unfused_model_ops,
        }
        dense = activation_parts(model, **kw)
        moe = (
            activation_parts(
                model,
                moe_layer=True,
                capacity_factor=routed_load(fw, workload.capacity_factor),
                **kw,
            )
            if model.is_moe
            else dense
        )
        device = cal.device(cluster.device)
        return cls(
            model=model,
            cluster=cluster,
            workload=workload,
            cal=cal,
            param_bytes=1.0 if fp8 and fw.fp8_param_gather else dtype_bytes(workload.dtype),
            fp8_copy_bytes=(
                max(fw.fp8_weight_copies - 1.0, 0.0) if fw.fp8_param_gather else fw.fp8_weight_copies
            )
            if fp8
            else 0.0,
            optimizer_bytes=optimizer_state_bytes_per_param(
                workload.optimizer,
                master_weights=fw.master_weights,
                moment_bytes=fw.optimizer_moment_bytes,
            ),
            dense_parts=dense,
            moe_parts=moe,
            hbm_bytes_per_s=device.hbm_bytes_per_s * device.hbm_efficiency_frac,
        )


def plan_columns(plan: ParallelPlan, workload: Workload) -> dict[str, np.ndarray]:
    """One plan as 0-d columns, with the strides of its ``rank_order``."""
    cols = {
        "tp": plan.tp,
        "cp": plan.cp,
        "ulysses": plan.ulysses,
        "loss_chunks": plan.loss_chunks,
        "offload_optimizer": plan.offload_optimizer,
        "offload_activations": plan.offload_activations,
        "vocab_parallel": plan.vocab_parallel,
        "pp": plan.pp,
        "dp": plan.dp,
        "ep": plan.ep,
        "etp": plan.expert_tp,
        "zero_shard": plan.shard_group,
        "vpp": plan.vpp,
        "micro_batch_size": plan.micro_batch_size,
        "zero_stage": plan.zero_stage,
        "recompute_code": RECOMPUTE_CODES[plan.recompute.value],
        "recompute_layers": plan.recompute_num_layers or 0,
        "sequence_parallel": plan.sequence_parallel,
        "num_microbatches": plan.num_microbatches(workload),
        "num_devices": plan.num_devices,
        **{f"{a}_stride": axis_stride(plan, a) for a in ("tp", "cp", "dp", "pp")},
    }
    return {k: np.asarray(v) for k, v in cols.items()}


def strides(cols: Cols) -> dict[str, Array]:
    """Rank distance between neighbours of the tp, cp, dp and pp groups, and of the joint dp*cp group that
    ZeRO shards over (it starts at cp's stride when cp > 1)."""
    tp, cp, dp = cols["tp"], cols["cp"], cols["dp"]
    out = {
        "tp": cols.get("tp_stride", 1),
        "cp": cols.get("cp_stride", tp),
        "dp": cols.get("dp_stride", tp * cp),
        "pp": cols.get("pp_stride", tp * cp * dp),
    }
    out["dpcp"] = np.where(cp > 1, out["cp"], out["dp"])
    return out


def shard_group(cols: Cols) -> Array:
    """Ranks the non-expert ZeRO states are sharded over: the plan's ``zero_shard`` column (HSDP), else all of
    dp*cp (``ParallelPlan.shard_group``)."""
    return cols.get("zero_shard", cols["dp"] * cols["cp"])


def tokens(ctx: StepContext, cols: Cols) -> Array:
    """Tokens of one micro-batch on one device: micro_batch_size * seq_len / cp."""
    return cols["micro_batch_size"] * ctx.workload.seq_len / cols["cp"]


def _stage_position(num_stages: Array, stage: Array) -> Array:
    """Rank of ``stage`` in the order that receives the remainder layers: middle stages nearest the centre
    first (the lower one first on a tie), then the first stage, then the last."""
    d = np.abs(2 * stage - (num_stages - 1))
    middle = np.maximum(d - 1, 0) + (num_stages - 1 - stage < stage)
    edge = np.maximum(num_stages - 2, 0) + (stage == num_stages - 1) * (num_stages > 1)
    return np.where((stage == 0) | (stage == num_stages - 1), edge, middle)


def stage_layer_span(num_layers: int, num_stages: Array, stage: Array) -> tuple[Array, Array]:
    """(first layer, layer count) of pipeline ``stage`` of ``num_stages``, elementwise: layers go in order; when
    the stages do not divide them, the remainder goes one each to the middle stages nearest the centre,
    sparing the first and the last (embedding and LM head), as Megatron-LM's uneven split does."""
    base, extra = np.divmod(num_layers, num_stages)
    count = base + (_stage_position(num_stages, stage) < extra)
    # The remainder stages are a run [lo, lo + k) of middle stages around the centre (the centre-most first,
    # the lower on a tie, so the run grows alternately down and up), then the first stage once every middle
    # stage has one: count those before ``stage`` in closed form.
    k = np.minimum(extra, np.maximum(num_stages - 2, 0))
    centre = (num_stages - 1) // 2
    lo = np.where(num_stages % 2 == 0, centre + 1 - (k + 1) // 2, centre - k // 2)
    start = stage * base + np.clip(stage - lo, 0, k) + ((extra > num_stages - 2) & (stage > 0) & (extra > 0))
    return start, count


def stage_holdings(model: ModelSpec, num_stages: Array, stage: Array) -> Holdings:
    """What pipeline ``stage`` of ``num_stages`` holds, elementwise: the layers of ``stage_layer_span``
    (dense-first layers land on the first stages), the embedding on stage 0 and the LM head on the last.
    A model's multi-token-prediction modules (``ModelSpec.num_mtp_layers``) sit on the last stage after the
    head, and the split counts each as one more layer there (each is a block like the last layer, counted in
    ``dense`` or ``moe``), so that stage keeps fewer decoder layers, as Megatron-Bridge's DeepSeek-V3 recipes
    lay them out (``pipeline_model_parallel_layout``: the stage with ``mtp`` and ``loss`` holds the
    remainder, e.g. one decoder layer of 61 at pp16)."""
    mtp = model.num_mtp_layers
    start, count = stage_layer_span(model.num_layers + mtp, num_stages, stage)
    last = stage == num_stages - 1
    count = count - np.where(last, mtp, 0)  # the MTP blocks are the last "layers"
    dense = np.clip(model.num_layers - model.num_moe_layers - start, 0, count)
    held_mtp = np.where(last, mtp, 0)
    extra_moe = held_mtp if model.num_moe_layers else 0
    return {
        "dense": dense + (held_mtp - extra_moe),
        "moe": count - dense + extra_moe,
        "embedding": stage == 0,
        "head": last,
        "mtp": held_mtp,
    }


def rank_holdings(
    model: ModelSpec, *, pp: Array, vpp: Array, v_shape: Array, rank: Array, copies: Array = 1
) -> Holdings:
    """What pipeline ``rank`` holds: stages r, r+p, ... (looping placement) or r and 2p-1-r (V placement).

    ``copies``: copies of the model the pipeline holds, one per direction it is fed from (1; DualPipe: 2,
    ``workbench.pipeline.schedules.num_directions``; DeepSeek-V3 report, arXiv:2412.19437 Table 2: parameters
    2x). The model is then cut into pp*vpp/copies blocks and stage s holds block s mod pp*vpp/copies, so
    DualPipe's rank r holds blocks r and p-1-r. The ``copies`` entry of the result tells ``share_s`` that one
    micro-batch goes through one copy: 1/copies of what the rank holds."""
    out: Holdings = {"dense": 0, "moe": 0, "embedding": False, "head": False, "mtp": 0, "copies": copies}
    blocks = pp * vpp // copies
    for k in range(int(np.max(vpp)) if np.size(vpp) else 0):
        stage = np.where(v_shape, np.where(k == 0, rank, 2 * pp - 1 - rank), rank + k * pp)
        held = k < vpp
        one = stage_holdings(model, blocks, np.where(held, stage % blocks, 0))
        out = {
            "dense": out["dense"] + np.where(held, one["dense"], 0),
            "moe": out["moe"] + np.where(held, one["moe"], 0),
            "embedding": out["embedding"] | (held & one["embedding"]),
            "head": out["head"] | (held & one["head"]),
            "mtp": out["mtp"] + np.where(held, one["mtp"], 0),
            "copies": copies,
        }
    return out


def spread_vocab(held: Holdings, cols: Cols, holders: Array) -> Holdings:
    """``held`` with the vocabulary layers spread (``ParallelPlan.vocab_parallel``, pp > 1): every one of the
    ``holders`` (the pipeline ranks, or the stages) holds 1/holders of the embedding and of the LM head with its
    loss instead of the first and the last holding them whole (Yeung et al. 2024, "Balancing Pipeline
    Parallelism with Vocabulary Parallelism", arXiv:2411.05288)."""
    on = np.asarray(cols.get("vocab_parallel", False), dtype=bool) & (np.asarray(cols["pp"]) > 1)
    if not np.any(on):
        return held
    share = 1.0 / np.asarray(holders, dtype=float)
    return {
        **held,
        "embedding": np.where(on, share, held["embedding"]),
        "head": np.where(on, share, held["head"]),
    }


class LayerPair(NamedTuple):
    """Per-layer costs of the model's dense and MoE layers (None for a dense model) and its edges."""

    dense: LayerCosts
    moe: LayerCosts | None
    edges: EdgeCosts


def recompute_share(model: ModelSpec, cols: Cols) -> Array:
    """Share of the layers a rank recomputes whole in its backward pass: 1 with full recompute, 0 without it;
    with ``recompute_layers`` N > 0 (``ParallelPlan.recompute_num_layers``: the first N layers of each model
    chunk) N over the layers of a mean chunk, ``min(1, N pp vpp / num_layers)`` (Megatron-Core's block method
    recomputes every layer of a chunk that holds N or fewer). One fraction in [0, 1] per plan, broadcast as the
    columns."""
    full = np.asarray(cols["recompute_code"]) == RECOMPUTE_CODES["full"]
    n = np.asarray(cols.get("recompute_layers", 0))
    chunk = model.num_layers / (np.asarray(cols["pp"]) * np.asarray(cols["vpp"]))
    return np.where(full, np.where(n > 0, np.minimum(1.0, n / chunk), 1.0), 0.0)


def _partial(model: ModelSpec, cols: Cols) -> tuple[Array, Array]:
    """(share of the layers recomputed, mask of the plans that recompute only some of them)."""
    share = recompute_share(model, cols)
    return share, (share > 0) & (share < 1)


def _blend(share: Array, partial: Array, whole: Any, kept: Any) -> Any:
    """``share`` of the fully recomputed layer's value and the rest of the layer that keeps its activations,
    where ``partial``; ``whole`` elsewhere. Arrays, or NamedTuples of them field by field."""
    if isinstance(whole, tuple):
        return type(whole)(*(_blend(share, partial, w, k) for w, k in zip(whole, kept, strict=True)))
    return np.where(partial, share * whole + (1 - share) * kept, whole)


def layer_pair(ctx: StepContext, cols: Cols) -> LayerPair:
    """Seconds per micro-batch of one dense layer, one MoE layer, the embedding and the LM head. With partial
    recompute (``recompute_share`` between 0 and 1) a layer is the mean of a recomputed and a kept one."""
    s, tok = strides(cols), tokens(ctx, cols)
    kw: dict[str, Any] = {
        "dtype": ctx.workload.dtype,
        "tokens": tok,
        "seq_len": ctx.workload.seq_len,
        "tp": cols["tp"],
        "cp": cols["cp"],
        "ep": cols["ep"],
        "sequence_parallel": cols["sequence_parallel"],
        "recompute": cols["recompute_code"],
        "tp_stride": s["tp"],
        "cp_stride": s["cp"],
        "capacity_factor": ctx.workload.capacity_factor,
        "etp": expert_tp(cols),
        "ulysses": cols.get("ulysses", 1),
    }
    dense = layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=False, **kw)
    moe = layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=True, **kw) if ctx.model.is_moe else None
    share, partial = _partial(ctx.model, cols)
    if np.any(partial):
        kept = {**kw, "recompute": np.where(partial, RECOMPUTE_CODES["none"], kw["recompute"])}
        dense = _blend(
            share, partial, dense, layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=False, **kept)
        )
        if moe is not None:
            moe = _blend(
                share, partial, moe, layer_costs(ctx.model, ctx.cluster, ctx.cal, moe_layer=True, **kept)
            )
    if np.any(cols.get("offload_activations", False)):
        sizes = activation_sizes(ctx, {**cols, "offload_activations": False})
        dense = _offload_transfers(ctx, cols, dense, sizes.dense_layer)
        moe = _offload_transfers(ctx, cols, moe, sizes.moe_layer) if moe is not None else None
    edges = edge_costs(
        ctx.model,
        ctx.cluster,
        ctx.cal,
        dtype=ctx.workload.dtype,
        tokens=tok,
        tp=cols["tp"],
        loss_chunks=cols.get("loss_chunks", 1),
    )
    vocab = np.asarray(cols.get("vocab_parallel", False), dtype=bool) & (np.asarray(cols["pp"]) > 1)
    if np.any(vocab):
        edges = edges._replace(vocab_s=np.where(vocab, vocab_parallel_comm_s(ctx, cols), 0.0))
    return LayerPair(dense, moe, edges)


LAYER_COLUMNS = (
    "tp",
    "cp",
    "ep",
    "etp",
    "micro_batch_size",
    "sequence_parallel",
    "recompute_code",
    "tp_stride",
    "cp_stride",
    "ulysses",
    "loss_chunks",
)
"""The plan columns ``layer_pair`` and ``activation_sizes`` read where a plan has them (``layer_columns`` adds
the rest)."""


def layer_columns(cols: Cols) -> tuple[str, ...] | None:
    """Names of the columns of ``cols`` that ``layer_pair(ctx, cols)`` and ``activation_sizes(ctx, cols)`` read:
    two plans equal on these have the same per-layer costs and activation sizes, so a caller may work each
    distinct combination out once. pp and vpp join where plans recompute only some layers
    (``recompute_layers``: the share depends on the chunk size); None (every column counts) with
    ``offload_activations`` (its transfers read the whole activation-size model) or ``vocab_parallel`` (priced
    over the pipeline group and its placement)."""
    if "offload_activations" in cols or "vocab_parallel" in cols:
        return None
    names = [k for k in LAYER_COLUMNS if k in cols]
    if "recompute_layers" in cols:
        names += ["recompute_layers", "pp", "vpp"]
    return tuple(names)


HOST_ADAM_BYTES_PER_PARAM = 28.0
"""Host-memory bytes an optimizer step offloaded to the CPUs streams per parameter: it reads the fp32 master
weight and the two fp32 moments (12) and the 16-bit gradient (2), writes the three back (12) and the 16-bit
weight for the device (2). ZeRO-Offload's CPU-Adam (Ren et al. 2021, arXiv:2101.06840, section 5.1) is
vectorised so that this stream, not arithmetic, bounds it (ASSUMED: priced at the host's DRAM bandwidth)."""

OFFLOAD_WORKING_LAYERS = 2
"""Layers of activations a device keeps while the rest are offloaded: the one whose backward runs and the
one being fetched back ahead of it (Megatron-Core ``--cpu-offloading``, Transformer Engine's
``get_cpu_offload_context`` with double buffering)."""


def host_path(ctx: StepContext) -> tuple[float, float]:
    """(device <-> host copy bandwidth per device, host DRAM bandwidth per device), bytes/s: the cluster's
    ``[storage]`` figures, else the ``StorageSpec`` defaults (PCIe Gen4 x16, one DDR5 socket per node)."""
    st = ctx.cluster.storage or DEFAULT_STORAGE
    return st.device_to_host_bytes_per_s, st.host_memory_bytes_per_s / ctx.cluster.devices_per_node


def _offload_transfers(ctx: StepContext, cols: Cols, layer: LayerCosts, stored_bytes: Array) -> LayerCosts:
    """``layer`` with its activations' trip to the host and back: the copy out runs during the layer's
    forward, the copy in during the backward of the layer after it (one ahead), each exposed only beyond that
    compute (:func:`workbench.cost.overlap.overlap`); the exposed part is added to the compute."""
    pcie = host_path(ctx)[0]
    on = np.asarray(cols.get("offload_activations", False), dtype=bool)
    trip = stored_bytes / pcie
    out = overlap(trip, layer.compute_f_s, on=True).exposed
    back = overlap(trip, layer.compute_i_s + layer.compute_w_s, on=True).exposed
    return layer._replace(
        compute_f_s=layer.compute_f_s + np.where(on, out, 0.0),
        compute_i_s=layer.compute_i_s + np.where(on, back, 0.0),
    )


def vocab_parallel_comm_s(ctx: StepContext, cols: Cols) -> Array:
    """Per micro-batch and pipeline rank, the communication vocabulary parallelism adds (Yeung et al. 2024,
    section 4): the last stage's output hidden states reach every pipeline rank forward and their gradients
    are summed back backward (each a collective of tokens x hidden 16-bit values / tp over the pp group),
    priced as two all-reduces over it; the softmax statistics' all-reduces are tokens-sized and left out."""
    payload = tokens(ctx, cols) * ctx.model.hidden_size * ACT_BYTES / cols["tp"]
    s = strides(cols)
    return 2 * all_reduce_s(
        ctx.cluster, payload, cols["pp"], s["pp"], ctx.cal.framework.collective_efficiency_frac
    )


def zero_exec(ctx: StepContext, cols: Cols) -> Array:
    """The ZeRO stage the stack executes: the plan's, except ZeRO-3 under a pipeline on a stack that keeps
    the stage's weights gathered and its gradients unsharded across micro-batches
    (``fsdp_reshard_with_pp`` False; torchtitan: ``reshard_after_forward = not pp_enabled``, and
    torch.distributed.pipelining's stage turns off gradient sync and resharding until the last backward),
    which runs and holds memory like ZeRO-1."""
    z = cols["zero_stage"]
    if ctx.cal.framework.fsdp_reshard_with_pp:
        return z
    return np.where((z >= 3) & (cols["pp"] > 1), 1, z)


def mean_layer_compute_s(model: ModelSpec, pair: LayerPair) -> tuple[Array, Array]:
    """Mean (forward, backward = I + W with recompute) seconds of one layer over the dense and MoE layers."""
    dense, moe = pair.dense, pair.moe
    nd, nm = model.num_layers - model.num_moe_layers, model.num_moe_layers
    f = nd * dense.compute_f_s + (nm * moe.compute_f_s if moe is not None else 0.0)
    b = nd * (dense.compute_i_s + dense.compute_w_s) + (
        nm * (moe.compute_i_s + moe.compute_w_s) if moe is not None else 0.0
    )
    return f / model.num_layers, b / model.num_layers


class FsdpLayer(NamedTuple):
    """ZeRO-3 traffic of one layer per micro-batch: exposed forward, exposed backward, hidden (seconds)."""

    f: Array
    b: Array
    hidden: Array


def fsdp_layer_s(ctx: StepContext, cols: Cols, layer_compute_s: tuple[Array, Array]) -> FsdpLayer:
    """ZeRO-3 communication per layer and micro-batch: the layer's weights are all-gathered for the forward
    and again for the backward (the recompute of a checkpointed layer runs inside its backward and uses that
    gather), and its gradients reduce-scattered (ZeRO section 5.3: 3x the data-parallel volume) over dp*cp.
    With ``fsdp_prefetch`` the next layer's gather runs during this layer's compute (forward: its forward;
    backward: gather and reduce-scatter behind its backward), :func:`workbench.cost.overlap.overlap`;
    without, each gather waits in line. ``layer_compute_s``: (forward, backward) seconds of a mean layer
    (``mean_layer_compute_s``, or measured). Each call is priced with its own latency terms at the per-layer
    message size (small layers at hundreds of ranks are latency-bound). 0 without ZeRO-3 or dp*cp = 1."""
    model, fw = ctx.model, ctx.cal.framework
    n, stride = shard_group(cols), strides(cols)["dpcp"]
    layer_bytes = model.layer_parameters(model.num_layers - 1) / cols["tp"] * ctx.param_bytes
    eff = fw.collective_efficiency_frac
    ag = all_gather_s(ctx.cluster, layer_bytes, n, stride, eff)
    rs = reduce_scatter_s(
        ctx.cluster, layer_bytes / ctx.param_bytes * fw.grad_bytes_per_param, n, stride, eff
    )
    on = (zero_exec(ctx, cols) >= 3) & (n > 1)
    fwd_s, bwd_s = layer_compute_s
    f = overlap(ag, fwd_s, on=fw.fsdp_prefetch, interference=fw.comm_interference_frac)
    b = overlap(ag + rs, bwd_s, on=fw.fsdp_prefetch, interference=fw.comm_interference_frac)
    return FsdpLayer(
        np.where(on, f.exposed, 0.0), np.where(on, b.exposed, 0.0), np.where(on, f.hidden + b.hidden, 0.0)
    )


def _per_micro_batch(pair: LayerPair, held: Holdings) -> tuple[Callable[[str], Array], tuple[Array, ...]]:
    """(``both``: a LayerCosts field summed over the dense and MoE layers ``held`` holds, per micro-batch;
    (dense, moe, embedding, head, mtp) held per micro-batch). A micro-batch goes through one of the ``copies``
    of the model a rank holds (``rank_holdings``; DualPipe: 2), so 1/copies of each."""
    per = 1 / np.asarray(held.get("copies", 1))
    counts = tuple(held[k] * per for k in ("dense", "moe", "embedding", "head", "mtp"))
    nd, nm = counts[0], counts[1]
    dense, moe, _ = pair

    def both(name: str) -> Array:
        return nd * getattr(dense, name) + (nm * getattr(moe, name) if moe is not None else 0.0)

    return both, counts


def _compute_parts(
    both: Callable[[str], Array], counts: tuple[Array, ...], edges: EdgeCosts
) -> tuple[Array, Array, Array]:
    """Compute seconds per micro-batch, without communication: (F, I, W), of what ``_per_micro_batch`` gave."""
    _, _, emb, head, mtp = counts
    comp_f = both("compute_f_s") + emb * edges.embedding_f_s + head * edges.head_f_s + mtp * edges.mtp_f_s
    comp_i = both("compute_i_s") + emb * edges.embedding_b_s + head * edges.head_i_s + mtp * edges.mtp_i_s
    comp_w = both("compute_w_s") + head * edges.head_w_s + mtp * edges.mtp_w_s
    return comp_f, comp_i, comp_w


def compute_s(pair: LayerPair, held: Holdings) -> Array:
    """Seconds per micro-batch ``held`` computes (F + I + W, no communication): ``share_s``'s ``compute``.
    A rank runs its actions one after another, so ``num_microbatches`` times this bounds its step from below
    (``workbench.search.screen.tokens_per_s_bound``)."""
    return sum(_compute_parts(*_per_micro_batch(pair, held), pair.edges))


def share_s(
    pair: LayerPair, held: Holdings, fsdp: FsdpLayer, blocking_p2p_s: Array = 0.0
) -> dict[str, Array]:
    """Seconds per micro-batch of what ``held`` holds: f, i, w (each action's time, exposed communication
    folded in), compute (F + I + W without communication), compute_f and compute_b (its forward and backward
    parts), the exposed tp, cp, ep, fsdp, vocab and pp parts and the hidden ones (``hidden_<kind>``). A
    micro-batch goes through one of the ``copies`` of the model a rank holds (``rank_holdings``; DualPipe: 2):
    1/copies of it. ``blocking_p2p_s``: the pipeline transfers one micro-batch's forward and backward wait
    for on what ``held`` holds (``pp_blocking_s``), split evenly between F and I."""
    both, counts = _per_micro_batch(pair, held)
    nd, nm, _, head, _ = counts
    edges = pair.edges
    comp_f, comp_i, comp_w = _compute_parts(both, counts, edges)
    comm_f = {k: both(f"{k}_f_s") for k in ("tp", "cp", "ep")} | {"fsdp": (nd + nm) * fsdp.f}
    comm_b = {k: both(f"{k}_b_s") for k in ("tp", "cp", "ep")} | {"fsdp": (nd + nm) * fsdp.b}
    vocab = np.where(np.asarray(head) > 0, edges.vocab_s, 0.0) / 2  # forward and backward halves
    comm_f["vocab"], comm_b["vocab"] = vocab, vocab
    comm_f["pp"] = comm_b["pp"] = np.asarray(blocking_p2p_s) / 2
    hidden = {f"hidden_{k}": both(f"{k}_hidden_s") for k in ("tp", "cp", "ep")}
    return {
        "f": comp_f + sum(comm_f.values()),
        "i": comp_i + sum(comm_b.values()),
        "w": comp_w,
        "compute": comp_f + comp_i + comp_w,
        "compute_f": comp_f,
        "compute_b": comp_i + comp_w,
        **{k: comm_f[k] + comm_b[k] for k in comm_f},
        **hidden,
        "hidden_fsdp": (nd + nm) * fsdp.hidden,
        "hidden_vocab": 0.0 * vocab,
        "hidden_pp": 0.0 * vocab,
    }


def pp_hop_s(ctx: StepContext, cols: Cols) -> Array:
    """One activation (or gradient) transfer between pipeline stages: 1/tp of the micro-batch's hidden
    states (Megatron's scatter-gather). The simulator and the closed forms take one time for every hop, so
    the slowest one sets it: the level that joins the first and the last pipeline rank. 0 where pp = 1."""
    payload = tokens(ctx, cols) * ctx.model.hidden_size * ACT_BYTES / cols["tp"]
    span = strides(cols)["pp"] * np.maximum(cols["pp"] - 1, 1)
    hop = p2p_s(ctx.cluster, payload, span, ctx.cal.framework.collective_efficiency_frac)
    return np.where(cols["pp"] > 1, hop, 0.0)


def pp_blocking_s(hop_s: Array, blocking: Array, actions: Array) -> Array:
    """Seconds per micro-batch a pipeline rank (or stage) waits on its own transfers when the schedule's sends
    block compute (``blocking``, per plan: the schedule is among ``FrameworkProfile.blocking_p2p_schedules``):
    ``actions`` chunks each send once in the forward and once in the backward, one hop ``hop_s`` each
    (``pp_hop_s``, the slowest hop: a blocking pipeline moves at the pace of its slowest link). 0 otherwise."""
    return np.where(np.asarray(blocking, dtype=bool), 2 * np.asarray(actions) * hop_s, 0.0)


def pp_latency_s(hop_s: Array, blocking: Array) -> Array:
    """The hop the simulated dependencies and the closed forms wait for between stages: ``hop_s``, or 0 where
    the transfer already sits inside the sender's action (``pp_blocking_s``)."""
    return np.where(np.asarray(blocking, dtype=bool), 0.0, hop_s)


def pp_hop_table_s(ctx: StepContext, cols: Cols) -> np.ndarray:
    """For one plan: seconds of a hop from pipeline rank i to rank j (pp x pp), each priced on the level that
    joins the two ranks (pipeline rank r is the device r * pp_stride with the other coordinates 0; aligned
    groups assumed), as ``pp_hop_s`` prices one hop. ``pp_hop_s`` is the largest entry a schedule uses."""
    pp = int(np.asarray(cols["pp"]))
    ranks = np.arange(pp) * int(np.asarray(strides(cols)["pp"]))
    level = pair_level_index(ctx.cluster, ranks[:, None], ranks[None, :])
    spans = np.array([1, *level_spans(ctx.cluster)[:-1]])
    payload = tokens(ctx, cols) * ctx.model.hidden_size * ACT_BYTES / cols["tp"]
    hop = p2p_s(ctx.cluster, payload, spans[level], ctx.cal.framework.collective_efficiency_frac)
    return np.where(np.eye(pp, dtype=bool), 0.0, hop)


def expert_tp(cols: Cols) -> Array:
    """Expert tensor-parallel degree: the plan's ``etp`` column where it is set (> 0), else 1 when ep > 1
    (the MoE recipes' setting) and tp otherwise (``ParallelPlan.expert_tp``)."""
    auto = np.where(cols["ep"] > 1, 1, cols["tp"])
    etp = np.asarray(cols.get("etp", 0))
    return np.where(etp > 0, etp, auto) if etp.any() else auto  # the planner's columns leave it all 0


def params_held(ctx: StepContext, cols: Cols, held: Holdings) -> tuple[Array, Array]:
    """(non-expert, expert) parameters one device holds for ``held``: non-expert weights split over tp,
    experts over ep times the expert tp."""
    model = ctx.model
    experts_layer = (
        model.num_experts * model.mlp_parameters(model.moe_ffn_hidden_size, expert=True)
        if model.is_moe
        else 0
    )
    moe_other = model.layer_parameters(model.num_layers - 1) - experts_layer if model.is_moe else 0
    head_params = model.lm_head_parameters() + (model.embedding_parameters() if model.tied_embeddings else 0)
    mtp = np.asarray(held["mtp"])
    h = model.hidden_size
    # MTP modules: their norms and projection, and a copy of the shared embedding where the rank has none
    mtp_params = mtp * (2 * h * h + 2 * h) + np.where(
        (mtp > 0) & ~np.asarray(held["embedding"], dtype=bool) & (not model.tied_embeddings),
        model.embedding_parameters(),
        0,
    )
    dense = (
        held["dense"] * model.layer_parameters(0)
        + held["moe"] * moe_other
        + held["embedding"] * model.embedding_parameters()
        + held["head"] * head_params
        + mtp_params
    ) / cols["tp"]
    return dense * 1.0, held["moe"] * experts_layer / (cols["ep"] * expert_tp(cols))


def _expert_dp(cols: Cols) -> Array:
    """Expert-data-parallel degree: dp*cp*tp / (ep * expert tp), at least 1."""
    return np.maximum(cols["dp"] * cols["cp"] * cols["tp"] // (cols["ep"] * expert_tp(cols)), 1)


def whole_share(model: ModelSpec, pair: LayerPair, fsdp: FsdpLayer) -> dict[str, Array]:
    """``share_s`` of the whole model: every layer, the embedding, the LM head and the multi-token-prediction
    modules (counted as ``stage_holdings`` counts them on the last stage)."""
    return share_s(pair, stage_holdings(model, 1, 0), fsdp)


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


def dp_comm_s(
    ctx: StepContext, cols: Cols, dense_params: Array, expert_params: Array, whole: Mapping[str, Array]
) -> Overlapped:
    """Data-parallel reduction of one step after the last backward, seconds (exposed, hidden). ZeRO 0
    all-reduces the gradients; 1-2 reduce-scatter them and all-gather the updated weights; 3 does its work per
    layer (``fsdp_layer_s``); by the stage the stack executes (``zero_exec``). Non-expert weights reduce over
    dp*cp, experts over the expert-data-parallel group. With hybrid sharding (``zero_shard``: shard groups of k
    ranks, replicated r = dp*cp/k times) the reduce-scatter and all-gather stay inside a shard group and each
    rank's 1/k shard of the gradients is all-reduced over the r replicas (for ZeRO-3 too, once per step). With ``overlap_grad_reduce`` the reduction runs in
    buckets of ``grad_bucket_params`` behind the last micro-batch's backward on a pipeline rank (``whole``: the
    whole model's ``share_s``, of which a rank runs 1/pp), the last bucket exposed, unless pp > 1 and the stack
    reduces after the schedule (``grad_reduce_overlaps_pipeline`` false); with ``overlap_param_gather``
    the all-gather runs behind the next step's first forward, the first bucket exposed
    (:mod:`workbench.cost.overlap`)."""
    fw, s = ctx.cal.framework, strides(cols)
    eff, g, z = fw.collective_efficiency_frac, fw.grad_bytes_per_param, zero_exec(ctx, cols)
    dpcp, shard = cols["dp"] * cols["cp"], shard_group(cols)
    model = ctx.model
    layers = np.ceil(model.num_layers / cols["pp"])
    groups = (  # (parameters, ranks, stride, shard group within them, FSDP units holding them)
        (dense_params, dpcp, s["dpcp"], np.where(z > 0, shard, dpcp), layers + 1),
        (
            expert_params,
            _expert_dp(cols),
            cols["ep"] * expert_tp(cols),
            _expert_dp(cols),
            np.maximum(np.ceil(model.num_moe_layers / cols["pp"]), 1),
        ),
    )
    reduce: Array = 0.0
    gather: Array = 0.0
    tails: list[tuple[Array, Array]] = []
    for params, n, stride, k, units in groups:
        if not np.any(params > 0):  # a dense model's expert group: nothing to reduce
            continue
        replicas = np.maximum(n // np.maximum(k, 1), 1)

        def reduction(
            count: Array, n: Array = n, stride: Array = stride, k: Array = k, r: Array = replicas
        ) -> Array:
            """ZeRO 0: all-reduce over the n ranks; 1-3: reduce-scatter inside the shard group of k (ZeRO-3
            does it per layer) and all-reduce the 1/k shard over the r = n/k replicas (HSDP). Each collective
            is priced only when some plan of the batch needs it (the same values, less work)."""
            ar = all_reduce_s(ctx.cluster, count * g, n, stride, eff) if np.any(z == 0) else 0.0
            rs = (
                np.where(z < 3, reduce_scatter_s(ctx.cluster, count * g, k, stride, eff), 0.0)
                if np.any((z > 0) & (z < 3))
                else 0.0
            )
            across = (
                all_reduce_s(ctx.cluster, count * g / np.maximum(k, 1), r, stride * k, eff)
                if np.any(r > 1)
                else 0.0
            )
            return np.where(z == 0, ar, rs + across)

        bucket, full, rest = grad_buckets(ctx, params, units, dpcp)
        on = (params > 0) & (n > 1) & ((z < 3) | (replicas > 1))
        gathers = np.any(on & (z > 0) & (z < 3))

        def gathered(count: Array, k: Array = k, stride: Array = stride, gathers: Any = gathers) -> Array:
            return all_gather_s(ctx.cluster, count * ctx.param_bytes, k, stride, eff) if gathers else 0.0

        red_bucket, ag_bucket = reduction(bucket), gathered(bucket)
        red_all, ag = full * red_bucket, full * ag_bucket
        has_rest = rest > 0
        if np.any(has_rest):  # FSDP units split evenly: no remainder to price
            red_all = red_all + np.where(has_rest, reduction(rest), 0.0)
            ag = ag + np.where(has_rest, gathered(rest), 0.0)
        reduce = reduce + np.where(on, red_all, 0.0)
        gather = gather + np.where(on & (z > 0) & (z < 3), ag, 0.0)
        tails.append((np.where(on, red_bucket, 0.0), np.where(on & (z > 0) & (z < 3), ag_bucket, 0.0)))
    if not tails:
        tails.append((0.0, 0.0))
    mix = fw.comm_interference_frac
    back, fore = whole["compute_b"] / cols["pp"], whole["compute_f"] / cols["pp"]
    red_tail, gat_tail = tails[0]  # the non-expert weights' bucket (the embedding's) is the last to reduce
    behind = fw.overlap_grad_reduce & ((cols["pp"] == 1) | fw.grad_reduce_overlaps_pipeline)
    red = overlap(reduce, back, on=behind, tail=red_tail, interference=mix)
    gat = overlap(gather, fore, on=fw.overlap_param_gather, tail=gat_tail, interference=mix)
    return Overlapped(red.exposed + gat.exposed, red.hidden + gat.hidden)


def optimizer_s(ctx: StepContext, cols: Cols, dense_params: Array, expert_params: Array) -> Array:
    """The optimizer step, HBM-bound: ``OPTIMIZER_BYTES_PER_PARAM`` per locally owned parameter (ZeRO >= 1
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
    return np.where(on, offloaded, local * OPTIMIZER_BYTES_PER_PARAM / ctx.hbm_bytes_per_s)


class ActivationSizes(NamedTuple):
    """Activation bytes of one micro-batch on one device."""

    dense_layer: Array
    moe_layer: Array
    embedding: Array
    """The embedding's output kept for its backward (on the stage that holds the embedding)."""
    recompute_work: Array
    """Transient working set of one recomputed layer."""
    logits: Array
    """The logits of one micro-batch on the rank that holds the LM head."""
    freed_at_input_grad_frac: Array
    """Share of a layer's stored activations freed when its I pass ends (split backward; 0 with recompute)."""


def activation_sizes(ctx: StepContext, cols: Cols) -> ActivationSizes:
    """Activation bytes per micro-batch (formulas of :mod:`workbench.cost.memory`)."""
    model, tp = ctx.model, cols["tp"]
    tok = tokens(ctx, cols)
    kw: dict[str, Any] = {
        "tokens": tok,
        "seq_len": ctx.workload.seq_len,
        "tp": tp,
        "sequence_parallel": cols["sequence_parallel"],
        "recompute": cols["recompute_code"],
    }
    op = ctx.cal.framework.selective_recompute == "op"
    parts = ctx.dense_parts
    freed = float(np.clip(1 - parts.weight_grad_inputs / (parts.outside_tp + parts.inside_tp), 0, 1))
    dense = layer_activation_bytes(ctx.dense_parts, selective_op=op, **kw)
    moe = layer_activation_bytes(ctx.moe_parts, selective_op=op, **kw) if model.is_moe else 0.0
    share, partial = _partial(model, cols)
    freed_frac = np.where(cols["recompute_code"] == 0, freed, 0.0)
    if np.any(partial):  # the layers past the first N of a chunk keep all their activations
        kept = {**kw, "recompute": np.where(partial, RECOMPUTE_CODES["none"], kw["recompute"])}
        kept_dense = layer_activation_bytes(ctx.dense_parts, selective_op=op, **kept)
        dense = _blend(share, partial, dense, kept_dense)
        # only the kept layers free part of what they store when their I pass ends
        freed_frac = np.where(
            partial, (1 - share) * kept_dense * freed / np.maximum(dense, 1e-300), freed_frac
        )
        if model.is_moe:
            moe = _blend(share, partial, moe, layer_activation_bytes(ctx.moe_parts, selective_op=op, **kept))
    off = np.asarray(cols.get("offload_activations", False), dtype=bool)
    working = np.where(off, OFFLOAD_WORKING_LAYERS * np.maximum(dense, moe), 0.0)
    return ActivationSizes(
        dense_layer=np.where(off, 0.0, dense),
        moe_layer=np.where(off, 0.0, moe),
        embedding=tok * model.hidden_size * ACT_BYTES / np.where(cols["sequence_parallel"], tp, 1),
        recompute_work=recompute_working_bytes(ctx.moe_parts, **kw) + working,
        logits=logits_bytes(
            model,
            tokens=tok,
            tp=tp,
            bytes_per_logit=ctx.cal.framework.loss_bytes_per_logit,
            loss_chunks=cols.get("loss_chunks", 1),
        ),
        freed_at_input_grad_frac=freed_frac,
    )


def stored_activation_bytes(sizes: ActivationSizes, held: Holdings) -> Array:
    """Activations one micro-batch leaves stored on what ``held`` holds until its backward."""
    return (
        held["dense"] * sizes.dense_layer
        + held["moe"] * sizes.moe_layer
        + held["embedding"] * sizes.embedding
    )


class StaticShared(NamedTuple):
    """What ``static_memory`` needs that no pipeline rank changes, for one set of plan columns: the executed
    ZeRO stage, the sharding divisors of weights, gradients and optimizer states (``memory.state_divisors``)
    of the non-expert and of the expert parameters, the optimizer bytes per parameter, ZeRO-3's two gathered
    layers (parameters) and the buffers every rank holds. The screen builds it once per chunk for its ranks."""

    zero: Array
    dense_divisors: tuple[Array, Array, Array]
    expert_divisors: tuple[Array, Array, Array]
    optimizer_bytes: Array
    gathered: Array
    buffers: Array


def static_shared(ctx: StepContext, cols: Cols) -> StaticShared:
    """The rank-independent part of ``static_memory`` (see ``StaticShared``)."""
    model, tp = ctx.model, cols["tp"]
    zero = zero_exec(ctx, cols)
    gathered = 2 * model.layer_parameters(model.num_layers - 1) / tp
    buffers = np.where(tp > 1, 2 * tokens(ctx, cols) * model.hidden_size * ACT_BYTES, 0.0) + np.where(
        zero >= 3, gathered * ctx.param_bytes, 0.0
    )
    return StaticShared(
        zero=zero,
        dense_divisors=state_divisors(dp=shard_group(cols), zero_stage=zero),
        expert_divisors=state_divisors(dp=_expert_dp(cols), zero_stage=zero),
        optimizer_bytes=np.where(cols.get("offload_optimizer", False), 0.0, ctx.optimizer_bytes),
        gathered=gathered,
        buffers=buffers,
    )


def static_memory(
    ctx: StepContext,
    cols: Cols,
    held: Holdings,
    sizes: ActivationSizes | None = None,
    shared: StaticShared | None = None,
) -> dict[str, Array]:
    """Memory of a pipeline rank that does not depend on the schedule, bytes per device: model states
    (``STATE_COLUMNS``: non-expert ones sharded over dp*cp, expert ones over the expert-data-parallel group,
    by ZeRO stage; FP8 runs with ``fp8_param_gather`` keep 1-byte weights), ``buffers_bytes`` (the
    sequence-parallel all-gather output of one layer when tp > 1, ZeRO-3's gathered weights of the current and
    the prefetched layer, and in FP8 runs the ``fp8_weight_copies`` of the layers' weights: all local ones, or
    the two gathered layers under ZeRO-3) and ``activation_extra_bytes`` (the recompute working set, plus the
    logits on the rank that holds the LM head). ``sizes``: ``activation_sizes(ctx, cols)`` and ``shared``:
    ``static_shared(ctx, cols)`` when the caller has them already (neither depends on the rank)."""
    dense, expert = params_held(ctx, cols, held)
    shared = static_shared(ctx, cols) if shared is None else shared
    zero = shared.zero
    kw: dict[str, Any] = {
        "param_bytes": ctx.param_bytes,
        "grad_bytes": ctx.cal.framework.grad_bytes_per_param,
        "optimizer_bytes": shared.optimizer_bytes,
    }
    d = model_state_bytes(num_params=dense, divisors=shared.dense_divisors, **kw)
    e = model_state_bytes(num_params=expert, divisors=shared.expert_divisors, **kw)
    sizes = activation_sizes(ctx, cols) if sizes is None else sizes
    gathered, buffers = shared.gathered, shared.buffers
    if ctx.fp8_copy_bytes:
        layers = sum(params_held(ctx, cols, {**held, "embedding": False, "head": False, "mtp": 0}))
        buffers = buffers + ctx.fp8_copy_bytes * np.where(zero >= 3, gathered, layers)
    return {
        **{k: a + b for k, a, b in zip(STATE_COLUMNS, d, e, strict=True)},
        "buffers_bytes": buffers + 0.0 * dense,
        "activation_extra_bytes": sizes.recompute_work
        + (held["head"] + held["mtp"]) * sizes.logits
        + 0.0 * dense,
    }


def memory_columns(
    static: Mapping[str, Array], stored_peak_bytes: Array, *, overhead_bytes: float, fragmentation_frac: float
) -> dict[str, Array]:
    """The ``MEMORY_COLUMNS`` of a rank: ``static_memory`` plus the peak of stored activations (simulated or
    closed form); other = the framework's overhead plus the allocator's fragmentation share of the rest."""
    cols = {k: static[k] for k in STATE_COLUMNS}
    cols["activations_bytes"] = stored_peak_bytes + static["activation_extra_bytes"]
    cols["buffers_bytes"] = static["buffers_bytes"]
    counted = sum(cols.values())
    cols["other_bytes"] = overhead_bytes + fragmentation_frac * counted
    return cols
