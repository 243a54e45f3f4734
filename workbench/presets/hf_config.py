"""Read a Hugging Face ``config.json`` into a :class:`~workbench.specs.model.ModelSpec`.

Supported ``architectures``: see ``SUPPORTED_ARCHITECTURES``. Field names follow the transformers
configuration classes of each architecture (LlamaConfig, MixtralConfig, Qwen2Config, Qwen3MoeConfig,
DeepseekV3Config, GPT2Config, GPTNeoXConfig).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workbench.presets.profile_table import shape_key
from workbench.specs.files import check_input_file
from workbench.specs.limits import MAX_LAYERS, MAX_SEQ_LEN, MODEL_MAXIMUM, check_count, shown
from workbench.specs.model import AttentionKind, ModelSpec, NormKind

_FIELD_OF_KEY = {
    "num_hidden_layers": "num_layers",
    "n_layer": "num_layers",
    "hidden_size": "hidden_size",
    "n_embd": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "n_head": "num_attention_heads",
    "num_key_value_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "intermediate_size": "ffn_hidden_size",
    "n_inner": "ffn_hidden_size",
    "moe_intermediate_size": "moe_ffn_hidden_size",
    "vocab_size": "vocab_size",
    "n_positions": "num_learned_positions",
    "num_local_experts": "num_experts",
    "num_experts": "num_experts",
    "n_routed_experts": "num_experts",
    "num_experts_per_tok": "experts_per_token",
    "n_shared_experts": "num_shared_experts",
    "first_k_dense_replace": "num_dense_layers",
    "n_group": "num_expert_groups",
    "topk_group": "routed_groups_per_token",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}
"""config.json key -> the ModelSpec field whose bound (``workbench.specs.limits.MODEL_MAXIMUM``) it takes; other
integer keys (``decoder_sparse_step``, ``moe_layer_freq``) are bounded by ``MAX_LAYERS``."""

_MAY_BE_ZERO = {"n_shared_experts", "first_k_dense_replace", "q_lora_rank"}
"""Keys whose 0 means "none" (no shared experts, no dense layers, queries not compressed)."""


class _Reader:
    """Reads fields of one config with errors that name the file and the field."""

    def __init__(self, cfg: Mapping[str, Any], origin: str) -> None:
        self.cfg, self.origin = cfg, origin

    def int(self, *keys: str, default: int | None = None) -> int:
        """The first of ``keys`` present: an integer in its range (>= 1, or >= 0 where 0 means none; at most
        the bound of its ModelSpec field), checked before any arithmetic uses it."""
        for key in keys:
            value = self.cfg.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{self.origin}: field {key!r} must be an integer, got {shown(value)}")
                field = _FIELD_OF_KEY.get(key)
                maximum, limit = MODEL_MAXIMUM[field] if field else (MAX_LAYERS, "MAX_LAYERS")
                minimum = 0 if key in _MAY_BE_ZERO else 1
                label = f"field {key!r}"
                return check_count(self.origin, label, value, minimum=minimum, maximum=maximum, limit=limit)
        if default is None:
            raise ValueError(f"{self.origin}: missing field {' or '.join(repr(k) for k in keys)}")
        return default

    def bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if not isinstance(value, bool):
            raise ValueError(f"{self.origin}: field {key!r} must be true or false, got {shown(value)}")
        return value


def _attention_kind(heads: int, kv_heads: int) -> AttentionKind:
    return AttentionKind.MHA if heads == kv_heads else AttentionKind.GQA


def _window(r: _Reader, num_layers: int) -> dict[str, Any]:
    """``sliding_window`` and ``num_sliding_window_layers`` from the config (transformers' conventions):
    ``layer_types`` lists ``sliding_attention`` per layer (GPT-OSS, Gemma); Qwen2/Qwen3 slide only with
    ``use_sliding_window`` true, on the layers from ``max_window_layers`` on; otherwise an integer
    ``sliding_window`` applies to every layer (Mistral). Empty when the model has no window."""
    value = r.cfg.get("sliding_window")
    if value is None or ("use_sliding_window" in r.cfg and not r.bool("use_sliding_window", False)):
        return {}
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{r.origin}: field 'sliding_window' must be an integer or null, got {shown(value)}")
    window = check_count(
        r.origin, "field 'sliding_window'", value, minimum=1, maximum=MAX_SEQ_LEN, limit="MAX_SEQ_LEN"
    )
    types = r.cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers:
            raise ValueError(f"{r.origin}: field 'layer_types' must list one type per layer ({num_layers})")
        layers = sum(1 for t in types if t == "sliding_attention")
    elif "use_sliding_window" in r.cfg:
        layers = num_layers - min(r.int("max_window_layers", default=num_layers), num_layers)
    else:
        layers = num_layers
    return {"sliding_window": window, "num_sliding_window_layers": layers} if layers else {}


def _rope_scaling(r: _Reader) -> dict[str, Any]:
    """``rope_scaling`` from the config's ``rope_scaling`` table: its ``rope_type`` (older configs: ``type``),
    lower-cased; ``default`` or no table is plain RoPE (empty)."""
    table = r.cfg.get("rope_scaling")
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ValueError(f"{r.origin}: field 'rope_scaling' must be an object or null, got {shown(table)}")
    kind = table.get("rope_type", table.get("type", "default"))
    if not isinstance(kind, str):
        raise ValueError(f"{r.origin}: field 'rope_scaling.rope_type' must be a string, got {shown(kind)}")
    kind = kind.strip().lower()
    return {} if kind == "default" else {"rope_scaling": kind}


def _llama_like(r: _Reader, name: str, **extra: Any) -> ModelSpec:
    h = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    kv = r.int("num_key_value_heads", default=heads)
    layers = r.int("num_hidden_layers")
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=h,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=r.int("head_dim", default=h // heads),
        ffn_hidden_size=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        gated_mlp=True,
        tied_embeddings=r.bool("tie_word_embeddings", False),
        attention=_attention_kind(heads, kv),
        **_window(r, layers),
        **_rope_scaling(r),
        **extra,
    )


def _llama(r: _Reader, name: str) -> ModelSpec:
    return _llama_like(r, name, qkv_bias=r.bool("attention_bias", False))


def _qwen2(r: _Reader, name: str) -> ModelSpec:
    return _llama_like(r, name, qkv_bias=True)


def _mixtral(r: _Reader, name: str) -> ModelSpec:
    f = r.int("intermediate_size")
    return _llama_like(
        r,
        name,
        num_experts=r.int("num_local_experts"),
        experts_per_token=r.int("num_experts_per_tok"),
        moe_ffn_hidden_size=f,
    )


def _qwen3_moe(r: _Reader, name: str) -> ModelSpec:
    if r.cfg.get("mlp_only_layers") or r.int("decoder_sparse_step", default=1) != 1:
        raise ValueError(
            f"{r.origin}: mlp_only_layers / decoder_sparse_step != 1 (interleaved dense layers) "
            "are not supported; every layer must be MoE"
        )
    return _llama_like(
        r,
        name,
        num_experts=r.int("num_experts"),
        experts_per_token=r.int("num_experts_per_tok"),
        moe_ffn_hidden_size=r.int("moe_intermediate_size"),
        qk_norm=True,
        qkv_bias=r.bool("attention_bias", False),
    )


def _gpt_oss(r: _Reader, name: str) -> ModelSpec:
    """GPT-OSS: top-k MoE in every layer (``num_local_experts``, experts of ``intermediate_size``), biased
    q/k/v projections, biased experts (transformers' GptOssExperts always has them), the experts' GLU clamped
    at ``swiglu_limit``, banded attention on the ``layer_types`` marked ``sliding_attention``, YaRN-scaled RoPE.
    The per-head attention sink (one scalar per head) is left out."""
    clamp = r.cfg.get("swiglu_limit", 0.0)
    if isinstance(clamp, bool) or not isinstance(clamp, int | float):
        raise ValueError(f"{r.origin}: field 'swiglu_limit' must be a number, got {shown(clamp)}")
    return _llama_like(
        r,
        name,
        num_experts=r.int("num_local_experts"),
        experts_per_token=r.int("num_experts_per_tok"),
        moe_ffn_hidden_size=r.int("intermediate_size"),
        qkv_bias=r.bool("attention_bias", False),
        expert_bias=True,
        glu_clamp=float(clamp),
    )


def _deepseek_v3(r: _Reader, name: str) -> ModelSpec:
    if r.int("moe_layer_freq", default=1) != 1:
        raise ValueError(f"{r.origin}: moe_layer_freq must be 1 (every layer after the dense ones is MoE)")
    heads = r.int("num_attention_heads")
    return ModelSpec(
        name=name,
        num_layers=r.int("num_hidden_layers"),
        hidden_size=r.int("hidden_size"),
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=r.int("v_head_dim"),
        ffn_hidden_size=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        gated_mlp=True,
        tied_embeddings=r.bool("tie_word_embeddings", False),
        attention=AttentionKind.MLA,
        num_experts=r.int("n_routed_experts"),
        experts_per_token=r.int("num_experts_per_tok"),
        moe_ffn_hidden_size=r.int("moe_intermediate_size"),
        num_shared_experts=r.int("n_shared_experts", default=0),
        num_dense_layers=r.int("first_k_dense_replace", default=0),
        num_expert_groups=r.int("n_group", default=0),
        routed_groups_per_token=r.int("topk_group", default=0),
        router_bias=True,
        num_mtp_layers=r.int("num_nextn_predict_layers", default=0),
        **_rope_scaling(r),
        q_lora_rank=r.int("q_lora_rank", default=0),
        kv_lora_rank=r.int("kv_lora_rank"),
        qk_nope_head_dim=r.int("qk_nope_head_dim"),
        qk_rope_head_dim=r.int("qk_rope_head_dim"),
        v_head_dim=r.int("v_head_dim"),
    )


def _gpt2(r: _Reader, name: str) -> ModelSpec:
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


def _gpt_neox(r: _Reader, name: str) -> ModelSpec:
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
        **_rope_scaling(r),
    )


_READERS: dict[str, Callable[[_Reader, str], ModelSpec]] = {
    "LlamaForCausalLM": _llama,
    "MistralForCausalLM": _llama,
    "MixtralForCausalLM": _mixtral,
    "Qwen2ForCausalLM": _qwen2,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "DeepseekV3ForCausalLM": _deepseek_v3,
    "GptOssForCausalLM": _gpt_oss,
    "GPT2LMHeadModel": _gpt2,
    "GPTNeoXForCausalLM": _gpt_neox,
}
SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(_READERS)


def load_json_object(path: Path) -> dict[str, Any]:
    """Parse a JSON file that must hold one object; errors name the file."""
    check_input_file(path)  # a directory or a FIFO is named as such, and a FIFO is never opened
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply for the parser)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        raise ValueError(f"{path}: not valid JSON ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def model_from_hf_config(source: Mapping[str, Any] | str | Path, *, name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a HF ``config.json`` path or parsed mapping.

    The name defaults to the file's stem (``config`` files take their folder's name), else ``"model"``.
    Raises ValueError for an unsupported architecture (listing the supported ones) or a bad field,
    FileNotFoundError for a missing file.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        cfg: Mapping[str, Any] = load_json_object(path)
        origin = str(path)
        default_name = (path.parent.name if path.stem == "config" else path.stem) or "model"
    elif isinstance(source, Mapping):
        cfg, origin, default_name = source, "config", str(source.get("_name_or_path") or "model")
    else:
        raise ValueError(f"expected a path or a dict for a Hugging Face config, got {type(source).__name__}")
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(arch, str) or arch not in _READERS:
        raise ValueError(
            f"{origin}: field 'architectures' is {shown(archs)}; it must be a list whose first entry is a "
            f"supported architecture; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    try:
        return _READERS[arch](_Reader(cfg, origin), name or default_name)
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(origin) else f"{origin}: {text}") from None


_HF_KEYS = {
    "num_layers": ("num_hidden_layers", "n_layer"),
    "hidden_size": ("hidden_size", "n_embd"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_key_value_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "vocab_size": ("vocab_size",),
    "num_dense_layers": ("first_k_dense_replace",),
    "moe_ffn_hidden_size": ("moe_intermediate_size",),
}


def shrunk_hf_config(base_config: dict[str, Any], spec: ModelSpec) -> dict[str, Any] | None:
    """The base model's config.json with the sizes of ``spec`` (a shrunk variant) written in; None when it
    does not read back as ``spec`` (an architecture whose keys differ). The inverse of
    :func:`model_from_hf_config` for the fields ``workbench profile`` shrinks."""
    cfg = dict(base_config)
    for field, keys in _HF_KEYS.items():
        for key in keys:
            if key in cfg or key == keys[0] and field in ("num_layers", "hidden_size", "num_attention_heads"):
                cfg[key] = getattr(spec, field)
    ffn = spec.ffn_hidden_size or spec.moe_ffn_hidden_size
    if "intermediate_size" in cfg:
        cfg["intermediate_size"] = ffn
    cfg["head_dim"] = spec.head_dim
    try:
        back = model_from_hf_config(cfg, name=spec.name)
    except ValueError:
        return None
    return cfg if shape_key(back) == shape_key(spec) and back.num_layers == spec.num_layers else None
