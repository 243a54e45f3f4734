"""The JupyterLab launcher tile: a ``jupyter-server-proxy`` server entry (``jupyter_serverproxy_servers``).

jupyter-server-proxy starts the command on a free port the first time the tile is clicked and proxies
``{base_url}parallelism-workbench/`` to it. ``absolute_url=True`` forwards the full path, which the app
expects because it is served under that ``--prefix``; a cold start of Python, Panel and the presets takes
a few seconds, so the start timeout is 60 s (the proxy's default of 5 s is too short).
The browser's websocket arrives with the Lab page's origin, unknown here, so every origin is accepted;
the app still listens on 127.0.0.1 only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

PROXY_NAME = "parallelism-workbench"
LAUNCHER_TITLE = "Parallelism Workbench"
START_TIMEOUT_S = 60
ICON = Path(__file__).with_name("icon.svg")


def command() -> list[str]:
    """The command jupyter-server-proxy runs; ``{port}`` and ``{base_url}`` are filled in by the proxy."""
    return [
        sys.executable,
        "-m",
        "workbench_cli",
        "app",
        "--port",
        "{port}",
        "--address",
        "127.0.0.1",
        "--prefix",
        "{base_url}" + PROXY_NAME,
        "--allow-websocket-origin",
        "*",
    ]


def setup_workbench_proxy() -> dict[str, Any]:
    """The server-process entry jupyter-server-proxy reads (its documented keys)."""
    entry: dict[str, Any] = {"title": LAUNCHER_TITLE, "enabled": True, "category": "Other"}
    if ICON.is_file():
        entry["icon_path"] = str(ICON)
    return {
        "command": command(),
        "absolute_url": True,
        "timeout": START_TIMEOUT_S,
        "new_browser_tab": False,
        "launcher_entry": entry,
    }
