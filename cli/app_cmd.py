"""``workbench app``: serve the interactive Panel workbench (composer, Plan / Search / Compare tabs).

The command only parses options; the app lives in ``workbench_widgets.app`` and is imported when the command runs
(like ``estimate --report`` imports ``workbench_widgets.report``), so ``import workbench`` stays free of UI libraries.
"""

from __future__ import annotations

import importlib
from typing import Any

import click
from workbench_cli._common import say

APP_EXTRA_HINT = "pip install 'parallelism-workbench[app]'"
"""How to install what ``workbench app`` needs beyond the core (Panel): the ``[app]`` extra."""

_OWN_PACKAGES = ("workbench", "workbench_cli", "workbench_widgets", "workbench_backends")


def register(group: click.Group) -> None:
    group.add_command(app_cmd)


def _load_server() -> Any:
    """``workbench_widgets.app.server``; a missing third-party module (Panel on a core-only install) is a
    ``click.ClickException`` naming the extra to install."""
    try:
        return importlib.import_module("workbench_widgets.app.server")
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if not missing or missing in _OWN_PACKAGES:
            raise
        raise click.ClickException(
            f"the web app needs {missing}, which is not installed (the core install has the CLI and the HTML "
            f"reports only); install the app extra: {APP_EXTRA_HINT}"
        ) from None


@click.command("app")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=5006,
    show_default=True,
    help="TCP port (0: any free port).",
)
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="Interface to listen on; the default keeps the app on this machine.",
)
@click.option("--show/--no-show", default=False, show_default=True, help="Open a browser tab.")
@click.option("--prefix", default="", help="URL path prefix, e.g. behind JupyterLab's server proxy.")
@click.option(
    "--allow-websocket-origin",
    "origins",
    multiple=True,
    help="Extra host[:port] allowed to open the app's websocket (repeatable). '*' allows any web site to drive "
    "the app from a page open in the browser: a warning is printed.",
)
def app_cmd(port: int, address: str, show: bool, prefix: str, origins: tuple[str, ...]) -> None:
    """Serve the Parallelism Workbench web app until interrupted (Ctrl-C)."""
    if not address.strip():
        raise click.BadParameter("must be a host name or an IP address", param_hint="--address")
    wild = [o for o in origins if "*" in o]
    if wild:
        say(
            f"workbench app: warning: --allow-websocket-origin {' '.join(wild)} lets pages of other web sites "
            "open in your browser drive this app; use it only on a machine and network you trust",
            err=True,
        )
    server = _load_server()
    server.run(
        port=port,
        address=address,
        show=show,
        prefix=prefix,
        extra_origins=list(origins),
        announce=lambda url: say(f"Parallelism Workbench at {url} (Ctrl-C stops it)"),
    )
