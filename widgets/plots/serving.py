"""Serving pictures from a ``workbench.serving.estimate.ServingEstimate``: latency CDFs (TTFT, TPOT) with the SLO
and throughput against latency over a rate sweep; ``serving_figures`` adds the pictures over the run's clock
(``workbench_widgets.plots.serving_run``: KV cache in use, batch composition per iteration).

The data functions (``latency_cdf`` here, ``kv_cache_data`` and ``batch_composition`` there) return the columns
the figures draw, so tests and notebooks can read them. A CDF draws at most ``MAX_CDF_POINTS`` points (evenly
spaced ranks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, FixedTicker, HoverTool, Label, NumeralTickFormatter, Range1d, Span
from bokeh.plotting import figure
from workbench_widgets.plots._style import GIB, MS_PER_S, OKABE_ITO, PLOT_WIDTH_PX
from workbench_widgets.plots.serving_run import batch_composition_figure, kv_cache_figure

from workbench.serving.sweep import SWEEP_COLUMNS, meets_slo, slo_attained_frac, sweep_table

if TYPE_CHECKING:
    from bokeh.model import Model

    from workbench.serving.estimate import ServingEstimate
    from workbench.specs.serving import SLO

MAX_CDF_POINTS = 10_000
"""Points drawn per latency CDF; more requests are drawn at evenly spaced ranks (first and last kept)."""
METRICS = {"ttft": ("TTFT", "time to first token"), "tpot": ("TPOT", "time per output token")}
LATENCY_KEYS = ("ttft_s_p50", "ttft_s_p99", "tpot_s_p50", "tpot_s_p99")
"""The sweep columns of the throughput-latency figure."""


def latency_cdf(est: ServingEstimate, metric: str = "ttft") -> dict[str, np.ndarray]:
    """The empirical CDF of one latency over the run's requests: ``latency_s`` (sorted, requests without the
    metric left out: TPOT needs two output tokens) and ``share`` = rank / count (0..1]. ValueError for a metric
    other than ``ttft``/``tpot``."""
    if metric not in METRICS:
        raise ValueError(f"latency_cdf: metric must be one of {', '.join(METRICS)}; got {metric!r}")
    values = est.sim.requests[f"{metric}_s"].drop_nulls().to_numpy().astype(float)
    values = np.sort(values[np.isfinite(values)])
    share = np.arange(1, values.size + 1, dtype=float) / max(values.size, 1)
    return {"latency_s": values, "share": share}


def latency_cdf_figure(
    est: ServingEstimate, metric: str = "ttft", *, slo: SLO | None = None, width: int = PLOT_WIDTH_PX // 2
) -> figure:
    """CDF of TTFT or TPOT (ms) over the requests (renderer ``cdf``, share in %). With ``slo`` and a target for
    the metric: the target as a vertical line (Span ``slo``) and the SLO's percentile as a horizontal one (Span
    ``slo_percentile``); the title gives p50/p99 and the share of requests within the target."""
    cdf = latency_cdf(est, metric)
    short, long = METRICS[metric]
    keep = _spread(cdf["latency_s"].size, MAX_CDF_POINTS)
    lat, share = cdf["latency_s"][keep], cdf["share"][keep]
    source = ColumnDataSource({"latency_ms": lat * MS_PER_S, "share_pct": share * 100.0})
    target = getattr(slo, f"{metric}_s", None) if slo is not None else None
    fig = figure(
        width=width,
        height=300,
        title=_cdf_title(short, cdf["latency_s"], target),
        x_axis_label=f"{short}, {long} (ms)",
        y_axis_label="requests (%)",
        y_range=Range1d(0, 100),
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )
    line = fig.step(
        "latency_ms",
        "share_pct",
        source=source,
        mode="after",
        line_width=2,
        color=OKABE_ITO["blue"],
        name="cdf",
    )
    if target is not None and slo is not None:
        fig.add_layout(
            Span(
                location=target * MS_PER_S,
                dimension="height",
                line_color=OKABE_ITO["vermillion"],
                line_dash="dashed",
                line_width=2,
                name="slo",
            )
        )
        fig.add_layout(
            Span(
                location=slo.percentile.quantile * 100.0,
                dimension="width",
                line_color=OKABE_ITO["black"],
                line_dash="dotted",
                line_width=1,
                name="slo_percentile",
            )
        )
        fig.add_layout(  # the lines say what they are (the 100 ms line was unlabelled)
            Label(
                x=target * MS_PER_S,
                y=4,
                x_offset=4,
                text=f"SLO {short} {target * MS_PER_S:,.0f} ms",
                text_font_size="11px",
                text_color=OKABE_ITO["vermillion"],
                name="slo_label",
            )
        )
        fig.add_layout(
            Label(
                x=0,
                y=slo.percentile.quantile * 100.0,
                x_units="screen",
                x_offset=4,
                y_offset=2,
                text=f"SLO share: {slo.percentile.quantile:.0%} of requests",
                text_font_size="11px",
                name="slo_percentile_label",
            )
        )
    fig.add_tools(
        HoverTool(
            renderers=[line], tooltips=[(short, "@latency_ms{0,0.0} ms"), ("requests", "@share_pct{0.0} %")]
        )
    )
    fig.xaxis.formatter = NumeralTickFormatter(format="0,0.[0]")
    fig.toolbar.logo = None
    return fig


def _cdf_title(short: str, values_s: np.ndarray, target_s: float | None) -> str:
    if not values_s.size:
        return f"{short}: no request has one (each generates a single token)"
    p50, p99 = np.percentile(values_s, [50, 99]) * MS_PER_S
    title = f"{short}: p50 {p50:,.1f} ms, p99 {p99:,.1f} ms"
    if target_s is not None:
        title += f"; {np.mean(values_s <= target_s):.1%} within {target_s * MS_PER_S:,.0f} ms"
    return title


def _spread(n: int, most: int) -> np.ndarray:
    """Indices of at most ``most`` of ``n`` items at evenly spaced positions, first and last kept."""
    if n <= most:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, most).round().astype(np.int64))


def throughput_latency_figure(
    sweep: pl.DataFrame | Sequence[tuple[float, ServingEstimate]],
    *,
    slo: SLO | None = None,
    width: int = PLOT_WIDTH_PX,
) -> figure:
    """Latency (ms, log axis) against output tokens/s over a rate sweep: TTFT and TPOT at p50 (dashed) and p99
    (solid), renderers ``ttft_p50``, ``ttft_p99``, ``tpot_p50``, ``tpot_p99``; the SLO targets as horizontal lines
    (Spans ``slo_ttft``, ``slo_tpot``). ``sweep``: a ``workbench.serving.sweep.sweep_table`` frame or its
    (rate, estimate) points. ValueError for an empty sweep or a frame without the ``SWEEP_COLUMNS``."""
    table = sweep if isinstance(sweep, pl.DataFrame) else sweep_table(sweep, slo)
    missing = [c for c in SWEEP_COLUMNS if c not in table.columns]
    if missing or table.height == 0:
        raise ValueError(
            f"throughput_latency_figure: need a non-empty sweep_table frame (missing: {missing})"
        )
    table = table.sort("output_tokens_per_s")
    source = ColumnDataSource(_sweep_data(table))
    fig = figure(width=width, height=340, title="Latency against throughput as the request rate grows",
                 x_axis_label="output tokens/s (whole deployment)", y_axis_label="latency (ms)", y_axis_type="log",
                 tools="pan,wheel_zoom,box_zoom,reset,save")  # fmt: skip
    lines = []
    for metric, color in (("ttft", OKABE_ITO["vermillion"]), ("tpot", OKABE_ITO["blue"])):
        for q, dash in (("p50", "dashed"), ("p99", "solid")):
            y, label = f"{metric}_ms_{q}", f"{metric.upper()} {q}"
            lines.append(fig.line("output_tokens_per_s", y, source=source, color=color, line_dash=dash,
                                  line_width=2, legend_label=label, name=f"{metric}_{q}"))  # fmt: skip
            fig.scatter("output_tokens_per_s", y, source=source, color=color, size=6, legend_label=label)
        target = getattr(slo, f"{metric}_s", None)
        if target is not None:
            fig.add_layout(Span(location=target * MS_PER_S, dimension="width", line_color=color,
                                line_dash="dotted", line_width=2, name=f"slo_{metric}"))  # fmt: skip
            fig.add_layout(Label(x=4, x_units="screen", y=target * MS_PER_S, y_offset=2, text_color=color,
                                 text=f"SLO {metric.upper()} {target * MS_PER_S:,.0f} ms", text_font_size="11px",
                                 name=f"slo_{metric}_label"))  # fmt: skip
    fig.add_tools(HoverTool(renderers=lines, tooltips=SWEEP_TOOLTIPS))
    fig.xaxis.formatter = NumeralTickFormatter(format="0,0")
    targets = [t for t in (getattr(slo, "ttft_s", None), getattr(slo, "tpot_s", None)) if t is not None]
    shown = np.append(table.select(LATENCY_KEYS).to_numpy().ravel(), targets) * MS_PER_S
    fig.yaxis.ticker = FixedTicker(ticks=log_ticks(shown))
    fig.yaxis.formatter = NumeralTickFormatter(format="0,0.[0]")
    fig.add_layout(fig.legend[0], "right")
    fig.toolbar.logo = None
    return fig


SWEEP_TOOLTIPS = [
    ("offered", "@request_rate_per_s{0,0.00} requests/s"),
    ("served", "@requests_per_s{0,0.00} requests/s"),
    ("output", "@output_tokens_per_s{0,0} tokens/s"),
    ("TTFT p50 / p99", "@ttft_ms_p50{0,0.0} / @ttft_ms_p99{0,0.0} ms"),
    ("TPOT p50 / p99", "@tpot_ms_p50{0,0.0} / @tpot_ms_p99{0,0.0} ms"),
    ("SLO", "@slo"),
]


def _sweep_data(table: pl.DataFrame) -> dict[str, Any]:
    """The sweep's columns the figure draws, latencies in ms, and the SLO verdict as a word."""
    data: dict[str, Any] = {
        k: table[k].to_list() for k in ("request_rate_per_s", "output_tokens_per_s", "requests_per_s")
    }
    for key in LATENCY_KEYS:
        data[key.replace("_s_", "_ms_")] = (table[key] * MS_PER_S).to_list()
    data["slo"] = ["-" if v is None else ("met" if v else "missed") for v in table["meets_slo"].to_list()]
    return data


def log_ticks(values: np.ndarray) -> list[float]:
    """1-2-5 ticks (1, 2, 5, 10, 20, ...) covering the finite positive ``values``, one below and one above."""
    v = values[np.isfinite(values) & (values > 0)]
    if not v.size:
        return [1.0]
    low, high = math.floor(math.log10(v.min())) - 1, math.ceil(math.log10(v.max())) + 1
    ticks = [m * 10.0**e for e in range(low, high + 1) for m in (1, 2, 5)]
    below = [t for t in ticks if t <= v.min()]
    above = [t for t in ticks if t >= v.max()]
    return [t for t in ticks if below[-1] <= t <= above[0]]


def serving_figures(
    est: ServingEstimate,
    *,
    slo: SLO | None = None,
    sweep: pl.DataFrame | Sequence[tuple[float, ServingEstimate]] | None = None,
) -> dict[str, Model]:
    """Every serving figure of ``est``, by name: ``ttft_cdf``, ``tpot_cdf``, ``throughput_latency`` (with a
    non-empty ``sweep``), ``kv_cache``, ``batch`` (engine 0) and, for a disaggregated plan, ``batch_decode``
    (the first decode engine). The report, the app's Serving tab and the notebook draw these."""
    figs: dict[str, Model] = {
        "ttft_cdf": latency_cdf_figure(est, "ttft", slo=slo),
        "tpot_cdf": latency_cdf_figure(est, "tpot", slo=slo),
    }
    if sweep is not None and (len(sweep) if not isinstance(sweep, pl.DataFrame) else sweep.height):
        figs["throughput_latency"] = throughput_latency_figure(sweep, slo=slo)
    figs["kv_cache"] = kv_cache_figure(est)
    figs["batch"] = batch_composition_figure(est, engine=0)
    d = est.plan.disaggregation
    if d is not None:
        figs["batch_decode"] = batch_composition_figure(est, engine=d.prefill_workers)
    return figs


def slo_text(est: ServingEstimate, slo: SLO) -> str:
    """One line: the SLO, its attainment (share of requests meeting both targets) and whether the run meets it
    at the SLO's percentile."""
    parts = [
        f"TTFT <= {slo.ttft_s * MS_PER_S:,.0f} ms" if slo.ttft_s is not None else "",
        f"TPOT <= {slo.tpot_s * MS_PER_S:,.0f} ms" if slo.tpot_s is not None else "",
    ]
    verdict = "met" if meets_slo(est.summary(), slo) else "missed"
    return (
        f"SLO {' and '.join(p for p in parts if p)} at {slo.percentile.value}: {verdict}; "
        f"{slo_attained_frac(est.sim, slo):.1%} of the requests meet both targets"
    )


TP_ALL_REDUCE_NAMES = {
    "nccl": "NCCL",
    "vllm_custom": "vLLM's custom all-reduce (one-/two-stage)",
    "trtllm_custom": "TensorRT-LLM's custom one-shot/two-shot kernels",
}
"""Words for ``EngineProfile.tp_all_reduce`` (``workbench.specs.engine.TP_ALL_REDUCES``)."""


def _engine_plan(est: ServingEstimate) -> Any:
    """The plan of the engine the estimate's engine fields describe: the decode role of a disaggregated plan."""
    return est.plan if est.plan.disaggregation is None else est.plan.role_plan("decode")


def all_reduce_text(est: ServingEstimate) -> str:
    """The (decode) engine's tp all-reduces in words: the kernel family it runs and what prices it (its published
    latency table or NCCL's tuning model, ``workbench.cost.tp_allreduce``)."""
    tp = _engine_plan(est).tp
    name = TP_ALL_REDUCE_NAMES.get(est.tp_all_reduce, est.tp_all_reduce)
    if tp == 1:
        return f"none at tp 1 (the engine runs {name})"
    how = "its published latency table" if est.tp_all_reduce_table else "NCCL's tuning model"
    return f"{name} at tp {tp}, priced by {how}"


def offload_text(est: ServingEstimate) -> str | None:
    """The (decode) engine's MoE experts held in host memory (SGLang's offloader) in words: GiB per device, the
    copy one forward needs and what a decode step at the run's mean batch waits for it; None when off."""
    group = _engine_plan(est).offload_group_size
    if not group:
        return None
    text = (
        f"the last layer of every {group} (SGLang offload), "
        f"{est.host_offload_bytes_per_device / GIB:,.2f} GiB per device in host memory; copying them takes "
        f"{est.offload_copy_s * MS_PER_S:,.2f} ms per forward"
    )
    if est.offload_decode_batch:
        text += (
            f", of which a decode step of {est.offload_decode_batch:,} sequences waits "
            f"{est.offload_wait_s * MS_PER_S:,.2f} ms"
        )
    return text


def pool_text(est: ServingEstimate, role: str) -> str:
    """One pool (``role``: ``prefill`` or ``decode``) of a disaggregated plan in words: engines x tp, its ep and
    attention-DP when set, and its weight/activation/KV dtypes (the plan's unless the role sets its own). Raises
    ValueError as ``ServingPlan.role_plan`` does (an unknown role, or a role the plan has no engines of)."""
    r = est.plan.role_plan(role)
    return (
        f"{r.replicas} x tp{r.tp}"
        + (f" ep{r.ep}" if r.ep is not None else "")
        + (f" adp{r.attention_dp}" if r.attention_dp > 1 else "")
        + f", {r.weight_dtype}/{r.activation_dtype}/kv-{r.kv_cache_dtype}"
    )
