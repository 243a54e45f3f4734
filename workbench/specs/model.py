"""``ModelSpec``: a decoder-only transformer, dense or mixture-of-experts, and what follows from its shape.

Parameter counts follow the layer shapes of the Hugging Face implementations (Llama, Mistral, Mixtral,
Qwen2, Qwen3-MoE, DeepSeek-V3, GPT-2, GPT-NeoX); for GPT-style models they reduce to Narayanan et al.
2021 (arXiv:2104.04473), section 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).
Reading Hugging Face ``config.json`` files lives in :mod:`workbench.presets.hf_config`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from workbench.specs.errors import check_choice, check_int
from workbench.specs.limits import MAX_LAYERS, MAX_SEQ_LEN, MODEL_MAXIMUM, shown

GLU_CLAMP_MAX = 1e4
"""Largest ``ModelSpec.glu_clamp`` accepted (GPT-OSS clamps at 7; a limit this far out clamps nothing)."""


class AttentionKind(StrEnum):
    """How the attention block projects queries, keys and values."""

    MHA = "mha"
    """Multi-head attention: one key/value head per query head."""
    GQA = "gqa"
    """Grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245): fewer key/value heads."""
    MLA = "mla"
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434): low-rank compressed keys and values."""


class NormKind(StrEnum):
    RMSNORM = "rmsnorm"
    """One weight vector of size h (Zhang & Sennrich 2019)."""
    LAYERNORM = "layernorm"
    """Weight and bias, 2h parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """A decoder-only transformer. All sizes are counts (no units); parameters are not bytes."""

    name: str
    """Display name, e.g. ``llama-3.1-70b``."""
    num_layers: int
    """Transformer blocks (l). 1..``limits.MAX_LAYERS``; every size field is bounded by
    ``workbench.specs.limits.MODEL_MAXIMUM``."""
    hidden_size: int
    """Model width d_model (h). 1..``limits.MAX_HIDDEN_SIZE``."""
    num_attention_heads: int
    """Query heads (a). 1..``limits.MAX_ATTENTION_HEADS``."""
    num_key_value_heads: int
    """Key/value heads; equals ``num_attention_heads`` for MHA. Divides ``num_attention_heads``."""
    head_dim: int
    """Size of one query/key/value head; ``hidden_size // num_attention_heads`` for most models."""
    ffn_hidden_size: int
    """Intermediate size of a dense MLP (one up-projection for gated MLPs, as HF's ``intermediate_size``)."""
    vocab_size: int
    """Vocabulary size V. > 0."""
    gated_mlp: bool = True
    """SwiGLU/GeGLU MLP with three matrices (gate, up, down); False: two matrices (up, down)."""
    tied_embeddings: bool = False
    """The LM head reuses the input embedding matrix."""
    attention: AttentionKind = AttentionKind.GQA
    norm: NormKind = NormKind.RMSNORM
    linear_bias: bool = False
    """Every linear layer has a bias (GPT-2, GPT-NeoX)."""
    qkv_bias: bool = False
    """Only the query/key/value projections have a bias (Qwen2)."""
    qk_norm: bool = False
    """RMSNorm on each query and key head (Qwen3): 2 * head_dim parameters per layer."""
    expert_bias: bool = False
    """The routed experts' linear layers have biases (GPT-OSS: ``gate_up_proj_bias`` and ``down_proj_bias`` of
    transformers' GptOssExperts): (2 if gated else 1) * moe_ffn_hidden_size + hidden_size parameters per expert.
    MoE models only."""
    glu_clamp: float = 0.0
    """Clamp a gated MLP applies to its inputs before the activation: the gate at most ``glu_clamp``, the linear
    input within +-``glu_clamp`` (Hugging Face ``swiglu_limit``: GPT-OSS 7.0); 0: no clamp. Gated MLPs only,
    0..``GLU_CLAMP_MAX``."""
    rope_scaling: str = ""
    """Scaling of the rotary embedding (Hugging Face ``rope_scaling.rope_type``: ``yarn`` for GPT-OSS and
    DeepSeek-V3, ``llama3`` for Llama 3.1); empty for plain RoPE or no rotary embedding. Lower-case letters,
    digits and underscores."""
    num_learned_positions: int = 0
    """Rows of a learned absolute position embedding (GPT-2: ``n_positions``); 0 for rotary models."""
    num_mtp_layers: int = 0
    """Multi-token-prediction modules trained beside the model (DeepSeek-V3: 1, HF
    ``num_nextn_predict_layers``; arXiv:2412.19437 section 2.2): each adds on the last pipeline stage two
    RMSNorms, a 2h x h projection, one transformer block like the model's last and another pass through the
    shared output head and loss, and holds a copy of the shared embedding there. Not counted in
    ``total_parameters`` (the published sizes leave them out): see ``mtp_parameters``."""
    sliding_window: int = 0
    """Keys a query attends to in a sliding-window layer: itself and the ``sliding_window - 1`` tokens before
    it (Hugging Face ``sliding_window``: Mistral-7B v0.1 4096, GPT-OSS 128); 0: every layer attends to the
    whole causal prefix. 0..``limits.MAX_SEQ_LEN``."""
    num_sliding_window_layers: int = 0
    """Layers that attend through the window (GPT-OSS: every other layer, 18 of 36, HF ``layer_types``;
    Mistral-7B v0.1: all); the others attend to the whole prefix. 0..num_layers, > 0 exactly when
    ``sliding_window`` is."""
    attention_chunk_size: int = 0
    """Tokens per chunk in a chunked-local-attention layer: a query attends only to the keys of its own chunk,
    from the chunk's start to itself (Hugging Face ``attention_chunk_size``: Llama 4, 8192); 0: no chunked
    layers. 0..``limits.MAX_SEQ_LEN``."""
    num_chunked_attention_layers: int = 0
    """Layers with chunked local attention (Llama 4 Scout: 36 of 48, the RoPE layers; HF ``layer_types``
    ``chunked_attention``). A layer is full, sliding or chunked: ``num_sliding_window_layers +
    num_chunked_attention_layers <= num_layers``; > 0 exactly when ``attention_chunk_size`` is."""
    post_norms: bool = False
    """Each block also normalises the attention and MLP outputs before the residual add ("sandwich" norms,
    Gemma 2 and 3: ``post_attention_layernorm`` and ``post_feedforward_layernorm``): four norms per layer."""
    attention_out_bias: bool = False
    """The attention output projection has a bias (GPT-OSS, whose ``attention_bias`` biases q, k, v and o)."""
    attention_sinks: bool = False
    """One learned sink logit per query head and layer joins the softmax (GPT-OSS ``sinks``)."""
    final_logit_softcap: float = 0.0
    """Soft cap of the output logits, ``c * tanh(logits / c)`` (Gemma 2: 30); 0: none. One extra pass over
    the b x s x V logits, priced with the loss. 0..``GLU_CLAMP_MAX``."""
    attention_logit_softcap: float = 0.0
    """Soft cap of the attention scores inside the kernel (Gemma 2: 50; FlashAttention's ``softcap``); 0: none.
    Recorded, not priced: one tanh per score, inside the fused kernel. 0..``GLU_CLAMP_MAX``."""
    # Mixture of experts. num_experts == 0 means dense.
    num_experts: int = 0
    """Routed experts per MoE layer; 0 for a dense model."""
    experts_per_token: int = 0
    """Routed experts each token goes to (top-k)."""
    moe_ffn_hidden_size: int = 0
    """Intermediate size of one routed or shared expert."""
    num_shared_experts: int = 0
    """Always-active shared experts per MoE layer, each of ``moe_ffn_hidden_size`` (DeepSeekMoE)."""
    num_dense_layers: int = 0
    """Leading layers that keep a dense MLP of ``ffn_hidden_size`` (DeepSeek-V3: 3)."""
    num_expert_groups: int = 0
    """Groups the routed experts are split into for group-limited routing (DeepSeek-V3 ``n_group``: 8);
    0: no group limit."""
    routed_groups_per_token: int = 0
    """Groups a token's top-k experts may come from (DeepSeek-V3 ``topk_group``: 4, one group per node, so a
    token reaches at most 4 nodes; arXiv:2412.19437 section 2.1.2); 0: no limit."""
    router_bias: bool = False
    """The router keeps a per-expert score-correction bias (DeepSeek-V3's aux-loss-free balancing)."""
    # Multi-head latent attention (MLA) dims; 0 when unused.
    q_lora_rank: int = 0
    """Rank of the compressed query; 0 means queries are projected directly from h."""
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ModelSpec: name must be a non-empty string, got {shown(self.name)}")
        for field in (
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "vocab_size",
        ):
            check_int(self, field, maximum=MODEL_MAXIMUM[field][0], limit=MODEL_MAXIMUM[field][1])
        check_choice(self, "attention", AttentionKind)
        check_choice(self, "norm", NormKind)
        for field in (
            "gated_mlp",
            "tied_embeddings",
            "linear_bias",
            "qkv_bias",
            "qk_norm",
            "router_bias",
            "expert_bias",
            "post_norms",
            "attention_out_bias",
            "attention_sinks",
        ):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(
                    f"ModelSpec {shown(self.name)}: {field} must be true or false, got {shown(getattr(self, field))}"
                )
        for field in (
            "ffn_hidden_size",
            "num_experts",
            "experts_per_token",
            "moe_ffn_hidden_size",
            "num_shared_experts",
            "num_dense_layers",
            "num_expert_groups",
            "routed_groups_per_token",
            "num_learned_positions",
            "num_mtp_layers",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
        ):
            check_int(self, field, minimum=0, maximum=MODEL_MAXIMUM[field][0], limit=MODEL_MAXIMUM[field][1])
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"ModelSpec {shown(self.name)}: num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        self._check_moe()
        self._check_mla()
        self._check_window()
        self._check_variants()
        if self.num_dense_layers < self.num_layers and not self.is_moe and self.ffn_hidden_size == 0:
            raise ValueError(
                f"ModelSpec {shown(self.name)}: ffn_hidden_size must be > 0 for a dense model, got 0"
            )

    def _check_moe(self) -> None:
        if not self.is_moe:
            if (
                self.experts_per_token
                or self.num_shared_experts
                or self.num_dense_layers
                or self.num_expert_groups
                or self.routed_groups_per_token
            ):
                raise ValueError(
                    f"ModelSpec {shown(self.name)}: experts_per_token, num_shared_experts, num_dense_layers and "
                    "expert groups need num_experts > 0 (a dense model has num_experts=0)"
                )
            return
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise ValueError(
                f"ModelSpec {shown(self.name)}: experts_per_token={self.experts_per_token} must be in "
                f"1..num_experts={self.num_experts}"
            )
        if self.moe_ffn_hidden_size <= 0:
            raise ValueError(
                f"ModelSpec {shown(self.name)}: moe_ffn_hidden_size must be > 0 for an MoE model, got "
                f"{self.moe_ffn_hidden_size}"
            )
        if self.routed_groups_per_token > self.num_expert_groups or (
            self.num_expert_groups and self.num_experts % self.num_expert_groups
        ):
            raise ValueError(
                f"ModelSpec {shown(self.name)}: routed_groups_per_token={self.routed_groups_per_token} must be at "
                f"most num_expert_groups={self.num_expert_groups}, which must divide num_experts={self.num_experts}"
            )
        if self.num_dense_layers >= self.num_layers:
            raise ValueError(
                f"ModelSpec {shown(self.name)}: num_dense_layers={self.num_dense_layers} must be below "
                f"num_layers={self.num_layers}"
            )
        if self.num_dense_layers and self.ffn_hidden_size <= 0:
            raise ValueError(
                f"ModelSpec {shown(self.name)}: ffn_hidden_size must be > 0 when num_dense_layers > 0"
            )

    def _check_window(self) -> None:
        for size, count in (
            ("sliding_window", "num_sliding_window_layers"),
            ("attention_chunk_size", "num_chunked_attention_layers"),
        ):
            check_int(self, size, minimum=0, maximum=MAX_SEQ_LEN, limit="MAX_SEQ_LEN")
            check_int(self, count, minimum=0, maximum=MAX_LAYERS, limit="MAX_LAYERS")
            n, w = getattr(self, count), getattr(self, size)
            if n > self.num_layers or bool(w) != bool(n):
                raise ValueError(
                    f"ModelSpec {shown(self.name)}: {count}={n} must be in 1..num_layers={self.num_layers} when "
                    f"{size}={w} > 0, and 0 when {size} is 0"
                )
        if self.num_sliding_window_layers + self.num_chunked_attention_layers > self.num_layers:
            raise ValueError(
                f"ModelSpec {shown(self.name)}: num_sliding_window_layers={self.num_sliding_window_layers} plus "
                f"num_chunked_attention_layers={self.num_chunked_attention_layers} must be at most "
                f"num_layers={self.num_layers} (a layer is full, sliding or chunked)"
            )

    def _check_variants(self) -> None:
        """The clamp, the expert biases and the rotary scaling: types, ranges and the models they need."""
        for field in ("glu_clamp", "final_logit_softcap", "attention_logit_softcap"):
            value = getattr(self, field)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value <= GLU_CLAMP_MAX
            ):
                raise ValueError(
                    f"ModelSpec {shown(self.name)}: {field} must be a number in 0..{GLU_CLAMP_MAX:g}, got "
                    f"{shown(value)}"
                )
        clamp = self.glu_clamp
        if clamp and not self.gated_mlp:
            raise ValueError(
                f"ModelSpec {shown(self.name)}: glu_clamp={clamp:g} needs gated_mlp (a GLU to clamp)"
            )
        if self.expert_bias and not self.is_moe:
            raise ValueError(f"ModelSpec {shown(self.name)}: expert_bias needs num_experts > 0")
        if not isinstance(self.rope_scaling, str) or not re.fullmatch(r"[a-z0-9_]{0,32}", self.rope_scaling):
            raise ValueError(
                f"ModelSpec {shown(self.name)}: rope_scaling must be empty or a name of lower-case letters, digits "
                f"and underscores (at most 32; e.g. yarn, llama3), got {shown(self.rope_scaling)}"
            )

    def _check_mla(self) -> None:
        if self.attention is not AttentionKind.MLA:
            return
        for field in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(self, field) <= 0:
                raise ValueError(
                    f"ModelSpec {shown(self.name)}: {field} must be > 0 for attention='mla', got {getattr(self, field)}"
                )

    # ---- shape facts -------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head in the score product (MLA: nope + rope parts)."""
        if self.attention is AttentionKind.MLA:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.attention is AttentionKind.MLA else self.head_dim

    # ---- parameter counts (counts, not bytes) --------------------------------------------------------
    def _norm_params(self) -> int:
        return self.hidden_size * (2 if self.norm is NormKind.LAYERNORM else 1)

    def attention_parameters(self) -> int:
        """Parameters of one attention block (projections, biases, QK/latent norms).

        MHA/GQA: W_q (h x a d), W_k and W_v (h x g d), W_o (a d x h). MLA (DeepSeek-V2, arXiv:2405.04434,
        eqs. 1-14): W_DQ (h x r_q), W_UQ (r_q x a(d_nope + d_rope)), W_DKV (h x (r_kv + d_rope)),
        W_UKV (r_kv x a(d_nope + d_v)), W_O (a d_v x h) and the two latent RMSNorms.
        """
        h, a = self.hidden_size, self.num_attention_heads
        if self.attention is AttentionKind.MLA:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (
                h * a * qk
                if self.q_lora_rank == 0
                else h * self.q_lora_rank + self.q_lora_rank * (1 + a * qk)
            )
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv += self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + a * self.v_head_dim * h + (h if self.linear_bias else 0)
        q_width = a * self.head_dim
        kv_width = self.num_key_value_heads * self.head_dim
        params = h * q_width + 2 * h * kv_width + q_width * h
        if self.linear_bias or self.qkv_bias:
            params += q_width + 2 * kv_width
        if self.linear_bias or self.attention_out_bias:
            params += h
        if self.qk_norm:
            params += 2 * self.head_dim
        if self.attention_sinks:
            params += a
        return params

    def mlp_parameters(self, ffn_hidden_size: int | None = None, *, expert: bool = False) -> int:
        """Parameters of one MLP (or, with ``expert``, one routed expert) of the given intermediate size (default:
        the dense one); an expert has biases with ``linear_bias`` or ``expert_bias``."""
        f = self.ffn_hidden_size if ffn_hidden_size is None else ffn_hidden_size
        h = self.hidden_size
        params = (3 if self.gated_mlp else 2) * h * f
        if self.linear_bias or (expert and self.expert_bias):
            params += (2 if self.gated_mlp else 1) * f + h
        return params

    def router_parameters(self) -> int:
        return self.hidden_size * self.num_experts + (self.num_experts if self.router_bias else 0)

    def layer_parameters(self, layer: int) -> int:
        """Parameters of block ``layer`` (0-based): attention, MLP or MoE, two norms (four with ``post_norms``)."""
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in 0..{self.num_layers - 1}, got {layer}")
        base = self.attention_parameters() + (4 if self.post_norms else 2) * self._norm_params()
        if not self.is_moe or layer < self.num_dense_layers:
            return base + self.mlp_parameters()
        routed = self.num_experts * self.mlp_parameters(self.moe_ffn_hidden_size, expert=True)
        shared = self.num_shared_experts * self.mlp_parameters(self.moe_ffn_hidden_size)
        return base + routed + shared + self.router_parameters()

    def active_layer_parameters(self, layer: int) -> int:
        """Parameters one token passes through in block ``layer``: top-k routed plus shared experts."""
        if not self.is_moe or layer < self.num_dense_layers:
            return self.layer_parameters(layer)
        expert = self.mlp_parameters(self.moe_ffn_hidden_size, expert=True)
        unused = (self.num_experts - self.experts_per_token) * expert
        return self.layer_parameters(layer) - unused

    def embedding_parameters(self) -> int:
        """Input embedding (V x h) plus learned positions; the LM head is counted by ``lm_head_parameters``."""
        return (self.vocab_size + self.num_learned_positions) * self.hidden_size

    def lm_head_parameters(self) -> int:
        """Untied output projection (h x V) plus the final norm; only the norm when tied."""
        head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return head + self._norm_params()

    def total_parameters(self) -> int:
        """Every parameter of the model (multi-token-prediction modules excluded)."""
        return (
            self._sum_layers(self.layer_parameters) + self.embedding_parameters() + self.lm_head_parameters()
        )

    def mtp_parameters(self) -> int:
        """Parameters of the multi-token-prediction modules (their embedding and head are the model's): per
        module a block like the last layer, the 2h x h projection and two RMSNorms (DeepSeek-V3: 14B for one
        module, the 685B - 671B of its checkpoint)."""
        h = self.hidden_size
        return self.num_mtp_layers * (self.layer_parameters(self.num_layers - 1) + 2 * h * h + 2 * h)

    def active_parameters(self) -> int:
        """Parameters used per token, embeddings included (the convention of Mixtral's '12.9B active')."""
        return (
            self._sum_layers(self.active_layer_parameters)
            + self.embedding_parameters()
            + self.lm_head_parameters()
        )

    def _sum_layers(self, per_layer: Callable[[int], int]) -> int:
        # Dense layers come first, then MoE layers; all layers of one kind have the same count.
        num_dense = self.num_layers - self.num_moe_layers
        total = num_dense * per_layer(0) if num_dense else 0
        return total + (self.num_moe_layers * per_layer(self.num_layers - 1) if self.num_moe_layers else 0)

    def non_embedding_active_parameters(self) -> int:
        """Active parameters that take part in matrix multiplies: all but the input embedding lookup."""
        return self.active_parameters() - self.embedding_parameters()

    # ---- FLOPs -------------------------------------------------------------------------------------
    def attention_flop_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token of the attention score and value products, causal mask not halved.

        PaLM (Chowdhery et al. 2022, arXiv:2204.02311) appendix B: 12 L H Q T for forward plus backward,
        with H heads of size Q and sequence T; here 6 L H T (d_qk + d_v) so MLA's unequal head dims count
        right (it equals 12 L H Q T when d_qk = d_v = Q).
        """
        check_positive_value("seq_len", seq_len)
        return (
            6.0
            * self.num_layers
            * self.num_attention_heads
            * seq_len
            * (self.qk_head_dim + self.value_head_dim)
        )

    def model_flop_per_token(self, seq_len: int) -> float:
        """Model FLOPs per trained token: 6 N + attention, PaLM appendix B (no recompute counted).

        N is ``non_embedding_active_parameters()`` (the LM head counts, the embedding lookup does not; MoE
        counts the top-k experts). Known error: ignores norms, softmax and the router's top-k, under 1%.
        """
        return 6.0 * self.non_embedding_active_parameters() + self.attention_flop_per_token(seq_len)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form: every field, enums as their strings."""
        from dataclasses import fields

        return {
            f.name: (str(v) if isinstance(v := getattr(self, f.name), StrEnum) else v) for f in fields(self)
        }


def check_positive_value(field: str, value: int | float) -> None:
    if value <= 0:
        raise ValueError(f"{field} must be > 0, got {value!r}")
