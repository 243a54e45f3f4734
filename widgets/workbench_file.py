"""The ``*.workbench.json`` file: saved estimates that JupyterLab opens as their report.

A ``.workbench.json`` file is the object ``workbench estimate --json`` prints (``Estimate.summary()`` of the
best plan: ``step_time_s``, ``tokens_per_s``, ``mfu``, ``peak_memory_bytes``, ... in SI units), with one
more key, ``workbench_file``, that holds what the pictures need::

    {
      "backend": "analytic", "model": "llama-3.1-8b", "plan": "dp2 tp2 pp2 ...", "step_time_s": 3.75, ...,
      "workbench_file": {
        "format": "parallelism-workbench.estimates",
        "version": 1,
        "command": "workbench estimate --model llama-3.1-8b ...",
        "estimates": [
          {"backend": ..., "model": {ModelSpec fields}, "cluster": {ClusterSpec fields, device nested},
           "workload": {...}, "plan": {...}, "step_time_s": ..., "breakdown": {StepBreakdown fields},
           "memory": {column: [values]}, "timeline": {column: [values]},
           "activation_timeline": {column: [values]} | null, "measured": false, "notes": [...]}
        ]
      }
    }

``estimates`` holds one record per plan, best first (one for ``estimate``, the refined top plans for
``plan``); every field of ``workbench.specs.estimate.Estimate`` is there, enums as their strings, tables as
columns (their schemas are those of ``Estimate``). The file is plain JSON written by ``write_workbench_file``
and read back by ``read_workbench_file``; the JupyterLab extension shows it through ``report_html``.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from workbench.specs.estimate import Estimate

SUFFIX = ".workbench.json"
FORMAT = "parallelism-workbench.estimates"
VERSION = 1
SECTION = "workbench_file"
_TABLES = ("memory", "timeline", "activation_timeline")
_SPECS = ("model", "cluster", "workload", "plan", "breakdown")


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkbenchFile:
    """What a ``.workbench.json`` file holds."""

    estimates: tuple[Estimate, ...]
    """Ranked plans, best first; at least one."""
    command: str
    """The command that wrote the file (shown in the report as the way to reproduce it); may be empty."""


def workbench_document(estimates: Sequence[Estimate], *, command: str = "") -> dict[str, Any]:
    """The file's JSON object: the summary of ``estimates[0]`` plus the ``workbench_file`` section.

    Raises ValueError for no estimates.
    """
    if not estimates:
        raise ValueError("a .workbench.json file needs at least one Estimate, got none")
    section = {
        "format": FORMAT,
        "version": VERSION,
        "command": command,
        "estimates": [_estimate_record(est) for est in estimates],
    }
    return {**estimates[0].summary(), SECTION: section}


def write_workbench_file(
    path: str | Path, estimates: Sequence[Estimate], *, command: str = "", force: bool = False
) -> Path:
    """Write ``estimates`` (best first) to ``path``, which must end in ``.workbench.json``; return it.

    Raises ValueError for another suffix or no estimates, FileExistsError if ``path`` exists and not
    ``force``, FileNotFoundError if its folder is missing.
    """
    out = Path(path)
    if not out.name.endswith(SUFFIX):
        raise ValueError(f"{out}: the file name must end in {SUFFIX} (JupyterLab opens those as reports)")
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass --force (force=True) to overwrite it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent}: no such folder for the {SUFFIX} file")
    text = json.dumps(workbench_document(estimates, command=command), indent=1)
    out.write_text(text + "\n", encoding="utf-8")
    return out


def read_workbench_file(source: str | Path | Mapping[str, Any]) -> WorkbenchFile:
    """Read a ``.workbench.json`` file (a path, its text, or its parsed object).

    Raises ValueError, naming what is wrong, for text that is not JSON, a summary without the
    ``workbench_file`` section (e.g. plain ``workbench estimate --json`` output), another format or
    version, or records that do not make a valid Estimate.
    """
    data = _load(source)
    section = data.get(SECTION)
    if not isinstance(section, dict):
        raise ValueError(
            f"no {SECTION!r} section: this is an estimate summary, which holds no timeline or memory "
            f"table to draw; write the file with workbench_widgets.workbench_file.write_workbench_file"
        )
    if section.get("format") != FORMAT or section.get("version") != VERSION:
        raise ValueError(
            f"{SECTION}: format {section.get('format')!r} version {section.get('version')!r}; "
            f"this version reads {FORMAT!r} version {VERSION}"
        )
    records = section.get("estimates")
    if not isinstance(records, list) or not records:
        raise ValueError(f"{SECTION}.estimates must be a non-empty list of estimate records")
    estimates = []
    for i, record in enumerate(records):
        try:
            estimates.append(_estimate_from_record(record))
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise ValueError(f"{SECTION}.estimates[{i}]: {type(exc).__name__}: {exc}") from None
    return WorkbenchFile(estimates=tuple(estimates), command=str(section.get("command") or ""))


def report_html(source: str | Path | Mapping[str, Any], *, name: str = "") -> str:
    """The self-contained HTML report of a ``.workbench.json`` file (``workbench_widgets.report``).

    ``name`` (the file's name) goes into the title. Raises ValueError as ``read_workbench_file``.
    """
    from workbench_widgets.report import render_report

    saved = read_workbench_file(source)
    best = saved.estimates[0]
    title = f"{name}: {best.model.name} on {best.cluster.name}" if name else None
    command = saved.command or f"saved estimates ({name or SUFFIX})"
    return render_report(estimates=saved.estimates, command=command, title=title)


def _load(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(source, Mapping):
        return dict(source)
    text = source.read_text(encoding="utf-8") if isinstance(source, Path) else source
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"a {SUFFIX} file holds one JSON object, got {type(data).__name__}")
    return data


def _estimate_record(est: Estimate) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for f in dataclasses.fields(est):
        value = getattr(est, f.name)
        if f.name in _TABLES:
            record[f.name] = None if value is None else value.to_dict(as_series=False)
        else:
            record[f.name] = _plain(value)
    return record


def _estimate_from_record(record: Mapping[str, Any]) -> Estimate:
    import polars as pl

    from workbench.specs.estimate import Estimate, StepBreakdown
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan, Workload

    spec_types = {
        "model": ModelSpec,
        "cluster": ClusterSpec,
        "workload": Workload,
        "plan": ParallelPlan,
        "breakdown": StepBreakdown,
    }
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(Estimate):
        if f.name not in record:
            continue  # a default field (activation_timeline, measured, notes)
        value = record[f.name]
        if f.name in _TABLES:
            kwargs[f.name] = None if value is None else _table(pl, value)
        elif f.name in spec_types:
            kwargs[f.name] = _typed(spec_types[f.name], value)
        elif f.name == "notes":
            kwargs[f.name] = tuple(str(n) for n in value)
        elif f.name == "band":
            kwargs[f.name] = None if value is None else _band(value)
        else:
            kwargs[f.name] = value
    return Estimate(**kwargs)


def _band(value: Any) -> Any:
    """The saved ``ErrorBand`` (its ``as_dict`` fields); ValueError for another shape."""
    from workbench.specs.band import ErrorBand

    if not isinstance(value, Mapping):
        raise ValueError(f"band must be an object, got {type(value).__name__}")
    fields = {f.name for f in dataclasses.fields(ErrorBand)}
    kept = {k: v for k, v in value.items() if k in fields}
    kept["notes"] = tuple(str(n) for n in kept.get("notes", ()))
    try:
        return ErrorBand(**kept)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"band: {exc}") from None


def _table(pl: Any, columns: Mapping[str, list[Any]]) -> pl.DataFrame:
    if not isinstance(columns, Mapping):
        raise ValueError(f"a table must be an object of columns, got {type(columns).__name__}")
    return pl.DataFrame(dict(columns), strict=False)


def _plain(value: Any) -> Any:
    """JSON form: dataclasses as objects of their fields, enums as their values, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _typed(tp: Any, value: Any) -> Any:
    """``value`` (plain JSON) as type ``tp``: dataclasses, enums, tuples, dicts and optionals."""
    if value is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return _typed(kinds[0], value) if len(kinds) == 1 else value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ValueError(f"{tp.__name__} must be an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ValueError(f"{tp.__name__}: unknown fields {unknown}")
        return tp(**{k: _typed(hints[k], v) for k, v in value.items()})
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(args[0], v) for v in value)
        return tuple(_typed(a, v) for a, v in zip(args, value, strict=True))
    if origin is dict:
        return {_typed(args[0], k): _typed(args[1], v) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    return value
