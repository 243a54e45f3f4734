"""The price table (``profiles/prices/*.toml``) and a cluster file's ``[price]`` section.

Table schema: ``[[prices]]`` rows (``device``, ``kind``, ``usd_per_device_hour``, ``provider``, ``region``,
``date_read``, ``page_date``, ``source``, ``note``) and ``[[unpriced]]`` rows (``device``, ``note``) for devices
with no public price. The first row of a device and kind is its default. A cluster file's ``[price]`` has the
row's keys but ``device`` (the cluster's device). Every error names the file, the field and what is allowed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from workbench.presets.catalog import _Table, price_row_from_toml, profiles_dir, read_toml
from workbench.specs.price import PRICE_KINDS, PriceSpec

DEFAULT_TABLE = "cloud"


@dataclass(frozen=True, kw_only=True, slots=True)
class PriceTable:
    """Every price row of one table, and the devices it has no price for (with why)."""

    id: str
    rows: tuple[PriceSpec, ...]
    unpriced: dict[str, str]
    path: str

    def price(self, device: str, kind: str = "on_demand") -> PriceSpec:
        """The default (first) row of ``device`` and ``kind``; ValueError saying why there is none."""
        if kind not in PRICE_KINDS[:2]:
            raise ValueError(f"price kind must be one of {', '.join(PRICE_KINDS[:2])}, got {kind!r}")
        for row in self.rows:
            if row.device == device and row.kind == kind:
                return row
        why = self.unpriced.get(device, f"no {kind} row for it")
        raise ValueError(
            f"{self.path}: no {kind} price for device {device!r} ({why}); give --price-per-device-hour or a "
            "[price] section in the cluster file"
        )

    def for_device(self, device: str) -> list[PriceSpec]:
        return [r for r in self.rows if r.device == device]


def price_table_names() -> list[str]:
    """Sorted ids of ``profiles/prices/*.toml``."""
    return sorted(p.stem for p in (profiles_dir() / "prices").glob("*.toml"))


def load_price_table(name_or_path: str | Path = DEFAULT_TABLE) -> PriceTable:
    """A price table by id (``cloud``) or path. ValueError naming the file, the row, the field and what is
    allowed: a price <= 0, a row without ``date_read`` or ``source``, an unknown key or kind."""
    path = Path(name_or_path)
    if not path.is_file():
        candidate = profiles_dir() / "prices" / f"{name_or_path}.toml"
        if not candidate.is_file() and (path.suffix == ".toml" or len(path.parts) > 1):
            raise ValueError(f"price table {str(name_or_path)!r} not found")
        if not candidate.is_file():
            raise ValueError(
                f"unknown price table {name_or_path!r} (known: {', '.join(price_table_names())})"
            )
        path = candidate
    return _read_price_table(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _read_price_table(origin: str, mtime_ns: int) -> PriceTable:
    """The table at ``origin`` as of ``mtime_ns`` (read once per change of the file: the app prices every change
    of a control; a failed read is not kept)."""
    path = Path(origin)
    top = _Table(read_toml(path, "price table"), origin, {"id", "name", "prices", "unpriced"})
    rows = tuple(
        price_row_from_toml(r, f"{origin} prices[{i}]") for i, r in enumerate(top.get("prices", list, []))
    )
    unpriced: dict[str, str] = {}
    for i, r in enumerate(top.get("unpriced", list, [])):
        u = _Table(r if isinstance(r, dict) else {}, f"{origin} unpriced[{i}]", {"device", "note"})
        unpriced[u.get("device", str)] = u.get("note", str)
    return PriceTable(id=top.get("id", str, path.stem), rows=rows, unpriced=unpriced, path=origin)
