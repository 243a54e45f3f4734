"""Time of torch's experimental context parallel (``FrameworkProfile.cp_rotate_method`` ``allgather`` or
``alltoall``) in one attention layer: its collectives, when each is waited on, and the eager element-wise work
it adds around the attention kernels.

Source: ``_templated_ring_attention`` and ``_templated_ring_attention_backward``
(torch/distributed/tensor/experimental/_attention.py at torch @1963fc8 of 2024-12-23, the torch of torchtitan's
2024-12 benchmarks; the same code in torch 2.13's ``_context_parallel/_attention.py``, which
tests/test_cp_ring_time.py runs on gloo ranks). They run inside DTensor's dispatch of the SDPA forward and
backward ops with the defaults ``convert_to_f32=True`` and ``enable_load_balance=True`` (head-tail sharding of
the causal sequence), so each of the ``cp`` steps computes the same share of the causal attention and the
attention FLOPs are those of the causal layer split over cp (what ``workbench.cost.flops`` already counts).
What the layer pays beyond them:

- keys and values travel as the kernel receives them: repeated to the query heads when the stack repeats them
  (``FrameworkProfile.attention_repeats_kv``), 16-bit, concatenated (``torch.cat([key.flatten(),
  value.flatten()])``);
- ``allgather``: one all-gather of them over the cp group per attention call (``_AllGatherRotater``), issued
  before step 0's kernel and waited before step 1's: hidden behind one step's kernel at most; ``alltoall``:
  one block passed to the next rank per step (``_AllToAllRotater``, ``permute_tensor``), waited before the
  next step's kernel;
- the backward gathers or passes the keys and values the same way and passes the fp32 dK/dV accumulators
  (``dkv_rotater``, always all-to-all) after every step: each waited after the next step's kernel, the last one
  after the loop (exposed);
- the merge of every later step's partial output and log-sum-exp (``_SDPAMerger``: the output upcast to fp32,
  ``out - sigmoid(lse_i - lse) * (out - out_i)``, a ``torch.cat`` where only half the queries attended) and
  the backward's fp32 accumulation of dQ, dK, dV (``+=``, ``_partial_update``'s add and ``torch.cat``, the
  concatenation sent on, the final casts), the contiguous copies of the keys and values and the per-step
  concatenation of the keys and values for the rotater (made on every step, used by ``allgather`` only on the
  first): eager, memory-bound element-wise kernels, priced at the device's achieved HBM bandwidth (read as
  torch dispatches them; under ``torch.compile`` Inductor may fuse them if it traces the ring, which the
  model does not assume);
- each SDPA call runs at its own shape (``step_attention_rates``), not the whole sequence's.

A full recompute runs the forward again, collectives and merges included (the ring runs below autograd, so
``torch.utils.checkpoint`` replays it whole).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from workbench.cost.comm import all_gather_s, p2p_s
from workbench.cost.op_time import OpTimes
from workbench.cost.overlap import overlap
from workbench.presets.calibration import Calibration
from workbench.specs.framework import FrameworkProfile
from workbench.specs.hardware import ClusterSpec, DeviceSpec
from workbench.specs.model import AttentionKind, ModelSpec

Array = Any

HALF_BYTES = 2
"""Bytes of a 16-bit value (the keys, values, query and output the SDPA kernels read and write)."""
FP32_BYTES = 4
"""Bytes of an fp32 value (``_cp_options.convert_to_f32``: the merged output, the dQ/dK/dV accumulators)."""


class RingValues(NamedTuple):
    """Values per rank of one micro-batch's attention call: ``q`` query (= output) values, ``kv`` key values (=
    value values), ``lse`` log-sum-exp values (one per query row)."""

    q: Array
    kv: Array
    lse: Array


def ring_values(model: ModelSpec, *, tokens: Array, tp: Array, repeats_kv: bool) -> RingValues:
    """Values of the tensors torch's ring passes to the SDPA op on one rank: ``tokens`` (local, micro-batch x
    seq / cp) x heads per tp rank x head width; keys and values repeated to the query heads when ``repeats_kv``
    (and under MLA, whose up-projected keys and values have a head per query head), else ``max(1, kv / tp)``
    heads. Shapes broadcast."""
    a, dqk, dv = model.num_attention_heads, model.qk_head_dim, model.value_head_dim
    tp = np.asarray(tp)
    full_heads = repeats_kv or model.attention is AttentionKind.MLA
    kv_heads = a / tp if full_heads else np.maximum(model.num_key_value_heads / tp, 1)
    # keys and values are concatenated into one buffer: count both widths once per "kv" pair, as the mean
    return RingValues(tokens * a / tp * dqk, tokens * kv_heads * (dqk + dv) / 2, tokens * a / tp)


def merge_bytes(values: RingValues, cp: Array) -> tuple[Array, Array]:
    """HBM bytes (read + written) of the eager element-wise work torch's ring adds to one attention call's
    forward and to its backward on the busiest rank, the last of the cp group (every later step there attends
    the whole local query to half the keys: ``i <= rank``); 0 where cp = 1. With q, kv, lse the values of
    ``ring_values`` and c = cp:

    forward = 8 kv (contiguous copies of the keys and values) + 8 kv (c - 1) (the rotater's concatenation on
    steps 0..c-2) + 6 q c (every step's output upcast to fp32: read 2, write 4) + (c - 1) (32 q + 56 lse) (per
    merge: ``out - out_i`` 12, ``* sigmoid(...)`` 8, ``out - ...`` 12 per output value; ``lse_i - lse`` 12,
    ``sigmoid`` 8, its read by the product 4, ``lse - lse_i`` 12, ``logsigmoid`` 8, ``lse - ...`` 12 per lse
    value) + 6 q (the cast back to 16 bits);

    backward = 4 q + 8 kv (fp32 zero accumulators) + 8 kv (contiguous copies) + 8 kv (c - 1) (concatenation)
    + 20 kv (step 0's dK, dV ``+=``: read 4 + 2, write 4) + 16 kv (step 0's accumulators take the strides of
    the transposed keys, so ``flatten`` copies them) + 26 kv (c - 1) (later steps' ``_partial_update`` of half
    of dK and dV, 5 per value, and its ``torch.cat``, 8) + 16 kv c (the fp32 dK/dV concatenation sent on) +
    10 q c (dQ ``+=``) + 6 q + 12 kv (the final casts of dQ and of the received dK/dV).

    tests/test_cp_ring_time.py counts these bytes from the ops torch dispatches on gloo ranks."""
    cp = np.asarray(cp)
    later = cp - 1
    q, kv, lse = values
    fwd = 8 * kv + 8 * kv * later + 6 * q * cp + later * (32 * q + 56 * lse) + 6 * q
    bwd = 4 * q + 8 * kv + 8 * kv + 8 * kv * later + 20 * kv + 16 * kv + 26 * kv * later + 16 * kv * cp
    bwd = bwd + 10 * q * cp + 6 * q + 12 * kv
    return np.where(cp > 1, fwd, 0.0), np.where(cp > 1, bwd, 0.0)


def step_attention_rates(
    cal: Calibration,
    device: DeviceSpec,
    model: ModelSpec,
    *,
    seq_len: Array,
    cp: Array,
    whole: tuple[Array, Array],
) -> tuple[Array, Array]:
    """(forward, backward) fraction of the peak at which torch's ring runs a layer's attention on the busiest
    rank (the last of the cp group), from the kernel table at the shapes of its SDPA calls
    (``_templated_ring_attention``, head-tail load balance): step 0 attends the local s/cp queries to the local
    keys, causal; each of the other cp - 1 steps attends them to half a block of keys, s/(2cp), without a mask.
    Each step is 1/cp of the rank's FLOPs, so the fractions combine harmonically with weights 1/cp and
    (cp - 1)/cp; the kernels are the stack's ``cp_attention_kernels`` (else its ``attention_kernels``). ``whole``
    (the kernel at the whole sequence) where cp = 1. A non-square call is read at its key length (the loop
    each query tile runs), the table's square shapes having q = k. tests/test_cp_ring_time.py checks the calls'
    shapes on torch's own function."""
    fw = cal.framework
    cp = np.asarray(cp)
    local = np.asarray(seq_len) / cp
    dims = {"dtype": "bf16", "head_dim": model.qk_head_dim, "families": fw.cp_attention_kernels}
    diagonal = cal.attention(device, seq_len=local, **dims)  # type: ignore[arg-type]
    block = cal.attention(device, seq_len=local / 2, causal=False, **dims)  # type: ignore[arg-type]
    share = (cp - 1) / cp

    def mixed(d: Array, b: Array, w: Array) -> Array:
        return np.where(cp > 1, 1.0 / ((1 - share) / d + share / b), w)

    return mixed(diagonal[0], block[0], whole[0]), mixed(diagonal[1], block[1], whole[1])


class RingTraffic(NamedTuple):
    """The collectives of one pass (forward or backward) of torch's ring on one rank: ``gathers`` all-gathers of
    the keys and values (``kv_bytes`` in per rank), ``kv_passes`` point-to-point passes of them to the next rank
    (``kv_bytes`` each), ``dkv_passes`` passes of the fp32 dK/dV accumulators (``dkv_bytes`` each)."""

    gathers: Array
    kv_passes: Array
    dkv_passes: Array
    kv_bytes: Array
    dkv_bytes: Array


def ring_traffic(values: RingValues, cp: Array, rotate_method: str, *, backward: bool) -> RingTraffic:
    """What one attention call's forward (or backward) sends on one rank (module docstring): ``allgather``
    gathers the keys and values once per pass, ``alltoall`` passes them cp - 1 times; the backward passes the
    fp32 dK/dV cp times (after every step, ``dkv_rotater``). Key/value payload: ``2 x kv`` 16-bit values, dK/dV
    ``2 x kv`` fp32 values. Nothing where cp = 1. ValueError for another ``rotate_method``."""
    cp = np.asarray(cp)
    on = np.where(cp > 1, 1, 0)
    if rotate_method not in ("allgather", "alltoall"):
        raise ValueError(
            f"ring_traffic: rotate_method must be 'allgather' or 'alltoall'; got {rotate_method!r}"
        )
    gather = rotate_method == "allgather"
    return RingTraffic(
        on * (1 if gather else 0),
        on * (0 if gather else cp - 1),
        on * (cp if backward else 0),
        2 * values.kv * HALF_BYTES,
        2 * values.kv * FP32_BYTES,
    )


class RingComm(NamedTuple):
    """Seconds of one layer's ring traffic per micro-batch: exposed forward (one pass), exposed backward (each
    with ``interference`` times its hidden part, :func:`workbench.cost.overlap.overlap`), hidden forward (one
    pass), hidden backward."""

    f_s: Array
    b_s: Array
    hidden_f_s: Array
    hidden_b_s: Array


def ring_comm(
    cluster: ClusterSpec,
    values: RingValues,
    *,
    cp: Array,
    stride: Array,
    rotate_method: str,
    step_fwd_s: Array,
    step_bwd_s: Array,
    efficiency_frac: float = 1.0,
    interference: float = 0.0,
) -> RingComm:
    """Exposed and hidden seconds of torch's ring collectives (``ring_traffic``) in one attention call, cp
    ranks ``stride`` apart; ``step_fwd_s`` / ``step_bwd_s``: one step's SDPA kernel (forward / backward). When
    each is waited on (module docstring): an all-gather, before step 1's kernel, hides behind step 0's; a
    key/value pass, before the next step's kernel, behind this step's; a dK/dV pass, after the next step's
    kernel, behind it, and the last one (waited after the loop) behind nothing. Each collective is split by
    :func:`workbench.cost.overlap.overlap` against one step's kernel. 0 where cp = 1."""
    cp = np.asarray(cp)
    fwd = ring_traffic(values, cp, rotate_method, backward=False)
    bwd = ring_traffic(values, cp, rotate_method, backward=True)
    gather = all_gather_s(cluster, fwd.kv_bytes * cp, cp, stride, efficiency_frac)
    kv_pass = p2p_s(cluster, fwd.kv_bytes, stride, efficiency_frac)
    dkv_pass = p2p_s(cluster, bwd.dkv_bytes, stride, efficiency_frac)

    def split(t: RingTraffic, step_s: Array) -> tuple[Array, Array]:
        last = np.minimum(t.dkv_passes, 1)
        parts = (
            (t.gathers, overlap(gather, step_s, on=True, interference=interference)),
            (t.kv_passes, overlap(kv_pass, step_s, on=True, interference=interference)),
            (t.dkv_passes - last, overlap(dkv_pass, step_s, on=True, interference=interference)),
            (last, overlap(dkv_pass, step_s, on=False)),
        )
        return sum(n * o.exposed for n, o in parts), sum(n * o.hidden for n, o in parts)

    (f_exp, f_hid), (b_exp, b_hid) = split(fwd, step_fwd_s), split(bwd, step_bwd_s)
    return RingComm(f_exp, b_exp, f_hid, b_hid)


def torch_ring_layer(
    model: ModelSpec,
    cluster: ClusterSpec,
    fw: FrameworkProfile,
    rest: OpTimes,
    hbm_bytes_per_s: float,
    slowdown: float,
    shard: tuple[Array, Array, Array, Array],
    full: Array,
) -> tuple[tuple[Array, Array, Array], tuple[Array, Array]]:
    """One layer's cost of torch's ring attention for a stack with ``fw.cp_rotate_method`` set: ((exposed
    forward, exposed backward, hidden) communication seconds, (forward, backward) seconds of the merge work),
    per micro-batch. ``rest``: the layer's non-GEMM op times, whose attention kernels
    (``attention_core_fwd_s`` / ``attention_core_bwd_s``) are slowed by ``slowdown`` as every compute time is
    (``workbench.cost.layer_comm.compute_slowdown``); each of the cp steps runs 1/cp of them. ``shard``: (local
    tokens, tp, cp, the cp group's stride). A full recompute (``full``) repeats the forward's collectives and
    merges in the backward pass; hidden communication costs ``fw.comm_interference_frac`` of itself
    (:func:`workbench.cost.overlap.overlap`). The merge work is priced at ``hbm_bytes_per_s`` (the device's
    achieved HBM bandwidth), slowed by ``slowdown`` as every memory-bound op. Shapes broadcast."""
    tokens, tp, cp, stride = shard
    cp = np.asarray(cp)
    values = ring_values(model, tokens=tokens, tp=tp, repeats_kv=fw.attention_repeats_kv)
    comm = ring_comm(
        cluster,
        values,
        cp=cp,
        stride=stride,
        rotate_method=fw.cp_rotate_method,
        step_fwd_s=rest.attention_core_fwd_s * slowdown / cp,
        step_bwd_s=rest.attention_core_bwd_s * slowdown / cp,
        efficiency_frac=fw.collective_efficiency_frac,
        interference=fw.comm_interference_frac,
    )
    redo = np.where(full, 1.0, 0.0)
    hidden = comm.hidden_f_s * (1.0 + redo) + comm.hidden_b_s
    f_s, b_s = comm.f_s, comm.b_s + redo * comm.f_s
    merge_f, merge_b = merge_bytes(values, cp)
    per_byte = slowdown / hbm_bytes_per_s
    return (f_s, b_s, hidden), (merge_f * per_byte, (merge_b + redo * merge_f) * per_byte)
