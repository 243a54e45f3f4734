"""Predicted vs published: run the analytic model on every row of a validation CSV and measure the error.

The file follows the schema of ``shared/validation/training_public.csv`` (its README defines every column).
Per row: the model, cluster and plan are rebuilt from the columns (fields the schema lacks, such as a head
size other than hidden/heads, from the model preset of the same architecture: :func:`matching_preset`); the
row's ``framework`` text picks a framework profile by alias or keyword, in the era of the year its ``source``
cites (:func:`workbench.presets.frameworks.profile_for_text`; none matching: the default profile of the
source's year, :func:`workbench.presets.frameworks.default_framework`, listed under ``assumed``; a published
plan outside the profile's feature list, such as a ZeRO stage or schedule the profile does not name, is
priced by the profile widened to run it, :meth:`FrameworkProfile.admitting`, and listed under ``assumed``,
never skipped); blanks that the README gives a fixed reading (cp, ep, MHA
key/value heads) take it; other blanks default through the profile or ``PLAN_DEFAULTS`` and are listed in
the row's ``assumed`` field; rows that cannot be expressed (no parallel plan, blank architecture fields,
unknown device or cluster, infeasible plan) go to ``skipped`` with the reason. A cluster that is not a
preset may be described by ``clusters/<name>.toml`` (the cluster preset format) beside the CSV.

Throughput metric per row, the first the row has: step time, tokens/s per device, TFLOP/s per device (in
the row's FLOP definition: ``model`` = PaLM 6N + full-s^2 attention as MosaicML and Megatron count;
``hardware`` adds recompute as Megatron eq. 3), MFU (BF16 peak, or FP8 with ``+fp8-peak``).
APE = |predicted - measured| / measured; MAPE = mean APE (overall, per source_key). Peak memory is
predicted as the profile's ``memory_report`` counts it (allocated: tensors; reserved: plus the allocator's
fragmentation; required: plus the CUDA context) and scored over rows with ``measured_peak_memory_GiB``.

Fitting (:func:`fit_constants`): the only constants fitted to published runs are the fields each framework
profile names as ``fitted``, per fit group, by coordinate search over physical ranges (``FIT_GRID``) on
the throughput MAPE of that group's rows. ``cross_validate`` fits leaving one source out at a time and
scores the left-out source with the constants fitted without it: the out-of-sample figures.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.pipeline.schedules.registry import REGISTRY, default_vpp
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_cluster, load_device, load_model, preset_names, profiles_dir
from workbench.presets.frameworks import (
    UNNAMED_STACK_FRAMEWORK,
    default_framework,
    load_framework,
    profile_for_text,
    source_year,
)
from workbench.specs import limits
from workbench.specs.estimate import DEFAULT_HEADROOM_FRAC
from workbench.specs.files import check_input_file, normalised_cells
from workbench.specs.framework import FrameworkProfile
from workbench.specs.hardware import ClusterSpec, DType
from workbench.specs.model import AttentionKind, ModelSpec, NormKind
from workbench.specs.plan import ParallelPlan, Recompute, Workload
from workbench.validate_readings import apply_recipe_columns, read_arithmetic

GIB = 2**30
DEFAULT_DATA = profiles_dir() / "validation" / "training_public.csv"
"""A copy of the team's public validation set (shared/validation), kept in the repo so validate works anywhere."""

PLAN_DEFAULTS: dict[str, str] = {
    "micro_batch_size": (
        "pp > 1: the stack's default_microbatches rule; pp = 1 with the global batch given: the largest divisor"
        " of the data-parallel rank's batch whose step fits the device memory; else 1"
    ),
    "recompute": (
        "full when flops_definition is 'hardware' (Megatron eq. 3 counts recompute), else none; with no"
        " micro-batch either and pp = 1: full if its largest fitting micro-batch runs faster"
    ),
    "zero_stage": "0",
    "schedule": "interleaved-1f1b when vpp > 1, else 1f1b",
    "vpp": "1 (2 for an interleaved schedule)",
    "sequence_parallel": "tp > 1 when the framework profile's default_sequence_parallel is on",
    "framework": "the reference stack of the source's year when the framework text names no profile"
    " (megatron-lm-2021 for 2019-2022, else generic)",
    "dtype": "bf16",
    "vocab_size": "51200 (Megatron's padded GPT-2 vocabulary)",
    "ffn_hidden_size": "4 * hidden_size",
    "global_batch_size": (
        "dp * micro_batch_size * 2 * pp; a published one that dp x micro-batch does not divide: the nearest"
        " multiple (rows measured by step time keep it)"
    ),
    "cluster": "the device's DGX/HGX node (dgx-h100 for H100, dgx-a100 for A100)",
}

DEFAULT_CLUSTER = {
    "h100-sxm5-80gb": "dgx-h100",
    "a100-sxm4-80gb": "dgx-a100",
    "a100-sxm4-40gb": "dgx-a100",
    "h200-sxm-141gb": "dgx-h200",
    "b200-sxm-180gb": "dgx-b200",
    "h100-sxm5-96gb": "dgx-h100",
    "h800-sxm5-80gb": "hgx-h800",
    "h20-96gb": "hgx-h20",
    "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72",
}
"""The cluster a row of each device is priced on when its ``cluster`` is blank, or an ``other-*`` id that is
neither a preset nor described beside the CSV (listed in ``assumed`` as ``cluster`` or ``cluster:<id>``)."""

METRICS = (
    "measured_step_time_s",
    "measured_tokens_per_s_per_device",
    "measured_tflops_per_device",
    "measured_mfu",
)


class Unexpressible(ValueError):
    """A row the model cannot express; the message is the reason."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RowCase:
    """One row turned into specs, with the defaults it needed."""

    id: str
    source_key: str
    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    plan: ParallelPlan
    framework: FrameworkProfile
    assumed: tuple[str, ...]
    row: dict[str, str] = field(repr=False)


COLUMNS: tuple[str, ...] = (
    "id",
    "source_key",
    "source",
    "confidence",
    "notes",
    "model_name",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "ffn_hidden_size",
    "vocab_size",
    "seq_len",
    "gated_mlp",
    "num_experts",
    "experts_per_token",
    "moe_ffn_hidden_size",
    "num_shared_experts",
    "attention",
    "device",
    "num_devices",
    "devices_per_node",
    "cluster",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "sequence_parallel",
    "micro_batch_size",
    "global_batch_size",
    "recompute",
    "zero_stage",
    "schedule",
    "dtype",
    "framework",
    "measured_tflops_per_device",
    "measured_mfu",
    "measured_hfu",
    "measured_tokens_per_s_per_device",
    "measured_step_time_s",
    "measured_peak_memory_GiB",
    "flops_definition",
)
"""The columns of a validation file, in the order of ``training_public.csv`` (its README defines each one)."""


def _counts(maximum: int, *columns: str, minimum: int = 1) -> dict[str, tuple[bool, float, float, bool]]:
    return {c: (True, minimum, maximum, False) for c in columns}


NUMERIC_COLUMNS: dict[str, tuple[bool, float, float, bool]] = {
    **_counts(limits.MAX_LAYERS, "num_layers"),
    **_counts(limits.MAX_HIDDEN_SIZE, "hidden_size"),
    **_counts(limits.MAX_ATTENTION_HEADS, "num_attention_heads", "num_key_value_heads"),
    **_counts(limits.MAX_FFN_HIDDEN_SIZE, "ffn_hidden_size", "moe_ffn_hidden_size"),
    **_counts(limits.MAX_VOCAB_SIZE, "vocab_size"),
    **_counts(limits.MAX_SEQ_LEN, "seq_len"),
    **_counts(limits.MAX_EXPERTS, "num_experts", "experts_per_token"),
    **_counts(limits.MAX_EXPERTS, "num_shared_experts", minimum=0),
    **_counts(limits.MAX_DEVICES, "num_devices", "devices_per_node", "tp", "dp", "cp", "ep"),
    **_counts(limits.MAX_PP, "pp"),
    **_counts(limits.MAX_VPP, "vpp"),
    **_counts(limits.MAX_GLOBAL_BATCH_SIZE, "micro_batch_size", "global_batch_size"),
    **_counts(3, "zero_stage", minimum=0),
    "measured_tflops_per_device": (False, 0.0, 1e6, False),
    "measured_mfu": (False, 0.0, 1.0, False),
    "measured_hfu": (False, 0.0, 1.0, False),
    "measured_tokens_per_s_per_device": (False, 0.0, 1e12, False),
    "measured_step_time_s": (False, 0.0, 1e9, False),
    "measured_peak_memory_GiB": (False, 0.0, 2.0**20, False),
}
"""Numeric column -> (integer, lowest, highest, lowest allowed): what a filled cell may hold (blank always may).
Counts are integers in 1..their bound of ``workbench.specs.limits`` (``num_shared_experts`` and ``zero_stage``
from 0); measured values are finite and > 0, utilisations at most 1 (the other upper ends are far above any
device: 10^6 TFLOP/s, 10^12 tokens/s, 10^9 s, 1 PiB)."""


def _check_cell(value: str, integer: bool, low: float, high: float, low_ok: bool) -> str | None:
    """Why the cell ``value`` is not allowed (None when it is, or when it is blank)."""
    text = value.strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        return "is not a number"
    kind = "an integer" if integer else "a finite number"
    low_text = f">= {low:g}" if low_ok or integer else f"> {low:g}"
    allowed = f"must be {kind} {low_text} and <= {high:g}"
    if not math.isfinite(number) or (integer and number != int(number)):
        return allowed
    if number < low or (number == low and not (low_ok or integer)) or number > high:
        return allowed
    return None


def _check_unique_header(where: Path, header: Sequence[str]) -> None:
    """ValueError naming the columns that appear twice in ``header`` (csv.DictReader would keep the last)."""
    repeated = sorted(c for c, n in Counter(header).items() if n > 1)
    if repeated:
        names = ", ".join(limits.shown(c) for c in repeated[:5])
        raise ValueError(f"{where}: the header names a column more than once ({names}); each column once")


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The CSV rows as dicts. ValueError naming the file (and the line, row id, column and value) for: no data
    rows, more rows or columns than ``limits.MAX_VALIDATION_ROWS`` / ``MAX_CSV_COLUMNS`` (reading stops there), a
    missing column (``COLUMNS``), a duplicate id, a row with more or fewer cells than the header, a
    cell that is not CSV (e.g. longer than ``limits.MAX_CSV_FIELD_CHARS``), and a filled numeric cell outside
    its range (``NUMERIC_COLUMNS``: counts >= 1, measured values finite and > 0)."""
    where = check_input_file(path, "validation CSV file")
    with where.open(
        newline="", encoding="utf-8-sig"
    ) as fh:  # -sig: a byte-order mark (an Excel export) is read
        reader = csv.DictReader(fh)
        rows: list[dict[str, str]] = []
        lines: list[int] = []
        try:
            if len(reader.fieldnames or ()) > limits.MAX_CSV_COLUMNS:
                raise ValueError(
                    f"{where}: {len(reader.fieldnames or ()):,} columns; at most {limits.MAX_CSV_COLUMNS} "
                    "(MAX_CSV_COLUMNS in workbench/specs/limits.py)"
                )
            _check_unique_header(where, reader.fieldnames or ())
            for row in reader:
                if len(rows) >= limits.MAX_VALIDATION_ROWS:
                    raise ValueError(
                        f"{where}: more than {limits.MAX_VALIDATION_ROWS:,} rows "
                        "(MAX_VALIDATION_ROWS in workbench/specs/limits.py)"
                    )
                if None in row or None in row.values():  # DictReader's marks of too many or too few cells
                    raise ValueError(
                        f"{where}: line {reader.line_num}: the row has a different number of cells than the "
                        f"header ({len(reader.fieldnames or ())})"
                    )
                rows.append(normalised_cells(row, CODE_COLUMNS))
                lines.append(reader.line_num)
        except csv.Error as exc:
            raise ValueError(f"{where}: line {reader.line_num}: not a readable CSV row ({exc})") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not rows:
        raise ValueError(f"{where}: no data rows (a validation file needs a header and at least one row)")
    if not {"id", "source_key"} <= set(rows[0]):
        raise ValueError(f"{where}: not a validation file (needs id and source_key columns)")
    missing = [c for c in COLUMNS if c not in rows[0]]
    if missing:
        raise ValueError(
            f"{where}: missing column(s) {', '.join(missing)}; a validation file has the columns of "
            "profiles/validation/training_public.csv (see its README)"
        )
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: duplicate row ids")
    for row, line in zip(rows, lines, strict=True):
        for col, rule in NUMERIC_COLUMNS.items():
            problem = _check_cell(row.get(col, ""), *rule)
            if problem:
                raise ValueError(
                    f"{where}: line {line} (row {limits.shown(row['id'])}): column {col}: "
                    f"{limits.shown(row[col].strip())} {problem}"
                )
    return rows


CODE_COLUMNS = (
    "dtype",
    "recompute",
    "schedule",
    "attention",
    "gated_mlp",
    "sequence_parallel",
    "device",
    "cluster",
)
"""Columns of short codes: read case-insensitively (``FP8``, ``Full``, ``1F1B`` are the schema's codes)."""

BOOLEAN_COLUMNS = ("gated_mlp", "sequence_parallel")

SCHEDULE_ALIASES = {"pipedream-flush": "1f1b", "interleaved": "interleaved-1f1b", "zb-v": "zbv"}
"""Names papers give schedules, to the schema's codes: PipeDream-Flush is 1F1B with a flush (Narayanan et al.,
SC 2021, section 2.2.1), "interleaved" their interleaved 1F1B, ZB-V the zero-bubble V schedule (Qi et al.)."""


def _num(row: dict[str, str], key: str) -> float | None:
    v = (row.get(key) or "").strip()
    if not v:
        return None
    try:
        number = float(v)
    except ValueError:
        raise Unexpressible(f"column {key}: {limits.shown(v)} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise Unexpressible(f"column {key}: {limits.shown(v)} must be a finite number >= 0")
    return number


def _required(row: dict[str, str], key: str) -> int:
    v = _num(row, key)
    if v is None:
        raise Unexpressible(f"blank required column: {key}")
    if v < 1 or v != int(v):
        raise Unexpressible(f"column {key}: {v:g} must be an integer >= 1")
    return int(v)


def _int(row: dict[str, str], key: str, default: int | None, assumed: list[str], *, minimum: int = 1) -> int:
    v = _num(row, key)
    if v is None:
        if default is None:
            raise Unexpressible(f"{key} is blank and has no default")
        assumed.append(key)
        return default
    if v < minimum or v != int(v):
        raise Unexpressible(f"column {key}: {v:g} must be an integer >= {minimum}")
    return int(v)


SCHEMA_LESS_FIELDS = (
    "head_dim",
    "qkv_bias",
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
"""Architecture fields the CSV has no column for (head size when it is not hidden/heads, Qwen3's q/k norms,
banded attention, MLA's ranks, DeepSeekMoE's dense layers and routing groups, multi-token prediction): a row whose columns match a
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


def row_model(row: dict[str, str], assumed: list[str]) -> ModelSpec:
    """A ModelSpec from the architecture columns. The fields the CSV has no column for
    (``SCHEMA_LESS_FIELDS``) come from the model preset with the same architecture when there is one
    (listed in ``assumed`` as ``architecture:<preset>``), matched on the columns the row fills; that preset also
    fills the row's blank dense MLP size and vocabulary, a GQA row's blank key/value heads and an MoE row's blank
    top-k, expert size and shared experts (each listed in ``assumed``). Without a preset: head_dim = hidden /
    heads, a dense MLP of 4 x hidden, a 51,200-token vocabulary, key/value heads = heads, no shared experts,
    and MLA rows take DeepSeek-V3's ranks (``mla_dims``) with 3 dense layers when the row gives a dense MLP
    size; an MoE row without top-k or expert size is Unexpressible."""
    h, a = _required(row, "hidden_size"), _required(row, "num_attention_heads")
    attention = row["attention"] or "mha"
    gated = row["gated_mlp"] == "true"
    experts = int(_num(row, "num_experts") or 0)
    expert_cols = ("experts_per_token", "moe_ffn_hidden_size", "num_shared_experts") if experts else ()
    unknown = tuple(c for c in expert_cols if _num(row, c) is None)
    if attention == "gqa" and _num(row, "num_key_value_heads") is None:
        unknown += ("num_key_value_heads",)
    kv = int(_num(row, "num_key_value_heads") or a)
    extra: dict[str, Any] = {c: int(_num(row, c) or 0) for c in expert_cols}
    if experts:
        extra["num_experts"] = experts
    base = {
        "name": row["model_name"] or row["id"],
        "num_layers": _required(row, "num_layers"),
        "hidden_size": h,
        "num_attention_heads": a,
        "num_key_value_heads": kv if attention != "mla" else a,
        "head_dim": h // a,
        "ffn_hidden_size": int(_num(row, "ffn_hidden_size") or 0),
        "vocab_size": int(_num(row, "vocab_size") or 0),
        "gated_mlp": gated,
        "tied_embeddings": not gated,
        "attention": AttentionKind(attention),
        "norm": NormKind.RMSNORM if gated else NormKind.LAYERNORM,
        "linear_bias": not gated,
    }
    blank = [c for c in _FILLED_FROM_PRESET if _num(row, c) is None]
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
    return ModelSpec(**{**base, **extra})


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
    n = _required(row, "num_devices")
    per_node = cluster.devices_per_node
    if n % per_node and n >= per_node:
        raise Unexpressible(f"{n} devices are not whole nodes of {per_node}")
    return dataclasses.replace(
        cluster, device=device, num_nodes=max(n // per_node, 1), devices_per_node=min(per_node, n)
    )


ARCHITECTURE = ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "device", "num_devices")
"""Columns without which a row cannot be priced (no default is sensible)."""


def row_framework(
    row: dict[str, str], assumed: list[str], override: FrameworkProfile | None = None
) -> FrameworkProfile:
    """``override``, else the profile the row's framework text names in its source's year (alias or keyword), else
    the default profile of that year (:func:`workbench.presets.frameworks.default_framework`)."""
    if override is not None:
        return override
    year = source_year(row.get("source", ""))
    prof = profile_for_text(row.get("framework", ""), year=year)
    if prof is None:
        assumed.append("framework")
        return default_framework(year)
    return prof


def row_degrees(
    row: dict[str, str], n: int, per_node: int, heads: int, assumed: list[str]
) -> tuple[int, int, int, int]:
    """(dp, tp, pp, cp) of a row on ``n`` devices, filling blank degrees so that dp*tp*pp*cp = n:

    - dp blank: the devices the other degrees leave (blank tp and pp are 1, blank cp is 1);
    - dp given and one of tp, pp blank: the devices the given degrees leave;
    - dp given and both blank: tensor parallelism fills a node (up to ``per_node`` and dividing the ``heads``)
      and pipeline stages take the rest, the layout Narayanan et al. (SC 2021, section 3.3, takeaway 1)
      prescribe: tensor parallelism up to the GPUs of a server, pipeline parallelism across servers.

    A blank cp is 1 (the schema's fixed reading: no context parallelism). Each other filled degree is listed in
    ``assumed``. Raises Unexpressible when the given degrees do not divide ``n``."""
    keys = ("dp", "tp", "pp", "cp")
    given = {k: _int(row, k, 0, [], minimum=1) if _num(row, k) is not None else None for k in keys}
    known = math.prod(v for v in given.values() if v is not None)
    if n % known:
        named = ", ".join(f"{k}={v}" for k, v in given.items() if v is not None)
        raise Unexpressible(f"num_devices {n} is not a multiple of the given degrees ({named})")
    left = n // known
    dp, tp, pp, cp = given.values()
    if dp is None:
        tp, pp, cp, dp = tp or 1, pp or 1, cp or 1, left
    elif tp is None and pp is None:
        tp = max(t for t in range(1, min(per_node, left) + 1) if left % t == 0 and heads % t == 0)
        pp, cp = left // tp, cp or 1
    elif tp is None or pp is None:
        tp, pp, cp = tp or left, pp or left, cp or 1
    assumed.extend(k for k, v in given.items() if v is None and k != "cp")
    return dp, tp, pp, cp or 1


def row_case(
    row: dict[str, str], *, framework: FrameworkProfile | None = None, data_dir: Path | None = None
) -> RowCase:
    """Specs for one row; raises Unexpressible with the reason. ``framework`` overrides the row's own."""
    assumed: list[str] = []
    blank = [k for k in ARCHITECTURE if not row.get(k, "").strip()]
    if blank:
        raise Unexpressible(f"blank required column(s): {', '.join(blank)}")
    if not row["tp"] and not row["dp"] and not row["pp"]:
        raise Unexpressible("the source gives no parallel plan (tp, pp, dp blank)")
    for col in BOOLEAN_COLUMNS:
        if row.get(col, "") not in ("", "true", "false"):
            raise Unexpressible(f"column {col}: {limits.shown(row[col])} is not true or false")
    fw = apply_recipe_columns(row, row_framework(row, assumed, framework))
    model = row_model(row, assumed)
    cluster = row_cluster(row, assumed, data_dir)
    n = _required(row, "num_devices")
    dp, tp, pp, cp = row_degrees(row, n, cluster.devices_per_node, model.num_attention_heads, assumed)
    schedule = SCHEDULE_ALIASES.get(row["schedule"], row["schedule"])
    stages = default_vpp(schedule) if schedule in REGISTRY else 1  # V schedules hold 2 stages per rank
    vpp = _int(row, "vpp", stages, assumed) if pp > 1 else 1
    if not schedule:
        schedule = "interleaved-1f1b" if vpp > 1 else "1f1b"
        if pp > 1:
            assumed.append("schedule")
    mbs = _int(row, "micro_batch_size", _default_mbs(row, fw, dp=dp, stages=pp * vpp), assumed)
    reading = read_arithmetic(row, model, cluster.device, seq_len=_required(row, "seq_len"), num_devices=n)
    assumed.extend(reading.notes)
    recompute = (
        row["recompute"] or reading.recompute or ("full" if row["flops_definition"] == "hardware" else "none")
    )
    if not row["recompute"]:
        assumed.append("recompute")
    if row["sequence_parallel"]:
        sp = row["sequence_parallel"] == "true"
    else:
        sp = tp > 1 and fw.default_sequence_parallel
        assumed.append("sequence_parallel")
    per_rank = (pp * vpp if fw.default_microbatches == "stages" else 2 * pp) if pp > 1 else 1
    gbs = _int(row, "global_batch_size", dp * mbs * per_rank, assumed)
    gbs = _whole_micro_batches(row, gbs, dp * mbs, assumed)
    dtype = row["dtype"] or reading.dtype or "bf16"
    if not row["dtype"]:
        assumed.append("dtype")
    if model.num_layers % (pp * vpp):
        assumed.append("uneven_layers")
    plan = ParallelPlan(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=int(_num(row, "ep") or 1),
        vpp=vpp,
        micro_batch_size=mbs,
        zero_stage=_int(row, "zero_stage", 0, assumed, minimum=0),
        sequence_parallel=sp,
        recompute=Recompute(recompute),
        schedule=schedule,
    )
    workload = Workload(seq_len=_required(row, "seq_len"), global_batch_size=gbs, dtype=DType(dtype))
    if not row["micro_batch_size"] and pp == 1 and _num(row, "global_batch_size") is not None:
        plan = _largest_fitting_micro_batch(model, cluster, workload, plan, fw)
        if not row["recompute"] and recompute == "none":
            plan = _tuned_recompute(model, cluster, workload, plan, fw, assumed)
    outside = fw.unsupported(plan, dtype=dtype)
    if outside:
        # The run happened: a profile's feature list (what the planner offers) never refuses it.
        assumed.append(f"framework:{fw.id} widened to run " + "; ".join(outside))
        fw = fw.admitting(plan, dtype=dtype)
    return RowCase(
        id=row["id"],
        source_key=row["source_key"],
        model=model,
        cluster=cluster,
        workload=workload,
        plan=plan,
        framework=fw,
        assumed=tuple(assumed),
        row=row,
    )


def _whole_micro_batches(row: dict[str, str], gbs: int, replica_batch: int, assumed: list[str]) -> int:
    """The global batch a row is priced with: the published one, or, when the data-parallel ranks cannot split
    it into whole micro-batches (a source that rounds its batch, e.g. "2M tokens" over 124 replicas), the
    nearest multiple of dp x micro-batch (``replica_batch``), listed in ``assumed``. Tokens per second and
    FLOP/s per device do not depend on how many micro-batches a step has without pipeline stages and barely
    with them; a step time does, so a row measured by its step time keeps the published batch (and is refused
    as infeasible)."""
    if gbs % replica_batch == 0 or _num(row, "measured_step_time_s") is not None:
        return gbs
    whole = max(round(gbs / replica_batch), 1) * replica_batch
    assumed.append(f"global_batch_size:{whole} (published {gbs}, not a multiple of dp x micro-batch)")
    return whole


def _tuning_calibration(plan: ParallelPlan, fw: FrameworkProfile, workload: Workload) -> Calibration:
    """The calibration a row's plan is tuned with (micro-batch, recompute): the default fit, ``fw`` admitting
    ``plan``."""
    from workbench.presets.calibration import load_calibration

    return load_calibration().with_framework(fw.admitting(plan, dtype=str(workload.dtype)))


def _largest_fitting_micro_batch(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan, fw: FrameworkProfile
) -> ParallelPlan:
    """``plan`` with the largest micro-batch that divides the data-parallel rank's batch and whose predicted
    peak memory fits the device: a run without pipeline stages that names no micro-batch accumulates no more
    gradient steps than memory forces (fewer, larger GEMMs), as tuned published runs do. ``plan`` itself
    when no larger one fits or the batch does not split evenly."""
    from workbench.estimate.analytic import estimate_plan

    replicas = plan.dp * plan.cp
    local = workload.global_batch_size // replicas
    if local <= 1 or workload.global_batch_size % replicas:
        return plan
    cal = _tuning_calibration(plan, fw, workload)
    for mbs in sorted((d for d in range(2, local + 1) if local % d == 0), reverse=True):
        candidate = dataclasses.replace(plan, micro_batch_size=mbs)
        try:
            est = estimate_plan(
                model, cluster, workload, candidate, calibration=cal, allow_uneven_layers=True
            )
        except ValueError:
            continue
        if est.fits:
            return candidate
    return plan


def _tuned_recompute(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    plan: ParallelPlan,
    fw: FrameworkProfile,
    assumed: list[str],
) -> ParallelPlan:
    """A run without pipeline stages that names neither its micro-batch nor its recompute: ``plan`` (no
    recompute at the largest micro-batch that fits) or full recompute at the largest micro-batch that fits
    with it, whichever the model prices faster, as a tuned run would choose; full recompute is listed in
    ``assumed``. (Sharded runs at small micro-batches are bound by their per-layer gathers; recomputing lets a
    larger micro-batch fit and hide them: OPT-175B's 124-way FSDP at one sequence per rank.)"""
    from workbench.estimate.analytic import estimate_plan

    full = _largest_fitting_micro_batch(
        model, cluster, workload, dataclasses.replace(plan, recompute=Recompute.FULL), fw
    )
    cal = _tuning_calibration(plan, fw, workload)
    try:
        kept, redone = (
            estimate_plan(model, cluster, workload, p, calibration=cal, allow_uneven_layers=True)
            for p in (plan, full)
        )
    except ValueError:
        return plan
    if redone.fits and (not kept.fits or redone.tokens_per_s > kept.tokens_per_s):
        assumed.append(f"recompute:full (micro-batch {full.micro_batch_size} fits with it and runs faster)")
        return full
    return plan


def _default_mbs(row: dict[str, str], fw: FrameworkProfile, *, dp: int, stages: int) -> int:
    """The micro-batch size of a row that gives none: the stack's ``default_microbatches`` rule (``stages``:
    the data-parallel rank's batch split into pp x vpp micro-batches, when the row gives the global batch and
    pp > 1), else 1."""
    gbs = _num(row, "global_batch_size")
    if fw.default_microbatches == "stages" and stages > 1 and gbs is not None and dp > 0:
        local = int(gbs) // dp
        if local % stages == 0 and local >= stages:
            return local // stages
    return 1


def predicted_metric(case: RowCase, est: Any, metric: str) -> float:
    """The estimate expressed in the row's metric (see the module docstring)."""
    n = case.plan.num_devices
    definition = case.row.get("flops_definition", "")
    if metric == "measured_step_time_s":
        return float(est.step_time_s)
    if metric == "measured_tokens_per_s_per_device":
        return float(est.tokens_per_s / n)
    flop_per_s = (
        est.model_flop_per_s_per_device
        if definition.startswith("model")
        else (est.hfu * case.cluster.device.peak(case.workload.dtype))
    )
    if metric == "measured_tflops_per_device":
        return float(flop_per_s / 1e12)
    peak_dtype = DType.FP8 if "fp8-peak" in definition else DType.BF16
    return float(est.model_flop_per_s_per_device / case.cluster.device.peak(peak_dtype))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def reported_memory_framework(fw: FrameworkProfile) -> FrameworkProfile:
    """``fw`` with the memory allowances its report does not count (see ``MEMORY_REPORTS``)."""
    if fw.memory_report == "allocated":
        return dataclasses.replace(fw, fragmentation_frac=0.0, context_bytes=0.0)
    if fw.memory_report == "reserved":
        return dataclasses.replace(fw, context_bytes=0.0)
    return fw


@dataclass
class Prepared:
    """Rows turned into cases once (fitting re-prices them many times)."""

    cases: list[RowCase]
    skipped: list[dict[str, Any]]


def prepare(
    rows: list[dict[str, str]],
    *,
    framework: FrameworkProfile | str | None = None,
    data_dir: Path | None = None,
) -> Prepared:
    """Every row as a RowCase, or a skipped entry (id, source_key, reason)."""
    override = load_framework(framework) if framework is not None else None
    cases, skipped = [], []
    for row in rows:
        try:
            cases.append(row_case(row, framework=override, data_dir=data_dir))
        except (ValueError, LookupError) as exc:
            skipped.append(
                {"id": row["id"], "source_key": row["source_key"], "reason": " ".join(str(exc).split())}
            )
    return Prepared(cases, skipped)


def score_case(case: RowCase, cal: Calibration) -> dict[str, Any]:
    """Predicted vs measured for one case under ``cal`` (its framework replaced by the case's, with the
    group's fitted constants). Raises ValueError for an infeasible plan."""
    from workbench.estimate.analytic import estimate_plan

    row = case.row
    run_cal = cal.with_framework(case.framework)
    run_cal = dataclasses.replace(run_cal, framework=reported_memory_framework(run_cal.framework))
    est = estimate_plan(
        case.model, case.cluster, case.workload, case.plan, calibration=run_cal, allow_uneven_layers=True
    )
    metric = next((m for m in METRICS if _num(row, m) is not None), None)
    item: dict[str, Any] = {
        "id": case.id,
        "source_key": case.source_key,
        "framework": case.framework.id,
        "metric": metric,
        "predicted": None,
        "measured": None,
        "ape": None,
        "assumed": list(case.assumed),
        "plan": case.plan.describe(),
    }
    if metric is not None:
        measured = float(_num(row, metric))  # type: ignore[arg-type]
        predicted = predicted_metric(case, est, metric)
        item.update(predicted=predicted, measured=measured, ape=abs(predicted - measured) / measured)
    item.update(fit_verdict(est, cal.with_framework(case.framework).framework, run_cal.framework))
    mem = _num(row, "measured_peak_memory_GiB")
    # a memory figure above the device's capacity was computed, never run (Korthikanti's Fig. 1 baselines)
    item["ran"] = mem is None or mem * GIB <= est.memory_capacity_bytes
    if mem is not None:
        pred_mem = est.peak_memory_bytes / GIB
        item.update(
            predicted_memory_GiB=pred_mem, measured_memory_GiB=mem, memory_ape=abs(pred_mem - mem) / mem
        )
    return item


def fit_verdict(est: Any, plan_fw: FrameworkProfile, reported_fw: FrameworkProfile) -> dict[str, Any]:
    """Whether the published plan fits by the planner's own rule (``Estimate.fits``: the whole device need
    within the usable memory, ``DEFAULT_HEADROOM_FRAC``): ``fits``, ``predicted_need_GiB`` (the peak rank's
    tensors plus ``plan_fw``'s fragmentation share and context) and ``usable_GiB``. ``est`` was priced with
    ``reported_fw``, which counts what the source's memory report counts (``reported_memory_framework``); the
    tensors are the same, so the need follows in closed form. A published run that ran and is called
    non-fitting is a memory-model failure to explain, not a plan to reject."""
    counted = (est.peak_memory_bytes - reported_fw.context_bytes) / (1.0 + reported_fw.fragmentation_frac)
    need = counted * (1.0 + plan_fw.fragmentation_frac) + plan_fw.context_bytes
    usable = est.memory_capacity_bytes * (1.0 - DEFAULT_HEADROOM_FRAC)
    return {"fits": bool(need <= usable), "predicted_need_GiB": need / GIB, "usable_GiB": usable / GIB}


def score(prepared: Prepared, cal: Calibration) -> dict[str, Any]:
    """Score every prepared case; infeasible plans join ``skipped``. The summary of :func:`_summarise`."""
    out, skipped = [], list(prepared.skipped)
    for case in prepared.cases:
        try:
            out.append(score_case(case, cal))
        except (ValueError, LookupError) as exc:
            skipped.append(
                {"id": case.id, "source_key": case.source_key, "reason": " ".join(str(exc).split())}
            )
    return _summarise(out, skipped)


def validate_rows(
    rows: list[dict[str, str]],
    *,
    calibration: Calibration,
    framework: FrameworkProfile | str | None = None,
    data_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the analytic model on every row. Returns the JSON object ``workbench validate --json`` prints:
    rows (id, source_key, framework, metric, predicted, measured, ape, assumed, plus memory fields), skipped
    (id, reason), mape, mape_by_source, memory_mape, memory_mape_by_source, defaults, constants."""
    prepared = prepare(rows, framework=framework, data_dir=data_dir)
    result = score(prepared, calibration)
    result["constants"] = constants_table(calibration, prepared)
    return result


FIT_GRID: dict[str, tuple[float, ...]] = {
    "kernel_efficiency_frac": (0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0),
    "host_overhead_per_layer_s": (0.0, 2.5e-5, 5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4, 4e-4, 6e-4, 8e-4),
    "comm_interference_frac": (0.0, 0.05, 0.1, 0.2, 0.3, 0.5),
    "fp8_matmul_scale": (0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "host_s_per_kernel": (5e-6, 1e-5, 1.5e-5, 2e-5, 3e-5, 4e-5, 6e-5),
}
"""Physical range searched for each fittable constant (fractions; seconds per layer; compute seconds lost per
hidden communication second; FP8 rate ratio)."""

FIT_ROWS_PER_SOURCE = 12
"""A fit prices at most this many rows of each source (spread evenly over the source's rows), so that no
large source outweighs the others and leave-one-source-out stays fast."""

_SWEEPS = 2

_DIAGONAL_ROUNDS = 8
"""At most this many rounds of diagonal steps after the sweeps (each round tries every pair of constants)."""


def _throughput_mape(cases: list[RowCase], cal: Calibration) -> float:
    apes = []
    for case in cases:
        try:
            ape = score_case(case, cal)["ape"]
        except (ValueError, LookupError):
            continue
        if ape is not None:
            apes.append(ape)
    return sum(apes) / len(apes) if apes else 0.0


def _fit_sample(cases: list[RowCase]) -> list[RowCase]:
    by_source: dict[str, list[RowCase]] = {}
    for case in cases:
        if any(_num(case.row, m) is not None for m in METRICS):
            by_source.setdefault(case.source_key, []).append(case)
    out = []
    for members in by_source.values():
        step = max(1.0, len(members) / FIT_ROWS_PER_SOURCE)
        out += [members[int(i * step)] for i in range(min(len(members), FIT_ROWS_PER_SOURCE))]
    return out


def _coordinate_search(
    cases: list[RowCase], names: list[str], start: dict[str, float], cal_with: Any
) -> dict[str, float]:
    """Minimise the throughput MAPE of ``cases`` over ``FIT_GRID``: ``_SWEEPS`` sweeps that try every grid value
    of one constant at a time, then diagonal steps (two constants one grid point each, every sign) until none
    helps. Coupled constants (a kernel efficiency and a per-layer host overhead trade against each other)
    leave one-at-a-time sweeps stuck where moving either alone costs, which the diagonal steps get out of."""
    values = dict(start)
    best = _throughput_mape(cases, cal_with(values))

    def tried(trial: dict[str, float]) -> bool:
        nonlocal best, values
        err = _throughput_mape(cases, cal_with(trial))
        if err < best - 1e-6:
            best, values = err, trial
            return True
        return False

    for _ in range(_SWEEPS):
        for name in names:
            for candidate in FIT_GRID[name]:
                if candidate != values[name]:
                    tried({**values, name: candidate})
    for _ in range(_DIAGONAL_ROUNDS):
        moved = False
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                ga, gb = FIT_GRID[a], FIT_GRID[b]
                for da, db in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                    ia, ib = _grid_index(ga, values[a]) + da, _grid_index(gb, values[b]) + db
                    if 0 <= ia < len(ga) and 0 <= ib < len(gb):
                        moved = tried({**values, a: ga[ia], b: gb[ib]}) or moved
        if not moved:
            break
    return values


def _grid_index(grid: tuple[float, ...], value: float) -> int:
    """The grid point nearest ``value`` (a start value between grid points counts as its nearest)."""
    return min(range(len(grid)), key=lambda i: abs(grid[i] - value))


def fit_constants(cases: list[RowCase], calibration: Calibration) -> dict[str, dict[str, float]]:
    """Fit the profiles' ``fitted`` constants to ``cases`` (throughput MAPE, ``_coordinate_search``: sweeps and
    diagonal steps over ``FIT_GRID``, on at most ``FIT_ROWS_PER_SOURCE`` rows per source): first the
    ``POOLED`` constants as one value over every stack (group ``pooled``), then each fit group's own constants
    starting from those.
    Groups absent from ``cases`` are not in the result: they get the pooled values (and their priors for
    the rest)."""
    from workbench.presets.calibration import POOLED_GROUP
    from workbench.specs.framework import POOLED

    sample = _fit_sample(cases)
    pooled_names = [n for n in POOLED if any(n in c.framework.fitted for c in sample)]
    prior = {n: float(getattr(load_framework(UNNAMED_STACK_FRAMEWORK), n)) for n in pooled_names}

    def pooled_cal(vals: dict[str, float]) -> Calibration:
        return dataclasses.replace(calibration, fits={POOLED_GROUP: dict(vals)})

    pooled = _coordinate_search(sample, pooled_names, prior, pooled_cal) if sample else prior
    fits: dict[str, dict[str, float]] = {POOLED_GROUP: pooled}
    groups: dict[str, list[RowCase]] = {}
    for case in sample:
        groups.setdefault(case.framework.group, []).append(case)
    for group, members in sorted(groups.items()):
        names = sorted({f for c in members for f in c.framework.fitted})
        start = {n: pooled.get(n, float(getattr(members[0].framework, n))) for n in names}

        def cal_with(vals: dict[str, float], g: str = group) -> Calibration:
            return dataclasses.replace(calibration, fits={POOLED_GROUP: pooled, g: dict(vals)})

        fits[group] = _coordinate_search(members, names, start, cal_with)
    return fits


def constants_table(calibration: Calibration, prepared: Prepared) -> list[dict[str, Any]]:
    """The fitted constants in use: one entry per (framework profile of the rows, fitted field)."""
    seen = {c.framework.id: c.framework for c in prepared.cases}
    out = []
    for fid, prof in sorted(seen.items()):
        applied = calibration.with_framework(prof).framework
        for name in prof.fitted:
            fitted = name in calibration.fits.get(prof.group, {})
            out.append(
                {
                    "framework": fid,
                    "group": prof.group,
                    "constant": name,
                    "value": getattr(applied, name),
                    "prior": getattr(prof, name),
                    "fitted": fitted,
                }
            )
    return out


def cross_validate(prepared: Prepared, calibration: Calibration) -> dict[str, Any]:
    """Leave-one-source-out: for each source, fit every constant on the other sources' rows (pooled values
    included) and score that source with them. Returns the summary of the out-of-sample predictions
    (top-level keys as :func:`validate_rows`) with ``in_sample`` (the same keys for the fit on all rows),
    ``folds`` (per source: the constants it was scored with), ``fits`` and ``constants`` (the in-sample
    fit)."""
    base = dataclasses.replace(calibration, fits={})
    full = fit_constants(prepared.cases, base)
    in_sample_cal = dataclasses.replace(base, fits=full)
    in_sample = score(prepared, in_sample_cal)
    out_rows, skipped, folds = [], list(prepared.skipped), {}
    for source in sorted({c.source_key for c in prepared.cases}):
        train = [c for c in prepared.cases if c.source_key != source]
        test = [c for c in prepared.cases if c.source_key == source]
        fits = fit_constants(train, base)
        folds[source] = fits
        fold = score(Prepared(test, []), dataclasses.replace(base, fits=fits))
        out_rows += fold["rows"]
        skipped += fold["skipped"]
    result = _summarise(out_rows, skipped)
    result["in_sample"] = {
        k: in_sample[k] for k in ("mape", "mape_by_source", "memory_mape", "memory_mape_by_source")
    }
    result["folds"] = folds
    result["fits"] = full
    result["constants"] = constants_table(in_sample_cal, prepared)
    return result


def _summarise(rows: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> dict[str, Any]:
    sources = sorted({r["source_key"] for r in rows})
    by_source = {
        s: _mean([r["ape"] for r in rows if r["source_key"] == s and r["ape"] is not None]) for s in sources
    }
    mem_by_source = {
        s: _mean([r["memory_ape"] for r in rows if r["source_key"] == s and "memory_ape" in r])
        for s in sources
    }
    return {
        "rows": rows,
        "skipped": skipped,
        "mape": _mean([r["ape"] for r in rows if r["ape"] is not None]),
        "mape_by_source": {k: v for k, v in by_source.items() if v is not None},
        "memory_mape": _mean([r["memory_ape"] for r in rows if "memory_ape" in r]),
        "memory_mape_by_source": {k: v for k, v in mem_by_source.items() if v is not None},
        "not_fitting": [
            {k: r[k] for k in ("id", "plan", "predicted_need_GiB", "usable_GiB")}
            for r in rows
            if not r.get("fits", True) and r.get("ran", True)
        ],
        "defaults": PLAN_DEFAULTS,
    }


def run_validation(
    path: str | Path = DEFAULT_DATA,
    *,
    calibration: Calibration | str = "default",
    framework: FrameworkProfile | str | None = None,
    cv: str | None = None,
    kernels: str | Path | None = None,
) -> dict[str, Any]:
    """Validate the CSV at ``path``: with ``cv=None`` price every row with ``calibration`` (a Calibration or
    fitted-constants file name); with ``cv="source"`` run :func:`cross_validate` (the file's fitted
    constants are ignored: they are refitted per fold). ``framework`` forces one profile on every row;
    ``kernels`` adds a kernel table (file or microbench folder)."""
    from workbench.presets.calibration import load_calibration

    if cv not in (None, "source"):
        raise ValueError(f"cv must be 'source' (leave one source out), got {cv!r}")
    cal = (
        calibration
        if isinstance(calibration, Calibration)
        else load_calibration(calibration, kernels=kernels)
    )
    rows = read_rows(path)
    data_dir = Path(path).parent
    if cv is None:
        return validate_rows(rows, calibration=cal, framework=framework, data_dir=data_dir)
    return cross_validate(prepare(rows, framework=framework, data_dir=data_dir), cal)


def write_fits(path: str | Path, fits: dict[str, dict[str, float]], *, source: str) -> Path:
    """Write fitted constants in the ``profiles/calibration`` format (the caller decides about overwriting)."""
    import tomli_w

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(tomli_w.dumps({"source": source, "fit": fits}).encode())
    return target
