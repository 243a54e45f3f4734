"""The Search tab as a user reads it (issue 19, item 4): human headers, one 1-based plan number, readable
ticks, a legend beside the points, and the planner's own totals and rejection counts.

The expected totals and counts come from a separate call of the core planner (``workbench.search.search``)
with the same model, cluster, workload and calibration, never from the view.
"""

from __future__ import annotations

import re

import polars as pl
import pytest

pytest.importorskip("panel")

from bokeh.models import BasicTickFormatter, NumeralTickFormatter  # noqa: E402
from workbench_widgets.app.compare_search import SearchView, display_frame  # noqa: E402
from workbench_widgets.app.store import WorkbenchStore  # noqa: E402
from workbench_widgets.plots import search_figure  # noqa: E402

SNAKE_CASE = re.compile(r"[a-z0-9]_[a-z0-9]")
RAW_NAMES = ("index", "rank", "num_nodes", "tier", "rejected_reason", "tokens_per_s", "step_time_s")


@pytest.fixture(scope="module")
def searched() -> tuple[SearchView, object]:
    """A Search view after one search of the app's default plan space, and the core's own result for it."""
    from workbench.presets.calibration import load_calibration
    from workbench.search import search
    from workbench.search.space import DEFAULT_HEADROOM_FRAC, Constraints

    store = WorkbenchStore()
    view = SearchView(store=store)
    view.panel()
    store.search()
    core = search(
        store.model_spec(),
        store.cluster_spec(),
        store.workload(),
        Constraints(memory_headroom_frac=DEFAULT_HEADROOM_FRAC),  # the app searches as `workbench plan` does
        top_k=20,
        calibration=load_calibration(framework=store.state.framework),
    )
    return view, core


def test_table_headers_are_human(searched) -> None:
    view, _ = searched
    headers = list(view.table.value.columns)
    assert headers[:5] == ["#", "tied", "plan", "nodes", "tokens/s"]
    assert "why rejected" in headers and any(h.startswith("tier") for h in headers)
    assert not [h for h in headers if SNAKE_CASE.search(h)], headers
    assert not set(headers) & set(RAW_NAMES)
    assert view.table.show_index is False  # no pandas index column beside the rank


def test_one_plan_number_from_one(searched) -> None:
    view, core = searched
    shown = view.table.value
    assert list(shown["#"][:10]) == list(range(1, 11))
    plans = [p.removeprefix("└ ") for p in shown["plan"][:10]]  # variants fold under their layout's best plan
    assert plans == core.plans["plan"].head(10).to_list()  # same order as the planner
    assert [c for c in shown.columns if list(shown[c][:3]) == [0, 1, 2]] == []  # no 0-based column


def test_numbers_are_formatted_and_tokens_column_is_wide_enough(searched) -> None:
    view, _ = searched
    assert view.table.formatters["tokens/s"].format == "0,0"
    longest = len(f"{view.table.value['tokens/s'].max():,.0f}")
    assert view.table.widths["tokens/s"] >= 8 * max(longest, len("tokens/s"))  # ~8 px per character
    assert view.table.layout != "fit_columns"  # columns keep their widths instead of being squeezed


def test_totals_are_the_planners(searched) -> None:
    view, core = searched
    refined = int(core.plans["refined"].sum())
    text = view.totals.object
    assert view.totals.visible
    assert f"Screened {core.num_plans:,} plans" in text
    assert f"{core.num_feasible:,} feasible" in text and f"{refined:,} refined" in text


def test_rejection_table_matches_the_planners_counts(searched) -> None:
    view, core = searched
    table = view.rejections.object
    assert list(table.columns) == ["why rejected", "plans"]
    from workbench.search.grid import REASONS

    sentence = dict(REASONS)
    want = {sentence[k]: n for k, n in core.rejections.items() if n}
    assert dict(zip(table["why rejected"], table["plans"], strict=True)) == want
    assert int(table["plans"].sum()) == core.num_plans - core.num_feasible  # every rejected plan counted once
    assert view.rejections.visible


def test_display_frame_numbers_from_one_without_a_rank_column() -> None:
    shown = display_frame(pl.DataFrame({"plan": ["a", "b"], "tokens_per_s": [4.7e5, 4.6e5]}))
    assert list(shown["#"]) == [1, 2] and list(shown.columns) == ["#", "plan", "tokens/s"]


FRAME = pl.DataFrame(
    {
        "rank": [1, 2, 3, 4, 5],
        "tokens_per_s": [9e5, 8e5, 7e5, 6e5, 4.7e5],
        "peak_memory_bytes": [90e9, 70e9, 40e9, 50e9, 20e9],
        "fits": [False, True, True, True, True],
        "pp": [1, 2, 4, 4, 8],
        "rejected_reason": [None, None, None, "tp does not divide heads", None],
    }
)


def test_scatter_ticks_are_not_scientific() -> None:
    fig = search_figure(FRAME)
    for axis in (*fig.yaxis, *fig.xaxis):
        assert isinstance(axis.formatter, NumeralTickFormatter)
        assert not isinstance(axis.formatter, BasicTickFormatter)
        assert "e" not in axis.formatter.format
    assert fig.yaxis[0].formatter.format.endswith("a")  # 470000 -> 470k


def test_scatter_legend_is_outside_the_data_area() -> None:
    fig = search_figure(FRAME)
    assert not [m for m in fig.center if m.__class__.__name__ == "Legend"]
    (legend,) = [m for m in fig.right if m.__class__.__name__ == "Legend"]
    labels = [item.label.value if item.label.value else item.label.field for item in legend.items]
    assert "Pareto frontier" in labels


def test_scatter_numbers_plans_from_one() -> None:
    fig = search_figure(FRAME, chosen_index=1)
    chosen = [item.label.value for item in fig.legend[0].items if "chosen" in (item.label.value or "")]
    assert chosen == ["chosen plan (#2)"]
    feasible = next(r for r in fig.renderers if r.name == "feasible").data_source.data
    assert sorted(feasible["rank_in_search"]) == [2, 3, 5]
    unranked = search_figure(FRAME.drop("rank"), chosen_index=0)
    assert [i.label.value for i in unranked.legend[0].items if "chosen" in (i.label.value or "")] == [
        "chosen plan (#1)"
    ]


def test_column_widths_fit_header_words_and_cells(searched) -> None:
    view, _ = searched
    shown, widths = view.table.value, view.table.widths
    assert set(widths) == set(shown.columns)
    for col in shown.columns:
        assert widths[col] >= 8 * max(len(word) for word in col.split())  # wrapped headers: one word per line
    longest_plan = max(len(p) for p in shown["plan"])
    assert widths["plan"] >= 8 * min(longest_plan, 50)


def test_ties_and_variants_are_marked_as_in_the_cli(searched) -> None:
    """Issue 15 item 8 in the app: plans within the model's ranking error of #1 say "= #1" and a variant of the
    layout above it is indented with "└", from the planner's own ``tied`` and ``variant`` columns."""
    view, core = searched
    shown = view.table.value
    rows = core.plans.head(len(shown)).iter_rows(named=True)
    for i, row in enumerate(rows):
        assert shown["tied"][i] == ("= #1" if row["tied"] and row["rank"] > 1 else "")
        assert shown["plan"][i].startswith("└ ") == bool(row["variant"])
