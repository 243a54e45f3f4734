"""Bad input never breaks a session, uploads are capped before they reach the websocket, and only the app's own
origin may open a session's websocket.

In process: a bad upload (not JSON, not a config, a model the core refuses, one whose pricing fails) is said in
a danger alert, the choices stay as they were and the next valid input prices; a failing pass puts the
previous choices back; a file over the 1 MiB limit is refused by size, in the browser (only its name and size
arrive) and again on the server. Served on 127.0.0.1: a websocket handshake with a foreign Origin gets 403,
with the app's own origin 101. In Chromium: a number the integer field refuses is said and undone, a bad
config.json shows the alert, a 15 MB file is refused without losing the websocket, a good config.json
redraws the timeline, and a message over the server's limit loses the session with a message in the page.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from pathlib import Path

import pytest

pytest.importorskip("panel")

from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.app.server import WEBSOCKET_MAX_MESSAGE_BYTES, ThreadedApp, _serve_kwargs  # noqa: E402
from workbench_widgets.app.state import UPLOADED  # noqa: E402
from workbench_widgets.app.store import MAX_UPLOAD_BYTES  # noqa: E402
from workbench_widgets.app.upload import ConfigUpload  # noqa: E402

from tests.conftest import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_FLAGS,
    ROOT,
    collect_errors,
    keep_local,
    needs_chromium,
    view_js,
)

GOOD = json.loads((ROOT / "profiles/measured/llama-3.1-8b-L2-H512-cpu-fp32/config.json").read_text())
"""A small Llama config (2 layers, width 512) shipped with the repository."""

BAD_UPLOADS = {
    "not JSON": b"{not json",
    "not an object": b"[1, 2]",
    "not UTF-8": b"\xff\xfe{}",
    "nested too deeply": b"[" * 100_000 + b"]" * 100_000,
    "unknown architecture": json.dumps({"architectures": ["Nope"]}).encode(),
    "missing field": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
    "hidden size 10^200": json.dumps({**GOOD, "hidden_size": 10**200}).encode(),
    "no attention heads": json.dumps({**GOOD, "num_attention_heads": 0}).encode(),
}


@pytest.fixture
def app() -> WorkbenchApp:
    wb = WorkbenchApp()
    wb.panel()
    return wb


def _choose(
    app: WorkbenchApp, data: bytes | None, name: str = "config.json", size: int | None = None
) -> None:
    """What the browser's upload control sends: name, size and base64 content (None when it refused the file)."""
    encoded = None if data is None else base64.b64encode(data).decode("ascii")
    app.composer.upload.file = {
        "name": name,
        "size": len(data or b"") if size is None else size,
        "data": encoded,
    }


def _snapshot(app: WorkbenchApp) -> tuple:
    s = app.state
    return (s.model_preset, s.uploaded_config, s.hidden_size, s.num_layers, app.store.estimate)


@pytest.mark.parametrize("label", sorted(BAD_UPLOADS))
def test_a_bad_upload_is_said_in_the_page_and_changes_nothing(app: WorkbenchApp, label: str) -> None:
    before = _snapshot(app)
    _choose(app, BAD_UPLOADS[label])
    assert app.store.refused.startswith("config.json not used: "), app.store.refused
    alert = app.composer.refused
    assert alert.visible and alert.alert_type == "danger" and "not used" in alert.object
    assert _snapshot(app) == before  # the previous model, fields and estimate are kept
    app.composer.widgets["num_nodes"].value = 2  # the session goes on: the next input prices
    assert app.store.estimate is not None and app.store.estimate.cluster.num_nodes == 2
    assert not app.composer.refused.visible  # an input that was used clears the alert


def test_a_good_upload_after_a_bad_one_is_used(app: WorkbenchApp) -> None:
    _choose(app, BAD_UPLOADS["hidden size 10^200"])
    assert "hidden_size" in app.store.refused
    _choose(app, json.dumps(GOOD).encode())
    assert app.store.refused == "" and not app.composer.refused.visible
    assert app.state.model_preset == UPLOADED and app.state.hidden_size == 512
    assert app.store.estimate is not None and app.store.estimate.model.hidden_size == 512


def test_an_upload_over_the_limit_is_refused_by_size(app: WorkbenchApp) -> None:
    before = _snapshot(app)
    _choose(app, None, name="huge.json", size=15_000_000)  # refused in the browser: nothing but the size came
    assert app.store.refused == (
        "huge.json not used: 15,000,000 bytes is more than the 1,048,576-byte limit of an upload "
        "(a Hugging Face config.json is a few KB)"
    )
    _choose(app, b" " * (MAX_UPLOAD_BYTES + 1), name="edited-page.json")  # a page that skipped the check
    assert app.store.refused.startswith("edited-page.json not used: 1,048,577 bytes is more than")
    assert _snapshot(app) == before
    app.composer.upload.file = {"name": "x.json", "size": 3, "data": "%%%"}  # not base64
    assert "base64" in app.store.refused


def test_the_limits_fit_the_websocket() -> None:
    assert ConfigUpload().max_bytes == 2**20 == MAX_UPLOAD_BYTES
    base64_bytes = 4 * ((MAX_UPLOAD_BYTES + 2) // 3)
    assert base64_bytes < WEBSOCKET_MAX_MESSAGE_BYTES  # the largest upload fits one message
    assert (
        _serve_kwargs(5006, "127.0.0.1", "", None)["websocket_max_message_size"]
        == WEBSOCKET_MAX_MESSAGE_BYTES
    )


def test_a_file_name_is_shown_as_text(app: WorkbenchApp) -> None:
    _choose(app, b"{", name="<img src=x onerror=alert(1)>.json")
    assert "<img" not in app.composer.refused.object and "&lt;img" in app.composer.refused.object


def test_a_failing_pass_puts_the_previous_choices_back(app: WorkbenchApp, monkeypatch) -> None:
    """Any exception of the pricing (not only the core's ValueErrors) is refused and undone."""
    store = app.store
    real = store.estimate_of

    def overflowing(model, *args, **kwargs):
        if model.num_layers == 7:
            raise OverflowError("int too large to convert to float")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(store, "estimate_of", overflowing)
    widget = app.composer.widgets["num_layers"]
    before = store.estimate
    widget.value = 7  # as the browser sends it
    assert store.refused == "Num layers = 7 not used: int too large to convert to float (OverflowError)"
    assert widget.value == 80 and app.state.num_layers == 80 and store.estimate is before
    assert app.composer.refused.visible
    app.state.num_layers = 7  # from code: the widget follows the State back too
    assert widget.value == 80 and app.state.num_layers == 80
    app.composer.widgets["num_nodes"].value = 2
    assert store.refused == "" and store.estimate is not None and store.estimate.cluster.num_nodes == 2


def test_an_exception_of_a_page_callback_is_said(app: WorkbenchApp) -> None:
    app.composer.widgets["hidden_size"].value = 4096
    app.on_page_error(
        ValueError("Integer parameter 'IntInput.value' must be an integer, not <class 'float'>.")
    )
    assert app.store.refused.startswith("A value from the page not used: Integer parameter")
    assert app.composer.refused.visible and app.composer.widgets["hidden_size"].value == 4096


def test_a_value_out_of_range_is_said_and_the_next_valid_one_prices(app: WorkbenchApp) -> None:
    app.composer.widgets["hidden_size"].value = 10**200
    said = app.store.error or app.store.refused
    assert "hidden" in said.lower(), said
    assert app.composer.error.visible or app.composer.refused.visible
    app.composer.widgets["hidden_size"].value = 4096
    assert app.store.estimate is not None and app.store.estimate.model.hidden_size == 4096


# ----- origins -----------------------------------------------------------------------------------------------


def websocket_handshake(
    port: int,
    path: str,
    origin: str,
    *,
    host: str = "",
    fetch_site: str = "",
    timeout_s: float = 20.0,
) -> int:
    """The HTTP status of a websocket upgrade request to 127.0.0.1:``port`` with ``Origin: origin``.

    ``host`` is the Host header (default: the address dialled, as a browser sends it; a proxy forwards the
    browser's), ``fetch_site`` a ``Sec-Fetch-Site`` header (which the installed tornado reads before the Origin).
    """
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    headers = {
        "Host": host or f"127.0.0.1:{port}",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Version": "13",
        "Origin": origin,
    }
    if fetch_site:
        headers["Sec-Fetch-Site"] = fetch_site
    request = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request.encode("ascii"))
        status_line = sock.makefile("rb").readline().decode("latin-1")
    return int(status_line.split()[1])


def test_only_the_apps_own_origin_opens_a_websocket() -> None:
    with ThreadedApp(address="127.0.0.1") as app:
        port = app.port
        own = f"http://127.0.0.1:{port}"
        # A page of another site (or another local port) open in the same browser: refused at the handshake.
        assert websocket_handshake(port, "/ws", "http://evil.example") == 403
        assert websocket_handshake(port, "/ws", "http://evil.example", fetch_site="cross-site") == 403
        assert websocket_handshake(port, "/ws", f"http://evil.example:{port}", fetch_site="cross-site") == 403
        assert websocket_handshake(port, "/ws", "http://127.0.0.1:8888", fetch_site="same-site") == 403
        # The app's own page.
        assert websocket_handshake(port, "/ws", own) == 101
        assert websocket_handshake(port, "/ws", own, fetch_site="same-origin") == 101
        assert websocket_handshake(port, "/ws", f"http://localhost:{port}", host=f"localhost:{port}") == 101
        # Another Host is refused whatever the Origin (DNS rebinding, issue 52); behind JupyterLab the proxy
        # presents the app's own Host (``launcher.request_headers``).
        assert websocket_handshake(port, "/ws", own, host="lab.example:8888") == 403


def test_a_wildcard_origin_is_allowed_only_with_a_warning(workbench_cli) -> None:
    with socket.socket() as sock:  # a taken port: the command stops right after parsing its options
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        proc = workbench_cli("app", "--port", str(sock.getsockname()[1]), "--allow-websocket-origin", "*")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(
        "workbench app: warning: --allow-websocket-origin * lets pages of other web sites"
    )
    assert "error" in lines[-1] and "Traceback" not in proc.stderr


# ----- in Chromium -------------------------------------------------------------------------------------------

TIMELINE_TITLE_JS = view_js(
    'm.name === "plan-timeline"',
    "v.model.title.text",
)


@pytest.mark.browser
@needs_chromium
def test_bad_input_in_the_browser(tmp_path: Path) -> None:
    """A number Panel's integer field refuses is said and the field shows the value in force again; a bad
    config.json shows the alert, a 15 MB file is refused by size with the websocket still open, and a good
    config.json redraws the timeline. Last, a message over the server's limit sent on the page's websocket
    (what an edited page could do) loses that one session, and the page says so."""
    sync_api = pytest.importorskip("playwright.sync_api")
    bad, huge, good = tmp_path / "bad" / "config.json", tmp_path / "huge.json", tmp_path / "config.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({**GOOD, "hidden_size": 10**200}))
    huge.write_bytes(b" " * 15_000_000)
    good.write_text(json.dumps(GOOD))
    outside: list[str] = []
    console_errors: list[str] = []
    with ThreadedApp(address="127.0.0.1") as app, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.add_init_script(KEEP_SOCKETS_JS)
            keep_local(page, outside)
            collect_errors(page, console_errors)
            page.goto(app.url, wait_until="load", timeout=90_000)
            page.wait_for_function(TIMELINE_TITLE_JS, timeout=90_000)
            before = page.evaluate(TIMELINE_TITLE_JS)
            picker = page.locator(".wb-upload input[type=file]").first
            alert = page.locator(".wb-refused")

            hidden = page.locator(".wb-hidden_size input").first
            hidden.fill("1" + "0" * 200)  # arrives as a float, which Panel's IntInput refuses
            hidden.press("Enter")
            alert.get_by_text("A value from the page not used: Integer parameter").wait_for(timeout=30_000)
            sync_api.expect(hidden).to_have_value("8192", timeout=10_000)  # the value in force, shown again

            picker.set_input_files(str(bad))
            alert.get_by_text("config.json not used: config: field 'hidden_size'").wait_for(timeout=30_000)

            picker.set_input_files(str(huge))
            alert.get_by_text("huge.json not used: 15,000,000 bytes is more than").wait_for(timeout=30_000)

            picker.set_input_files(str(good))  # the websocket is still open: this reaches the server
            page.wait_for_function(
                f"() => {{ const t = ({TIMELINE_TITLE_JS})(); return t && t !== {before!r}; }}",
                timeout=60_000,
            )
            sync_api.expect(alert.get_by_text("not used")).to_be_hidden(timeout=10_000)
            sync_api.expect(hidden).to_have_value("512", timeout=10_000)
            errors_before_the_oversize_message = list(console_errors)

            sent = page.evaluate(SEND_JS, WEBSOCKET_MAX_MESSAGE_BYTES + 1)
            assert sent == 1
            page.get_by_text("Connection to the workbench server lost").first.wait_for(timeout=30_000)
        finally:
            browser.close()
    assert outside == [], f"requests left the machine: {outside}"
    assert errors_before_the_oversize_message == [], errors_before_the_oversize_message


KEEP_SOCKETS_JS = """(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) { super(...args); window.__sockets.push(this); }
  };
})()"""
"""Keeps the page's websockets reachable from a test (``window.__sockets``)."""

SEND_JS = """(size) => {
  let sent = 0;
  for (const ws of window.__sockets) if (ws.readyState === 1) { ws.send("x".repeat(size)); sent++; }
  return sent;
}"""
