"""The power table (``profiles/power/devices.toml``): ``DevicePower`` per device preset and the power of a node
besides its devices. Schema and sources: the file's header. Errors name the file, the row and the field."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.presets.catalog import _Table, profiles_dir, read_toml
from workbench.specs.power import DevicePower


@dataclass(frozen=True, kw_only=True, slots=True)
class PowerTable:
    devices: dict[str, DevicePower]
    node_overhead_w: dict[str, float]
    """Cluster id -> power of one node besides its devices, W."""
    default_node_overhead_w_per_device: float
    path: str

    def device(self, device_id: str) -> DevicePower:
        """The row of ``device_id``; ValueError listing the known devices."""
        if device_id not in self.devices:
            raise ValueError(
                f"{self.path}: no power row for device {device_id!r} (known: {', '.join(sorted(self.devices))})"
            )
        return self.devices[device_id]

    def node_overhead(self, cluster_id: str, devices_per_node: int) -> float:
        """Watts of one node besides its devices: the cluster's row, else the per-device default."""
        return self.node_overhead_w.get(
            cluster_id, self.default_node_overhead_w_per_device * devices_per_node
        )


def _number(t: _Table, key: str, default: Any = ...) -> float:
    value = t.number(key, default)
    if value is not default and value < 0:
        raise ValueError(f"{t.origin}: key {key!r} must be >= 0, got {value!r}")
    return float(value)


def load_power_table(path: str | Path | None = None) -> PowerTable:
    """``profiles/power/devices.toml`` (or ``path``) as a ``PowerTable``; ValueError naming the file and field."""
    path = Path(path) if path is not None else profiles_dir() / "power" / "devices.toml"
    if not path.is_file():
        read_toml(path, "power table")  # its error names the file and what is wrong
    return _read_power_table(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _read_power_table(origin: str, mtime_ns: int) -> PowerTable:
    """The table at ``origin`` as of ``mtime_ns`` (read once per change of the file; a failed read is not kept)."""
    path = Path(origin)
    keys = {"id", "name", "compute_frac", "memory_frac", "wait_frac", "idle_frac", "devices", "nodes",
            "default_node_overhead_w_per_device"}  # fmt: skip
    top = _Table(read_toml(path, "power table"), origin, keys)
    fracs = {k: _number(top, k) for k in ("compute_frac", "memory_frac", "wait_frac", "idle_frac")}
    devices: dict[str, DevicePower] = {}
    for i, row in enumerate(top.get("devices", list)):
        where = f"{origin} devices[{i}]"
        t = _Table(
            row if isinstance(row, dict) else {}, where, {"device", "tdp_w", "min_cap_w", "idle_w", "source"}
        )
        tdp = _number(t, "tdp_w")
        try:
            devices[t.get("device", str)] = DevicePower(
                device=t.get("device", str),
                tdp_w=tdp,
                idle_w=_number(t, "idle_w", fracs["idle_frac"] * tdp),
                min_cap_w=_number(t, "min_cap_w"),
                compute_frac=fracs["compute_frac"],
                memory_frac=fracs["memory_frac"],
                wait_frac=fracs["wait_frac"],
                source=t.get("source", str, ""),
            )
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    nodes: dict[str, float] = {}
    for i, row in enumerate(top.get("nodes", list, [])):
        t = _Table(
            row if isinstance(row, dict) else {}, f"{origin} nodes[{i}]", {"cluster", "overhead_w", "source"}
        )
        nodes[t.get("cluster", str)] = _number(t, "overhead_w")
    return PowerTable(
        devices=devices,
        node_overhead_w=nodes,
        default_node_overhead_w_per_device=_number(top, "default_node_overhead_w_per_device"),
        path=origin,
    )
