"""``workbench run``: train the plan for real at small scale with torchrun and show measured beside predicted.

The model preset is shrunk with ``--layers``/``--hidden``/``--vocab`` (``workbench_backends.shrink.shrink_model``,
the rule ``workbench profile`` uses, so a profile of the same shrunk model matches), the job runs on this
machine through the ``real-run`` backend (one process per device of the plan: gloo on CPU, NCCL on GPUs), and
``--compare analytic|torch-profile`` prices the same shrunk model, workload and plan with that backend and
prints the figures of :func:`workbench.estimate.compare.compare` (step time, bubble, tokens/s, peak memory,
per-op times). This module only parses and prints.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click
from workbench_cli._common import echo_json, output_path, print_table

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate


def _fmt(key: str, value: float | None) -> str:
    """A compared quantity (SI units) for display."""
    if value is None:
        return "-"
    return {
        "step_time_s": f"{value * 1e3:.2f}",
        "bubble_fraction": f"{value:.3f}",
        "tokens_per_s": f"{value:,.0f}",
        "peak_memory_bytes": f"{value / 2**20:.1f}",
    }.get(key, f"{value * 1e3:.2f}")


_UNITS = {"step_time_s": " (ms)", "peak_memory_bytes": " (MiB)"}


def _err(frac: float | None) -> str:
    return "" if frac is None else f"{frac * 100:+.1f} %"


def print_comparison(cmp: dict[str, Any]) -> None:
    """The table of :func:`workbench.estimate.compare.compare`'s figures."""
    from workbench.estimate.compare import QUANTITIES

    rows = [
        [label + _UNITS.get(key, ""), _fmt(key, cmp[key]["predicted"]), _fmt(key, cmp[key]["measured"])]
        + [_err(cmp[key]["error_frac"])]
        for key, label in QUANTITIES
    ]
    for o in cmp["ops"]:
        rows.append(
            [
                f"stage {o['stage']} {o['op']} (ms)",
                _fmt("op", o["predicted_s"]),
                _fmt("op", o["measured_s"]),
                _err(o["error_frac"]),
            ]
        )
    print_table(
        f"Predicted ({cmp['backend']}) vs measured ({cmp['measured_backend']})",
        ["quantity", "predicted", "measured", "predicted/measured - 1"],
        rows,
    )


def _print_summary(est: Estimate, losses: list[float], reference: list[float] | None) -> None:
    s = est.summary()
    click.echo(f"{s['model']}: {s['plan']} on {s['num_devices']} x {est.cluster.device.name}")
    click.echo(
        f"  step time {est.step_time_s * 1e3:.2f} ms (measured), {est.tokens_per_s:,.0f} tokens/s, "
        f"bubble {est.bubble_fraction:.3f}, peak memory {est.peak_memory_bytes / 2**20:.1f} MiB per rank"
    )
    click.echo(
        "  loss per step: "
        + ", ".join(f"{x:.6f}" for x in losses)
        + ("" if reference is None else "  (reference: " + ", ".join(f"{x:.6f}" for x in reference) + ")")
    )
    for note in est.notes:
        click.echo(f"  note: {note}")


@click.command("run")
@click.option("--model", required=True, help="Model preset id or HF config.json path.")
@click.option("--layers", type=int, default=None, help="Shrink to this many layers (>= pp * vpp).")
@click.option(
    "--hidden",
    type=int,
    default=None,
    help="Shrink to this width, a multiple of 64 (heads, FFN, vocab follow).",
)
@click.option(
    "--vocab", type=int, default=None, help="Vocabulary size (default: the model's, scaled with --hidden)."
)
@click.option("--seq-len", type=int, required=True, help="Tokens per sequence.")
@click.option("--global-batch", type=int, required=True, help="Sequences per optimizer step.")
@click.option("--tp", type=int, default=1, show_default=True)
@click.option("--pp", type=int, default=1, show_default=True)
@click.option("--dp", type=int, default=1, show_default=True)
@click.option("--vpp", type=int, default=None, help="Stages per pipeline rank (default: the schedule's).")
@click.option("--micro-batch", type=int, default=1, show_default=True)
@click.option(
    "--zero",
    type=click.IntRange(0, 3),
    default=0,
    show_default=True,
    help="0: DDP; 1-3: FSDP2 (3 reshards parameters after forward).",
)
@click.option("--schedule", default="1f1b", show_default=True, help="Pipeline schedule name.")
@click.option("--steps", type=int, default=5, show_default=True, help="Optimizer steps, warm-up included.")
@click.option("--warmup-steps", type=int, default=1, show_default=True)
@click.option(
    "--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Seconds for the job."
)
@click.option("--run-dir", default=None, help="Keep config, logs and per-rank results in this (new) folder.")
@click.option(
    "--executor",
    type=click.Choice(["auto", "csv"]),
    default="auto",
    show_default=True,
    help="auto: torch's schedule class where torch has one; csv: our CSV via torch's runtime.",
)
@click.option("--no-check-loss", is_flag=True, help="Skip the single-process reference run.")
@click.option(
    "--compare",
    type=click.Choice(["analytic", "torch-profile"]),
    default=None,
    help="Also price the plan with this backend: print predicted vs measured, overlay both in --report.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--trace", "trace_path", default=None, help="Write the measured timeline as a Chrome trace.")
@click.option("--report", "report_path", default=None, help="Write a self-contained HTML report.")
@click.option("--force", is_flag=True, help="Overwrite existing --trace/--report files.")
def run_cmd(**kw: Any) -> None:
    """Run the plan for real (torchrun on this machine) with a shrunk model; measured beside predicted."""
    from workbench_backends.shrink import shrink_model

    from workbench.estimate.compare import compare
    from workbench.estimate.registry import get_backend
    from workbench.pipeline.schedules import default_vpp
    from workbench.presets.catalog import load_model
    from workbench.specs.hardware import DType
    from workbench.specs.plan import ParallelPlan, Workload

    trace = output_path(kw["trace_path"], force=kw["force"]) if kw["trace_path"] else None
    report = output_path(kw["report_path"], force=kw["force"]) if kw["report_path"] else None
    model = shrink_model(
        load_model(kw["model"]), num_layers=kw["layers"], hidden_size=kw["hidden"], vocab_size=kw["vocab"]
    )
    workload = Workload(seq_len=kw["seq_len"], global_batch_size=kw["global_batch"], dtype=DType.FP32)
    vpp = kw["vpp"] if kw["vpp"] is not None else (default_vpp(kw["schedule"]) if kw["pp"] > 1 else 1)
    plan = ParallelPlan(
        dp=kw["dp"],
        tp=kw["tp"],
        pp=kw["pp"],
        vpp=vpp,
        micro_batch_size=kw["micro_batch"],
        zero_stage=kw["zero"],
        schedule=kw["schedule"],
    )
    backend: Any = get_backend(
        "real-run",
        steps=kw["steps"],
        warmup_steps=kw["warmup_steps"],
        timeout_s=kw["timeout_s"],
        run_dir=kw["run_dir"],
        executor=kw["executor"],
        check_loss=not kw["no_check_loss"],
    )
    reason = backend.unavailable_reason()
    if reason:
        raise click.ClickException(f"the real-run backend cannot run here: {reason}")
    cluster = backend.local_cluster(plan.num_devices)
    problems = plan.validate(model, cluster, workload)
    if problems:
        raise ValueError(f"invalid plan {plan.describe()}: " + " ".join(problems))
    try:
        measured = backend.estimate(model, cluster, workload, plan)
    except (
        RuntimeError
    ) as exc:  # workbench_backends.launch.LaunchError: first line names the rank and the error
        raise click.ClickException(f"real run failed: {str(exc).splitlines()[0]}") from None
    run = backend.last_run
    predicted = get_backend(kw["compare"]).estimate(model, cluster, workload, plan) if kw["compare"] else None
    cmp = compare(predicted, measured) if predicted is not None else None
    if trace is not None:
        from workbench.pipeline.trace import chrome_trace

        trace.write_text(json.dumps(chrome_trace(measured.timeline, name=f"real run {plan.describe()}")))
    if report is not None:
        _write_report(report, measured, predicted, kw)
    if kw["as_json"]:
        echo_json(
            {
                "measured": measured.summary(),
                "losses": run.losses(),
                "reference_losses": run.reference_losses,
                "step_times_s": run.step_times_s(),
                "timeline_problems": run.timeline_problems(),
                "predicted": predicted.summary() if predicted else None,
                "comparison": cmp,
            }
        )
        return
    _print_summary(measured, run.losses(), run.reference_losses)
    if cmp is not None:
        print_comparison(cmp)
    for path in (trace, report):
        if path is not None:
            click.echo(f"wrote {path}")


def _write_report(path: Any, measured: Estimate, predicted: Estimate | None, kw: dict[str, Any]) -> None:
    try:
        from workbench_widgets.report import write_report
    except ImportError as exc:
        raise click.ClickException(f"--report needs the widgets package: {exc}") from None
    args = " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in kw.items() if v not in (None, False) and k != "force"
    )
    # The measured run's own figures, plus (with --compare) both timelines overlaid on the same axes.
    write_report(
        path,
        estimates=[measured] if predicted is None else [measured, predicted],
        command=f"workbench run {args}",
        force=True,
        title=f"Real run: {measured.model.name}, {measured.plan.describe()}",
        comparison=None if predicted is None else (predicted, measured),
    )


def register(group: click.Group) -> None:
    group.add_command(run_cmd)
