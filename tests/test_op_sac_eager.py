"""torchtitan's per-op selective activation checkpointing run eagerly (``training.compile`` off, the framework's
``unfused_model_ops``): what it keeps between the forward and the backward pass, measured with PyTorch's own
SAC machinery, against the model's reading (``activation_parts``: ``layer_input`` + ``op_sac_inside``).

The block is built as torchtitan @9dec370 builds a Llama layer (pytorch/torchtitan, the commit of the 2024-12
benchmarks): ``models/norms.py`` RMSNorm (``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)`` on
``x.float()``, ``.type_as(x) * weight``), ``models/llama/model.py`` ``apply_rotary_emb`` (``view_as_complex`` of
the fp32 q and k, a complex multiply, ``view_as_real``, ``type_as``), ``repeat_kv`` for GQA and
``F.scaled_dot_product_attention``; checkpointed as ``parallelisms/parallelize_llama.py``
``_apply_ac_to_transformer_block`` does with ``selective_ac_option = 'op'`` (``_save_list``: ``aten.mm`` and the
SDPA ops; every second ``mm`` recomputed). On the CPU the SDPA op is ``_scaled_dot_product_flash_attention_for_cpu``,
whose saved outputs (the 16-bit output and the fp32 log-sum-exp, per head and token) are those of the CUDA flash
op it stands for.

Measured: the eager chain of element-wise ops adds nothing to what SAC keeps (its outputs are PREFER_RECOMPUTE),
so the unfused ops need no memory term under op SAC; they only enlarge the one layer rebuilt during the backward
pass (every saved tensor of the eager layer), measured here too."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from workbench.cost.memory import activation_parts  # noqa: E402
from workbench.specs.model import ModelSpec  # noqa: E402

H, HEADS, KV_HEADS, FFN, BATCH, SEQ = 64, 8, 2, 160, 2, 32
HEAD_DIM = H // HEADS
TINY = ModelSpec(
    name="tiny-llama",
    num_layers=1,
    hidden_size=H,
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    head_dim=HEAD_DIM,
    ffn_hidden_size=FFN,
    vocab_size=256,
    gated_mlp=True,
    attention="gqa",
    norm="rmsnorm",
    linear_bias=False,
)


def _block() -> Any:
    nn, F = torch.nn, torch.nn.functional
    dt = torch.bfloat16

    class RMSNorm(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.eps = 1e-6
            self.weight = nn.Parameter(torch.ones(H, dtype=dt))

        def forward(self, x: Any) -> Any:
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight

    def rope(xq: Any, xk: Any, freqs_cis: Any) -> tuple[Any, Any]:
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
        q = torch.view_as_real(xq_ * fc).flatten(3).type_as(xq)
        return q, torch.view_as_real(xk_ * fc).flatten(3).type_as(xk)

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()

            def lin(i: int, o: int) -> Any:
                return nn.Linear(i, o, bias=False, dtype=dt)

            self.wq, self.wk = lin(H, HEADS * HEAD_DIM), lin(H, KV_HEADS * HEAD_DIM)
            self.wv, self.wo = lin(H, KV_HEADS * HEAD_DIM), lin(HEADS * HEAD_DIM, H)
            self.w1, self.w2, self.w3 = lin(H, FFN), lin(FFN, H), lin(H, FFN)
            self.attention_norm, self.ffn_norm = RMSNorm(), RMSNorm()

        def forward(self, x: Any, freqs_cis: Any) -> Any:
            y = self.attention_norm(x)
            q = self.wq(y).view(BATCH, SEQ, HEADS, HEAD_DIM)
            k = self.wk(y).view(BATCH, SEQ, KV_HEADS, HEAD_DIM)
            v = self.wv(y).view(BATCH, SEQ, KV_HEADS, HEAD_DIM)
            q, k = rope(q, k, freqs_cis)
            rep = HEADS // KV_HEADS  # repeat_kv: expand and reshape (a copy)
            k = (
                k[:, :, :, None]
                .expand(BATCH, SEQ, KV_HEADS, rep, HEAD_DIM)
                .reshape(BATCH, SEQ, HEADS, HEAD_DIM)
            )
            v = (
                v[:, :, :, None]
                .expand(BATCH, SEQ, KV_HEADS, rep, HEAD_DIM)
                .reshape(BATCH, SEQ, HEADS, HEAD_DIM)
            )
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            h = x + self.wo(o.transpose(1, 2).reshape(BATCH, SEQ, HEADS * HEAD_DIM))
            z = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(z)) * self.w3(z))

    return Block()


def _freqs_cis() -> Any:
    freqs = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    angles = torch.outer(torch.arange(SEQ).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def _unique_bytes(tensors: list[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one storage counted once)."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def _op_sac_cache_bytes(block: Any, x: Any, freqs_cis: Any) -> int:
    """Forward ``block`` under torchtitan's op-level SAC; the bytes of the op outputs SAC caches for the
    backward pass (torch.utils.checkpoint's selective-checkpoint storage)."""
    from torch.utils._pytree import tree_leaves
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save_list = {aten.mm.default, aten._scaled_dot_product_flash_attention_for_cpu.default}
    storages: list[Any] = []

    def context_fn() -> Any:
        meta: dict[str, int] = defaultdict(int)

        def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            mode = "recompute" if ctx.is_recompute else "forward"
            if func == aten.mm.default:
                meta[f"{mode}_mm_count"] += 1
            to_save = func in save_list and not (
                func == aten.mm.default and meta[f"{mode}_mm_count"] % 2 == 0
            )
            return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

        fwd, recompute = create_selective_checkpoint_contexts(policy)
        storages.append(fwd.storage)
        return fwd, recompute

    out = checkpoint(
        block, x, freqs_cis, use_reentrant=False, context_fn=context_fn, preserve_rng_state=False
    )
    cached = []
    for per_op in storages[0].values():
        for entry in per_op.values() if isinstance(per_op, dict) else per_op:
            for leaf in tree_leaves(entry):
                value = getattr(leaf, "val", leaf)  # torch's _VersionWrapper around a cached output
                if isinstance(value, torch.Tensor):
                    cached.append(value)
    out.sum().backward()  # the cached outputs serve the recompute
    assert x.grad is not None
    return _unique_bytes(cached)


def _eager_saved_bytes(block: Any, x: Any, freqs_cis: Any) -> int:
    """Bytes autograd saves for the backward pass of ``block`` run eagerly without checkpointing (what the
    backward pass rebuilds of a checkpointed layer), parameters and ``freqs_cis`` excluded."""
    saved: list[Any] = []

    def pack(t: Any) -> Any:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, freqs_cis)
    held = {p.untyped_storage().data_ptr() for p in block.parameters()} | {
        freqs_cis.untyped_storage().data_ptr()
    }
    return _unique_bytes([t for t in saved if t.untyped_storage().data_ptr() not in held])


def test_eager_op_sac_keeps_what_the_model_counts() -> None:
    torch.manual_seed(0)
    block, freqs_cis = _block(), _freqs_cis()
    x = torch.randn(BATCH, SEQ, H, dtype=torch.bfloat16, requires_grad=True)
    tokens = BATCH * SEQ
    parts = activation_parts(TINY, flash=True, dropout=False)
    measured = _op_sac_cache_bytes(block, x, freqs_cis) / tokens
    # wq, wv, w1, w2 outputs (16-bit), the attention output (16-bit) and its log-sum-exp (fp32) per head
    by_hand = 2 * (HEADS * HEAD_DIM + KV_HEADS * HEAD_DIM + FFN + H) + 2 * HEADS * HEAD_DIM + 4 * HEADS
    assert measured == by_hand == parts.op_sac_inside
    assert parts.layer_input == 2 * H  # the checkpoint's saved block input, bf16
    # the eager layer rebuilt in the backward keeps several times more (fp32 norm chain, complex RoPE, MLP)
    eager = _eager_saved_bytes(block, x.detach().requires_grad_(), freqs_cis) / tokens
    assert eager > 3 * (parts.op_sac_inside + parts.layer_input)
