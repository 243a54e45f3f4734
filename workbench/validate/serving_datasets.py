"""Named benchmark data sets of serving validation rows (``profiles/validation/datasets.toml``): the mean prompt
and generated lengths a row takes when it names its data set in ``input_tokens_dist`` / ``output_tokens_dist``
and leaves the means and totals blank (MLPerf's llama2-70b rows give only the data set). The table is data, each
figure with its source there; this module reads it and checks it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from workbench.presets.catalog import profiles_dir, read_toml

DATASETS_FILE = profiles_dir() / "validation" / "datasets.toml"
"""The table of named benchmark data sets (one TOML table per ``*_dist`` code)."""

_REQUIRED = ("name", "samples", "input_tokens_mean", "output_tokens_mean")


@dataclass(frozen=True)
class BenchmarkDataset:
    """One named data set: ``samples`` requests, mean prompt and generated lengths in tokens (the generated one
    is the served model's, not the data set's reference answers), the prompt-length median and maximum where
    published (None otherwise), and the source line of each figure."""

    code: str
    name: str
    samples: int
    input_tokens_mean: float
    output_tokens_mean: float
    input_tokens_median: float | None
    input_tokens_max: int | None
    sources: dict[str, str]

    def mean_tokens(self, side: str) -> float:
        """Mean length of ``side`` (``"input"`` or ``"output"``) in tokens; ValueError for another side."""
        if side not in ("input", "output"):
            raise ValueError(f"side must be 'input' or 'output', not {side!r}")
        return self.input_tokens_mean if side == "input" else self.output_tokens_mean


def _parse(code: str, entry: dict, origin: Path) -> BenchmarkDataset:
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise ValueError(
            f"{origin}: data set [{code}] lacks {', '.join(missing)} (required: {', '.join(_REQUIRED)})"
        )
    sources = dict(entry.get("sources", {}))
    unsourced = [k for k in entry if k not in ("name", "sources") and k not in sources]
    if unsourced:
        raise ValueError(
            f"{origin}: data set [{code}] gives {', '.join(unsourced)} without a line in [{code}.sources]"
        )
    for key in ("samples", "input_tokens_mean", "output_tokens_mean"):
        if not isinstance(entry[key], int | float) or entry[key] <= 0:
            raise ValueError(f"{origin}: data set [{code}] {key} = {entry[key]!r}; must be a positive number")
    return BenchmarkDataset(
        code=code,
        name=str(entry["name"]),
        samples=int(entry["samples"]),
        input_tokens_mean=float(entry["input_tokens_mean"]),
        output_tokens_mean=float(entry["output_tokens_mean"]),
        input_tokens_median=entry.get("input_tokens_median"),
        input_tokens_max=entry.get("input_tokens_max"),
        sources=sources,
    )


@cache
def load_datasets(path: Path = DATASETS_FILE) -> dict[str, BenchmarkDataset]:
    """Every data set of the table at ``path`` by code. ValueError naming the file, the data set and the key when
    a required key is missing, a figure has no source line or a count or mean is not positive."""
    data = read_toml(path, "benchmark data set table")
    return {code: _parse(code, entry, path) for code, entry in data.items()}


def named_dataset(row: dict[str, str], side: str) -> BenchmarkDataset | None:
    """The data set the row's ``<side>_tokens_dist`` names, or None when the code is blank, ``fixed`` or not in
    the table (a trace code, say)."""
    code = row.get(f"{side}_tokens_dist", "").strip()
    return load_datasets().get(code) if code else None
