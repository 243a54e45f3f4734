"""The self-contained HTML report of a mixed-cluster search (``workbench plan --cluster A:N+B:M --report``).

One file that works offline (bokeh's code inlined by ``file_html`` with ``INLINE`` resources): the inputs, the
ranked plans over the pools, each pool's best plan alone, which pool runs which stages
(:func:`workbench_widgets.plots.mixed.mixed_placement_figure`), the stages' time per micro-batch and the
simulated pipeline timeline of the chosen plan. User strings are HTML-escaped.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from bokeh.embed import file_html
from bokeh.layouts import column
from bokeh.models.widgets import Div
from bokeh.resources import INLINE
from workbench_widgets.plots.mixed import mixed_placement_figure, mixed_stage_time_figure
from workbench_widgets.plots.timeline import timeline_figure

if TYPE_CHECKING:
    from workbench.search.mixed.planner import MixedSearchResult


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table border='1' cellpadding='4' style='border-collapse:collapse'><tr>{head}</tr>{body}</table>"


def _summary_html(result: MixedSearchResult, command: str, plan_index: int) -> str:
    w = result.workload
    plans = [
        [
            str(i + 1),
            e.kind,
            e.description,
            f"{e.tokens_per_s:,.0f}",
            f"{e.mfu:.1%}",
            f"{e.step_time_s:.3f}",
            "yes" if e.fits else "no",
        ]
        for i, e in enumerate(result.plans)
    ]
    alone = [
        [lab, "-" if a is None else a.plan.describe(), "-" if a is None else f"{a.tokens_per_s:,.0f}"]
        for lab, a in zip(result.cluster.labels, result.alone, strict=True)
    ]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.notes)
    return (
        f"<h1>Plans for {html.escape(result.model.name)} on a mixed cluster</h1>"
        f"<p>{html.escape(result.cluster.describe())}; sequence {w.seq_len}, global batch {w.global_batch_size}, "
        f"{html.escape(str(w.dtype))}. Command: <code>{html.escape(command)}</code></p>"
        "<h2>Ranked plans over the pools</h2>"
        + _table(["#", "kind", "plan", "tokens/s", "MFU", "step s", "fits"], plans)
        + "<h2>Each pool alone on the whole batch (the homogeneous planner's #1)</h2>"
        + _table(["pool", "plan", "tokens/s"], alone)
        + (f"<ul>{notes}</ul>" if notes else "")
        + f"<h2>Plan #{plan_index + 1}</h2>"
    )


def render_mixed_report(result: MixedSearchResult, *, command: str, plan_index: int = 0) -> str:
    """The report's HTML. ValueError when ``result`` has no plan at ``plan_index``."""
    if not 0 <= plan_index < len(result.plans):
        raise ValueError(f"the search has {len(result.plans)} plans; no plan #{plan_index + 1} to report")
    est = result.plans[plan_index]
    figures = [
        mixed_placement_figure(est, num_layers=result.model.num_layers),
        mixed_stage_time_figure(est),
        timeline_figure(
            est.timeline,
            makespan_s=est.parts["pipeline_s"],
            bubble_fraction=est.bubble_fraction,
            title_prefix="Pipeline timeline"
            if est.kind == "pipeline"
            else "Straggler pool's pipeline timeline",
        ),
    ]
    page = column(Div(text=_summary_html(result, command, plan_index), width=1100), *figures)
    return file_html(page, INLINE, title=f"Mixed-cluster plans for {result.model.name}")
