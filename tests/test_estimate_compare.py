"""workbench.estimate.compare: predicted vs measured figures, one definition for the CLI, report and figure.

Both sides are ``workbench_widgets.sample.sample_estimate`` (the same 1F1B plan simulated with forward times of
2 ms and 3 ms, "measured" the slower), so every expected value follows from the two Estimates' own fields.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from workbench_widgets.sample import sample_estimate

from workbench.estimate.compare import QUANTITIES, compare, error_frac, per_op_times, step_time_error_frac
from workbench.specs.plan import ParallelPlan


def _pair():
    plan = ParallelPlan(pp=2, schedule="1f1b")
    predicted = sample_estimate(plan=plan, num_microbatches=4, forward_s=2e-3)
    measured = sample_estimate(plan=plan, num_microbatches=4, forward_s=3e-3)
    return predicted, replace(measured, backend="real-run", measured=True)


def test_compare_gives_every_quantity_with_its_error() -> None:
    predicted, measured = _pair()
    cmp = compare(predicted, measured)
    assert (cmp["backend"], cmp["measured_backend"]) == (predicted.backend, "real-run")
    for key, _ in QUANTITIES:
        p, m = getattr(predicted, key), getattr(measured, key)
        assert cmp[key] == {"predicted": p, "measured": m, "error_frac": pytest.approx(p / m - 1)}
    assert cmp["step_time_s"]["error_frac"] == pytest.approx(step_time_error_frac(predicted, measured))
    # per (stage, op): the median action time of each side; F and B of both stages
    assert [(o["stage"], o["op"]) for o in cmp["ops"]] == [(0, "B"), (0, "F"), (1, "B"), (1, "F")]
    pred_ops, meas_ops = per_op_times(predicted), per_op_times(measured)
    for o in cmp["ops"]:
        key = (o["stage"], o["op"])
        assert (o["predicted_s"], o["measured_s"]) == (pred_ops[key], meas_ops[key])
        assert o["error_frac"] == pytest.approx(pred_ops[key] / meas_ops[key] - 1)


def test_error_is_none_where_nothing_is_measured() -> None:
    assert error_frac(1.0, 0.0) is None and error_frac(None, 1.0) is None and error_frac(1.0, None) is None
    assert error_frac(3.0, 2.0) == pytest.approx(0.5)
    predicted, measured = _pair()
    with pytest.raises(ValueError, match="must be > 0"):
        step_time_error_frac(predicted, replace(measured, step_time_s=0.0))
