"""Serving engine profiles on disk: ``profiles/engines/<id>.toml`` (spec: :mod:`workbench.specs.engine`).

Keys are the fields of :class:`~workbench.specs.engine.EngineProfile` plus a ``[sources]`` table (field ->
source); times may be given in microseconds or milliseconds with the unit in the key (``step_overhead_ms``,
``eager_kernel_us``), converted here once. Unknown keys raise ValueError naming the file and listing the allowed
keys.

A profile may name another as its ``base`` (an engine id in the same directory): it then states only what differs,
and every other key and ``[sources]`` entry is the base's (a key given with another unit replaces the base's).
Bases may chain; a cycle or an unknown base raises ValueError naming the file.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

from workbench.presets.catalog import profiles_dir, read_toml
from workbench.specs.engine import EngineProfile
from workbench.specs.files import check_input_file

DEFAULT_ENGINE = "generic"
"""The profile a serving plan is priced with when it names none."""

_FIELDS = {f.name for f in fields(EngineProfile)}
_UNIT_KEYS = {
    "step_overhead_ms": ("step_overhead_s", 1e-3),
    "step_overhead_us": ("step_overhead_s", 1e-6),
    "eager_kernel_us": ("eager_kernel_s", 1e-6),
    "host_per_request_us": ("host_per_request_s", 1e-6),
    "frontend_host_per_request_us": ("frontend_host_per_request_s", 1e-6),
}
"""File keys with a unit -> (field, factor to seconds)."""


def engines_dir() -> Path:
    return profiles_dir() / "engines"


def engine_names() -> list[str]:
    """Profile ids, sorted."""
    return sorted(p.stem for p in engines_dir().glob("*.toml"))


def engine_from_dict(data: dict[str, Any], *, where: str) -> EngineProfile:
    """Build a profile from parsed TOML; errors name ``where`` (the file) and the key."""
    allowed = (_FIELDS - set(v[0] for v in _UNIT_KEYS.values())) | set(_UNIT_KEYS)
    bad = set(data) - allowed
    if bad:
        raise ValueError(f"{where}: unknown key(s) {sorted(bad)}; allowed: {sorted(allowed)}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in _UNIT_KEYS:
            name, factor = _UNIT_KEYS[key]
            if name in values:
                raise ValueError(f"{where}: {name} is given twice (two unit spellings)")
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"{where}: {key} must be a number, got {value!r}")
            values[name] = float(value) * factor
        else:
            values[key] = value
    try:
        return EngineProfile(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _field_of(key: str) -> str:
    return _UNIT_KEYS[key][0] if key in _UNIT_KEYS else key


def _resolved(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's keys over its ``base``'s (recursively), ``[sources]`` merged entry by entry."""
    data = dict(read_toml(path, "engine profile"))
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ValueError(f"{path}: base must be an engine id (a file in {path.parent}), got {base!r}")
    base_path = (path.parent / f"{base}.toml").resolve()
    if not base_path.is_file():
        known = ", ".join(sorted(q.stem for q in path.parent.glob("*.toml")))
        raise ValueError(f"{path}: base {base!r}: unknown engine; known: {known}")
    if base_path in (*chain, path):
        cycle = " -> ".join(q.stem for q in (*chain, path, base_path))
        raise ValueError(f"{path}: base {base!r} makes a cycle ({cycle})")
    merged = _resolved(base_path, (*chain, path))
    own = data.pop("sources", {})
    if not isinstance(own, dict):
        raise ValueError(f"{path}: [sources] must be a table (field -> source), got {own!r}")
    sources = {**merged.pop("sources", {}), **own}
    given = {_field_of(k) for k in data}
    merged = {k: v for k, v in merged.items() if _field_of(k) not in given}
    return {**merged, **data, "sources": sources}


@cache
def _load(path: Path) -> EngineProfile:
    return engine_from_dict(_resolved(path), where=str(path))


def load_engine(name_or_path: str | Path | EngineProfile = DEFAULT_ENGINE) -> EngineProfile:
    """A profile by id or TOML path (a profile passes through). ValueError lists the ids for an unknown one."""
    if isinstance(name_or_path, EngineProfile):
        return name_or_path
    path = Path(name_or_path)
    if not path.is_file():
        path = engines_dir() / f"{name_or_path}.toml"
    if not path.is_file() and Path(name_or_path).exists():  # a directory or a FIFO says so
        check_input_file(name_or_path, "engine profile")
    if not path.is_file():
        raise ValueError(f"engine {str(name_or_path)!r}: unknown; known: {', '.join(engine_names())}")
    return _load(path.resolve())
