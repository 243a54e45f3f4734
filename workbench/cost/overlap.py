"""Communication hidden behind compute: one rule, applied per kind of traffic with its own window and tail.

A transfer of ``comm`` seconds that can run while ``window`` seconds of independent compute run, and whose last
``tail`` seconds cannot start before that compute ends, is exposed for ``max(tail, comm - window)`` (never more
than ``comm``, never less than 0); the rest is hidden. Hidden traffic still costs: the communication kernels
take SMs and HBM bandwidth from the compute they hide behind, modelled as ``interference`` seconds of compute
per hidden second (the framework's ``comm_interference_frac``; DeepSeek-V3, arXiv:2412.19437 section 3.2.2,
gives 20 of the 132 H800 SMs to communication). That slowdown is counted in the kind's exposed time.

Windows and tails per kind (what :mod:`workbench.cost.layer` and :mod:`workbench.cost.step` pass in):

- tp (Transformer Engine userbuffers / async TP): the layer's GEMMs of the same pass; the GEMM is split in tp
  chunks and one chunk's transfer stays exposed (tail = comm / tp).
- cp (ring attention, Liu et al. 2023): each of the cp - 1 KV sends hides behind one block of attention, the
  window is the attention core times (cp - 1) / cp; no tail (the first block uses the local KV).
- ep (DualPipe, DeepSeek-V3 section 3.2.1; Megatron-Core's combined 1F1B EP overlap): each transfer behind the
  part of the other micro-batch's layer that the forward-backward pair runs beside it (:func:`combined_pair_s`);
  the exposed part is the pair's period over its compute.
- fsdp (ZeRO-3 prefetch, one layer ahead): forward gathers hide behind the layer's forward, backward gathers
  and gradient reduce-scatters behind its backward (recompute included).
- dp (bucketed gradient reduction, Megatron-Core DDP / PyTorch DDP, Li et al. 2020 VLDB "PyTorch
  Distributed" section 3.2.3): the last micro-batch's backward on the rank, the last bucket exposed (tail =
  comm * bucket / parameters); the distributed optimizer's weight all-gather behind the next step's first
  forward, the first bucket exposed.

Arrays broadcast elementwise (plans are columns, see :mod:`workbench.cost.step`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

Array = Any


class Overlapped(NamedTuple):
    """Seconds of one kind of traffic: ``exposed`` on the critical path (interference included) and
    ``hidden`` behind compute."""

    exposed: Array
    hidden: Array


def overlap(
    comm: Array, window: Array, *, on: Array, tail: Array = 0.0, interference: float = 0.0
) -> Overlapped:
    """Split ``comm`` seconds into exposed and hidden (module docstring): where ``on`` is false everything is
    exposed; else ``max(min(tail, comm), comm - window, 0)`` is, plus ``interference`` times the hidden part."""
    comm = np.asarray(comm, dtype=float)
    exposed = np.maximum(np.maximum(np.minimum(tail, comm), comm - window), 0.0)
    exposed = np.where(on, exposed, comm)
    hidden = comm - exposed
    return Overlapped(exposed + interference * hidden, hidden)


def combined_pair_s(
    compute: tuple[Array, Array, Array, Array, Array], comm: tuple[Array, Array, Array, Array]
) -> Array:
    """Seconds of one MoE layer's forward (micro-batch i + 1) and backward (micro-batch i) run as one pair on
    a compute and a communication stream, each transfer hidden behind the other micro-batch's compute that the
    schedule pairs it with: DeepSeek-V3's DualPipe chunk pair (arXiv:2412.19437 section 3.2.1, figure 4) as
    Megatron-Core 0.15 runs it with ``overlap_moe_expert_parallel_comm`` and ``delay_wgrad_compute``
    (NVIDIA/Megatron-LM @0d8e0714 megatron/core/models/common/model_chunk_schedule_plan.py
    ``TransformerLayerSchedulePlan.run``)::

        comm stream:    combine_bwd        | dispatch_fwd -> dispatch_bwd       | combine_fwd
        compute stream: attn_fwd           | mlp_bwd -> mlp_bwd_dw -> mlp_fwd    | attn_bwd (+ its dw)

    ``compute``: (attn_fwd A_f, mlp_fwd M_f, attn_bwd A_b, mlp_bwd M_b, mlp_wgrad W_b) seconds, the attention
    block with the router (up to the dispatch) and the MoE block (dispatch to combine); ``comm``: (dispatch_fwd
    D_f, combine_fwd C_f, dispatch_bwd D_b, combine_bwd C_b) seconds. Each op starts when its stream is free and
    its input is ready: M_b and D_f after A_f and C_b; D_b after D_f and M_b (dgrad only: the expert weight
    gradient W_b is delayed behind it); M_f after W_b and D_f; A_b and C_f after M_f and D_b; the next pair
    starts when both end. Returns the pair's period ``S + max(A_b, C_f)`` with ``S = max(end of M_f, end of
    D_b)``: at least the compute's sum, at most compute plus communication. Arrays broadcast."""
    a_f, m_f, a_b, m_b, w_b = compute
    d_f, c_f, d_b, c_b = comm
    start = np.maximum(a_f, c_b)  # M_b on compute, D_f on comm
    m_b_end, d_f_end = start + m_b, start + d_f
    d_b_end = np.maximum(d_f_end, m_b_end) + d_b
    m_f_end = np.maximum(m_b_end + w_b, d_f_end) + m_f
    return np.maximum(m_f_end, d_b_end) + np.maximum(a_b, c_f)
