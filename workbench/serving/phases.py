"""One serving phase measured alone at a fixed batch: prefill throughput of an engine kept full of prompts, and
decode throughput of an engine holding a fixed batch of sequences (the "phase-only" rows of published P/D
deployments, where each side is saturated with the other not limiting: LMSYS's large-scale EP and GB200 blogs).

The engine is priced by ``ReplicaCost`` (:mod:`workbench.serving.cost`), iteration by iteration, without the
request simulator: in steady state a saturated prefill engine runs back-to-back batches of the same shape, and a
decode engine at a fixed batch runs iterations whose cost is affine in the context, so the mean context prices the
mean iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.serving.cost import ReplicaCost
from workbench.specs.limits import check_count

PHASES = ("prefill", "decode")


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseBatch:
    """The batch one phase runs at. Prefill: prompts of ``prompt_tokens`` filling ``batch_tokens_per_rank`` tokens
    per attention-DP rank per iteration. Decode: ``num_seqs`` sequences in the engine at a mean KV length of
    ``context_tokens``."""

    phase: str
    """``prefill`` or ``decode``."""
    role: str = "both"
    """The engine role of the plan that runs it (``both``, ``prefill`` or ``decode``)."""
    prompt_tokens: int = 1
    batch_tokens_per_rank: int = 1
    num_seqs: int = 1
    context_tokens: int = 1

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"PhaseBatch: phase must be one of {', '.join(PHASES)}, got {self.phase!r}")
        for field in ("prompt_tokens", "batch_tokens_per_rank", "num_seqs", "context_tokens"):
            check_count("PhaseBatch", field, getattr(self, field), maximum=2**31)


def prefill_tokens_per_s_per_device(
    cost: ReplicaCost, prompt_tokens: int, batch_tokens_per_rank: int
) -> float:
    """Prompt tokens per second per device of an engine kept full of prompts: each attention-DP rank takes
    floor(batch / prompt) whole prompts per iteration (at least one); a prompt longer than the batch is prefilled
    in chunks of the batch on top of the earlier ones (chunked prefill), one per rank. tokens / iteration seconds /
    the engine's devices."""
    rp = cost.plan
    ranks, empty = rp.attention_dp, np.zeros(0, dtype=np.int64)
    if prompt_tokens <= batch_tokens_per_rank:
        n = ranks * (batch_tokens_per_rank // prompt_tokens)
        seconds = cost.iteration_s(np.full(n, prompt_tokens), np.zeros(n, dtype=np.int64), empty)
        tokens = n * prompt_tokens
    else:
        seconds, done = 0.0, 0
        while done < prompt_tokens:
            chunk = min(batch_tokens_per_rank, prompt_tokens - done)
            seconds += cost.iteration_s(np.full(ranks, chunk), np.full(ranks, done), empty)
            done += chunk
        tokens = ranks * prompt_tokens
    return tokens / seconds / rp.devices_per_engine


def decode_tokens_per_s_per_device(cost: ReplicaCost, num_seqs: int, context_tokens: int) -> float:
    """Output tokens per second per device of an engine decoding ``num_seqs`` sequences at ``context_tokens`` KV
    tokens each: num_seqs x tokens per step (the mean accepted length under speculative decoding, else 1) / one
    decode iteration / the engine's devices."""
    rp = cost.plan
    per_step = rp.speculative.mean_accepted_length if rp.speculative is not None else 1.0
    return num_seqs * per_step / cost.decode_s(num_seqs, context_tokens) / rp.devices_per_engine


def phase_predictions(cost_of: dict[str, ReplicaCost], phases: tuple[PhaseBatch, ...]) -> dict[str, float]:
    """``input_tokens_per_s_per_device`` of the prefill phase and ``output_tokens_per_s_per_device`` of the decode
    phase among ``phases``, each priced on ``cost_of[phase.role]``."""
    out: dict[str, float] = {}
    for ph in phases:
        cost = cost_of[ph.role]
        if ph.phase == "prefill":
            out["input_tokens_per_s_per_device"] = prefill_tokens_per_s_per_device(
                cost, ph.prompt_tokens, ph.batch_tokens_per_rank
            )
        else:
            out["output_tokens_per_s_per_device"] = decode_tokens_per_s_per_device(
                cost, ph.num_seqs, ph.context_tokens
            )
    return out
