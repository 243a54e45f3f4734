"""The self-contained HTML report of an estimate or a search, and its CSV tables.

One file that opens offline anywhere: bokeh's JavaScript and CSS are inlined (``bokeh.resources.INLINE``)
and only the bundles the figures need are included (about 1.3 MB). The page is a Jinja2 template rendered
with autoescape on, so user strings (model names from a config file, notes, the command) appear as text.

Exporting bokeh after ``import panel`` makes bokeh's bundle list a relative
``static/extensions/panel/...`` script that does not exist next to the file; only the inlined code is
written here (``Bundle.scripts`` renders raw code, never file links), and ``write_report`` refuses to
write a page that still links any script or stylesheet.

Search frame (``search_results``): a polars frame of ranked plans, best first, with the columns listed in
``workbench_widgets.plots.search`` (required: ``tokens_per_s``, ``peak_memory_bytes``, ``fits``; used when present:
``mfu``, ``plan``, the plan fields dp/tp/pp/cp/ep/vpp/micro_batch_size/zero_stage/recompute/schedule,
``tier``, ``rejected_reason``, ``memory_capacity_bytes``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import polars as pl
from bokeh.embed import components
from bokeh.embed.bundle import bundle_for_objs_and_resources
from bokeh.resources import INLINE
from workbench_widgets._report_summary import fold_marks, headroom_frac, report_summary
from workbench_widgets._report_tables import (
    comparison_table,
    goodput_table,
    input_blocks,
    plans_table,
    search_table,
    search_totals,
)
from workbench_widgets._report_template import REPORT_TEMPLATE
from workbench_widgets.plots import (
    breakdown_figure,
    comparison_timeline_figure,
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
    from workbench.search.result import SearchResult
    from workbench.specs.estimate import Estimate

_LINKED_RESOURCE = re.compile(
    r"<script[^>]*\ssrc=|<link[^>]*rel=\"?stylesheet|static/extensions/", re.IGNORECASE
)


def write_report(
    path: str | Path,
    *,
    estimates: Sequence[Estimate],
    command: str,
    search_results: pl.DataFrame | None = None,
    plan_index: int = 0,
    force: bool = False,
    title: str | None = None,
    validation: Mapping[str, float] | None = None,
    notes: Sequence[str] = (),
    search_rows: int = 50,
    comparison: tuple[Estimate, Estimate] | None = None,
    goodput: tuple[GoodputEstimate, pl.DataFrame | None] | None = None,
    search: SearchResult | None = None,
) -> Path:
    """Write the report to ``path`` and return it.

    ``estimates`` are the ranked plans, best first (at least one); figures are drawn for the best and for
    ``estimates[plan_index]``. ``search_results`` adds the search scatter and table (columns above).
    ``validation`` maps a backend name to its mean absolute percentage error against published runs
    (a fraction, 0.12 = 12 %). ``command`` is shown as the way to reproduce the file. ``comparison``
    (predicted, measured) adds a "Predicted vs measured" section: both timelines on the same axes
    (``comparison_timeline_figure``) and a table of step time, bubble, tokens/s and peak memory with the error.
    ``goodput`` (the best plan's ``workbench.goodput.GoodputEstimate`` and, optionally, its
    ``workbench_widgets.plots.goodput.goodput_scaling`` frame) adds a "Goodput" section: the figures of the run
    with failures, goodput against the checkpoint interval and against the cluster size. ``search`` (the
    planner's ``workbench.search.SearchResult``) adds its totals (plans screened, rejected per reason,
    feasible, refined) and, when ``search_results`` is not given, its ``report_frame()`` as the search table.
    Plans are numbered from #1 (the best), as in the CLI; notes that hold for every plan are listed once,
    the others once with the plans they hold for.
    Raises FileExistsError if ``path`` exists and not ``force``, FileNotFoundError if its folder is missing,
    ValueError for no estimates or a ``plan_index`` out of range.
    """
    out = _check_path(path, force)
    html = render_report(
        estimates=estimates,
        command=command,
        search_results=search_results,
        plan_index=plan_index,
        title=title,
        validation=validation,
        notes=notes,
        search_rows=search_rows,
        comparison=comparison,
        goodput=goodput,
        search=search,
    )
    out.write_text(html, encoding="utf-8")
    return out


def _check_path(path: str | Path, force: bool) -> Path:
    out = Path(path)
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass --force (force=True) to overwrite it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent}: no such folder for the report")
    return out


def render_report(
    *,
    estimates: Sequence[Estimate],
    command: str,
    search_results: pl.DataFrame | None = None,
    plan_index: int = 0,
    title: str | None = None,
    validation: Mapping[str, float] | None = None,
    notes: Sequence[str] = (),
    search_rows: int = 50,
    comparison: tuple[Estimate, Estimate] | None = None,
    goodput: tuple[GoodputEstimate, pl.DataFrame | None] | None = None,
    search: SearchResult | None = None,
    app_url: str | None = None,
) -> str:
    """The report's HTML text (see ``write_report``). ``app_url``: the address of the app view this report was
    written from (its query string holds every choice); the page links back to it. Only ``http(s)`` URLs are
    linked."""
    if search is not None and search_results is None:
        search_results = search.report_frame()
    if not estimates:
        raise ValueError("write_report: estimates must hold at least one Estimate, got none")
    if not 0 <= plan_index < len(estimates):
        raise ValueError(f"write_report: plan_index must be in 0..{len(estimates) - 1}, got {plan_index}")
    figures, sections = _figures(estimates, search_results, plan_index, headroom_frac(search))
    if comparison is not None:
        figures["comparison"] = comparison_timeline_figure(*comparison)
    if goodput is not None:
        figures["goodput_interval"] = goodput_interval_figure(goodput[0])
        names = ["goodput_interval"]
        if goodput[1] is not None and goodput[1].height:
            figures["goodput_scale"] = goodput_scale_figure(goodput[1])
            names.append("goodput_scale")
        sections.append(
            {"heading": "Goodput against the checkpoint interval and the cluster size", "figures": names}
        )
    script, divs = components(figures)
    best = estimates[0]
    context: dict[str, Any] = {
        "title": title or f"Parallelism plan: {best.model.name} on {best.cluster.name}",
        "version": _version(),
        "stack": f"{best.framework} ({best.framework_version})" if best.framework_version else best.framework,
        "inputs": input_blocks(best),
        "plans": plans_table(estimates, plan_index, fold_marks(estimates, search)),
        "summary": report_summary(estimates, search),
        "search_table": search_table(search_results, search_rows) if search_results is not None else None,
        "search_total": search_results.height if search_results is not None else 0,
        "search_totals": search_totals(search) if search is not None else None,
        "validation": [(k, f"{v * 100:.1f} %") for k, v in (validation or {}).items()],
        "notes": _notes(estimates, notes),
        "sections": sections,
        "comparison": comparison_table(*comparison) if comparison is not None else None,
        "goodput": goodput_table(goodput[0]) if goodput is not None else None,
        "divs": divs,
        "command": command,
        "app_url": app_url if app_url and app_url.startswith(("http://", "https://")) else None,
        **_resources(list(figures.values()), script),
    }
    env = jinja2.Environment(
        autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined
    )
    html = env.from_string(REPORT_TEMPLATE).render(**context)
    linked = _LINKED_RESOURCE.search(html)
    if linked:
        raise RuntimeError(
            f"report would link an external resource ({linked.group(0)!r}); refusing to write it"
        )
    return html


def _resources(models: list[Model], script: str) -> dict[str, str]:
    """Inline JS/CSS for exactly the models used; file links (e.g. panel's extension) are dropped."""
    bundle = bundle_for_objs_and_resources(models, INLINE)
    css = "\n".join(f"<style>{raw}</style>" for raw in bundle.css_raw)
    return {"bokeh_js": bundle.scripts(), "bokeh_css": css, "bokeh_script": script}


def _figures(
    estimates: Sequence[Estimate], search: pl.DataFrame | None, plan_index: int, headroom: float | None
) -> tuple[dict[str, Model], list[dict[str, Any]]]:
    figures: dict[str, Model] = {}
    sections: list[dict[str, Any]] = []
    shown = [0] if plan_index == 0 else [0, plan_index]
    for i in shown:
        names = _plan_figures(estimates[i], f"plan{i}", figures, headroom)
        label = "best plan" if i == 0 else "chosen plan"
        sections.append(
            {
                "heading": f"#{i + 1} ({label}): {estimates[i].plan.describe()} [{estimates[i].backend}]",
                "figures": names,
            }
        )
    figures["breakdown"] = breakdown_figure([e.breakdown for e in estimates], _plan_labels(estimates))
    sections.append({"heading": "Step-time breakdown of the ranked plans", "figures": ["breakdown"]})
    if search is not None and search.height:
        usable = usable_memory_bytes(estimates[0], headroom)
        figures["search"] = search_figure(search, chosen_index=0, usable_bytes=usable)
        sections.append({"heading": "Search space", "figures": ["search"]})
    return figures, sections


def _plan_labels(estimates: Sequence[Estimate]) -> list[str]:
    """``#1 plan`` (numbered from 1 like the tables and the CLI), backend added when backends differ."""
    several = len({e.backend for e in estimates}) > 1
    return [
        f"#{i + 1} {e.plan.describe()}" + (f" [{e.backend}]" if several else "")
        for i, e in enumerate(estimates)
    ]


def _plan_figures(
    estimate: Estimate, prefix: str, figures: dict[str, Model], headroom: float | None = None
) -> list[str]:
    names = []
    timeline = estimate.timeline
    if timeline.height:
        figures[f"{prefix}_timeline"] = estimate_timeline_figure(estimate)
        names.append(f"{prefix}_timeline")
        if timeline.height > MAX_BLOCKS:
            window = detail_window_s(timeline, MAX_BLOCKS)
            figures[f"{prefix}_detail"] = timeline_figure(
                timeline, window_s=window, title_prefix="Ranged view: the start of the step"
            )
            names.append(f"{prefix}_detail")
    figures[f"{prefix}_memory"] = estimate_memory_figure(estimate, headroom_frac=headroom)
    names.append(f"{prefix}_memory")
    activation = estimate_activation_figure(estimate)
    if activation is not None:
        figures[f"{prefix}_activation"] = activation
        names.append(f"{prefix}_activation")
    if estimate.plan.num_devices <= estimate.cluster.num_devices:
        figures[f"{prefix}_placement"] = placement_figure(estimate.plan, estimate.cluster)
        names.append(f"{prefix}_placement")
    return names


def _notes(estimates: Sequence[Estimate], extra: Sequence[str]) -> list[str]:
    """Each distinct note once: bare when every plan has it, else prefixed with the plans that do
    (``#2, #5: ...``, numbered from #1); then ``extra``."""
    holders: dict[str, list[int]] = {}
    for i, e in enumerate(estimates):
        for note in dict.fromkeys(e.notes):
            holders.setdefault(note, []).append(i + 1)
    every = len(estimates)
    lines = [
        note if len(nums) == every else f"{', '.join(f'#{n}' for n in nums)}: {note}"
        for note, nums in holders.items()
    ]
    return list(dict.fromkeys([*lines, *extra]))


def _version() -> str:
    try:
        return version("parallelism-workbench")
    except PackageNotFoundError:
        return ""


def write_csv_tables(
    folder: str | Path,
    *,
    estimates: Sequence[Estimate],
    search_results: pl.DataFrame | None = None,
    plan_index: int = 0,
    force: bool = False,
) -> list[Path]:
    """Write ``plans.csv`` (one summary row per estimate), ``timeline.csv``, ``memory.csv`` and
    ``activation.csv`` of ``estimates[plan_index]``, and ``search.csv`` when given, into ``folder``
    (created if missing). SI units, column names as in the core. FileExistsError if a file exists and not
    ``force``; the check runs before anything is written."""
    folder = Path(folder)
    chosen = estimates[plan_index]
    tables = {
        "plans.csv": _plans_frame(estimates),
        "timeline.csv": chosen.timeline,
        "memory.csv": chosen.memory,
    }
    if chosen.activation_timeline is not None:
        tables["activation.csv"] = chosen.activation_timeline
    if search_results is not None:
        tables["search.csv"] = search_results
    paths = [folder / name for name in tables]
    clash = [str(p) for p in paths if p.exists()]
    if clash and not force:
        raise FileExistsError(f"{', '.join(clash)} exist(s); pass --force (force=True) to overwrite")
    folder.mkdir(parents=True, exist_ok=True)
    for p, frame in zip(paths, tables.values(), strict=True):
        frame.write_csv(p)
    return paths


def _plans_frame(estimates: Sequence[Estimate]) -> pl.DataFrame:
    keys = (
        "backend",
        "plan",
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "hfu",
        "tflops_per_device",
        "peak_memory_bytes",
        "memory_capacity_bytes",
        "fits",
        "bubble_fraction",
        "measured",
    )
    rows = [{"rank_in_list": i, **{k: e.summary()[k] for k in keys}} for i, e in enumerate(estimates)]
    return (
        pl.DataFrame(rows)
        .rename({"tflops_per_device": "model_flop_per_s_per_device"})
        .with_columns(pl.col("model_flop_per_s_per_device") * 1e12)
    )


def cli_command(argv: Sequence[str] | None = None) -> str:
    """The command line that produced this process, shell-quoted, as ``workbench ...``."""
    import shlex
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["workbench", *args])
