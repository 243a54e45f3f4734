"""The serving sections of the HTML report (``serving_sections``): plan and workload, latency and throughput, the
KV cache, the serving figures (``workbench_widgets.plots.serving``), an optional rate sweep and serving search, and
the requests; their tables are plain rows of display strings (ms, GiB, tokens/s, %). The template escapes every
cell; nothing here builds HTML.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from markupsafe import Markup
from workbench_widgets._report_page import Block, Section, table, workbench_version
from workbench_widgets.plots._style import GIB, MS_PER_S
from workbench_widgets.plots.serving import (
    all_reduce_text,
    offload_text,
    pool_text,
    serving_figures,
    slo_text,
)
from workbench_widgets.plots.serving_run import kv_bytes_per_token_per_device
from workbench_widgets.plots.serving_search import SEARCH_FIGURE_COLUMNS, serving_search_figure

from workbench.presets.engines import load_engine
from workbench.specs.engine import MEMORY_SHARE_LABELS

if TYPE_CHECKING:
    from workbench.serving.estimate import ServingEstimate
    from workbench.specs.serving import SLO

PAIRED = ("ttft_cdf", "tpot_cdf")
"""Figures drawn side by side (the two latency CDFs)."""


def _ms(value_s: float | None) -> str:
    return "-" if value_s is None or math.isnan(value_s) else f"{value_s * MS_PER_S:,.1f}"


def _lengths(values: tuple[int, ...]) -> str:
    """One length, or the mean with the range when requests differ."""
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"mean {sum(values) / len(values):,.0f} ({low:,}..{high:,})"


def input_blocks(est: ServingEstimate) -> list[dict[str, Any]]:
    """Model, cluster, serving plan and workload as (caption, rows of (key, value)) blocks."""
    m, c, p, w = est.model, est.cluster, est.plan, est.workload
    model_rows = [
        ("name", m.name),
        ("parameters", f"{m.total_parameters() / 1e9:,.2f} B"),
        ("active parameters", f"{m.active_parameters() / 1e9:,.2f} B"),
        ("layers", f"{m.num_layers}"),
        ("attention heads (kv)", f"{m.num_attention_heads} ({m.num_key_value_heads}), {m.attention}"),
    ]
    cluster_rows = [
        ("cluster", f"{c.name} ({c.id})"),
        ("devices", f"{c.num_nodes} nodes x {c.devices_per_node}"),
        ("device", c.device.name),
        ("HBM", f"{c.device.hbm_bytes / GIB:,.1f} GiB, {c.device.hbm_bytes_per_s / 1e12:,.2f} TB/s"),
    ]
    plan_rows = [
        ("layout", p.describe()),
        ("devices used", f"{p.num_devices}"),
        ("weights / activations / KV", f"{p.weight_dtype} / {p.activation_dtype} / {p.kv_cache_dtype}"),
        ("engine profile", p.engine),
        ("scheduler", f"{p.scheduler} (chunked prefill {'on' if p.chunked_prefill else 'off'})"),
        ("max sequences per engine", f"{p.max_num_seqs:,}"),
        ("max tokens per iteration", f"{p.max_num_batched_tokens:,}"),
        ("KV block", f"{p.kv_block_tokens} tokens"),
        (MEMORY_SHARE_LABELS[load_engine(p.engine).kv_memory_share], f"{p.gpu_memory_utilization_frac:.0%}"),
    ]
    d = p.disaggregation
    if d is not None:
        plan_rows += [
            ("prefill pool (weights/activations/KV)", pool_text(est, "prefill")),
            ("decode pool (weights/activations/KV)", pool_text(est, "decode")),
            ("KV transfer per request", f"{est.kv_transfer_bytes_per_request / GIB:,.3f} GiB (mean prompt), "
             f"{est.kv_transfer_s * 1e3:,.2f} ms exposed"),
        ]  # fmt: skip
    if p.speculative is not None:
        spec = p.speculative
        plan_rows.append(("speculative decoding", f"{spec.method}, {spec.num_speculative_tokens} proposed, "
                          f"{spec.mean_accepted_length:.2f} tokens per step"))  # fmt: skip
    if p.num_redundant_experts:
        plan_rows.append(("redundant experts", f"{p.num_redundant_experts} per MoE layer"))
    offload = offload_text(est)
    if offload:
        plan_rows.append(("host-held experts" + (" (decode engine)" if d is not None else ""), offload))
    plan_rows.append(("tp all-reduce" + (" (decode engine)" if d is not None else ""), all_reduce_text(est)))
    arrival = {
        "closed": lambda: f"closed loop, {w.concurrency} in flight",
        "poisson": lambda: f"Poisson, {w.request_rate_per_s:,.2f} requests/s",
        "offline": lambda: "offline (all at t = 0)",
        "trace": lambda: "trace replay",
    }[w.arrival.value]()
    workload_rows = [
        ("arrivals", arrival),
        ("requests", f"{w.request_count:,}"),
        ("input tokens", _lengths(w.input_lengths())),
        ("output tokens", _lengths(w.output_lengths())),
        ("seed", f"{w.seed}"),
        ("prefix cache hit rate", f"{w.prefix_hit_rate:.0%}"),
    ]
    return [
        {"caption": "Model", "rows": model_rows},
        {"caption": "Cluster", "rows": cluster_rows},
        {"caption": "Serving plan", "rows": plan_rows},
        {"caption": "Workload", "rows": workload_rows},
    ]


def latency_table(est: ServingEstimate) -> dict[str, Any]:
    """TTFT, TPOT and end-to-end latency: mean, p50, p90, p99 (ms)."""
    s = est.summary()
    rows = [
        [name, *(_ms(s[f"{key}_s_{q}"]) for q in ("mean", "p50", "p90", "p99"))]
        for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("end to end", "e2e"))
    ]
    return table(["latency (ms)", "mean", "p50", "p90", "p99"], rows, [False, True, True, True, True])


def throughput_table(est: ServingEstimate) -> dict[str, Any]:
    """Output tokens/s (deployment and per device), requests/s, run length and preemptions."""
    s = est.summary()
    rows = [
        ["output tokens/s (whole deployment)", f"{s['output_tokens_per_s']:,.0f}"],
        ["output tokens/s per device", f"{s['output_tokens_per_s_per_device']:,.1f}"],
        ["requests/s", f"{s['requests_per_s']:,.2f}"],
        ["run length (first arrival to last token)", f"{s['duration_s']:,.2f} s"],
        ["preemptions (recompute)", f"{s['num_preemptions']:,}"],
    ]
    return table(["quantity", "value"], rows, [False, True])


def kv_table(est: ServingEstimate) -> dict[str, Any]:
    """KV cache of the (decode) engine: capacity in tokens, per device in GiB, bytes per token, the peak in use
    and how many requests of the mean length fit at once."""
    d = est.plan.disaggregation
    engine = d.prefill_workers if d is not None else 0
    per_token = kv_bytes_per_token_per_device(est, engine)
    cap = est.kv_cache_capacity_tokens
    it = est.sim.iterations.filter(pl.col("engine") == engine)
    peak = int(it["kv_used_tokens"].max() or 0) if it.height else 0  # type: ignore[arg-type]
    w = est.workload
    mean_len = float(np.mean(w.input_lengths()) + np.mean(w.output_lengths()))
    rows = [
        ["capacity per engine", f"{cap:,} tokens ({cap // est.plan.kv_block_tokens:,} blocks)"],
        ["capacity per device", f"{cap * per_token / GIB:,.2f} GiB"],
        ["KV bytes per token per device", f"{per_token / 1024:,.1f} KiB"],
        ["peak in use", f"{peak:,} tokens ({peak / cap:.1%} of the capacity)" if cap else "-"],
        ["requests of the mean length that fit at once", f"{cap / mean_len:,.0f}"],
    ]
    if d is not None:
        rows[0][0] += f" (decode engine {engine})"
    return table(["quantity", "value"], rows, [False, True])


REQUEST_COLUMNS = (
    ("id", "request", "{:d}"),
    ("arrival_s", "arrival (ms)", "ms"),
    ("input_tokens", "input tokens", "{:,d}"),
    ("output_tokens", "output tokens", "{:,d}"),
    ("ttft_s", "TTFT (ms)", "ms"),
    ("tpot_s", "TPOT (ms)", "ms"),
    ("e2e_s", "end to end (ms)", "ms"),
    ("preemptions", "preemptions", "{:d}"),
    ("engine", "engine", "{:d}"),
)


def request_tables(est: ServingEstimate, max_rows: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Over the requests: min, p50, p90, p99 and max of lengths, latencies and preemptions; and the first
    ``max_rows`` requests, one row each."""
    req = est.sim.requests
    stats = []
    for col, label, fmt in REQUEST_COLUMNS[2:-1]:
        v = req[col].drop_nulls().to_numpy().astype(float)
        q = np.percentile(v, [0, 50, 90, 99, 100]) if v.size else [math.nan] * 5
        stats.append([label, *(_ms(x) if fmt == "ms" else f"{x:,.0f}" for x in q)])
    summary = table(["over the requests", "min", "p50", "p90", "p99", "max"], stats, [False, *[True] * 5])
    rows = [
        [_ms(row[col]) if fmt == "ms" else fmt.format(row[col]) for col, _, fmt in REQUEST_COLUMNS]
        for row in req.head(max_rows).iter_rows(named=True)
    ]
    listing = table([label for _, label, _ in REQUEST_COLUMNS], rows, [True] * len(REQUEST_COLUMNS))
    return summary, listing


SWEEP_DISPLAY = (
    ("request_rate_per_s", "offered requests/s", ",.2f", 1.0),
    ("requests_per_s", "served requests/s", ",.2f", 1.0),
    ("output_tokens_per_s", "output tokens/s", ",.0f", 1.0),
    ("output_tokens_per_s_per_device", "per device", ",.1f", 1.0),
    ("ttft_s_p50", "TTFT p50 (ms)", ",.1f", MS_PER_S),
    ("ttft_s_p99", "TTFT p99 (ms)", ",.1f", MS_PER_S),
    ("tpot_s_p50", "TPOT p50 (ms)", ",.1f", MS_PER_S),
    ("tpot_s_p99", "TPOT p99 (ms)", ",.1f", MS_PER_S),
    ("e2e_s_p99", "end to end p99 (ms)", ",.0f", MS_PER_S),
    ("num_preemptions", "preemptions", ",d", 1),
    ("slo_attained_frac", "SLO attainment (%)", ".1f", 100.0),
)
"""Columns of the sweep table: (``sweep_table`` column, header, format, scale to the display unit)."""


def sweep_display(frame: pl.DataFrame) -> dict[str, Any]:
    """A ``workbench.serving.sweep.sweep_table`` frame in display units, one row per offered rate."""
    rows = []
    for r in frame.iter_rows(named=True):
        cells = ["-" if r[k] is None else format(r[k] * scale, fmt) for k, _, fmt, scale in SWEEP_DISPLAY]
        rows.append([*cells, "-" if r["meets_slo"] is None else ("met" if r["meets_slo"] else "missed")])
    header = [h for _, h, _, _ in SWEEP_DISPLAY] + ["SLO at its percentile"]
    return table(header, rows, [True] * len(SWEEP_DISPLAY) + [False])


def _unit(name: str) -> tuple[str, float, str]:
    """(display unit, scale from SI, format) of a core column by its name: ``_bytes`` GiB, ``_frac`` %, a rate
    (``_per_s`` anywhere) as is, seconds (``_s`` at the end or before ``_``) as ms; else no unit."""
    if name.endswith("_bytes"):
        return "GiB", 1 / GIB, ",.2f"
    if name.endswith("_frac"):
        return "%", 100.0, ".1f"
    if "_per_s" in name:
        return "", 1.0, ",.2f"
    if name.endswith("_s") or "_s_" in name:
        return "ms", MS_PER_S, ",.1f"
    return "", 1.0, ""


def column_header(name: str) -> str:
    """A core column name in words with its display unit: ``ttft_s_at_goodput`` -> ``ttft at goodput (ms)``,
    ``goodput_output_tokens_per_s_per_device`` -> ``goodput output tokens/s per device``."""
    unit = _unit(name)[0]
    words = name.removeprefix("num_").replace("_per_s", "/s").removesuffix("_bytes").removesuffix("_frac")
    words = words.replace("_s_", "_").removesuffix("_s") if unit == "ms" else words
    return words.replace("_", " ") + (f" ({unit})" if unit else "")


def cell_text(name: str, value: Any) -> str:
    """One value of core column ``name`` in its display unit (``column_header``); ``-`` for null or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        _, scale, fmt = _unit(name)
        if fmt:
            return format(value * scale, fmt)
        return format(value, ",.0f") if float(value).is_integer() else format(value, ",.3g")
    return str(value)


def frame_table(frame: pl.DataFrame, max_rows: int) -> dict[str, Any]:
    """The first ``max_rows`` rows of a core frame in display units (``column_header``, ``cell_text``),
    numbered from 1 unless the frame has its own ``rank``."""
    head = frame.head(max_rows)
    numbered = "rank" not in head.columns
    header = [*(["#"] if numbered else []), *(column_header(c) for c in head.columns)]
    rows = [
        [*([str(i + 1)] if numbered else []), *(cell_text(k, v) for k, v in r.items())]
        for i, r in enumerate(head.iter_rows(named=True))
    ]
    numeric = [*([True] if numbered else []), *(head[c].dtype.is_numeric() for c in head.columns)]
    return table(header, rows, numeric)


SEARCH_DISPLAY = (
    "rank", "plan", "num_devices", "goodput_requests_per_s", "goodput_output_tokens_per_s_per_device",
    "slo_attainment_frac", "ttft_s_at_goodput", "tpot_s_at_goodput", "kv_cache_capacity_tokens", "pareto",
)  # fmt: skip
"""Columns of a serving search table shown in the report, where present (``workbench.search.serving``)."""


def search_tables(search: Any, max_rows: int) -> dict[str, Any]:
    """A serving search (``workbench.search.serving.ServingSearchResult``: ``.table``, ``.pareto``,
    ``.rejections``) as tables: its best plans, its Pareto plans and the plans rejected per reason. Each part is
    read as a polars frame (``SEARCH_DISPLAY`` columns where present, else all), a mapping reason -> count, or a
    boolean mask over ``.table``; a missing part, or one of another kind, is left out."""
    out: dict[str, Any] = {"total": 0, "top": None, "pareto": None, "rejections": None}
    frame = getattr(search, "table", None)
    if isinstance(frame, pl.DataFrame):
        out["total"] = frame.height
        out["top"] = frame_table(_shown(frame), max_rows)
    pareto = getattr(search, "pareto", None)
    if isinstance(pareto, pl.Series) and isinstance(frame, pl.DataFrame) and pareto.dtype == pl.Boolean:
        pareto = frame.filter(pareto)
    if isinstance(pareto, pl.DataFrame):
        out["pareto"] = frame_table(_shown(pareto), max_rows)
    out["rejections"] = _rejections(getattr(search, "rejections", None))
    return out


def _shown(frame: pl.DataFrame) -> pl.DataFrame:
    cols = [c for c in SEARCH_DISPLAY if c in frame.columns]
    return frame.select(cols) if "plan" in cols else frame


def _rejections(rejections: Any) -> dict[str, Any] | None:
    """(reason, plans) rows with a count above 0, from a ``reason``/``description``/``num_plans`` frame or a
    mapping; None for anything else."""
    if isinstance(rejections, pl.DataFrame) and "num_plans" in rejections.columns:
        label = "description" if "description" in rejections.columns else rejections.columns[0]
        pairs = list(zip(rejections[label].to_list(), rejections["num_plans"].to_list(), strict=True))
    elif isinstance(rejections, Mapping):
        pairs = list(rejections.items())
    else:
        return None
    rows = [[str(k), f"{int(v):,}"] for k, v in pairs if v]
    return table(["reason", "plans"], rows, [False, True])


def serving_intro() -> list[Block]:
    """The units and the latency definitions."""
    version = workbench_version()
    text = Markup(
        "Written by the parallelism planning workbench{}.\n"
        "Latencies in ms, memory in GiB (2<sup>30</sup> bytes), throughput over the whole deployment unless said.\n"
        "TTFT: arrival to first token; TPOT: (last token - first token) / (output tokens - 1). Open offline: "
        "everything is\ninside this file."
    ).format(f" {version}" if version else "")
    return [{"kind": "note", "text": text}]


def serving_sections(
    est: ServingEstimate,
    *,
    sweep: pl.DataFrame | None,
    search: Any,
    slo: SLO | None,
    request_rows: int,
    search_rows: int,
) -> list[Section]:
    """The sections of the serving report of ``est`` (``sweep``: a ``sweep_table`` frame; ``search``: a serving
    search result, see ``search_tables``)."""
    summary: list[Block] = []
    if slo is not None:
        summary.append({"kind": "p", "text": slo_text(est, slo), "strong": True})
    summary.append({"kind": "tables", "tables": [latency_table(est), throughput_table(est)]})
    kv_note = (
        "Capacity = device memory x utilisation - weights - activation peak - framework reserve, in whole\n"
        "blocks (the cost model's sizing, as vLLM does at start-up)."
    )
    figures = serving_figures(est, slo=slo, sweep=sweep)
    pair = [n for n in PAIRED if n in figures]
    sections = [
        Section(heading="Plan and workload", id="inputs", blocks=[{"kind": "captioned", "blocks": input_blocks(est)}]),
        Section(heading="Latency and throughput", id="summary", blocks=summary),
        Section(heading="KV cache", id="kv-cache", blocks=[{"kind": "note", "text": kv_note},
                                                            {"kind": "table", "table": kv_table(est)}]),
        Section(heading="Figures", id="figures", figures=figures, blocks=[
            {"kind": "figures", "names": pair, "pair": True},
            {"kind": "figures", "names": [n for n in figures if n not in PAIRED]},
        ]),
    ]  # fmt: skip
    if sweep is not None and sweep.height:
        note = {"kind": "note", "text": "The same requests sent as Poisson arrivals at each offered rate."}
        blocks = [note, {"kind": "table", "table": sweep_display(sweep)}]
        sections.append(Section(heading="Rate sweep", id="sweep", blocks=blocks))
    if search is not None:
        sections.append(search_section(search, search_rows))
    request_summary, requests = request_tables(est, request_rows)
    sections.append(
        Section(heading="Requests", id="requests", blocks=[
            {"kind": "table", "table": request_summary},
            {"kind": "h3", "text": f"The first {len(requests['rows'])} of {est.sim.requests.height} requests"},
            {"kind": "table", "table": requests},
        ])
    )  # fmt: skip
    return sections


def search_section(search: Any, max_rows: int) -> Section:
    """A serving search: its first ``max_rows`` plans, its goodput-latency figures (when its table has their
    columns), its Pareto plans and its rejections."""
    parts = search_tables(search, max_rows)
    figures = _search_figures(search)
    blocks: list[Block] = []
    if parts["top"]:
        blocks += [
            {"kind": "h3", "text": f"Best plans: the first {len(parts['top']['rows'])} of {parts['total']}"},
            {"kind": "table", "table": parts["top"]},
        ]
    if figures:
        blocks.append({"kind": "figures", "names": list(figures), "pair": True})
    if parts["pareto"]:
        blocks += [{"kind": "h3", "text": "Pareto frontier"}, {"kind": "table", "table": parts["pareto"]}]
    if parts["rejections"]:
        blocks += [
            {"kind": "h3", "text": "Rejected plans by reason"},
            {"kind": "table", "table": parts["rejections"]},
        ]
    return Section(heading="Serving search", id="search", blocks=blocks, figures=figures)


def _search_figures(search: Any) -> dict[str, Any]:
    """The search's goodput-latency figures (TTFT, TPOT) when its table has their columns, else none."""
    frame = getattr(search, "table", None)
    if not isinstance(frame, pl.DataFrame) or frame.height == 0:
        return {}
    if any(c not in frame.columns for c in SEARCH_FIGURE_COLUMNS):
        return {}
    return {f"search_{lat}": serving_search_figure(frame, lat) for lat in ("ttft", "tpot")}
