"""The training validation file: its columns (``COLUMNS``, the schema of ``shared/validation/training_public.csv``,
whose README defines each one), what a filled cell may hold (``NUMERIC_COLUMNS``) and reading it (``read_rows``).
:mod:`workbench.validate.training` turns the rows into specs."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from workbench.presets.catalog import profiles_dir
from workbench.specs import limits
from workbench.specs.files import normalised_cells
from workbench.validate.rows import Unexpressible, check_unique_ids, read_table, row_place
from workbench.validate.training_codes import read_codes

DEFAULT_DATA = profiles_dir() / "validation" / "training_public.csv"
"""A copy of the team's public validation set (shared/validation), kept in the repo so validate works anywhere."""

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
    **_counts(limits.MAX_LAYERS, "num_layers", "offload_activation_layers"),
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
    **_counts(limits.MAX_GLOBAL_BATCH_SIZE, "micro_batch_size", "global_batch_size", "run_micro_batch_size"),
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


def _read_row(row: dict[str, str], where: Path, line: int) -> dict[str, str]:
    return normalised_cells(row, CODE_COLUMNS)


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The CSV rows as dicts (:func:`workbench.validate.rows.read_table`). ValueError naming the file (and the
    line, row id, column and value) for: no data rows, more rows or columns than ``limits.MAX_VALIDATION_ROWS`` /
    ``MAX_CSV_COLUMNS`` (reading stops there), a column named twice, a missing column (``COLUMNS``), a duplicate
    id, a row with more or fewer cells than the header, a cell that is not CSV (e.g. longer than
    ``limits.MAX_CSV_FIELD_CHARS``), a code no spelling reads (:func:`workbench.validate.training_codes.read_codes`:
    ``bfloat16``, ``ZeRO-3``, ``yes`` are read, ``banana`` is not) and a filled numeric cell outside its range
    (``NUMERIC_COLUMNS``: counts >= 1, measured values finite and > 0). The rows are returned as written (codes
    lower-cased); :func:`workbench.validate.training.row_case` reads the spellings again and notes each."""
    where, rows, lines = read_table(
        path, "validation CSV file", check_header=_check_unique_header, read_row=_read_row
    )
    if not {"id", "source_key"} <= set(rows[0]):
        raise ValueError(f"{where}: not a validation file (needs id and source_key columns)")
    missing = [c for c in COLUMNS if c not in rows[0]]
    if missing:
        raise ValueError(
            f"{where}: missing column(s) {', '.join(missing)}; a validation file has the columns of "
            "profiles/validation/training_public.csv (see its README)"
        )
    check_unique_ids(where, rows)
    for row, line in zip(rows, lines, strict=True):
        try:
            read, _ = read_codes(row)
        except Unexpressible as exc:
            raise ValueError(f"{row_place(where, line, row)}: {exc}") from None
        for col, rule in NUMERIC_COLUMNS.items():
            problem = _check_cell(read.get(col, ""), *rule)
            if problem:
                raise ValueError(
                    f"{row_place(where, line, row)}: column {col}: {limits.shown(row[col].strip())} {problem}"
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
