"""State and Store of the Goodput tab: the current training plan's run when devices fail (``workbench.goodput``).

- ``GoodputState``: the choices, parameters only: the failure rates (a preset of ``profiles/failures/``),
  synchronous or asynchronous checkpoints, hot spare nodes and what the job does on a failure without a spare;
- ``GoodputStore``: prices the training Store's estimate under those choices on request (``compute``: a few
  analytic estimates, so on demand, not on every change), holds the result and its scaling over node counts, or
  the reason there is none; no widgets. The result also goes to the training Store (``WorkbenchStore.goodput``),
  which the downloaded report reads.

The tab's View is ``workbench_widgets.app.goodput_view``.
"""

from __future__ import annotations

from typing import Any

import param
from workbench_widgets.app.store import WorkbenchStore

from workbench.goodput import GoodputOptions, estimate_goodput, failure_preset_names, load_failures
from workbench.goodput.model import CHECKPOINT_MODES, ON_FAILURE
from workbench.search.sizes import goodput_scaling


class GoodputState(param.Parameterized):
    """The Goodput tab's choices."""

    failures = param.Selector(default="llama3", objects=["llama3"], doc="Failure-rate preset.")
    checkpoint = param.Selector(default="async", objects=list(CHECKPOINT_MODES), doc="Checkpoint mode.")
    spare_nodes = param.Integer(default=0, bounds=(0, 4096), doc="Hot spare nodes beside the job.")
    on_failure = param.Selector(
        default="wait", objects=list(ON_FAILURE), doc="Without a spare: wait or shrink dp."
    )


class GoodputStore(param.Parameterized):
    """The goodput of ``training.estimate`` under a ``GoodputState`` (``compute``), or why there is none."""

    state = param.ClassSelector(class_=GoodputState)
    training = param.ClassSelector(class_=WorkbenchStore, doc="The training Store whose estimate is priced.")
    result = param.Parameter(default=None, doc="GoodputEstimate of the last compute; None before one.")
    scaling = param.Parameter(default=None, doc="goodput_scaling frame of the last compute.")
    error = param.String(default="", doc="Why the last compute gave no result ('' when it did).")

    def __init__(self, training: WorkbenchStore, state: GoodputState | None = None, **params: Any) -> None:
        super().__init__(state=state or GoodputState(), training=training, **params)
        names = failure_preset_names()
        self.state.param.failures.objects = names
        self.state.failures = "llama3" if "llama3" in names else names[0]

    def compute(self) -> None:
        """Goodput of the training Store's estimate and its scaling; a refusal (bad preset file, no estimate) is
        kept in ``error`` and the last result is dropped."""
        est = self.training.estimate
        if est is None:
            self.param.update(result=None, scaling=None, error="No valid plan to price: fix the plan first.")
            return
        s = self.state
        try:
            failures = load_failures(s.failures)
            options = GoodputOptions(
                checkpoint=s.checkpoint, spare_nodes=s.spare_nodes, on_failure=s.on_failure
            )
            g = estimate_goodput(est, failures, options)
            scaling = goodput_scaling(est, failures, options)
        except (ValueError, OSError) as exc:
            self.param.update(result=None, scaling=None, error=f"Could not price failures: {exc}")
            return
        self.training.goodput = (est, g, scaling)
        self.param.update(result=g, scaling=scaling, error="")
