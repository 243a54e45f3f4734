"""What ``workbench validate --cv source`` adds beyond the errors: the error-band table, the spread of every
fitted constant over the leave-one-source-out folds, and the mean signed error.

- :func:`residuals` turns the out-of-sample rows of :func:`workbench.validate.fit.cross_validate` into
  :class:`workbench.estimate.band.Residual` (ln measured / predicted throughput, with the row's regime);
  :func:`band_table` calibrates their band (:func:`workbench.estimate.band.calibrate`);
  :func:`write_band_table` writes ``profiles/calibration/error_band.toml`` (date and commit in it).
- :func:`constant_spread`: each fitted constant's in-sample value beside its min, max and standard deviation
  over the folds (a fold fits every constant without one source).
- :func:`signed_errors`: mean (predicted - measured) / measured in throughput terms (a step-time row's sign
  flipped), overall and per source: > 0 means the model predicts runs faster than they ran.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from workbench.estimate.band import BandTable, Residual, band_table_toml, calibrate, coverage, regime_of
from workbench.validate.training import Prepared, pricer

STEP_METRIC = "measured_step_time_s"


def throughput_log_ratio(row: dict[str, Any]) -> float | None:
    """ln(measured / predicted throughput) of a scored row (a step-time row: ln(predicted / measured))."""
    if row.get("ape") is None or not row.get("predicted") or not row.get("measured"):
        return None
    ratio = math.log(row["measured"] / row["predicted"])
    return -ratio if row["metric"] == STEP_METRIC else ratio


def residuals(prepared: Prepared, result: dict[str, Any]) -> tuple[Residual, ...]:
    """The out-of-sample residual of every scored row of a ``cross_validate`` result, with its regime."""
    cases = {c.id: c for c in prepared.cases}
    out = []
    for row in result["rows"]:
        x = throughput_log_ratio(row)
        case = cases.get(row["id"])
        if x is None or case is None:
            continue
        regime = regime_of(case.model, case.workload, case.plan, stack=case.framework.group)
        out.append(Residual(id=case.id, source_key=case.source_key, regime=regime, log_ratio=x))
    return tuple(out)


def band_table(prepared: Prepared, result: dict[str, Any], *, generated: str, source: str) -> BandTable:
    """The calibrated band table of a ``cross_validate`` result."""
    return calibrate(BandTable(residuals=residuals(prepared, result), generated=generated, source=source))


def band_summary(table: BandTable) -> dict[str, Any]:
    """Plain JSON: the stretch factors and the out-of-sample coverage (:func:`workbench.estimate.band.coverage`)."""
    return {"inflation": table.inflation, "widening": table.widening, "coverage": coverage(table)}


def write_band_table(path: str | Path, table: BandTable) -> Path:
    """Write ``table`` as TOML (the caller decides about overwriting)."""
    import tomli_w

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(tomli_w.dumps(band_table_toml(table)).encode())
    return target


def constant_spread(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per (fit group, constant) of the in-sample fit: ``value`` (in sample), and over the folds
    that fitted it ``fold_min``, ``fold_max``, ``fold_std`` (population), ``num_folds`` and ``spread_frac`` =
    (max - min) / value (None when value is 0); ``applied_min`` / ``applied_max``: the range of what every fold
    applies to the group, the pooled value where the fold left the group's only source out (what a stack
    without published runs would get)."""
    out = []
    for group, consts in sorted(result["fits"].items()):
        for name, value in sorted(consts.items()):
            vals = [f[group][name] for f in result["folds"].values() if name in f.get(group, {})]
            if not vals:
                continue
            applied = [
                f[group][name] if name in f.get(group, {}) else f.get("pooled", {}).get(name)
                for f in result["folds"].values()
            ]
            applied_known = [a for a in applied if a is not None]
            lo, hi = min(vals), max(vals)
            out.append(
                {
                    "group": group,
                    "constant": name,
                    "value": value,
                    "fold_min": lo,
                    "fold_max": hi,
                    "fold_std": statistics.pstdev(vals),
                    "num_folds": len(vals),
                    "spread_frac": (hi - lo) / value if value else None,
                    "applied_min": min(applied_known),
                    "applied_max": max(applied_known),
                }
            )
    return out


def signed_errors(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``overall`` and ``by_source`` mean signed error in throughput terms (predicted / measured - 1)."""
    errs: dict[str, list[float]] = {}
    for row in rows:
        x = throughput_log_ratio(row)
        if x is not None:
            errs.setdefault(row["source_key"], []).append(math.exp(-x) - 1.0)
    every = [e for v in errs.values() for e in v]
    return {
        "overall": sum(every) / len(every) if every else None,
        "by_source": {k: sum(v) / len(v) for k, v in sorted(errs.items())},
    }


def cross_validate_with_band(
    path: str | Path,
    *,
    calibration: Any = "default",
    framework: str | None = None,
    kernels: str | Path | None = None,
    generated: str = "",
    source: str = "",
) -> tuple[dict[str, Any], BandTable]:
    """:func:`workbench.validate.fit.cross_validate` of the CSV at ``path`` plus ``band`` (stretch factors and
    out-of-sample coverage), ``constant_spread`` and ``signed_error`` in the result; and the band table."""
    from workbench.presets.calibration import Calibration, load_calibration
    from workbench.validate.fit import cross_validate
    from workbench.validate.training import prepare
    from workbench.validate.training_csv import read_rows

    cal = (
        calibration
        if isinstance(calibration, Calibration)
        else load_calibration(calibration, kernels=kernels)
    )
    prepared = prepare(read_rows(path), framework=framework, data_dir=Path(path).parent)
    result = cross_validate(prepared, cal)
    table = band_table(prepared, result, generated=generated, source=source)
    result["band"] = band_summary(table)
    result["constant_spread"] = constant_spread(result)
    result["signed_error"] = signed_errors(result["rows"])
    result["readings"] = alternative_readings(prepared, result, cal)
    return result, table


def alternative_readings(
    prepared: Prepared, result: dict[str, Any], calibration: Any
) -> list[dict[str, Any]]:
    """Every scored row's open questions (:func:`workbench.validate.readings.priced_readings`: a blank recompute
    its arithmetic does not settle, a table layout its stack's recipe contradicts), each reading priced out of
    sample: with the constants of the fold that left the row's source out."""
    import dataclasses

    from workbench.validate.readings import priced_readings

    scored = {r["id"]: r for r in result["rows"]}
    out = []
    for case in prepared.cases:
        row = scored.get(case.id)
        if row is None or case.source_key not in result["folds"]:
            continue
        cal = dataclasses.replace(calibration, fits=result["folds"][case.source_key])
        out.extend(priced_readings(case, row, pricer(case, cal)))
    return out
