"""Price and power tables are read once per change of their file (the app prices every change of a control): a
second load returns the same table, and an edited file is read again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from workbench.presets.catalog import profiles_dir
from workbench.presets.power import load_power_table
from workbench.presets.prices import load_price_table


def _edited(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    stat = path.stat()
    path.write_text(text.replace(old, new, 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a later modification time


def test_power_table_is_read_once_per_change(tmp_path: Path) -> None:
    path = tmp_path / "devices.toml"
    shutil.copy(profiles_dir() / "power" / "devices.toml", path)
    first = load_power_table(path)
    assert load_power_table(path) is first
    device = next(iter(first.devices.values()))
    _edited(path, f"tdp_w = {device.tdp_w:g}", f"tdp_w = {device.tdp_w + 1:g}")
    again = load_power_table(path)
    assert again is not first and again.devices[device.device].tdp_w == device.tdp_w + 1


def test_price_table_is_read_once_per_change(tmp_path: Path) -> None:
    path = tmp_path / "cloud.toml"
    shutil.copy(profiles_dir() / "prices" / "cloud.toml", path)
    first = load_price_table(path)
    assert load_price_table(path) is first
    _edited(path, 'id = "', 'id = "edited-')
    assert load_price_table(path).id.startswith("edited-")
