"""Every HTML report of the workbench, from one page builder (``_report_page``) and one template: each entry
point chooses its sections.

- ``write_report`` / ``render_report``: an estimate or a search (training sections, ``_report_training``), with
  predicted vs measured (``comparison``) and goodput sections when given;
- ``write_serving_report`` / ``render_serving_report``: a serving estimate (``_report_serving``);
- ``render_mixed_report``: a mixed-cluster search (``_report_mixed``);
- ``write_compare_report`` / ``render_compare_report``: a real run read back beside its prediction
  (``workbench compare --report``, ``_report_compare``);
- ``write_csv_tables``: the training tables as CSV; ``cli_command``: the command shown as the way to reproduce.

One file that opens offline anywhere: bokeh's JavaScript and CSS are inlined for exactly the figures drawn, user
strings are escaped, a page that links any script or stylesheet is refused, and an existing file is never
overwritten without ``force``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
from workbench_widgets import _report_serving, _report_training
from workbench_widgets._report_compare import estimate_compare_section, run_compare_section
from workbench_widgets._report_mixed import mixed_intro, mixed_sections
from workbench_widgets._report_page import (
    Section,
    check_path,
    render_page,
    reproduce_section,
    workbench_version,
)
from workbench_widgets._report_summary import headroom_frac

from workbench.serving.sweep import sweep_table

if TYPE_CHECKING:
    from workbench.goodput import GoodputEstimate
    from workbench.launch.compare import CompareRow
    from workbench.presets.calibration import Calibration
    from workbench.search.mixed.planner import MixedSearchResult
    from workbench.search.result import SearchResult
    from workbench.serving.estimate import ServingEstimate
    from workbench.specs.estimate import Estimate
    from workbench.specs.serving import SLO

Sweep = pl.DataFrame | Sequence[tuple[float, "ServingEstimate"]]
"""A rate sweep: a ``workbench.serving.sweep.sweep_table`` frame or its (rate, estimate) points."""


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
    ``estimates[plan_index]``. ``search_results`` adds the search scatter and table (columns: ``_report_training``).
    ``validation`` maps a backend name to its mean absolute percentage error against published runs
    (a fraction, 0.12 = 12 %). ``command`` is shown as the way to reproduce the file. ``comparison``
    (predicted, measured) adds a "Predicted vs measured" section: both timelines on the same axes
    (``comparison_timeline_figure``) and a table of step time, bubble, tokens/s and peak memory with the error.
    ``goodput`` (the best plan's ``workbench.goodput.GoodputEstimate`` and, optionally, its
    ``workbench.search.sizes.goodput_scaling`` frame) adds a "Goodput" section: the figures of the run
    with failures, goodput against the checkpoint interval and against the cluster size. ``search`` (the
    planner's ``workbench.search.SearchResult``) adds its totals (plans screened, rejected per reason,
    feasible, refined) and, when ``search_results`` is not given, its ``report_frame()`` as the search table.
    Plans are numbered from #1 (the best), as in the CLI; notes that hold for every plan are listed once,
    the others once with the plans they hold for.
    Raises FileExistsError if ``path`` exists and not ``force``, FileNotFoundError if its folder is missing,
    ValueError for no estimates or a ``plan_index`` out of range.
    """
    out = check_path(path, force)
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
    calibration: Calibration | None = None,
) -> str:
    """The report's HTML text (see ``write_report``). ``app_url``: the address of the app view this report was
    written from (its query string holds every choice); the page links back to it. Only ``http(s)`` URLs are
    linked. ``calibration``: the one ``search`` priced with, for the stack's published recipe beside #1
    (default: the stack's default calibration)."""
    if search is not None and search_results is None:
        search_results = search.report_frame()
    if not estimates:
        raise ValueError("write_report: estimates must hold at least one Estimate, got none")
    if not 0 <= plan_index < len(estimates):
        raise ValueError(f"write_report: plan_index must be in 0..{len(estimates) - 1}, got {plan_index}")
    t = _report_training
    best = estimates[0]
    sections = [
        *t.answer_sections(estimates, plan_index, search, calibration),
        *t.search_sections(search, search_results, search_rows),
    ]
    if validation:
        sections.append(t.validation_section(validation))
    if comparison is not None:
        sections.append(estimate_compare_section(*comparison))
    figures = t.figure_sections(estimates, search_results, plan_index, headroom_frac(search))
    if goodput is not None:
        goodput_table, goodput_figures = t.goodput_section(goodput)
        sections.append(goodput_table)
        figures.append(goodput_figures)
    notes_section = t.notes_section(estimates, notes)
    sections += [*figures, *([notes_section] if notes_section else []), reproduce_section(command, app_url)]
    return render_page(
        title=title or f"Parallelism plan: {best.model.name} on {best.cluster.name}",
        intro=t.training_intro(best),
        sections=sections,
    )


def write_serving_report(
    path: str | Path,
    estimate: ServingEstimate,
    *,
    sweep: Sweep | None = None,
    search: Any = None,
    slo: SLO | None = None,
    command: str = "",
    title: str | None = None,
    request_rows: int = 50,
    search_rows: int = 20,
    force: bool = False,
) -> Path:
    """Write the serving report of ``estimate`` to ``path`` and return it.

    ``sweep`` adds the throughput-latency figure and the sweep table; ``search`` (a serving search result with
    ``.table``, ``.pareto`` and ``.rejections``) adds its first ``search_rows`` plans, its Pareto plans and its
    rejections; ``slo`` draws the targets on the figures and states the attainment; ``command`` is shown as the
    way to reproduce the file; ``request_rows`` requests are listed one per row.
    Raises FileExistsError if ``path`` exists and not ``force``, FileNotFoundError if its folder is missing,
    ValueError for ``request_rows`` or ``search_rows`` < 0.
    """
    out = check_path(path, force)
    html = render_serving_report(
        estimate,
        sweep=sweep,
        search=search,
        slo=slo,
        command=command,
        title=title,
        request_rows=request_rows,
        search_rows=search_rows,
    )
    out.write_text(html, encoding="utf-8")
    return out


def render_serving_report(
    estimate: ServingEstimate,
    *,
    sweep: Sweep | None = None,
    search: Any = None,
    slo: SLO | None = None,
    command: str = "",
    title: str | None = None,
    request_rows: int = 50,
    search_rows: int = 20,
) -> str:
    """The serving report's HTML text (see ``write_serving_report``)."""
    for name, value in (("request_rows", request_rows), ("search_rows", search_rows)):
        if value < 0:
            raise ValueError(f"write_serving_report: {name} must be >= 0, got {value}")
    est = estimate
    frame = None
    if sweep is not None:
        frame = sweep if isinstance(sweep, pl.DataFrame) else sweep_table(sweep, slo)
    sections = _report_serving.serving_sections(
        est, sweep=frame, search=search, slo=slo, request_rows=request_rows, search_rows=search_rows
    )
    if command:
        sections.append(reproduce_section(command))
    return render_page(
        title=title or f"Serving plan: {est.model.name} on {est.cluster.name}, {est.plan.describe()}",
        intro=_report_serving.serving_intro(),
        sections=sections,
    )


def render_mixed_report(result: MixedSearchResult, *, command: str, plan_index: int = 0) -> str:
    """The HTML of a mixed-cluster search (``workbench plan --cluster A:N+B:M --report``): the ranked plans over
    the pools, each pool alone, and the figures of plan ``plan_index``. ValueError when ``result`` has no plan at
    ``plan_index``."""
    if not 0 <= plan_index < len(result.plans):
        raise ValueError(f"the search has {len(result.plans)} plans; no plan #{plan_index + 1} to report")
    return render_page(
        title=f"Plans for {result.model.name} on a mixed cluster",
        page_title=f"Mixed-cluster plans for {result.model.name}",
        intro=mixed_intro(result, command),
        sections=mixed_sections(result, plan_index),
    )


def write_compare_report(
    path: str | Path,
    rows: Sequence[CompareRow],
    prediction: Mapping[str, Any],
    *,
    run: str,
    prediction_name: str,
    command: str,
    force: bool = False,
) -> Path:
    """Write ``render_compare_report`` to ``path`` and return it. FileExistsError if ``path`` exists and not
    ``force``, FileNotFoundError if its folder is missing."""
    out = check_path(path, force)
    html = render_compare_report(rows, prediction, run=run, prediction_name=prediction_name, command=command)
    out.write_text(html, encoding="utf-8")
    return out


def render_compare_report(
    rows: Sequence[CompareRow],
    prediction: Mapping[str, Any],
    *,
    run: str,
    prediction_name: str,
    command: str,
) -> str:
    """A real run read back beside its prediction: ``rows`` of ``workbench.launch.compare.compare_run``,
    ``prediction`` the ``prediction.json`` object they were computed from (its model, plan, cluster and stack
    are listed), ``run`` what was read (stack, file, steady steps), ``prediction_name`` the prediction's file."""
    summary = prediction.get("summary", {})
    model = prediction.get("model_ref", {}).get("name") or summary.get("model") or "model"
    plan = prediction.get("plan", {}).get("describe") or summary.get("plan") or ""
    cluster = prediction.get("cluster", {})
    setup = [("kind", prediction.get("kind", "")), ("stack", prediction.get("stack", "")), ("model", model)]
    if plan:
        setup.append(("plan", plan))
    if cluster:
        setup.append(
            ("devices", f"{cluster.get('num_devices')} x {cluster.get('device')} ({cluster.get('id')})")
        )
    if prediction.get("command"):
        setup.append(("predicted by", prediction["command"]))
    version = workbench_version()
    intro = [
        {
            "kind": "note",
            "text": f"Written by the parallelism planning workbench{f' {version}' if version else ''}. "
            "A real run's output read back and laid beside the prediction it was exported with. "
            "Open offline: everything is inside this file.",
        }
    ]
    sections = [
        run_compare_section(rows, run=run, prediction=prediction_name),
        Section(heading="The prediction", id="prediction", blocks=[{"kind": "pairs", "rows": setup}]),
        reproduce_section(command),
    ]
    return render_page(title=f"Predicted vs measured: {model} {plan}".strip(), intro=intro, sections=sections)


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
