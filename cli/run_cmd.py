"""``workbench run``: train the plan for real at small scale with torchrun and show measured beside predicted.

The model preset is shrunk with ``--layers``/``--hidden``/``--vocab`` (``workbench_backends.shrink.shrink_model``,
the rule ``workbench profile`` uses, so a profile of the same shrunk model matches), the job runs on this
machine through the ``real-run`` backend (one process per device of the plan: gloo on CPU, NCCL on GPUs), and
``--compare analytic|torch-profile`` prices the same shrunk model, workload and plan with that backend and
prints the figures of :func:`workbench.estimate.compare.compare` (step time, bubble, tokens/s, peak memory,
per-op times). This module only parses and prints.

What the command guarantees (tested in ``tests/test_run_safety.py``): the worker count is checked against this
machine before anything starts (``workbench_backends.real_run.check_workers``); no process of the run
outlives it, whether it succeeds, fails, times out, or the command is interrupted (Ctrl-C, SIGTERM and SIGHUP
are turned into an exception so that the cleanup runs; exit status 128 + signal number) or SIGKILLed
(``workbench_backends.launch``); ``--trace``/``--report`` are checked at the start, written only after a
successful run, into temporary files beside them that are moved into place without replacing a file that
appeared meanwhile (``workbench_cli._common.write_outputs``); the temporary run folder is removed however the
run ends (``--run-dir`` keeps one), and a failed run's error carries the failing rank's exception and the line
that raised it instead of a path into a removed folder.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click
from workbench_cli._common import (
    Writer,
    check_outputs,
    echo_json,
    output_file,
    print_table,
    say,
    text_writer,
    write_outputs,
)
from workbench_cli._types import schedule_choice

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
    say(f"{s['model']}: {s['plan']} on {s['num_devices']} x {est.cluster.device.name}")
    say(
        f"  step time {est.step_time_s * 1e3:.2f} ms (measured), {est.tokens_per_s:,.0f} tokens/s, "
        f"bubble {est.bubble_fraction:.3f}, peak memory {est.peak_memory_bytes / 2**20:.1f} MiB per rank"
    )
    say(
        "  loss per step: "
        + ", ".join(f"{x:.6f}" for x in losses)
        + ("" if reference is None else "  (reference: " + ", ".join(f"{x:.6f}" for x in reference) + ")")
    )
    for note in est.notes:
        say(f"  note: {note}")


@contextlib.contextmanager
def stop_on_signals(signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Turn the first of ``signums`` into ``workbench_backends.launch.Stopped`` (a KeyboardInterrupt, so
    every ``finally`` runs: the job is ended, the temporary folder removed), and that into a one-line
    ClickException with exit status 128 + the signal number. Later signals are ignored, so they cannot cut
    the cleanup short. The handler also calls ``request_stop``: an exception raised while Python runs an
    at-fork or ``__del__`` callback is dropped, the request is not. Outside the main thread (where Python
    cannot install handlers) it does nothing."""
    from workbench_backends.launch import Stopped, clear_stop, request_stop

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not caught:
            caught.append(signum)
            request_stop(signum)
            if not _starting_a_process(frame):  # there Python would drop it; run_torchrun sees the request
                raise Stopped(signum)

    clear_stop()
    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    except Stopped as exc:
        signum = exc.signum if exc.signum is not None else (caught or [signal.SIGTERM])[0]
        # click reads the exit status from the class: one made for this signal
        stopped = type("StoppedBySignal", (click.ClickException,), {"exit_code": 128 + signum})
        raise stopped(
            f"stopped by {signal.Signals(signum).name}; the run's processes were ended and its "
            "temporary folder removed"
        ) from None
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
        clear_stop()


def _starting_a_process(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside ``subprocess.Popen``'s fork (its at-fork callbacks drop exceptions)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_execute_child" and code.co_filename.endswith("subprocess.py"):
            return True
        frame = frame.f_back
    return False


_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def failure_message(exc: BaseException, run_dir: str | None) -> str:
    """One line for a failed run: the launcher's pathless summary (rank and exception), where the failing
    rank raised it (innermost frame of its traceback), and where the logs are, or how to keep them."""
    text = getattr(exc, "summary", "") or (str(exc).splitlines() or [type(exc).__name__])[0]
    frames = _FRAME_RE.findall(getattr(exc, "traceback_text", "") or "")
    if frames:
        path, line, func = frames[-1]
        text += f" (raised in {func} at {path}:{line})"
    if run_dir:
        return f"real run failed: {text}; logs and tracebacks in {run_dir}"
    return f"real run failed: {text}; rerun with --run-dir DIR to keep the logs"


def _asked_workers(kw: dict[str, Any]) -> str:
    given = [f"--{axis} {kw[axis]}" for axis in ("dp", "tp", "pp") if kw[axis] != 1]
    return " ".join(given) or "--dp 1 --tp 1 --pp 1"


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
    "--dtype",
    type=click.Choice(["fp32", "bf16"]),
    default="fp32",
    show_default=True,
    help="bf16: autocast (matmuls and attention in bf16; fp32 weights, gradients and AdamW states).",
)
@click.option(
    "--zero",
    type=click.IntRange(0, 3),
    default=0,
    show_default=True,
    help="0: DDP; 1-3: FSDP2 (3 reshards parameters after forward).",
)
@click.option(
    "--schedule",
    type=schedule_choice(),
    default="1f1b",
    show_default=True,
    help="Pipeline schedule name (any case).",
)
@click.option("--steps", type=int, default=5, show_default=True, help="Optimizer steps, warm-up included.")
@click.option("--warmup-steps", type=int, default=1, show_default=True)
@click.option(
    "--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Seconds for the job."
)
@click.option(
    "--run-dir",
    default=None,
    help="Keep config, logs, tracebacks and per-rank results in this new or empty folder "
    "(default: a temporary wb-run-* folder, removed however the run ends).",
)
@click.option(
    "--executor",
    type=click.Choice(["auto", "csv"]),
    default="auto",
    show_default=True,
    help="auto: torch's schedule class where torch has one; csv: our CSV via torch's runtime.",
)
@click.option("--no-check-loss", is_flag=True, help="Skip the single-process reference run.")
@click.option(
    "--nnodes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run as this many torchrun agents ('nodes') on this machine, meeting at a c10d rendezvous on 127.0.0.1.",
)
@click.option(
    "--compare",
    type=click.Choice(["analytic", "torch-profile"]),
    default=None,
    help="Also price the plan with this backend: print predicted vs measured, overlay both in --report.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--trace",
    "trace_path",
    default=None,
    help="Write the measured timeline as a Chrome trace (only after a successful run).",
)
@click.option(
    "--report",
    "report_path",
    default=None,
    help="Write a self-contained HTML report (only after a successful run).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Overwrite existing --trace/--report files, also ones that appeared during the run.",
)
def run_cmd(**kw: Any) -> None:
    """Run the plan for real (torchrun on this machine) with a shrunk model; measured beside predicted.

    Workers: dp x tp x pp processes. More than this machine takes (2 per usable CPU core, and what the
    available memory holds at about 400 MiB plus the model's states each; on GPUs one per device) is refused
    before anything starts.

    No orphans: every process of the run ends when the run succeeds, fails or times out, and when this
    command is interrupted (Ctrl-C; SIGTERM or SIGHUP, exit status 128 + the signal) or killed (SIGKILL: the
    workers die with it within seconds).

    Outputs: --trace and --report are checked at the start and written only after a successful run, each to a
    temporary file beside it and then moved into place; a file that appeared at that path during the run is
    left alone and the command fails, unless --force. A failed run writes neither.

    Temporary folder: without --run-dir, config, logs and results go to a new folder in $TMPDIR (named
    wb-run-*) that is removed however the run ends (one left by a SIGKILLed run is removed by the next
    run); a failed run's error names the failing rank, its exception and the line that raised it.
    --run-dir DIR keeps all of it.
    """
    with stop_on_signals():
        _run(kw)


def _run(kw: dict[str, Any]) -> None:
    from workbench_backends.real_run import check_workers, device_kind
    from workbench_backends.shrink import shrink_model

    from workbench.estimate.compare import compare
    from workbench.estimate.registry import get_backend
    from workbench.pipeline.schedules import default_vpp
    from workbench.presets.catalog import load_model
    from workbench.specs.hardware import DType
    from workbench.specs.plan import ParallelPlan, Workload

    trace_out = output_file("--trace", kw["trace_path"])
    report_out = output_file("--report", kw["report_path"])
    check_outputs(trace_out, report_out, force=kw["force"])
    model = shrink_model(
        load_model(kw["model"]), num_layers=kw["layers"], hidden_size=kw["hidden"], vocab_size=kw["vocab"]
    )
    workload = Workload(seq_len=kw["seq_len"], global_batch_size=kw["global_batch"], dtype=DType(kw["dtype"]))
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
    asked = _asked_workers(kw)
    # cores and memory, before torch is imported and before any process starts
    check_workers(model, plan, check_loss=not kw["no_check_loss"], device=None, asked=asked)
    backend: Any = get_backend(
        "real-run",
        steps=kw["steps"],
        warmup_steps=kw["warmup_steps"],
        timeout_s=kw["timeout_s"],
        run_dir=kw["run_dir"],
        executor=kw["executor"],
        check_loss=not kw["no_check_loss"],
        nnodes=kw["nnodes"],
    )
    reason = backend.unavailable_reason()
    if reason:
        raise click.ClickException(f"the real-run backend cannot run here: {reason}")
    # on CUDA also the devices (torch is imported by now); before local_cluster's micro-benchmarks
    check_workers(model, plan, check_loss=not kw["no_check_loss"], device=device_kind(), asked=asked)
    if kw["dtype"] == "bf16" and device_kind() != "cuda":
        raise click.ClickException(
            "--dtype bf16 runs on CUDA devices only, and torch sees none here; use --dtype fp32"
        )
    cluster = backend.local_cluster(plan.num_devices)
    problems = plan.validate(model, cluster, workload)
    if problems:
        raise ValueError(f"invalid plan {plan.describe()}: " + " ".join(problems))
    from workbench_backends.launch import LaunchError, check_stop

    try:
        measured = backend.estimate(model, cluster, workload, plan)
    except LaunchError as exc:
        raise click.ClickException(failure_message(exc, kw["run_dir"])) from None
    check_stop()  # a stop whose exception Python dropped (see stop_on_signals): no outputs then
    run = backend.last_run
    predicted = get_backend(kw["compare"]).estimate(model, cluster, workload, plan) if kw["compare"] else None
    cmp = compare(predicted, measured) if predicted is not None else None
    writers: dict[str | Path, Writer] = {}
    if trace_out is not None:
        from workbench.pipeline.trace import chrome_trace

        text = json.dumps(chrome_trace(measured.timeline, name=f"real run {plan.describe()}"))
        writers[trace_out.path] = text_writer(text)
    if report_out is not None:
        writers[report_out.path] = lambda tmp: _write_report(tmp, measured, predicted, kw)
    check_stop()
    written = write_outputs(writers, force=kw["force"]) if writers else []
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
    for path in written:
        say(f"wrote {path}")


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
