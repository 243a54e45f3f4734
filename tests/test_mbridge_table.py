"""The Megatron-Bridge 25.11 rows of profiles/validation/training_public.csv against the published table they cite.

The fixtures are the "25.11 NeMo Container / Pre-Training Performance" section of NVIDIA-NeMo/Megatron-Bridge
docs/performance-summary.md at the two revisions the rows cite (@97ad8cc6f, 2025-12-04, and @5776a6d90,
2025-12-10), verbatim. Each row is matched to the table line of its cited revision and system by model, GPU
count and tokens/s; its ``fp8_recipe`` (a column of this copy only) must be the table's Precision: FP8-CS is
Transformer Engine's per-tensor current scaling (``current``), FP8-MX MXFP8 (``mxfp8``), BF16 none. Where the
table gives a second figure in parentheses (FP8-CS (FP8-MX)), the row's measured value is the first.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workbench.validate import DEFAULT_DATA, read_rows

FIXTURES = Path(__file__).parent / "fixtures" / "mbridge"

PRECISION_RECIPE = {"FP8-CS": ("fp8", "current"), "FP8-MX": ("fp8", "mxfp8"), "BF16": ("bf16", "")}
"""The table's Precision (its first value) as the CSV's (dtype, fp8_recipe)."""


def _tables() -> dict[tuple[str, str], list[dict[str, str]]]:
    """(revision, system) -> the table's lines as dicts of its header's columns."""
    out: dict[tuple[str, str], list[dict[str, str]]] = {}
    for path in sorted(FIXTURES.glob("performance-summary-25.11@*.md")):
        revision = path.stem.split("@")[1]
        system, header = "", None
        for line in path.read_text().splitlines():
            if line.startswith("#### System:"):
                system, header = line.split(":", 1)[1].strip(), None
            elif line.startswith("|") and not line.startswith("|--"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if header is None:
                    header = cells
                elif len(cells) == len(header):  # the first revision's H100 Qwen3-235B line lacks a cell
                    out.setdefault((revision, system), []).append(dict(zip(header, cells, strict=True)))
    return out


def _first(cell: str) -> str:
    """A cell's first value: '37556 (36108)' -> '37556', 'FP8-CS (FP8-MX)' -> 'FP8-CS'."""
    return cell.split("(")[0].strip()


def _mbridge_rows() -> list[dict[str, str]]:
    return [r for r in read_rows(DEFAULT_DATA) if r["source_key"] == "MBRIDGE_2511"]


def _table_line(row: dict[str, str], tables: dict[tuple[str, str], list[dict[str, str]]]) -> dict[str, str]:
    revision = re.search(r"docs/performance-summary\.md @([0-9a-f]+)", row["source"])
    system = re.search(r"(DGX-[A-Z0-9]+)", row["source"])
    assert revision and system, row["id"]
    lines = [
        line
        for line in tables[(revision.group(1), system.group(1))]
        if line["Model"].split(" (")[0].strip() == row["model_name"]
        and int(line["#-GPUs"]) == int(row["num_devices"])
        and float(_first(line["Tokens / sec / GPU"])) == float(row["measured_tokens_per_s_per_device"])
    ]
    assert len(lines) == 1, (row["id"], lines)
    return lines[0]


def test_fixtures_hold_both_revisions_and_every_system() -> None:
    tables = _tables()
    systems = {"DGX-GB300", "DGX-GB200", "DGX-B200", "DGX-H100"}
    assert {k for k in tables} == {(rev, s) for rev in ("97ad8cc6f", "5776a6d90") for s in systems}


@pytest.mark.parametrize("row", _mbridge_rows(), ids=lambda r: r["id"])
def test_row_precision_is_the_tables(row: dict[str, str]) -> None:
    line = _table_line(row, _tables())
    dtype, recipe = PRECISION_RECIPE[_first(line["Precision"])]
    assert (row["dtype"].lower(), row["fp8_recipe"].lower()) == (dtype, recipe)


def test_the_fp8_mx_rows_are_read_as_mxfp8() -> None:
    """The FP8-MX MoE runs (Qwen3 on GB300, GB200, B200; DeepSeek-V3 on B200 and its two FP8-MX rows) read as
    MXFP8: one Transformer Engine quantisation kernel per expert split, not current scaling's three."""
    mx = {r["id"] for r in _mbridge_rows() if r["fp8_recipe"] == "mxfp8"}
    assert {"MBRIDGE_2511-006", "MBRIDGE_2511-013", "MBRIDGE_2511-017", "MBRIDGE_2511-019"} <= mx
    assert "MBRIDGE_2511-025" not in mx  # FP8-CS on H100
