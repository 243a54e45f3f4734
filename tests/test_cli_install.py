"""The core install (``pip install parallelism-workbench``, no extras) plans and writes reports; the web app
says which extra it needs. Run in subprocesses of this checkout with the extras' packages blocked
(``sys.modules[name] = None`` makes ``import name`` fail as if it were not installed)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT

EXTRA_ONLY = ("panel", "ipywidgets", "jupyterlab", "jupyter_server_proxy", "torch")
"""Top-level modules that only the [app], [jupyter] and [torch] extras install."""


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    block = f"import sys\nfor name in {EXTRA_ONLY!r}:\n    sys.modules[name] = None\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WORKBENCH_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", block + textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_plan_writes_a_report_without_the_extras(tmp_path: Path) -> None:
    report = tmp_path / "plan.html"
    proc = _python(
        f"""
        from workbench_cli import main
        try:
            main(["plan", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1", "--seq-len",
                  "4096", "--global-batch", "32", "--top", "2", "--report", {str(report)!r}])
        finally:
            loaded = sorted(n for n in sys.modules if n.split(".")[0] in {EXTRA_ONLY!r} and sys.modules[n])
            print("extras loaded:", loaded)
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "extras loaded: []" in proc.stdout and "Best plans" in proc.stdout
    assert report.stat().st_size > 100_000 and "<html" in report.read_text(encoding="utf-8")[:2000].lower()


def test_app_without_panel_names_the_extra_to_install(tmp_path: Path) -> None:
    proc = _python("from workbench_cli import main\nmain(['app', '--port', '0'])\n", tmp_path)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("workbench app: error: the web app needs panel, which is not installed")
    assert "pip install 'parallelism-workbench[app]'" in line
