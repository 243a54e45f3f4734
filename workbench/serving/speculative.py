"""Speculative decoding in the request simulator: a request's decode runs as verification steps, each emitting
the plan's mean accepted length of tokens (``ServingPlan.speculative``; the draft and verification costs are
``ReplicaCost``'s, :mod:`workbench.serving.cost_speculative`).

The simulator advances every running sequence by one step per iteration; a speculative engine's step emits L
tokens on average (L = ``SpeculativeDecoding.mean_accepted_length``), so a request of O output tokens (the first
from its prefill) needs 1 + ceil((O - 1) / L) steps. ``speculative_steps`` gives the simulator those step counts;
``workbench.serving.results.with_requests`` reads its tables back with the real output lengths, so TPOT is the
time between the first and last tokens over O - 1. Known error: the simulator's KV of a decoding request grows
by one token per step, not L, so attention and KV use late in long outputs are understated by (L - 1) tokens per
step taken (a 4,096-token output at L = 2.4 on a 64K prompt: 2% of the context).
"""

from __future__ import annotations

import numpy as np

from workbench.serving.requests import Requests
from workbench.specs.serving import ServingPlan


def speculative_steps(requests: Requests, plan: ServingPlan) -> Requests:
    """``requests`` with each output length O replaced by the decode steps of a speculative engine plus the
    prefill's token, 1 + ceil((O - 1) / L); ``requests`` itself when the plan has no speculative decoding."""
    spec = plan.speculative
    if spec is None:
        return requests
    length = spec.mean_accepted_length
    steps = 1 + np.ceil((requests.output_tokens - 1) / length - 1e-9).astype(np.int64)
    return Requests(
        arrival_s=requests.arrival_s,
        input_tokens=requests.input_tokens,
        output_tokens=np.maximum(steps, 1),
        concurrency=requests.concurrency,
    )
