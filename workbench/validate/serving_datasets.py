"""Named benchmark data sets of serving validation rows (``profiles/validation/datasets.toml``): the mean prompt
and generated lengths a row takes when it names its data set in ``input_tokens_dist`` / ``output_tokens_dist``
and leaves the means and totals blank (MLPerf rows give only the data set). The table is data, each figure with
its source there; this module reads it, checks it and finds a data set by the code a row writes: its own code, one
of its ``aliases``, or, for another ``mlperf-`` code, the one data set whose benchmark ``model`` the code names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from workbench.presets.catalog import profiles_dir, read_toml

DATASETS_FILE = profiles_dir() / "validation" / "datasets.toml"
"""The table of named benchmark data sets (one TOML table per ``*_dist`` code)."""

_REQUIRED = ("name", "samples", "input_tokens_mean")
_UNSOURCED = ("name", "model", "aliases", "sources")
"""Keys that are names, not figures: no source line."""

MLPERF_PREFIX = "mlperf-"
"""The code prefix of MLPerf Inference data sets (``mlperf-<benchmark model>-<data set>``)."""


@dataclass(frozen=True)
class BenchmarkDataset:
    """One named data set: ``samples`` requests, mean prompt and generated lengths in tokens (the generated one
    is the served model's, not the data set's reference answers; None where the source states none in tokens),
    the prompt-length median and maximum where published (None otherwise), the benchmark's model name and the
    codes that also name it, and the source line of each figure."""

    code: str
    name: str
    samples: int
    input_tokens_mean: float
    output_tokens_mean: float | None
    input_tokens_median: float | None
    input_tokens_max: int | None
    sources: dict[str, str]
    model: str | None = None
    aliases: tuple[str, ...] = ()

    def mean_tokens(self, side: str) -> float | None:
        """Mean length of ``side`` (``"input"`` or ``"output"``) in tokens, None for an output length the data
        set does not state; ValueError for another side."""
        if side not in ("input", "output"):
            raise ValueError(f"side must be 'input' or 'output', not {side!r}")
        return self.input_tokens_mean if side == "input" else self.output_tokens_mean


def _positive(code: str, entry: dict, key: str, origin: Path) -> None:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{origin}: data set [{code}] {key} = {value!r}; must be a positive number")


def _names(code: str, entry: dict, origin: Path) -> tuple[str | None, tuple[str, ...]]:
    model, aliases = entry.get("model"), entry.get("aliases", [])
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ValueError(f"{origin}: data set [{code}] model = {model!r}; must be a benchmark model name")
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise ValueError(f"{origin}: data set [{code}] aliases = {aliases!r}; must be a list of codes")
    return model, tuple(a.strip().lower() for a in aliases)


def _parse(code: str, entry: dict, origin: Path) -> BenchmarkDataset:
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise ValueError(
            f"{origin}: data set [{code}] lacks {', '.join(missing)} (required: {', '.join(_REQUIRED)})"
        )
    sources = dict(entry.get("sources", {}))
    unsourced = [k for k in entry if k not in _UNSOURCED and k not in sources]
    if unsourced:
        raise ValueError(
            f"{origin}: data set [{code}] gives {', '.join(unsourced)} without a line in [{code}.sources]"
        )
    for key in ("samples", "input_tokens_mean", "output_tokens_mean"):
        if key in entry:
            _positive(code, entry, key, origin)
    model, aliases = _names(code, entry, origin)
    output = entry.get("output_tokens_mean")
    return BenchmarkDataset(
        code=code,
        name=str(entry["name"]),
        samples=int(entry["samples"]),
        input_tokens_mean=float(entry["input_tokens_mean"]),
        output_tokens_mean=None if output is None else float(output),
        input_tokens_median=entry.get("input_tokens_median"),
        input_tokens_max=entry.get("input_tokens_max"),
        sources=sources,
        model=model,
        aliases=aliases,
    )


@cache
def load_datasets(path: Path = DATASETS_FILE) -> dict[str, BenchmarkDataset]:
    """Every data set of the table at ``path`` by code. ValueError naming the file, the data set and the key when
    a required key is missing, a figure has no source line, a count or mean is not positive, ``model`` is not a
    name or ``aliases`` not a list of codes, or an alias is another data set's code or alias."""
    data = read_toml(path, "benchmark data set table")
    sets = {code: _parse(code, entry, path) for code, entry in data.items()}
    owner = {code.lower(): code for code in sets}
    for code, dataset in sets.items():
        for alias in dataset.aliases:
            if owner.setdefault(alias, code) != code:
                raise ValueError(
                    f"{path}: data set [{code}] alias {alias!r} already names [{owner[alias]}]; "
                    "an alias must name one data set"
                )
    return sets


def _squash(text: str) -> str:
    """Lower case, letters and digits only: 'Llama-3.1-8B' and 'llama3_1-8b' both read 'llama318b'."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def resolve_dataset(code: str, path: Path = DATASETS_FILE) -> tuple[BenchmarkDataset, str | None] | None:
    """The data set a ``*_dist`` code names, and why when not by its own code: the data set of that code; else
    the one an alias names (case-insensitive); else, for a code starting ``mlperf-``, the one data set whose
    ``model`` the code contains (compared in lower-case letters and digits, so 'mlperf-llama-3.1-8b-cnn' names
    llama3.1-8b's). None for a blank code, an unknown code outside MLPerf, or an MLPerf code naming no
    benchmark model of the table or more than one."""
    code = code.strip()
    if not code:
        return None
    sets = load_datasets(path)
    if code in sets:
        return sets[code], None
    low = code.lower()
    for dataset in sets.values():
        if low == dataset.code.lower():
            return dataset, f"{code!r} is {dataset.code} in other letter case"
        if low in dataset.aliases:
            return dataset, f"{code!r} is an alias of {dataset.code}"
    if not low.startswith(MLPERF_PREFIX):
        return None
    named = [d for d in sets.values() if d.model and _squash(d.model) in _squash(low)]
    if len(named) != 1:
        return None
    return named[0], f"{code!r} names MLPerf benchmark {named[0].model}, whose data set is {named[0].code}"


def named_dataset(
    row: dict[str, str], side: str, assumed: list[str] | None = None
) -> BenchmarkDataset | None:
    """The data set the row's ``<side>_tokens_dist`` names (``resolve_dataset``), or None when the code is blank,
    ``fixed`` or names none (a trace code, say). When the code is not the data set's own, ``assumed`` (if given)
    says which data set was taken and why."""
    found = resolve_dataset(row.get(f"{side}_tokens_dist", ""))
    if found is None:
        return None
    dataset, why = found
    if why is not None and assumed is not None:
        assumed.append(
            f"{side}_tokens_dist: the data set {dataset.code} ({why}; profiles/validation/datasets.toml)"
        )
    return dataset
