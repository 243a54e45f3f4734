"""Helpers shared by the command modules: JSON output, rich tables, safe output files, display units."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

GIB = 2**30


def echo_json(obj: Any) -> None:
    """Print one JSON object on stdout (NaN/inf refused: they are not JSON)."""
    click.echo(json.dumps(obj, indent=2, allow_nan=False, default=str))


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table on stdout; numbers right-aligned."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        numeric = bool(rows) and isinstance(rows[0][i], int | float)
        table.add_column(col, justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(str(v) for v in row))
    Console(width=160).print(table)


def output_path(path: str | Path, *, force: bool) -> Path:
    """Check that ``path`` may be written: refuse to overwrite an existing file unless ``force``."""
    out = Path(path)
    if out.exists() and not force:
        raise click.ClickException(f"{out} exists; pass --force to overwrite it")
    if out.parent and not out.parent.exists():
        raise click.ClickException(f"{out.parent}: no such folder")
    return out


def fmt_count(n: float) -> str:
    """1.23e9 -> '1.23B' (counts, not bytes)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def fmt_gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.1f} GiB"
