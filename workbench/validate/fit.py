"""Fitting the framework profiles' ``fitted`` constants to published runs (``fit_constants``) and scoring them out
of sample (``cross_validate``: leave one source out).

The only constants fitted to published runs are the fields each framework profile names as ``fitted``, per fit
group, by coordinate search over physical ranges (``FIT_GRID``) on the throughput MAPE of that group's rows.
``cross_validate`` fits leaving one source out at a time and scores the left-out source with the constants fitted
without it: the out-of-sample figures.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from workbench.presets.calibration import Calibration
from workbench.presets.frameworks import UNNAMED_STACK_FRAMEWORK, load_framework
from workbench.validate.rows import cell_number, source_folds
from workbench.validate.training import (
    METRICS,
    Prepared,
    RowCase,
    constants_table,
    score,
    score_case,
    summarise,
)

FIT_GRID: dict[str, tuple[float, ...]] = {
    "kernel_efficiency_frac": (0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0),
    "host_overhead_per_layer_s": (0.0, 2.5e-5, 5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4, 4e-4, 6e-4, 8e-4),
    "comm_interference_frac": (0.0, 0.05, 0.1, 0.2, 0.3, 0.5),
    "fp8_matmul_scale": (0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "host_s_per_kernel": (5e-6, 1e-5, 1.5e-5, 2e-5, 3e-5, 4e-5, 6e-5),
}
"""Physical range searched for each fittable constant (fractions; seconds per layer; compute seconds lost per
hidden communication second; FP8 rate ratio)."""

FIT_ROWS_PER_SOURCE = 12
"""A fit prices at most this many rows of each source (spread evenly over the source's rows), so that no
large source outweighs the others and leave-one-source-out stays fast."""

_SWEEPS = 2

_DIAGONAL_ROUNDS = 8
"""At most this many rounds of diagonal steps after the sweeps (each round tries every pair of constants)."""


def _throughput_mape(cases: list[RowCase], cal: Calibration) -> float:
    apes = []
    for case in cases:
        try:
            ape = score_case(case, cal)["ape"]
        except (ValueError, LookupError):
            continue
        if ape is not None:
            apes.append(ape)
    return sum(apes) / len(apes) if apes else 0.0


UNFITTED_CONFIDENCE = "low"
"""Rows of this ``confidence`` are scored but never fitted to: the schema's ``low`` marks a measured value that
is derived or approximate, or a row inconsistent as published (profiles/validation/README.md, Enumerated
values), such as a table whose layout disagrees with the recipe it names. One such row must not set a constant
the other rows of its stack then pay for."""


def _fit_sample(cases: list[RowCase]) -> list[RowCase]:
    """The rows a fit prices: those with a throughput metric and a confidence other than
    ``UNFITTED_CONFIDENCE``, at most ``FIT_ROWS_PER_SOURCE`` per source spread evenly over its rows."""
    by_source: dict[str, list[RowCase]] = {}
    for case in cases:
        if case.row.get("confidence", "").strip().lower() == UNFITTED_CONFIDENCE:
            continue
        if any(cell_number(case.row, m) is not None for m in METRICS):
            by_source.setdefault(case.source_key, []).append(case)
    out = []
    for members in by_source.values():
        step = max(1.0, len(members) / FIT_ROWS_PER_SOURCE)
        out += [members[int(i * step)] for i in range(min(len(members), FIT_ROWS_PER_SOURCE))]
    return out


def _coordinate_search(
    cases: list[RowCase], names: list[str], start: dict[str, float], cal_with: Any
) -> dict[str, float]:
    """Minimise the throughput MAPE of ``cases`` over ``FIT_GRID``: ``_SWEEPS`` sweeps that try every grid value
    of one constant at a time, then diagonal steps (two constants one grid point each, every sign) until none
    helps. Coupled constants (a kernel efficiency and a per-layer host overhead trade against each other)
    leave one-at-a-time sweeps stuck where moving either alone costs, which the diagonal steps get out of."""
    values = dict(start)
    best = _throughput_mape(cases, cal_with(values))

    def tried(trial: dict[str, float]) -> bool:
        nonlocal best, values
        err = _throughput_mape(cases, cal_with(trial))
        if err < best - 1e-6:
            best, values = err, trial
            return True
        return False

    for _ in range(_SWEEPS):
        for name in names:
            for candidate in FIT_GRID[name]:
                if candidate != values[name]:
                    tried({**values, name: candidate})
    for _ in range(_DIAGONAL_ROUNDS):
        moved = False
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                ga, gb = FIT_GRID[a], FIT_GRID[b]
                for da, db in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                    ia, ib = _grid_index(ga, values[a]) + da, _grid_index(gb, values[b]) + db
                    if 0 <= ia < len(ga) and 0 <= ib < len(gb):
                        moved = tried({**values, a: ga[ia], b: gb[ib]}) or moved
        if not moved:
            break
    return values


def _grid_index(grid: tuple[float, ...], value: float) -> int:
    """The grid point nearest ``value`` (a start value between grid points counts as its nearest)."""
    return min(range(len(grid)), key=lambda i: abs(grid[i] - value))


def fit_constants(cases: list[RowCase], calibration: Calibration) -> dict[str, dict[str, float]]:
    """Fit the profiles' ``fitted`` constants to ``cases`` (throughput MAPE, ``_coordinate_search``: sweeps and
    diagonal steps over ``FIT_GRID``, on at most ``FIT_ROWS_PER_SOURCE`` rows per source): first the
    ``POOLED`` constants as one value over every stack (group ``pooled``), then each fit group's own constants
    starting from those.
    Groups absent from ``cases`` are not in the result: they get the pooled values (and their priors for
    the rest)."""
    from workbench.presets.calibration import POOLED_GROUP
    from workbench.specs.framework import POOLED

    sample = _fit_sample(cases)
    pooled_names = [n for n in POOLED if any(n in c.framework.fitted for c in sample)]
    prior = {n: float(getattr(load_framework(UNNAMED_STACK_FRAMEWORK), n)) for n in pooled_names}

    def pooled_cal(vals: dict[str, float]) -> Calibration:
        return dataclasses.replace(calibration, fits={POOLED_GROUP: dict(vals)})

    pooled = _coordinate_search(sample, pooled_names, prior, pooled_cal) if sample else prior
    fits: dict[str, dict[str, float]] = {POOLED_GROUP: pooled}
    groups: dict[str, list[RowCase]] = {}
    for case in sample:
        groups.setdefault(case.framework.group, []).append(case)
    for group, members in sorted(groups.items()):
        names = sorted({f for c in members for f in c.framework.fitted})
        start = {n: pooled.get(n, float(getattr(members[0].framework, n))) for n in names}

        def cal_with(vals: dict[str, float], g: str = group) -> Calibration:
            return dataclasses.replace(calibration, fits={POOLED_GROUP: pooled, g: dict(vals)})

        fits[group] = _coordinate_search(members, names, start, cal_with)
    return fits


def cross_validate(prepared: Prepared, calibration: Calibration) -> dict[str, Any]:
    """Leave-one-source-out: for each source, fit every constant on the other sources' rows (pooled values
    included) and score that source with them. Returns the summary of the out-of-sample predictions
    (top-level keys as :func:`workbench.validate.training.validate_rows`) with ``in_sample`` (the same keys for the fit on all rows),
    ``folds`` (per source: the constants it was scored with), ``fits`` and ``constants`` (the in-sample
    fit)."""
    base = dataclasses.replace(calibration, fits={})
    full = fit_constants(prepared.cases, base)
    in_sample_cal = dataclasses.replace(base, fits=full)
    in_sample = score(prepared, in_sample_cal)
    out_rows, skipped, folds = [], list(prepared.skipped), {}
    for source, train, test in source_folds(prepared.cases):
        fits = fit_constants(train, base)
        folds[source] = fits
        fold = score(Prepared(test, []), dataclasses.replace(base, fits=fits))
        out_rows += fold["rows"]
        skipped += fold["skipped"]
    result = summarise(out_rows, skipped)
    result["in_sample"] = {
        k: in_sample[k] for k in ("mape", "mape_by_source", "memory_mape", "memory_mape_by_source")
    }
    result["folds"] = folds
    result["fits"] = full
    result["constants"] = constants_table(in_sample_cal, prepared)
    return result


def write_fits(path: str | Path, fits: dict[str, dict[str, float]], *, source: str) -> Path:
    """Write fitted constants in the ``profiles/calibration`` format (the caller decides about overwriting)."""
    import tomli_w

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(tomli_w.dumps({"source": source, "fit": fits}).encode())
    return target
