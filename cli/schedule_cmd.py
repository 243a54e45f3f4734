"""``workbench schedule NAME``: build a pipeline schedule, simulate it and show its bubble and memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from workbench_cli._common import (
    Writer,
    check_outputs,
    echo_json,
    output_file,
    print_table,
    say,
    shown,
    write_outputs,
)
from workbench_cli._types import amount, count, schedule_choice

from workbench.pipeline.schedules import (
    Schedule,
    build_schedule,
    read_schedule_csv,
    write_schedule_csv,
)
from workbench.pipeline.simulate import SimResult, StageCosts, simulate
from workbench.pipeline.trace import chrome_trace, write_chrome_trace
from workbench.specs import limits as L

DEFAULT_TIME_UNIT = "slot"
"""The unit of the action times by default: with --f-time 1, one slot is one forward pass of a full stage."""


@click.command("schedule")
@click.argument("name", metavar="NAME", type=schedule_choice("custom"))
@click.option(
    "--pp",
    type=count(L.MAX_PP),
    help="Pipeline ranks (read from the CSV with --from-csv).",
)
@click.option(
    "--microbatches",
    "num_microbatches",
    type=count(L.MAX_MICROBATCHES),
    help="Micro-batches per step.",
)
@click.option(
    "--vpp",
    type=count(L.MAX_VPP),
    default=None,
    help="Stages per rank (default: the schedule's).",
)
@click.option(
    "--from-csv", "from_csv", type=click.Path(dir_okay=False), help="Load a torch/torchtitan CSV schedule."
)
@click.option(
    "--f-time",
    "f_time",
    type=amount(L.MAX_ACTION_TIME),
    default=1.0,
    show_default=True,
    help="Forward time of one full pipeline stage.",
)
@click.option(
    "--b-time",
    "b_time",
    type=amount(L.MAX_ACTION_TIME),
    default=2.0,
    show_default=True,
    help="Full backward time of one full pipeline stage.",
)
@click.option(
    "--w-time",
    "w_time",
    type=amount(L.MAX_ACTION_TIME),
    default=1.0,
    show_default=True,
    help="Weight-gradient part of the backward (I = b - w).",
)
@click.option(
    "--p2p-time",
    "p2p_time",
    type=amount(L.MAX_ACTION_TIME),
    default=0.0,
    show_default=True,
    help="Point-to-point time between stages on different ranks.",
)
@click.option(
    "--time-unit",
    default=DEFAULT_TIME_UNIT,
    show_default=True,
    help="Name of the unit of --f-time, --b-time, --w-time and --p2p-time (e.g. ms), printed with every time. "
    "The default 'slot' is one forward pass of a full stage (--f-time 1).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), help="Write a Chrome/Perfetto trace.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the schedule as CSV.")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
def schedule_cmd(
    name: str,
    pp: int | None,
    num_microbatches: int | None,
    vpp: int | None,
    from_csv: str | None,
    f_time: float,
    b_time: float,
    w_time: float,
    p2p_time: float,
    time_unit: str,
    as_json: bool,
    trace_path: str | None,
    csv_path: str | None,
    force: bool,
) -> None:
    """Per-rank action order, makespan, the three bubble figures and the peak in-flight micro-batches.

    NAME is a schedule (any case: 1F1B is 1f1b) or 'custom' with --from-csv. Times are in the one unit of
    --f-time/--b-time/--w-time/--p2p-time, named by --time-unit (default: slots, one forward of a full stage);
    with vpp stages per rank each stage takes 1/vpp. Idle shares (bubbles) are in %. The Chrome trace
    (--trace) reads the times as seconds.
    """
    time_unit = time_unit.strip()
    if not time_unit or len(time_unit) > 20 or not time_unit.isprintable():
        raise click.BadParameter(
            f"must be a short printable unit name such as slot or ms, got '{shown(time_unit)}'",
            param_hint="--time-unit",
        )
    if w_time > b_time:
        raise click.BadParameter(
            f"--w-time ({w_time}) must not exceed --b-time ({b_time})", param_hint="--w-time"
        )
    check_outputs(output_file("--trace", trace_path), output_file("--csv", csv_path), force=force)
    schedule = _load(name, pp, num_microbatches, vpp, from_csv)
    costs = StageCosts.uniform(
        num_stages=schedule.num_stages,
        vpp=schedule.vpp,
        forward_s=f_time,
        backward_s=b_time,
        backward_weight_s=w_time,
        p2p_s=p2p_time,
    )
    result = simulate(schedule, costs)
    writers: dict[Path, Writer] = {}
    if trace_path:
        trace = chrome_trace(result.timeline, name=schedule.name, comm=result.comm)
        writers[Path(trace_path)] = lambda tmp: write_chrome_trace(trace, tmp, force=True)
    if csv_path:
        writers[Path(csv_path)] = lambda tmp: write_schedule_csv(schedule, tmp, force=True)
    written = dict(zip(writers, write_outputs(writers, force=force), strict=True))
    if trace_path:
        say(f"wrote trace to {shown(written[Path(trace_path)])}", err=True)
    if csv_path:
        say(f"wrote schedule CSV to {shown(written[Path(csv_path)])}", err=True)
    summary = summary_dict(result)
    summary["time_unit"] = time_unit
    if as_json:
        echo_json(summary)
        return
    _print(result, summary, time_unit)


def _load(name: str, pp: int | None, m: int | None, vpp: int | None, from_csv: str | None) -> Schedule:
    if from_csv:
        return read_schedule_csv(from_csv, name=name)
    if name == "custom":
        raise click.UsageError("NAME 'custom' needs --from-csv PATH")
    if pp is None or m is None:
        raise click.UsageError("--pp and --microbatches are required unless --from-csv is given")
    return build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp)


def summary_dict(result: SimResult) -> dict[str, Any]:
    """The JSON object of ``workbench schedule --json``. ``idle_per_rank`` is each rank's idle time
    inside its own span (first start to last end); ``idle_of_step_per_rank`` is makespan minus busy."""
    s = result.schedule
    return {
        "name": s.name,
        "pp": s.pp,
        "vpp": s.vpp,
        "num_microbatches": s.num_microbatches,
        "actions": s.as_text(),
        "makespan": result.makespan_s,
        "mean_idle_fraction": result.bubble_fraction_of_step,
        "idle_over_busy": result.bubble_over_ideal,
        "idle_per_rank": list(result.idle_in_span_s),
        "idle_frac_per_rank": list(result.idle_frac_per_rank),
        "idle_of_step_per_rank": list(result.idle_s),
        "busy_per_rank": list(result.busy_s),
        "peak_inflight_per_rank": list(result.peak_inflight_per_rank),
        "peak_inflight_chunks_per_rank": list(result.peak_inflight_chunks_per_rank),
    }


def _print(result: SimResult, summary: dict[str, Any], unit: str) -> None:
    s = result.schedule
    units = _plural(unit)
    rows = [
        [
            r,
            f"{result.busy_s[r]:.4g}",
            f"{result.idle_in_span_s[r]:.4g}",
            f"{result.idle_frac_per_rank[r]:.1%}",
            f"{result.idle_s[r]:.4g}",
            f"{result.peak_inflight_per_rank[r]:.3g}",
            " ".join(summary["actions"][r]),
        ]
        for r in range(s.pp)
    ]
    print_table(
        f"{s.name}: pp={s.pp} vpp={s.vpp} m={s.num_microbatches} (times in {units})",
        [
            "rank",
            f"busy ({units})",
            f"idle in span ({units})",
            "idle in span %",
            f"idle of step ({units})",
            "peak in-flight",
            "actions",
        ],
        rows,
    )
    say(f"makespan: {result.makespan_s:.6g} {units}")
    say(f"mean idle (bubble), share of pp x makespan: {result.bubble_fraction_of_step:.1%}")
    say(f"idle over busy: {result.bubble_over_ideal:.1%}")
    say("per-rank idle in its own span: " + ", ".join(f"{x:.1%}" for x in result.idle_frac_per_rank))
    say(
        "peak in-flight micro-batches per rank (full-stage units): "
        + ", ".join(f"{x:g}" for x in result.peak_inflight_per_rank)
    )


def _plural(unit: str) -> str:
    """``slot`` -> ``slots``; abbreviations (``ms``, ``us``, ``s``) and plurals stay as given."""
    return unit + "s" if unit.isalpha() and len(unit) > 2 and not unit.endswith("s") else unit


def register(group: click.Group) -> None:
    """Add the ``schedule`` command to the CLI group."""
    group.add_command(schedule_cmd)
