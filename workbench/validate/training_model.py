"""A training validation row's model and cluster (``complete_model`` for :func:`workbench.validate.rows.row_model`,
``row_cluster``), for
:mod:`workbench.validate.training`.

Fields the schema lacks (``SCHEMA_LESS_FIELDS``: a head size other than hidden/heads, Qwen3's q/k norms, MLA's
ranks, ...) come from the model preset of the same architecture (:func:`matching_preset`); a cluster that is not
a preset may be described by ``clusters/<name>.toml`` beside the CSV.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from workbench.presets.catalog import load_cluster, load_device, load_model, preset_names, profiles_dir
from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import ModelSpec, NormKind
from workbench.validate.rows import DEFAULT_CLUSTER, Unexpressible, cell_count, cell_number

SCHEMA_LESS_FIELDS = (
    "head_dim",
    "qkv_bias",
    "attention_out_bias",
    "attention_sinks",
    "qk_norm",
    "expert_bias",
    "glu_clamp",
    "rope_scaling",
    "sliding_window",
    "num_sliding_window_layers",
    "num_dense_layers",
    "num_expert_groups",
    "routed_groups_per_token",
    "router_bias",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "num_mtp_layers",
)
"""Architecture fields the CSV has no column for (head size when it is not hidden/heads, the attention
projections' biases and GPT-OSS's sinks, Qwen3's q/k norms, banded attention, MLA's ranks, DeepSeekMoE's dense layers and routing groups, multi-token prediction): a row whose columns match a
model preset (:func:`matching_preset`) takes them from the preset's ``config.json``."""

_MATCHED_COLUMNS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "attention",
    "gated_mlp",
    "num_experts",
    "experts_per_token",
    "moe_ffn_hidden_size",
    "num_shared_experts",
)


def _model_presets() -> dict[str, ModelSpec]:
    """Every model preset by id (read once per presets folder)."""
    folder = profiles_dir()
    cached = _PRESET_CACHE.get(folder)
    if cached is None:
        cached = _PRESET_CACHE[folder] = {name: load_model(name) for name in preset_names("model")}
    return cached


_PRESET_CACHE: dict[Path, dict[str, ModelSpec]] = {}


def matching_preset(
    columns: dict[str, Any], unknown: tuple[str, ...] = (), filled: tuple[str, ...] = ()
) -> tuple[str, ModelSpec] | None:
    """The model preset with the same layers, width, heads, key/value heads, attention kind, MLP gating,
    experts (count, top-k, size, shared; absent expert fields: 0) and, when given, dense MLP size as the
    ModelSpec fields in ``columns``, leaving out the ``unknown`` fields (columns the row leaves blank). The one
    match with the row's vocabulary, if exactly one has it; else, when every match agrees on
    ``SCHEMA_LESS_FIELDS``, the ``unknown`` fields and the ``filled`` ones (other blank columns the preset is to
    fill), the first by id; None when nothing matches or the matches disagree (presets sharing an architecture
    but differing there would make the choice arbitrary)."""
    compared = [c for c in _MATCHED_COLUMNS if c not in unknown]
    if columns.get("ffn_hidden_size") and "ffn_hidden_size" not in filled:
        compared.append("ffn_hidden_size")  # a given dense MLP size tells Llama 3 70B from Qwen2.5 72B
    key = tuple(columns.get(c, 0) for c in compared)
    found = [
        (name, m) for name, m in _model_presets().items() if tuple(getattr(m, c) for c in compared) == key
    ]
    # the same vocabulary names the model best (Llama 3.1 70B, not Llama 2 70B); padded ones match none
    named = [(name, m) for name, m in found if m.vocab_size == columns.get("vocab_size")]
    if len(named) == 1:
        return named[0]
    agreed = (*SCHEMA_LESS_FIELDS, *unknown, *filled)
    if not found or len({tuple(getattr(m, f) for f in agreed) for _, m in found}) > 1:
        return None
    return found[0]


_FILLED_FROM_PRESET = ("ffn_hidden_size", "vocab_size")
"""Columns a row may leave blank that a matching preset then fills (a given dense MLP size is compared)."""


def complete_model(row: dict[str, str], arch: dict[str, Any], assumed: list[str]) -> dict[str, Any]:
    """The training schema's rule for a row's model (:func:`workbench.validate.rows.row_model`), on the fields
    ``arch`` read. The fields the CSV has no column for
    (``SCHEMA_LESS_FIELDS``) come from the model preset with the same architecture when there is one
    (listed in ``assumed`` as ``architecture:<preset>``), matched on the columns the row fills; that preset also
    fills the row's blank dense MLP size and vocabulary, a GQA row's blank key/value heads and an MoE row's blank
    top-k, expert size and shared experts (each listed in ``assumed``). Without a preset: head_dim = hidden /
    heads, a dense MLP of 4 x hidden, a 51,200-token vocabulary, key/value heads = heads, no shared experts,
    and MLA rows take DeepSeek-V3's ranks (``mla_dims``) with 3 dense layers when the row gives a dense MLP
    size; an MoE row without top-k or expert size is Unexpressible."""
    h, a = arch["hidden_size"], arch["num_attention_heads"]
    attention, gated, experts = arch["attention"], arch["gated_mlp"], arch["num_experts"]
    expert_cols = ("experts_per_token", "moe_ffn_hidden_size", "num_shared_experts") if experts else ()
    unknown = tuple(c for c in expert_cols if cell_number(row, c) is None)
    if attention == "gqa" and cell_number(row, "num_key_value_heads") is None:
        unknown += ("num_key_value_heads",)
    kv = int(cell_number(row, "num_key_value_heads") or a)
    extra: dict[str, Any] = {c: int(cell_number(row, c) or 0) for c in expert_cols}
    base = {
        **arch,
        "num_key_value_heads": kv if attention != "mla" else a,
        "head_dim": h // a,
        "vocab_size": int(cell_number(row, "vocab_size") or 0),
        "tied_embeddings": not gated,
        "norm": NormKind.RMSNORM if gated else NormKind.LAYERNORM,
        "linear_bias": not gated,
    }
    blank = [c for c in _FILLED_FROM_PRESET if cell_number(row, c) is None]
    match = matching_preset({**base, **extra}, unknown, tuple(blank))
    if match is not None:
        name, preset = match
        extra.update({f: getattr(preset, f) for f in (*SCHEMA_LESS_FIELDS, *unknown)})
        # an MoE model without dense layers leaves ffn_hidden_size blank by the schema: nothing to fill there
        if experts and not preset.num_dense_layers and "ffn_hidden_size" in blank:
            blank.remove("ffn_hidden_size")
        base.update({f: getattr(preset, f) for f in blank})
        assumed.append(f"architecture:{name}")
        assumed.extend((*unknown, *blank))
    else:
        missing = [c for c in unknown if c not in ("num_shared_experts", "num_key_value_heads")]
        if missing:
            raise Unexpressible(f"blank required column(s): {', '.join(missing)} (no model preset matches)")
        assumed.extend(unknown)
        if "vocab_size" in blank:
            base["vocab_size"] = 51200
            assumed.append("vocab_size")
        if "ffn_hidden_size" in blank and not experts:
            base["ffn_hidden_size"] = 4 * h
            assumed.append("ffn_hidden_size")
        if attention == "mla":
            ds = load_model("deepseek-v3")
            extra.update(
                {
                    k: getattr(ds, k)
                    for k in (
                        "q_lora_rank",
                        "kv_lora_rank",
                        "qk_nope_head_dim",
                        "qk_rope_head_dim",
                        "v_head_dim",
                    )
                }
            )
            extra["num_dense_layers"] = 3 if base["ffn_hidden_size"] and experts else 0
            assumed.append("mla_dims")
    return {**base, **extra}


def row_cluster(row: dict[str, str], assumed: list[str], data_dir: Path | None = None) -> ClusterSpec:
    """The row's cluster (a preset, or ``clusters/<name>.toml`` beside the CSV) with the row's device and
    node count. A blank cluster, or an id the schema leaves to the row's notes (``other-*``) that is neither a
    preset nor beside the CSV, is priced on the device's ``DEFAULT_CLUSTER`` and listed in ``assumed``."""
    device = load_device(row["device"])
    name = row["cluster"] or DEFAULT_CLUSTER.get(row["device"])
    if not row["cluster"]:
        assumed.append("cluster")
    if name is None:
        raise Unexpressible(f"no cluster given and no default for device {row['device']}")
    sidecar = data_dir / "clusters" / f"{name}.toml" if data_dir is not None else None
    fallback = DEFAULT_CLUSTER.get(row["device"])
    if name not in preset_names("cluster") and sidecar is not None and sidecar.is_file():
        cluster = load_cluster(sidecar)
    elif name in preset_names("cluster"):
        cluster = load_cluster(name)
    elif name.startswith("other-") and fallback is not None:
        assumed.append(f"cluster:{fallback}")
        cluster = load_cluster(fallback)
    else:
        where = f" or {sidecar}" if sidecar is not None else ""
        raise Unexpressible(f"cluster {name!r} is neither a preset{where}")
    n = cell_count(row, "num_devices")
    per_node = cluster.devices_per_node
    if n % per_node and n >= per_node:
        raise Unexpressible(f"{n} devices are not whole nodes of {per_node}")
    return dataclasses.replace(
        cluster, device=device, num_nodes=max(n // per_node, 1), devices_per_node=min(per_node, n)
    )
