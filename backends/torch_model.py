"""Real torch modules built from a ``ModelSpec`` at one rank's shard shape (random weights, nothing downloaded).

Stable API (the torch-profile backend and the real-run backend both import it):

- ``torch_dtype(dtype) -> torch.dtype``: ``DType``/str ``bf16|fp16|fp32`` to torch (fp8: ValueError).
- ``ShardShape.of(spec, tp=1, cp=1, ep=1)``: per-rank sizes (query/kv heads, FFN, experts, vocab).
- ``RMSNorm(dim)``, ``Attention(spec, tp=1)``, ``MLP(spec, ffn_hidden_size, tp=1)``, ``MoE(spec, tp=1, ep=1)``.
- ``DecoderLayer(spec, tp=1, ep=1, moe=None, dtype=torch.float32, device="cpu")``: ``forward(x) -> x`` with
  ``x`` of shape [batch, seq, hidden]; ``moe=None`` means "MoE iff the spec is MoE".
- ``Embedding(spec, tp=1)``: ``forward(tokens [b, s] int64) -> [b, s, hidden]``.
- ``LMHead(spec, tp=1)``: final norm + vocab projection, ``forward(x) -> logits [b, s, vocab/tp]``.
- ``loss_fn(logits, targets) -> scalar``: mean next-token cross-entropy (targets [b, s] int64).
- ``build_layers(spec, *, first_layer=0, num_layers=None, tp=1, ep=1, dtype, device) -> nn.ModuleList``:
  blocks ``first_layer .. first_layer+num_layers-1`` (dense for ``layer < spec.num_dense_layers``).
- ``TinyLlama(spec, *, num_layers=None, tp=1, ep=1, dtype, device)`` and ``build_model(spec, num_layers=None,
  *, tp=1, ep=1, dtype=torch.float32, device="cpu", seed=0)``: embedding, blocks, head;
  ``forward(tokens) -> logits``; ``model.loss(tokens)`` is the next-token loss of a batch.
- ``random_tokens(spec, batch_size, seq_len, seed=0) -> LongTensor [b, s]``.

Shard rules (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053, section 3): query heads, FFN width and the
vocabulary are divided by tp (vocabulary padded up); key/value heads are divided by tp when tp divides them,
otherwise each rank keeps one (replicated) head. Context parallelism is applied by the caller passing
seq_len / cp tokens. Expert parallelism keeps ``num_experts / ep`` experts; a single process stands in for
the all-to-all by mapping every routed expert index onto a local expert (index mod local count), so the
local experts see the k * tokens rows a balanced ep rank receives (Lepikhin et al. 2020, GShard,
arXiv:2006.16668, section 2.2). Multi-head latent attention (MLA) is not built: ValueError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workbench.specs.hardware import DType
from workbench.specs.model import AttentionKind, ModelSpec, NormKind

ROPE_THETA = 500_000.0
"""Rotary base of Llama 3 (Dubey et al. 2024, arXiv:2407.21783, section 3.1.1); cost does not depend on it."""

_TORCH_DTYPES = {DType.BF16: torch.bfloat16, DType.FP16: torch.float16, DType.FP32: torch.float32}


def torch_dtype(dtype: DType | str | torch.dtype) -> torch.dtype:
    """Torch dtype for a workbench ``DType`` (or its string); ValueError for fp8 or an unknown name."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _TORCH_DTYPES[DType(dtype)]
    except (KeyError, ValueError):
        raise ValueError(f"dtype must be one of bf16, fp16, fp32 for torch modules, got {dtype!r}") from None


def _divide(total: int, parts: int, what: str) -> int:
    if total % parts:
        raise ValueError(f"{what}={total} is not divisible by the parallel degree {parts}")
    return total // parts


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardShape:
    """Sizes one rank holds for a block of ``spec`` under tensor/expert parallelism."""

    num_q_heads: int
    """Query heads per rank: a / tp."""
    num_kv_heads: int
    """Key/value heads per rank: g / tp, or 1 (replicated) when tp > g."""
    ffn_hidden_size: int
    """Dense MLP width per rank: f / tp (0 for a model without dense MLP)."""
    moe_ffn_hidden_size: int
    """One expert's width per rank: f_moe / tp."""
    num_local_experts: int
    """Routed experts per rank: E / ep."""
    vocab_size: int
    """Vocabulary rows per rank: ceil(V / tp)."""

    @classmethod
    def of(cls, spec: ModelSpec, *, tp: int = 1, ep: int = 1) -> ShardShape:
        """Shard shape; ValueError when a degree does not divide the size it splits, or for MLA."""
        if spec.attention is AttentionKind.MLA:
            raise ValueError(
                f"model {spec.name!r}: attention='mla' is not supported by the torch modules; "
                "allowed: mha, gqa"
            )
        if tp < 1 or ep < 1:
            raise ValueError(f"tp and ep must be >= 1, got tp={tp}, ep={ep}")
        g = spec.num_key_value_heads
        if g % tp and tp % g:
            raise ValueError(f"num_key_value_heads={g} and tp={tp}: one must divide the other")
        return cls(
            num_q_heads=_divide(spec.num_attention_heads, tp, "num_attention_heads"),
            num_kv_heads=g // tp if g % tp == 0 else 1,
            ffn_hidden_size=_divide(spec.ffn_hidden_size, tp, "ffn_hidden_size"),
            moe_ffn_hidden_size=_divide(spec.moe_ffn_hidden_size, tp, "moe_ffn_hidden_size"),
            num_local_experts=_divide(spec.num_experts, ep, "num_experts") if spec.is_moe else 0,
            vocab_size=math.ceil(spec.vocab_size / tp),
        )


class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019, arXiv:1910.07467, eq. 4), one weight vector."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * scale).type_as(x) * self.weight


def make_norm(spec: ModelSpec, dim: int) -> nn.Module:
    return RMSNorm(dim) if spec.norm is NormKind.RMSNORM else nn.LayerNorm(dim)


def rotary_tables(
    seq_len: int, head_dim: int, *, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, ...]:
    """cos and sin tables [seq, head_dim/2] of rotary embeddings (Su et al. 2021, arXiv:2104.09864, eq. 34)."""
    inv_freq = ROPE_THETA ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (first half, second half) of the last dim of x [b, heads, s, d] by the tables."""
    x1, x2 = x.float().chunk(2, dim=-1)
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.type_as(x)


class Attention(nn.Module):
    """Causal self-attention with rotary embeddings and grouped-query heads, one tp shard.

    GQA: Ainslie et al. 2023 (arXiv:2305.13245); the core is ``F.scaled_dot_product_attention``.
    """

    def __init__(self, spec: ModelSpec, *, tp: int = 1) -> None:
        super().__init__()
        shard = ShardShape.of(spec, tp=tp)
        self.num_q_heads, self.num_kv_heads, self.head_dim = (
            shard.num_q_heads,
            shard.num_kv_heads,
            spec.head_dim,
        )
        h, d = spec.hidden_size, spec.head_dim
        qkv_bias = spec.qkv_bias or spec.linear_bias
        self.q_proj = nn.Linear(h, self.num_q_heads * d, bias=qkv_bias)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=qkv_bias)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_q_heads * d, h, bias=spec.linear_bias)
        self.q_norm = RMSNorm(d) if spec.qk_norm else None
        self.k_norm = RMSNorm(d) if spec.qk_norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.num_q_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rotary_tables(s, self.head_dim, device=x.device)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.num_q_heads != self.num_kv_heads
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.num_q_heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU (Shazeer 2020, arXiv:2002.05202, eq. 6) when ``spec.gated_mlp``, else up-GELU-down."""

    def __init__(self, spec: ModelSpec, ffn_hidden_size: int, *, tp: int = 1) -> None:
        super().__init__()
        f, h, bias = _divide(ffn_hidden_size, tp, "ffn_hidden_size"), spec.hidden_size, spec.linear_bias
        self.gate_proj = nn.Linear(h, f, bias=bias) if spec.gated_mlp else None
        self.up_proj = nn.Linear(h, f, bias=bias)
        self.down_proj = nn.Linear(f, h, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_proj is not None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x)))


class MoE(nn.Module):
    """Top-k routed experts plus shared experts (Shazeer et al. 2017; DeepSeekMoE, arXiv:2401.06066 eq. 3-5).

    The router is replicated (scores over all E experts); routed rows are grouped per local expert with a
    sort, run through each expert and scattered back weighted by their softmax gate.
    """

    def __init__(self, spec: ModelSpec, *, tp: int = 1, ep: int = 1) -> None:
        super().__init__()
        shard = ShardShape.of(spec, tp=tp, ep=ep)
        self.top_k, self.num_local = spec.experts_per_token, shard.num_local_experts
        self.router = nn.Linear(spec.hidden_size, spec.num_experts, bias=False)
        self.experts = nn.ModuleList(
            MLP(spec, spec.moe_ffn_hidden_size, tp=tp) for _ in range(self.num_local)
        )
        shared = spec.num_shared_experts * spec.moe_ffn_hidden_size
        self.shared = MLP(spec, shared, tp=tp) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        gates, chosen = torch.topk(self.router(rows).float().softmax(-1), self.top_k, dim=-1)
        gates = (gates / gates.sum(-1, keepdim=True)).type_as(x)
        local = (chosen % self.num_local).flatten()
        order = torch.argsort(local, stable=True)
        token_of = order // self.top_k
        counts = torch.bincount(local, minlength=self.num_local).tolist()
        picked = rows[token_of]
        outs = [expert(part) for expert, part in zip(self.experts, picked.split(counts), strict=True)]
        weighted = torch.cat(outs) * gates.flatten()[order].unsqueeze(-1)
        out = torch.zeros_like(rows).index_add(0, token_of, weighted)
        if self.shared is not None:
            out = out + self.shared(rows)
        return out.view(shape)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then + mlp_or_moe(norm(x)). ``forward(x [b, s, h]) -> [b, s, h]``."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        tp: int = 1,
        ep: int = 1,
        moe: bool | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        use_moe = spec.is_moe if moe is None else moe
        if use_moe and not spec.is_moe:
            raise ValueError(f"model {spec.name!r} has no experts; moe=True needs num_experts > 0")
        self.input_norm = make_norm(spec, spec.hidden_size)
        self.attention = Attention(spec, tp=tp)
        self.post_attention_norm = make_norm(spec, spec.hidden_size)
        self.mlp: nn.Module = MoE(spec, tp=tp, ep=ep) if use_moe else MLP(spec, spec.ffn_hidden_size, tp=tp)
        self.to(device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.input_norm(x))
        return x + self.mlp(self.post_attention_norm(x))


class Embedding(nn.Module):
    """Token embedding, vocabulary split over tp (Megatron's vocab-parallel embedding), plus learned positions."""

    def __init__(self, spec: ModelSpec, *, tp: int = 1) -> None:
        super().__init__()
        self.vocab_size = ShardShape.of(spec, tp=tp).vocab_size
        self.tokens = nn.Embedding(self.vocab_size, spec.hidden_size)
        n_pos = spec.num_learned_positions
        self.positions = nn.Embedding(n_pos, spec.hidden_size) if n_pos else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tokens(tokens % self.vocab_size)
        if self.positions is not None:
            x = x + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        return x


class LMHead(nn.Module):
    """Final norm and the output projection to this rank's vocabulary shard: logits [b, s, ceil(V/tp)]."""

    def __init__(self, spec: ModelSpec, *, tp: int = 1) -> None:
        super().__init__()
        self.norm = make_norm(spec, spec.hidden_size)
        self.proj = nn.Linear(spec.hidden_size, ShardShape.of(spec, tp=tp).vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x))


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits [b, s, V] against targets [b, s] (targets taken modulo V), in fp32."""
    vocab = logits.shape[-1]
    return F.cross_entropy(logits.float().reshape(-1, vocab), (targets % vocab).reshape(-1))


def build_layers(
    spec: ModelSpec,
    *,
    first_layer: int = 0,
    num_layers: int | None = None,
    tp: int = 1,
    ep: int = 1,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> nn.ModuleList:
    """Blocks ``first_layer`` .. ``first_layer + num_layers - 1`` of ``spec`` (default: to the last block)."""
    count = spec.num_layers - first_layer if num_layers is None else num_layers
    if first_layer < 0 or count < 1 or first_layer + count > spec.num_layers:
        raise ValueError(
            f"layers {first_layer}..{first_layer + count - 1} are outside 0..{spec.num_layers - 1}"
        )
    return nn.ModuleList(
        DecoderLayer(
            spec, tp=tp, ep=ep, moe=spec.is_moe and i >= spec.num_dense_layers, dtype=dtype, device=device
        )
        for i in range(first_layer, first_layer + count)
    )


class TinyLlama(nn.Module):
    """A whole (possibly shortened) model: embedding, ``num_layers`` blocks, head. forward(tokens) -> logits."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        num_layers: int | None = None,
        tp: int = 1,
        ep: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        self.spec = spec
        self.embedding = Embedding(spec, tp=tp)
        self.layers = build_layers(spec, num_layers=num_layers or spec.num_layers, tp=tp, ep=ep)
        self.head = LMHead(spec, tp=tp)
        self.to(device=device, dtype=dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token loss: predict tokens[:, 1:] from tokens[:, :-1]."""
        return loss_fn(self(tokens[:, :-1]), tokens[:, 1:])


def build_model(
    spec: ModelSpec,
    num_layers: int | None = None,
    *,
    tp: int = 1,
    ep: int = 1,
    dtype: torch.dtype | DType | str = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> TinyLlama:
    """``TinyLlama`` with weights drawn from ``torch.manual_seed(seed)`` (same seed, same weights)."""
    torch.manual_seed(seed)
    return TinyLlama(spec, num_layers=num_layers, tp=tp, ep=ep, dtype=torch_dtype(dtype), device=device)


def random_tokens(
    spec: ModelSpec, batch_size: int, seq_len: int, *, seed: int = 0, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Uniform random token ids [batch_size, seq_len] (int64) from a private generator."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, spec.vocab_size, (batch_size, seq_len), generator=gen).to(device)
