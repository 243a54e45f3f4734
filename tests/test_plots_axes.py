"""Axes say plain numbers (issue 51 item 6): no figure builder leaves bokeh's ``BasicTickFormatter``, which
writes ``2.000e+5`` above 10^5 (a 200-second step in ms, a cluster's tokens/s), on a linear axis; and the
step-time breakdown of one plan is a bar, not a 20 px strip."""

from __future__ import annotations

import pytest
from bokeh.models import BasicTickFormatter, CustomJSTickFormatter, LinearAxis, NumeralTickFormatter
from workbench_widgets.plots import (
    activation_figure,
    estimate_memory_figure,
    estimate_timeline_figure,
    estimates_breakdown_figure,
)
from workbench_widgets.plots._style import PLAIN_NUMBER_FORMAT
from workbench_widgets.sample import sample_estimate

from workbench.specs.plan import ParallelPlan


def _linear_axes(fig):  # type: ignore[no-untyped-def]
    return [a for a in (*fig.left, *fig.right, *fig.above, *fig.below) if isinstance(a, LinearAxis)]


@pytest.fixture(scope="module")
def estimate():  # type: ignore[no-untyped-def]
    return sample_estimate(plan=ParallelPlan(pp=4, schedule="1f1b"), num_microbatches=8)


def test_no_linear_axis_uses_scientific_notation(estimate) -> None:  # type: ignore[no-untyped-def]
    figures = {
        "timeline": estimate_timeline_figure(estimate),
        "memory": estimate_memory_figure(estimate),
        "activation": activation_figure(estimate.activation_timeline),
        "breakdown": estimates_breakdown_figure([estimate]),
    }
    for name, fig in figures.items():
        axes = _linear_axes(fig)
        assert axes, name
        for axis in axes:
            formatter = axis.formatter
            if isinstance(formatter, CustomJSTickFormatter):  # fixed_width_tick_labels: pads its base's text
                formatter = formatter.args["base"]
            assert not isinstance(formatter, BasicTickFormatter), name
            assert isinstance(formatter, NumeralTickFormatter), name
            assert formatter.format == PLAIN_NUMBER_FORMAT, name
    # Numeral.js: "0,0.[00]" writes 200000 as "200,000" and 12.5 as "12.5"; it has no exponent form.
    assert "e" not in PLAIN_NUMBER_FORMAT and "," in PLAIN_NUMBER_FORMAT


def test_goodput_axes_are_plain() -> None:
    from workbench_widgets.plots.goodput import goodput_interval_figure

    from tests.test_goodput_faces import priced  # the fixture's body, called here

    _, _, _, g = priced.__wrapped__()  # type: ignore[attr-defined]
    fig = goodput_interval_figure(g)
    for axis in _linear_axes(fig):
        assert not isinstance(axis.formatter, BasicTickFormatter)


def test_breakdown_of_one_plan_is_a_bar(estimate) -> None:  # type: ignore[no-untyped-def]
    fig = estimates_breakdown_figure([estimate])
    assert fig.height >= 240  # title, a two-row legend, the x axis and a bar of about 70 px


def test_only_the_served_apps_memory_figure_evaluates_javascript(estimate) -> None:  # type: ignore[no-untyped-def]
    """Report and notebook figures carry no tick formatter written as JavaScript source (JupyterLab's
    Content-Security-Policy has no 'unsafe-eval': BokehJS's ``new Function`` is refused there, and the lab
    browser test sees the violation); the served app's memory figure pads its tick labels with one."""
    from workbench_widgets.plots.memory import served_memory_figure

    for fig in (
        estimate_memory_figure(estimate),
        estimate_timeline_figure(estimate),
        estimates_breakdown_figure([estimate]),
    ):
        assert not [m for m in fig.references() if isinstance(m, CustomJSTickFormatter)], fig
    served = served_memory_figure(estimate)
    (padded,) = [m for m in served.references() if isinstance(m, CustomJSTickFormatter)]
    assert (
        isinstance(padded.args["base"], NumeralTickFormatter)
        and padded.args["base"].format == PLAIN_NUMBER_FORMAT
    )
