"""The ``workbench`` command line: one click group, one module per family of commands.

Each command module exposes ``register(group)``; add a module to ``COMMAND_MODULES`` to plug it in.
Bad input ends in one line on stderr and a non-zero exit, never a traceback (set ``WORKBENCH_DEBUG=1``
to see one).
"""

from __future__ import annotations

import importlib
import os
import sys

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
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="parallelism-workbench")
def cli() -> None:
    """Parallelism planning workbench: model, cluster and plan in; cost, timeline and memory out."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(cli)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. Exit codes: 0 ok, 1 bad input or failed run, 2 usage error."""
    try:
        cli.main(args=argv, standalone_mode=False, prog_name="workbench")
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("workbench: aborted", err=True)
        sys.exit(1)
    except (ValueError, OSError, LookupError) as exc:
        if os.environ.get("WORKBENCH_DEBUG"):
            raise
        click.echo(f"workbench: error: {_one_line(exc)}", err=True)
        sys.exit(1)
    except Exception as exc:  # a bug of ours: still one line, with how to see more
        if os.environ.get("WORKBENCH_DEBUG"):
            raise
        click.echo(
            f"workbench: internal error ({type(exc).__name__}): {_one_line(exc)} "
            "(set WORKBENCH_DEBUG=1 for the traceback)",
            err=True,
        )
        sys.exit(1)


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, KeyError) and exc.args:
        text = str(exc.args[0])
    return " ".join(text.split())
