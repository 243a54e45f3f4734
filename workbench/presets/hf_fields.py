"""Field reading shared by the Hugging Face ``config.json`` readers: typed, bounded fields whose errors name
the file, the field, the value and what is allowed; the per-layer attention kinds; the RoPE scaling.

Every default a reader applies for a missing field is recorded in :attr:`ConfigReader.notes`, so nothing is
guessed silently (``workbench show model`` prints them).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from workbench.specs.limits import MAX_LAYERS, MAX_SEQ_LEN, MODEL_MAXIMUM, check_count, shown

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
    "intermediate_size_mlp": "ffn_hidden_size",
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

_MAY_BE_ZERO = {"n_shared_experts", "first_k_dense_replace", "q_lora_rank", "num_nextn_predict_layers"}
"""Keys whose 0 means "none" (no shared experts, no dense layers, queries not compressed)."""

FULL, SLIDING, CHUNKED, LINEAR = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "linear_attention",
)
LAYER_TYPES = (FULL, SLIDING, CHUNKED, LINEAR)
"""The attention kinds of transformers' ``layer_types`` lists (``configuration_utils.ALLOWED_LAYER_TYPES``
holds these and more; the others are refused by name)."""


class ConfigReader:
    """Reads the fields of one config (``cfg``, from the file ``origin``) with errors that name the file and
    the field; records the defaults it applies in ``notes``."""

    def __init__(self, cfg: Mapping[str, Any], origin: str) -> None:
        self.cfg, self.origin = cfg, origin
        self.notes: list[str] = []
        self.encoder_parameters = 0
        """Parameters of a vision tower and projector the reader counted beside the decoder (not priced)."""

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def int(self, *keys: str, default: int | None = None) -> int:
        """The first of ``keys`` present: an integer in its range (>= 1, or >= 0 where 0 means none; at most
        the bound of its ModelSpec field), checked before any arithmetic uses it. A missing field takes
        ``default`` (recorded in the notes) or raises ValueError."""
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
        self.note(f"{keys[0]}: not in the file (or null), default {default}")
        return default

    def bool(self, key: str, default: bool) -> bool:
        """A true/false field; a missing one takes ``default`` (recorded in the notes)."""
        if key not in self.cfg or self.cfg[key] is None:
            self.note(f"{key}: not in the file, default {str(default).lower()}")
            return default
        value = self.cfg[key]
        if not isinstance(value, bool):
            raise ValueError(f"{self.origin}: field {key!r} must be true or false, got {shown(value)}")
        return value

    def number(self, key: str, default: float = 0.0) -> float:
        """A non-negative finite number (null: ``default``)."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
            raise ValueError(
                f"{self.origin}: field {key!r} must be a number, got {shown(value)} (allowed: finite, >= 0, or null)"
            )
        return float(value)

    def int_list(
        self, key: str, length: builtins.int, allowed: tuple[builtins.int, ...] | None = None
    ) -> list[builtins.int] | None:
        """A list of integers (None when absent); ``length`` > 0 checks its length, ``allowed`` its values."""
        value = self.cfg.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise ValueError(f"{self.origin}: field {key!r} must be a list of integers, got {shown(value)}")
        if length and len(value) != length:
            raise ValueError(
                f"{self.origin}: field {key!r} lists {len(value)} values; it must list one per layer "
                f"(num_hidden_layers = {length})"
            )
        bad = [v for v in value if allowed is not None and v not in allowed]
        if bad:
            raise ValueError(f"{self.origin}: field {key!r} holds {bad[0]!r}; allowed: {list(allowed or ())}")
        return value

    def layer_types(self, num_layers: builtins.int) -> list[str] | None:
        """The config's ``layer_types`` (None when absent): one known kind per layer, else ValueError naming
        the length or the unknown kind and the allowed ones."""
        types = self.cfg.get("layer_types")
        if types is None:
            return None
        if not isinstance(types, list) or len(types) != num_layers:
            count = len(types) if isinstance(types, list) else shown(types)
            raise ValueError(
                f"{self.origin}: field 'layer_types' has {count} entries; it must list one type per layer "
                f"(num_hidden_layers = {num_layers})"
            )
        for i, kind in enumerate(types):
            if kind not in LAYER_TYPES:
                raise ValueError(
                    f"{self.origin}: field 'layer_types'[{i}] is {shown(kind)}; allowed: {', '.join(LAYER_TYPES)}"
                )
        return list(types)


def window_fields(r: ConfigReader, num_layers: int, types: list[str] | None = None) -> dict[str, Any]:
    """``sliding_window``/``num_sliding_window_layers`` and ``attention_chunk_size``/
    ``num_chunked_attention_layers`` from the layer kinds: ``types`` (a reader's default, transformers' own
    rule) or the config's ``layer_types`` (GPT-OSS, Gemma, Llama 4); without either, Qwen2/Qwen3 slide only
    with ``use_sliding_window`` true, on the layers from ``max_window_layers`` on, and otherwise an integer
    ``sliding_window`` applies to every layer (Mistral, Phi-3). Linear-attention layers are refused by the
    readers that have them. Empty when every layer attends to the whole prefix."""
    types = types if types is not None else r.layer_types(num_layers)
    value = r.cfg.get("sliding_window")
    if types is None and (
        value is None or ("use_sliding_window" in r.cfg and not r.bool("use_sliding_window", False))
    ):
        return {}
    if types is not None:
        sliding, chunked = types.count(SLIDING), types.count(CHUNKED)
    elif "use_sliding_window" in r.cfg:
        sliding, chunked = num_layers - min(r.int("max_window_layers", default=num_layers), num_layers), 0
    else:
        sliding, chunked = num_layers, 0
    out: dict[str, Any] = {}
    if sliding:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(
                f"{r.origin}: field 'sliding_window' must be an integer when {sliding} layers are "
                f"sliding_attention, got {shown(value)}"
            )
        window = check_count(
            r.origin, "field 'sliding_window'", value, minimum=1, maximum=MAX_SEQ_LEN, limit="MAX_SEQ_LEN"
        )
        out.update(sliding_window=window, num_sliding_window_layers=sliding)
    if chunked:
        chunk = r.cfg.get("attention_chunk_size")
        if isinstance(chunk, bool) or not isinstance(chunk, int):
            raise ValueError(
                f"{r.origin}: field 'attention_chunk_size' must be an integer when {chunked} layers are "
                f"chunked_attention, got {shown(chunk)}"
            )
        size = check_count(
            r.origin,
            "field 'attention_chunk_size'",
            chunk,
            minimum=1,
            maximum=MAX_SEQ_LEN,
            limit="MAX_SEQ_LEN",
        )
        out.update(attention_chunk_size=size, num_chunked_attention_layers=chunked)
    return out


def rope_scaling(r: ConfigReader) -> dict[str, Any]:
    """``rope_scaling`` from the config's ``rope_scaling`` table (transformers 5: ``rope_parameters``): its
    ``rope_type`` (older configs: ``type``), lower-cased; ``default`` or no table is plain RoPE (empty)."""
    table = r.cfg.get("rope_scaling", r.cfg.get("rope_parameters"))
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise ValueError(f"{r.origin}: field 'rope_scaling' must be an object or null, got {shown(table)}")
    kind = table.get("rope_type", table.get("type", "default"))
    if not isinstance(kind, str):
        raise ValueError(f"{r.origin}: field 'rope_scaling.rope_type' must be a string, got {shown(kind)}")
    kind = kind.strip().lower()
    return {} if kind == "default" else {"rope_scaling": kind}
