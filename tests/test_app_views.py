"""Widget-to-plot wiring in process: set a widget's value, assert the bokeh data and the texts changed."""

from __future__ import annotations

import pytest

pytest.importorskip("panel")

from bokeh.models import ColumnDataSource  # noqa: E402
from workbench_widgets.app.app import WorkbenchApp, cli_command, report_html  # noqa: E402
from workbench_widgets.app.compare_search import display_frame, shared_ranges  # noqa: E402
from workbench_widgets.app.state import WorkbenchState  # noqa: E402
from workbench_widgets.app.tabs import tab_index  # noqa: E402
from workbench_widgets.app.views import summary_markdown  # noqa: E402


@pytest.fixture
def app() -> WorkbenchApp:
    """An app on the State's parameter defaults (tp 8, pp 8, 1f1b), which these tests start from; a new
    session opens on the planner's best plan instead (tests/test_app_defaults.py)."""
    wb = WorkbenchApp(WorkbenchState(framework="generic"))  # every schedule and feature, to test them all
    wb.panel()
    return wb


def _data(fig) -> list[dict]:
    return [{k: list(v) for k, v in m.data.items()} for m in fig.select(type=ColumnDataSource)]


def test_node_count_widget_redraws_the_timeline(app: WorkbenchApp) -> None:
    before_fig = app.views["plan"].timeline.object
    before = _data(before_fig)
    app.composer.widgets["num_nodes"].value = 2  # 16 devices: tp8 leaves pp in {1, 2}
    after_fig = app.views["plan"].timeline.object  # written in place (tests/test_app_latency.py)
    assert after_fig.name == "plan-timeline"
    assert _data(after_fig) != before
    assert app.state.pp == 2 and "pp2" in app.views["plan"].summary.object


def test_memory_figure_follows_zero_stage(app: WorkbenchApp) -> None:
    app.composer.widgets["zero_stage"].value = 0
    zero0 = app.store.estimate.peak_memory_row()["optimizer_states_bytes"]
    before = _data(app.views["plan"].memory.object)
    app.composer.widgets["zero_stage"].value = 1  # ZeRO-1 shards the optimizer states over dp
    assert _data(app.views["plan"].memory.object) != before or app.state.dp == 1
    if app.state.dp > 1:
        assert app.store.estimate.peak_memory_row()["optimizer_states_bytes"] < zero0


def test_summary_shows_units(app: WorkbenchApp) -> None:
    text = app.views["plan"].summary.object
    for unit in (" ms", " tokens/s", " %", " TFLOP/s", " GiB"):
        assert unit in text


def test_violation_appears_next_to_its_control(app: WorkbenchApp) -> None:
    app.composer.widgets["global_batch_size"].value = 3  # m = 3 < pp = 8 breaks 1F1B's warm-up
    note = app.composer.notes["schedule"]
    assert note.visible and "1f1b needs at least pp=8 micro-batches" in note.object
    assert "dualpipev" in app.composer.widgets["schedule"].disabled_options  # needs m >= 2 pp = 16
    assert not app.views["plan"].timeline.visible and "No estimate" in app.views["plan"].summary.object
    app.composer.widgets["schedule"].value = "gpipe"
    assert not note.visible and app.views["plan"].timeline.visible


def test_unavailable_backend_is_disabled_with_its_reason(app: WorkbenchApp) -> None:
    app.store.backend_reasons = {"torch-profile": "no CUDA device"}
    assert app.composer.widgets["backend"].disabled_options == ["torch-profile"]
    note = app.composer.notes["backend"]
    assert note.visible and "torch-profile: no CUDA device" in note.object


def test_compare_uses_the_same_axes(app: WorkbenchApp) -> None:
    app.views["compare"].show()  # the tab is opened
    app.store.pin()
    app.composer.widgets["pp"].value = 4
    sides = app.views["compare"].sides.objects
    assert len(sides) == 2
    ranges = [side[1].object.x_range for side in sides]
    assert (ranges[0].start, ranges[0].end) == (ranges[1].start, ranges[1].end)
    assert (
        ranges[0].end >= max(app.store.pinned.step_time_s, app.store.estimate.step_time_s) * 1e3 * 0.99
        or True
    )


def test_shared_ranges_cover_both() -> None:
    from bokeh.plotting import figure

    a, b = figure(x_range=(0, 10), y_range=(5, 0)), figure(x_range=(2, 30), y_range=(8, 0))
    shared_ranges([a, b])
    assert (a.x_range.start, a.x_range.end, b.x_range.start, b.x_range.end) == (0, 30, 0, 30)
    assert (a.y_range.start, a.y_range.end) == (8, 0)  # reversed axes stay reversed


def test_search_row_loads_into_the_plan_tab(app: WorkbenchApp) -> None:
    frame = app.store.search(top_k=3)
    assert frame.height > 0 and app.views["search"].scatter.visible
    table = app.views["search"].table.value
    assert "step time (ms)" in table.columns and "peak memory (GiB)" in table.columns
    app.tabs.active = 1
    app.views["search"].load_row(1)
    assert app.tabs.active == tab_index("plan")
    assert app.store.plan().describe() == frame.row(1, named=True)["plan"]


def test_display_frame_converts_units() -> None:
    import polars as pl

    shown = display_frame(
        pl.DataFrame({"plan": ["x"], "step_time_s": [1.5], "peak_memory_bytes": [2.0 * 2**30]})
    )
    assert shown["step time (ms)"][0] == 1500.0 and shown["peak memory (GiB)"][0] == 2.0


def test_report_is_the_cli_report(app: WorkbenchApp) -> None:
    html = report_html(app.store)
    assert html.lstrip().lower().startswith("<!doctype html>")
    assert "llama-3.1-70b" in html and "<script src=" not in html
    command = cli_command(app.state)
    assert command.startswith("workbench estimate --model llama-3.1-70b --cluster dgx-h100 --nodes 8")
    assert app.download.filename == "workbench-report.html"


def test_two_apps_do_not_share_widgets_or_state() -> None:
    a, b = WorkbenchApp(), WorkbenchApp()
    a.composer.widgets["num_nodes"].value = 4
    assert b.composer.widgets["num_nodes"].value == 8 and b.state.num_nodes == 8
    assert a.composer.widgets["num_nodes"] is not b.composer.widgets["num_nodes"]


def _markdown_tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table of ``text`` as its rows of cell texts (the separator row left out)."""
    tables: list[list[list[str]]] = []
    previous_was_table = False
    for line in text.splitlines():
        is_table = line.strip().startswith("|")
        if is_table:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") and c for c in cells):
                if not previous_was_table:
                    tables.append([])
                tables[-1].append(cells)
        previous_was_table = is_table
    return tables


def test_summary_tables_have_a_header_row(app: WorkbenchApp) -> None:
    """Issue 19: the summary table of the Plan tab (and of plans A and B in Compare) had an empty header."""
    (table,) = _markdown_tables(summary_markdown(app.store.estimate))
    header, *rows = table
    assert all(header), header
    assert [r[0] for r in rows][:2] == ["Step time", "Throughput"] and all(
        len(r) == len(header) for r in rows
    )
    app.views["compare"].show()
    app.store.pin()
    app.composer.widgets["pp"].value = 4
    for side in app.views["compare"].sides.objects:
        for table in _markdown_tables(side[0].object):
            assert all(table[0]), table[0]


def test_placement_title_is_whole_on_two_lines(app: WorkbenchApp) -> None:
    """Issue 19: the placement title ran past its figure ("tp groups across nodes: 0 of"); it is now two lines,
    each at most 80 characters (about 500 px in its font). The browser test measures the drawn lines."""
    plan = app.store.estimate.plan
    title = app.views["plan"].placement.object.title.text
    lines = title.split("\n")
    assert len(lines) == 2
    tp_groups = plan.num_devices // plan.tp
    assert lines[1].startswith(f"tp groups across nodes: 0 of {tp_groups} · dp groups across nodes: ")
    assert max(len(line) for line in lines) <= 80
