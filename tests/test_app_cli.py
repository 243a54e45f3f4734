"""``workbench app``: serves on 127.0.0.1 and stops on a signal; bad input is one line and a non-zero exit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest

from tests.conftest import ROOT, WORKBENCH


def test_bad_port_is_a_usage_error(workbench_cli) -> None:
    proc = workbench_cli("app", "--port", "70000")
    assert proc.returncode == 2
    assert "70000" in proc.stderr and "Traceback" not in proc.stderr


def test_port_in_use_is_one_line(workbench_cli) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        proc = workbench_cli("app", "--port", str(port), timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("workbench app: error:"), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_app_serves_on_localhost_until_interrupted(tmp_path) -> None:
    from workbench_widgets.app.server import free_port, wait_for_http

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [str(WORKBENCH), "app", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        page = wait_for_http(f"http://127.0.0.1:{port}/", 90)
        assert "<title>Parallelism Workbench</title>" in page
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert f"Parallelism Workbench at http://127.0.0.1:{port}/" in out
    assert proc.returncode == 0, err
