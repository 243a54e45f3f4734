"""The JupyterLab launcher entry: the jupyter-server-proxy entry point resolves, its command starts the app
under the Lab prefix and accepts the session websocket only with the origin the proxy presents (never any
origin), the proxy's card gives way to the lab extension's where that is installed, and (slow) a real Jupyter
server lists the server and proxies the app, and the proxied page gets its websocket in Chromium. The lab
extension's own card, palette entry and file viewer: tests/test_lab_browser.py."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.conftest import CHROMIUM, CHROMIUM_FLAGS, ROOT, needs_chromium
from tests.test_app_safety import TIMELINE_TITLE_JS, websocket_handshake

SERVER_NAME = "parallelism-workbench"


def _entry() -> dict:
    eps = {ep.name: ep for ep in entry_points(group="jupyter_serverproxy_servers")}
    assert SERVER_NAME in eps, f"entry point missing; reinstall with pip install -e . (have {sorted(eps)})"
    return eps[SERVER_NAME].load()()


def _free_port() -> int:
    from workbench_widgets.app.server import free_port

    return free_port("127.0.0.1")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    env.pop("WORKBENCH_DEBUG", None)
    return env


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def test_entry_point_resolves_to_the_documented_server() -> None:
    entry = _entry()
    assert entry["launcher_entry"]["title"] == "Parallelism Workbench"
    assert entry["absolute_url"] is True and entry["new_browser_tab"] is False
    assert entry["timeout"] >= 60  # a cold start of Python + Panel; the proxy's default (5 s) is too short
    cmd = entry["command"]
    assert "--allow-websocket-origin" not in cmd and not any("*" in part for part in cmd)
    assert entry["request_headers_override"] == {
        "Origin": "http://127.0.0.1:{port}",
        "Host": "127.0.0.1:{port}",
    }
    assert cmd[cmd.index("--port") + 1] == "{port}"
    assert cmd[cmd.index("--prefix") + 1] == "{base_url}parallelism-workbench"
    assert cmd[cmd.index("--address") + 1] == "127.0.0.1"
    icon = entry["launcher_entry"].get("icon_path")
    assert icon is None or Path(icon).is_file()


def test_proxy_card_is_disabled_where_the_lab_extension_draws_ours(tmp_path: Path, monkeypatch) -> None:
    """One launcher card in Lab: the lab extension's (with the icon) replaces the proxy's (no icon in
    some categories); without the extension the proxy's card is enabled. The proxy itself stays."""
    pytest.importorskip("jupyter_core")
    import jupyter_core.paths
    from workbench_widgets.app import launcher

    found = tmp_path / "labextensions"
    (found / launcher.LAB_EXTENSION).mkdir(parents=True)
    (found / launcher.LAB_EXTENSION / "package.json").write_text("{}")
    monkeypatch.setattr(jupyter_core.paths, "jupyter_path", lambda *parts: [str(tmp_path / parts[0])])
    assert launcher.lab_extension_installed()
    entry = launcher.setup_workbench_proxy()
    assert entry["launcher_entry"]["enabled"] is False and entry["command"] == launcher.command()
    monkeypatch.setattr(jupyter_core.paths, "jupyter_path", lambda *parts: [str(tmp_path / "none")])
    assert launcher.setup_workbench_proxy()["launcher_entry"]["enabled"] is True


def test_entry_point_command_starts_the_app_under_the_prefix(tmp_path: Path) -> None:
    from workbench_widgets.app.server import wait_for_http

    port, base_url = _free_port(), "/user/someone/"
    cmd = [part.format(port=port, base_url=base_url) for part in _entry()["command"]]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        page = wait_for_http(f"http://127.0.0.1:{port}{base_url}{SERVER_NAME}/", 60)
        assert "<title>Parallelism Workbench</title>" in page
        ws, lab = f"{base_url}{SERVER_NAME}/ws", "127.0.0.1:8888"
        # What the proxy forwards: the Host it received (here a reverse proxy's upstream name, not the page's
        # host) and the Origin it is told to present: accepted by the app's own list.
        proxied = _entry()["request_headers_override"]["Origin"].format(port=port)
        assert websocket_handshake(port, ws, proxied, host=lab) == 101
        # The Lab page's origin as it would arrive without the override: refused (tornado then asks bokeh's
        # list, which holds only the app's own origin; older tornado asks it for every Origin).
        assert websocket_handshake(port, ws, "https://lab.example", host=lab) == 403
        # A page of another site that finds the app's port.
        assert websocket_handshake(port, ws, "http://evil.example", fetch_site="cross-site") == 403
    finally:
        _stop(proc)


@pytest.mark.slow
def test_jupyter_server_lists_the_tile_and_proxies_the_app(tmp_path: Path) -> None:
    """A real Jupyter server with jupyter-server-proxy: the launcher list and the proxied page."""
    pytest.importorskip("jupyter_server_proxy")
    from workbench_widgets.app.server import wait_for_http

    port, token = _free_port(), "workbench-test-token"
    proc = subprocess.Popen(
        _jupyter_command(port, token, tmp_path),
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/api/status?token={token}", 60)
        info = _get(f"{base}/server-proxy/servers-info", token)  # listed even where its card is disabled
        assert '"Parallelism Workbench"' in info and SERVER_NAME in info
        page = _get(f"{base}/{SERVER_NAME}/", token, timeout=90)
        assert "<title>Parallelism Workbench</title>" in page
    finally:
        _stop(proc)


@pytest.mark.slow
@pytest.mark.browser
@needs_chromium
def test_the_proxied_app_gets_its_websocket_in_chromium(tmp_path: Path) -> None:
    """The page opened through a real Jupyter server's proxy draws its timeline: the session websocket went
    browser -> Jupyter (same origin) -> app (the origin the proxy presents)."""
    pytest.importorskip("jupyter_server_proxy")
    sync_api = pytest.importorskip("playwright.sync_api")
    from workbench_widgets.app.server import wait_for_http

    port, token = _free_port(), "workbench-test-token"
    proc = subprocess.Popen(
        _jupyter_command(port, token, tmp_path),
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/api/status?token={token}", 60)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{port}/{SERVER_NAME}/?token={token}", timeout=90_000)
                page.wait_for_function(TIMELINE_TITLE_JS, timeout=90_000)
                # Drawn from the session: the websocket got through (the plan is the app's default).
                assert page.evaluate(TIMELINE_TITLE_JS).startswith("Pipeline timeline")
            finally:
                browser.close()
    finally:
        _stop(proc)


def _jupyter_command(port: int, token: str, root: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "jupyter_server",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.port_retries=0",
        "--allow-root",
    ]


def _get(url: str, token: str, timeout: float = 30) -> str:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (local test server)
        return resp.read().decode("utf-8", "replace")
