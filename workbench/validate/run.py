"""``workbench validate`` on a training file: every row priced with a calibration, or cross-validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.presets.calibration import Calibration
from workbench.specs.framework import FrameworkProfile
from workbench.validate.fit import cross_validate
from workbench.validate.training import prepare, validate_rows
from workbench.validate.training_csv import DEFAULT_DATA, read_rows


def run_validation(
    path: str | Path = DEFAULT_DATA,
    *,
    calibration: Calibration | str = "default",
    framework: FrameworkProfile | str | None = None,
    cv: str | None = None,
    kernels: str | Path | None = None,
) -> dict[str, Any]:
    """Validate the CSV at ``path``: with ``cv=None`` price every row with ``calibration`` (a Calibration or
    fitted-constants file name); with ``cv="source"`` run :func:`workbench.validate.fit.cross_validate` (the
    file's fitted constants are ignored: they are refitted per fold). ``framework`` forces one profile on every
    row; ``kernels`` adds a kernel table (file or microbench folder). ValueError for another ``cv`` and for a
    bad file (:func:`workbench.validate.training_csv.read_rows`)."""
    from workbench.presets.calibration import load_calibration

    if cv not in (None, "source"):
        raise ValueError(f"cv must be 'source' (leave one source out), got {cv!r}")
    cal = (
        calibration
        if isinstance(calibration, Calibration)
        else load_calibration(calibration, kernels=kernels)
    )
    rows = read_rows(path)
    data_dir = Path(path).parent
    if cv is None:
        return validate_rows(rows, calibration=cal, framework=framework, data_dir=data_dir)
    return cross_validate(prepare(rows, framework=framework, data_dir=data_dir), cal)
