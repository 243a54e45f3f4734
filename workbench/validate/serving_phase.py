"""The batch of a phase-only serving validation row (``phase`` = ``prefill``, ``decode`` or
``prefill_and_decode``), for :mod:`workbench.validate.serving`: what :mod:`workbench.serving.phases` prices.

Prefill: prompts of ``input_tokens_mean`` tokens; the tokens per attention-DP rank per batch are
``prefill_batch_tokens`` (per GPU, as the README states it), else ``prefill_batch_size`` prompts per engine, else
the engine's prefill cap (SGLang ``--max-prefill-tokens`` 16384; other engines their token budget), noted.
Decode: ``decode_batch_size`` (per attention-DP rank when the engine has several, per engine otherwise), else the
closed loop's ``concurrency``, else the batch that fills the KV cache (a saturated decode side), capped by
``max_batch_size``; at the mean KV length ``input_tokens_mean`` + ``output_tokens_mean`` / 2 (the input alone
when the output is not stated, as the blogs' "KV cache length" tables give it).
"""

from __future__ import annotations

from workbench.serving.cost import ReplicaCost
from workbench.serving.phases import PhaseBatch
from workbench.specs.serving import ServingPlan
from workbench.validate.rows import Unexpressible, cell_count, cell_number
from workbench.validate.serving_specs import row_role

SGLANG_MAX_PREFILL_TOKENS = 16384
"""SGLang ``--max-prefill-tokens`` default: the most prompt tokens one prefill batch of a scheduler takes
(sglang ``server_args.py``; the LMSYS large-EP prefill table runs at this 16,384 per device)."""


def row_phases(
    row: dict[str, str], cost_of: dict[str, ReplicaCost], assumed: list[str]
) -> tuple[PhaseBatch, ...]:
    """The phases a phase-only row measures, each with its batch (module docstring) and the role whose engine
    runs it (``cost_of`` keys: ``both``, or ``prefill`` and ``decode`` of a disaggregated plan). Raises
    ``Unexpressible`` naming the blank column a phase needs."""
    phase = row["phase"].strip()
    wanted = ("prefill", "decode") if phase == "prefill_and_decode" else (phase,)
    role = row_role(row)
    out = []
    prompt = cell_count(row, "input_tokens_mean")
    for ph in wanted:
        engine_role = ph if role == "pd" else "both"  # a role measured alone is laid out as its own engines
        cost = cost_of[engine_role]
        if ph == "prefill":
            out.append(PhaseBatch(phase=ph, role=engine_role, prompt_tokens=prompt,
                                  batch_tokens_per_rank=prefill_batch_tokens(row, cost.plan, prompt, assumed)))  # fmt: skip
        else:
            context = prompt + round((cell_number(row, "output_tokens_mean") or 0) / 2)
            if cell_number(row, "output_tokens_mean") is None:
                assumed.append(f"decode KV length {context} = input_tokens_mean (output_tokens_mean blank)")
            out.append(PhaseBatch(phase=ph, role=engine_role, num_seqs=_decode_seqs(row, cost, context, assumed),
                                  context_tokens=context))  # fmt: skip
    return tuple(out)


def prefill_batch_tokens(row: dict[str, str], rp: ServingPlan, prompt: int, assumed: list[str]) -> int:
    """Prompt tokens per attention-DP rank in one prefill batch of ``row`` run as ``rp`` (module docstring), the
    default taken noted in ``assumed``."""
    stated = cell_number(row, "prefill_batch_tokens")
    if stated is not None:
        return int(stated)
    if cell_number(row, "prefill_batch_size") is not None:
        return max(1, cell_count(row, "prefill_batch_size") * prompt // rp.attention_dp)
    tokens = SGLANG_MAX_PREFILL_TOKENS if row["engine"].strip() == "sglang" else rp.max_num_batched_tokens
    assumed.append(
        f"prefill batch {tokens} tokens per rank (the engine's prefill cap; prefill_batch_tokens blank)"
    )
    return tokens


def _decode_seqs(row: dict[str, str], cost: ReplicaCost, context: int, assumed: list[str]) -> int:
    rp = cost.plan
    stated = cell_number(row, "decode_batch_size")
    if stated is not None:
        return int(stated) * rp.attention_dp
    concurrency = cell_number(row, "concurrency")
    if concurrency is not None:
        return int(concurrency) // rp.replicas or 1
    fill = cost.kv_capacity_tokens // context
    cap = cell_number(row, "max_batch_size")
    seqs = max(1, min(fill, int(cap) if cap is not None else fill))
    if fill < 1:
        raise Unexpressible(f"one {context}-token sequence does not fit the KV cache")
    assumed.append(f"decode batch {seqs} = the KV cache filled at {context} tokens (decode_batch_size blank)")
    return seqs
