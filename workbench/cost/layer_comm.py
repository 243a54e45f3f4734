"""A layer's communication per micro-batch, by kind (tp, cp, ep), exposed and hidden, for :mod:`workbench.cost.layer`.

Communication volumes per layer and micro-batch (bytes per device; e = 2 bytes per activation value):
- TP (Megatron, Shoeybi et al. 2019; with sequence parallelism Korthikanti et al. 2022 section 4.2.2): two
  all-reduces (or two all-gathers + two reduce-scatters, the same time) of ``tokens*h*e`` forward and two
  backward; full recompute repeats the forward ones.
- CP = ulysses x ring (``ParallelPlan.ulysses``). Ring (ring attention, Liu et al. 2023, arXiv:2310.01889):
  ring-1 steps each passing this rank's K and V block forward; backward passes K, V and their gradients (2x).
  Ulysses (Jacobs et al. 2023, arXiv:2309.14509): four all-to-alls of Q, K, V and the output forward, four
  backward (``ulysses_all_to_all_s``), exposed; the hybrid (USP, Fang & Zhao 2024) runs both.
- EP (GShard, Lepikhin et al. 2020): a dispatch and a combine of the routed copies, ``tokens*k*cf*h/tp``
  values forward and the same backward (``moe_dispatch_s``).

What of each kind hides behind compute follows :mod:`workbench.cost.overlap` (interference included).
``compute_slowdown`` (the framework's factor on every kernel time) lives here because the overlaps scale the
compute they hide behind by it.

Vectorisation contract as in :mod:`workbench.cost.layer`: plan fields may be numpy arrays, broadcast elementwise.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from workbench.cost.comm import all_reduce_s, all_to_all_s, p2p_s
from workbench.cost.elementwise_ops import FP8_VALUE_BYTES
from workbench.cost.moe import ACT_BYTES, moe_dispatch_s
from workbench.cost.op_time import OpTimes
from workbench.cost.overlap import combined_pair_s, overlap
from workbench.presets.calibration import Calibration
from workbench.specs.framework import FrameworkProfile
from workbench.specs.hardware import ClusterSpec, DType
from workbench.specs.model import AttentionKind, ModelSpec

Array = Any


def compute_slowdown(fw: FrameworkProfile) -> float:
    """What every kernel time is multiplied by: 1 / (``kernel_efficiency_frac`` x the SMs left to compute,
    1 - ``reserved_sm_frac``)."""
    return 1.0 / (fw.kernel_efficiency_frac * (1.0 - fw.reserved_sm_frac))


class LayerComm(NamedTuple):
    """One kind of a layer's communication per micro-batch: exposed forward, exposed backward, hidden (s)."""

    f_s: Array
    b_s: Array
    hidden_s: Array


def tp_layer_comm(
    model: ModelSpec,
    cluster: ClusterSpec,
    fw: FrameworkProfile,
    mm: OpTimes,
    per_value: Array,
    tokens: Array,
    tp: Array,
    tp_stride: Array,
    full: Array,
) -> LayerComm:
    """Tensor-parallel traffic of one layer: two all-reduces (or all-gather + reduce-scatter pairs) forward,
    the same backward, again in a full recompute; hidden behind the GEMMs with ``tp_comm_overlap``.
    ``per_value``: bytes per activation value (``tp_bytes_per_value``)."""
    eff, mix, slow = fw.collective_efficiency_frac, fw.comm_interference_frac, compute_slowdown(fw)
    tp_comm = 2 * all_reduce_s(cluster, tokens * model.hidden_size * per_value, tp, tp_stride, eff)
    tail = tp_comm / np.maximum(tp, 1)
    tp_f = overlap(tp_comm, mm.fwd_s * slow, on=fw.tp_comm_overlap, tail=tail, interference=mix)
    tp_b = overlap(
        tp_comm * np.where(full, 2.0, 1.0),
        (mm.bwd_input_s + mm.bwd_weight_s + np.where(full, mm.fwd_s, 0.0)) * slow,
        on=fw.tp_comm_overlap,
        tail=tail,
        interference=mix,
    )
    return LayerComm(tp_f.exposed, tp_b.exposed, tp_f.hidden + tp_b.hidden)


def cp_layer_comm(
    model: ModelSpec,
    cluster: ClusterSpec,
    fw: FrameworkProfile,
    rest: OpTimes,
    tokens: Array,
    tp: Array,
    cp: Array,
    ulysses: Array,
    cp_stride: Array,
    full: Array,
) -> LayerComm:
    """Context-parallel traffic of one layer, cp = ulysses x ring. Ring: ring - 1 steps each passing a K and V
    block (after Ulysses' exchange a rank holds ulysses x the tokens of 1/ulysses of the heads: the same
    bytes), hidden behind the attention core with ``cp_comm_overlap``; backward passes them and their
    gradients. Ulysses: its all-to-alls are exposed (neither DeepSpeed nor TE's a2a overlaps them)."""
    eff, mix, slow = fw.collective_efficiency_frac, fw.comm_interference_frac, compute_slowdown(fw)
    ring = cp / ulysses
    kv_block = tokens * 2 * kv_heads(model) * model.head_dim / tp * ACT_BYTES
    ring_comm = (ring - 1) * p2p_s(cluster, kv_block, cp_stride * ulysses, eff)
    share = (ring - 1) / ring
    uly = ulysses_all_to_all_s(
        model, cluster, tokens=tokens, tp=tp, ulysses=ulysses, stride=cp_stride, eff=eff
    )
    cp_f = overlap(
        ring_comm, rest.attention_core_fwd_s * slow * share, on=fw.cp_comm_overlap, interference=mix
    )
    cp_b = overlap(
        ring_comm * np.where(full, 3.0, 2.0),
        (rest.attention_core_bwd_s + np.where(full, rest.attention_core_fwd_s, 0.0)) * slow * share,
        on=fw.cp_comm_overlap,
        interference=mix,
    )
    return LayerComm(
        cp_f.exposed + uly, cp_b.exposed + uly * np.where(full, 2.0, 1.0), cp_f.hidden + cp_b.hidden
    )


def ep_layer_comm(
    model: ModelSpec,
    cluster: ClusterSpec,
    cal: Calibration,
    dtype: DType | str,
    shard: tuple[Array, Array, Array, Array],
    capacity_factor: float | None,
    full: Array,
    compute: tuple[Array, Array, Array, Array, Array] | None,
) -> LayerComm:
    """Expert-parallel traffic of one MoE layer: dispatch + combine forward and backward (again in a full
    recompute). With ``ep_comm_overlap`` each transfer hides behind the compute of the other micro-batch of
    a combined forward-backward pair (:func:`workbench.cost.overlap.combined_pair_s`; ``compute``: the
    layer's (attention fwd, MoE fwd, attention bwd, MoE bwd input, MoE bwd weight) seconds, None without the
    overlap); the dispatch and
    the combine of a pass carry the same bytes, so each gets half of the pass's seconds. The exposed part is
    the pair's period over the compute's sum, plus ``comm_interference_frac`` of the hidden part, split between
    forward and backward by their shares. ``shard``: (tokens, tp, ep, etp)."""
    fw = cal.framework
    tokens, tp, ep, etp = shard
    ep_fwd, ep_bwd = moe_dispatch_s(
        model,
        cluster,
        cal,
        dtype=dtype,
        tokens=tokens,
        tp=tp,
        ep=ep,
        capacity_factor=capacity_factor,
        etp=etp,
    )
    ep_bwd = ep_bwd + np.where(full, ep_fwd, 0.0)
    comm = ep_fwd + ep_bwd
    if fw.ep_comm_overlap and compute is not None:
        pair = combined_pair_s(compute, (ep_fwd / 2, ep_fwd / 2, ep_bwd / 2, ep_bwd / 2))
        window = comm - (pair - sum(compute))  # the hidden seconds as an overlap window
        split = overlap(comm, window, on=True, interference=fw.comm_interference_frac)
    else:
        split = overlap(comm, 0.0, on=False)
    total = np.maximum(comm, 1e-300)
    return LayerComm(split.exposed * ep_fwd / total, split.exposed * ep_bwd / total, split.hidden)


def tp_bytes_per_value(fw: FrameworkProfile, *, dtype: DType | str, sequence_parallel: Array) -> Array:
    """Mean bytes per activation value of a layer's tensor-parallel traffic, priced as all-reduces: 16-bit,
    except that with sequence parallelism each all-reduce is an all-gather and a reduce-scatter of the same
    bytes, and an FP8 run of a stack with ``fp8_tp_all_gather`` gathers FP8 values (``FP8_VALUE_BYTES`` of its
    recipe: the scales ride along) while it reduce-scatters 16-bit ones: (FP8 + 16-bit) / 2 per value. Bytes;
    ``sequence_parallel`` may be an array of flags over plans (the result broadcasts with it)."""
    if str(dtype) != "fp8" or not fw.fp8_tp_all_gather:
        return ACT_BYTES
    return np.where(sequence_parallel, (FP8_VALUE_BYTES[fw.fp8_recipe] + ACT_BYTES) / 2, ACT_BYTES)


def kv_heads(model: ModelSpec) -> int:
    """Key/value heads a rank exchanges: every head under MLA (its K and V are per head once up-projected)."""
    return model.num_attention_heads if model.attention is AttentionKind.MLA else model.num_key_value_heads


def ulysses_all_to_all_s(
    model: ModelSpec,
    cluster: ClusterSpec,
    *,
    tokens: Array,
    tp: Array,
    ulysses: Array,
    stride: Array,
    eff: float = 1.0,
) -> Array:
    """One layer's forward DeepSpeed-Ulysses exchange (Jacobs et al. 2023, arXiv:2309.14509, section 3.1): an
    all-to-all over the ``ulysses`` ranks (``stride`` apart) for each of Q, K and V (sequence-sharded in,
    head-sharded out) and one for the attention output back, s; the backward repeats it for the gradients.
    Each all-to-all carries this rank's ``tokens`` x its heads (per tp rank) x head_dim 16-bit values, so the
    four move ``tokens x (2 x heads + 2 x kv_heads) x head_dim / tp`` values; the paper's per-link volume
    ``4Nh/P`` is the MHA case. 0 where ulysses == 1."""
    q = tokens * model.num_attention_heads * model.head_dim / tp * ACT_BYTES
    kv = tokens * kv_heads(model) * model.head_dim / tp * ACT_BYTES
    one = all_to_all_s(cluster, q, ulysses, stride, eff)
    return 2 * one + 2 * all_to_all_s(cluster, kv, ulysses, stride, eff)
