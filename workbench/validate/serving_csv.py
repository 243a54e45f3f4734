"""The serving validation file: its columns, reading and checking it (``read_serving_rows``) and the measured
values of a row (``row_measured``); one cell is read with :func:`workbench.validate.rows.cell_number` and
:func:`workbench.validate.rows.cell_count`.

The schema is ``shared/validation/README.md`` ("Serving validation set"); the shipped copy is
``profiles/validation/serving_public.csv``. :mod:`workbench.validate.serving` turns the rows into specs.
"""

from __future__ import annotations

import math
from pathlib import Path

from workbench.presets.catalog import profiles_dir
from workbench.serving.engine_defaults import ENGINE_CODE
from workbench.specs import limits
from workbench.specs.files import normalised_cells
from workbench.validate.rows import Unexpressible, cell_number, check_unique_ids, read_table, row_place
from workbench.validate.serving_codes import read_serving_codes

DEFAULT_SERVING_DATA = profiles_dir() / "validation" / "serving_public.csv"
"""The shipped copy of the team's public serving set (``shared/validation/serving_public.csv``)."""


SERVING_COLUMNS: tuple[str, ...] = (
    "id", "source_key", "source", "locator", "confidence", "notes", "model_name", "model_preset",
    "num_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "ffn_hidden_size",
    "vocab_size", "gated_mlp", "tie_word_embeddings", "num_experts", "experts_per_token", "moe_ffn_hidden_size",
    "num_shared_experts", "num_dense_layers", "attention", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "weight_dtype", "activation_dtype", "kv_cache_dtype", "device", "cluster",
    "devices_per_node", "num_devices_total", "replicas", "tp", "pp", "ep", "attention_dp", "disaggregated",
    "prefill_workers", "prefill_tp", "prefill_ep", "prefill_attention_dp", "decode_workers", "decode_tp",
    "decode_ep", "decode_attention_dp", "engine", "engine_version", "max_batch_size", "max_num_batched_tokens",
    "gpu_memory_utilization_frac", "kv_cache_free_mem_frac", "prefill_batch_size", "prefill_batch_tokens",
    "decode_batch_size", "phase", "workload_kind", "concurrency", "request_rate_per_s", "num_requests",
    "input_tokens_mean", "output_tokens_mean", "input_tokens_total", "output_tokens_total", "input_tokens_dist",
    "output_tokens_dist", "ignore_eos", "measured_scope", "measured_ttft_ms_mean", "measured_ttft_ms_median",
    "measured_ttft_ms_p99", "measured_tpot_ms_mean", "measured_tpot_ms_p99", "measured_output_tokens_per_s",
    "measured_total_tokens_per_s", "measured_output_tokens_per_s_per_device",
    "measured_input_tokens_per_s_per_device", "measured_requests_per_s", "measured_kv_cache_capacity_tokens",
    "statistic_notes", "num_redundant_experts", "spec_method", "spec_num_tokens", "spec_accept_len",
    "prefix_hit_rate",
)  # fmt: skip
"""The header of a serving validation file, in order (README: 'The header is exactly the column list')."""

LATER_COLUMNS: tuple[str, ...] = SERVING_COLUMNS[-5:]
"""Columns added at the end of the header on 2026-12-07 (README: a file written before them reads them as
blank): a header that is ``SERVING_COLUMNS`` without them is read with these cells blank."""

CHOICES: dict[str, tuple[str, ...]] = {
    "attention": ("mha", "gqa", "mla"),
    "weight_dtype": ("bf16", "fp16", "fp8", "fp4", "int4"),
    "activation_dtype": ("bf16", "fp16", "fp8", "fp4", "int4"),
    "kv_cache_dtype": ("bf16", "fp16", "fp8", "fp4", "int4"),
    "gated_mlp": ("true", "false"),
    "tie_word_embeddings": ("true", "false"),
    "disaggregated": ("true", "false"),
    "ignore_eos": ("true", "false"),
    "phase": ("e2e", "prefill", "decode", "prefill_and_decode"),
    "workload_kind": ("offline", "closed_loop", "open_loop_poisson", "trace", "fixed_batch"),
    "measured_scope": ("system", "one_replica"),
    "spec_method": ("mtp", "eagle", "eagle3", "draft", "ngram"),
}
"""Code columns and the values the README allows; a filled cell outside them fails the read naming the file, row
and column. ``engine`` is not closed: the README gives ``vllm``, ``sglang``, ``trtllm`` and lets another engine
take "a short lowercase code explained in ``notes``", so a filled ``engine`` must only be such a code
(``workbench.serving.engine_defaults.ENGINE_CODE``; ``priced_engine`` says how it is priced)."""

COUNT_COLUMNS = frozenset(
    {"num_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "ffn_hidden_size",
     "vocab_size", "num_experts", "experts_per_token", "moe_ffn_hidden_size", "kv_lora_rank", "qk_nope_head_dim",
     "qk_rope_head_dim", "v_head_dim", "devices_per_node", "num_devices_total", "replicas", "tp", "pp", "ep",
     "attention_dp", "prefill_workers", "prefill_tp", "prefill_ep", "prefill_attention_dp", "decode_workers",
     "decode_tp", "decode_ep", "decode_attention_dp", "max_batch_size", "max_num_batched_tokens",
     "prefill_batch_size", "prefill_batch_tokens", "decode_batch_size", "concurrency", "num_requests",
     "spec_num_tokens"}
)  # fmt: skip
"""Columns that, when filled, hold a whole number >= 1 (a layout degree of 0 is a bad value, not a blank)."""

FRACTION_COLUMNS = {
    "gpu_memory_utilization_frac": (0.0, False),
    "kv_cache_free_mem_frac": (0.0, False),
    "prefix_hit_rate": (0.0, True),
}
"""Share columns: (lower bound, lower bound allowed); every one is at most 1 (README: '0..1')."""

SERVING_CODE_COLUMNS = (
    "attention",
    "weight_dtype",
    "activation_dtype",
    "kv_cache_dtype",
    "device",
    "cluster",
    "gated_mlp",
    "tie_word_embeddings",
    "disaggregated",
    "engine",
    "phase",
    "workload_kind",
    "ignore_eos",
    "measured_scope",
    "spec_method",
)
"""Columns of short codes, read case-insensitively (``FP8``, ``TRTLLM``)."""

TEXT_COLUMNS = frozenset(
    {"id", "source_key", "source", "locator", "confidence", "notes", "model_name", "model_preset", "gated_mlp",
     "tie_word_embeddings", "attention", "weight_dtype", "activation_dtype", "kv_cache_dtype", "device", "cluster",
     "disaggregated", "engine", "engine_version", "phase", "workload_kind", "input_tokens_dist",
     "output_tokens_dist", "ignore_eos", "measured_scope", "statistic_notes", "spec_method"}
)  # fmt: skip
"""Columns that are not numbers; every other filled cell must parse as a finite number >= 0."""

MEASURED: dict[str, tuple[str, float]] = {
    "measured_ttft_ms_mean": ("ttft_mean_s", 1e-3),
    "measured_ttft_ms_median": ("ttft_median_s", 1e-3),
    "measured_ttft_ms_p99": ("ttft_p99_s", 1e-3),
    "measured_tpot_ms_mean": ("tpot_mean_s", 1e-3),
    "measured_tpot_ms_p99": ("tpot_p99_s", 1e-3),
    "measured_output_tokens_per_s": ("output_tokens_per_s", 1.0),
    "measured_total_tokens_per_s": ("total_tokens_per_s", 1.0),
    "measured_output_tokens_per_s_per_device": ("output_tokens_per_s_per_device", 1.0),
    "measured_input_tokens_per_s_per_device": ("input_tokens_per_s_per_device", 1.0),
    "measured_requests_per_s": ("requests_per_s", 1.0),
    "measured_kv_cache_capacity_tokens": ("kv_cache_capacity_tokens", 1.0),
}
"""CSV column -> (key of ``ServingCase.measured`` in SI units, factor from the column's unit)."""


def _check_header(where: Path, header: tuple[str, ...]) -> None:
    """ValueError naming the missing and unknown columns when ``header`` is neither ``SERVING_COLUMNS`` nor it
    without ``LATER_COLUMNS``."""
    if header not in (SERVING_COLUMNS, SERVING_COLUMNS[: -len(LATER_COLUMNS)]):
        missing = [c for c in SERVING_COLUMNS if c not in header]
        extra = [c for c in header if c not in SERVING_COLUMNS]
        raise ValueError(
            f"{where}: the header must be the serving columns of shared/validation/README.md in order "
            f"(missing: {', '.join(missing) or 'none'}; unknown: {', '.join(extra[:5]) or 'none'})"
        )


def _read_row(row: dict[str, str], where: Path, line: int) -> dict[str, str]:
    """One row with the later columns a shorter header lacks read blank, checked and its codes lower-cased. The
    codes are checked as :func:`workbench.validate.serving_codes.read_serving_codes` reads them (``bfloat16``,
    ``closed-loop``); the row keeps them as written, and ``row_case`` reads them again with a note each."""
    for col in LATER_COLUMNS:
        row.setdefault(col, "")
    at = row_place(where, line, row)
    _check_numbers(row, at)
    row = normalised_cells(row, SERVING_CODE_COLUMNS)
    try:
        read, _ = read_serving_codes(row)
    except Unexpressible as exc:
        raise ValueError(f"{at}: {exc}") from None
    _check_values(read, at)
    return row


def read_serving_rows(path: str | Path = DEFAULT_SERVING_DATA) -> list[dict[str, str]]:
    """The CSV rows as dicts (default: the shipped ``serving_public.csv``), read with
    :func:`workbench.validate.rows.read_table`. ValueError naming the file (and the line, row id, column and
    value) when: the header is not ``SERVING_COLUMNS`` (or it without ``LATER_COLUMNS``, which then read blank),
    there are no data rows or more than ``limits.MAX_VALIDATION_ROWS``, a row has a different number of cells, an
    id repeats, a cell is not CSV, a filled numeric cell is not a finite number >= 0, a code no spelling reads
    (:func:`workbench.validate.serving_codes.read_serving_codes`), or a value is out of its column's range
    (``_check_values``: codes, counts, shares). FileNotFoundError when the file does not exist."""
    where, rows, _ = read_table(
        path, "serving validation CSV file", check_header=_check_header, read_row=_read_row
    )
    check_unique_ids(where, rows)
    return rows


def _check_numbers(row: dict[str, str], where: str) -> None:
    for col, text in row.items():
        value = text.strip()
        if col in TEXT_COLUMNS or not value:
            continue
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"{where}: column {col}: {limits.shown(value)} must be a finite number >= 0")


def _check_values(row: dict[str, str], where: str) -> None:
    """ValueError naming ``where`` and the column for a code outside ``CHOICES``, an ``engine`` that is not an
    engine code, a count that is not a whole number >= 1 or a share outside ``FRACTION_COLUMNS``'s range."""
    for col, allowed in CHOICES.items():
        value = row[col].strip()
        if value and value not in allowed:
            raise ValueError(
                f"{where}: column {col}: {limits.shown(value)} is not one of {', '.join(allowed)}"
            )
    engine = row["engine"].strip()
    if engine and not ENGINE_CODE.fullmatch(engine):
        raise ValueError(
            f"{where}: column engine: {limits.shown(engine)} is not an engine code (vllm, sglang, trtllm, or "
            "another engine's short lowercase code: a letter, then letters, digits, '.', '_', '+' or '-', at most "
            "32 characters, explained in notes)"
        )
    for col in COUNT_COLUMNS:
        number = cell_number(row, col)
        if number is not None and (number != int(number) or number < 1):
            raise ValueError(f"{where}: column {col}: {number:g} must be a whole number >= 1")
    for col, (low, closed) in FRACTION_COLUMNS.items():
        number = cell_number(row, col)
        if number is not None and not (low <= number <= 1.0 and (closed or number > low)):
            bound = "[0, 1]" if closed else "(0, 1]"
            raise ValueError(f"{where}: column {col}: {number:g} must be in {bound}")
    accept = cell_number(row, "spec_accept_len")
    if accept is not None and accept < 1.0:
        raise ValueError(
            f"{where}: column spec_accept_len: {accept:g} must be >= 1 (the target token counts)"
        )


TOKEN_WEIGHTED_TPOT = "tpot_token_weighted_s"
"""Key of a mean TPOT the row's source weights by tokens (``statistic_notes`` says ``token-weighted``, the
README's term): the decode time of all requests over all tokens they generated, first tokens included. APEX+'s
``vllm/trace.py`` (microsoft/apex_plus@8769096) computes it from vLLM V0's /metrics as ``tpot =
tpot_sum/num_gen_tokens``: ``time_per_output_token_seconds_sum`` (one observation per decode step of each
request) over ``generation_tokens_total`` (which V0's ``LLMEngine._get_stats`` counts with "One generation token
per finished prefill")."""


def row_measured(row: dict[str, str]) -> dict[str, float]:
    """The filled ``measured_*`` columns in SI units, keyed as ``MEASURED`` names them; a mean TPOT that
    ``statistic_notes`` calls token-weighted is keyed ``TOKEN_WEIGHTED_TPOT`` instead of ``tpot_mean_s``."""
    out = {}
    token_weighted = "token-weighted" in row.get("statistic_notes", "").lower()
    for col, (key, factor) in MEASURED.items():
        value = cell_number(row, col)
        if value is not None:
            out[TOKEN_WEIGHTED_TPOT if key == "tpot_mean_s" and token_weighted else key] = value * factor
    return out
