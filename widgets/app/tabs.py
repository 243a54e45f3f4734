"""The app's tabs, registered once: a tab is a title, the factory of its store slice and the factory of its view.

Every tab follows one State/Store/View style:

- a **State** (``param.Parameterized``): the tab's choices, parameters only (``WorkbenchState``, ``ServingState``,
  ``MixedState``, ``GoodputState``);
- a **Store** (``param.Parameterized`` with a ``state``): builds the specs, computes, holds the results and the
  reason there are none; no widgets (``WorkbenchStore``, ``ServingStore``, ``MixedStore``, ``GoodputStore``);
- a **View** (``param.Parameterized`` with a ``store``): widgets from the State, results from the Store, and
  ``panel()``; a view that draws only while shown has ``show()`` (and ``hide()``), which the app calls when its
  tab is opened (and left).

A tab's store slice is made from the session's training Store (``store(shared)``): the Plan, Search and Compare
tabs show the training Store itself (Compare adds a real run beside its prediction, with its own Store), the Goodput tab prices its estimate, the Serving and Mixed cluster tabs have
their own State and Store (``own_inputs``: the training composer is hidden while they are shown). The app
(``workbench_widgets.app.app.WorkbenchApp``) builds the tabs from ``TABS`` in order; adding a tab is one entry
here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workbench_widgets.app.compare_search import CompareView, SearchView
from workbench_widgets.app.goodput_store import GoodputStore
from workbench_widgets.app.goodput_view import GoodputView
from workbench_widgets.app.mixed_store import MixedStore
from workbench_widgets.app.mixed_view import MixedView
from workbench_widgets.app.run_compare import RunCompareStore, RunCompareView
from workbench_widgets.app.serving_store import ServingStore
from workbench_widgets.app.serving_view import ServingView
from workbench_widgets.app.store import WorkbenchStore
from workbench_widgets.app.views import PlanView


@dataclass(frozen=True, kw_only=True)
class Tab:
    """One tab: ``key`` (its name in ``WorkbenchApp.views``), ``title`` (shown on the tab), ``store`` (its store
    slice from the session's training Store), ``view`` (its view from that slice and the app, for a view that
    acts on the app, e.g. Search loading a plan into the Plan tab) and ``own_inputs`` (the tab has its own model,
    cluster and plan choices: the training composer and its report button are hidden while it is shown)."""

    key: str
    title: str
    store: Callable[[WorkbenchStore], Any]
    view: Callable[[Any, Any], Any]
    own_inputs: bool = False


def _shared(store: WorkbenchStore) -> WorkbenchStore:
    return store


def registry(*tabs: Tab) -> tuple[Tab, ...]:
    """``tabs`` as the registry; ValueError naming a key or title registered twice."""
    for attr in ("key", "title"):
        seen = [getattr(t, attr) for t in tabs]
        twice = sorted({v for v in seen if seen.count(v) > 1})
        if twice:
            raise ValueError(f"tab {attr}(s) registered twice: {', '.join(twice)}")
    return tabs


TABS: tuple[Tab, ...] = registry(
    Tab(key="plan", title="Plan", store=_shared, view=lambda store, app: PlanView(store=store)),
    Tab(key="search", title="Search", store=_shared,
        view=lambda store, app: SearchView(store=store, on_load=lambda: app.show_tab("plan"))),
    Tab(key="compare", title="Compare", store=_shared,
        view=lambda store, app: CompareView(store=store, measured=RunCompareView(RunCompareStore()))),
    Tab(key="goodput", title="Goodput", store=GoodputStore, view=lambda store, app: GoodputView(store=store)),
    Tab(key="serving", title="Serving", store=lambda _: ServingStore(),
        view=lambda store, app: ServingView(store=store), own_inputs=True),
    Tab(key="mixed", title="Mixed cluster", store=lambda _: MixedStore(),
        view=lambda store, app: MixedView(store=store), own_inputs=True),
)  # fmt: skip
"""The app's tabs, in the order shown."""


def tab_index(key: str) -> int:
    """Position of tab ``key`` in ``TABS``; ValueError naming the known keys for another key."""
    keys = [t.key for t in TABS]
    if key not in keys:
        raise ValueError(f"no tab {key!r}; tabs: {', '.join(keys)}")
    return keys.index(key)
