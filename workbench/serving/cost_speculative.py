"""The draft side of speculative decoding for one engine (``ServingPlan.speculative``, the specs in
:mod:`workbench.specs.speculative`), for ``ReplicaCost`` (:mod:`workbench.serving.cost`).

A speculative decode step of B sequences costs (Leviathan et al. 2023, arXiv:2211.17192; EAGLE, arXiv:2401.15077;
DeepSeek-V3's MTP, arXiv:2412.19437):

- the draft: k sequential passes. MTP, EAGLE and EAGLE-3 run one decoder layer of the target's shape (an MoE layer
  for DeepSeek-V3's MTP module, a dense one for EAGLE heads), an h-wide input projection and the shared LM head,
  plus that layer's attention over each sequence's context (``DraftCost.draft_s``): one pass extends the draft over
  the step's k + 1 verified positions of every sequence (logits at its last one) and k - 1 passes decode one token
  each, as SGLang's EAGLE worker runs them (``python/sglang/srt/speculative/eagle_worker.py``: ``draft_forward``
  runs k - 1 forwards, "we get 1 token from draft prefill and (#spec steps - 1) tokens here", and
  ``forward_draft_extend_after_decode`` the extend, whose CUDA graph holds ``speculative_num_steps + 1`` tokens a
  sequence, ``EAGLEDraftExtendCudaGraphRunner.num_tokens_per_bs``; vLLM's EAGLE proposer likewise runs its first
  pass over the step's tokens and k - 1 single-token passes); a draft model
  runs k decode iterations of its own (priced by its own ``ReplicaCost``, without a second host overhead); n-gram
  look-up runs on the CPU (no GPU time);
- the verification: one target forward over B (k + 1) positions (GEMMs, LM head), attention with k + 1 queries
  per sequence over its cache (``ReplicaCost.iteration_s``);
- memory: the draft's own KV (one layer for MTP/EAGLE, all the draft model's layers) beside the target's, and
  k look-ahead slots per running sequence for the proposals (vLLM ``num_lookahead_slots``; SGLang reserves the
  draft tokens' slots per request), which lower the KV capacity and so the batch at high load.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench.serving.cost_attention import AttentionCost
from workbench.serving.cost_layers import LayerCost
from workbench.serving.memory import kv_bytes_per_token_layer
from workbench.specs.model import ModelSpec
from workbench.specs.serving import ServingPlan
from workbench.specs.speculative import SpecMethod

FUSED_INPUTS = {SpecMethod.MTP: 2, SpecMethod.EAGLE: 2, SpecMethod.EAGLE3: 3}
"""Hidden-size inputs of the draft head's first projection: MTP concatenates the normed hidden state and the next
token's embedding (DeepSeek-V3 eq. 21, M in R^{d x 2d}); EAGLE the feature and the token embedding; EAGLE-3 three
target layers' features (low, middle, high)."""


class DraftCost:
    """Draft time and KV overhead of speculative decoding on one engine of ``role_plan`` (aggregated form, its
    ``speculative`` set) serving ``model``: ``parts`` are the target's own layer and attention costs (a one-layer
    draft head has the target's shape); ``draft`` is the draft model's ``ReplicaCost`` on the same engine layout
    (method ``draft`` only, priced without a host overhead of its own). Raises ValueError for method ``draft``
    without it."""

    __slots__ = ("_attention", "_draft", "_extra_kv_frac", "_k", "_moe", "_table")

    def __init__(
        self,
        model: ModelSpec,
        role_plan: ServingPlan,
        parts: tuple[LayerCost, AttentionCost],
        draft: Any = None,
    ) -> None:
        spec = role_plan.speculative
        assert spec is not None
        self._k = spec.num_speculative_tokens
        layers, self._attention = parts
        self._moe = model.is_moe and spec.method is SpecMethod.MTP
        self._draft = draft
        self._table = np.zeros(0)
        per_layer = kv_bytes_per_token_layer(model, role_plan.kv_cache_dtype, role_plan.tp)
        extra = 0.0
        if spec.method in FUSED_INPUTS:
            n = np.arange(role_plan.max_num_seqs + 1, dtype=float)
            fused = FUSED_INPUTS[spec.method]
            extend = layers.draft_pass_s(self._moe, n * (self._k + 1), fused, logits=n)
            self._table = (self._k - 1) * layers.draft_pass_s(self._moe, n, fused) + extend
            self._table[0] = 0.0
            extra = per_layer
        elif spec.method is SpecMethod.DRAFT:
            if draft is None:
                raise ValueError("DraftCost: method 'draft' needs the draft model's cost")
            extra = draft.kv_bytes_per_token_per_device() * draft.plan.pp
        self._extra_kv_frac = extra / (model.num_layers * per_layer)

    @property
    def num_speculative_tokens(self) -> int:
        """k, the tokens proposed per step."""
        return self._k

    def draft_s(self, num_seqs: int, cached_tokens: float) -> float:
        """Seconds of the k draft passes of one step over ``num_seqs`` sequences holding ``cached_tokens`` KV
        tokens in all (the draft layer attends over the same contexts: k - 1 decode passes with one query a
        sequence and the extend pass with k + 1); 0.0 for no sequence or n-gram drafts."""
        if num_seqs == 0:
            return 0.0
        if self._draft is not None:
            ctx = np.full(num_seqs, max(1, round(cached_tokens / num_seqs)))
            return self._k * self._draft.iteration_s(np.zeros(0, dtype=int), np.zeros(0, dtype=int), ctx)
        if not self._table.size:
            return 0.0
        base = float(self._table[num_seqs]) if num_seqs < self._table.size else float(self._table[-1])
        decode = (self._k - 1) * self._attention.decode_layer_s(num_seqs, cached_tokens)
        return base + decode + self._attention.decode_layer_s(num_seqs, cached_tokens, self._k + 1)

    def kv_capacity_tokens(self, capacity: int, block: int, max_num_seqs: int) -> int:
        """The target's KV tokens once the draft's KV shares the pool (capacity / (1 + draft bytes / target bytes))
        and ``max_num_seqs`` sequences hold k look-ahead slots each, whole blocks. Raises ValueError when not one
        block is left."""
        shared = capacity / (1.0 + self._extra_kv_frac) - self._k * max_num_seqs
        blocks = math.floor(shared / block)
        if blocks < 1:
            raise ValueError(
                f"speculative decoding: the draft's KV and {self._k} look-ahead slots for each of {max_num_seqs} "
                f"sequences leave no KV block of the {capacity:,} tokens; lower max_num_seqs or the proposed tokens"
            )
        return blocks * block
