"""Backends found by name through the ``workbench.backends`` entry-point group.

A third party adds a backend with one entry point in its own package; nothing here changes.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

from workbench.specs.estimate import Backend

GROUP = "workbench.backends"


def backend_entry_points() -> dict[str, EntryPoint]:
    """Registered backends by name. Raises ValueError when two distributions register the same name."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in found and found[ep.name].value != ep.value:
            raise ValueError(
                f"backend name {ep.name!r} is registered twice: {found[ep.name].value} and {ep.value}"
            )
        found[ep.name] = ep
    return dict(sorted(found.items()))


def backend_names() -> list[str]:
    return list(backend_entry_points())


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate the backend registered as ``name`` with keyword ``options``.

    Raises ValueError for an unknown name (listing the registered ones) or an object that does not
    implement the ``Backend`` protocol.
    """
    eps = backend_entry_points()
    if name not in eps:
        raise ValueError(f"unknown backend {name!r}; registered: {', '.join(eps) or 'none'}")
    backend = eps[name].load()(**options)
    if not isinstance(backend, Backend):
        raise ValueError(f"entry point {eps[name].value} does not implement the Backend protocol")
    return backend
