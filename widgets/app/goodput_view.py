"""The Goodput tab's View: failure-rate controls from a ``GoodputState``, a button that prices the current plan's
run with failures (``GoodputStore.compute``, in ``workbench_widgets.app.goodput_store``), and its figures.
"""

from __future__ import annotations

from typing import Any

import panel as pn
import param
from workbench_widgets.app.goodput_store import GoodputStore
from workbench_widgets.plots.goodput import goodput_interval_figure, goodput_scale_figure

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
    """Failure-rate controls, a button, and the figures of the run with failures (``store.result``)."""

    store = param.ClassSelector(class_=GoodputStore)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
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
        """Price the Store's estimate and show the result; a refusal is said in the text and nothing else
        changes."""
        self.store.compute()
        g, scaling = self.store.result, self.store.scaling
        if g is None:
            self.text.object = self.store.error
            return
        self.text.object = goodput_markdown(g)
        self.interval.param.update(object=goodput_interval_figure(g), visible=True)
        if scaling.height:
            self.scale.param.update(object=goodput_scale_figure(scaling), visible=True)

    def panel(self) -> pn.Column:
        state = self.store.state
        controls = pn.FlexBox(  # wraps onto a second line in a narrow window
            *(
                pn.widgets.Select.from_param(state.param[n], width=WIDTH, css_classes=[f"wb-goodput-{n}"])
                for n in ("failures", "checkpoint", "on_failure")
            ),
            pn.widgets.IntInput.from_param(
                state.param.spare_nodes, width=WIDTH, css_classes=["wb-goodput-spares"]
            ),
            self.button,
            flex_wrap="wrap",
            align_items="flex-end",
            sizing_mode="stretch_width",
        )
        return pn.Column(controls, self.text, self.interval, self.scale, sizing_mode="stretch_width")
