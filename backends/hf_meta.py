"""transformers as the oracle: build a model from its ``config.json`` on the meta device (no weights, nothing
downloaded) and read the parameter count of every module; and derive a :class:`ModelSpec` from those modules for
an architecture no hand-written reader knows.

Needs the ``[hf]`` extra (transformers with torch). The core never imports this module: it finds
:func:`derive_reading` through the ``workbench.model_derivers`` entry point.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import transformers
from torch import nn

from workbench.presets.hf_config import ConfigReading
from workbench.presets.hf_fields import ConfigReader, rope_scaling, window_fields
from workbench.specs.model import AttentionKind, ModelSpec, NormKind

EXPERT_COUNT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k")


@dataclass(frozen=True, kw_only=True, slots=True)
class MetaCounts:
    """Parameter counts of a model transformers built on the meta device."""

    version: str
    """transformers' version."""
    total: int
    """Every parameter (shared tensors once), vision tower included."""
    decoder: int
    """The text decoder: embeddings, blocks, final norm, LM head (untied)."""
    layers: tuple[int, ...]
    """Parameters of each decoder block, in order."""
    active_layers: tuple[int, ...]
    """Parameters one token passes through in each block: the routed experts' share scaled to top-k of E."""
    embedding: int
    """The input embedding table."""

    @property
    def encoder(self) -> int:
        """Everything outside the text decoder (vision tower, projector)."""
        return self.total - self.decoder

    @property
    def active(self) -> int:
        """Active parameters, input embedding included (``ModelSpec.active_parameters``' convention)."""
        return self.decoder - sum(self.layers) + sum(self.active_layers)


def _plain(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if not k.startswith("_")}


def build_meta_model(config: Mapping[str, Any]) -> nn.Module:
    """The model of ``config`` (a parsed ``config.json``) built by transformers on the meta device: the class
    named by ``architectures[0]`` if transformers has it, else ``AutoModelForCausalLM``. Raises ValueError when
    transformers does not know the model type or the architecture."""
    cfg_dict = _plain(config)
    model_type = cfg_dict.get("model_type")
    if not isinstance(model_type, str):
        raise ValueError(f"field 'model_type' is {model_type!r}; transformers needs it to build the model")
    try:
        cfg = transformers.AutoConfig.for_model(**cfg_dict)  # model_type is one of the keys
    except (ValueError, KeyError) as exc:
        raise ValueError(
            f"transformers {transformers.__version__} does not know model_type {model_type!r}: {exc}"
        ) from None
    archs = cfg_dict.get("architectures") or []
    cls = getattr(transformers, archs[0], None) if archs else None
    with torch.device("meta"):
        if cls is not None and hasattr(cls, "_from_config"):
            return cls._from_config(cfg)
        return transformers.AutoModelForCausalLM.from_config(cfg)


def _text_settings(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _decoder_layers(model: nn.Module, num_layers: int) -> tuple[str, nn.ModuleList]:
    """(path, module list) of the text decoder's blocks: the ``layers`` list of ``num_layers`` blocks outside
    any vision or audio tower."""
    for path, module in model.named_modules():
        if (
            isinstance(module, nn.ModuleList)
            and path.rsplit(".", 1)[-1] in ("layers", "h", "blocks")
            and len(module) == num_layers
            and not re.search(r"vision|visual|audio|image", path)
        ):
            return path, module
    raise ValueError(f"no list of {num_layers} decoder blocks in {type(model).__name__}")


def _count(params: Any) -> int:
    return sum(p.numel() for p in params)


def meta_counts(config: Mapping[str, Any], model: nn.Module | None = None) -> MetaCounts:
    """Count the parameters of ``config``'s meta model by module (see :class:`MetaCounts`)."""
    model = build_meta_model(config) if model is None else model
    text = model.config.get_text_config()
    layers_path, blocks = _decoder_layers(model, int(text.num_hidden_layers))
    root = layers_path.rsplit(".", 1)[0]
    named = dict(model.named_parameters())  # shared (tied) tensors once
    decoder = {n: p for n, p in named.items() if n.startswith(root + ".") or "lm_head" in n.split(".")[-2:]}
    experts = next(
        (int(getattr(text, k)) for k in EXPERT_COUNT_KEYS if isinstance(getattr(text, k, None), int)), 0
    )
    top_k = next((int(getattr(text, k)) for k in TOP_K_KEYS if isinstance(getattr(text, k, None), int)), 0)
    per_layer, active = [], []
    for block in blocks:
        total = _count(block.parameters())
        routed = sum(
            p.numel() for n, p in block.named_parameters() if ".experts." in f".{n}" and "shared" not in n
        )
        per_layer.append(total)
        active.append(total - routed + (routed * top_k // experts if experts else routed))
    embedding = model.get_input_embeddings()
    return MetaCounts(
        version=transformers.__version__,
        total=_count(named.values()),
        decoder=_count(decoder.values()),
        layers=tuple(per_layer),
        active_layers=tuple(active),
        embedding=_count(embedding.parameters()) if embedding is not None else 0,
    )


# ---- the generic path: a spec from the modules ------------------------------------------------------------
_NORM_TYPES = (nn.LayerNorm,)


def _is_norm(name: str, module: nn.Module) -> bool:
    return isinstance(module, _NORM_TYPES) or "norm" in type(module).__name__.lower()


def _linear(module: nn.Module | None) -> nn.Linear | None:
    return module if isinstance(module, nn.Linear) else None


def _attention_fields(
    attn: nn.Module, h: int, heads: int, kv: int, head_dim: int, where: str
) -> dict[str, Any]:
    """GQA/MHA fields from q/k/v/o projections (separate or fused ``qkv_proj``); refuses other attention."""
    q, k, v, o = (_linear(getattr(attn, n, None)) for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
    fused = _linear(getattr(attn, "qkv_proj", None))
    if o is None or not (fused or (q and k and v)):
        raise ValueError(
            f"{where}: attention module {type(attn).__name__} has no q/k/v/o projections this path can price "
            f"(children: {', '.join(n for n, _ in attn.named_children()) or 'none'})"
        )
    if fused is not None and fused.out_features != (heads + 2 * kv) * head_dim:
        raise ValueError(
            f"{where}: fused qkv_proj of {fused.out_features} outputs, expected {(heads + 2 * kv) * head_dim}"
        )
    if q is not None and (q.out_features != heads * head_dim or k is None or k.out_features != kv * head_dim):
        raise ValueError(
            f"{where}: q_proj/k_proj widths do not match {heads} heads and {kv} key/value heads of {head_dim}"
        )
    qkv_bias = (fused.bias is not None) if fused is not None else q is not None and q.bias is not None
    norms = [m for n, m in attn.named_children() if _is_norm(n, m)]
    qk_norm = len(norms) == 2 and all(_count(m.parameters()) == head_dim for m in norms)
    return {"qkv_bias": qkv_bias, "attention_out_bias": o.bias is not None, "qk_norm": qk_norm}


def _mlp_fields(mlp: nn.Module, where: str) -> dict[str, Any]:
    gate, up, down = (_linear(getattr(mlp, n, None)) for n in ("gate_proj", "up_proj", "down_proj"))
    gate_up = _linear(getattr(mlp, "gate_up_proj", None))
    fc1, fc2 = _linear(getattr(mlp, "fc1", None)), _linear(getattr(mlp, "fc2", None))
    if down is not None and (gate_up is not None or (gate is not None and up is not None)):
        return {"gated_mlp": True, "ffn_hidden_size": down.in_features, "linear_bias": down.bias is not None}
    if down is not None and up is not None:
        return {"gated_mlp": False, "ffn_hidden_size": down.in_features, "linear_bias": down.bias is not None}
    if fc1 is not None and fc2 is not None:
        return {"gated_mlp": False, "ffn_hidden_size": fc2.in_features, "linear_bias": fc2.bias is not None}
    raise ValueError(
        f"{where}: MLP module {type(mlp).__name__} has no gate/up/down or fc1/fc2 projections this path can "
        f"price (children: {', '.join(n for n, _ in mlp.named_children()) or 'none'})"
    )


def _tied(model: nn.Module) -> bool:
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    return out is None or inp is None or out.weight is inp.weight


def derive_reading(config: Mapping[str, Any], origin: str, name: str) -> ConfigReading:
    """A :class:`ConfigReading` for an architecture without a hand-written reader, derived from the modules of
    the meta model transformers builds (dense decoders with q/k/v/o attention and an MLP of gate/up/down or
    fc1/fc2; sliding layers from the config's ``layer_types``). The derived spec's count must equal the meta
    model's; otherwise ValueError names the modules it cannot price. Notes say "derived from transformers X"."""
    model = build_meta_model(config)
    counts = meta_counts(config, model)
    text = _text_settings(config)
    r = ConfigReader(dict(text), origin)
    layers_path, blocks = _decoder_layers(model, r.int("num_hidden_layers"))
    block = blocks[0]
    where = f"{origin}: {type(block).__name__} ({layers_path}.0)"
    children = dict(block.named_children())
    attn = children.get("self_attn") or children.get("attention") or children.get("attn")
    mlp = children.get("mlp") or children.get("feed_forward")
    if attn is None or mlp is None:
        raise ValueError(f"{where}: no self_attn/mlp children to price (has {', '.join(children)})")
    if any(k in text for k in EXPERT_COUNT_KEYS) and _count(mlp.parameters()) != _count(
        blocks[-1].mlp.parameters()
    ):
        raise ValueError(
            f"{where}: mixture-of-experts blocks need a hand-written reader ({type(mlp).__name__})"
        )
    h, heads = r.int("hidden_size"), r.int("num_attention_heads")
    kv = r.int("num_key_value_heads", default=heads)
    head_dim = r.int("head_dim", default=h // heads)
    norms = [m for n, m in children.items() if _is_norm(n, m)]
    layer_norm = any(_count(m.parameters()) == 2 * h for m in norms)
    if len(norms) not in (2, 4):
        raise ValueError(
            f"{where}: {len(norms)} norms per block; this path prices 2 (pre-norm) or 4 (sandwich)"
        )
    cfg_obj = getattr(model.config, "text_config", None) or model.config
    types = getattr(cfg_obj, "layer_types", None)
    r_types = ConfigReader({**text, "sliding_window": getattr(cfg_obj, "sliding_window", None)}, origin)
    spec = ModelSpec(
        name=name,
        num_layers=len(blocks),
        hidden_size=h,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        vocab_size=r.int("vocab_size"),
        tied_embeddings=_tied(model),
        attention=AttentionKind.MHA if heads == kv else AttentionKind.GQA,
        norm=NormKind.LAYERNORM if layer_norm else NormKind.RMSNORM,
        post_norms=len(norms) == 4,
        **_attention_fields(attn, h, heads, kv, head_dim, where),
        **_mlp_fields(mlp, where),
        **window_fields(r_types, len(blocks), list(types) if types else None),
        **rope_scaling(r),
    )
    if spec.total_parameters() != counts.decoder or spec.layer_parameters(0) != counts.layers[0]:
        raise ValueError(
            f"{where}: the derived spec counts {spec.layer_parameters(0):,} parameters per block and "
            f"{spec.total_parameters():,} in all, transformers {counts.layers[0]:,} and {counts.decoder:,}; modules "
            f"of the block: {', '.join(f'{n} ({type(m).__name__})' for n, m in children.items())}"
        )
    notes = [
        f"derived from transformers {counts.version} ({type(model).__name__} on the meta device)",
        *r.notes,
    ]
    return ConfigReading(
        spec=spec,
        architecture=str((config.get("architectures") or ["?"])[0]),
        notes=tuple(notes),
        encoder_parameters=counts.encoder,
    )
