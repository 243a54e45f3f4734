"""Serving the app with Panel's server (the machinery behind ``panel serve``).

``run`` blocks (the ``workbench app`` command); ``ThreadedApp`` is a served app in a daemon thread for tests
and notebooks, stopped with ``.stop()``. Both listen on ``address`` only (default 127.0.0.1) and call
``workbench_widgets.app.app.build_app`` once per browser session.

Who may drive a session: the session's websocket is accepted only from a page whose ``Origin`` is the app's
own ``host:port`` (this address, and ``localhost``/``127.0.0.1`` when it is one of them) plus the hosts
given in ``extra_origins``; any other origin gets HTTP 403 at the handshake, so a page of another web site
open in the same browser cannot drive the app (listening on 127.0.0.1 alone does not stop that). Behind
JupyterLab the proxy presents the app's own origin (``launcher``).

Message size: the server accepts websocket messages up to WEBSOCKET_MAX_MESSAGE_BYTES (4 MiB; bokeh's
default is 20 MB). The only big message a page sends is an upload, which the upload control keeps under
``store.MAX_UPLOAD_BYTES`` (1 MiB, 1.4 MB as base64) in the browser; a bigger message makes tornado close
that session's websocket (code 1009), and the page then says the connection was lost.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import panel as pn
from workbench_widgets.app.app import TITLE, build_app, warm_up

WEBSOCKET_MAX_MESSAGE_BYTES = 4 * 2**20
"""Largest websocket message the server accepts (tornado's ``websocket_max_message_size``): four times the
upload limit as base64."""


def normalise_prefix(prefix: str) -> str:
    """``/a/b`` form of a URL prefix ('' for none): one leading slash, no trailing one."""
    parts = [p for p in prefix.split("/") if p]
    return "/" + "/".join(parts) if parts else ""


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``address`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def websocket_origins(address: str, port: int, extra: list[str] | None = None) -> list[str]:
    """Hosts allowed to open the session websocket: this address (and localhost) on ``port``, plus ``extra``."""
    hosts = {address, "localhost", "127.0.0.1"} if address in ("127.0.0.1", "localhost") else {address}
    return sorted(f"{h}:{port}" for h in hosts) + list(extra or [])


def url_of(address: str, port: int, prefix: str = "") -> str:
    return f"http://{address}:{port}{normalise_prefix(prefix)}/"


def _serve_kwargs(port: int, address: str, prefix: str, extra_origins: list[str] | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "port": port,
        "address": address,
        "title": TITLE,
        "show": False,
        "verbose": False,
        "websocket_origin": websocket_origins(address, port, extra_origins),
        "websocket_max_message_size": WEBSOCKET_MAX_MESSAGE_BYTES,
    }
    if prefix:
        kwargs["prefix"] = normalise_prefix(prefix)
    return kwargs


def run(
    *,
    port: int,
    address: str,
    show: bool = False,
    prefix: str = "",
    extra_origins: list[str] | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve until interrupted (port 0: a free port); ``announce`` receives the app's URL once it is bound.
    Meanwhile a thread runs the search new sessions open with (``app.warm_up``).

    Raises OSError when the port is taken.
    """
    from panel.io.server import get_server

    port = port or free_port(address)
    server = get_server(build_app, start=False, **_serve_kwargs(port, address, prefix, extra_origins))
    server.start()
    threading.Thread(target=warm_up, name="workbench-warm-up", daemon=True).start()
    announce(url_of(address, port, prefix))
    if show:
        server.io_loop.add_callback(server.show, normalise_prefix(prefix) + "/")
    try:
        server.io_loop.start()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


class ThreadedApp:
    """A served app in a daemon thread: ``url``, ``port`` and ``stop()``; use as a context manager."""

    def __init__(
        self, *, port: int = 0, address: str = "127.0.0.1", prefix: str = "", timeout_s: float = 30.0
    ):
        self.address, self.prefix = address, prefix
        self.port = port or free_port(address)
        self.url = url_of(address, self.port, prefix)
        self.thread = pn.serve(build_app, threaded=True, **_serve_kwargs(self.port, address, prefix, None))
        wait_for_http(self.url, timeout_s)

    def stop(self) -> None:
        self.thread.stop()

    def __enter__(self) -> ThreadedApp:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def wait_for_http(url: str, timeout_s: float) -> str:
    """GET ``url`` until it answers 200 (returns the body) or ``timeout_s`` passes (TimeoutError)."""
    deadline, last = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (a local URL we built)
                return resp.read().decode("utf-8", "replace")
        except OSError as exc:
            last = str(exc)
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s ({last})")
