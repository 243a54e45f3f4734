"""workbench_backends.torch_model: shard shapes, parameter counts against ModelSpec, reference maths."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from workbench_backends.torch_model import (  # noqa: E402
    MLP,
    Attention,
    DecoderLayer,
    MoE,
    RMSNorm,
    ShardShape,
    build_layers,
    build_model,
    random_tokens,
)

from workbench.presets.catalog import load_model  # noqa: E402

torch.set_num_threads(1)


def _small(name: str, **kw: int):
    base = load_model(name)
    sizes = dict(
        num_layers=2,
        hidden_size=128,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
    )
    sizes["ffn_hidden_size"] = 256 if base.ffn_hidden_size else 0
    if base.is_moe:
        sizes["moe_ffn_hidden_size"] = 64
    return replace(base, name=f"{name}-small", **{**sizes, **kw})


@pytest.mark.parametrize("name", ["llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen2.5-72b"])
def test_parameter_count_matches_modelspec(name: str) -> None:
    spec = _small(name)
    model = build_model(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.total_parameters()


def test_tensor_parallel_shard_divides_projections() -> None:
    spec = _small("llama-3.1-8b")
    full = sum(p.numel() for p in DecoderLayer(spec).mlp.parameters())
    half = sum(p.numel() for p in DecoderLayer(spec, tp=2).mlp.parameters())
    assert half * 2 == full  # 3 h f / 2 per rank, Megatron column/row split
    shard = ShardShape.of(spec, tp=4)
    assert (shard.num_q_heads, shard.num_kv_heads, shard.ffn_hidden_size) == (2, 1, 64)
    assert ShardShape.of(spec, tp=8).num_kv_heads == 1  # replicated kv head when tp > g


def test_bad_shard_raises() -> None:
    spec = _small("llama-3.1-8b")
    with pytest.raises(ValueError, match="tp=3"):
        ShardShape.of(spec, tp=3)
    with pytest.raises(ValueError, match="mla"):
        ShardShape.of(load_model("deepseek-v3"))


def test_rmsnorm_matches_formula() -> None:
    x = torch.randn(3, 8)
    expected = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(RMSNorm(8)(x), expected)


def test_attention_matches_explicit_softmax_reference() -> None:
    spec = _small("llama-3.1-8b")
    attn = Attention(spec)
    x = torch.randn(2, 10, 128)
    b, s, d = 2, 10, 16
    q = attn.q_proj(x).view(b, s, 8, d).transpose(1, 2)
    k = attn.k_proj(x).view(b, s, 2, d).transpose(1, 2).repeat_interleave(4, dim=1)
    v = attn.v_proj(x).view(b, s, 2, d).transpose(1, 2).repeat_interleave(4, dim=1)
    from workbench_backends.torch_model import apply_rotary, rotary_tables

    cos, sin = rotary_tables(s, d)
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    scores = q @ k.transpose(-1, -2) / d**0.5
    scores = scores.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1), float("-inf"))
    ref = attn.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, 8 * d))
    torch.testing.assert_close(attn(x), ref, atol=1e-5, rtol=1e-4)


def test_moe_with_one_expert_equals_dense_mlp() -> None:
    spec = replace(_small("mixtral-8x7b"), num_experts=1, experts_per_token=1)
    moe = MoE(spec)
    x = torch.randn(2, 5, 128)
    torch.testing.assert_close(moe(x), moe.experts[0](x), atol=1e-6, rtol=1e-5)
    assert isinstance(moe.experts[0], MLP)


def test_moe_expert_parallel_keeps_local_experts() -> None:
    spec = _small("mixtral-8x7b")
    assert len(MoE(spec, ep=4).experts) == 2
    assert DecoderLayer(spec, ep=2)(torch.randn(1, 4, 128)).shape == (1, 4, 128)


def test_build_layers_and_training_step() -> None:
    spec = _small("llama-3.1-8b")
    assert len(build_layers(spec, first_layer=1)) == 1
    with pytest.raises(ValueError, match="outside"):
        build_layers(spec, first_layer=1, num_layers=2)
    model = build_model(spec, seed=3)
    tokens = random_tokens(spec, 2, 9)
    loss = model.loss(tokens)
    loss.backward()
    assert abs(loss.item() - torch.log(torch.tensor(512.0)).item()) < 1.0  # random weights: ~ln V
    same = build_model(spec, seed=3)
    assert torch.equal(same.head.proj.weight, model.head.proj.weight)
