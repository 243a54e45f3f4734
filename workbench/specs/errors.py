"""Shared checks that turn bad input into a ``ValueError`` naming the field, the value and what is allowed."""

from __future__ import annotations

from enum import Enum
from typing import Any


def _owner(obj: Any) -> str:
    name = getattr(obj, "name", None) or getattr(obj, "id", None)
    kind = type(obj).__name__
    return f"{kind} {name!r}" if isinstance(name, str) and name else kind


def check_positive(obj: Any, field: str, *, allow_zero: bool = False) -> None:
    """Raise ValueError unless ``obj.field`` is an int/float > 0 (>= 0 with ``allow_zero``); bools refused."""
    value = getattr(obj, field)
    ok_type = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok_type or value != value or value < 0 or (value == 0 and not allow_zero):
        allowed = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{_owner(obj)}: {field} must be a number {allowed}, got {value!r}")


def check_int(obj: Any, field: str, *, minimum: int = 1) -> None:
    """Raise ValueError unless ``obj.field`` is an int >= minimum (bools refused)."""
    value = getattr(obj, field)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{_owner(obj)}: {field} must be an integer >= {minimum}, got {value!r}")


def check_choice(obj: Any, field: str, enum: type[Enum]) -> None:
    """Coerce ``obj.field`` to a member of ``enum`` (frozen dataclasses allowed) or raise listing the choices."""
    value = getattr(obj, field)
    try:
        member = enum(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in enum)
        raise ValueError(f"{_owner(obj)}: {field} must be one of {allowed}; got {value!r}") from None
    object.__setattr__(obj, field, member)
