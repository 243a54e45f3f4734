"""Validation: published runs priced by the model, predicted against measured.

- :mod:`~workbench.validate.rows`: what training and serving share (reading a validation CSV and its cells,
  ``Unexpressible``, skipped rows, APE and MAPE, leave-one-source-out folds, the fit verdict);
- training: the file (:mod:`~workbench.validate.training_csv`), a row as specs
  (:mod:`~workbench.validate.training_model`, :mod:`~workbench.validate.training`, :mod:`~workbench.validate.tuning`,
  :mod:`~workbench.validate.readings`), the fit and cross-validation (:mod:`~workbench.validate.fit`,
  :mod:`~workbench.validate.run`) and the error band (:mod:`~workbench.validate.band`);
- serving: :mod:`~workbench.validate.serving` (on ``serving_csv``, ``serving_specs``, ``serving_workload``,
  ``serving_traces``, ``serving_phase``);
- a device's kernel table fitted to a measured per-op profile: :mod:`~workbench.validate.calibrate`;
- a stack's published recipe of a model on a device, priced beside the best plan:
  :mod:`~workbench.validate.recipes`.
"""

from workbench.validate.fit import FIT_GRID, cross_validate, fit_constants, write_fits
from workbench.validate.rows import DEFAULT_CLUSTER, SkippedRow, Unexpressible
from workbench.validate.run import run_validation
from workbench.validate.training import (
    PLAN_DEFAULTS,
    Prepared,
    RowCase,
    prepare,
    row_case,
    score,
    score_case,
    validate_rows,
)
from workbench.validate.training_csv import COLUMNS, DEFAULT_DATA, read_rows

__all__ = [
    "COLUMNS",
    "DEFAULT_CLUSTER",
    "DEFAULT_DATA",
    "FIT_GRID",
    "PLAN_DEFAULTS",
    "Prepared",
    "RowCase",
    "SkippedRow",
    "Unexpressible",
    "cross_validate",
    "fit_constants",
    "prepare",
    "read_rows",
    "row_case",
    "run_validation",
    "score",
    "score_case",
    "validate_rows",
    "write_fits",
]
