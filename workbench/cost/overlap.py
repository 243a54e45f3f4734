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
- ep (DualPipe, DeepSeek-V3 section 3.2.1; Megatron-Core's combined 1F1B EP overlap): another micro-batch's
  forward + backward compute of the layer; no tail.
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
