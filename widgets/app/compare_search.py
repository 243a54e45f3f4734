"""Views of the Search and Compare tabs.

Search: the planner runs in a worker thread (the page stays live) with a progress bar; the scatter is
``workbench_widgets.plots.search_figure`` and a click on a table row loads that plan into the Plan tab.
Above them, the planner's own totals (plans screened, feasible, refined) and its rejection counts per reason
(``SearchResult.rejection_table``, as ``workbench plan`` prints them); the table has human headers.
Compare: plan A (pinned) and plan B (the current plan, priced by the chosen backend) side by side, drawn
by the same builders as the Plan tab, with their x and y ranges made equal so the pictures compare; below them,
in the app, a real run beside its prediction (``workbench_widgets.app.run_compare``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import panel as pn
import param
from bokeh.models import DataRange1d, Range1d
from bokeh.models.widgets.tables import NumberFormatter
from workbench_widgets.app.page_text import page_text
from workbench_widgets.app.store import WorkbenchStore
from workbench_widgets.app.views import GIB, frozen, in_session
from workbench_widgets.plots import (
    breakdown_figure,
    search_figure,
)
from workbench_widgets.plots.breakdown import refresh_breakdown_figure
from workbench_widgets.plots.memory import refresh_memory_figure, served_memory_figure, usable_memory_bytes
from workbench_widgets.plots.timeline import (
    content_timeline_figure,
    estimate_timeline_content,
    refresh_timeline_figure,
)

TABLE_COLUMNS = (
    "rank",
    "tied",
    "plan",
    "num_nodes",
    "tokens_per_s",
    "mfu",
    "step_time_s",
    "peak_memory_bytes",
    "fits",
    "bottleneck",
    "tier",
    "rejected_reason",
)
"""Columns shown in the search table when present (units converted in ``display_frame``)."""
CONVERSIONS: dict[str, tuple[str, float]] = {
    "step_time_s": ("step time (ms)", 1e3),
    "peak_memory_bytes": ("peak memory (GiB)", 1 / GIB),
    "mfu": ("MFU (%)", 100.0),
    "tokens_per_s": ("tokens/s", 1.0),
}
"""SI column -> (header, factor to the display unit)."""
HEADERS: dict[str, str] = {
    "rank": "#",
    "tied": "tied",
    "plan": "plan",
    "num_nodes": "nodes",
    "fits": "fits",
    "bottleneck": "bottleneck",
    "tier": "tier: screened / refined",
    "rejected_reason": "why rejected",
    **{col: header for col, (header, _) in CONVERSIONS.items()},
}
"""Header of every shown column (the planner's column names are snake_case)."""
NUMBER_FORMATS = {"#": "0", "nodes": "0", "tokens/s": "0,0", "step time (ms)": "0,0.0"}
NUMBER_FORMATS |= {"peak memory (GiB)": "0,0.0", "MFU (%)": "0.0"}
CHAR_PX, CELL_PAD_PX, MAX_COLUMN_PX = 8, 30, 460
"""Column width: ~8 px per character of 13 px text, padding and the sort arrow, at most 460 px."""


def column_widths(shown: Any) -> dict[str, int]:
    """Pixel width of each column of ``display_frame``'s output: its longest cell as shown (numbers with
    their thousands separators) or the longest word of its header (headers wrap), whichever is wider."""
    widths = {}
    for col in shown.columns:
        cells = [_shown_cell(v, col) for v in shown[col]]
        chars = max([len(c) for c in cells] + [len(w) for w in col.split()])
        widths[col] = min(MAX_COLUMN_PX, CHAR_PX * chars + CELL_PAD_PX)
    return widths


def _shown_cell(value: Any, col: str) -> str:
    if value is None or value != value:  # None or NaN show as empty cells
        return ""
    if col in NUMBER_FORMATS and isinstance(value, int | float):
        _, _, fraction = NUMBER_FORMATS[col].partition(".")
        decimals = len(fraction)
        return f"{value:,.{decimals}f}"
    return str(value)


def display_frame(frame: Any, max_rows: int = 500) -> Any:
    """The first ``max_rows`` plans as a pandas frame for Tabulator: ``HEADERS`` as column names, SI columns in
    display units, ``#`` the planner's 1-based rank (1, 2, ... in order when the frame has none)."""
    import polars as pl

    out = frame.head(max_rows)
    if "rank" not in out.columns:
        out = out.with_row_index("rank", offset=1)
    if "variant" in out.columns:  # a variant of the layout above folds under it, as in `workbench plan`
        variant = pl.col("variant").fill_null(False)
        out = out.with_columns(
            pl.when(variant).then(pl.lit("└ ") + pl.col("plan")).otherwise(pl.col("plan")).alias("plan")
        )
    if (
        "tied" in out.columns
    ):  # within the model's ranking error of #1 (``workbench.search.frontier.TIE_FRAC``)
        tied = pl.col("tied").fill_null(False) & (pl.col("rank") > 1)
        out = out.with_columns(pl.when(tied).then(pl.lit("= #1")).otherwise(pl.lit("")).alias("tied"))
    out = out.select([c for c in TABLE_COLUMNS if c in out.columns])
    out = out.with_columns(
        (pl.col(col) * factor).round(2) for col, (_, factor) in CONVERSIONS.items() if col in out.columns
    ).rename({c: HEADERS[c] for c in out.columns})
    import pandas as pd

    return pd.DataFrame(out.to_dict(as_series=False))  # polars' to_pandas needs pyarrow


def search_totals(result: Any) -> str:
    """One line of the planner's totals: plans screened, feasible and refined (``workbench plan``'s header)."""
    refined = int(result.plans["refined"].sum()) if result.plans.height else 0
    return (
        f"Screened {result.num_plans:,} plans, {result.num_feasible:,} feasible, {refined:,} refined "
        f"(screen {result.screen_s:.2f} s, refinement {result.refine_s:.2f} s)."
    )


def rejection_frame(result: Any) -> Any:
    """The planner's rejection counts as a pandas frame (``why rejected``, ``plans``), reasons with none left
    out, in checking order (a plan counts under the first rule it breaks)."""
    import pandas as pd

    rows = [(text, count) for _, text, count in result.rejection_table() if count]
    return pd.DataFrame(rows, columns=["why rejected", "plans"])


class SearchView(param.Parameterized):
    """Run button, progress, scatter and ranked table; ``on_load`` is called after a plan is loaded."""

    store = param.ClassSelector(class_=WorkbenchStore)

    def __init__(self, on_load: Callable[[], None] | None = None, **params: Any) -> None:
        super().__init__(**params)
        self._on_load = on_load
        self.button = pn.widgets.Button(label="Run search", color="primary", css_classes=["wb-search"])
        self.button.on_click(self._run)
        self.progress = pn.indicators.Progress(value=0, max=100, width=300, visible=False)
        self.status = pn.pane.Markdown(
            "Search every plan of this model, cluster and workload; click a row to load it into the Plan tab."
        )
        self.scatter = pn.pane.Bokeh(None, visible=False)
        self.totals = pn.pane.Markdown("", visible=False, css_classes=["wb-search-totals"])
        self.rejections = pn.pane.DataFrame(  # an HTML table: the only Tabulator rows are the plans'
            None,
            index=False,
            formatters={"plans": "{:,}".format},
            visible=False,
            css_classes=["wb-rejections"],
        )
        self.table = pn.widgets.Tabulator(
            None,
            disabled=True,
            selectable=1,
            show_index=False,
            pagination="remote",
            page_size=15,
            layout="fit_data_stretch",
            formatters={k: NumberFormatter(format=f) for k, f in NUMBER_FORMATS.items()},
            configuration={"columnDefaults": {"headerWordWrap": True}},
            visible=False,
            sizing_mode="stretch_width",
            css_classes=["wb-search-table"],
        )
        self.table.on_click(self._row_clicked)
        self.store.param.watch(self._show_progress, "search_progress")
        self.store.param.watch(self.update, "search_results")

    async def _run(self, _: Any = None) -> None:
        self.button.disabled, self.progress.visible = True, True
        self.status.object = "Searching…"
        try:
            frame = await asyncio.to_thread(self.store.search)
            self.status.object = f"{frame.height:,} plans ranked, best first."
        except Exception as exc:  # any failure is said in the page, and the button comes back
            self.status.object = f"Search failed: {_reason(exc)}"
        finally:
            self.button.disabled, self.progress.visible = False, False

    def _show_progress(self, *_: Any) -> None:
        self.progress.value = int(round(self.store.search_progress * 100))

    def update(self, *_: Any) -> None:
        frame = self.store.search_results
        if frame is None or frame.height == 0:
            return
        self.scatter.param.update(object=search_figure(frame), visible=True)
        shown = display_frame(frame)
        self.table.param.update(value=shown, widths=column_widths(shown), visible=True)
        result = self.store.search_result
        if result is not None:
            self.totals.param.update(object=search_totals(result), visible=True)
            rejected = rejection_frame(result)
            self.rejections.param.update(object=rejected, visible=bool(len(rejected)))

    def _row_clicked(self, event: Any) -> None:
        self.load_row(int(event.row))

    def load_row(self, index: int) -> None:
        """Load row ``index`` of the search results into the plan controls."""
        self.store.load_plan(self.store.search_results.row(index, named=True))
        if self._on_load:
            self._on_load()

    def panel(self) -> pn.Column:
        return pn.Column(
            pn.Row(self.button, self.progress),
            self.status,
            self.totals,
            self.rejections,
            self.scatter,
            self.table,
            sizing_mode="stretch_width",
        )


def shared_ranges(figs: list[Any], own: dict[int, dict[str, tuple[Any, ...]]] | None = None) -> None:
    """Give the figures the same numeric x and y extents, covering all of them (same axes side by side).

    Ranges without numeric start and end (categorical or automatic) are left alone; an axis drawn reversed
    (start > end, e.g. lanes top-down) stays reversed; pan bounds, where set, widen to cover all of them.
    ``own``: each figure's own extents (``own_extents``, recorded by the caller after it wrote the figure),
    which it starts from, so that extents shared with an earlier partner do not stick when only the other
    figure changes.
    """
    for attr in ("x_range", "y_range"):
        ranges = [getattr(f, attr) for f in figs]
        if not all(
            isinstance(r, Range1d | DataRange1d)
            and isinstance(r.start, int | float)
            and isinstance(r.end, int | float)
            for r in ranges
        ):
            continue
        extents = [
            (own or {}).get(id(f), {}).get(attr, (r.start, r.end, r.bounds))
            for f, r in zip(figs, ranges, strict=True)
        ]
        lo = min(min(start, end) for start, end, _ in extents)
        hi = max(max(start, end) for start, end, _ in extents)
        bounds = [b for _, _, b in extents if isinstance(b, tuple)]
        for r, (start, end, b) in zip(ranges, extents, strict=True):
            r.update(start=hi if start > end else lo, end=lo if start > end else hi)
            if isinstance(b, tuple):
                r.bounds = (min(x[0] for x in bounds), max(x[1] for x in bounds))


def own_extents(fig: Any) -> dict[str, tuple[Any, ...]]:
    """``fig``'s x and y (start, end, bounds), as its builder or in-place writer set them."""
    return {attr: (getattr(fig, attr).start, getattr(fig, attr).end, getattr(fig, attr).bounds)
            for attr in ("x_range", "y_range")}  # fmt: skip


SIDE_WIDTH_PX = 520
"""Width of each Compare side: the two fit beside the composer at 1,440 px."""
COMPARE_BREAKDOWN_TITLE = "Where the step time goes: A and B"


def _side_figures(
    name: str, e: Any, content: Any, timeline: pn.pane.Bokeh, memory: pn.pane.Bokeh
) -> list[Any]:
    """Write side ``name``'s estimate ``e`` (timeline ``content``) into the figures its panes show, or build them
    the first time (the timeline ``stable``: a fixed plot area whatever the lanes, as in the Plan tab, so every
    later plan is written in place); returns the two figures."""
    t, m = timeline.object, memory.object
    if t is None:  # one width (SIDE_WIDTH_PX): one stable_key, so every later content is written in place
        t = content_timeline_figure(content, stable=True)
        t.name = f"compare-{name.lower()}-timeline"
        timeline.object = t
    else:
        in_session(timeline, lambda: refresh_timeline_figure(t, content))
    t.title.text = f"{name}: pipeline timeline"  # the plan's caption is above it, in the page
    usable = usable_memory_bytes(e)
    if m is None:
        m = served_memory_figure(e, width=SIDE_WIDTH_PX)
        m.name = f"compare-{name.lower()}-memory"
        memory.object = m
    else:
        in_session(memory, lambda: refresh_memory_figure(m, e.memory, capacity_bytes=e.memory_capacity_bytes,
                                                         usable_bytes=usable))  # fmt: skip
    return [t, m]


class CompareView(param.Parameterized):
    """Plan A (pinned) beside plan B (current plan, ``store.compare_backend``): what B changes against A (a
    delta table, absolute and in %), then both sides drawn on the same axes, then their step breakdowns.

    Drawn only while its tab is shown (``show``/``hide``, called by the app on a tab change): a change made in
    the Plan tab with a plan pinned costs nothing here until the tab is opened.
    """

    store = param.ClassSelector(class_=WorkbenchStore)
    measured = param.Parameter(
        default=None, doc="A view shown below A and B (the app's: a real run beside its prediction)."
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.pin_button = pn.widgets.Button(label="Pin current plan as A", css_classes=["wb-pin"])
        self.pin_button.on_click(lambda _: self.store.pin())
        self.backend = pn.widgets.Select.from_param(
            self.store.param.compare_backend,
            label="Backend of B",
            width=240,
            disabled_options=list(self.store.backend_reasons),
        )
        self.deltas = pn.pane.Markdown("", css_classes=["wb-deltas"], sizing_mode="stretch_width")
        self.sides = pn.Row(sizing_mode="stretch_width")
        self.breakdown = pn.pane.Bokeh(None, visible=False, sizing_mode="stretch_width")
        self.message = pn.pane.Markdown("")
        self.shown = False
        self._drawn_for: Any = None
        self._drawn: dict[str, Any] = {}
        """The estimate each side's figures show (``_draw`` writes a side only when it changed)."""
        self._panes: list[tuple[pn.pane.Markdown, pn.pane.Bokeh, pn.pane.Bokeh]] = []
        self._own: dict[int, dict[str, tuple[Any, ...]]] = {}
        """Each side figure's own ranges (``own_extents`` by figure id), recorded when it is written."""
        self.store.param.watch(self.update, ["pinned", "estimate", "compare_backend"])
        self.update()

    def show(self) -> None:
        """The tab is shown: draw what changed while it was hidden."""
        self.shown = True
        self.update()

    def hide(self) -> None:
        self.shown = False

    def update(self, *_: Any) -> None:
        if self.store.pinned is None:
            self.message.object = "Pin a plan as A, then change the plan or B's backend to compare."
            self.deltas.object = ""
            self.sides.objects, self.breakdown.visible, self._drawn_for = [], False, None
            self._drawn = {}
            return
        key = (id(self.store.pinned), id(self.store.estimate), self.store.compare_backend)
        if not self.shown or key == self._drawn_for:
            return
        self._drawn_for = key
        try:
            b = self.store.compare()
        except Exception as exc:  # said in the page; the rest of the session goes on
            self.message.object, b = f"Plan B not priced: {_reason(exc)}", None
        a = self.store.pinned
        if b is None:
            self.message.object = self.message.object or "Plan B is not valid: fix the plan in the Plan tab."
            self.deltas.object = ""
            self.sides.objects, self.breakdown.visible = [], False
            self._drawn = {}
            return
        self._draw(a, b)

    def _draw(self, a: Any, b: Any) -> None:
        """A and B side by side. The figures are built once and then written in place (data, titles, ranges:
        ``refresh_timeline_figure``, ``refresh_memory_figure``, ``refresh_breakdown_figure``), a side only when
        its estimate changed, so a change of B sends the browser new data and no new figure (a new figure costs
        it ~0.5 s to build); under one document hold, so it gets one patch."""
        panes = self._side_panes()
        new = not self._drawn
        with frozen(self.sides, self.breakdown, *(p for side in panes for p in side), models=new):
            self.message.object = ""
            self.deltas.object = delta_markdown(a, b)
            for name, e, (caption, timeline, memory) in zip("AB", (a, b), panes, strict=True):
                if self._drawn.get(name) is e:
                    continue
                self._drawn[name] = e
                content = estimate_timeline_content(e, width=SIDE_WIDTH_PX)
                # long: in the page, where it wraps, not cut by the canvas
                caption.object = (
                    f"### {name}: `{e.plan.describe()}` [{e.backend}]\n\n{page_text(content.title)}"
                )
                for fig in _side_figures(name, e, content, timeline, memory):
                    self._own[id(fig)] = own_extents(fig)
            shared_ranges([p.object for p in (panes[0][1], panes[1][1])], self._own)
            shared_ranges([p.object for p in (panes[0][2], panes[1][2])], self._own)
            labels = [f"A: {a.plan.describe()}", f"B: {b.plan.describe()}"]
            if labels[0] == labels[1]:
                labels = [f"A: {a.plan.describe()} [{a.backend}]", f"B: {b.plan.describe()} [{b.backend}]"]
            fig = self.breakdown.object
            if fig is None or not refresh_breakdown_figure(fig, [a, b], labels=labels):
                fig = breakdown_figure([a.breakdown, b.breakdown], labels, title=COMPARE_BREAKDOWN_TITLE)
                self.breakdown.param.update(object=fig, visible=True)
            elif not self.breakdown.visible:
                self.breakdown.visible = True
            if new:
                self.sides.objects = [pn.Column(*side, sizing_mode="stretch_width") for side in panes]

    def _side_panes(self) -> list[tuple[pn.pane.Markdown, pn.pane.Bokeh, pn.pane.Bokeh]]:
        """(caption, timeline, memory) panes of A and B, made once."""
        if not self._panes:
            self._panes = [
                (
                    pn.pane.Markdown(""),
                    pn.pane.Bokeh(None, sizing_mode="stretch_width"),
                    pn.pane.Bokeh(None, sizing_mode="stretch_width"),
                )
                for _ in "AB"
            ]
        return self._panes

    def panel(self) -> pn.Column:
        return pn.Column(
            pn.Row(self.pin_button, self.backend),
            self.message,
            self.deltas,
            self.sides,
            self.breakdown,
            *([self.measured.panel()] if self.measured is not None else []),
            sizing_mode="stretch_width",
        )


DELTA_ROWS: tuple[tuple[str, str, float, str], ...] = (
    ("step time", "step_time_s", 1e3, "ms"),
    ("throughput", "tokens_per_s", 1.0, "tokens/s"),
    ("MFU", "mfu", 100.0, "%"),
    ("peak memory per device", "peak_memory_bytes", 1 / GIB, "GiB"),
    ("bubble", "bubble_fraction", 100.0, "% of the step"),
)
"""(label, Estimate attribute, factor to the display unit, unit) of the Compare tab's delta table."""


def delta_markdown(a: Any, b: Any) -> str:
    """B against A as a Markdown table: each figure of A and B in display units, B - A, and (B - A) / A in %
    ("-" where A is 0); a line above says which is better for the step time."""
    rows = []
    for label, attr, factor, unit in DELTA_ROWS:
        va, vb = float(getattr(a, attr)) * factor, float(getattr(b, attr)) * factor
        rel = "-" if va == 0 else f"{(vb - va) / abs(va) * 100:+.1f} %"
        rows.append(f"| {label} ({unit}) | {va:,.1f} | {vb:,.1f} | {vb - va:+,.1f} | {rel} |")
    faster = (
        "B is faster"
        if b.step_time_s < a.step_time_s
        else "A is faster"
        if a.step_time_s < b.step_time_s
        else "same step time"
    )
    fits = (
        ""
        if (a.fits and b.fits)
        else " · " + ", ".join(f"{n} does not fit" for n, e in (("A", a), ("B", b)) if not e.fits)
    )
    head = "| B against A | A | B | B - A | (B - A) / A |\n|---|---:|---:|---:|---:|\n"
    return f"**{faster}**{fits}\n\n" + head + "\n".join(rows)


def _reason(exc: BaseException) -> str:
    """``exc`` for the page: its message (HTML-escaped), with its type unless it is a ValueError of ours."""
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, ValueError | RuntimeError):
        text = f"{text} ({type(exc).__name__})"
    return page_text(text)
