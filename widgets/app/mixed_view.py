"""The Mixed cluster tab: pools of different clusters composed in the page, planned by ``workbench.hetero`` on a
button press, the ranked plans, each pool alone, and which pool runs what (``workbench_widgets.plots.mixed``).

The State and Store are in ``workbench_widgets.app.mixed_store``; this module is the View: one row per pool (a
cluster preset and its nodes, added and removed in the page, mirrored in the command line's
``dgx-h100:4+dgx-a100:4`` form, which can be typed too), the shared level, the model and workload, a Plan button
(the planner runs in a worker thread, as the Search tab's, so the page and other sessions stay live), the tables,
the figures of the selected plan and the downloads (the mixed report, the cluster as TOML). The tab has its own
choices, apart from the training composer.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter
from workbench_widgets.app.mixed_store import MixedStore, pools_text
from workbench_widgets.app.page_text import page_text
from workbench_widgets.plots._style import GIB, MS_PER_S
from workbench_widgets.plots.mixed import mixed_placement_figure, mixed_stage_time_figure
from workbench_widgets.plots.timeline import timeline_figure

from workbench.specs.limits import MAX_NODES

WIDTH, NODES_WIDTH = 200, 110
FIGURE_WIDTH_PX = 860
"""The figures fit beside the composer on a 1366-pixel-wide screen."""
PLAN_COLUMN_PX = 480
"""The plan column wraps at this width, so that every column fits beside the composer at 1366 pixels."""
NUMBER_FORMATS = {"tokens/s": "0,0", "MFU (%)": "0.0", "step (s)": "0.000", "bubble (%)": "0.0"}
PROMPT = "Compose two or more pools, then press **Plan over the pools**."


def plans_frame(result: Any) -> Any:
    """The ranked plans as a pandas frame for the table: #, kind, plan, tokens/s, MFU (%), step (s), bubble (%),
    fits (as ``workbench plan`` prints them); no rows for ``result`` None."""
    import pandas as pd

    rows = [
        {"#": i + 1, "kind": e.kind, "plan": e.description, "tokens/s": round(e.tokens_per_s, 1),
         "MFU (%)": round(100 * e.mfu, 2), "step (s)": round(e.step_time_s, 4),
         "bubble (%)": round(100 * e.bubble_fraction, 2), "fits": "yes" if e.fits else "no"}
        for i, e in enumerate(() if result is None else result.plans)
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["#", "kind", "plan", *NUMBER_FORMATS, "fits"])


def alone_frame(result: Any) -> Any:
    """Each pool alone on the whole batch (the homogeneous planner's #1): pool, nodes, plan, tokens/s."""
    import pandas as pd

    rows = [
        [lab, pool.num_nodes, "-" if a is None else a.plan.describe(),
         "-" if a is None else f"{a.tokens_per_s:,.0f}"]
        for lab, pool, a in zip(result.cluster.labels, result.cluster.pools, result.alone, strict=True)
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["pool", "nodes", "plan (alone)", "tokens/s"])


def stages_frame(est: Any) -> Any:
    """Which pool runs what in plan ``est``: the stage table with ms and GiB (``workbench plan``'s last table)."""
    import pandas as pd

    rows = [
        [r["stage"], r["pool"], r["device"], r["tp"], f"{r['first_layer']}+{r['layers']}",
         f"{r['forward_s'] * MS_PER_S:.1f}", f"{r['backward_s'] * MS_PER_S:.1f}",
         f"{r['memory_bytes'] / GIB:.1f}", f"{r['usable_bytes'] / GIB:.1f}"]
        for r in est.stages.iter_rows(named=True)
    ]  # fmt: skip
    columns = ["stage", "pool", "device", "tp", "layers", "F ms", "B ms", "memory GiB", "usable GiB"]
    return pd.DataFrame(rows, columns=columns)


def summary_markdown(store: MixedStore) -> str:
    """The run's header (cluster, workload, search size), the gain over the fastest pool alone and the notes;
    or why there is no result (HTML-escaped)."""
    r = store.result
    if r is None:
        return f"**No plan:** {page_text(store.error)}" if store.error else PROMPT
    w = r.workload
    lines = [
        f"**{page_text(r.model.name)}** on {page_text(r.cluster.describe())}; sequence {w.seq_len:,}, "
        f"global batch {w.global_batch_size:,}, {w.dtype}",
        f"- {r.num_layouts:,} pipeline layouts screened, {len(r.plans)} plans priced in {r.search_s:.1f} s",
    ]
    fastest = max((a.tokens_per_s for a in r.alone if a is not None), default=0.0)
    if r.best is None:
        lines.append("- **No plan over these pools fits the devices' memory.**")
    elif fastest:
        lines.append(
            f"- best plan: {r.best.tokens_per_s / fastest - 1:+.1%} tokens/s over the fastest pool alone"
        )
    lines += [f"- note: {page_text(n)}" for n in r.notes]
    return "\n".join(lines)


class MixedView(param.Parameterized):
    """Pool rows, shared level, model and workload controls, the Plan button, the results and the downloads."""

    store = param.ClassSelector(class_=MixedStore)

    def __init__(self, **params: Any) -> None:
        if "store" not in params:
            params["store"] = MixedStore()
        super().__init__(**params)
        from workbench.presets.pools import mixed_preset_names

        state = self.store.state
        self.rows = pn.Column(sizing_mode="stretch_width", css_classes=["wb-mixed-pools"])
        self.add = pn.widgets.Button(label="Add pool", width=110, css_classes=["wb-mixed-add"])
        self.add.on_click(lambda *_: self._add_pool())
        self.text = pn.widgets.TextInput(
            label="Pools (as --cluster)",
            value=pools_text(state.pools),
            width=320,
            css_classes=["wb-mixed-text"],
        )
        self.text.param.watch(self._text_typed, "value")
        presets = {"-": "", **{n: n for n in mixed_preset_names()}}
        self.preset = pn.widgets.Select(
            label="Fill from a mixed preset", options=presets, width=WIDTH, css_classes=["wb-mixed-preset"]
        )
        self.preset.param.watch(self._preset_picked, "value")
        self.bandwidth = pn.widgets.FloatInput.from_param(
            state.param.shared_bandwidth_GBps, width=WIDTH, css_classes=["wb-mixed-bandwidth"]
        )
        self.latency = pn.widgets.FloatInput.from_param(
            state.param.shared_latency_us, width=WIDTH, css_classes=["wb-mixed-latency"]
        )
        self.workload = [
            _control(state, "model_preset", "Model"),
            _control(state, "seq_len", "Sequence length"),
            _control(state, "global_batch_size", "Global batch (sequences)"),
            _control(state, "dtype", "Precision"),
        ]
        self.button = pn.widgets.Button(label="Plan over the pools", color="primary",
                                        css_classes=["wb-mixed-run"])  # fmt: skip
        self.button.on_click(self.run)
        self.progress = pn.indicators.Progress(value=-1, active=True, width=200, visible=False)
        self.message = pn.pane.Markdown(PROMPT, sizing_mode="stretch_width", css_classes=["wb-mixed-message"])
        self.summary = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["wb-mixed-summary"])
        numbers = {k: NumberFormatter(format=f) for k, f in NUMBER_FORMATS.items()}
        self.table = pn.widgets.Tabulator(
            plans_frame(None), disabled=True, selectable=1, show_index=False, layout="fit_data_stretch",
            formatters={"plan": {"type": "textarea"}, **numbers}, widths={"plan": PLAN_COLUMN_PX},
            pagination="local", page_size=10, sizing_mode="stretch_width", css_classes=["wb-mixed-table"],
        )  # fmt: skip
        self.table.param.watch(self._row_selected, "selection")
        self.alone = pn.pane.DataFrame(None, index=False, css_classes=["wb-mixed-alone"])
        self.stages = pn.pane.DataFrame(None, index=False, css_classes=["wb-mixed-stages"])
        self.figures = {n: pn.pane.Bokeh(None) for n in ("placement", "stage_time", "timeline")}
        self.download = pn.widgets.FileDownload(callback=self._report_file, filename="mixed-report.html",
                                                label="Download mixed report", embed=False, disabled=True,
                                                css_classes=["wb-mixed-download"])  # fmt: skip
        self.toml = pn.widgets.FileDownload(callback=self._toml_file, filename="mixed-cluster.toml",
                                            label="Download cluster TOML", embed=False,
                                            css_classes=["wb-mixed-toml"])  # fmt: skip
        self.results = pn.Column(
            pn.Row(self.summary, self.download, sizing_mode="stretch_width"),
            self.table,
            pn.pane.Markdown("Each pool alone on the whole batch (the homogeneous planner's #1):"),
            self.alone,
            pn.pane.Markdown("Which pool runs what in the selected plan (click a row of the table above):"),
            self.stages,
            *self.figures.values(),
            visible=False,
            sizing_mode="stretch_width",
        )
        self._syncing = False
        self._build_rows()
        self._show_default_level()
        state.param.watch(self._pools_changed, "pools")
        state.param.watch(self._choices_changed, [n for n in state.param if n != "name"])
        self.store.param.watch(self._show, ["result", "error"])
        self.store.param.watch(self._show_plan, "selected")

    # ----- pool rows ---------------------------------------------------------------------------------
    def _row(self, i: int, name: str, nodes: Any, removable: bool) -> pn.Row:
        options = self.store.cluster_presets
        select = pn.widgets.Select(options=options if name in options else [name, *options], value=name,
                                   width=WIDTH, css_classes=["wb-mixed-pool-cluster"])  # fmt: skip
        count = pn.widgets.IntInput(value=nodes, start=0, end=MAX_NODES, width=NODES_WIDTH,
                                    css_classes=["wb-mixed-pool-nodes"])  # fmt: skip
        remove = pn.widgets.Button(label="Remove", width=90, disabled=not removable,
                                   css_classes=["wb-mixed-pool-remove"])  # fmt: skip
        select.param.watch(lambda e: self._edit(i, 0, e.new), "value")
        count.param.watch(lambda e: self._edit(i, 1, e.new), "value")
        remove.on_click(lambda *_: self._remove(i))
        return pn.Row(pn.pane.Markdown(f"Pool {i + 1}", width=60), select, count, remove)

    def _build_rows(self) -> None:
        pools = self.store.state.pools
        self.rows.objects = [self._row(i, n, k, len(pools) > 1) for i, (n, k) in enumerate(pools)]

    def _edit(self, i: int, field: int, value: Any) -> None:
        if self._syncing:
            return
        pools = list(self.store.state.pools)
        row = list(pools[i])
        row[field] = value
        pools[i] = (row[0], row[1])
        self.store.state.pools = pools

    def _remove(self, i: int) -> None:
        self.store.state.pools = [p for k, p in enumerate(self.store.state.pools) if k != i]

    def _add_pool(self) -> None:
        pools = list(self.store.state.pools)
        self.store.state.pools = [*pools, pools[-1] if pools else ("dgx-h100", 1)]

    def _pools_changed(self, event: Any) -> None:
        """Rows rebuilt when their count (or a preset unknown to a row) changes, else set in place; the text
        mirror follows."""
        pools, rows = event.new, self.rows.objects
        self._syncing = True
        try:
            if len(pools) != len(rows) or any(
                n not in r[1].options for r, (n, _) in zip(rows, pools, strict=True)
            ):
                self._build_rows()
            else:
                for row, (name, nodes) in zip(rows, pools, strict=True):
                    row[1].value, row[2].value = name, nodes
            self.text.value = pools_text(pools)
        finally:
            self._syncing = False
        self._show_default_level()

    def _text_typed(self, event: Any) -> None:
        if self._syncing:
            return
        from workbench.presets.pools import parse_pools_text

        try:
            rows = [(name, 1 if nodes is None else nodes) for name, nodes in parse_pools_text(event.new)]
            for i, row in enumerate(rows):
                self.store.pool_spec(i, row)
        except ValueError as exc:
            self.message.object = f"**Pools not changed:** {page_text(exc)}"
            return
        self.store.state.pools = rows

    def _preset_picked(self, event: Any) -> None:
        if not event.new:
            return
        try:
            self.store.load_preset(event.new)
        except ValueError as exc:
            self.message.object = f"**Preset not loaded:** {page_text(exc)}"
        else:
            self.message.object = f"Loaded the pools and the shared level of the mixed preset `{event.new}`."
        self.preset.value = ""  # the rows are the composition now; the preset can be picked again

    def _show_default_level(self) -> None:
        """The fields' labels say what an empty field means: the pools' slowest outer level, in numbers."""
        level = self.store.default_shared()
        gb, us = (
            ("?", "?") if level is None else (f"{level.bytes_per_s / 1e9:g}", f"{level.latency_s * 1e6:g}")
        )
        self.bandwidth.param.update(label="Shared level, GB/s per device", placeholder=f"empty: {gb}")
        self.latency.param.update(label="Shared level latency, us", placeholder=f"empty: {us}")

    def _choices_changed(self, *_: Any) -> None:
        if self.store.result is not None and not self.store.running:
            self.message.object = "The choices changed since this run: press **Plan over the pools** again."

    # ----- running -----------------------------------------------------------------------------------
    async def run(self, _: Any = None) -> None:
        """Check the choices (a bad one is said at once), then plan in a worker thread with the button off and
        the progress bar running."""
        if self.store.running:
            return
        try:
            inputs = self.store.inputs()
        except Exception as exc:  # a bad composition: said in the tab (again, if it was already)
            self.store.refuse(exc)
            self._show()
            return
        self.store.running = True
        self.button.disabled, self.progress.visible = True, True
        self.message.object = "Planning over the pools…"
        try:
            result = await asyncio.to_thread(self.store.search, inputs)
        except Exception as exc:  # any failure is said in the page, and the button comes back
            self.store.refuse(exc)
        else:
            self.store.accept(result)
        finally:
            self.store.running = False
            self.button.disabled, self.progress.visible = False, False

    def _show(self, *_: Any) -> None:
        r = self.store.result
        self.message.object = "" if r is not None else summary_markdown(self.store)
        self.download.disabled = r is None or not r.plans
        if r is None:
            self.results.visible = False
            return
        self.summary.object = summary_markdown(self.store)
        self.table.param.update(value=plans_frame(r), visible=bool(r.plans))
        self.table.selection = [0] if r.plans else []
        self.alone.object = alone_frame(r)
        self._show_plan()
        self.results.visible = True

    def _row_selected(self, event: Any) -> None:
        if event.new and self.store.result is not None:
            self.store.selected = int(event.new[0])

    def _show_plan(self, *_: Any) -> None:
        r = self.store.result
        shown = r is not None and bool(r.plans)
        for pane in (self.stages, *self.figures.values()):
            pane.visible = shown
        if not shown:
            return
        est = r.plans[self.store.selected]
        self.stages.object = stages_frame(est)
        straggler = "Straggler pool's pipeline timeline"
        figs = {
            "placement": mixed_placement_figure(est, num_layers=r.model.num_layers, width=FIGURE_WIDTH_PX),
            "stage_time": mixed_stage_time_figure(est, width=FIGURE_WIDTH_PX),
            "timeline": timeline_figure(
                est.timeline, makespan_s=est.parts["pipeline_s"], bubble_fraction=est.bubble_fraction,
                title_prefix="Pipeline timeline" if est.kind == "pipeline" else straggler, width=FIGURE_WIDTH_PX,
            ),
        }  # fmt: skip
        for name, pane in self.figures.items():
            pane.object = figs[name]

    # ----- downloads ---------------------------------------------------------------------------------
    def _report_file(self) -> io.BytesIO:
        from workbench_widgets.report import render_mixed_report

        r = self.store.result
        if r is None:
            raise ValueError("no mixed plan to report: press Plan over the pools first")
        text = render_mixed_report(r, command=self.store.cli_command(), plan_index=self.store.selected)
        return io.BytesIO(text.encode("utf-8"))

    def _toml_file(self) -> io.BytesIO:
        return io.BytesIO(self.store.cluster_toml().encode("utf-8"))

    def panel(self) -> pn.Column:
        def flex(*items: Any) -> pn.FlexBox:
            return pn.FlexBox(*items, flex_wrap="wrap", align_items="flex-end", sizing_mode="stretch_width")

        return pn.Column(
            pn.pane.Markdown("#### Pools (each a cluster preset and its nodes)"),
            self.rows,
            flex(self.add, self.text, self.preset),
            flex(self.bandwidth, self.latency, self.toml),
            flex(*self.workload),
            pn.Row(self.button, self.progress),
            self.message,
            self.results,
            sizing_mode="stretch_width",
        )


def _control(state: Any, name: str, label: str) -> pn.widgets.Widget:
    """The widget of one State parameter; css class ``wb-mixed-<name>``."""
    p = state.param[name]
    kwargs: dict[str, Any] = {"label": label, "width": WIDTH, "css_classes": [f"wb-mixed-{name}"]}
    if isinstance(p, param.Integer):
        return pn.widgets.IntInput.from_param(p, **kwargs)
    return pn.widgets.Select.from_param(p, **kwargs)
