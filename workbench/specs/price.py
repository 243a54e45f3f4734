"""What a device-hour costs: ``PriceSpec`` (one published list price, or a user's number).

A price is per device and per hour of wall time, in US dollars, whatever the provider bills (an 8-GPU instance's
hourly price is divided by 8). Prices date fast: every table row and every cluster ``[price]`` section says when
it was read (``date_read``) and where (``source``); the output of an estimate says which price it used.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from workbench.specs.limits import check_real, shown

PRICE_KINDS = ("on_demand", "reserved", "override")
"""``on_demand`` (no commitment), ``reserved`` (a commitment: reserved instances, capacity blocks, always-on
workers) or ``override`` (``--price-per-device-hour``: a number the user typed, no source)."""

MAX_USD_PER_DEVICE_HOUR = 1000.0
"""Largest price per device-hour accepted: list prices of the most expensive accelerators are below $20 per
device-hour (2024-2026); 1,000 catches a per-instance or per-month price typed as per-device-hour."""


def check_iso_date(where: str, field: str, value: object) -> str:
    """``value`` as ``YYYY-MM-DD`` text (a string or a TOML date); ValueError naming ``where`` and ``field``."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise ValueError(f"{where}: {field} must be a date YYYY-MM-DD, got {shown(value)}")


@dataclass(frozen=True, kw_only=True, slots=True)
class PriceSpec:
    """One price per device-hour and where it comes from."""

    device: str
    """Device preset id the price is for (``h100-sxm5-80gb``)."""
    usd_per_device_hour: float
    """US dollars per device per hour of wall time. In (0, ``MAX_USD_PER_DEVICE_HOUR``]."""
    kind: str = "on_demand"
    """One of ``PRICE_KINDS``."""
    provider: str = ""
    region: str = ""
    date_read: str = ""
    """When the price was read, ``YYYY-MM-DD``. Required except for ``override``."""
    source: str = ""
    """URL (or document) the price was read from. Required except for ``override``."""
    note: str = ""

    def __post_init__(self) -> None:
        where = f"price of {shown(self.device)}"
        check_real(where, "usd_per_device_hour", self.usd_per_device_hour, maximum=MAX_USD_PER_DEVICE_HOUR)
        if self.kind not in PRICE_KINDS:
            raise ValueError(f"{where}: kind must be one of {', '.join(PRICE_KINDS)}, got {shown(self.kind)}")
        if self.kind != "override":
            if not self.date_read:
                raise ValueError(f"{where}: date_read is required (YYYY-MM-DD: prices date fast)")
            object.__setattr__(self, "date_read", check_iso_date(where, "date_read", self.date_read))
            if not self.source:
                raise ValueError(f"{where}: source is required (the page the price was read from)")

    def describe(self) -> str:
        """One line for the output: ``$4.18 per device-hour (on_demand, RunPod, read 2026-12-07: URL)``."""
        if self.kind == "override":
            return f"${self.usd_per_device_hour:,.2f} per device-hour (--price-per-device-hour)"
        where = ", ".join(x for x in (self.provider, self.region) if x)
        return (
            f"${self.usd_per_device_hour:,.2f} per device-hour ({self.kind}, {where}, read {self.date_read}: "
            f"{self.source})"
        )
