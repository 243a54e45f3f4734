"""The Panel app: composer on the left, the tabs of ``workbench_widgets.app.tabs.TABS`` on the right (Plan / Search /
Compare / Goodput / Serving / Mixed cluster), and a report download.

``build_app()`` makes a new State, Store and views on every call; ``serve_app`` hands that function to
Panel's server, which calls it once per browser session, so no two users share anything.
"""

from __future__ import annotations

import io
import shlex
import threading
import weakref
from collections.abc import Callable
from typing import Any

import panel as pn
from panel.io.document import hold
from workbench_widgets.app import specs
from workbench_widgets.app.bokehjs_shims import install_bokehjs_shims
from workbench_widgets.app.state import CUSTOM, UPLOADED, WorkbenchState
from workbench_widgets.app.store import WorkbenchStore
from workbench_widgets.app.tabs import TABS, tab_index
from workbench_widgets.app.views import Composer

from workbench.specs.axes import PLAN_AXES
from workbench.specs.axis_types import Control, Domain

TITLE = "Parallelism Workbench"


def plan_arguments(state: WorkbenchState) -> list[str]:
    """The ``workbench estimate`` plan options (``workbench.specs.axes.PLAN_AXES``) of the State's plan: every axis
    whose value differs from its option's default (dp is left to the CLI, which derives it from the devices)."""
    args: list[str] = []
    for axis, value in zip(PLAN_AXES, specs.plan_values(state).values(), strict=True):
        shown = None if value is None else axis.face_value(value)
        if axis.app.kind is Control.DERIVED or shown is None or shown == axis.cli.default:
            continue
        if axis.domain is Domain.FLAG:
            args.append(axis.cli.flag if shown else f"--no-{axis.cli.flag.removeprefix('--')}")
        else:
            args += [axis.cli.flag, str(shown)]
    return args


def cli_command(state: WorkbenchState) -> str:
    """The ``workbench estimate`` command line that reproduces the current choices (shown in the report)."""
    s = state
    args = [
        "workbench",
        "estimate",
        "--model",
        s.model_preset if s.model_preset != UPLOADED else "config.json",
        "--cluster",
        s.cluster_preset if s.cluster_preset != CUSTOM else "custom.toml",
        "--nodes",
        str(s.num_nodes),
        "--seq-len",
        str(s.seq_len),
        "--global-batch",
        str(s.global_batch_size),
        "--dtype",
        s.dtype,
        *plan_arguments(s),
        "--backend",
        s.backend,
    ]
    if s.capacity_factor is not None:
        args += ["--capacity-factor", str(s.capacity_factor)]
    return shlex.join(args)


def report_html(store: WorkbenchStore, app_url: str | None = None) -> str:
    """The HTML of ``workbench_widgets.report`` (the CLI's report) for the current plan and, when the Search tab
    searched these inputs, its results: the ranked plans with the answer on top, the current plan as the
    chosen one (its figures beside the best's), the search table and totals."""
    from workbench_widgets.report import render_report

    if store.estimate is None:
        raise ValueError("no valid plan to report: fix the plan first")
    current = store.estimate
    search = _search_of_these_inputs(store)
    estimates, index = [current], 0
    if search is not None and search.estimates:
        estimates = list(search.estimates)
        index = next((i for i, e in enumerate(estimates) if e.plan == current.plan), len(estimates))
        if index == len(estimates):
            estimates.append(current)
    return render_report(
        estimates=estimates,
        plan_index=index,
        command=cli_command(store.state),
        search=search,
        search_results=None if search is not None else store.search_results,
        goodput=store.goodput[1:] if store.goodput and store.goodput[0] is current else None,
        app_url=app_url,
    )


def _search_of_these_inputs(store: WorkbenchStore) -> Any:
    """The Store's last ``SearchResult`` if it searched the current model, workload and cluster, else None."""
    result = store.search_result
    if result is None:
        return None
    try:
        same = result.model == store.model_spec() and result.workload == store.workload()
        return result if same and store.cluster_spec() in result.clusters else None
    except ValueError:
        return None


def _in_thread(work: Callable[[], None]) -> None:
    """Run ``work`` in a daemon thread; Panel forwards the parameter changes it makes to the session."""
    threading.Thread(target=work, name="workbench-estimate", daemon=True).start()


class WorkbenchApp:
    """One session's State, Store and views, composed. ``panel()`` gives the page.

    The tabs come from ``TABS``: ``stores[key]`` and ``views[key]`` are each tab's store slice and view. Opening a
    tab calls its view's ``show()`` and leaving it its ``hide()``, where the view has them; a tab with its own
    inputs hides the training composer and the report button.

    Built without a State or Store (a new session), it opens on the planner's best plan for the default
    model, cluster and workload (``WorkbenchStore.load_best_plan``: the plan ``workbench plan`` ranks first);
    a given State or Store is shown with its choices as they are.
    """

    def __init__(self, state: WorkbenchState | None = None, store: WorkbenchStore | None = None) -> None:
        if store is None:
            store = WorkbenchStore(state or WorkbenchState())
            if state is None:
                store.load_best_plan()
        self.store = store
        self.store.batch = hold  # one browser patch per pass of the Store
        self.store.run_in_background = _in_thread  # profiling and real runs keep the page live
        self.state = self.store.state
        self.composer = Composer(store=self.store)
        self.tabs = pn.Tabs(dynamic=False, sizing_mode="stretch_width")
        self.stores: dict[str, Any] = {}
        self.views: dict[str, Any] = {}
        for tab in TABS:
            self.stores[tab.key] = tab.store(self.store)
            self.views[tab.key] = tab.view(self.stores[tab.key], self)
            self.tabs.append((tab.title, self.views[tab.key].panel()))
        self.sidebar = pn.Column(self.composer.panel(), css_classes=["wb-sidebar"])
        """The training composer: hidden on the tabs with their own inputs (Serving, Mixed cluster), so the
        page never shows two sets of model, cluster and nodes with different values."""
        self.download = pn.widgets.FileDownload(
            callback=self._report_file,
            filename="workbench-report.html",
            label="Download report (HTML)",
            color="success",
            variant="solid",
            embed=False,
            css_classes=["wb-download"],
        )
        self.tabs.param.watch(self._tab_changed, "active")

    def _tab_changed(self, event: Any) -> None:
        if event.old is not None and 0 <= event.old < len(TABS):
            hide = getattr(self.views[TABS[event.old].key], "hide", None)
            if hide is not None:
                hide()
        tab = TABS[event.new]
        self.sidebar.visible = self.download.visible = not tab.own_inputs
        show = getattr(self.views[tab.key], "show", None)
        if show is not None:
            show()

    def show_tab(self, key: str) -> None:
        """Open tab ``key`` (a ``Tab.key`` of ``TABS``)."""
        self.tabs.active = tab_index(key)

    def on_page_error(self, exc: BaseException) -> None:
        """Panel's exception handler of this session (``build_app``): an exception in a callback of the page,
        e.g. a widget refusing what the browser sent (digits beyond an integer field's range arrive as a
        float), is said in the page, and every control is sent its value again so the page shows the choices
        in force. Panel has logged the traceback already."""
        self.store.refuse("A value from the page", exc)
        for widget in self.composer.widgets.values():
            widget.param.trigger("value")

    def _report_file(self) -> io.BytesIO:
        location = pn.state.location  # a served session: the page's own URL, which carries every choice
        url = location.href if location is not None and location.href else None
        return io.BytesIO(report_html(self.store, app_url=url).encode("utf-8"))

    def panel(self) -> pn.viewable.Viewable:
        header = pn.Row(
            pn.pane.Markdown(f"## {TITLE}"), pn.Spacer(), self.download, sizing_mode="stretch_width"
        )
        return pn.Column(
            header,
            pn.Row(self.sidebar, self.tabs, sizing_mode="stretch_width"),
            sizing_mode="stretch_width",
        )


def warm_up() -> None:
    """Run the search a new session opens with (``planner.best_plan`` memoises it per process), so that the
    first browser tab opens as fast as the next ones. ``server.run`` calls it in a thread at start."""
    WorkbenchStore(WorkbenchState()).load_best_plan()


class SessionErrorHandler:
    """``pn.config.exception_handler`` of one session: it passes an exception to the session's app
    (``WorkbenchApp.on_page_error``) until the session ends; ``release``, the session's ``on_session_destroyed``
    hook, then lets go of everything that kept the session alive (issue 52: about 4 MB per page load before).

    - Panel keeps a session's config in a weak-key dictionary keyed by the session's Document; a handler that
      held the app for ever (a bound method: method -> app -> widgets -> Document) would keep its own key alive.
    - Panel 1.9 registers the session's notification area (``notifications=True``) in its process-wide view
      table (``pn.state._views``: ref -> (viewable, model, Document, comm)) and does not remove it when a
      served session ends (only ``panel serve``'s own clean-up does); ``release`` removes this Document's views,
      as Panel's ``_cleanup_doc`` would. The Document is held weakly here.
    """

    def __init__(self, app: WorkbenchApp, document: Any = None) -> None:
        self.app: WorkbenchApp | None = app
        self._document = weakref.ref(document) if document is not None else None

    def __call__(self, exc: BaseException) -> None:
        if self.app is not None:
            self.app.on_page_error(exc)

    def release(self, session_context: object) -> None:  # bokeh checks the parameter name
        self.app = None
        doc = self._document() if self._document is not None else None
        if doc is None:
            return
        views = pn.state._views
        for ref in [ref for ref, view in list(views.items()) if view[2] is doc]:
            views.pop(ref, None)


DISCONNECTED = "Connection to the workbench server lost: reload the page (your choices are not kept)."


def build_app() -> pn.viewable.Viewable:
    """A fresh app for one session (the function Panel's server calls per browser tab).

    Notifications are on so that a refused input is also a toast and a lost websocket is said in the page;
    an exception in any callback of the session is said in the page (``WorkbenchApp.on_page_error``).
    """
    pn.extension("tabulator", notifications=True, disconnect_notification=DISCONNECTED)
    app = WorkbenchApp()
    doc = pn.state.curdoc
    served = doc is not None and doc.session_context is not None
    handler = SessionErrorHandler(app, doc if served else None)
    pn.config.exception_handler = handler  # set inside the session: this session's only
    if served:
        pn.state.on_session_destroyed(handler.release)
        install_bokehjs_shims(doc)
    if (
        pn.state.location is not None
    ):  # a served session: the URL carries the choices (a link shares the view)
        pn.state.location.sync(app.state, {name: name for name in url_fields(app.state)})
    return app.panel()


URL_LEFT_OUT = frozenset({"name", "dp", "uploaded_config"})
"""State fields the URL does not carry: derived (dp), or not text (an uploaded config.json)."""


def url_fields(state: WorkbenchState) -> list[str]:
    """The State fields a served session keeps in its URL's query string (``?model_preset=...&tp=4``): the
    inputs (cluster, model, workload) first, then the plan and the backend, so that opening a link sets the
    inputs before the plan that was chosen for them. Changing a control rewrites the query; opening the link
    in another tab shows the same view."""
    return [name for name in state.param if name not in URL_LEFT_OUT]
