"""Serving the app with Panel's server (the machinery behind ``panel serve``).

``run`` blocks (the ``workbench app`` command); ``ThreadedApp`` is a served app in a daemon thread for tests
and notebooks, stopped with ``.stop()``. Both listen on ``address`` only (default 127.0.0.1) and call
``workbench_widgets.app.app.build_app`` once per browser session.

Who may drive a session: the session's websocket is accepted only from a page whose ``Origin`` is the app's
own ``host:port`` (this address, and ``localhost``/``127.0.0.1`` when it is one of them) plus the hosts
given in ``extra_origins``; any other origin gets HTTP 403 at the handshake, so a page of another web site
open in the same browser cannot drive the app (listening on 127.0.0.1 alone does not stop that). Behind
JupyterLab the proxy presents the app's own origin (``launcher``).

Which names may reach it (DNS rebinding): every request, the page, the static files and the websocket alike,
is answered only when its ``Host`` header names the address the app listens on (``localhost``, ``127.0.0.1``
and ``[::1]`` when that is a loopback address) or a host given in ``extra_origins``; any other Host gets HTTP
403 before a handler, a session or a websocket exists (``guard_hosts``). A page of ``evil.example`` whose name
the attacker re-points at 127.0.0.1 is same-origin with itself, so the Origin check alone lets it in; its
requests still say ``Host: evil.example`` and are refused. Behind JupyterLab the proxy sends
``Host: 127.0.0.1:{port}`` (``launcher``).

Message size: the server accepts websocket messages up to WEBSOCKET_MAX_MESSAGE_BYTES (4 MiB; bokeh's
default is 20 MB). The only big message a page sends is an upload, which the upload control keeps under
``store.MAX_UPLOAD_BYTES`` (1 MiB, 1.4 MB as base64) in the browser; a bigger message makes tornado close
that session's websocket (code 1009), and the page then says the connection was lost.
"""

from __future__ import annotations

import asyncio
import fnmatch
import gc
import ipaddress
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from tornado.httputil import HTTPServerRequest
from tornado.ioloop import IOLoop
from tornado.web import Application, RequestHandler
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


def _hostname(host: str) -> str:
    """The name part of a ``Host`` header or an origin (``host``, ``host:port``, ``[v6]:port``, a bare IPv6
    address), lower case, without brackets; a scheme in front (``http://``) is dropped."""
    host = host.strip().lower().rpartition("://")[2]
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def _is_loopback(address: str) -> bool:
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def allowed_hosts(address: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names (no port; ``fnmatch`` patterns allowed from ``extra``) the app answers: the listening
    address, the loopback names when it is a loopback address, and the hosts of ``extra`` (the
    ``--allow-websocket-origin`` values, ``host[:port]``)."""
    names = {_hostname(address)}
    if _is_loopback(_hostname(address)):
        names |= {"localhost", "127.0.0.1", "::1"}
    names |= {_hostname(o) for o in extra if o.strip()}
    return frozenset(names)


def host_allowed(host_header: str, allowed: frozenset[str]) -> bool:
    """Whether a request's ``Host`` header names one of ``allowed`` (the port is not compared: what a DNS
    rebinding changes is the name)."""
    name = _hostname(host_header)
    return bool(name) and any(name == a or fnmatch.fnmatchcase(name, a) for a in allowed)


class _RefusedHost(RequestHandler):
    """HTTP 403 for a request whose Host is not the app's (any method, websocket handshakes included)."""

    def prepare(self) -> None:
        self.set_status(403)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish("403: this app answers only to its own address (Host header refused)\n")


def guard_hosts(app: Application, allowed: frozenset[str]) -> None:
    """Make the tornado application ``app`` answer HTTP 403 to every request whose Host is not in ``allowed``
    (``host_allowed``), before any of its handlers (page, static files, websocket) sees the request."""
    find_handler = app.find_handler

    def guarded(request: HTTPServerRequest, **kwargs: Any) -> Any:
        if not host_allowed(request.headers.get("Host", ""), allowed):
            return app.get_handler_delegate(request, _RefusedHost)
        return find_handler(request, **kwargs)

    app.find_handler = guarded  # type: ignore[method-assign]


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
    port = port or free_port(address)
    server = make_server(port=port, address=address, prefix=prefix, extra_origins=extra_origins)
    freeze_startup_heap()
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


def make_server(
    *,
    port: int,
    address: str,
    prefix: str = "",
    extra_origins: list[str] | None = None,
    loop: IOLoop | None = None,
    **server_kwargs: Any,
) -> Any:
    """Panel's (bokeh's) server for ``build_app``, not started, with its Host guard (``guard_hosts``);
    ``server_kwargs`` go to bokeh's ``Server`` (e.g. ``unused_session_lifetime_milliseconds``)."""
    from panel.io.server import get_server

    kwargs = _serve_kwargs(port, address, prefix, extra_origins) | server_kwargs
    server = get_server(build_app, start=False, loop=loop, **kwargs)
    guard_hosts(server._tornado, allowed_hosts(address, extra_origins or ()))
    return server


_startup_frozen = threading.Lock()


def freeze_startup_heap() -> bool:
    """Collect the garbage there is, then move every object alive now (the modules, classes and functions the
    server was built from) into the garbage collector's permanent generation, which no collection walks; once
    per process (True the first time). Sessions come later and stay collectable. Called by :func:`run` only,
    whose process serves the app and nothing else: a notebook's ``ThreadedApp`` shares the user's kernel,
    whose heap it must not freeze.

    Why: a full (generation 2) collection walks every tracked object and runs on whichever thread allocates
    when it falls due, now and then on the app's thread in the middle of a control change. With the startup
    heap in it one took 160-220 ms (360-450k tracked objects, 2026-12-07, the 2-core shared machine) and a pp
    change 316-361 ms instead of ~120 ms; with the heap frozen the full collections while serving took 13-56 ms
    (``benchmarks/bench_app_latency.py``, two paired runs). ``gc.freeze`` is Python's own answer for a
    long-lived heap built at start (https://docs.python.org/3/library/gc.html#gc.freeze)."""
    if not _startup_frozen.acquire(blocking=False):  # held for good: the first call froze the heap
        return False
    gc.collect()
    gc.freeze()
    return True


class ThreadedApp:
    """A served app in a daemon thread with its own event loop: ``url``, ``port``, ``server`` and ``stop()``;
    use as a context manager. ``server_kwargs`` go to bokeh's ``Server``."""

    def __init__(
        self,
        *,
        port: int = 0,
        address: str = "127.0.0.1",
        prefix: str = "",
        timeout_s: float = 30.0,
        **server_kwargs: Any,
    ):
        self.address, self.prefix = address, prefix
        self.port = port or free_port(address)
        self.url = url_of(address, self.port, prefix)
        self._loop = IOLoop(make_current=False)
        started = threading.Event()
        failed: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(self._loop.asyncio_loop)
            try:
                self.server = make_server(
                    port=self.port, address=address, prefix=prefix, loop=self._loop, **server_kwargs
                )
                self.server.start()
            except BaseException as exc:  # said by __init__ in the calling thread
                failed.append(exc)
                return
            finally:
                started.set()
            self._loop.start()
            self._loop.close(all_fds=True)

        self.thread = threading.Thread(target=serve, name="workbench-app", daemon=True)
        self.thread.start()
        started.wait(timeout_s)
        if failed:
            raise failed[0]
        wait_for_http(self.url, timeout_s)

    def stop(self) -> None:
        def shut() -> None:
            self.server.stop()
            self._loop.stop()

        if self.thread.is_alive():
            self._loop.add_callback(shut)
            self.thread.join(10)

    def __enter__(self) -> ThreadedApp:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def wait_for_http(url: str, timeout_s: float) -> str:
    """GET ``url`` until it answers 200 (returns the body) or ``timeout_s`` passes (TimeoutError)."""
    deadline, last = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        try:  # a page takes long on a loaded machine: wait for it (every GET opens a session)
            wait_s = max(1.0, deadline - time.monotonic())
            with urllib.request.urlopen(url, timeout=wait_s) as resp:  # noqa: S310 (a local URL we built)
                return resp.read().decode("utf-8", "replace")
        except OSError as exc:
            last = str(exc)
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s ({last})")
