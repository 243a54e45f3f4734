"""What the training and the serving validation share: reading a validation CSV (``read_table``), reading one
cell (``cell_number``, ``cell_count``: a blank one takes its default and is noted in the row's ``assumed``), the
reason a row cannot be expressed (``Unexpressible``) and the skipped rows (``build_cases``), a row's model
(``row_model``: the columns both schemas have, completed by each schema's own rule) and the node of a device
(``DEFAULT_CLUSTER``), the error measures
(``ape``, ``mean``, ``mape_by``), the leave-one-source-out folds (``source_folds``) and the fit verdict of a
published plan (``fit_verdict``).

The schemas are ``shared/validation/README.md`` (copies in ``profiles/validation/``): the training columns are
:data:`workbench.validate.training_csv.COLUMNS`, the serving ones :data:`workbench.validate.serving_csv.SERVING_COLUMNS`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from workbench.presets.catalog import load_model, preset_names
from workbench.specs import limits
from workbench.specs.estimate import DEFAULT_HEADROOM_FRAC
from workbench.specs.files import check_input_file
from workbench.specs.framework import FrameworkProfile
from workbench.specs.model import AttentionKind, ModelSpec

GIB = 2**30


class Unexpressible(ValueError):
    """A row the specs cannot express; the message is the reason (``build_cases`` skips the row with it)."""


def read_table(
    path: str | Path,
    what: str,
    *,
    check_header: Callable[[Path, tuple[str, ...]], None],
    read_row: Callable[[dict[str, str], Path, int], dict[str, str]],
) -> tuple[Path, list[dict[str, str]], list[int]]:
    """The rows of the validation CSV at ``path`` (``what`` names the file kind in errors): the checked file,
    every row as ``read_row(row, file, line)`` returns it and each row's line number. ``check_header`` sees the
    header first. A byte-order mark (an Excel export) is read. ValueError naming the file (and the line) for more
    columns than ``limits.MAX_CSV_COLUMNS`` or rows than ``limits.MAX_VALIDATION_ROWS``, a row with more or fewer
    cells than the header, a cell that is not CSV (e.g. longer than ``limits.MAX_CSV_FIELD_CHARS``), text that is
    not UTF-8 and a file without data rows; FileNotFoundError when it does not exist."""
    where = check_input_file(path, what)
    rows: list[dict[str, str]] = []
    lines: list[int] = []
    with where.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        try:
            header = tuple(reader.fieldnames or ())
            if len(header) > limits.MAX_CSV_COLUMNS:
                raise ValueError(
                    f"{where}: {len(header):,} columns; at most {limits.MAX_CSV_COLUMNS} "
                    "(MAX_CSV_COLUMNS in workbench/specs/limits.py)"
                )
            check_header(where, header)
            for row in reader:
                if len(rows) >= limits.MAX_VALIDATION_ROWS:
                    raise ValueError(
                        f"{where}: more than {limits.MAX_VALIDATION_ROWS:,} rows "
                        "(MAX_VALIDATION_ROWS in workbench/specs/limits.py)"
                    )
                if None in row or None in row.values():  # DictReader's marks of too many or too few cells
                    raise ValueError(
                        f"{where}: line {reader.line_num}: the row has a different number of cells than the "
                        f"header ({len(header)})"
                    )
                rows.append(read_row(row, where, reader.line_num))
                lines.append(reader.line_num)
        except csv.Error as exc:
            raise ValueError(f"{where}: line {reader.line_num}: not a readable CSV row ({exc})") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not rows:
        raise ValueError(f"{where}: no data rows (a validation file needs a header and at least one row)")
    return where, rows, lines


def check_unique_ids(where: Path, rows: Sequence[dict[str, str]]) -> None:
    """ValueError naming ``where`` and the ids that more than one row carries."""
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: duplicate row ids: {sorted({i for i in ids if ids.count(i) > 1})}")


def row_place(where: Path, line: int, row: dict[str, str]) -> str:
    """``<file>: line <n> (row '<id>')``, where an error in a cell of ``row`` is."""
    return f"{where}: line {line} (row {limits.shown(row['id'])})"


def cell_number(row: dict[str, str], key: str) -> float | None:
    """The number in column ``key``, None when the cell is blank or absent. Unexpressible naming the column and
    the value for text that is not a finite number >= 0."""
    text = (row.get(key) or "").strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        raise Unexpressible(f"column {key}: {limits.shown(text)} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise Unexpressible(f"column {key}: {limits.shown(text)} must be a finite number >= 0")
    return number


def cell_count(
    row: dict[str, str],
    key: str,
    default: int | None = None,
    assumed: list[str] | None = None,
    *,
    minimum: int = 1,
    note: str = "{key}={default}",
) -> int:
    """The whole number >= ``minimum`` in column ``key``. A blank cell gives ``default``, noted in ``assumed`` (when
    that list is given) as ``note`` formats it (the training schema notes the column name alone, the serving one
    ``key=default``). Unexpressible for a blank cell without a default (``<key> is blank``) or a value that is not
    such a number (naming the column and the value)."""
    value = cell_number(row, key)
    if value is None:
        if default is None:
            raise Unexpressible(f"{key} is blank")
        if assumed is not None:
            assumed.append(note.format(key=key, default=default))
        return default
    if value < minimum or value != int(value):
        raise Unexpressible(f"column {key}: {value:g} must be an integer >= {minimum}")
    return int(value)


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
    "rtx4090-24gb": "pcie-rtx4090",
    "rtx-pro-6000-96gb": "pcie-rtx-pro-6000",
    "h100-pcie-80gb": "pcie-h100",
    "h100-nvl-94gb": "pcie-h100-nvl",
    "l40s-48gb": "pcie-l40s",
    "b300-sxm-288gb": "hgx-b300",
    "mi300x": "amd-mi300x-platform",
    "mi325x": "amd-mi325x-platform",
    "mi355x": "amd-mi355x-platform",
    "gh200-96gb": "hpe-cray-ex254n-gh200",
    "gh200-144gb": "hpe-cray-ex254n-gh200",
}
"""The node a row of each device (the README's device ids) is priced on when its ``cluster`` is blank, or an
``other-*`` id the schema leaves to the row's notes that is no preset (listed in the row's ``assumed``)."""


def architecture(row: dict[str, str]) -> dict[str, Any]:
    """The ModelSpec fields both schemas have a column for, read alike: ``name`` (``model_name``, else the row
    id), layers, width and heads (whole numbers; Unexpressible when blank), ``attention`` (blank: mha),
    ``gated_mlp`` (``true``), the dense MLP size and the number of experts (blank: 0)."""
    return {
        "name": row["model_name"].strip() or row["id"],
        "num_layers": cell_count(row, "num_layers"),
        "hidden_size": cell_count(row, "hidden_size"),
        "num_attention_heads": cell_count(row, "num_attention_heads"),
        "attention": AttentionKind(row["attention"].strip() or "mha"),
        "gated_mlp": row["gated_mlp"].strip() == "true",
        "ffn_hidden_size": int(cell_number(row, "ffn_hidden_size") or 0),
        "num_experts": int(cell_number(row, "num_experts") or 0),
    }


def named_preset(row: dict[str, str], assumed: list[str]) -> ModelSpec | None:
    """The model preset the row's ``model_preset`` column names (a serving column; a training row has none) when
    it exists and its layer count, width, heads and vocabulary match the filled columns; a named preset that
    differs is noted in ``assumed`` and None returned (the model is then built from the columns)."""
    name = row.get("model_preset", "").strip()
    if not name or name not in preset_names("model"):
        return None
    model = load_model(name)
    checks = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
    differ = [c for c in checks if cell_number(row, c) not in (None, getattr(model, c))]
    if not differ:
        return model
    assumed.append(f"model built from the columns: preset {name} differs in {', '.join(differ)}")
    return None


ModelCompletion = Callable[[dict[str, str], dict[str, Any], list[str]], dict[str, Any]]
"""A schema's rule for the ModelSpec fields ``architecture`` does not read: (row, those fields, assumed) -> every
ModelSpec field; the defaults it takes go to ``assumed``."""


def row_model(row: dict[str, str], assumed: list[str], complete: ModelCompletion) -> ModelSpec:
    """The model of a validation row: the preset its ``model_preset`` names (``named_preset``), else a ModelSpec
    from the columns, ``architecture`` completed by the schema's ``complete`` (training:
    :func:`workbench.validate.training_model.complete_model`, from the preset of the same architecture; serving:
    :func:`workbench.validate.serving_specs.complete_model`, from the schema's own columns). Unexpressible (or
    the ModelSpec's ValueError) naming what the row lacks."""
    named = named_preset(row, assumed)
    if named is not None:
        return named
    return ModelSpec(**complete(row, architecture(row), assumed))


@dataclass(frozen=True, kw_only=True, slots=True)
class SkippedRow:
    """A row the specs cannot express (or the model refuses), and why."""

    id: str
    source_key: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        """The ``skipped`` entry of a validation result: id, source_key, reason."""
        return {"id": self.id, "source_key": self.source_key, "reason": self.reason}


def skipped_row(row_id: str, source_key: str, exc: Exception) -> SkippedRow:
    """The skipped entry of a row whose case or score raised ``exc`` (its message on one line)."""
    return SkippedRow(id=row_id, source_key=source_key, reason=" ".join(str(exc).split()))


CaseT = TypeVar("CaseT")


def build_cases(
    rows: Iterable[dict[str, str]], row_case: Callable[[dict[str, str]], CaseT]
) -> tuple[list[CaseT], list[SkippedRow]]:
    """``row_case`` of every row, split into the cases and the skipped rows (file order kept): a ValueError
    (``Unexpressible`` or a spec's own) or a LookupError (an unknown preset) skips the row with its message."""
    cases: list[CaseT] = []
    skipped: list[SkippedRow] = []
    for row in rows:
        try:
            cases.append(row_case(row))
        except (ValueError, LookupError) as exc:
            skipped.append(skipped_row(row["id"], row["source_key"], exc))
    return cases, skipped


def ape(predicted: float, measured: float) -> float:
    """Absolute percentage error as a fraction: |predicted - measured| / measured (measured > 0)."""
    return abs(predicted - measured) / measured


def mean(values: Sequence[float]) -> float | None:
    """The arithmetic mean, None for no values."""
    return sum(values) / len(values) if values else None


def mape_by(rows: Iterable[dict[str, Any]], group: str, error: str = "ape") -> dict[str, float]:
    """Mean of the ``error`` field over ``rows`` per value of their ``group`` field, groups sorted; rows without
    the error (absent or None) are left out, and so are groups with none."""
    values: dict[str, list[float]] = {}
    for r in rows:
        if r.get(error) is not None:
            values.setdefault(r[group], []).append(r[error])
    return {k: sum(v) / len(v) for k, v in sorted(values.items())}


class _Sourced(Protocol):
    @property
    def source_key(self) -> str: ...


SourcedT = TypeVar("SourcedT", bound=_Sourced)


def source_folds(cases: Sequence[SourcedT]) -> Iterator[tuple[str, list[SourcedT], list[SourcedT]]]:
    """Leave one source out: per source (sorted), the other sources' cases (to fit on) and its own (to score)."""
    for source in sorted({c.source_key for c in cases}):
        yield (
            source,
            [c for c in cases if c.source_key != source],
            [c for c in cases if c.source_key == source],
        )


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
