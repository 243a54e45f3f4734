"""The short codes of a serving validation row as other sources write them, read to the schema's codes
(``shared/validation/README.md``, "Serving validation set" and "Serving enumerated values"): ``bfloat16`` is
``bf16``, ``FP8 E4M3`` and ``fp8_e5m2`` are ``fp8``, ``NVFP4`` is ``fp4``, ``AWQ`` and ``W4A16`` are ``int4``, a
KV cache written ``auto`` is the engine's default (blank), ``closed-loop`` is ``closed_loop``, ``Poisson`` and
``server`` are ``open_loop_poisson``, ``NextN`` is ``mtp``, ``EAGLE-3`` is ``eagle3``, ``DGX H100`` is
``dgx-h100``. The device is read as the training rows' (:func:`workbench.validate.training_codes.read_device`),
and so are ``attention`` and ``gated_mlp`` (:func:`workbench.validate.training_codes.read_codes`: multi-query
attention is GQA with one key/value head).

:func:`read_serving_codes` returns the row with every code column in the schema's form and one note per cell it
had to read (for the row's ``assumed``); a cell it cannot read is an ``Unexpressible`` naming the column, the value
and what is allowed (:func:`workbench.validate.serving_csv.read_serving_rows` turns it into an error naming the
file and the row).
"""

from __future__ import annotations

from workbench.validate.rows import Unexpressible
from workbench.validate.training_codes import (
    FP8_WORDS,
    code_words,
    compact_code,
    put_code,
    read_boolean,
    read_codes,
    read_dtype,
    refused_code,
)

DTYPE_COLUMNS = ("weight_dtype", "activation_dtype", "kv_cache_dtype")
"""The serving schema's dtype columns (codes ``bf16``, ``fp16``, ``fp8``, ``fp4``, ``int4``)."""

FP4_WORDS = {"fp4", "nvfp4", "mxfp4", "float4", "e2m1"}
"""Words that name 4-bit floating point: NVFP4 (the README: "``fp4`` is NVFP4 in every row so far"), MXFP4 and
their element type E2M1 (OCP Microscaling Formats v1.0, section 5.3.3)."""

INT4_WORDS = {"int4", "uint4", "w4a16", "awq", "4bit"}
"""Words that name 4-bit integer weights: vLLM's AWQ path runs 4-bit weights only (``AWQConfig`` refuses other
``weight_bits``), W4A16 is the weight-only int4 scheme (llm-compressor's preset name)."""

AUTO_KV = "auto"
"""vLLM's, SGLang's and TensorRT-LLM's word for the engine's default KV cache dtype (``--kv-cache-dtype auto``,
``kv_cache_config.dtype='auto'``): read as a blank cell, which each engine's default then fills
(``workbench.validate.serving_specs``)."""


def read_serving_dtype(column: str, text: str) -> str:
    """The schema's dtype code of a spelling in one of ``DTYPE_COLUMNS``: FP8 words (``FP8_WORDS``: ``E4M3``,
    ``float8_e5m2`` ...) are ``fp8``, ``FP4_WORDS`` ``fp4``, ``INT4_WORDS`` ``int4``, 16-bit spellings as the
    training rows' (:func:`workbench.validate.training_codes.read_dtype`: ``bfloat16``, ``half``); ``auto`` in
    ``kv_cache_dtype`` is blank (``AUTO_KV``). Unexpressible naming the column, the value and the codes
    otherwise (``fp32``, ``int8``)."""
    words = code_words(text)
    if column == "kv_cache_dtype" and compact_code(text) == AUTO_KV:
        return ""
    if words & FP8_WORDS:
        return "fp8"
    if words & FP4_WORDS:
        return "fp4"
    if words & INT4_WORDS:
        return "int4"
    allowed = "bf16, fp16, fp8, fp4, int4 (or bfloat16, half, FP8 E4M3, NVFP4, AWQ, W4A16, ...)"
    if column == "kv_cache_dtype":
        allowed += "; auto = the engine's default"
    try:
        code, _ = read_dtype(text)
    except Unexpressible:
        raise Unexpressible(refused_code(column, text, allowed)) from None
    if code not in ("bf16", "fp16"):
        raise Unexpressible(refused_code(column, text, allowed))
    return code


NAMES: dict[str, dict[str, str]] = {
    "workload_kind": {
        "offline": "offline", "offlinebatch": "offline", "maxthroughput": "offline", "throughput": "offline",
        "closedloop": "closed_loop", "closed": "closed_loop", "concurrency": "closed_loop",
        "fixedconcurrency": "closed_loop", "closedloopconcurrency": "closed_loop",
        "openlooppoisson": "open_loop_poisson", "poisson": "open_loop_poisson", "openloop": "open_loop_poisson",
        "server": "open_loop_poisson", "requestrate": "open_loop_poisson", "qps": "open_loop_poisson",
        "poissonarrivals": "open_loop_poisson",
        "trace": "trace", "replay": "trace", "tracereplay": "trace",
        "fixedbatch": "fixed_batch", "staticbatch": "fixed_batch", "fixedbatchsize": "fixed_batch",
    },
    "phase": {
        "e2e": "e2e", "endtoend": "e2e",
        "prefill": "prefill", "prefillonly": "prefill", "context": "prefill", "contextonly": "prefill",
        "decode": "decode", "decodeonly": "decode", "generation": "decode", "generationonly": "decode",
        "prefillanddecode": "prefill_and_decode", "prefill+decode": "prefill_and_decode",
        "prefilldecode": "prefill_and_decode", "pd": "prefill_and_decode",
    },
    "measured_scope": {
        "system": "system", "deployment": "system", "wholedeployment": "system", "cluster": "system",
        "onereplica": "one_replica", "replica": "one_replica", "perreplica": "one_replica",
        "singlereplica": "one_replica",
    },
    "spec_method": {
        "mtp": "mtp", "nextn": "mtp", "multitokenprediction": "mtp", "deepseekmtp": "mtp",
        "eagle": "eagle", "eagle1": "eagle", "eagle2": "eagle", "eagle3": "eagle3",
        "draft": "draft", "draftmodel": "draft", "separatedraft": "draft",
        "ngram": "ngram", "promptlookup": "ngram", "promptlookupdecoding": "ngram",
        "none": "", "off": "", "no": "",
    },
}  # fmt: skip
"""Spellings of each enumerated column (lower-case letters, digits and ``+`` only) -> the schema's code. ``open
loop`` without a distribution reads as Poisson (the README's one open-loop kind; vLLM's ``benchmark_serving.py
--request-rate`` draws Poisson arrivals at its default burstiness 1.0); MLPerf's ``Server`` is LoadGen's Poisson
process, ``Offline`` all queries at once, as trtllm-bench's ``throughput`` mode queues them; ``NextN`` is
SGLang's name for DeepSeek's MTP head; a speculative method written ``none`` or ``off`` is no speculative decoding
(blank)."""

_ALLOWED = {
    "workload_kind": "offline, closed_loop, open_loop_poisson, trace, fixed_batch",
    "phase": "e2e, prefill, decode, prefill_and_decode",
    "measured_scope": "system, one_replica",
    "spec_method": "mtp, eagle, eagle3, draft, ngram (or blank)",
}


def read_name(column: str, text: str) -> str:
    """The schema's code of a spelling in one of ``NAMES``' columns. Unexpressible naming the column, the value
    and the codes otherwise."""
    compact = compact_code(text)
    if compact in NAMES[column]:
        return NAMES[column][compact]
    raise Unexpressible(refused_code(column, text, _ALLOWED[column]))


def read_cluster(text: str) -> str:
    """A cluster written as its name (``DGX H100``, ``GB200 NVL72``): the one preset id whose letters and digits
    are the same; the text as written (lower-cased) otherwise, which ``row_cluster`` then reads or refuses."""
    from workbench.presets.catalog import preset_names

    key = text.strip().lower()
    names = preset_names("cluster")
    if key in names or key.startswith("other-"):
        return key
    same = [n for n in names if compact_code(n) == compact_code(key)]
    return same[0] if len(same) == 1 else key


BOOLEAN_COLUMNS = ("tie_word_embeddings", "disaggregated", "ignore_eos")
"""Serving-only ``true``/``false`` columns (``gated_mlp`` is read with the training rows' codes)."""


def read_serving_codes(row: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """``row`` with its code columns in the schema's form and the notes of the cells read otherwise than by case
    (``<column>:'written' read as <code>``). Unexpressible for a cell no reader understands (naming the column,
    the value and what is allowed). The device is read apart (``training_codes.row_device``, in
    ``workbench.validate.serving.row_case``): a device without a preset skips its row, it does not make the file
    bad."""
    common, notes = read_codes({c: row.get(c, "") for c in ("attention", "gated_mlp", "num_key_value_heads")})
    out = {**row, **{k: v for k, v in common.items() if row.get(k, "") != v}}

    def put(column: str, code: str) -> None:
        put_code(row, out, notes, column, code)

    for column in DTYPE_COLUMNS:
        if row.get(column, "").strip():
            put(column, read_serving_dtype(column, row[column]))
    for column in NAMES:
        if row.get(column, "").strip():
            put(column, read_name(column, row[column]))
    for column in BOOLEAN_COLUMNS:
        if row.get(column, "").strip():
            put(column, read_boolean(column, row[column]))
    if row.get("cluster", "").strip():
        put("cluster", read_cluster(row["cluster"]))
    return out, notes
