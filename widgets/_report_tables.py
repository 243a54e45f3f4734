"""Tables of the HTML report as plain rows of display strings (ms, GiB, TFLOP/s, %): inputs, plans, search.

The template escapes every cell; nothing here builds HTML.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
from workbench_widgets._report_page import table
from workbench_widgets.plots._style import GIB, MS_PER_S
from workbench_widgets.plots.search import PLAN_FIELDS, feasible_mask

if TYPE_CHECKING:
    from workbench.goodput import GoodputEstimate
    from workbench.search.result import SearchResult
    from workbench.specs.estimate import Estimate


def input_blocks(estimate: Estimate) -> list[dict[str, Any]]:
    """Model, cluster and workload as (caption, rows of (key, value)) blocks."""
    m, c, w = estimate.model, estimate.cluster, estimate.workload
    model_rows = [
        ("name", m.name),
        ("parameters", f"{m.total_parameters() / 1e9:,.2f} B"),
        ("active parameters", f"{m.active_parameters() / 1e9:,.2f} B"),
        ("layers", m.num_layers),
        ("hidden size", m.hidden_size),
        ("attention heads (kv)", f"{m.num_attention_heads} ({m.num_key_value_heads})"),
        ("vocabulary", f"{m.vocab_size:,}"),
    ]
    if m.num_experts:
        model_rows.append(("experts (top-k)", f"{m.num_experts} ({m.experts_per_token})"))
    dev = c.device
    cluster_rows = [
        ("cluster", f"{c.name} ({c.id})"),
        ("devices", f"{c.num_nodes} nodes x {c.devices_per_node}"),
        ("device", dev.name),
        ("HBM", f"{dev.hbm_bytes / GIB:,.1f} GiB"),
        *((f"peak {k}", f"{v / 1e12:,.0f} TFLOP/s") for k, v in dev.peak_flop_per_s.items()),
        *(
            (f"link: {lvl.name}", f"{lvl.bytes_per_s / 1e9:,.0f} GB/s, {lvl.latency_s * 1e6:,.1f} µs")
            for lvl in c.levels
        ),
    ]
    workload_rows = [
        ("sequence length", f"{w.seq_len:,}"),
        ("global batch", f"{w.global_batch_size:,} sequences"),
        ("tokens per step", f"{w.tokens_per_step:,}"),
        ("precision", str(w.dtype)),
        ("optimizer", str(w.optimizer)),
    ]
    return [
        {"caption": "Model", "rows": model_rows},
        {"caption": "Cluster", "rows": cluster_rows},
        {"caption": "Workload", "rows": workload_rows},
    ]


def plans_table(
    estimates: Sequence[Estimate], chosen: int, marks: Sequence[tuple[bool, bool]] | None = None
) -> dict[str, Any]:
    """One row per estimate, numbered from #1 (the best) like the CLI: step time, throughput, MFU, TFLOP/s per
    device, peak memory, fits, bubble. ``marks`` (tied, variant) per estimate, from the search: a plan tied
    with #1 reads ``2 =``, a variant of the layout above it is indented with ``└`` and has the row class
    ``variant`` (folded until the reader unfolds the variants)."""
    marks = list(marks or [(False, False)] * len(estimates))
    header = [
        "#",
        "plan",
        "backend",
        "step (ms)",
        "80% band (ms)",
        "tokens/s",
        "MFU",
        "TFLOP/s per device",
        "peak memory (GiB)",
        "fits",
        "bubble (critical rank)",
    ]
    numeric = [True, False, False, True, False, True, True, True, True, False, True]
    rows, classes = [], []
    for i, (e, (tied, variant)) in enumerate(zip(estimates, marks, strict=True)):
        rows.append(
            [
                str(i + 1) + (" =" if tied and i > 0 else ""),
                ("└ " if variant else "") + e.plan.describe(),
                e.backend + (" (measured)" if e.measured else ""),
                f"{e.step_time_s * MS_PER_S:,.1f}",
                _band_text(e),
                f"{e.tokens_per_s:,.0f}",
                f"{e.mfu * 100:.1f} %",
                f"{e.model_flop_per_s_per_device / 1e12:,.0f}",
                f"{e.peak_memory_bytes / GIB:,.1f}",
                "yes" if e.fits else "no",
                f"{e.bubble_fraction * 100:.1f} %",
            ]
        )
        flags = (("chosen", i == chosen), ("nofit", not e.fits), ("variant", variant and i != chosen))
        classes.append(" ".join(c for c, on in flags if on))
    num_variants = sum("variant" in c.split() for c in classes)
    return {
        "header": header,
        "rows": rows,
        "numeric": numeric,
        "classes": classes,
        "num_variants": num_variants,
    }


def _band_text(e: Estimate) -> str:
    """The step time's error band in ms ('-' without one), marked when widened (the notes say why)."""
    if e.band is None:
        return "-"
    low, high = e.band.time_range(e.step_time_s)
    text = f"{low * MS_PER_S:,.1f}-{high * MS_PER_S:,.1f}"
    return text + (" (widened: " + "; ".join(e.band.notes) + ")" if e.band.widened else "")


def goodput_table(g: GoodputEstimate) -> dict[str, Any]:
    """The figures of a run with failures (``workbench.goodput.GoodputEstimate``) in display units."""
    rows = [
        ["failure rates", g.failures_id],
        ["job mean time between interruptions", f"{g.mtbf_s / 3600:,.2f} h"],
        ["checkpoint size", f"{g.checkpoint_bytes / 1e12:,.3f} TB"],
        [f"checkpoint write ({g.checkpoint_mode})", f"{g.checkpoint_write_s:,.1f} s"],
        ["training stall per checkpoint", f"{g.checkpoint_stall_s:,.2f} s"],
        [
            "checkpoint interval",
            f"{g.checkpoint_interval_s / 60:,.1f} min ({g.checkpoint_interval_steps:,} steps)",
        ],
        ["restart (overhead + restore)", f"{g.restart_s:,.1f} s"],
        ["downtime per failure", f"{g.downtime_s:,.1f} s"],
        ["spare nodes", f"{g.spare_nodes} ({g.on_failure} on failure)"],
        ["goodput", f"{g.goodput_frac * 100:.1f} %"],
    ]
    return table(["quantity", "value"], rows, [False, True])


def search_totals(result: SearchResult) -> dict[str, Any]:
    """What the planner did, from its ``SearchResult``: plans screened, rejected (in all and per reason, the
    first rule a plan breaks: ``workbench.search.grid.REASONS``), feasible and refined, as display strings,
    plus the rejection table (reasons with no plan left out)."""
    rejected = [(text, count) for _, text, count in result.rejection_table() if count]
    refined = int(result.plans["refined"].sum()) if result.plans.height else 0
    counts = [
        ("plans screened (closed form, every plan of the space)", result.num_plans),
        ("rejected (by reason below)", sum(count for _, count in rejected)),
        ("feasible (fit in the usable memory)", result.num_feasible),
        ("refined with the full backend", refined),
    ]
    return {
        "screened": result.num_plans,
        "table": table(["", "plans"], [[k, f"{v:,}"] for k, v in counts], [False, True]),
        "rejections": table(["reason", "plans"], [[t, f"{c:,}"] for t, c in rejected], [False, True]),
    }


def _row_band(row: dict[str, Any]) -> str:
    """A ranked plan's tokens/s band (``workbench.search.planner.BAND_COLUMNS``), '' without one."""
    low, high = row.get("tokens_per_s_low"), row.get("tokens_per_s_high")
    if low is None or high is None:
        return ""
    note = row.get("band_note") or ""
    return f"{low:,.0f}-{high:,.0f}" + (f" (widened: {note})" if note else "")


def search_table(frame: pl.DataFrame, max_rows: int) -> dict[str, Any]:
    """The first ``max_rows`` plans of a search frame with its display columns, numbered from 1; a plan tied
    with #1 (within the model's ranking error, the planner's ``tied``) reads ``2 =``, and a variant of the
    layout above it (``variant``) is indented under it with ``└``."""
    head = frame.head(max_rows)
    ok = feasible_mask(head)
    plan_cols = [c for c in ("plan", *PLAN_FIELDS) if c in head.columns]
    plan_cols = ["plan"] if "plan" in plan_cols else plan_cols
    header = ["#", *plan_cols, "tokens/s", "80% band", "MFU", "peak memory (GiB)", "fits", "rejected"]
    numeric = [True, *(False for _ in plan_cols), True, False, True, True, False, False]
    rows = []
    for i, row in enumerate(head.iter_rows(named=True)):
        mfu = row.get("mfu")
        rows.append(
            [
                str(i + 1) + (" =" if row.get("tied") and i > 0 else ""),
                *(("└ " if c == "plan" and row.get("variant") else "") + str(row[c]) for c in plan_cols),
                f"{row['tokens_per_s']:,.0f}",
                _row_band(row),
                f"{mfu * 100:.1f} %" if mfu is not None else "",
                f"{row['peak_memory_bytes'] / GIB:,.1f}",
                "yes" if row["fits"] else "no",
                str(row.get("rejected_reason") or ""),
            ]
        )
    variants = [bool(v) for v in (head["variant"] if "variant" in head.columns else [False] * head.height)]
    classes = [
        " ".join(c for c, on in (("nofit", not good), ("variant", variant)) if on)
        for good, variant in zip(ok, variants, strict=True)
    ]
    num_variants = sum(variants)
    return {
        "header": header,
        "rows": rows,
        "numeric": numeric,
        "classes": classes,
        "num_variants": num_variants,
    }
