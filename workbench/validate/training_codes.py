"""The short codes of a training validation row as other sources write them, read to the schema's codes
(``shared/validation/README.md``, "Enumerated values" and "Device ids"): ``bfloat16`` is ``bf16``, ``ZeRO-3`` and
``FULL_SHARD`` are zero stage ``3``, ``PipeDream-Flush`` is ``1f1b``, ``NVIDIA H100 80GB HBM3`` is
``h100-sxm5-80gb``. :func:`read_codes` returns the row with every code column in the schema's form and one note
per cell it had to read (for the row's ``assumed``); a cell it cannot read is an ``Unexpressible`` naming the
column, the value and what is allowed (:func:`workbench.validate.training_csv.read_rows` turns it into an error
naming the file and the row)."""

from __future__ import annotations

import re

from workbench.specs import limits
from workbench.validate.rows import Unexpressible

CODES: dict[str, tuple[str, ...]] = {
    "dtype": ("bf16", "fp16", "fp8"),
    "recompute": ("none", "selective", "full"),
    "zero_stage": ("0", "1", "2", "3"),
    "attention": ("mha", "gqa", "mla"),
    "gated_mlp": ("true", "false"),
    "sequence_parallel": ("true", "false"),
    "flops_definition": ("model", "hardware", "unknown", "model+fp8-peak", "hardware+fp8-peak"),
}
"""The schema's codes per column (the README's "Enumerated values"; ``flops_definition`` may carry the
``+fp8-peak`` suffix)."""


def code_words(text: str) -> set[str]:
    """The lower-case words (runs of letters and digits) of a cell: ``'FP8 (E4M3)'`` -> {fp8, e4m3}."""
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def compact_code(text: str) -> str:
    """A cell in lower-case letters, digits and ``+`` only: ``'Closed-loop'`` -> ``closedloop``."""
    return re.sub(r"[^a-z0-9+]", "", text.lower())


FP8_WORDS = {"fp8", "float8", "e4m3", "e5m2", "mxfp8", "hybrid"}
"""Words that name FP8 GEMMs: Transformer Engine's formats (``E4M3``, ``HYBRID`` = E4M3 forward, E5M2 backward:
transformer_engine/common/recipe ``Format``), torchao's ``float8``, MXFP8."""

FP8_RECIPE_WORDS = {
    "mxfp8": "mxfp8",
    "mx": "mxfp8",
    "current": "current",
    "cs": "current",
    "delayed": "delayed",
    "ds": "delayed",
    "blockwise": "blockwise",
    "tensorwise": "tensorwise",
    "rowwise": "rowwise",
}
"""A word of an FP8 dtype spelling that names its scaling recipe (``FP8_RECIPES``): "FP8 current scaling",
"MXFP8", torchao's "float8 rowwise"; it fills a blank ``fp8_recipe``."""

UNPRICED_DTYPE_WORDS = {"fp4", "nvfp4", "mxfp4", "float4", "fp6", "mxfp6"}
"""4- and 6-bit training GEMMs: read, but the training model has no price for them (the row is skipped)."""


def read_dtype(text: str) -> tuple[str, str | None]:
    """(dtype code, FP8 recipe the spelling names or None) of a dtype spelling: any FP8 word (``FP8_WORDS``) is
    ``fp8`` (the README's code for FP8 linear GEMMs with the rest in BF16); ``bfloat16``, ``bf16-mixed``,
    ``amp_bf16`` are ``bf16``; ``float16``, ``half``, ``16-mixed`` (Lightning) are ``fp16``; ``fp32``,
    ``float32``, ``tf32`` are ``fp32``; 4/6-bit spellings read as ``fp4`` (not priced). Unexpressible naming the
    allowed codes otherwise."""
    words = code_words(text)
    if words & FP8_WORDS:
        recipes = {FP8_RECIPE_WORDS[w] for w in words if w in FP8_RECIPE_WORDS}
        return "fp8", recipes.pop() if len(recipes) == 1 else None
    if words & UNPRICED_DTYPE_WORDS:
        return "fp4", None
    for code, names in (
        ("bf16", {"bf16", "bfloat16"}),
        ("fp16", {"fp16", "float16", "half", "16"}),
        ("fp32", {"fp32", "float32", "tf32", "32"}),
    ):
        if words & names:
            return code, None
    raise Unexpressible(
        refused_code("dtype", text, "bf16, fp16, fp8 (or bfloat16, float16, FP8 E4M3, MXFP8, ...)")
    )


RECOMPUTE_WORDS = {
    "none": {"none", "no", "false", "off", "disabled", "0"},
    "full": {"full"},
    "selective": {"selective", "sac", "op", "layer", "attention", "attn", "core"},
    "full_": {"true", "yes", "on", "enabled", "1", "ac", "checkpointing", "recompute", "recomputation", "uniform",
              "block", "gradient", "activation"},
}  # fmt: skip
"""Words of a recompute spelling, tried in this order: a negation is ``none``; ``full`` is full; the README's
``selective`` covers Megatron's selective (``core_attn``) and torchtitan's selective op/layer AC (``op``,
``layer``); any other word of activation checkpointing (``true``, ``AC``, Megatron's ``--recompute-method``
``uniform``/``block``, which apply to full granularity) is full activation checkpointing."""


def read_recompute(text: str) -> str:
    """The recompute code of a spelling (``RECOMPUTE_WORDS``). Unexpressible naming the allowed codes."""
    words = code_words(text)
    for code, names in RECOMPUTE_WORDS.items():
        if words & names:
            return code.rstrip("_")
    raise Unexpressible(
        refused_code("recompute", text, "none, selective, full (or AC, activation checkpointing, ...)")
    )


ZERO_STAGE_NAMES = {
    "ddp": "0",
    "noshard": "0",
    "none": "0",
    "no": "0",
    "distributedoptimizer": "1",
    "distopt": "1",
    "shardgradop": "2",
    "hybridshardzero2": "2",
    "fullshard": "3",
    "hybridshard": "3",
    "fsdp": "3",
    "fsdp1": "3",
    "fsdp2": "3",
    "fullyshard": "3",
    "megatronfsdp": "3",
}
"""Names of sharding modes (punctuation and case dropped) -> ZeRO stage, the README's table: DDP / FSDP
``NO_SHARD`` 0; Megatron's distributed optimizer 1; FSDP ``SHARD_GRAD_OP`` (and ``_HYBRID_SHARD_ZERO2``) 2;
FSDP ``FULL_SHARD`` / ``HYBRID_SHARD`` (full sharding inside the shard group, which ``dp`` counts), FSDP2
``fully_shard`` and a bare "FSDP" (PyTorch's default ``ShardingStrategy.FULL_SHARD``) 3."""


def read_zero_stage(text: str) -> str:
    """The ZeRO stage (``0``..``3``) of a spelling: a number as it is (its range is checked with the numeric
    columns), ``ZeRO-3``, ``zero_stage 2``, ``Z1``, ``stage 3`` by their digit, a sharding mode by
    ``ZERO_STAGE_NAMES``. Unexpressible naming the allowed values otherwise."""
    compact = compact_code(text)
    if re.fullmatch(r"[0-9.eE+-]+", text.strip()):
        return text.strip()
    match = re.fullmatch(r"(?:deepspeed)?(?:zero(?:stage)?|z|stage)([0-3])", compact)
    if match:
        return match.group(1)
    if compact in ZERO_STAGE_NAMES:
        return ZERO_STAGE_NAMES[compact]
    raise Unexpressible(
        refused_code("zero_stage", text, "0..3 (or ZeRO-1, DDP, FULL_SHARD, SHARD_GRAD_OP, ...)")
    )


SCHEDULE_NAMES = {
    "pipedreamflush": "1f1b",
    "1f1bpipedreamflush": "1f1b",
    "oneforwardonebackward": "1f1b",
    "interleaved": "interleaved-1f1b",
    "1f1binterleaved": "interleaved-1f1b",
    "interleavedpipeline": "interleaved-1f1b",
    "virtualpipeline": "interleaved-1f1b",
    "zb1p": "zb-h1",
    "zb2p": "zb-h2",
    "zerobubbleh1": "zb-h1",
    "zerobubbleh2": "zb-h2",
    "zbvzerobubble": "zbv",
    "zerobubblev": "zbv",
}
"""Other names of the registry's schedules (punctuation and case dropped): PipeDream-Flush is 1F1B with a flush
(Narayanan et al., SC 2021, section 2.2.1), "interleaved" / virtual pipeline their interleaved 1F1B, ZB-1p/ZB-2p
the README's mapping to ``zb-h1``/``zb-h2``, torch's ``ScheduleZBVZeroBubble`` the V schedule. torch's class
names (``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleGPipe``, ...) read with ``Schedule`` dropped."""


def read_schedule(text: str) -> str:
    """The registry name of a schedule spelling (a registry name in any case and punctuation, torch's class
    name, ``SCHEDULE_NAMES``); another text lower-cased as it is (a schedule the workbench lacks: the row is
    skipped naming the valid ones)."""
    from workbench.pipeline.schedules.registry import REGISTRY

    compact = compact_code(text)
    compact = compact.removeprefix("schedule") or compact
    names = {compact_code(n): n for n in REGISTRY} | SCHEDULE_NAMES
    return names.get(compact, text.strip().lower())


BOOLEAN_WORDS = {"true": {"true", "t", "yes", "y", "1", "on", "enabled"}, "false": {"false", "f", "no", "n", "0", "off", "disabled"}}  # fmt: skip


def read_boolean(column: str, text: str) -> str:
    """``true`` or ``false`` for yes/no, 1/0, on/off, enabled/disabled. Unexpressible naming the column."""
    key = text.strip().lower()
    for code, names in BOOLEAN_WORDS.items():
        if key in names:
            return code
    raise Unexpressible(
        f"column {column}: {limits.shown(text)} is not true or false (nor yes/no, 1/0, on/off)"
    )


ATTENTION_NAMES = {
    "multihead": "mha",
    "multiheadattention": "mha",
    "groupedquery": "gqa",
    "groupedqueryattention": "gqa",
    "mqa": "gqa",
    "multiquery": "gqa",
    "multiqueryattention": "gqa",
    "multiheadlatent": "mla",
    "multiheadlatentattention": "mla",
}
"""Spelled-out attention kinds; multi-query attention is GQA with one key/value head (Shazeer 2019,
arXiv:1911.02150; Ainslie et al. 2023, arXiv:2305.13245, section 2)."""


def read_attention(text: str) -> str:
    compact = compact_code(text)
    if compact in CODES["attention"]:
        return compact
    if compact in ATTENTION_NAMES:
        return ATTENTION_NAMES[compact]
    raise Unexpressible(refused_code("attention", text, "mha, gqa, mla (or multi-head, grouped-query, MQA)"))


def read_flops_definition(text: str) -> str:
    compact = compact_code(text).replace("flops", "").replace("peak", "-peak")
    if compact in CODES["flops_definition"]:
        return compact
    raise Unexpressible(refused_code("flops_definition", text, ", ".join(CODES["flops_definition"])))


def refused_code(column: str, text: str, allowed: str) -> str:
    """The reason a code cell is refused, naming the column, the value and what is allowed."""
    return f"column {column}: {limits.shown(text)} is not a code of the column; allowed: {allowed}"


_FAMILY = re.compile(
    r"gb300|gb200|gh200|gracehopper|b300|b200|h200|h800|h100|h20|a100|mi355x|mi325x|mi300x|l40s|rtx4090|rtxpro6000"
)

_FAMILY_IDS = {
    "gb300": "gb300",
    "gb200": "gb200",
    "b300": "b300-sxm-288gb",
    "b200": "b200-sxm-180gb",
    "h200": "h200-sxm-141gb",
    "h800": "h800-sxm5-80gb",
    "h20": "h20-96gb",
    "mi355x": "mi355x",
    "mi325x": "mi325x",
    "mi300x": "mi300x",
    "l40s": "l40s-48gb",
    "rtx4090": "rtx4090-24gb",
    "rtxpro6000": "rtx-pro-6000-96gb",
}
"""A GPU family with one preset -> its id (the README's device ids and the presets of profiles/hardware)."""


def _gh200(key: str, compact: str) -> tuple[str, str]:
    """(preset id, note) of a GH200 spelling. The HBM3e part: nvidia-smi's ``NVIDIA GH200 144G HBM3e``, "144GB"
    or NVIDIA's first announced "141GB HBM3e" -> ``gh200-144gb``. Every other GH200 is the 96 GB HBM3 part, the
    first shipped: nvidia-smi's ``NVIDIA GH200 480GB`` (480 GB is the Grace LPDDR5X), "GH200 96GB", a bare
    "GH200" or "Grace Hopper" (the note then says the memory was not given); "96GB/144GB" reads as the 96 GB."""
    sizes = set(re.findall(r"(?<![a-z0-9])(\d+)\s*g", key))
    if ("hbm3e" in compact or sizes & {"141", "144"}) and "96" not in sizes:
        return "gh200-144gb", ""
    if "96" in sizes and sizes & {"141", "144"}:
        return "gh200-96gb", " (both HBM sizes given: the 96 GB HBM3 GH200, the first shipped)"
    if sizes & {"96", "480"}:
        return "gh200-96gb", ""
    return "gh200-96gb", " (no HBM size given: the 96 GB HBM3 GH200, the first shipped)"


def read_device(text: str) -> tuple[str, str | None]:
    """(device id, why) of a device spelling as nvidia-smi, a datasheet or a paper writes it: ``NVIDIA H100
    80GB HBM3`` and ``H100`` are ``h100-sxm5-80gb`` (the README: a source that says only "H100" or "A100
    80GB" uses the SXM id), ``H100 PCIe`` / ``H100 NVL`` / ``H100 96GB`` their own presets, ``A100-SXM4-40GB``
    by its memory, ``H800``, ``H200``, ``B200``, ``GB200``, ``MI300X`` ... their one preset; a GH200 or "Grace
    Hopper" by its HBM (:func:`_gh200`). ``why`` is None when the text is read as it is (an id, or nothing
    recognised: the row is then skipped naming the known ids); a family without a preset for that part (A100
    PCIe, H800 PCIe) or an A100 without its memory is returned as it is with the reason."""
    from workbench.presets.catalog import preset_names

    key = text.strip().lower()
    if key in preset_names("device"):
        return key, None
    compact = compact_code(key)
    found = _FAMILY.search(compact)
    if found is None:
        return key, None
    family = found.group(0)
    memory = re.search(r"(?<![a-z0-9])(\d+)\s*gb", key)
    gigabytes = memory.group(1) if memory else None
    pcie, nvl = "pcie" in compact, "nvl" in compact and "nvl72" not in compact and "nvl36" not in compact
    device: str | None
    if family == "h100":
        device = (
            "h100-pcie-80gb"
            if pcie
            else "h100-nvl-94gb"
            if nvl or gigabytes == "94"
            else "h100-sxm5-96gb"
            if gigabytes == "96"
            else "h100-sxm5-80gb"
        )
    elif family == "a100":
        device = None if pcie or gigabytes not in ("40", "80") else f"a100-sxm4-{gigabytes}gb"
    elif family in ("gh200", "gracehopper"):
        device, note = _gh200(key, compact)
        return device, f"device {limits.shown(text.strip())} read as {device}{note}"
    elif family in ("h800", "h200"):
        device = None if pcie or nvl else _FAMILY_IDS[family]
    else:
        device = _FAMILY_IDS.get(family)
    if device is None and family == "a100" and not pcie and gigabytes is None:
        return key, f"{text.strip()!r} does not say its memory: write a100-sxm4-40gb or a100-sxm4-80gb"
    if device is None:
        return key, f"{family.upper()} as written ({text.strip()!r}) has no device preset"
    return device, f"device {limits.shown(text.strip())} read as {device}"


def put_code(row: dict[str, str], out: dict[str, str], notes: list[str], column: str, code: str) -> None:
    """Write ``code`` into ``out[column]`` where ``row`` wrote the cell otherwise, and note the reading
    (``<column>:'written' read as <code>``, ``blank`` for an empty code) unless only the case differed."""
    written = row.get(column, "").strip()
    if code != written:
        out[column] = code
        if written.lower() != code:
            notes.append(f"{column}:{limits.shown(written)} read as {code or 'blank'}")


def read_codes(row: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``row`` with its code columns (``CODES`` and ``schedule``) in the schema's form and the notes of the cells
    read otherwise than by case (``<column>:'written' read as <code>``). The FP8 recipe a dtype spelling names
    fills a blank ``fp8_recipe``; an MQA row without key/value heads gets 1. Unexpressible for a cell no reader
    understands (naming the column, the value and what is allowed). The device is read apart
    (:func:`row_device`): a device without a preset skips its row, it does not make the file bad."""
    out = dict(row)
    notes: list[str] = []

    def put(column: str, code: str) -> None:
        put_code(row, out, notes, column, code)

    text = {c: row.get(c, "").strip() for c in (*CODES, "schedule")}
    if text["dtype"]:
        dtype, recipe = read_dtype(text["dtype"])
        put("dtype", dtype)
        if recipe and not row.get("fp8_recipe", "").strip():
            out["fp8_recipe"] = recipe
            notes.append(f"fp8_recipe:{recipe} from the dtype {limits.shown(text['dtype'])}")
    if text["recompute"]:
        put("recompute", read_recompute(text["recompute"]))
    if text["zero_stage"]:
        put("zero_stage", read_zero_stage(text["zero_stage"]))
    if text["schedule"]:
        put("schedule", read_schedule(text["schedule"]))
    for column in ("gated_mlp", "sequence_parallel"):
        if text[column]:
            put(column, read_boolean(column, text[column]))
    if text["attention"]:
        put("attention", read_attention(text["attention"]))
        multi_query = compact_code(text["attention"]) in ("mqa", "multiquery", "multiqueryattention")
        if multi_query and not row.get("num_key_value_heads", "").strip():
            out["num_key_value_heads"] = "1"
            notes.append("num_key_value_heads:1 (multi-query attention: one key/value head)")
    if text["flops_definition"]:
        put("flops_definition", read_flops_definition(text["flops_definition"]))
    return out, notes


def row_device(row: dict[str, str], assumed: list[str]) -> dict[str, str]:
    """``row`` with its ``device`` as the preset id :func:`read_device` reads (noted in ``assumed`` when it is not
    written as the id). Unexpressible naming the part and the known ids for a part without a preset."""
    from workbench.presets.catalog import preset_names

    written = row.get("device", "").strip()
    if not written:
        return row
    device, why = read_device(written)
    if device not in preset_names("device"):
        reason = why or f"device {limits.shown(written)} is not a device id"
        raise Unexpressible(f"{reason}; known: {', '.join(preset_names('device'))}")
    if why:
        assumed.append(f"device:{why.removeprefix('device ')}")
    return {**row, "device": device} if device != written else row
