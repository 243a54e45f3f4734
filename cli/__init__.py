"""The ``workbench`` command line: one click group, one module per family of commands.

Each command module exposes ``register(group)``; add a module to ``COMMAND_MODULES`` to plug it in, and
its commands to ``COMMAND_HELP`` (name -> (module, first sentence of the help)) so that ``workbench --help``
lists them without importing it (tests/test_cli_lazy.py checks the table against the commands). A command's
module is imported when the command runs or its own help is asked for: ``workbench --help`` imports click
and this file only, not the core, polars or numpy (0.6 CPU-s -> about 0.1 s; benchmarks/bench_cli_help.py).
Bad input ends in one line on stderr and a non-zero exit, never a traceback (set ``WORKBENCH_DEBUG=1``
to see one).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

COMMAND_MODULES: tuple[str, ...] = (
    "workbench_cli.catalog_cmds",
    "workbench_cli.schedule_cmd",
    "workbench_cli.estimate_cmd",
    "workbench_cli.validate_cmd",
    "workbench_cli.app_cmd",
    "workbench_cli.profile_cmd",
    "workbench_cli.run_cmd",
    "workbench_cli.plan_cmd",
    "workbench_cli.microbench_cmd",
    "workbench_cli.collective_cmd",
    "workbench_cli.serve_cmd",
    "workbench_cli.mixed_cmd",
    "workbench_cli.swarm_cmd",
    "workbench_cli.launch_cmd",
)

COMMAND_HELP: dict[str, tuple[str, str]] = {
    "clusters": ("workbench_cli.catalog_cmds", "List the cluster presets and their network levels."),
    "devices": (
        "workbench_cli.catalog_cmds",
        "List the device presets (dense peaks) and where each one's kernel table comes from.",
    ),
    "frameworks": (
        "workbench_cli.catalog_cmds",
        "List the framework profiles (how a software stack runs a plan), or show one with every field's value, the fitted value in use and its source.",
    ),
    "models": (
        "workbench_cli.catalog_cmds",
        "List the model presets (and the architecture families the config readers know).",
    ),
    "show": ("workbench_cli.catalog_cmds", "Show one preset or file in detail."),
    "schedule": (
        "workbench_cli.schedule_cmd",
        "Per-rank action order, makespan, the three bubble figures and the peak in-flight micro-batches.",
    ),
    "estimate": (
        "workbench_cli.estimate_cmd",
        "Estimate step time, throughput, MFU and memory of one parallel plan.",
    ),
    "validate": (
        "workbench_cli.validate_cmd",
        "Run the analytic model on every row of a validation file and print the errors (with --cv source: the out-of-sample errors, in-sample beside them).",
    ),
    "app": ("workbench_cli.app_cmd", "Serve the Parallelism Workbench web app until interrupted (Ctrl-C)."),
    "calibrate": (
        "workbench_cli.profile_cmd",
        "Fit a device's kernel table (GEMM curve, attention and HBM fractions) to a measured per-op profile, starting from a microbench or published table; write the table (``--kernels`` of estimate, plan and validate reads it); print the error before and after.",
    ),
    "profile": (
        "workbench_cli.profile_cmd",
        "Measure forward, backward-input, backward-weight and fused backward of every op kind of a model at every (tp, micro-batch, seq-len) shape on this device; write a profile folder.",
    ),
    "run": (
        "workbench_cli.run_cmd",
        "Run the plan for real (torchrun on this machine) with a shrunk model; measured beside predicted.",
    ),
    "plan": (
        "workbench_cli.plan_cmd",
        "Search every parallel plan and rank them (closed-form screen, top plans refined).",
    ),
    "microbench": (
        "workbench_cli.microbench_cmd",
        "Measure GEMM efficiency by size and dtype, causal SDPA attention forward/backward by sequence length and head dim, and copy bandwidth on this device; write a kernel table (fractions of the dense peak).",
    ),
    "collective": (
        "workbench_cli.collective_cmd",
        "Time of one collective, with the algorithm and protocol NCCL would pick, and nccl-tests' algbw/busbw.",
    ),
    "serve": (
        "workbench_cli.serve_cmd",
        "Serving plans: requests simulated on engines priced with the same cost model as training.",
    ),
    "diloco": (
        "workbench_cli.mixed_cmd",
        "DiLoCo-style local SGD over a slow link: time per token and traffic against synchronous data parallelism.",
    ),
    "export": (
        "workbench_cli.launch_cmd",
        "Write the files that launch one plan on a training stack, with the prediction they came from.",
    ),
    "compare": (
        "workbench_cli.launch_cmd",
        "Lay what a real run printed (Megatron-LM/NeMo or torchtitan log, vLLM/SGLang benchmark JSON, workbench run record) beside the prediction it was exported with.",
    ),
    "swarm": (
        "workbench_cli.swarm_cmd",
        "SWARM parallelism over slow, unreliable links: per-stage throughput (compute- or link-bound), the bottleneck, tokens/s, work lost to failures, and the same peers in a synchronous pipeline on a fast fabric.",
    ),
}
"""Command name -> (its module, the first sentence of its help, which ``workbench --help`` shortens)."""


class WorkbenchGroup(click.Group):
    """The ``workbench`` group. In click's standalone mode (the console script, ``python -m workbench_cli``,
    ``click.testing.CliRunner``) every error is printed by ``run`` as one line with the one prefix
    ``workbench COMMAND: error:``, never click's ``Error:`` nor a traceback."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        run(list(sys.argv[1:] if args is None else args), **extra)
        return None

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_unlisted()
        return sorted(set(self.commands) | set(COMMAND_HELP))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        """The command, its module imported on first use (every module of ``COMMAND_MODULES`` that
        ``COMMAND_HELP`` does not name is imported when a name is not found)."""
        if cmd_name not in self.commands:
            if cmd_name in COMMAND_HELP:
                self._load(COMMAND_HELP[cmd_name][0])
            else:
                self._load_unlisted()
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with a stand-in holding the table's sentence for each command not loaded yet
        (click shortens it to the width exactly as it would the command's own help)."""
        names = self.list_commands(ctx)
        shown = {n: self.commands.get(n) or click.Command(n, help=COMMAND_HELP[n][1]) for n in names}
        rows = [(n, c) for n, c in shown.items() if not c.hidden]
        if rows:
            limit = formatter.width - 6 - max(len(n) for n, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(n, c.get_short_help_str(limit)) for n, c in rows])

    def _load(self, module: str) -> None:
        if module not in self._loaded:
            self._loaded.add(module)
            importlib.import_module(module).register(self)

    def _load_unlisted(self) -> None:
        listed = {module for module, _ in COMMAND_HELP.values()}
        for module in COMMAND_MODULES:
            if module not in listed:
                self._load(module)

    @property
    def _loaded(self) -> set[str]:
        return self.__dict__.setdefault("_loaded_modules", set())


@click.group(
    cls=WorkbenchGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(package_name="parallelism-workbench")
def cli() -> None:
    """Parallelism planning workbench: model, cluster and plan in; cost, timeline and memory out."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. Exit codes: 0 ok, 1 bad input or failed run, 2 usage error.

    Every error is one line on stderr, ``workbench COMMAND: error: MESSAGE``, with control characters of
    the message (a file name holding ESC or a newline) escaped."""
    run(sys.argv[1:] if argv is None else list(argv))


def run(args: list[str], **extra: Any) -> None:
    """Run ``workbench ARGS``; on any error print ``workbench COMMAND: error: MESSAGE`` and exit non-zero
    (click's usage errors 2, everything else 1). Commands signal refusals with ``click.ClickException``
    (or ``click.UsageError``/``click.BadParameter`` for bad options) or ``ValueError``; all read alike."""
    prog = _command_path(args)
    try:
        click.Group.main(cli, args=args, standalone_mode=False, prog_name="workbench", **extra)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):  # click >= 8.2, bare group
            exc.show()  # the group's help on stderr, not an error line
            sys.exit(exc.exit_code)
        where = exc.ctx.command_path if exc.ctx is not None else prog
        _fail(where, f"{exc.format_message()} (see '{where} -h')", exc.exit_code)
    except click.ClickException as exc:
        _fail(prog, exc.format_message(), exc.exit_code)
    except click.exceptions.Abort:
        _fail(prog, "aborted", 1)
    except (ValueError, OSError, LookupError) as exc:
        if os.environ.get("WORKBENCH_DEBUG"):
            raise
        _fail(prog, _message(exc), 1)
    except Exception as exc:  # a bug of ours: still one line, with how to see more
        if os.environ.get("WORKBENCH_DEBUG"):
            raise
        _fail(
            prog,
            f"internal error ({type(exc).__name__}): {_message(exc)} (set WORKBENCH_DEBUG=1 for the traceback)",
            1,
        )


def _fail(prog: str, message: str, code: int) -> NoReturn:
    from workbench_cli._common import shown

    click.echo(f"{prog}: error: {shown(message.strip())}", err=True)
    sys.exit(code)


def _command_path(args: list[str]) -> str:
    """``workbench`` plus the (sub)command names at the front of ``args`` (``workbench show model``)."""
    path: list[str] = ["workbench"]
    group: click.Group = cli
    for arg in args:
        if arg.startswith("-"):
            continue
        cmd = group.get_command(None, arg)
        if cmd is None:
            break
        path.append(arg)
        if not isinstance(cmd, click.Group):
            break
        group = cmd
    return " ".join(path)


def _message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])
    return text
