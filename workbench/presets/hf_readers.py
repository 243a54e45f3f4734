"""One reader per Hugging Face architecture: ``config.json`` fields -> :class:`ModelSpec`.

Field names and defaults follow the transformers configuration class of each architecture (LlamaConfig,
MistralConfig, MixtralConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig, Phi3Config, Gemma2Config, Gemma3Config,
Llama4Config, DeepseekV2Config, DeepseekV3Config, Glm4MoeConfig, GptOssConfig, GPT2Config, GPTNeoXConfig; read
in transformers 5.25); the ``[hf]`` oracle test (``tests/test_hf_oracle.py``) checks every count against the
model transformers builds on the meta device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workbench.presets.hf_fields import (
    CHUNKED,
    FULL,
    LINEAR,
    SLIDING,
    ConfigReader,
    rope_scaling,
    window_fields,
)
from workbench.presets.hf_vision import llama4_vision_parameters, siglip_gemma3_parameters
from workbench.specs.limits import shown
from workbench.specs.model import AttentionKind, ModelSpec, NormKind

Reader = Callable[[ConfigReader, str], ModelSpec]


def _attention_kind(heads: int, kv_heads: int) -> AttentionKind:
    return AttentionKind.MHA if heads == kv_heads else AttentionKind.GQA


def _heads(r: ConfigReader, *, head_dim_default: int | None = None) -> dict[str, Any]:
    """Width, heads, key/value heads and head size, checked: key/value heads divide the heads, and without a
    ``head_dim`` field the heads divide the width (transformers then takes hidden_size // heads)."""
    h, heads = r.int("hidden_size"), r.int("num_attention_heads")
    kv = r.int("num_key_value_heads", default=heads)
    if heads % kv:
        raise ValueError(
            f"{r.origin}: field 'num_key_value_heads' is {kv}; it must divide num_attention_heads = {heads}"
        )
    if r.cfg.get("head_dim") is None and head_dim_default is None and h % heads:
        raise ValueError(
            f"{r.origin}: field 'num_attention_heads' is {heads}; without a 'head_dim' field it must divide "
            f"hidden_size = {h}"
        )
    head_dim = r.int("head_dim", default=head_dim_default or h // heads)
    return {
        "hidden_size": h,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "attention": _attention_kind(heads, kv),
    }


def _experts(
    r: ConfigReader, count_key: str, default_count: int | None = None, default_top_k: int | None = None
) -> dict[str, Any]:
    """``num_experts`` from ``count_key`` and the top-k from ``num_experts_per_tok``, checked: top-k <= experts."""
    count = r.int(count_key, default=default_count)
    top_k = r.int("num_experts_per_tok", default=default_top_k)
    if top_k > count:
        raise ValueError(
            f"{r.origin}: field 'num_experts_per_tok' is {top_k}; it must be at most {count_key} = {count}"
        )
    return {"num_experts": count, "experts_per_token": top_k}


def _refuse_linear(r: ConfigReader, types: list[str] | None, module: str) -> None:
    if types and LINEAR in types:
        layer = types.index(LINEAR)
        raise ValueError(
            f"{r.origin}: field 'layer_types'[{layer}] is {LINEAR!r} ({module}): linear-attention layers cannot "
            f"be priced yet (their recurrent state and chunked scan have no cost model here); {types.count(LINEAR)} "
            f"of {len(types)} layers are linear"
        )


def _llama_like(r: ConfigReader, name: str, types: list[str] | None = None, **extra: Any) -> ModelSpec:
    layers = r.int("num_hidden_layers")
    types = types if types is not None else r.layer_types(layers)
    _refuse_linear(r, types, "a linear-attention block")
    fields: dict[str, Any] = {
        "name": name,
        "num_layers": layers,
        **_heads(r),
        "ffn_hidden_size": r.int("intermediate_size"),
        "vocab_size": r.int("vocab_size"),
        "gated_mlp": True,
        **window_fields(r, layers, types),
        **rope_scaling(r),
    }
    if "tied_embeddings" not in extra:
        fields["tied_embeddings"] = r.bool("tie_word_embeddings", False)
    return ModelSpec(**(fields | extra))


def _llama(r: ConfigReader, name: str) -> ModelSpec:
    return _llama_like(r, name, qkv_bias=r.bool("attention_bias", False))


def _qwen2(r: ConfigReader, name: str) -> ModelSpec:
    return _llama_like(r, name, qkv_bias=True)


def _qwen3(r: ConfigReader, name: str) -> ModelSpec:
    """Qwen3 dense: per-head RMSNorm of queries and keys, ``head_dim`` apart from hidden/heads."""
    return _llama_like(r, name, qk_norm=True, qkv_bias=r.bool("attention_bias", False))


def _phi3(r: ConfigReader, name: str) -> ModelSpec:
    """Phi-3 / Phi-4: ``qkv_proj`` and ``gate_up_proj`` are fused, the same weights and FLOPs as separate
    projections (transformers' Phi3Attention and Phi3MLP). LongRoPE (``rope_scaling.type = longrope``) rescales
    the rotary frequencies, no weights. ``sliding_window`` applies to every layer (transformers' Phi3Model
    builds a sliding-window mask whenever it is set)."""
    r.note("qkv_proj and gate_up_proj fused: counted and priced as the separate GEMMs (same FLOPs)")
    if r.number("partial_rotary_factor", 1.0) != 1.0:
        r.note(
            f"partial_rotary_factor {r.number('partial_rotary_factor')}: RoPE on part of each head (no cost)"
        )
    return _llama_like(r, name, qkv_bias=r.bool("attention_bias", False))


def _mixtral(r: ConfigReader, name: str) -> ModelSpec:
    return _llama_like(
        r,
        name,
        **_experts(r, "num_local_experts"),
        moe_ffn_hidden_size=r.int("intermediate_size"),
    )


def _qwen3_moe(r: ConfigReader, name: str) -> ModelSpec:
    if r.cfg.get("mlp_only_layers") or r.int("decoder_sparse_step", default=1) != 1:
        raise ValueError(
            f"{r.origin}: mlp_only_layers / decoder_sparse_step != 1 (interleaved dense layers) "
            "are not supported; every layer must be MoE"
        )
    return _llama_like(
        r,
        name,
        **_experts(r, "num_experts"),
        moe_ffn_hidden_size=r.int("moe_intermediate_size"),
        qk_norm=True,
        qkv_bias=r.bool("attention_bias", False),
    )


def _qwen3_next(r: ConfigReader, name: str) -> ModelSpec:
    """Qwen3-Next: Gated DeltaNet linear attention on three layers of four (``layer_types``, or every
    ``full_attention_interval``-th layer full): refused by name until linear attention has a cost model."""
    layers = r.int("num_hidden_layers")
    types = r.layer_types(layers)
    if types is None:
        every = r.int("full_attention_interval", default=4)
        types = [FULL if (i + 1) % every == 0 else LINEAR for i in range(layers)]
    _refuse_linear(r, types, "Qwen3NextGatedDeltaNet")
    return _qwen3_moe(r, name)


def _gpt_oss(r: ConfigReader, name: str) -> ModelSpec:
    """GPT-OSS: top-k MoE in every layer (``num_local_experts``, experts of ``intermediate_size``), biased
    q/k/v/o projections, a biased router, biased experts (transformers' GptOssExperts always has them), the
    experts' GLU clamped at ``swiglu_limit``, one attention-sink logit per head, banded attention on the
    ``layer_types`` marked ``sliding_attention``, YaRN-scaled RoPE."""
    bias = r.bool("attention_bias", False)
    return _llama_like(
        r,
        name,
        **_experts(r, "num_local_experts"),
        moe_ffn_hidden_size=r.int("intermediate_size"),
        qkv_bias=bias,
        attention_out_bias=bias,
        attention_sinks=True,
        router_bias=True,
        expert_bias=True,
        glu_clamp=r.number("swiglu_limit"),
    )


def _gemma(r: ConfigReader, name: str, types: list[str], **extra: Any) -> ModelSpec:
    r.note("embeddings scaled by sqrt(hidden_size) (no weights); RMSNorm weights stored as (1 + w)")
    return _llama_like(
        r,
        name,
        types,
        tied_embeddings=r.bool("tie_word_embeddings", True),
        qkv_bias=r.bool("attention_bias", False),
        post_norms=True,
        final_logit_softcap=r.number("final_logit_softcapping"),
        attention_logit_softcap=r.number("attn_logit_softcapping"),
        **extra,
    )


def _gemma_types(r: ConfigReader, every: int) -> list[str]:
    """``layer_types``, else transformers' default: every ``every``-th layer global, the others local."""
    layers = r.int("num_hidden_layers")
    types = r.layer_types(layers)
    if types is None:
        types = [SLIDING if (i + 1) % every else FULL for i in range(layers)]
        r.note(f"layer_types: not in the file; one global layer in every {every} (transformers' default)")
    return types


def _gemma2(r: ConfigReader, name: str) -> ModelSpec:
    """Gemma 2: local (sliding) and global layers alternating, four norms per block, soft-capped attention
    scores and logits, tied embeddings scaled by sqrt(h)."""
    return _gemma(r, name, _gemma_types(r, 2))


def _gemma3_text(r: ConfigReader, name: str) -> ModelSpec:
    """Gemma 3 text: five local layers to one global (``sliding_window_pattern``, default 6), q/k RMSNorms,
    four norms per block, the 262K vocabulary; the global layers' RoPE base and scaling differ (no cost)."""
    return _gemma(r, name, _gemma_types(r, r.int("sliding_window_pattern", default=6)), qk_norm=True)


def _text_config(r: ConfigReader, what: str) -> ConfigReader:
    """The ``text_config`` of a multimodal config (its vision tower is counted by the caller); the top level's
    ``tie_word_embeddings`` applies when the text config has none."""
    sub = r.cfg.get("text_config")
    if not isinstance(sub, dict):
        raise ValueError(f"{r.origin}: field 'text_config' must be an object ({what}), got {shown(sub)}")
    cfg = dict(sub)
    if "tie_word_embeddings" not in cfg and "tie_word_embeddings" in r.cfg:
        cfg["tie_word_embeddings"] = r.cfg["tie_word_embeddings"]
    text = ConfigReader(cfg, f"{r.origin} text_config")
    text.notes = r.notes
    return text


def _gemma3(r: ConfigReader, name: str) -> ModelSpec:
    """Gemma 3 multimodal: the text model of ``text_config``; the SigLIP tower is counted apart."""
    text = _text_config(r, "Gemma 3")
    spec = _gemma3_text(text, name)
    r.encoder_parameters = siglip_gemma3_parameters(r, spec.hidden_size)
    return spec


def _llama4(r: ConfigReader, name: str) -> ModelSpec:
    """Llama 4: MoE (top-k routed plus one shared expert of ``intermediate_size``) in the layers of
    ``moe_layers`` or every ``interleave_moe_layer_step``-th one, dense MLPs of ``intermediate_size_mlp``
    elsewhere; chunked local attention (``attention_chunk_size``) on the RoPE layers and global attention on
    the NoPE ones (``no_rope_layers`` 0; default every 4th); queries and keys L2-normalised (no weights)."""
    t = _text_config(r, "Llama 4") if "text_config" in r.cfg else r
    layers = t.int("num_hidden_layers")
    rope = t.int_list("no_rope_layers", layers, allowed=(0, 1))
    if rope is None:
        every = t.int("no_rope_layer_interval", default=4)
        rope = [int((i + 1) % every != 0) for i in range(layers)]
    types = t.layer_types(layers)
    if types is None:
        chunked = t.cfg.get("attention_chunk_size", 8192) is not None
        types = [CHUNKED if use and chunked else FULL for use in rope]
        if "attention_chunk_size" not in t.cfg:
            t.cfg = {**t.cfg, "attention_chunk_size": 8192}
            t.note("attention_chunk_size: not in the file, default 8192")
    t.note(f"{rope.count(0)} NoPE layers (no rotary embedding; global attention)")
    moe = _llama4_moe_layers(t, layers)
    ffn = t.int("intermediate_size_mlp", default=16384)
    spec = _llama_like(
        t,
        name,
        types,
        ffn_hidden_size=ffn,
        **_experts(t, "num_local_experts", default_count=16, default_top_k=1),
        moe_ffn_hidden_size=t.int("intermediate_size"),
        num_shared_experts=1,
        num_dense_layers=layers - len(moe),
        qkv_bias=t.bool("attention_bias", False),
    )
    if "vision_config" in r.cfg:
        r.encoder_parameters = llama4_vision_parameters(r, spec.hidden_size)
    return spec


def _llama4_moe_layers(t: ConfigReader, layers: int) -> list[int]:
    listed = t.int_list("moe_layers", 0)
    if listed is not None:
        bad = [i for i in listed if not 0 <= i < layers]
        if bad:
            raise ValueError(f"{t.origin}: field 'moe_layers' holds {bad[0]}; allowed: 0..{layers - 1}")
        moe = sorted(set(listed))
    else:
        step = t.int("interleave_moe_layer_step", default=1)
        moe = list(range(step - 1, layers, step))
    if moe and moe != list(range(layers - len(moe), layers)):
        t.note(
            f"MoE in {len(moe)} interleaved layers: counted exactly; the planner places the "
            f"{layers - len(moe)} dense layers first when it splits pipeline stages"
        )
    return moe


def _mla_moe(r: ConfigReader, name: str, *, router_bias: bool) -> ModelSpec:
    """DeepSeek-V2/V3 mould: multi-head latent attention, DeepSeekMoE (shared plus routed experts), the
    first ``first_k_dense_replace`` layers dense, then MoE every ``moe_layer_freq``-th layer (DeepSeek's own
    modelling code; transformers makes every later layer MoE, the same for the published configs, all 1)."""
    heads = r.int("num_attention_heads")
    layers = r.int("num_hidden_layers")
    first = r.int("first_k_dense_replace", default=0)
    freq = r.int("moe_layer_freq", default=1)
    moe = [i for i in range(first, layers) if i % freq == 0]
    if freq != 1:
        r.note(f"moe_layer_freq {freq}: {len(moe)} MoE layers counted exactly; dense layers placed first")
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=r.int("hidden_size"),
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=r.int("v_head_dim"),
        ffn_hidden_size=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        gated_mlp=True,
        tied_embeddings=r.bool("tie_word_embeddings", False),
        attention=AttentionKind.MLA,
        **_experts(r, "n_routed_experts"),
        moe_ffn_hidden_size=r.int("moe_intermediate_size"),
        num_shared_experts=r.int("n_shared_experts", default=0),
        num_dense_layers=layers - len(moe),
        num_expert_groups=r.int("n_group", default=0),
        routed_groups_per_token=r.int("topk_group", default=0),
        router_bias=router_bias,
        num_mtp_layers=r.int("num_nextn_predict_layers", default=0) if router_bias else 0,
        **rope_scaling(r),
        q_lora_rank=r.int("q_lora_rank", default=0),
        kv_lora_rank=r.int("kv_lora_rank"),
        qk_nope_head_dim=r.int("qk_nope_head_dim"),
        qk_rope_head_dim=r.int("qk_rope_head_dim"),
        v_head_dim=r.int("v_head_dim"),
    )


def _deepseek_v2(r: ConfigReader, name: str) -> ModelSpec:
    """DeepSeek-V2 / V2-Lite (arXiv:2405.04434): MLA with (V2) or without (V2-Lite, ``q_lora_rank`` null) a
    compressed query; softmax router without a bias."""
    return _mla_moe(r, name, router_bias=False)


def _deepseek_v3(r: ConfigReader, name: str) -> ModelSpec:
    """DeepSeek-V3 and its mould (Kimi K2): sigmoid router with a score-correction bias, multi-token
    prediction modules (not counted in the total)."""
    return _mla_moe(r, name, router_bias=True)


def _glm4_moe(r: ConfigReader, name: str) -> ModelSpec:
    """GLM-4.5 / 4.6 (DeepSeek-V3-style MoE on GQA attention): biased q/k/v, optional q/k RMSNorm
    (``use_qk_norm``), dense first ``first_k_dense_replace`` layers, shared plus routed experts, a sigmoid
    router with a score-correction bias, RoPE on ``partial_rotary_factor`` of each head (no cost), MTP layers
    (``num_nextn_predict_layers``; not counted in the total, as DeepSeek-V3's)."""
    layers = r.int("num_hidden_layers")
    return _llama_like(
        r,
        name,
        **_experts(r, "n_routed_experts"),
        moe_ffn_hidden_size=r.int("moe_intermediate_size"),
        num_shared_experts=r.int("n_shared_experts", default=0),
        num_dense_layers=min(r.int("first_k_dense_replace", default=0), layers - 1),
        num_expert_groups=r.int("n_group", default=0),
        routed_groups_per_token=r.int("topk_group", default=0),
        router_bias=True,
        num_mtp_layers=r.int("num_nextn_predict_layers", default=0),
        qkv_bias=r.bool("attention_bias", False),
        qk_norm=r.bool("use_qk_norm", False),
    )


def _gpt2(r: ConfigReader, name: str) -> ModelSpec:
    h = r.int("n_embd")
    heads = r.int("n_head")
    return ModelSpec(
        name=name,
        num_layers=r.int("n_layer"),
        hidden_size=h,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=h // heads,
        ffn_hidden_size=r.int("n_inner", default=4 * h),
        vocab_size=r.int("vocab_size"),
        gated_mlp=False,
        tied_embeddings=r.bool("tie_word_embeddings", True),
        attention=AttentionKind.MHA,
        norm=NormKind.LAYERNORM,
        linear_bias=True,
        num_learned_positions=r.int("n_positions"),
    )


def _gpt_neox(r: ConfigReader, name: str) -> ModelSpec:
    h = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    return ModelSpec(
        name=name,
        num_layers=r.int("num_hidden_layers"),
        hidden_size=h,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=h // heads,
        ffn_hidden_size=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        gated_mlp=False,
        tied_embeddings=r.bool("tie_word_embeddings", False),
        attention=AttentionKind.MHA,
        norm=NormKind.LAYERNORM,
        linear_bias=True,
        **rope_scaling(r),
    )


FAMILIES: dict[str, tuple[str, tuple[str, ...], Reader]] = {
    "Llama 2 / 3": ("llama", ("LlamaForCausalLM",), _llama),
    "Mistral": ("mistral", ("MistralForCausalLM",), _llama),
    "Mixtral": ("mixtral", ("MixtralForCausalLM",), _mixtral),
    "Qwen2 / Qwen2.5": ("qwen2", ("Qwen2ForCausalLM",), _qwen2),
    "Qwen3": ("qwen3", ("Qwen3ForCausalLM",), _qwen3),
    "Qwen3-MoE": ("qwen3_moe", ("Qwen3MoeForCausalLM",), _qwen3_moe),
    "Qwen3-Next (refused: linear attention)": ("qwen3_next", ("Qwen3NextForCausalLM",), _qwen3_next),
    "Phi-3 / Phi-4": ("phi3", ("Phi3ForCausalLM",), _phi3),
    "Gemma 2": ("gemma2", ("Gemma2ForCausalLM",), _gemma2),
    "Gemma 3": ("gemma3", ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"), _gemma3_text),
    "Llama 4": ("llama4", ("Llama4ForConditionalGeneration", "Llama4ForCausalLM"), _llama4),
    "DeepSeek-V2": ("deepseek_v2", ("DeepseekV2ForCausalLM",), _deepseek_v2),
    "DeepSeek-V3 / Kimi K2": ("deepseek_v3", ("DeepseekV3ForCausalLM",), _deepseek_v3),
    "GLM-4.5": ("glm4_moe", ("Glm4MoeForCausalLM",), _glm4_moe),
    "GPT-OSS": ("gpt_oss", ("GptOssForCausalLM",), _gpt_oss),
    "GPT-2": ("gpt2", ("GPT2LMHeadModel",), _gpt2),
    "GPT-NeoX": ("gpt_neox", ("GPTNeoXForCausalLM",), _gpt_neox),
}
"""Family label -> (transformers ``model_type``, the ``architectures`` values read, the reader)."""

READERS: dict[str, Reader] = {arch: reader for _, archs, reader in FAMILIES.values() for arch in archs}
READERS["Gemma3ForConditionalGeneration"] = _gemma3
