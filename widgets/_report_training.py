"""The training sections of the HTML report: the answer, the inputs, the ranked plans, the search, the backend
accuracy, goodput, each shown plan's figures, the breakdown, the search space and the notes.

Search frame (``search_results``): a polars frame of ranked plans, best first, with the columns listed in
``workbench_widgets.plots.search`` (required: ``tokens_per_s``, ``peak_memory_bytes``, ``fits``; used when present:
``mfu``, ``plan``, the plan fields dp/tp/pp/cp/ep/vpp/micro_batch_size/zero_stage/recompute/schedule,
``tier``, ``rejected_reason``, ``memory_capacity_bytes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
from markupsafe import Markup
from workbench_widgets._report_page import Block, Section, table, workbench_version
from workbench_widgets._report_summary import fold_marks, report_summary
from workbench_widgets._report_tables import (
    goodput_table,
    input_blocks,
    plans_table,
    search_table,
    search_totals,
)
from workbench_widgets.plots import (
    breakdown_figure,
    estimate_activation_figure,
    estimate_memory_figure,
    estimate_timeline_figure,
    placement_figure,
    search_figure,
    timeline_figure,
)
from workbench_widgets.plots._lanes import detail_window_s
from workbench_widgets.plots.goodput import goodput_interval_figure, goodput_scale_figure
from workbench_widgets.plots.memory import usable_memory_bytes
from workbench_widgets.plots.timeline import MAX_BLOCKS

if TYPE_CHECKING:
    from bokeh.model import Model

    from workbench.goodput import GoodputEstimate
    from workbench.presets.calibration import Calibration
    from workbench.search.result import SearchResult
    from workbench.specs.estimate import Estimate


def training_intro(best: Estimate) -> list[Block]:
    """The stack the plans are for, and the units."""
    blocks: list[Block] = []
    stack = f"{best.framework} ({best.framework_version})" if best.framework_version else best.framework
    if stack:
        text = Markup("Plans for the stack <strong>{}</strong>: only what it runs is offered.").format(stack)
        blocks.append({"kind": "p", "text": text, "css": "stack"})
    version = workbench_version()
    blocks.append(
        {
            "kind": "note",
            "text": Markup(
                "Written by the parallelism planning workbench{}.\n"
                "Times in ms, memory in GiB (2<sup>30</sup> bytes), throughput in tokens/s over the whole cluster.\n"
                "Open offline: everything is inside this file."
            ).format(f" {version}" if version else ""),
        }
    )
    return blocks


def answer_sections(
    estimates: Sequence[Estimate],
    plan_index: int,
    search: SearchResult | None,
    calibration: Calibration | None = None,
) -> list[Section]:
    """The boxed answer (the best plan, why it wins, the stack's published recipe beside it), the inputs and
    the ranked plans. ``calibration``: the search's (``report_summary``)."""
    summary = report_summary(estimates, search, calibration)
    answer: list[Block] = [
        {"kind": "note", "text": f"The best plan (priced by {summary['backend']}) and what it gives."},
        {"kind": "pairs", "rows": summary["rows"], "numeric": True},
    ]
    if summary["why"]:
        answer += [
            {"kind": "h3", "text": "Why it wins: against the best plan of each other layout"},
            {"kind": "list", "items": summary["why"], "css": "why"},
        ]
    if summary["reference"]:
        answer += [
            {"kind": "h3", "text": "Against the stack's published recipe"},
            {"kind": "p", "text": summary["reference"], "css": "reference"},
        ]
    if summary["tie_band"]:
        answer.append({"kind": "note", "text": summary["tie_band"]})
    plans = plans_table(estimates, plan_index, fold_marks(estimates, search))
    return [
        Section(heading=f"Answer: {summary['plan']}", blocks=answer, id="summary", css="answer"),
        Section(heading="Inputs", blocks=[{"kind": "captioned", "blocks": input_blocks(estimates[0])}]),
        Section(heading="Ranked plans", blocks=[{"kind": "table", "table": plans, "folded": "plans"}]),
    ]


def search_sections(
    search: SearchResult | None, search_results: pl.DataFrame | None, search_rows: int
) -> list[Section]:
    """The planner's totals and rejections, and the first ``search_rows`` plans of the search frame."""
    sections = []
    totals = search_totals(search) if search is not None else None
    if totals is not None:
        blocks: list[Block] = [
            {
                "kind": "note",
                "text": "Every plan of the space is screened in closed form; a plan is rejected under the first "
                "rule it\nbreaks; the best feasible plans are refined with the full backend.",
            },
            {"kind": "table", "table": totals["table"]},
        ]
        if totals["rejections"]["rows"]:
            blocks += [
                {"kind": "h3", "text": "Rejected plans by reason"},
                {"kind": "table", "table": totals["rejections"]},
            ]
        sections.append(Section(heading="Search", blocks=blocks, id="search"))
    if search_results is not None:
        shown = search_table(search_results, search_rows)
        n, total = len(shown["rows"]), search_results.height
        heading = (
            f"Plans kept by the search: the first {n} of {total}\n(ranked plans, then the rest of the Pareto "
            "frontier, then the closest memory misses)"
            if totals is not None
            else f"Search results: the first {n} of {total} listed plans"
        )
        blocks = [{"kind": "h3", "text": heading}, {"kind": "table", "table": shown, "folded": "search"}]
        if sections:
            sections[0].blocks += blocks
        else:
            sections.append(Section(heading=None, blocks=blocks))
    return sections


def validation_section(validation: Mapping[str, float]) -> Section:
    """Each backend's mean absolute percentage error against published runs (a fraction, 0.12 = 12 %)."""
    rows = [(k, f"{v * 100:.1f} %") for k, v in validation.items()]
    header = ["backend", "validation error (mean absolute percentage error)"]
    return Section(
        heading="Backend accuracy", blocks=[{"kind": "table", "table": table(header, rows, [False, False])}]
    )


def goodput_section(goodput: tuple[GoodputEstimate, pl.DataFrame | None]) -> tuple[Section, Section]:
    """The goodput table, and the section of its figures (goodput against the checkpoint interval and, with a
    scaling frame, against the cluster size)."""
    g, scaling = goodput
    table_section = Section(
        heading="Goodput: failures, checkpoints and restarts",
        id="goodput",
        blocks=[
            {
                "kind": "note",
                "text": "The best plan's run when devices fail: the job's mean time between interruptions from "
                "the failure\nrates, checkpoints written at the interval that maximises the useful share of the "
                "wall time (Daly 2006), each\nfailure costing a restart, a restore and the work since the last "
                "checkpoint.",
            },
            {"kind": "table", "table": goodput_table(g)},
        ],
    )
    figures: dict[str, Model] = {"goodput_interval": goodput_interval_figure(g)}
    if scaling is not None and scaling.height:
        figures["goodput_scale"] = goodput_scale_figure(scaling)
    return table_section, _figure_section(
        "Goodput against the checkpoint interval and the cluster size", figures
    )


def figure_sections(
    estimates: Sequence[Estimate], search: pl.DataFrame | None, plan_index: int, headroom: float | None
) -> list[Section]:
    """The best plan's figures (and the chosen plan's), the breakdown of the ranked plans, the search space."""
    sections = []
    shown = [0] if plan_index == 0 else [0, plan_index]
    for i in shown:
        label = "best plan" if i == 0 else "chosen plan"
        heading = f"#{i + 1} ({label}): {estimates[i].plan.describe()} [{estimates[i].backend}]"
        sections.append(_figure_section(heading, _plan_figures(estimates[i], f"plan{i}", headroom)))
    breakdown = breakdown_figure([e.breakdown for e in estimates], _plan_labels(estimates))
    sections.append(_figure_section("Step-time breakdown of the ranked plans", {"breakdown": breakdown}))
    if search is not None and search.height:
        usable = usable_memory_bytes(estimates[0], headroom)
        figure = search_figure(search, chosen_index=0, usable_bytes=usable)
        sections.append(_figure_section("Search space", {"search": figure}))
    return sections


def notes_section(estimates: Sequence[Estimate], extra: Sequence[str]) -> Section | None:
    """Each distinct note once: bare when every plan has it, else prefixed with the plans that do
    (``#2, #5: ...``, numbered from #1); then ``extra``. None without notes."""
    holders: dict[str, list[int]] = {}
    for i, e in enumerate(estimates):
        for note in dict.fromkeys(e.notes):
            holders.setdefault(note, []).append(i + 1)
    every = len(estimates)
    lines = [
        note if len(nums) == every else f"{', '.join(f'#{n}' for n in nums)}: {note}"
        for note, nums in holders.items()
    ]
    notes = list(dict.fromkeys([*lines, *extra]))
    return Section(heading="Notes", blocks=[{"kind": "list", "items": notes}]) if notes else None


def _figure_section(heading: str, figures: dict[str, Any]) -> Section:
    return Section(heading=heading, blocks=[{"kind": "figures", "names": list(figures)}], figures=figures)


def _plan_labels(estimates: Sequence[Estimate]) -> list[str]:
    """``#1 plan`` (numbered from 1 like the tables and the CLI), backend added when backends differ."""
    several = len({e.backend for e in estimates}) > 1
    return [
        f"#{i + 1} {e.plan.describe()}" + (f" [{e.backend}]" if several else "")
        for i, e in enumerate(estimates)
    ]


def _plan_figures(estimate: Estimate, prefix: str, headroom: float | None = None) -> dict[str, Model]:
    figures: dict[str, Model] = {}
    timeline = estimate.timeline
    if timeline.height:
        figures[f"{prefix}_timeline"] = estimate_timeline_figure(estimate)
        if timeline.height > MAX_BLOCKS:
            window = detail_window_s(timeline, MAX_BLOCKS)
            figures[f"{prefix}_detail"] = timeline_figure(
                timeline, window_s=window, title_prefix="Ranged view: the start of the step"
            )
    figures[f"{prefix}_memory"] = estimate_memory_figure(estimate, headroom_frac=headroom)
    activation = estimate_activation_figure(estimate)
    if activation is not None:
        figures[f"{prefix}_activation"] = activation
    if estimate.plan.num_devices <= estimate.cluster.num_devices:
        figures[f"{prefix}_placement"] = placement_figure(estimate.plan, estimate.cluster)
    return figures
