"""Input files named on the command line or in a preset: checked with ``stat`` before they are opened."""

from __future__ import annotations

import stat
from pathlib import Path

from workbench.specs.limits import MAX_INPUT_FILE_BYTES


def check_input_file(path: str | Path, what: str = "file", *, max_bytes: int = MAX_INPUT_FILE_BYTES) -> Path:
    """``path`` if it names a regular file of at most ``max_bytes`` bytes (default
    ``workbench.specs.limits.MAX_INPUT_FILE_BYTES``), found with ``stat`` (never opened, so a FIFO cannot
    block; a file too large is never read, so memory stays bounded). A larger file raises ValueError
    ``PATH: WHAT of N bytes; at most MAX``.

    Raises FileNotFoundError ``PATH: no such WHAT``, IsADirectoryError ``PATH: is a directory, not a WHAT``
    or ValueError ``PATH: is not a regular file (a FIFO, socket or device); a WHAT must be one``."""
    p = Path(path)
    try:
        info = p.stat()
        mode = info.st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(f"{p}: no such {what}") from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{p}: is a directory, not a {what}")
    if not stat.S_ISREG(mode):
        raise ValueError(f"{p}: is not a regular file (a FIFO, socket or device); a {what} must be one")
    if info.st_size > max_bytes:
        raise ValueError(
            f"{p}: {what} of {info.st_size:,} bytes; at most {max_bytes:,} "
            "(MAX_INPUT_FILE_BYTES in workbench/specs/limits.py)"
        )
    return p


def normalised_cells(row: dict[str, str], codes: tuple[str, ...]) -> dict[str, str]:
    """A CSV row with every cell stripped of surrounding blanks and the ``codes`` columns (short codes such as
    ``bf16``, ``full``, ``1f1b``) lower-cased, so ``FP8`` or ``Full`` read as the schema's codes."""
    out = {k: v.strip() for k, v in row.items()}
    for col in codes:
        if col in out:
            out[col] = out[col].lower()
    return out
