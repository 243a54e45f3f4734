"""Views: presentation of a ``WorkbenchState`` and a ``WorkbenchStore`` as Panel components.

Controls are built from the State's parameters (``from_param``); figures come from ``workbench_widgets.plots`` (the
same builders as the HTML report), and a view only swaps a pane's object when the Store's result changes.
Every number shown carries its unit; conversions from SI happen here and nowhere else.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from types import MappingProxyType
from typing import Any, ClassVar

import panel as pn
import param
from panel.io.document import hold
from panel.io.notebook import push
from panel.io.state import set_curdoc
from panel.io.state import state as pn_state
from workbench_widgets.app.choices import violations_by_control
from workbench_widgets.app.page_text import page_text
from workbench_widgets.app.state import APP_PLAN_FIELDS, WorkbenchState
from workbench_widgets.app.store import MAX_UPLOAD_BYTES, WorkbenchStore, too_big_message
from workbench_widgets.app.upload import ConfigUpload
from workbench_widgets.plots import placement_figure
from workbench_widgets.plots.breakdown import refresh_served_breakdown, same_bars, served_breakdown_figure
from workbench_widgets.plots.memory import refresh_memory_figure, served_memory_figure, usable_memory_bytes
from workbench_widgets.plots.placement import placement_figure_tags, refresh_placement_figure
from workbench_widgets.plots.timeline import (
    TimelineContent,
    content_timeline_figure,
    estimate_timeline_content,
    refresh_timeline_figure,
)

from workbench.specs.axes import PLAN_AXES
from workbench.specs.rules import CONTROLS

MS_PER_S, GIB = 1e3, 2**30
LABELS: Mapping[str, str] = MappingProxyType(
    {
        "cluster_preset": "Cluster preset",
        "device": "Device",
        "num_nodes": "Nodes",
        "devices_per_node": "Devices per node",
        "scale_up_span": "Scale-up domain (devices)",
        "scale_up_bandwidth_GBps": "Scale-up bandwidth (GB/s per device)",
        "scale_up_latency_us": "Scale-up latency (µs)",
        "scale_out_bandwidth_GBps": "Scale-out bandwidth (GB/s per device)",
        "scale_out_latency_us": "Scale-out latency (µs)",
        "model_preset": "Model",
        "num_layers": "Layers",
        "hidden_size": "Hidden size",
        "num_attention_heads": "Attention heads",
        "num_key_value_heads": "KV heads",
        "ffn_hidden_size": "FFN hidden size",
        "vocab_size": "Vocabulary",
        "seq_len": "Sequence length (tokens)",
        "global_batch_size": "Global batch (sequences)",
        "dtype": "Precision",
        "capacity_factor": "MoE capacity factor (empty: dropless)",
        **{a.name: a.app.label for a in PLAN_AXES},
        "backend": "Backend",
        "framework": "Framework profile",
    }
)
CLUSTER_CONTROLS = (
    "cluster_preset",
    "device",
    "num_nodes",
    "devices_per_node",
    "scale_up_span",
    "scale_up_bandwidth_GBps",
    "scale_up_latency_us",
    "scale_out_bandwidth_GBps",
    "scale_out_latency_us",
)
MODEL_CONTROLS = (
    "model_preset",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "ffn_hidden_size",
    "vocab_size",
)
WORKLOAD_CONTROLS = ("seq_len", "global_batch_size", "dtype", "capacity_factor")
PLAN_CONTROLS = APP_PLAN_FIELDS
WIDTH = 260


class OnePatch:
    """A control whose change from the page is applied under one document hold (``panel.io.document.hold``):
    what the change moves, the URL's query (``pn.state.location``), the other controls' options and values
    and every figure, reaches the browser as one PATCH-DOC message instead of one per watcher (three before:
    query, options, figures), so BokehJS applies and lays out the page once. Panel holds a notebook comm's
    changes so (``Syncable._schedule_change``) but not a served session's."""

    def _process_events(self, events: dict[str, Any]) -> None:
        with hold():
            super()._process_events(events)  # type: ignore[misc]


class IntInput(OnePatch, pn.widgets.IntInput):
    """``pn.widgets.IntInput`` applying a change under one hold (``OnePatch``)."""


class FloatInput(OnePatch, pn.widgets.FloatInput):
    """``pn.widgets.FloatInput`` applying a change under one hold (``OnePatch``)."""


class Checkbox(OnePatch, pn.widgets.Checkbox):
    """``pn.widgets.Checkbox`` applying a change under one hold (``OnePatch``), at once (``Select``)."""

    _priority_changes: ClassVar[list[str]] = ["value"]


class Select(OnePatch, pn.widgets.Select):
    """``pn.widgets.Select`` applying a change under one hold (``OnePatch``), at once: Panel waits 50 ms
    (``Syncable._debounce``) before it handles a change from a served page, to merge a burst of them (typing,
    dragging); a choice in a list is one event, so its ``value`` is a priority change (Panel's own
    ``_priority_changes``, as Tabulator's data), handled on the next turn of the session's loop."""

    _priority_changes: ClassVar[list[str]] = ["value"]


HIDDEN: Mapping[str, str] = MappingProxyType({"display": "none"})
"""The inline style of a notice that is not shown (``reveal``)."""


def reveal(pane: Any, shown: bool, **params: Any) -> None:
    """Show or hide ``pane``, a notice above the figures, by its inline style, with ``params`` in the same
    update. Its ``visible`` stays True: BokehJS answers a change of ``visible`` with a layout pass of the
    whole page, which lays out and repaints every figure again (about 100 ms of the page's CPU per change
    that shows or hides a notice, issue 51 item 10); a style change only lets the browser move what is below."""
    styles = {k: v for k, v in pane.styles.items() if k not in HIDDEN}
    pane.param.update(styles=styles if shown else {**styles, **HIDDEN}, **params)


def is_shown(pane: Any) -> bool:
    """Whether ``pane`` is on the page: visible and not hidden by ``reveal``."""
    return bool(pane.visible) and pane.styles.get("display") != HIDDEN["display"]


def control(state: WorkbenchState, name: str) -> pn.widgets.Widget:
    """The widget of one State parameter, labelled with its unit; css class ``wb-<name>`` for tests. A change
    from the page reaches the browser back as one patch (``OnePatch``)."""
    p = state.param[name]
    kwargs: dict[str, Any] = {"label": LABELS.get(name, name), "width": WIDTH, "css_classes": [f"wb-{name}"]}
    if isinstance(p, param.Integer) and not p.constant:
        return IntInput.from_param(p, **kwargs)
    if isinstance(p, param.Number) and not isinstance(p, param.Integer):
        return FloatInput.from_param(p, **kwargs)
    if isinstance(p, param.Integer):
        return IntInput.from_param(p, disabled=True, **kwargs)
    if isinstance(p, param.Boolean):
        return Checkbox.from_param(p, **kwargs)
    return Select.from_param(p, **kwargs)


NOTE_OF_CONTROL: Mapping[str, str] = MappingProxyType({"cluster": "num_nodes"})
"""Where the note of a rule's control (``Violation.control``) sits when the control is not itself a widget:
the cluster's device count is changed through its node count."""


class Composer(param.Parameterized):
    """The controls for cluster, model, workload, plan and backend, with each violation under its control."""

    store = param.ClassSelector(class_=WorkbenchStore)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        state = self.store.state
        self.widgets = {
            n: control(state, n)
            for n in (
                *CLUSTER_CONTROLS,
                *MODEL_CONTROLS,
                *WORKLOAD_CONTROLS,
                *PLAN_CONTROLS,
                "backend",
                "framework",
            )
        }
        self.notes = {
            n: pn.pane.Alert("", alert_type="danger", visible=False, width=WIDTH, margin=(0, 10))
            for n in (*PLAN_CONTROLS, "num_nodes", "backend")
        }
        self.upload = ConfigUpload(max_bytes=MAX_UPLOAD_BYTES, width=WIDTH, css_classes=["wb-upload"])
        self.upload.param.watch(self._on_upload, "file")
        self.error = pn.pane.Alert("", alert_type="warning", visible=False, width=WIDTH)
        self.refused = pn.pane.Alert(
            "", alert_type="danger", visible=False, width=WIDTH, css_classes=["wb-refused"]
        )
        self.store.param.watch(
            self._show_problems, ["violations", "error", "disabled_schedules", "backend_reasons"]
        )
        self.store.param.watch(self._show_refused, "refused")
        self._show_problems()

    def _on_upload(self, event: param.parameterized.Event) -> None:
        """A file from ``ConfigUpload``: refused for its size in the browser, or its bytes to the Store."""
        file = event.new or {}
        name = str(file.get("name") or "config.json")
        try:
            data = ConfigUpload.content(file)
        except ValueError as exc:
            self.store.refuse(name, exc)
            return
        if data is None:  # over the limit: the browser sent only its name and size
            size = file.get("size")
            self.store.refuse(name, ValueError(too_big_message(size if isinstance(size, int) else 0)))
            return
        # A ValueError means the Store has put the reason in ``refused``, which ``_show_refused`` shows.
        with suppress(ValueError):
            self.store.upload_file(data, name)

    def _show_refused(self, *_: Any) -> None:
        """The Store's ``refused`` in the danger alert atop the composer, and in a served page also as a toast
        (seen wherever the page is scrolled). Both are HTML: the text, which may quote a file name, is escaped."""
        text = self.store.refused
        self.refused.param.update(object=page_text(text), visible=bool(text))
        doc = pn_state.curdoc
        if (
            text
            and doc is not None
            and doc.session_context is not None
            and pn_state.notifications is not None
        ):
            pn_state.notifications.error(html.escape(text, quote=False), duration=8000)

    def _show_problems(self, *_: Any) -> None:
        grouped = violations_by_control(self.store.violations)
        for name in CONTROLS:  # every rule's control has a note; a fixed plan clears it
            text = " ".join(page_text(t) for t in grouped.get(name, []))
            self.notes[NOTE_OF_CONTROL.get(name, name)].param.update(object=text, visible=bool(text))
        reasons = self.store.backend_reasons
        self.widgets["backend"].disabled_options = _others(reasons, self.store.state.backend)
        backend_text = " ".join(f"{page_text(n)}: {page_text(r)}." for n, r in reasons.items())
        self.notes["backend"].param.update(
            object=f"Unavailable here — {backend_text}", visible=bool(reasons), alert_type="secondary"
        )
        # Panel refuses to disable the current value; its violation is shown next to the control instead.
        self.widgets["schedule"].disabled_options = _others(
            self.store.disabled_schedules, self.store.state.schedule
        )
        self.error.param.update(object=page_text(self.store.error), visible=bool(self.store.error))

    def _section(self, title: str, names: tuple[str, ...], extra: tuple = ()) -> pn.Card:
        rows: list[Any] = []
        for n in names:
            rows.append(self.widgets[n])
            if n in self.notes:
                rows.append(self.notes[n])
        return pn.Card(*rows, *extra, title=title, width=WIDTH + 30, collapsed=False)

    def panel(self) -> pn.Column:
        return pn.Column(
            self.refused,
            self.error,
            self._section("Cluster", CLUSTER_CONTROLS),
            self._section(
                "Model",
                MODEL_CONTROLS[:1],
                (
                    pn.pane.Markdown(f"or upload a `config.json` (up to {MAX_UPLOAD_BYTES // 2**20} MiB):"),
                    self.upload,
                    *[self.widgets[n] for n in MODEL_CONTROLS[1:]],
                ),
            ),
            self._section("Workload", WORKLOAD_CONTROLS),
            self._section("Plan", PLAN_CONTROLS),
            self._section("Backend", ("backend", "framework")),
            width=WIDTH + 40,
        )


def _others(names: dict[str, str], current: str) -> list[str]:
    return [n for n in names if n != current]


def _band_rows(e: Any) -> list[tuple[str, str]]:
    """The step time's error band (``workbench.estimate.band``) as summary rows; none without a band."""
    if e.band is None:
        return []
    low, high = e.band.time_range(e.step_time_s)
    rows = [
        (
            f"Step time, {e.band.coverage_frac:.0%} band",
            f"{low * MS_PER_S:,.1f}-{high * MS_PER_S:,.1f} ms ({e.band.num_residuals} published runs)",
        )
    ]
    if e.band.widened:
        rows.append(("Band widened", "; ".join(e.band.notes)))
    return rows


def summary_markdown(estimate: Any) -> str:
    """The headline numbers of an Estimate as a Markdown table (header ``Measure | Value``), each with its
    unit."""
    if estimate is None:
        return "No estimate: fix the plan (see the notes next to the controls)."
    if not estimate.fits:
        return unfit_markdown(estimate)
    e = estimate
    fits = "fits" if e.fits else "**does not fit**"
    rows = [
        ("Step time", f"{e.step_time_s * MS_PER_S:,.1f} ms"),
        ("Throughput", f"{e.tokens_per_s:,.0f} tokens/s"),
        *_band_rows(e),
        ("MFU", f"{e.mfu * 100:.1f} %"),
        ("Model TFLOP/s per device", f"{e.model_flop_per_s_per_device / 1e12:,.1f} TFLOP/s"),
        (
            "Peak memory per device",
            f"{e.peak_memory_bytes / GIB:,.1f} GiB of {e.memory_usable_bytes / GIB:,.1f} GiB usable "
            f"({e.memory_capacity_bytes / GIB:,.1f} GiB less {e.memory_headroom_frac:.0%} headroom; {fits})",
        ),
        ("Bubble", f"{e.bubble_fraction * 100:.1f} % of the step (critical rank)"),
        ("Backend", f"{page_text(e.backend)}{' (measured)' if e.measured else ''}"),
        *([("Stack", page_text(f"{e.framework} ({e.framework_version})"))] if e.framework_version else []),
        *_money_rows(e),
    ]
    table = "| Measure | Value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    notes = "".join(f"\n- {page_text(n)}" for n in e.notes)
    name, cluster = page_text(e.model.name), page_text(e.cluster.name)
    return f"**{name}** on **{cluster}** · `{e.plan.describe()}`\n\n{table}\n{notes}"


def _money_rows(e: Any) -> list[tuple[str, str]]:
    """Dollars and energy of the plan at the default price and power (docs/cost.md); [] when not priced."""
    from workbench.estimate.economics import default_economics

    try:
        econ, why = default_economics(e)
    except ValueError:  # a device without a power row (a custom device): no money rows
        return []
    cost = (
        f"${econ.usd_per_step:,.4f} per step, ${econ.usd_per_million_tokens:,.4f} per million tokens "
        f"(${econ.usd_per_device_hour:,.2f} per device-hour)"
        if econ.usd_per_step is not None
        else "no public price for this device (CLI: --price-per-device-hour)"
    )
    energy = (
        f"{econ.energy_j_per_step / 1e6:,.3f} MJ per step, {econ.tokens_per_joule:,.2f} tokens per joule"
        if econ.energy_j_per_step is not None and econ.tokens_per_joule is not None
        else "no power figures for this device"
    )
    return [("Cost", cost), ("Energy", energy)]


def unfit_markdown(e: Any) -> str:
    """The summary of a plan that does not fit: its memory against what a device may use, and no step time,
    throughput or MFU (it would not run: those would be the figures of a run that cannot happen)."""
    usable = usable_memory_bytes(e)
    over = e.peak_memory_bytes - usable
    rows = [
        (
            "Peak memory per device",
            f"{e.peak_memory_bytes / GIB:,.1f} GiB of {usable / GIB:,.1f} GiB usable: "
            f"**{over / GIB:,.1f} GiB over** ({e.memory_capacity_bytes / GIB:,.1f} GiB HBM)",
        ),
        ("Step time, throughput, MFU", "none: this plan runs out of memory, it does not run"),
        ("Backend", e.backend),
    ]
    table = "| Measure | Value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    return (
        f"**{e.model.name}** on **{e.cluster.name}** · `{e.plan.describe()}` · **does not fit**\n\n{table}\n\n"
        "The memory figure shows which ranks are over; more pipeline, tensor or data (ZeRO) sharding, "
        "recompute, or more nodes bring it down."
    )


class PlanView(param.Parameterized):
    """Summary, timeline, memory, breakdown and placement of the Store's estimate.

    A change writes the new data and texts into the figures shown (no new bokeh models, no document
    re-walk, a small patch for the browser, issue 19 item 12): the timeline is built ``stable`` (every
    renderer and legend entry it may need, so lanes, view and ops can change in place), the memory figure
    takes other ranks, the placement another plan on the same node grid; a figure is written only when its
    input changed (the placement depends on the plan and the cluster alone, the memory bars on the memory
    table and the capacity). New figures are built only for what needs other models (another node grid,
    another bar count, a timeline that starts or stops panning its lanes); that swap happens under one
    document hold with the model graph frozen, so the browser still gets a single patch per change. Drawn
    only while its tab is shown (``show``/``hide``): a change of plan B in the Compare tab costs nothing here.
    """

    store = param.ClassSelector(class_=WorkbenchStore)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.summary = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["wb-summary"])
        self.working = pn.Row(
            pn.indicators.LoadingSpinner(value=True, size=24), pn.pane.Markdown(""), visible=False
        )
        self.store.param.watch(self._show_working, "working")
        # Notices are shown and hidden by style (``reveal``), which lays out nothing again.
        self.stale = pn.pane.Alert("", alert_type="warning", styles=dict(HIDDEN), css_classes=["wb-stale"])
        self.search_again = pn.widgets.Button(
            label="Find the best plan for these inputs",
            color="primary",
            styles=dict(HIDDEN),
            css_classes=["wb-search-again"],
        )
        self.search_again.on_click(self._search_again)
        self.adjusted = pn.pane.Alert("", alert_type="info", styles=dict(HIDDEN), css_classes=["wb-adjusted"])
        self.why = pn.pane.Markdown(
            "", styles=dict(HIDDEN), sizing_mode="stretch_width", css_classes=["wb-why"]
        )
        self.store.param.watch(self._show_notices, ["stale", "adjusted", "why"])
        self._show_notices()
        # Stretched to the width of the tab: the pane sets ``sizing_mode`` on every figure it shows.
        self.timeline = pn.pane.Bokeh(None, css_classes=["wb-timeline"], sizing_mode="stretch_width")
        self.memory = pn.pane.Bokeh(None, css_classes=["wb-memory"], sizing_mode="stretch_width")
        self.breakdown = pn.pane.Bokeh(None, css_classes=["wb-breakdown"], sizing_mode="stretch_width")
        self.placement = pn.pane.Bokeh(None, css_classes=["wb-placement"], sizing_mode="stretch_width")
        self._shown: Any = None
        self.shown = True
        """Whether the tab is on screen (``show``/``hide``, called by the app on a tab change)."""
        self._placement_key: Any = None
        self._memory_key: Any = None
        self._timeline_key: Any = None
        self.store.param.watch(self.update, "estimate")
        self.update()

    def _show_notices(self, *_: Any) -> None:
        """What makes the plan shown other than asked: found for other inputs (with the search offered), or
        moved off the chosen values by the inputs."""
        with hold():
            reveal(self.stale, bool(self.store.stale), object=html.escape(self.store.stale))
            reveal(self.search_again, bool(self.store.stale))
            adjusted = self.store.adjusted
            reveal(self.adjusted, bool(adjusted), object=html.escape(adjusted))
            why = self.store.why
            reveal(self.why, bool(why), object=f"**Why this plan:** {html.escape(why)}" if why else "")

    def _search_again(self, *_: Any) -> None:
        self.search_again.loading = True
        try:
            if self.store.load_best_plan() is None:
                self.store.stale = (
                    "No plan fits these inputs (the planner found none): more nodes, or a smaller batch."
                )
        finally:
            self.search_again.loading = False

    def _show_working(self, *_: Any) -> None:
        self.working[1].object = self.store.working
        self.working.visible = bool(self.store.working)

    def show(self) -> None:
        """The tab is shown: draw what changed while it was hidden."""
        self.shown = True
        self.update()

    def hide(self) -> None:
        """The tab is hidden: a change made meanwhile (e.g. plan B in the Compare tab) draws nothing here, so
        the browser gets only the figures on screen."""
        self.shown = False

    def update(self, *_: Any) -> None:
        e = self.store.estimate
        if not self.shown or (e is self._shown and e is not None):
            return
        self._shown = e
        panes = (self.timeline, self.memory, self.breakdown, self.placement)
        if e is None:
            with hold():
                self.summary.object = "" if self.store.working else summary_markdown(None)
                for pane in panes:
                    pane.visible = False
            return
        content = estimate_timeline_content(e)
        memory_changed, placement_changed = self._memory_changed(e), self._placement_changed(e)
        figures = self._new_figures(e, content)
        # Freezing costs one walk of the document's model graph on exit: only when a figure is swapped.
        with frozen(*panes, models=bool(figures)):
            self.summary.object = summary_markdown(e)
            # The figures are bound now: a write scheduled from a thread never lands on a later figure.
            timeline, breakdown = self.timeline.object, self.breakdown.object
            memory, placement = self.memory.object, self.placement.object
            if self.timeline not in figures:
                in_session(self.timeline, lambda: refresh_timeline_figure(timeline, content))
            if self.breakdown not in figures:
                in_session(self.breakdown, lambda: refresh_served_breakdown(breakdown, e))
            if self.memory not in figures and memory_changed:
                capacity, usable = e.memory_capacity_bytes, usable_memory_bytes(e)
                in_session(
                    self.memory,
                    lambda: refresh_memory_figure(
                        memory, e.memory, capacity_bytes=capacity, usable_bytes=usable
                    ),
                )
            if self.placement not in figures and placement_changed:
                in_session(self.placement, lambda: refresh_placement_figure(placement, e.plan, e.cluster))
            for pane in panes:
                # Giving a pane its own figure again re-walks that figure: only a new figure, or a pane that
                # comes back (Panel then takes the visibility from the figure unless both are set together).
                if pane in figures or not pane.visible:
                    pane.param.update(object=figures.get(pane, pane.object), visible=True)

    def _memory_changed(self, e: Any) -> bool:
        old, self._memory_key = self._memory_key, (e.memory_capacity_bytes, e.memory)
        return old is None or old[0] != e.memory_capacity_bytes or not old[1].equals(e.memory)

    def _placement_changed(self, e: Any) -> bool:
        old, self._placement_key = self._placement_key, placement_key(e)
        return old != self._placement_key

    def _new_figures(self, e: Any, content: TimelineContent) -> dict[pn.pane.Bokeh, Any]:
        """The figures that need new bokeh models, built: the first of each pane, a timeline of another
        ``stable_key`` (width, lanes panned or not), a breakdown of another bar count, a placement of another
        node grid. Every other change is written into the figure shown (``update``), so the browser receives
        new data and texts, not new figures."""
        figures: dict[pn.pane.Bokeh, Any] = {}
        if self.timeline.object is None or content.stable_key != self._timeline_key:
            self._timeline_key = content.stable_key
            figures[self.timeline] = _named(content_timeline_figure(content, stable=True), "plan-timeline")
        if self.memory.object is None:
            figures[self.memory] = _named(served_memory_figure(e), "plan-memory")
        if self.breakdown.object is None or not same_bars(self.breakdown.object, [e]):
            figures[self.breakdown] = served_breakdown_figure(e)
        fig = self.placement.object
        if fig is None or not refreshable_placement(fig, e):
            figures[self.placement] = placement_figure(e.plan, e.cluster)
        for fig in figures.values():  # not aligned to one another: each keeps its own axis margins
            fig.frame_align = False
        return figures

    def panel(self) -> pn.Column:
        """The figures one under the other, each as wide as the tab (the page never scrolls sideways)."""
        return pn.Column(
            self.working,
            self.stale,
            self.search_again,
            self.adjusted,
            self.summary,
            self.why,
            self.timeline,
            self.memory,
            self.breakdown,
            self.placement,
            sizing_mode="stretch_width",
        )


def refreshable_placement(fig: Any, e: Any) -> bool:
    """Whether ``fig``, a placement figure, can show ``e``'s plan in place (same node grid)."""
    return fig.tags == placement_figure_tags(e.cluster) and e.plan.num_devices <= e.cluster.num_devices


def placement_key(e: Any) -> tuple:
    """What ``placement_figure`` draws: the degrees, the rank order and the node grid (not the costs)."""
    p, c = e.plan, e.cluster
    return (p.dp, p.tp, p.pp, p.cp, p.ep, p.rank_order, c.devices_per_node, c.num_nodes)


@contextmanager
def frozen(*viewables: Any, models: bool = True) -> Iterator[None]:
    """Hold the session's events and (``models``) freeze the model graph of every document showing
    ``viewables``.

    Replacing a figure re-walks the whole document's model graph once per changed model (and Panel's inline
    stylesheet patching in notebooks changes each new model again); frozen, the walk happens once on exit,
    but always, so changes that add no model (data written in place) only hold.
    """
    docs = {m.document for v in viewables for m, _ in v._models.values() if m.document is not None}
    with ExitStack() as stack:
        for doc in docs if models else ():
            stack.enter_context(doc.models.freeze())
        stack.enter_context(hold())
        yield


def in_session(pane: pn.pane.Bokeh, write: Callable[[], Any]) -> None:
    """Run ``write``, in-place changes to the figure ``pane`` shows, the way Panel applies its own model
    updates: at once (and pushed over the comm in a notebook) on the session's thread, else scheduled on
    the session's event loop (e.g. from a background estimate's thread)."""
    doc = getattr(pane.object, "document", None)
    views = [pn_state._views[ref] for ref in pane._models if ref in pn_state._views]
    shown = [(d, comm) for _, _, d, comm in views if d is doc]
    if doc is None or not shown:
        write()
        return
    comm = shown[0][1]
    if comm or pn_state._unblocked(doc) or not doc.session_context:
        write()
        if comm:
            push(doc, comm)
    else:
        with set_curdoc(doc):
            pn_state.execute(write, schedule=True)


def _named(fig: Any, name: str) -> Any:
    fig.name = name
    return fig
