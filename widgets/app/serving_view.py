"""The Serving tab: a serving deployment of a model on a cluster, simulated with ``workbench.serving`` and drawn with
the serving figures (``workbench_widgets.plots.serving``), in the app's four roles:

- ``ServingState``: the choices (model, cluster, layout, request lengths, arrivals, SLO), parameters only;
- ``ServingStore``: builds the specs, runs ``serve_estimate`` and a rate sweep, holds the results; no widgets;
- ``ServingView``: controls from the State, the summary and the figures (written in place when their shape is
  unchanged, so the browser patches data instead of building new figures), and a report download.

The tab has its own choices, apart from the training composer. It computes when first shown (``show``), then on
every change; a run keeps ``num_requests`` modest (200 by default) so that a change answers in well under a second.
"""

from __future__ import annotations

import io
import shlex
from typing import Any

import panel as pn
import param
from bokeh.models import FixedTicker, Span
from panel.io.document import hold
from workbench_widgets.app.page_text import page_text
from workbench_widgets.plots.serving import serving_figures, slo_text

from workbench.presets import catalog
from workbench.serving.estimate import serve_estimate
from workbench.serving.sweep import rate_sweep, sweep_table
from workbench.specs.limits import MAX_DEVICES, MAX_SEQ_LEN
from workbench.specs.serving import SLO, Disaggregation, ServingPlan, ServingWorkload
from workbench.specs.speculative import MAX_SPECULATIVE_TOKENS, SpecMethod, SpeculativeDecoding

MS_PER_S, GIB = 1e3, 2**30
SPEC_METHODS = tuple(m.value for m in SpecMethod if m is not SpecMethod.DRAFT)
"""Speculative methods the tab offers (a draft model needs a second model choice: the CLI's --draft-model)."""
WIDTH = 200
MAX_APP_REQUESTS = 5_000
"""Most requests one change of the tab simulates (the simulation and the sweep run on every change)."""
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
    "scheduler": "Scheduler",
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
    "decode_workers": "Decode engines",
    "decode_tp": "Decode tp",
    "speculative": "Speculative decoding",
    "num_speculative_tokens": "Proposed tokens (k)",
    "acceptance_rate": "Acceptance rate",
    "prefix_hit_rate": "Prefix hit rate",
}


class ServingState(param.Parameterized):
    """The Serving tab's choices. Times typed by a person are in ms (``_ms``); the Store converts to seconds."""

    model_preset = param.Selector(default="llama-3.1-70b", objects=["llama-3.1-70b"], doc="Model preset id.")
    cluster_preset = param.Selector(default="dgx-h100", objects=["dgx-h100"], doc="Cluster preset id.")
    num_nodes = param.Integer(default=1, bounds=(1, 4096), doc="Nodes of the cluster.")
    replicas = param.Integer(default=1, bounds=(1, MAX_DEVICES), doc="Engines behind the router.")
    tp = param.Selector(default=8, objects=[1, 2, 4, 8, 16, 32], doc="Tensor-parallel degree of an engine.")
    pp = param.Selector(default=1, objects=[1, 2, 4, 8], doc="Pipeline stages of an engine.")
    scheduler = param.Selector(default="sarathi", objects=["sarathi", "vllm"], doc="Batching policy.")
    input_tokens = param.Integer(default=1024, bounds=(1, MAX_SEQ_LEN), doc="Prompt tokens per request.")
    output_tokens = param.Integer(default=256, bounds=(1, MAX_SEQ_LEN), doc="Generated tokens per request.")
    num_requests = param.Integer(default=200, bounds=(1, MAX_APP_REQUESTS), doc="Requests simulated.")
    arrival = param.Selector(default="closed", objects=["closed", "poisson"], doc="Closed loop or Poisson.")
    concurrency = param.Integer(default=32, bounds=(1, MAX_APP_REQUESTS), doc="Requests in flight (closed).")
    request_rate_per_s = param.Number(default=8.0, bounds=(1e-6, 1e6), doc="Mean arrival rate (Poisson).")
    ttft_slo_ms = param.Number(default=2000.0, allow_None=True, bounds=(1e-3, None), doc="TTFT target, ms.")
    tpot_slo_ms = param.Number(default=100.0, allow_None=True, bounds=(1e-3, None), doc="TPOT target, ms.")
    slo_percentile = param.Selector(
        default="p99", objects=["p50", "p90", "p99"], doc="Percentile of the SLO."
    )
    prefill_workers = param.Integer(default=0, bounds=(0, MAX_DEVICES),
                                    doc="Prefill engines of a disaggregated deployment; 0: aggregated.")  # fmt: skip
    prefill_tp = param.Selector(default=8, objects=[1, 2, 4, 8, 16, 32], doc="tp of a prefill engine.")
    decode_workers = param.Integer(default=1, bounds=(1, MAX_DEVICES), doc="Decode engines (disaggregated).")
    decode_tp = param.Selector(default=8, objects=[1, 2, 4, 8, 16, 32], doc="tp of a decode engine.")
    speculative = param.Selector(default="none", objects=["none", *SPEC_METHODS], doc="Speculative decoding.")
    num_speculative_tokens = param.Integer(
        default=3, bounds=(1, MAX_SPECULATIVE_TOKENS), doc="Tokens proposed."
    )
    acceptance_rate = param.Number(default=0.7, bounds=(0.0, 0.999), doc="Per-token acceptance probability.")
    prefix_hit_rate = param.Number(
        default=0.0, bounds=(0.0, 0.999), doc="Share of prompts in the prefix cache."
    )


class ServingStore(param.Parameterized):
    """Results of a ``ServingState``: the estimate, the rate sweep (a ``sweep_table`` frame) and the SLO, or the
    reason there are none. Follows every State change once ``refresh`` has run (``show``)."""

    state = param.ClassSelector(class_=ServingState)
    estimate = param.Parameter(
        default=None, doc="ServingEstimate of the choices; None while they are invalid."
    )
    sweep = param.Parameter(default=None, doc="Rate sweep of the plan (polars, SWEEP_COLUMNS).")
    slo = param.Parameter(default=None, doc="The SLO of the choices, or None without targets.")
    error = param.String(default="", doc="Why the last estimate failed.")

    def __init__(self, state: ServingState | None = None, **params: Any) -> None:
        super().__init__(state=state or ServingState(), **params)
        self._specs: dict[tuple[str, Any], Any] = {}  # per session: presets and the calibration
        self.active = False
        s = self.state
        s.param.model_preset.objects = catalog.preset_names("model")
        s.param.cluster_preset.objects = catalog.preset_names("cluster")
        names = [n for n in s.param if n != "name"]
        s.param.watch(lambda *_: self.refresh() if self.active else None, names)

    def _cached(self, kind: str, key: Any, load: Any) -> Any:
        if (kind, key) not in self._specs:
            self._specs[kind, key] = load()
        return self._specs[kind, key]

    def specs(self) -> tuple[Any, Any, ServingPlan, ServingWorkload, SLO | None]:
        """(model, cluster, plan, workload, slo) of the State. Raises ValueError naming a bad choice."""
        s = self.state
        model = self._cached("model", s.model_preset, lambda: catalog.load_model(s.model_preset))
        cluster = self._cached(
            "cluster",
            (s.cluster_preset, s.num_nodes),
            lambda: catalog.load_cluster(s.cluster_preset, num_nodes=s.num_nodes),
        )
        spec = None
        if s.speculative != "none":
            spec = SpeculativeDecoding(method=s.speculative, num_speculative_tokens=s.num_speculative_tokens,
                                       acceptance_rate=s.acceptance_rate)  # fmt: skip
        if s.prefill_workers:  # disaggregated: the role layouts replace replicas, tp and pp
            split = Disaggregation(prefill_workers=s.prefill_workers, prefill_tp=s.prefill_tp,
                                   decode_workers=s.decode_workers, decode_tp=s.decode_tp)  # fmt: skip
            plan = ServingPlan(disaggregation=split, scheduler=s.scheduler, speculative=spec)
        else:
            plan = ServingPlan(replicas=s.replicas, tp=s.tp, pp=s.pp, scheduler=s.scheduler, speculative=spec)
        arrival = (
            {"concurrency": s.concurrency}
            if s.arrival == "closed"
            else {"request_rate_per_s": s.request_rate_per_s}
        )
        workload = ServingWorkload(arrival=s.arrival, num_requests=s.num_requests, input_tokens=s.input_tokens,
                                   output_tokens=s.output_tokens, prefix_hit_rate=s.prefix_hit_rate,
                                   **arrival)  # fmt: skip
        targets = {"ttft_s": s.ttft_slo_ms, "tpot_s": s.tpot_slo_ms}
        given = {k: v / MS_PER_S for k, v in targets.items() if v is not None}
        slo = SLO(percentile=s.slo_percentile, **given) if given else None
        return model, cluster, plan, workload, slo

    def refresh(self) -> None:
        """Recompute from the State (and follow its changes from now on); a refusal is kept in ``error``."""
        from workbench.presets.calibration import load_calibration

        self.active = True
        try:
            model, cluster, plan, workload, slo = self.specs()
            cal = self._cached("calibration", "default", lambda: load_calibration("default"))
            est = serve_estimate(model, cluster, plan, workload, cal)
            sweep = sweep_table(rate_sweep(model, cluster, plan, workload, cal), slo)
        except (ValueError, OSError) as exc:
            self.param.update(estimate=None, sweep=None, slo=None, error=str(exc))
            return
        self.param.update(estimate=est, sweep=sweep, slo=slo, error="")

    def cli_command(self) -> str:
        """The ``workbench serve estimate`` command line of the current choices (shown in the report)."""
        s = self.state
        args = ["workbench", "serve", "estimate", "--model", s.model_preset, "--cluster", s.cluster_preset,
                "--nodes", str(s.num_nodes)]  # fmt: skip
        if s.prefill_workers:
            args += ["--prefill-workers", str(s.prefill_workers), "--prefill-tp", str(s.prefill_tp),
                     "--decode-workers", str(s.decode_workers), "--decode-tp", str(s.decode_tp)]  # fmt: skip
        else:
            args += ["--replicas", str(s.replicas), "--tp", str(s.tp), "--pp", str(s.pp)]
        args += ["--scheduler", s.scheduler, "--input-tokens", str(s.input_tokens), "--output-tokens",
                 str(s.output_tokens), "--num-requests", str(s.num_requests)]  # fmt: skip
        if s.speculative != "none":
            args += ["--speculative", s.speculative, "--num-speculative-tokens", str(s.num_speculative_tokens),
                     "--acceptance-rate", f"{s.acceptance_rate:g}"]  # fmt: skip
        if s.prefix_hit_rate:
            args += ["--prefix-hit-rate", f"{s.prefix_hit_rate:g}"]
        if s.arrival == "closed":
            args += ["--concurrency", str(s.concurrency)]
        else:
            args += ["--rate", f"{s.request_rate_per_s:g}"]
        return shlex.join(args)


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

    lines = [
        f"**{page_text(est.model.name)}** on {est.plan.num_devices} x {page_text(est.cluster.device.id)}, `{est.plan.describe()}`, "
        f"{est.workload.request_count:,} requests",
        f"- TTFT mean {ms('ttft_s_mean')}, p50 {ms('ttft_s_p50')}, p99 {ms('ttft_s_p99')}",
        f"- TPOT mean {ms('tpot_s_mean')}, p50 {ms('tpot_s_p50')}, p99 {ms('tpot_s_p99')}",
        f"- {s['output_tokens_per_s']:,.0f} output tokens/s ({s['output_tokens_per_s_per_device']:,.0f} per device), "
        f"{s['requests_per_s']:,.2f} requests/s, {s['num_preemptions']:,} preemptions",
        f"- KV cache {s['kv_cache_capacity_tokens']:,} tokens per engine",
        *deployment_lines(s),
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
    return lines


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
        self.summary = pn.pane.Markdown(summary_markdown(self.store), sizing_mode="stretch_width",
                                        css_classes=["wb-serving-summary"])  # fmt: skip
        self.figures = {n: pn.pane.Bokeh(None, visible=False, sizing_mode="stretch_width") for n in FIGURES}
        self.download = pn.widgets.FileDownload(callback=self._report_file, filename="serving-report.html",
                                                label="Download serving report", embed=False,
                                                css_classes=["wb-serving-download"])  # fmt: skip
        self.store.param.watch(self._show, ["estimate", "error"])

    def show(self) -> None:
        """Compute on the first call (the tab is opened); later calls do nothing: changes recompute."""
        if not self.store.active:
            self.store.refresh()

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
        controls = pn.FlexBox(*self.widgets.values(), flex_wrap="wrap", align_items="flex-end",
                              sizing_mode="stretch_width")  # fmt: skip
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
