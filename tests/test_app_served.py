"""The app served by Panel's server on 127.0.0.1: the page answers, a prefix works, sessions are separate.

Servers run in a daemon thread and are stopped in a ``finally``/context manager; nothing listens beyond
127.0.0.1.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import pytest

pn = pytest.importorskip("panel")

from workbench_widgets.app import server as server_module  # noqa: E402
from workbench_widgets.app.server import ThreadedApp, normalise_prefix, wait_for_http, websocket_origins  # noqa: E402


def _models(doc: Any, css: str) -> list[Any]:
    return [m for m in doc.models if css in (getattr(m, "css_classes", None) or [])]


def _summary(doc: Any) -> str:
    return " ".join(m.text for m in _models(doc, "wb-summary") if hasattr(m, "text"))


def _set_in_session(server: Any, session: Any, css: str, value: Any) -> None:
    """Change a widget model as the browser would: on the server's loop, holding the session's lock."""
    done = threading.Event()

    def change() -> None:
        for model in _models(session.document, css):
            if hasattr(model, "value"):
                model.value = value
        done.set()

    server.io_loop.add_callback(lambda: session.with_document_locked(change))
    assert done.wait(20), "the server loop did not run the change"


def _wait_for(predicate: Any, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_prefix_and_origins() -> None:
    assert normalise_prefix("user/x/parallelism-workbench/") == "/user/x/parallelism-workbench"
    assert normalise_prefix("/") == ""
    assert websocket_origins("127.0.0.1", 5006) == ["127.0.0.1:5006", "localhost:5006"]


def test_served_app_answers_on_localhost_with_separate_sessions() -> None:
    with ThreadedApp(address="127.0.0.1") as app:
        assert app.url.startswith("http://127.0.0.1:")
        page = wait_for_http(app.url, 30)
        assert "<title>Parallelism Workbench</title>" in page
        wait_for_http(app.url, 30)
        server = app.server
        sessions = server.get_sessions("/")
        assert len(sessions) >= 2
        first, others = sessions[0], sessions[1:]
        before = [_summary(s.document) for s in others]
        first_before = _summary(first.document)
        assert all(text == first_before for text in before)  # every session opens on the same default
        _set_in_session(server, first, "wb-num_nodes", 2)
        assert _wait_for(lambda: _summary(first.document) != first_before), _summary(first.document)
        assert [_summary(s.document) for s in others] == before  # the other users saw nothing


def test_served_under_a_prefix() -> None:
    with ThreadedApp(prefix="/user/test/parallelism-workbench/") as app:
        assert app.url.endswith("/user/test/parallelism-workbench/")
        assert "Parallelism Workbench" in wait_for_http(app.url, 30)


def test_the_standalone_server_freezes_its_startup_heap_and_a_notebook_server_does_not(monkeypatch) -> None:
    """``run`` (``workbench app``: a process that only serves) moves what is alive before its first session into
    the garbage collector's permanent generation, once per process; ``ThreadedApp`` (a notebook's kernel, these
    tests) leaves the heap alone."""
    before = gc.get_freeze_count()
    with ThreadedApp(address="127.0.0.1") as app:
        wait_for_http(app.url, 60)
    assert gc.get_freeze_count() == before

    class Loop:
        def start(self) -> None:
            raise KeyboardInterrupt

        def add_callback(self, *args: Any) -> None:
            pass

    class Server:
        io_loop = Loop()

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

    monkeypatch.setattr(server_module, "make_server", lambda **kwargs: Server())
    monkeypatch.setattr(server_module, "warm_up", lambda: None)
    monkeypatch.setattr(server_module, "_startup_frozen", threading.Lock())
    try:
        server_module.run(port=1, address="127.0.0.1", announce=lambda url: None)
        assert gc.get_freeze_count() > 0
        tracked = {id(o) for o in gc.get_objects()}
        assert id(server_module.freeze_startup_heap) not in tracked  # frozen: no collection walks it
        assert server_module.freeze_startup_heap() is False  # once per process
    finally:
        gc.unfreeze()
