"""The app never shows a plan nobody asked for without saying so (issue 51 item 3), in process.

- inputs changed under the planner's best plan: the Store says the plan may no longer be the best, and the
  search it offers loads the planner's best for the new inputs (the same plan ``best_plan`` finds);
- a plan that does not fit shows its memory against the usable line and no step time, throughput or MFU;
- the inputs move a degree off its chosen value only while it is invalid, say so, and put it back after.
"""

from __future__ import annotations

import pytest

pytest.importorskip("panel")

from workbench_widgets.app.planner import best_plan  # noqa: E402
from workbench_widgets.app.state import WorkbenchState  # noqa: E402
from workbench_widgets.app.store import WorkbenchStore  # noqa: E402
from workbench_widgets.app.views import PlanView, is_shown, summary_markdown  # noqa: E402

DEGREES = ("tp", "pp", "cp", "vpp", "micro_batch_size")


def test_a_new_model_under_the_planners_plan_is_said_and_the_search_fixes_it() -> None:
    store = WorkbenchStore(WorkbenchState())
    store.load_best_plan()
    assert store.stale == ""
    view = PlanView(store=store)
    assert not is_shown(view.stale) and not is_shown(view.search_again)
    store.state.model_preset = "llama-3.1-8b"
    assert "model preset 'llama-3.1-70b' -> 'llama-3.1-8b'" in store.stale and "best" in store.stale
    assert "hidden size" not in store.stale  # the preset's own fields are not listed one by one
    assert is_shown(view.stale) and is_shown(view.search_again)
    view.search_again.clicks += 1  # the button the notice offers
    s = store
    want = best_plan(s.model_spec(), s.cluster_spec(), s.workload(), s.state.framework)
    assert store.estimate is not None and store.estimate.plan == want
    assert store.stale == "" and not is_shown(view.stale)


def test_choosing_a_plan_yourself_is_not_stale() -> None:
    store = WorkbenchStore(WorkbenchState())
    store.load_best_plan()
    store.state.seq_len = 4096
    assert "seq len 8192 -> 4096" in store.stale
    store.state.tp = 8 if store.state.tp != 8 else 4  # the user's own plan now
    assert store.stale == ""


def test_a_plan_that_does_not_fit_shows_no_throughput_or_mfu() -> None:
    store = WorkbenchStore(WorkbenchState())
    store.state.model_preset = "llama-3.1-405b"
    e = store.estimate
    assert e is not None and not e.fits
    text = summary_markdown(e)
    assert "does not fit" in text and "GiB over" in text
    assert f"{e.mfu * 100:.1f} %" not in text and "tokens/s" not in text and " ms" not in text
    usable = e.memory_capacity_bytes * 0.95 / 2**30  # 80 GiB less the 5 % headroom
    assert f"of {usable:,.1f} GiB usable" in text


def test_nodes_8_1_8_puts_the_chosen_plan_back_and_says_what_moved() -> None:
    # the case: the any-feature profile's best plan (pp 2, vpp 8) does not fit one node's 8 devices
    store = WorkbenchStore(WorkbenchState(framework="generic"))
    store.load_best_plan()
    before = {f: getattr(store.state, f) for f in DEGREES}
    assert store.adjusted == ""
    store.state.num_nodes = 1
    moved = [f for f in DEGREES if getattr(store.state, f) != before[f]]
    assert moved and store.estimate is not None
    for f in moved:
        assert f"{f} {before[f]} -> {getattr(store.state, f)}" in store.adjusted
    assert "come back" in store.adjusted
    store.state.num_nodes = 8
    assert {f: getattr(store.state, f) for f in DEGREES} == before
    assert store.adjusted == ""


def test_the_planners_plan_says_why_it_wins() -> None:
    """The Plan tab says why #1 wins (the planner's own explanation), and stops saying it once the plan is
    the user's own."""
    from workbench_widgets.app.planner import best_search

    store = WorkbenchStore(WorkbenchState())
    store.load_best_plan()
    s = store
    expected = best_search(s.model_spec(), s.cluster_spec(), s.workload(), s.state.framework).explanation
    assert expected.startswith("#1 beats #") and store.why == expected
    view = PlanView(store=store)
    assert is_shown(view.why) and expected.split(":")[0] in view.why.object
    store.state.micro_batch_size = 2 if store.state.micro_batch_size != 2 else 1
    assert store.why == "" and not is_shown(view.why)


def test_download_is_a_button_and_the_report_holds_the_search() -> None:
    """The report the button writes: after a search of these inputs, the search's ranked plans with the answer on
    top and the current plan as the chosen one; without one, the current plan alone."""
    from workbench_widgets.app.app import WorkbenchApp, report_html

    store = WorkbenchStore(WorkbenchState())
    store.load_best_plan()
    app = WorkbenchApp(store=store)
    assert app.download.variant == "solid" and not app.download.icon  # an icon font would come from a CDN
    alone = report_html(store)
    assert "Plans kept by the search" not in alone and f"Answer: {store.estimate.plan.describe()}" in alone
    result = store.search(top_k=3)
    assert result.height
    store.state.micro_batch_size = 2 if store.state.micro_batch_size != 2 else 1  # a plan of the user's own
    text = report_html(store)
    best = store.search_result.estimates[0]
    assert f"Answer: {best.plan.describe()}" in text and "Plans kept by the search" in text
    assert f"(chosen plan): {store.estimate.plan.describe()}" in text
    store.state.seq_len = 4096  # other inputs: that search is not theirs
    assert "Plans kept by the search" not in report_html(store)


def test_the_url_carries_every_choice_and_sets_them() -> None:
    """What a served session syncs with ``pn.state.location`` (Panel's Location, here without a browser): a
    query sets the choices it names, and the query then holds every choice the URL carries, changed with them."""
    from panel.io.location import Location
    from workbench_widgets.app.app import WorkbenchApp, url_fields

    app = WorkbenchApp(WorkbenchState())
    loc = Location(search="?model_preset=llama-3.1-8b&num_nodes=2&tp=2&pp=2&cp=1&micro_batch_size=2")
    loc.sync(app.state, {n: n for n in url_fields(app.state)})
    e = app.store.estimate
    assert e is not None and e.plan.describe().startswith("dp4 tp2 pp2 mbs2"), e.plan.describe()
    assert e.model.num_layers == 32 and e.cluster.num_devices == 16  # Llama 3.1 8B on 2 x 8 devices
    assert set(url_fields(app.state)) - set(loc.query_params) == {"capacity_factor"}  # None: left out
    assert {"hidden_size", "seq_len", "schedule", "tp"} <= set(loc.query_params)
    app.state.seq_len = 4096
    assert loc.query_params["seq_len"] == 4096


def test_the_report_links_back_to_the_app_view() -> None:
    """Written from a served session, the report links to the page's URL (which holds every choice); only an
    http(s) address becomes a link."""
    from workbench_widgets.app.app import report_html

    store = WorkbenchStore(WorkbenchState())
    url = "http://127.0.0.1:5006/?model_preset=llama-3.1-70b&tp=8&pp=8"
    text = report_html(store, app_url=url)
    assert f'<a href="{url.replace("&", "&amp;")}">' in text
    assert "Open this view in the app" not in report_html(store, app_url="javascript:alert(1)")
    assert "Open this view in the app" not in report_html(store)


def test_the_fields_a_cluster_preset_fills_are_the_ones_the_notice_folds() -> None:
    from workbench_widgets.app import specs
    from workbench_widgets.app.store import CLUSTER_CONTROLS_FILLED

    from workbench.presets.catalog import load_cluster

    assert set(specs.cluster_fields(load_cluster("dgx-h100"))) == set(CLUSTER_CONTROLS_FILLED)
