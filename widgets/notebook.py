"""``Workbench``: the app's composer and views in a Jupyter notebook, with the results as Python objects.

    from workbench_widgets import Workbench
    wb = Workbench(model_preset="llama-3.1-70b", num_nodes=8)   # any WorkbenchState field
    wb                                  # displays the composer and the Plan / Search / Compare tabs
    wb.estimate.summary()               # the current Estimate (None while the plan is invalid)
    wb.search()                         # runs the planner; wb.search_results is its polars frame

Panel renders it (``pn.extension(inline=True)`` is called on first display so the page works offline;
see the README). Each ``Workbench`` has its own State and Store: two of them never share a choice.
"""

from __future__ import annotations

from typing import Any

from workbench_widgets.app.app import WorkbenchApp, report_html
from workbench_widgets.app.state import APP_PLAN_FIELDS, WorkbenchState
from workbench_widgets.app.store import WorkbenchStore


class Workbench:
    """Composer + Plan / Search / Compare views for notebooks; ``state`` and ``store`` for code.

    Keyword arguments set ``WorkbenchState`` fields (unknown names raise ValueError listing the valid ones).
    """

    def __init__(self, **choices: Any) -> None:
        state = WorkbenchState()
        unknown = sorted(set(choices) - set(state.param))
        if unknown:
            raise ValueError(
                f"Workbench: unknown field(s) {', '.join(unknown)}; valid: "
                f"{', '.join(n for n in state.param if n != 'name')}"
            )
        self.store = WorkbenchStore(state)
        self.state = state
        self.set(**choices)
        self._app: WorkbenchApp | None = None

    def set(self, **choices: Any) -> Workbench:
        """Change State fields; plan degrees (tp, pp, ...) are applied after the cluster and model ones."""
        plan_keys = set(APP_PLAN_FIELDS) - {"dp"}
        first = {k: v for k, v in choices.items() if k not in plan_keys}
        if first:
            self.state.param.update(**first)
        plan = {k: v for k, v in choices.items() if k in plan_keys}
        if plan:
            self.store.load_plan(plan)
        return self

    @property
    def app(self) -> WorkbenchApp:
        if self._app is None:
            self._app = WorkbenchApp(store=self.store)
        return self._app

    @property
    def estimate(self) -> Any:
        """The current ``Estimate`` (None while the plan violates a rule: see ``violations``)."""
        return self.store.estimate

    @property
    def violations(self) -> list[str]:
        """The sentences of every plan rule the current plan breaks (empty: valid)."""
        return [v.sentence for v in self.store.violations]

    @property
    def search_results(self) -> Any:
        """The last search's ranked plans as a polars DataFrame (None before ``search()``)."""
        return self.store.search_results

    def search(self, **options: Any) -> Any:
        """Run the planner for the current model, cluster and workload; returns the polars frame."""
        return self.store.search(**options)

    def load_plan(self, plan: Any) -> Workbench:
        """Load a ``ParallelPlan`` or a search row (a dict) into the plan controls."""
        self.store.load_plan(plan)
        return self

    def report_html(self) -> str:
        """The same self-contained HTML report as ``workbench estimate --report``."""
        return report_html(self.store)

    def panel(self) -> Any:
        """The Panel layout (composer and tabs)."""
        import panel as pn

        if "tabulator" not in pn.extension._loaded_extensions:
            pn.extension("tabulator", inline=True)
        return _notebook_page(self.app.panel())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.panel()._repr_mimebundle_(include, exclude)

    def __repr__(self) -> str:
        e = self.estimate
        what = e.plan.describe() if e is not None else f"invalid plan ({len(self.violations)} violations)"
        return f"Workbench({self.state.model_preset} on {self.state.num_nodes} x {self.state.cluster_preset}: {what})"


def _notebook_page(page: Any) -> Any:
    """``page`` inside a Column that freezes the document's model graph while Panel rewrites the new models'
    stylesheets for inline (offline) display, so the graph is walked once, not once per model (seconds)."""
    import panel as pn

    class FrozenRenderColumn(pn.Column):
        def _render_model(self, doc: Any = None, comm: Any = None) -> Any:
            model = super()._render_model(doc, comm)
            if doc is not None:
                doc.models._push_freeze()  # popped in _render_mimebundle, which Panel calls next
                self._frozen_doc = doc
            return model

        def _render_mimebundle(self, model: Any, doc: Any, comm: Any, location: Any = None) -> Any:
            if getattr(self, "_frozen_doc", None) is doc:
                self._frozen_doc = None
                doc.models._pop_freeze()
            return super()._render_mimebundle(model, doc, comm, location)

    return FrozenRenderColumn(page, sizing_mode="stretch_width")
