"""Shared checks that turn bad input into a ``ValueError`` naming the field, the value and what is allowed.

Upper bounds come from :mod:`workbench.specs.limits` (one place, each bound with its reason).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any, TypeVar

from workbench.specs.limits import check_count, check_real, shown

T = TypeVar("T")


def unique_index(records: Iterable[T], key: Callable[[T], str], twice: str) -> Mapping[str, T]:
    """Read-only key -> record, in the given order (a table of records: rules, schedules, plan axes). Raises
    ValueError ``twice.format(key)`` when a key appears twice: a registry never drops a duplicate silently."""
    out: dict[str, T] = {}
    for record in records:
        name = key(record)
        if name in out:
            raise ValueError(twice.format(repr(name)))
        out[name] = record
    return MappingProxyType(out)


def _owner(obj: Any) -> str:
    name = getattr(obj, "name", None) or getattr(obj, "id", None)
    kind = type(obj).__name__
    return f"{kind} {shown(name)}" if isinstance(name, str) and name else kind


def check_positive(
    obj: Any, field: str, *, allow_zero: bool = False, maximum: float = math.inf, limit: str | None = None
) -> None:
    """Raise ValueError unless ``obj.field`` is a finite int/float > 0 (>= 0 with ``allow_zero``) and
    <= ``maximum`` (the constant ``limit`` of :mod:`workbench.specs.limits`); bools, nan and inf refused."""
    value = getattr(obj, field)
    check_real(_owner(obj), field, value, min_open=not allow_zero, maximum=maximum, limit=limit)


def check_int(
    obj: Any, field: str, *, minimum: int = 1, maximum: int | None = None, limit: str | None = None
) -> None:
    """Raise ValueError unless ``obj.field`` is an int >= minimum (and <= ``maximum``, the constant ``limit`` of
    :mod:`workbench.specs.limits`); bools refused."""
    value = getattr(obj, field)
    if maximum is not None:
        check_count(_owner(obj), field, value, minimum=minimum, maximum=maximum, limit=limit)
    elif not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{_owner(obj)}: {field} must be an integer >= {minimum}, got {shown(value)}")


def check_choice(obj: Any, field: str, enum: type[Enum]) -> None:
    """Coerce ``obj.field`` to a member of ``enum`` (frozen dataclasses allowed) or raise listing the choices."""
    value = getattr(obj, field)
    try:
        member = enum(value)
    except (ValueError, TypeError):
        allowed = ", ".join(str(m.value) for m in enum)
        raise ValueError(f"{_owner(obj)}: {field} must be one of {allowed}; got {shown(value)}") from None
    object.__setattr__(obj, field, member)
