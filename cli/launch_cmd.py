"""``workbench export`` (a training plan -> a stack's launch files), ``workbench serve export`` (a serving plan ->
an engine's launch files) and ``workbench compare`` (a real run's output beside its prediction)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import click
from workbench_cli._common import Output, check_outputs, say, shown, write_folder
from workbench_cli.estimate_cmd import _plan_options, estimate_plan

from workbench.launch.export import EXPORT_FILES, PREDICTION_FILE
from workbench.launch.stacks import TRAINING_STACKS, LaunchFolder, ModelRef, hf_id_from_source

REQUIRED_PLAN_OPTIONS = ("model", "cluster", "seq_len", "global_batch")
"""Plan options that are required unless the plan comes from ``--from FILE.workbench.json``."""


def model_ref(name_or_path: str) -> ModelRef:
    """How the launch files name ``--model``: a preset's HF id (from its ``_source``), or the config path."""
    from workbench.presets.catalog import model_metadata, preset_names

    if name_or_path in preset_names("model"):
        source = str(model_metadata(name_or_path).get("source", ""))
        return ModelRef(name=name_or_path, hf_id=hf_id_from_source(source))
    if Path(name_or_path).is_file():
        return ModelRef(name=Path(name_or_path).parent.name or name_or_path, config_path=str(name_or_path))
    return ModelRef(name=name_or_path)


def target_stack(to: str | None, framework_id: str | None) -> str:
    """``--to``, else the stack of the framework profile (``workbench.launch.stacks.stack_for_framework``).
    A ``--to`` of another stack than the profile's is refused: the prediction priced that profile's execution."""
    from workbench.launch.stacks import stack_for_framework
    from workbench.presets.frameworks import DEFAULT_FRAMEWORK

    if to is None:
        return stack_for_framework(framework_id or DEFAULT_FRAMEWORK)
    if framework_id is not None:
        try:
            profile_stack = stack_for_framework(Path(framework_id).stem)
        except ValueError:  # a profile of no stack (generic, ...): any --to
            return to
        if profile_stack.split("-")[0] != to.split("-")[0]:
            raise click.UsageError(
                f"--framework {framework_id} prices {profile_stack}'s execution; export it --to {profile_stack}, "
                f"or estimate with a {to} profile"
            )
    return to


def write_launch_folder(folder: LaunchFolder, out: str, force: bool) -> list[Path]:
    """Write the folder atomically (a temporary folder beside ``out``, renamed; nothing left on failure)."""

    def fill(tmp: Path) -> None:
        for name, text in folder.files.items():
            (tmp / name).write_text(text, encoding="utf-8")
            if name in folder.executable:
                os.chmod(tmp / name, 0o755)

    return write_folder(out, fill, force=force, marker=PREDICTION_FILE, owned=EXPORT_FILES)


def _from_file(path: str) -> tuple[Any, str | None, ModelRef]:
    """(estimate, framework id, model ref) of the best plan in a ``.workbench.json`` file."""
    from workbench_widgets.workbench_file import read_workbench_file

    saved = read_workbench_file(Path(path))
    words = shlex.split(saved.command) if saved.command else []
    framework = next((b for a, b in zip(words, words[1:], strict=False) if a == "--framework"), None)
    model = next((b for a, b in zip(words, words[1:], strict=False) if a == "--model"), None)
    est = saved.estimates[0]
    return est, framework, model_ref(model or est.model.name)


def export_estimate(
    est: Any, stack: str, out: str, force: bool, *, framework: str | None, ref: ModelRef, command: str
) -> list[Path]:
    """Export ``est`` for ``stack`` into ``out``; the one path shared by ``export`` and ``plan --export``."""
    from workbench.launch.export import export_training
    from workbench.presets.frameworks import load_framework

    profile = load_framework(framework) if framework else None
    folder = export_training(est, stack, ref, framework=profile, command=command)
    return write_launch_folder(folder, out, force)


@click.command("export")
@click.option(
    "--to",
    "to",
    type=click.Choice(TRAINING_STACKS),
    default=None,
    help="Stack to launch on (default: the --framework profile's stack).",
)
@click.option(
    "--out", "out", required=True, help="Folder to write (new or empty; --force refills an earlier export)."
)
@click.option(
    "--from",
    "from_file",
    default=None,
    help="Export the best plan of a FILE.workbench.json instead of the plan options.",
)
@click.option(
    "--framework", default=None, help="Framework profile id or TOML path (see `workbench frameworks`)."
)
@click.option("--force", is_flag=True, help="Replace the files of an earlier export in --out.")
@_plan_options
def export_cmd(
    to: str | None, out: str, from_file: str | None, framework: str | None, force: bool, **kw: Any
) -> None:
    """Write the files that launch one plan on a training stack, with the prediction they came from."""
    from workbench_widgets.report import cli_command

    check_outputs(Output("--out", Path(out), folder=True, marker=PREDICTION_FILE), force=force)
    if from_file is not None:
        est, saved_framework, ref = _from_file(from_file)
        framework = framework or saved_framework
    else:
        missing = [f"--{k.replace('_', '-')}" for k in REQUIRED_PLAN_OPTIONS if kw.get(k) is None]
        if missing:
            raise click.UsageError(
                f"missing option(s) {', '.join(missing)} (or give --from FILE.workbench.json)"
            )
        est = estimate_plan(kw, framework=framework)
        ref = model_ref(kw["model"])
    stack = target_stack(to, framework)
    export_estimate(est, stack, out, force, framework=framework, ref=ref, command=cli_command())
    say(f"{stack} launch files for {est.plan.describe()} written to {shown(out)} (read its README.md first)")


for _param in export_cmd.params:  # the plan options are required only without --from
    if _param.name in REQUIRED_PLAN_OPTIONS:
        _param.required = False


def _serve_export(out: str, force: bool, **kw: Any) -> None:
    """Write the files that start one serving plan on its engine, with the prediction they came from."""
    from workbench_cli.serve_cmd import serving_inputs
    from workbench_widgets.report import cli_command

    from workbench.launch.export import prediction_record
    from workbench.launch.serving import export_serving
    from workbench.presets.engines import load_engine
    from workbench.serving.estimate import serve_estimate

    check_outputs(Output("--out", Path(out), folder=True, marker=PREDICTION_FILE), force=force)
    engine = load_engine(kw["engine"]).engine
    if engine not in ("vllm", "sglang", "trtllm"):
        raise click.BadParameter(
            f"engine profile {kw['engine']!r} runs on {engine!r}; name a vLLM, SGLang or TensorRT-LLM profile "
            "(see `workbench engines`)",
            param_hint="--engine",
        )
    model, cluster, plan, workload, calibration = serving_inputs(kw)
    est = serve_estimate(model, cluster, plan, workload, calibration)
    ref = model_ref(kw["model"])
    specs = {
        "plan": {"describe": plan.describe(), "num_devices": plan.num_devices},
        "workload": {"input_tokens": kw["input_tokens"], "output_tokens": kw["output_tokens"]},
    }
    record = prediction_record(
        "serving", est.summary(), stack=engine, model=ref, specs=specs, command=cli_command()
    )
    spec = plan.speculative
    draft = model_ref(spec.draft_model) if spec is not None and spec.draft_model else None
    write_launch_folder(export_serving(plan, engine, ref, record, draft), out, force)
    say(f"{engine} launch files for {plan.describe()} written to {shown(out)} (read its README.md first)")


def _serve_export_command() -> click.Command:
    """``serve export``: the options of ``serve estimate`` (the same objects, not copies of their definitions)
    less its outputs, plus --out and --force."""
    from workbench_cli.serve_cmd import serve_estimate_cmd

    params = [p for p in serve_estimate_cmd.params if p.name not in ("as_json", "report_path", "force")]
    params += [
        click.Option(["--out"], required=True, help="Folder to write (new or empty)."),
        click.Option(["--force"], is_flag=True, help="Replace the files of an earlier export in --out."),
    ]
    return click.Command(
        "export",
        callback=_serve_export,
        params=params,
        help="Write the command that starts a serving plan on its engine (vLLM, SGLang, TensorRT-LLM).",
    )


@click.command("compare")
@click.argument("run_output")
@click.option(
    "--prediction",
    "prediction_path",
    default=None,
    help="prediction.json of the export (default: the one beside RUN_OUTPUT or in its folder's parent).",
)
@click.option(
    "--append-row", "append_row", default=None, help="Append the run as a row to this validation CSV."
)
@click.option("--row-id", default=None, help="Id of the appended row (default: OWN-<n>).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--report", "report_path", default=None, help="Write the comparison as an HTML page.")
@click.option("--force", is_flag=True, help="Overwrite an existing --report file.")
def compare_cmd(
    run_output: str,
    prediction_path: str | None,
    append_row: str | None,
    row_id: str | None,
    as_json: bool,
    report_path: str | None,
    force: bool,
) -> None:
    """Lay what a real run printed (Megatron-LM/NeMo or torchtitan log, vLLM/SGLang benchmark JSON, workbench run
    record) beside the prediction it was exported with."""
    from workbench_cli._common import echo_json, print_table

    from workbench.launch.compare import check_prediction, compare_run
    from workbench.launch.runlogs import read_run_output
    from workbench.specs.files import check_input_file

    text = check_input_file(run_output, "run output").read_text(encoding="utf-8", errors="replace")
    measured = read_run_output(text, run_output)
    path = Path(prediction_path) if prediction_path else _find_prediction(Path(run_output))
    try:
        record = json.loads(check_input_file(path, "prediction.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    prediction = check_prediction(record, str(path))
    rows = compare_run(measured, prediction, run_output)
    if report_path is not None:
        _write_compare_report(report_path, force, rows, prediction, measured, run_output, path)
    if append_row is not None:
        _append_row(measured, prediction, append_row, row_id, run_output)
    if as_json:
        echo_json(
            {
                "source": measured.source,
                "num_steps": measured.num_steps,
                "notes": list(measured.notes),
                "prediction": str(path),
                "rows": [
                    {
                        "metric": r.metric,
                        "measured": r.measured,
                        "predicted": r.predicted,
                        "error_frac": r.error_frac,
                    }
                    for r in rows
                ],
            }
        )
        return
    say(f"{measured.source} output {shown(run_output)} ({measured.num_steps} steady steps) vs {shown(path)}")
    print_table(
        "Measured vs predicted",
        ["metric", "measured", "predicted", "error"],
        [[r.metric, f"{r.measured:.4g}", f"{r.predicted:.4g}", f"{r.error_frac:+.1%}"] for r in rows],
    )
    for note in measured.notes:
        say(f"note: {note}")


def _write_compare_report(
    report_path: str,
    force: bool,
    rows: Any,
    prediction: dict[str, Any],
    measured: Any,
    run_output: str,
    prediction_path: Path,
) -> None:
    """The compare report (``workbench_widgets.report.render_compare_report``), written before anything else, so
    a refused overwrite leaves no appended row behind."""
    from workbench_cli._common import text_writer, write_outputs
    from workbench_widgets.report import cli_command, render_compare_report

    run = f"{measured.source} output {run_output}, the mean of {measured.num_steps} steady steps"
    html = render_compare_report(
        rows, prediction, run=run, prediction_name=str(prediction_path), command=cli_command()
    )
    for path in write_outputs({Path(report_path): text_writer(html)}, force=force):
        say(f"wrote {shown(path)}", err=True)


def _find_prediction(run_output: Path) -> Path:
    for folder in (run_output.parent, run_output.parent.parent):
        if (folder / PREDICTION_FILE).is_file():
            return folder / PREDICTION_FILE
    raise click.UsageError(f"no {PREDICTION_FILE} beside {run_output}; give --prediction FILE")


def _append_row(
    measured: Any, prediction: dict[str, Any], csv_path: str, row_id: str | None, run: str
) -> None:
    """Append the run to a validation CSV (created with the schema's header when missing), then read the file back
    with the validation reader so a row that breaks the schema is never left there."""
    import csv
    import io

    from workbench_cli._common import atomic_write_text

    from workbench.launch.compare import validation_row
    from workbench.validate import COLUMNS, read_rows

    target = Path(csv_path)
    old = target.read_text(encoding="utf-8") if target.is_file() else ""
    n = max(old.count("\n") - 1, 0) + 1  # data rows so far, plus this one
    row = validation_row(measured, prediction, row_id=row_id or f"OWN-{n:03d}", source=f"own run [{run}]")
    header = next(csv.reader([old.splitlines()[0]])) if old else list(COLUMNS)
    missing = [c for c in header if c not in row and c in COLUMNS]
    if missing:
        raise click.ClickException(f"{csv_path}: the row lacks column(s) {', '.join(missing)}")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n", extrasaction="ignore")
    if not old:
        writer.writeheader()
    writer.writerow({c: row.get(c, "") for c in header})
    atomic_write_text(target, old + buf.getvalue(), force=True)
    try:
        read_rows(target)
    except ValueError:
        atomic_write_text(target, old, force=True) if old else target.unlink()
        raise


def register(group: click.Group) -> None:
    group.add_command(compare_cmd)
    group.add_command(export_cmd)
    serve = group.get_command(
        click.Context(group), "serve"
    )  # the workbench group loads it when not yet loaded
    if isinstance(serve, click.Group):  # else serve_cmd.register adds `serve export` when it registers
        add_serve_export(serve)


def add_serve_export(serve: click.Group) -> None:
    """``workbench serve export`` on the serve group (once; ``serve_cmd.register`` and ``register`` both call it)."""
    if "export" not in serve.commands:
        serve.add_command(_serve_export_command())
