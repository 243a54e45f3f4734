"""Speculative decoding as a serving option (``ServingPlan.speculative``): the method, the tokens proposed per
step and how many of them the target model accepts.

One decode step of a speculative engine: the draft proposes ``k`` tokens per sequence (``k`` sequential draft
passes for EAGLE/EAGLE-3, MTP and draft models; a table look-up for n-gram), the target verifies the ``k + 1``
positions of every sequence in one forward pass (a small prefill-like step), and each sequence keeps its accepted
prefix plus the target's own next token. With a per-token acceptance probability ``a`` independent per position,
the mean tokens a step emits is ``(1 - a^(k+1)) / (1 - a)`` (Leviathan, Kalman & Matias, "Fast Inference from
Transformers via Speculative Decoding", ICML 2023, arXiv:2211.17192, eq. 1); published runs usually state that
mean directly (SGLang's "average acceptance length", TensorRT-LLM's "acceptance rate" column), which
``accepted_length`` takes as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from workbench.specs.errors import check_choice, check_int
from workbench.specs.limits import check_real, shown

MAX_SPECULATIVE_TOKENS = 64
"""Tokens proposed per step: at most 64. Published deployments propose 1-8 (EAGLE-3 trees verify up to ~64
draft tokens: SGLang ``--speculative-num-draft-tokens`` defaults are 4-64)."""


class SpecMethod(StrEnum):
    """How the draft tokens are made (the ``spec_method`` codes of ``serving_public.csv``)."""

    MTP = "mtp"
    """The model's own multi-token-prediction module (DeepSeek-V3, arXiv:2412.19437 section 2.2): one transformer
    block of the target's shape and a 2h -> h projection, sharing the embedding and LM head, run once per proposed
    token."""
    EAGLE = "eagle"
    """EAGLE (Li et al., ICML 2024, arXiv:2401.15077): one decoder layer of the target's width on the target's
    features, sharing its LM head, run once per proposed token."""
    EAGLE3 = "eagle3"
    """EAGLE-3 (Li et al. 2025, arXiv:2503.01840): as EAGLE, fed three fused target layers (3h -> h)."""
    DRAFT = "draft"
    """A separate, smaller draft model (Leviathan et al. 2023; Chen et al. 2023, arXiv:2302.01318), run once per
    proposed token with its own KV cache."""
    NGRAM = "ngram"
    """Prompt look-up (n-gram matching on the CPU): no draft GPU work."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SpeculativeDecoding:
    """Speculative decoding of one engine. Give exactly one of ``acceptance_rate`` and ``accepted_length``."""

    method: SpecMethod
    """How the draft tokens are made."""
    num_speculative_tokens: int
    """Tokens the draft proposes per step, k (vLLM ``num_speculative_tokens``, SGLang ``--speculative-num-steps``,
    TRT-LLM ``num_nextn_predict_layers``). 1..``MAX_SPECULATIVE_TOKENS``."""
    acceptance_rate: float | None = None
    """Probability that the target accepts one proposed token, given it accepted those before, in [0, 1)."""
    accepted_length: float | None = None
    """Mean tokens one verification step emits per sequence, the target's own token included: 1..k + 1."""
    draft_model: str | None = None
    """Model preset id (or config path) of the draft model; required for ``draft``, unused otherwise."""

    def __post_init__(self) -> None:
        check_choice(self, "method", SpecMethod)
        check_int(
            self, "num_speculative_tokens", maximum=MAX_SPECULATIVE_TOKENS, limit="MAX_SPECULATIVE_TOKENS"
        )
        k = self.num_speculative_tokens
        if (self.acceptance_rate is None) == (self.accepted_length is None):
            raise ValueError("SpeculativeDecoding: give exactly one of acceptance_rate and accepted_length")
        if self.acceptance_rate is not None:
            check_real("SpeculativeDecoding", "acceptance_rate", self.acceptance_rate, minimum=0.0, min_open=False,
                       maximum=1.0, max_open=True)  # fmt: skip
        if self.accepted_length is not None:
            check_real("SpeculativeDecoding", "accepted_length", self.accepted_length, minimum=1.0, min_open=False,
                       maximum=k + 1.0)  # fmt: skip
        if self.method is SpecMethod.DRAFT and not self.draft_model:
            raise ValueError(
                "SpeculativeDecoding: method 'draft' needs draft_model (a model preset id or path)"
            )
        if self.draft_model is not None and (
            not isinstance(self.draft_model, str) or len(self.draft_model) > 500
        ):
            raise ValueError(
                f"SpeculativeDecoding: draft_model must be a model preset id, got {shown(self.draft_model)}"
            )

    @property
    def mean_accepted_length(self) -> float:
        """Mean tokens a step emits per sequence: ``accepted_length``, or (1 - a^(k+1)) / (1 - a) from
        ``acceptance_rate`` (Leviathan et al. 2023, eq. 1)."""
        if self.accepted_length is not None:
            return float(self.accepted_length)
        return expected_accepted_length(float(self.acceptance_rate or 0.0), self.num_speculative_tokens)

    @property
    def verify_tokens(self) -> int:
        """Positions the target computes per sequence and step: k proposals + 1."""
        return self.num_speculative_tokens + 1

    def describe(self) -> str:
        """Short text such as ``mtp k3 L2.44``."""
        return f"{self.method.value} k{self.num_speculative_tokens} L{self.mean_accepted_length:.2f}"


def expected_accepted_length(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """(1 - a^(k+1)) / (1 - a): tokens one verification step emits on average when each of k proposals is
    accepted with probability a given the previous ones were (Leviathan et al. 2023, eq. 1); k + 1 at a = 1.
    Raises ValueError for a outside [0, 1] or k < 0."""
    a, k = acceptance_rate, num_speculative_tokens
    if not 0.0 <= a <= 1.0 or k < 0:
        raise ValueError(f"expected_accepted_length: need 0 <= a <= 1 and k >= 0, got a={a!r}, k={k!r}")
    if a == 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)
