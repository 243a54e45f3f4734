"""``workbench export`` (a training plan -> a stack's launch files), ``workbench serve export`` (a serving plan ->
an engine's launch files) and ``workbench compare`` (a real run's output beside its prediction)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import click
from workbench_cli._common import Output, check_outputs, shown, write_folder
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
    """``--to``, else the stack of the framework profile (``workbench.launch.stacks.stack_for_framework``)."""
    from workbench.launch.stacks import stack_for_framework
    from workbench.presets.frameworks import DEFAULT_FRAMEWORK

    return to if to is not None else stack_for_framework(framework_id or DEFAULT_FRAMEWORK)


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
    click.echo(
        f"{stack} launch files for {est.plan.describe()} written to {shown(out)} (read its README.md first)"
    )


for _param in export_cmd.params:  # the plan options are required only without --from
    if _param.name in REQUIRED_PLAN_OPTIONS:
        _param.required = False


def register(group: click.Group) -> None:
    group.add_command(export_cmd)
