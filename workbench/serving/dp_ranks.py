"""Attention-DP ranks that schedule their own requests: which prefill chunks the slowest rank of a lockstep
iteration runs (``heaviest_rank_chunks``, used by :class:`workbench.serving.cost.ReplicaCost` where
``EngineProfile.dp_rank_batches``)."""

from __future__ import annotations

import numpy as np


def heaviest_rank_chunks(
    new_tokens: np.ndarray, context_tokens: np.ndarray, ranks: int
) -> tuple[np.ndarray, np.ndarray]:
    """The prefill chunks of the data-parallel rank that holds the most prefill tokens, each repeated ``ranks``
    times: ``(new_tokens, context_tokens)`` of that batch, 1-D int arrays.

    Each chunk belongs to one request, and a request to one rank. The chunks are laid on the ranks largest first,
    each on the rank holding the fewest tokens so far (ties to the lowest rank; the greedy longest-processing-time
    rule, which stands in for the front end's least-loaded assignment of requests), so a single chunk lands on one
    rank while the others carry none. Pricing the heaviest rank's chunks on every rank prices an iteration whose
    ranks run in lockstep, each padded to the largest rank's tokens (vLLM V1 ``coordinate_batch_across_dp``):
    ``[300, 200, 100]`` on two ranks -> rank 0 holds 300, rank 1 holds 300 (200 + 100); rank 0 is the first of the
    heaviest -> ``([300, 300], ...)``. ``ranks`` = 1 returns the chunks unchanged. Raises ValueError when the
    arrays differ in length or ``ranks`` < 1."""
    new = np.asarray(new_tokens).ravel()
    ctx = np.asarray(context_tokens).ravel()
    if new.size != ctx.size:
        raise ValueError(
            f"heaviest_rank_chunks: new_tokens ({new.size}) and context_tokens ({ctx.size}) must have one entry "
            "per chunk each"
        )
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"heaviest_rank_chunks: ranks must be an integer >= 1, got {ranks!r}")
    if ranks == 1 or new.size == 0:
        return new, ctx
    loads = [0] * ranks
    held: list[list[int]] = [[] for _ in range(ranks)]
    for j in np.argsort(-new, kind="stable").tolist():
        k = loads.index(min(loads))
        loads[k] += int(new[j])
        held[k].append(j)
    mine = sorted(held[loads.index(max(loads))])
    return np.tile(new[mine], ranks), np.tile(ctx[mine], ranks)
