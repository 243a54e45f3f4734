"""The ``workbench`` command line: one click group, one module per family of commands.

Each command module exposes ``register(group)``; add a module to ``COMMAND_MODULES`` to plug it in.
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


@click.group(
    cls=WorkbenchGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(package_name="parallelism-workbench")
def cli() -> None:
    """Parallelism planning workbench: model, cluster and plan in; cost, timeline and memory out."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(cli)


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
        cmd = group.commands.get(arg)
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
