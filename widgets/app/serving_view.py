"""The Serving tab's View: a serving deployment of a model on a cluster (its State and Store, ``ServingState`` and
``ServingStore``, are in ``workbench_widgets.app.serving_store``) drawn with the serving figures
(``workbench_widgets.plots.serving``): controls from the State, the summary and the figures (written in place when
their shape is unchanged, so the browser patches data instead of building new figures), and a report download.

The tab has its own choices, apart from the training composer. It computes when first shown (``show``), then on
every change; a run keeps ``num_requests`` modest (200 by default) so that a change answers in well under a second.
"""

from __future__ import annotations

import io
from typing import Any

import panel as pn
import param
from bokeh.models import FixedTicker, Span
from panel.io.document import hold
from workbench_widgets.app.page_text import page_text
from workbench_widgets.app.serving_store import EP_FIELDS, MS_PER_S, ServingState, ServingStore
from workbench_widgets.plots.serving import (
    all_reduce_text,
    offload_text,
    pool_text,
    serving_figures,
    slo_text,
)

GIB = 2**30
WIDTH = 200
FIGURES = ("ttft_cdf", "tpot_cdf", "throughput_latency", "kv_cache", "batch")
PAIRED = ("ttft_cdf", "tpot_cdf")
"""The latency CDFs, side by side."""
PAIRED_WIDTH_PX = 540
"""Width of each CDF in the tab: the two fit beside the composer on a 1366-pixel-wide screen."""
LABELS = {
    "model_preset": "Model",
    "cluster_preset": "Cluster",
    "num_nodes": "Nodes",
    "replicas": "Replicas (engines)",
    "tp": "tp",
    "pp": "pp",
    "ep": "ep (MoE; 1: unset)",
    "attention_dp": "Attention-DP ranks",
    "scheduler": "Scheduler",
    "weight_dtype": "Weight dtype",
    "activation_dtype": "GEMM input dtype",
    "kv_cache_dtype": "KV cache dtype",
    "input_tokens": "Input tokens",
    "output_tokens": "Output tokens",
    "num_requests": "Requests",
    "arrival": "Arrivals",
    "concurrency": "Concurrency (closed loop)",
    "request_rate_per_s": "Rate (requests/s, Poisson)",
    "ttft_slo_ms": "TTFT target (ms; empty: none)",
    "tpot_slo_ms": "TPOT target (ms; empty: none)",
    "slo_percentile": "SLO percentile",
    "prefill_workers": "Prefill engines (0: aggregated)",
    "prefill_tp": "Prefill tp",
    "prefill_ep": "Prefill ep",
    "prefill_attention_dp": "Prefill attention-DP",
    "decode_workers": "Decode engines",
    "decode_tp": "Decode tp",
    "decode_ep": "Decode ep",
    "decode_attention_dp": "Decode attention-DP",
    "speculative": "Speculative decoding",
    "num_speculative_tokens": "Proposed tokens (k)",
    "acceptance_rate": "Acceptance rate",
    "prefix_hit_rate": "Prefix hit rate",
    "engine": "Engine",
    "gpu_memory_utilization": "Memory share (engine's flag; empty: its default)",
    "offload_group_size": "Host offload: 1 layer in (empty: off)",
}


def summary_markdown(store: ServingStore) -> str:
    """The estimate's numbers with their units (ms, tokens/s, GiB), or why there is none."""
    est = store.estimate
    if est is None:
        return (
            f"**No estimate:** {page_text(store.error)}"
            if store.error
            else "Open the tab to simulate the deployment."
        )
    s = est.summary()

    def ms(key: str) -> str:
        return f"{s[key] * MS_PER_S:,.1f} ms"

    pools = (
        []
        if est.plan.disaggregation is None
        else [f"- {role} pool {pool_text(est, role)}" for role in ("prefill", "decode")]
    )
    lines = [
        f"**{page_text(est.model.name)}** on {est.plan.num_devices} x {page_text(est.cluster.device.id)}, `{est.plan.describe()}`, "
        f"{est.workload.request_count:,} requests",
        *pools,
        f"- TTFT mean {ms('ttft_s_mean')}, p50 {ms('ttft_s_p50')}, p99 {ms('ttft_s_p99')}",
        f"- TPOT mean {ms('tpot_s_mean')}, p50 {ms('tpot_s_p50')}, p99 {ms('tpot_s_p99')}",
        f"- {s['output_tokens_per_s']:,.0f} output tokens/s ({s['output_tokens_per_s_per_device']:,.0f} per device), "
        f"{s['requests_per_s']:,.2f} requests/s, {s['num_preemptions']:,} preemptions",
        f"- KV cache {s['kv_cache_capacity_tokens']:,} tokens per engine",
        *deployment_lines(s),
        *engine_lines(est),
        _dollars_line(est, s["output_tokens_per_s"]),
    ]
    if store.slo is not None:
        lines.append(f"- {slo_text(est, store.slo)}")
    return "\n".join(lines)


def deployment_lines(summary: dict[str, Any]) -> list[str]:
    """Markdown lines on the disaggregated KV transfer, speculative decoding and prefix caching of an estimate's
    ``summary()`` (none for a plain aggregated run)."""
    lines = []
    if summary["disaggregated"]:
        lines.append(f"- KV transfer per request (mean prompt) {summary['kv_transfer_bytes_per_request'] / GIB:,.2f}"
                     f" GiB, {summary['kv_transfer_s'] * MS_PER_S:,.2f} ms exposed")  # fmt: skip
    if summary["speculative"] is not None:
        lines.append(f"- speculative decoding `{summary['speculative']}`: {summary['accepted_length']:.2f} tokens "
                     "per verification step")  # fmt: skip
    if summary["prefix_hit_rate"]:
        lines.append(f"- prefix cache hit rate {summary['prefix_hit_rate']:.0%} of prompt tokens")
    lines += [f"- assumed: {page_text(note)}" for note in summary.get("assumed", ())]
    return lines


def engine_lines(est: Any) -> list[str]:
    """Markdown lines on the (decode) engine's host-held experts (none when off) and its tp all-reduce kernels."""
    offload = offload_text(est)
    return [
        *([f"- host-held experts: {offload}"] if offload else []),
        f"- tp all-reduce: {all_reduce_text(est)}",
    ]


def _dollars_line(est: Any, tokens_per_s: float) -> str:
    """Dollars per million output tokens at the cluster's or the price table's price (docs/cost.md)."""
    from workbench.estimate.economics import resolve_price, serving_usd_per_million_output_tokens

    price, _ = resolve_price(est.cluster)
    if price is None or tokens_per_s <= 0:
        return "- dollars: no public price for this device (CLI: --price-per-device-hour)"
    usd = serving_usd_per_million_output_tokens(price.usd_per_device_hour, est.plan.num_devices, tokens_per_s)
    return (
        f"- ${usd:,.3f} per million output tokens at ${price.usd_per_device_hour:,.2f} per device-hour "
        f"({price.provider}, read {price.date_read})"
    )


def patch_figure(old: Any, new: Any) -> bool:
    """Write ``new``'s data, title, spans, explicit ranges and fixed ticks into ``old`` when both have the same
    renderers (by name) and spans; return whether it did (no new bokeh model is made)."""
    if old is None or type(old) is not type(new):
        return False
    spans_old = [m for m in old.center if isinstance(m, Span)]
    spans_new = [m for m in new.center if isinstance(m, Span)]
    same = [r.name for r in old.renderers] == [r.name for r in new.renderers]
    if not same or [m.name for m in spans_old] != [m.name for m in spans_new]:
        return False
    for a, b in zip(old.renderers, new.renderers, strict=True):
        a.data_source.data = dict(b.data_source.data)
    for a, b in zip(spans_old, spans_new, strict=True):
        a.location = b.location
    old.title.text = new.title.text
    for axis in ("x_range", "y_range"):
        ra, rb = getattr(old, axis), getattr(new, axis)
        if type(ra) is not type(rb):
            return False
        if hasattr(ra, "start"):
            ra.update(start=rb.start, end=rb.end)
    for a, b in zip(old.yaxis, new.yaxis, strict=True):
        if isinstance(a.ticker, FixedTicker) and isinstance(b.ticker, FixedTicker):
            a.ticker.ticks = list(b.ticker.ticks)
    return True


class ServingView(param.Parameterized):
    """Controls of a ``ServingState``, the summary, the figures and a report download."""

    store = param.ClassSelector(class_=ServingStore)

    def __init__(self, **params: Any) -> None:
        if "store" not in params:
            params["store"] = ServingStore()
        super().__init__(**params)
        state = self.store.state
        self.widgets = {name: _control(state, name) for name in LABELS}
        self.offload_note = pn.pane.Alert("", alert_type="secondary", visible=False, width=2 * WIDTH,
                                          css_classes=["wb-serving-offload-note"])  # fmt: skip
        self.ep_note = pn.pane.Alert("", alert_type="secondary", visible=False, width=2 * WIDTH,
                                     css_classes=["wb-serving-ep-note"])  # fmt: skip
        self.summary = pn.pane.Markdown(summary_markdown(self.store), sizing_mode="stretch_width",
                                        css_classes=["wb-serving-summary"])  # fmt: skip
        self.figures = {n: pn.pane.Bokeh(None, visible=False, sizing_mode="stretch_width") for n in FIGURES}
        self.download = pn.widgets.FileDownload(callback=self._report_file, filename="serving-report.html",
                                                label="Download serving report", embed=False,
                                                css_classes=["wb-serving-download"])  # fmt: skip
        self.store.param.watch(self._show, ["estimate", "error"])
        self.store.param.watch(self._show_offload, "offload_reason")
        self.store.param.watch(self._show_ep, "ep_reason")

    def show(self) -> None:
        """Compute on the first call (the tab is opened); later calls do nothing: changes recompute."""
        if not self.store.active:
            self.store.refresh()

    def _show_offload(self, *_: Any) -> None:
        """The host-offload control disabled, with the Store's reason beside it, for a model that takes none."""
        reason = self.store.offload_reason
        self.widgets["offload_group_size"].disabled = bool(reason)
        self.offload_note.param.update(object=f"Unavailable here — {page_text(reason)}." if reason else "",
                                       visible=bool(reason))  # fmt: skip

    def _show_ep(self, *_: Any) -> None:
        """The ep controls disabled, with the Store's reason beside them, for a model that takes none."""
        reason = self.store.ep_reason
        for name in EP_FIELDS:
            self.widgets[name].disabled = bool(reason)
        self.ep_note.param.update(object=f"ep unavailable here — {page_text(reason)}." if reason else "",
                                  visible=bool(reason))  # fmt: skip

    def _show(self, *_: Any) -> None:
        est = self.store.estimate
        with hold():
            self.summary.object = summary_markdown(self.store)
            self.download.disabled = est is None
            if est is None:
                for pane in self.figures.values():
                    pane.visible = False
                return
            figs = serving_figures(est, slo=self.store.slo, sweep=self.store.sweep)
            for name in PAIRED:
                figs[name].width = PAIRED_WIDTH_PX  # type: ignore[attr-defined]
            for name, pane in self.figures.items():
                new = figs.get(name)
                if new is None:
                    pane.visible = False
                else:  # object and visibility in one update (a Bokeh pane set visible alone stays hidden)
                    pane.param.update(
                        object=pane.object if patch_figure(pane.object, new) else new, visible=True
                    )

    def _report_file(self) -> io.BytesIO:
        from workbench_widgets.report import render_serving_report

        est = self.store.estimate
        if est is None:
            raise ValueError("no serving estimate to report: fix the choices first")
        html = render_serving_report(est, sweep=self.store.sweep, slo=self.store.slo,
                                     command=self.store.cli_command())  # fmt: skip
        return io.BytesIO(html.encode("utf-8"))

    def panel(self) -> pn.Column:
        controls = pn.FlexBox(*self.widgets.values(), self.ep_note, self.offload_note, flex_wrap="wrap",
                              align_items="flex-end", sizing_mode="stretch_width")  # fmt: skip
        f = self.figures
        return pn.Column(
            controls,
            pn.Row(self.summary, self.download, sizing_mode="stretch_width"),
            pn.Row(*(f[n] for n in PAIRED), sizing_mode="stretch_width"),
            f["throughput_latency"],
            f["kv_cache"],
            f["batch"],
            sizing_mode="stretch_width",
        )


def _control(state: ServingState, name: str) -> pn.widgets.Widget:
    """The widget of one State parameter, labelled with its unit; css class ``wb-serving-<name>``."""
    p = state.param[name]
    kwargs: dict[str, Any] = {"label": LABELS[name], "width": WIDTH, "css_classes": [f"wb-serving-{name}"]}
    if isinstance(p, param.Integer):
        return pn.widgets.IntInput.from_param(p, **kwargs)
    if isinstance(p, param.Number):
        return pn.widgets.FloatInput.from_param(p, **kwargs)
    return pn.widgets.Select.from_param(p, **kwargs)
