"""The served app's hard edges (issue 52): it answers only to its own address (no DNS rebinding: the page, the
static files and the websocket refuse another Host), and a closed session is freed (app objects and memory
return after 50 sessions opened and closed)."""

from __future__ import annotations

import base64
import gc
import os
import socket
import time
import weakref
from typing import Any

import pytest

pn = pytest.importorskip("panel")

from workbench_widgets.app import app as app_module  # noqa: E402
from workbench_widgets.app.server import (  # noqa: E402
    ThreadedApp,
    allowed_hosts,
    host_allowed,
)


def raw_request(port: int, lines: list[str]) -> str:
    """Send one HTTP/1.1 request as written (``lines`` without the final blank line) to 127.0.0.1:``port``;
    return the status line of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0].decode("latin-1")


def handshake(host: str, origin: str) -> list[str]:
    key = base64.b64encode(os.urandom(16)).decode()
    return [
        "GET /ws HTTP/1.1",
        f"Host: {host}",
        f"Origin: {origin}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]


def test_allowed_hosts_are_the_listening_address_and_the_given_names() -> None:
    loop = allowed_hosts("127.0.0.1", ["lab.example.org:8888", "*.corp.example"])
    assert {"127.0.0.1", "localhost", "::1", "lab.example.org", "*.corp.example"} == loop
    for host in (
        "127.0.0.1:5006",
        "localhost:5006",
        "LOCALHOST",
        "[::1]:5006",
        "lab.example.org",
        "a.corp.example:1",
    ):
        assert host_allowed(host, loop), host
    for host in ("evil.example:5006", "127.0.0.1.evil.example", "", "localhost.evil.example", "corp.example"):
        assert not host_allowed(host, loop), host
    assert allowed_hosts("10.1.2.3") == {
        "10.1.2.3"
    }  # not loopback: localhost is another machine's name there


def test_a_rebound_host_is_refused_for_the_page_static_files_and_websocket() -> None:
    with ThreadedApp(address="127.0.0.1", timeout_s=120) as app:
        port = app.port
        own, evil = f"127.0.0.1:{port}", f"evil.example:{port}"
        # what a browser sends after a DNS rebind: the attacker's name, and an Origin equal to it
        assert " 403 " in raw_request(port, handshake(evil, f"http://{evil}"))
        assert " 403 " in raw_request(port, ["GET / HTTP/1.1", f"Host: {evil}"])
        assert " 403 " in raw_request(port, ["GET /static/js/bokeh.min.js HTTP/1.1", f"Host: {evil}"])
        # the app's own names are served
        assert " 200 " in raw_request(port, ["GET / HTTP/1.1", f"Host: {own}", "Connection: close"])
        assert " 200 " in raw_request(
            port, ["GET / HTTP/1.1", f"Host: localhost:{port}", "Connection: close"]
        )
        assert " 101 " in raw_request(port, handshake(own, f"http://{own}"))
        # the Origin check still holds for the own Host
        assert " 403 " in raw_request(port, handshake(own, f"http://{evil}"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow  # 50 sessions: about 1-2 CPU-s each
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from /proc")
def test_closed_sessions_are_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    from bokeh.client import pull_session

    alive: weakref.WeakSet[Any] = weakref.WeakSet()
    build = app_module.WorkbenchApp.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        build(self, *args, **kwargs)
        alive.add(self)

    monkeypatch.setattr(app_module.WorkbenchApp, "__init__", counting_init)
    # bokeh discards a session this long after its last connection closed (default 15 s, checked every 17 s)
    with ThreadedApp(
        address="127.0.0.1",
        timeout_s=120,
        unused_session_lifetime_milliseconds=300,
        check_unused_sessions_milliseconds=200,
    ) as app:

        def open_and_close(n: int) -> None:
            for i in range(n):
                if i % 10 == 0:  # a websocket session, as a browser tab opens and closes
                    pull_session(url=app.url).close()
                else:  # a plain GET: the server builds a session that no websocket ever claims
                    assert " 200 " in raw_request(app.port, ["GET / HTTP/1.1", f"Host: 127.0.0.1:{app.port}"])

        def settle() -> int:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (app.server.get_sessions("/") or len(alive)):
                time.sleep(0.3)
                gc.collect()
            return len(alive)

        open_and_close(5)  # warm: imports, caches, the first search
        assert settle() == 0, "a closed session's app is still alive"
        before = rss_bytes()
        open_and_close(50)
        assert settle() == 0, f"{len(alive)} of 50 closed sessions still hold their app"
        grown = rss_bytes() - before
    # a leaked session held about 4 MB (issue 52): 50 of them 200 MB; allocator slack stays far below
    assert grown < 60 * 2**20, f"resident memory grew {grown / 2**20:.0f} MiB over 50 closed sessions"
