"""The Goodput tab: the current plan's run when devices fail (``workbench.goodput``), with its figures.

Controls: the failure rates (a preset of ``profiles/failures/``), synchronous or asynchronous checkpoints, hot
spare nodes and what the job does on a failure without a spare. "Price failures" computes the goodput of the
Store's estimate and its scaling over node counts (a few analytic estimates, so it runs on demand, not on every
change); the result also goes into the downloaded report.
"""

from __future__ import annotations

from typing import Any

import panel as pn
import param
from workbench_widgets.app.store import WorkbenchStore
from workbench_widgets.plots.goodput import goodput_interval_figure, goodput_scale_figure

from workbench.goodput import GoodputOptions, estimate_goodput, failure_preset_names, load_failures
from workbench.goodput.model import CHECKPOINT_MODES, ON_FAILURE
from workbench.search.sizes import goodput_scaling

WIDTH = 220


def goodput_markdown(g: Any) -> str:
    """The figures of a ``GoodputEstimate`` as a short Markdown list."""
    return (
        f"**Goodput {g.goodput_frac:.1%}** with `{g.failures_id}` failure rates: the job is interrupted every "
        f"{g.mtbf_s / 3600:,.2f} h on average; a{'n a' if g.checkpoint_mode == 'async' else ' '}synchronous "
        f"checkpoint of {g.checkpoint_bytes / 1e12:,.2f} TB "
        f"takes {g.checkpoint_write_s:,.1f} s to write and stalls training {g.checkpoint_stall_s:,.2f} s; "
        f"it is written every {g.checkpoint_interval_s / 60:,.1f} min ({g.checkpoint_interval_steps:,} steps); "
        f"a restart costs {g.restart_s:,.1f} s plus {g.downtime_s:,.1f} s of downtime per failure."
    )


class GoodputView(param.Parameterized):
    """Failure-rate controls, a button, and the figures of the run with failures (the result goes to
    ``store.goodput``)."""

    store = param.ClassSelector(class_=WorkbenchStore)
    failures = param.Selector(default="llama3", objects=["llama3"], doc="Failure-rate preset.")
    checkpoint = param.Selector(default="async", objects=list(CHECKPOINT_MODES), doc="Checkpoint mode.")
    spare_nodes = param.Integer(default=0, bounds=(0, 4096), doc="Hot spare nodes beside the job.")
    on_failure = param.Selector(
        default="wait", objects=list(ON_FAILURE), doc="Without a spare: wait or shrink dp."
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        names = failure_preset_names()
        self.param.failures.objects = names
        self.failures = "llama3" if "llama3" in names else names[0]
        self.button = pn.widgets.Button(
            label="Price failures", color="primary", css_classes=["wb-goodput-run"]
        )
        self.button.on_click(lambda *_: self.compute())
        self.text = pn.pane.Markdown(
            "Price the current plan's run with failures, checkpoints and restarts.",
            sizing_mode="stretch_width",
            css_classes=["wb-goodput-text"],
        )
        self.interval = pn.pane.Bokeh(None, visible=False, sizing_mode="stretch_width")
        self.scale = pn.pane.Bokeh(None, visible=False, sizing_mode="stretch_width")

    def compute(self) -> None:
        """Goodput of the Store's estimate and its scaling; a refusal (bad preset file, no estimate) is said in
        the text and nothing else changes."""
        est = self.store.estimate
        if est is None:
            self.text.object = "No valid plan to price: fix the plan first."
            return
        try:
            failures = load_failures(self.failures)
            options = GoodputOptions(
                checkpoint=self.checkpoint, spare_nodes=self.spare_nodes, on_failure=self.on_failure
            )
            g = estimate_goodput(est, failures, options)
            scaling = goodput_scaling(est, failures, options)
        except (ValueError, OSError) as exc:
            self.text.object = f"Could not price failures: {exc}"
            return
        self.store.goodput = (est, g, scaling)
        self.text.object = goodput_markdown(g)
        self.interval.param.update(object=goodput_interval_figure(g), visible=True)
        if scaling.height:
            self.scale.param.update(object=goodput_scale_figure(scaling), visible=True)

    def panel(self) -> pn.Column:
        controls = pn.FlexBox(  # wraps onto a second line in a narrow window
            *(
                pn.widgets.Select.from_param(self.param[n], width=WIDTH, css_classes=[f"wb-goodput-{n}"])
                for n in ("failures", "checkpoint", "on_failure")
            ),
            pn.widgets.IntInput.from_param(
                self.param.spare_nodes, width=WIDTH, css_classes=["wb-goodput-spares"]
            ),
            self.button,
            flex_wrap="wrap",
            align_items="flex-end",
            sizing_mode="stretch_width",
        )
        return pn.Column(controls, self.text, self.interval, self.scale, sizing_mode="stretch_width")
