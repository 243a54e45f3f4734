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
    [[attention]]                     # one per family, precision, head dim and mask
    family = "fa2"
    dtype = "bf16"
    head_dim = 128
    causal = true
    seq_len = [512, 2048, 8192]
    fwd_frac = [0.5, 0.6, 0.65]
    bwd_frac = [0.4, 0.5, 0.55]
    source = "..."

A microbench output folder holds ``kernels.toml`` in this format; :func:`load_kernel_table` accepts the
folder, the file, or a device id (the published table).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from workbench.presets.catalog import profiles_dir
from workbench.specs.kernels import AttentionTable, KernelTable

TABLE_FILE = "kernels.toml"
"""Name of the table inside a microbench output folder."""

_TOP = {"device", "source", "measured", "provenance", "hbm", "gemm", "attention"}
_ATTN = {"family", "dtype", "head_dim", "causal", "seq_len", "fwd_frac", "bwd_frac", "source"}


def kernels_dir() -> Path:
    """Folder of the published tables."""
    return profiles_dir() / "kernels"


def kernel_table_names() -> list[str]:
    """Device ids with a published table."""
    return sorted(p.stem for p in kernels_dir().glob("*.toml"))


def kernel_table_from_dict(data: dict[str, Any], *, where: str) -> KernelTable:
    """Build a table from parsed TOML; ``where`` (the file) prefixes every error."""
    bad = set(data) - _TOP
    if bad:
        raise ValueError(f"{where}: unknown key(s) {sorted(bad)}; allowed: {sorted(_TOP)}")
    for key in ("device", "hbm", "gemm"):
        if key not in data:
            raise ValueError(f"{where}: missing required key {key!r}")
    hbm = data["hbm"]
    if "achieved_frac" not in hbm:
        raise ValueError(f"{where}: [hbm] needs achieved_frac")
    gemm = {}
    for dtype, table in data["gemm"].items():
        if "points" not in table:
            raise ValueError(f"{where}: [gemm.{dtype}] needs points")
        gemm[dtype] = tuple((float(x), float(f)) for x, f in table["points"])
    attention = []
    for i, t in enumerate(data.get("attention", [])):
        extra = set(t) - _ATTN
        missing = _ATTN - {"source"} - set(t)
        if extra or missing:
            raise ValueError(
                f"{where}: attention[{i}] has unknown keys {sorted(extra)} / misses {sorted(missing)}"
            )
        try:
            attention.append(
                AttentionTable(
                    family=t["family"],
                    dtype=t["dtype"],
                    head_dim=int(t["head_dim"]),
                    causal=bool(t["causal"]),
                    seq_len=tuple(float(s) for s in t["seq_len"]),
                    fwd_frac=tuple(float(f) for f in t["fwd_frac"]),
                    bwd_frac=tuple(float(f) for f in t["bwd_frac"]),
                    source=t.get("source", ""),
                )
            )
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    try:
        return KernelTable(
            device=str(data["device"]),
            gemm=gemm,
            hbm_frac=float(hbm["achieved_frac"]),
            attention=tuple(attention),
            measured=bool(data.get("measured", False)),
            source=str(data.get("source", "")),
            provenance={str(k): str(v) for k, v in data.get("provenance", {}).items()},
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


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
    if not path.is_file():
        raise ValueError(
            f"kernel table {str(name_or_path)!r}: no such file {path}; published tables: "
            f"{', '.join(kernel_table_names()) or 'none'}"
        )
    with path.open("rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML ({exc})") from None
    return kernel_table_from_dict(data, where=str(path))
