"""Kernel tables on disk: ``profiles/kernels/<device>.toml`` (published) or a ``workbench microbench`` output.

File format (every key is checked; unknown keys raise ValueError naming the file)::

    device = "h100-sxm5-80gb"
    source = "where the numbers come from"
    measured = false                  # true for microbench output
    [provenance]                      # measured tables: torch, cuda, driver, clocks, host, date (strings)
    [hbm]
    achieved_frac = 0.9
    source = "..."
    [gemm.bf16]                       # one table per precision
    points = [[1e9, 0.4], [1e12, 0.8]]  # (2*M*N*K FLOPs, fraction of the dense peak), sorted by flop
    source = "..."
    [[attention]]                     # one per family, precision, head dim, mask and window
    family = "fa2"
    dtype = "bf16"
    head_dim = 128
    causal = true
    seq_len = [512, 2048, 8192]
    fwd_frac = [0.5, 0.6, 0.65]
    bwd_frac = [0.4, 0.5, 0.55]
    source = "..."
    window = 128                      # optional: a sliding-window (banded causal) table, FLOPs of the band

A microbench output folder holds ``kernels.toml`` in this format; :func:`load_kernel_table` accepts the
folder, the file, or a device id (the published table).

Committed measurements: a microbench folder under ``profiles/measured/`` (its ``kernels.toml`` says
``measured = true``) is laid over the published table of its device by :func:`device_kernel_tables`: each GEMM
curve it measured, each attention table of the same (family, dtype, head dim, mask, window) and the HBM fraction
replace the published ones; what it did not measure (FlashAttention-3 without the ``flash_attn_3`` package,
non-causal masks, a dtype) stays published, each table keeping its own ``source``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from workbench.presets.catalog import profiles_dir, read_toml
from workbench.specs.files import check_input_file
from workbench.specs.hardware import efficiency_points
from workbench.specs.kernels import AttentionTable, KernelTable
from workbench.specs.limits import check_real, shown

TABLE_FILE = "kernels.toml"
"""Name of the table inside a microbench output folder."""

_TOP = {"device", "source", "measured", "provenance", "hbm", "gemm", "attention"}
_ATTN = {"family", "dtype", "head_dim", "causal", "seq_len", "fwd_frac", "bwd_frac", "source", "window"}


def kernels_dir() -> Path:
    """Folder of the published tables."""
    return profiles_dir() / "kernels"


def kernel_table_names() -> list[str]:
    """Device ids with a published table."""
    return sorted(p.stem for p in kernels_dir().glob("*.toml"))


def measured_kernel_dirs() -> list[Path]:
    """Folders of committed microbench tables: ``profiles/measured/*/kernels.toml``, sorted by name."""
    return sorted(p.parent for p in (profiles_dir() / "measured").glob(f"*/{TABLE_FILE}"))


def overlay(published: KernelTable, measured: KernelTable) -> KernelTable:
    """``published`` with ``measured``'s GEMM curves, attention tables (by family, dtype, head dim, mask and window)
    and HBM fraction in place of its own; flag, provenance and device of the measurement. ValueError when the
    two describe different devices."""
    if published.device != measured.device:
        raise ValueError(f"kernel tables of different devices: {published.device!r} and {measured.device!r}")

    def key(t: AttentionTable) -> tuple[str, str, int, bool, int]:
        return (t.family, t.dtype, t.head_dim, t.causal, t.window)

    replaced = {key(t) for t in measured.attention}
    return replace(
        measured,
        gemm=published.gemm | measured.gemm,
        attention=tuple(t for t in published.attention if key(t) not in replaced) + measured.attention,
        source=f"{measured.source}, over {published.source}",
    )


def device_kernel_tables() -> dict[str, KernelTable]:
    """The kernel table of every device: the published one (``profiles/kernels/``) with the committed
    measurements of that device laid over it (:func:`overlay`, folders in name order); a device with only a
    measurement gets the measurement. ValueError names the file when a table under ``profiles/measured`` is
    not marked ``measured = true`` or does not parse."""
    tables = {name: load_kernel_table(name) for name in kernel_table_names()}
    for folder in measured_kernel_dirs():
        table = load_kernel_table(folder)
        if not table.measured:
            raise ValueError(
                f"{folder / TABLE_FILE}: measured must be true for a table under profiles/measured"
            )
        base = tables.get(table.device)
        tables[table.device] = table if base is None else overlay(base, table)
    return tables


def _need(where: str, name: str, value: Any, kind: type, what: str) -> Any:
    """``value`` if it is a ``kind`` (a bool only where ``kind`` is bool), else ValueError naming the key."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ValueError(f"{where}: {name} must be {what}, got {shown(value)}")
    return value


def _numbers(where: str, name: str, value: Any) -> tuple[float, ...]:
    """A list of finite numbers (ranges are checked by the spec)."""
    _need(where, name, value, list, "a list of numbers")
    return tuple(check_real(where, name, v, minimum=-math.inf, min_open=False) for v in value)


def kernel_table_from_dict(data: dict[str, Any], *, where: str) -> KernelTable:
    """Build a table from parsed TOML; ``where`` (the file) prefixes every error, which names the key, the bad
    value and what is allowed."""
    bad = set(data) - _TOP
    if bad:
        raise ValueError(f"{where}: unknown key(s) {sorted(bad)}; allowed: {sorted(_TOP)}")
    for key in ("device", "hbm", "gemm"):
        if key not in data:
            raise ValueError(f"{where}: missing required key {key!r}")
    hbm = _need(where, "hbm", data["hbm"], dict, "a table")
    if "achieved_frac" not in hbm:
        raise ValueError(f"{where}: [hbm] needs achieved_frac")
    gemm = {}
    for dtype, table in _need(where, "gemm", data["gemm"], dict, "a table of [gemm.<dtype>] tables").items():
        _need(where, f"gemm.{dtype}", table, dict, "a table")
        if "points" not in table:
            raise ValueError(f"{where}: [gemm.{dtype}] needs points")
        gemm[dtype] = efficiency_points(where, table["points"], f"gemm.{dtype}.points")
    attention = []
    for i, t in enumerate(_need(where, "attention", data.get("attention", []), list, "a list of tables")):
        _need(where, f"attention[{i}]", t, dict, "a table")
        extra = set(t) - _ATTN
        missing = _ATTN - {"source", "window"} - set(t)
        if extra or missing:
            raise ValueError(
                f"{where}: attention[{i}] has unknown keys {sorted(extra)} / misses {sorted(missing)}"
            )
        at = f"attention[{i}]"
        try:
            attention.append(
                AttentionTable(
                    family=_need(where, f"{at}.family", t["family"], str, "a string"),
                    dtype=_need(where, f"{at}.dtype", t["dtype"], str, "a string"),
                    head_dim=_need(where, f"{at}.head_dim", t["head_dim"], int, "an integer"),
                    causal=_need(where, f"{at}.causal", t["causal"], bool, "true or false"),
                    seq_len=_numbers(where, f"{at}.seq_len", t["seq_len"]),
                    fwd_frac=_numbers(where, f"{at}.fwd_frac", t["fwd_frac"]),
                    bwd_frac=_numbers(where, f"{at}.bwd_frac", t["bwd_frac"]),
                    source=_need(where, f"{at}.source", t.get("source", ""), str, "a string"),
                    window=_need(where, f"{at}.window", t.get("window", 0), int, "an integer"),
                )
            )
        except ValueError as exc:
            text = str(exc)
            raise ValueError(text if text.startswith(where) else f"{where}: {text}") from None
    provenance = _need(where, "provenance", data.get("provenance", {}), dict, "a table of strings")
    try:
        return KernelTable(
            device=_need(where, "device", data["device"], str, "a device id string"),
            gemm=gemm,
            hbm_frac=check_real(where, "hbm.achieved_frac", hbm["achieved_frac"], maximum=1.0),
            attention=tuple(attention),
            measured=_need(where, "measured", data.get("measured", False), bool, "true or false"),
            source=_need(where, "source", data.get("source", ""), str, "a string"),
            provenance={str(k): str(v) for k, v in provenance.items()},
        )
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(where) else f"{where}: {text}") from None


def kernel_table_to_dict(table: KernelTable) -> dict[str, Any]:
    """The TOML document of ``table`` (inverse of :func:`kernel_table_from_dict`)."""
    out: dict[str, Any] = {
        "device": table.device,
        "source": table.source,
        "measured": table.measured,
        "provenance": dict(table.provenance),
        "hbm": {"achieved_frac": table.hbm_frac},
        "gemm": {dtype: {"points": [list(p) for p in pts]} for dtype, pts in table.gemm.items()},
        "attention": [
            {
                "family": t.family,
                "dtype": t.dtype,
                "head_dim": t.head_dim,
                "causal": t.causal,
                "seq_len": list(t.seq_len),
                "fwd_frac": list(t.fwd_frac),
                "bwd_frac": list(t.bwd_frac),
                "source": t.source,
            }
            | ({"window": t.window} if t.window else {})
            for t in table.attention
        ],
    }
    return out


def write_kernel_table(path: str | Path, table: KernelTable) -> Path:
    """Write ``table`` as TOML (``tomli_w``); the caller decides about overwriting."""
    import tomli_w

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(tomli_w.dumps(kernel_table_to_dict(table)).encode())
    return target


def load_kernel_table(name_or_path: str | Path) -> KernelTable:
    """A table by device id (published), by file, or by microbench output folder (its ``kernels.toml``).
    ValueError names the file and the bad key; an unknown id lists the devices with a table."""
    path = Path(name_or_path)
    if path.is_dir():
        path = path / TABLE_FILE
    elif not path.suffix:
        path = kernels_dir() / f"{name_or_path}.toml"
    if path.exists() and not path.is_file():  # a directory or a FIFO says so
        check_input_file(path, "kernel table file")
    if not path.is_file() and Path(name_or_path).exists() and not Path(name_or_path).is_dir():
        check_input_file(name_or_path, "kernel table file")  # e.g. a FIFO without a suffix: never opened
    if not path.is_file():
        raise ValueError(
            f"kernel table {str(name_or_path)!r}: no such file {path}; published tables: "
            f"{', '.join(kernel_table_names()) or 'none'}"
        )
    return kernel_table_from_dict(read_toml(path, "kernel table file"), where=str(path))
