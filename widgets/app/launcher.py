"""The JupyterLab launcher tile: a ``jupyter-server-proxy`` server entry (``jupyter_serverproxy_servers``).

jupyter-server-proxy starts the command on a free port the first time the tile is clicked and proxies
``{base_url}parallelism-workbench/`` to it. ``absolute_url=True`` forwards the full path, which the app
expects because it is served under that ``--prefix``; a cold start of Python, Panel and the presets takes
a few seconds, so the start timeout is 60 s (the proxy's default of 5 s is too short).

Origins: the app accepts its session websocket only from its own origin, ``127.0.0.1:{port}`` (no
``--allow-websocket-origin``, and never ``*``, which let a page of any web site open in the browser drive the
app on its local port). The browser's websocket reaches the proxy with the Lab page's origin, which cannot be
known here (host names, reverse proxies, JupyterHub), and the proxy forwards the browser's headers. So the
proxy is told to present the app's own origin instead: ``request_headers_override`` sets
``Origin: http://127.0.0.1:{port}`` on every request it forwards (jupyter-server-proxy >= 4 fills in
``{port}``), which the app's list accepts whatever Host the proxy forwards and whatever the tornado version
(tornado 6.6, installed here, first trusts a forwarded ``Sec-Fetch-Site: same-origin`` or an Origin equal to
the Host; older versions ask bokeh's list for every Origin). That is sound because the proxy only forwards
what the Jupyter server accepted: an authenticated request, whose Origin Jupyter checked unless it carried the
Lab's token (which a page of another site does not have). A page of another site that connects to the app's
port directly keeps its own Origin and gets 403 from the app, which listens on 127.0.0.1 only.

Host: the app answers only requests whose Host names its own address (``server``: no DNS rebinding), while
the proxy forwards the Host the browser sent to the Lab (``hub.example.org`` behind JupyterHub). So the proxy
also sets ``Host: 127.0.0.1:{port}`` (``request_headers``), for pages and websockets alike.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

PROXY_NAME = "parallelism-workbench"
LAB_EXTENSION = "parallelism-workbench"
"""The lab extension's folder name under ``share/jupyter/labextensions`` (its npm package name)."""
LAUNCHER_TITLE = "Parallelism Workbench"
START_TIMEOUT_S = 60
ICON = Path(__file__).with_name("icon.svg")
APP_ORIGIN = "http://127.0.0.1:{port}"
"""The Origin the proxy presents to the app (``{port}`` is filled in by jupyter-server-proxy)."""
APP_HOST = "127.0.0.1:{port}"
"""The Host the proxy presents to the app: the address it listens on."""


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
    ]


def request_headers() -> dict[str, str]:
    """Headers the proxy sets on every request it forwards to the app: the app's own origin and host."""
    return {"Origin": APP_ORIGIN, "Host": APP_HOST}


def lab_extension_installed() -> bool:
    """Whether the prebuilt JupyterLab extension is in one of Jupyter's ``labextensions`` folders."""
    from jupyter_core.paths import jupyter_path

    return any((Path(d) / LAB_EXTENSION / "package.json").is_file() for d in jupyter_path("labextensions"))


def setup_workbench_proxy() -> dict[str, Any]:
    """The server-process entry jupyter-server-proxy reads (its documented keys).

    ``launcher_entry.enabled`` is False when the lab extension is installed: its card replaces the proxy's.
    """
    enabled = not lab_extension_installed()
    entry: dict[str, Any] = {"title": LAUNCHER_TITLE, "enabled": enabled, "category": "Other"}
    if ICON.is_file():
        entry["icon_path"] = str(ICON)
    return {
        "command": command(),
        "absolute_url": True,
        "timeout": START_TIMEOUT_S,
        "new_browser_tab": False,
        "request_headers_override": request_headers(),
        "launcher_entry": entry,
    }
