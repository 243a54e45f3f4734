"""Shared fixtures: the repo root and a runner for the real ``workbench`` console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKBENCH = Path(sys.executable).parent / "workbench"
CHROMIUM = Path("/usr/bin/chromium")
APP_PIN: dict[str, Any] = {
    "cp": 4,
    "tp": 1,
    "pp": 1,
    "vpp": 1,
    "schedule": "1f1b",
    "micro_batch_size": 1,
    "zero_stage": 3,
}
"""A plan app tests start from whatever the planner ranks first (dp16 tp1 pp1 cp4 mbs1 ZeRO-3 1F1B on the app's
default 64 devices): a test that needs a plan of a given shape pins it (``load_plan`` in process, the query
string ``APP_PIN_QUERY`` in a browser) instead of assuming the opening plan, which moves with the calibration."""
APP_PIN_QUERY = "&".join(f"{k}={v}" for k, v in APP_PIN.items())
"""Debian's chromium (installed by .ci/run); browser tests never download a browser."""
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),  # in CI a missing browser is a failure
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium; .ci/run installs it)",
)


def run_cli(
    *args: str, check: bool = False, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed console script with this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WORKBENCH_DEBUG", None)
    proc = subprocess.run(
        [str(WORKBENCH), *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd or ROOT
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"workbench {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def workbench_cli():
    if not WORKBENCH.exists():
        pytest.fail(f"console script {WORKBENCH} missing: install the project with `pip install -e .`")
    return run_cli


def keep_local(target: Any, outside: list[str], *, files: bool = False) -> None:
    """Route every request of a Playwright page or context: to 127.0.0.1 (or, with ``files``, to file: URLs
    only) it goes on; anything else is recorded in ``outside`` and aborted, so a test sees any request that
    would leave the machine."""

    def route(r: Any) -> None:
        url = r.request.url
        if url.startswith("file:") if files else urlparse(url).hostname == "127.0.0.1":
            r.continue_()
        else:
            outside.append(url)
            r.abort()

    target.route("**/*", route)


FIND_VIEW_JS = """(match) => {
  // The rendered view whose model ``match`` (a function of the model) accepts, or null: walk the rendered
  // views (the document may still hold a replaced figure model, so looking models up by name is ambiguous).
  if (!window.Bokeh || !Bokeh.index) return null;
  let found = null;
  const walk = (view) => {
    if (view.model && match(view.model)) found = view;
    for (const child of (view.child_views ?? [])) walk(child);
  };
  const idx = Bokeh.index;
  const roots = idx.roots !== undefined ? [...idx.roots] : [...(idx.values ? idx.values() : Object.values(idx))];
  roots.forEach(walk);
  return found;
}"""
"""A JavaScript function for ``page.evaluate``: the BokehJS view on screen whose model a predicate accepts."""


def view_js(match: str, result: str) -> str:
    """A ``page.evaluate`` function: ``result`` (an expression of ``v``, the view) of the view whose model
    ``match`` (an expression of ``m``) accepts, or null when none is on screen."""
    return f"() => {{ const v = ({FIND_VIEW_JS})((m) => {match}); return v ? {result} : null; }}"


_GLOO_MAIN = r"""

def _rank(rank, world, port, out):
    import os
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    report = run(rank, world)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(report, f)
    # every rank done before any rank tears its gloo pairs down: a rank whose peer closed the connection while
    # its own last collective was still reading aborted ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world, out = int(sys.argv[-2]), sys.argv[-1]
    try:
        mp.spawn(_rank, args=(world, port, out), nprocs=world, join=True)
    except mp.ProcessExitedException as exited:
        # a rank writes its report before the closing barrier, and no rank leaves that barrier before every rank
        # has entered it: with every report written, what failed is gloo's teardown after the work
        # ("terminate called without an active exception" as a peer's pair closes), not the run
        try:
            reports = [json.load(open(f"{out}.{r}")) for r in range(world)]
        except (OSError, ValueError):
            raise exited from None
        print(f"gloo teardown failed after every rank had written its report: {exited}", file=sys.stderr)
        print(json.dumps(reports))
        sys.exit(0)
    print(json.dumps([json.load(open(f"{out}.{r}")) for r in range(world)]))
"""


def run_gloo_ranks(body: str, world: int, args: list[Any], tmp_path: Path, timeout_s: int = 240) -> list[Any]:
    """Run ``body`` (a script that imports json, sys and torch, reads ``sys.argv[1:1 + len(args)]`` and defines
    ``run(rank, world) -> dict``) on ``world`` gloo ranks of a process group on 127.0.0.1, each rank one
    process started by ``torch.multiprocessing.spawn`` (from a file: spawn's workers import the main module),
    and return each rank's dict, rank order. A rank that fails fails the test with the end of its stderr."""
    script = tmp_path / "gloo_ranks.py"
    script.write_text(body + _GLOO_MAIN)
    done = subprocess.run(
        [sys.executable, str(script), *map(str, args), str(world), str(tmp_path / "rank")],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        pytest.fail(f"gloo ranks of {script} exited {done.returncode}; stderr ends:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def collect_errors(page: Any, errors: list[str], *, console: bool = True) -> None:
    """Append the page's uncaught exceptions, and with ``console`` its console errors, to ``errors``."""
    if console:
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))


@contextmanager
def served_app_page(
    *, viewport: dict[str, int] | None = None, console: bool = True
) -> Iterator[tuple[Any, ...]]:
    """The Panel app served on 127.0.0.1 (``ThreadedApp``) and a headless Debian Chromium page beside it that
    cannot reach off the machine (``keep_local``) and records its errors (``collect_errors``): yields
    (app, page, outside, errors); the browser and the server stop on exit. Skips without Playwright."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from workbench_widgets.app.server import ThreadedApp

    outside: list[str] = []
    errors: list[str] = []
    with ThreadedApp(address="127.0.0.1") as app, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport=viewport) if viewport else browser.new_page()
            keep_local(page, outside)
            collect_errors(page, errors, console=console)
            yield app, page, outside, errors
        finally:
            browser.close()


def serving_row(row_id: str) -> dict[str, str]:
    """The row ``row_id`` of the shipped public serving file, as ``read_serving_rows`` reads it."""
    from workbench.validate.serving_csv import read_serving_rows

    return next(r for r in read_serving_rows() if r["id"] == row_id)


def write_serving_csv(path: Path, rows: list[dict[str, str]], columns: tuple[str, ...] | None = None) -> Path:
    """``rows`` written to ``path`` as a serving validation CSV with the header ``columns`` (default: every column
    of the schema, ``SERVING_COLUMNS``); cells of other columns are left out. Returns ``path``."""
    import csv

    from workbench.validate.serving_csv import SERVING_COLUMNS

    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(
            fh, fieldnames=columns or SERVING_COLUMNS, extrasaction="ignore", lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_rows_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    """``rows`` written to ``path`` as a CSV whose header is the first row's keys (a training validation file when
    the rows are read from one). Returns ``path``."""
    import csv

    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path
