"""End-to-end latency of a control change in the served app, in a real browser (issue 19 item 12).

Floors: a control change shows its figures in the browser within 250 ms at 64 devices, and the server-side
part (State -> Store -> estimate -> figures -> document patch) takes at most 100 ms.

The app is served on 127.0.0.1 by ``workbench_widgets.app.server.ThreadedApp`` and opened in headless Debian
Chromium (``/usr/bin/chromium``, driven by Playwright; every request leaving 127.0.0.1 is blocked). It opens
on its default: the planner's best plan for Llama 3.1 70B on 8 DGX H100 nodes (64 devices). Each control is
switched between its opening value and another one, back and forth (``--repeat`` changes, median reported).

Browser time: from the ``change`` event dispatched on the control (``performance.now()`` in the page) until
the figures on screen show the new plan: the rendered views named ``plan-timeline`` and ``plan-memory``
carry the titles the app gives that plan (read from a WorkbenchApp built in this process with the same
change), plus one animation frame so that the canvas has been painted. ``patch at``: when the last PATCH-DOC
message before that arrived (the server's share, the network's and the wait for the page's event loop);
the rest is BokehJS applying the patch, laying out and painting. ``received``: the kilobytes the page got
over the websocket from the change until 300 ms after the figures showed (binary buffers included).

Server time: the same change made on a WorkbenchApp attached to a bokeh ``Document`` in this process (as a
session's callback would run it), timed from the State's new value until the figures are written.

Run: ``python benchmarks/bench_app_latency.py [--repeat N] [--only tp pp ...] [--json]``. Needs Playwright and
/usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

BROWSER_FLOOR_S = 0.250
SERVER_FLOOR_S = 0.100
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [  # as tests/conftest.py
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CHANGES: tuple[tuple[str, Any], ...] = (
    ("tp", 8),
    ("pp", 4),
    ("micro_batch_size", 2),
    ("schedule", "interleaved-1f1b"),
    ("model_preset", "llama-3.1-8b"),
)
"""(control, the other value): each is switched from the opening plan's value to this one and back."""
CONTROLS: tuple[str, ...] = tuple(name for name, _ in CHANGES)

FIGURE_TITLES_JS = """() => {
  // Titles of the rendered (on screen) figures named plan-timeline and plan-memory.
  const out = {};
  if (!window.Bokeh || !Bokeh.index) return out;
  const walk = (view) => {
    const m = view.model;
    if (m && (m.name === "plan-timeline" || m.name === "plan-memory") && m.title) out[m.name] = m.title.text;
    for (const child of (view.child_views ?? [])) walk(child);
  };
  const idx = Bokeh.index;
  const roots = idx.roots !== undefined ? [...idx.roots] : [...(idx.values ? idx.values() : Object.values(idx))];
  roots.forEach(walk);
  return out;
}"""

CHANGE_JS = f"""async ([select, value, expected, timeoutMs]) => {{
  const titles = {FIGURE_TITLES_JS};
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const shown = () => {{
    const t = titles();
    return t["plan-timeline"] === expected["plan-timeline"] && t["plan-memory"] === expected["plan-memory"];
  }};
  const t0 = performance.now();
  select.value = value;
  select.dispatchEvent(new Event("input", {{ bubbles: true }}));
  select.dispatchEvent(new Event("change", {{ bubbles: true }}));
  while (!shown()) {{
    if (performance.now() - t0 > timeoutMs) return [-1, -1];
    await frame();
  }}
  const shownAt = performance.now();
  await frame();  // the frame that paints the new figures
  const patches = (window.__wb_patch_at ?? []).filter((t) => t > t0 && t <= shownAt);
  return [performance.now() - t0, patches.length ? patches[patches.length - 1] - t0 : -1];
}}"""

PATCH_CLOCK_JS = """() => {
  // When each PATCH-DOC message of the session arrives (performance.now()), before bokeh handles it; the
  // last one before the figures show is the patch that carries them.
  window.__wb_patch_at = [];
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", (event) => {
        if (typeof event.data === "string" && event.data.includes('"PATCH-DOC"')) {
          window.__wb_patch_at.push(performance.now());
        }
      });
    }
  };
}"""


def _expected_titles(app: Any) -> dict[str, str]:
    view = app.views["plan"]
    return {"plan-timeline": view.timeline.object.title.text, "plan-memory": view.memory.object.title.text}


def _attached_app() -> tuple[Any, Any]:
    """A WorkbenchApp on the served default (the planner's best plan), its page in a bokeh Document."""
    from bokeh.document import Document
    from panel.io.state import set_curdoc
    from workbench_widgets.app.app import WorkbenchApp

    app = WorkbenchApp()
    doc = Document()
    with set_curdoc(doc):
        doc.add_root(app.panel().get_root(doc))
    return app, doc


def _values(app: Any, only: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    return [(name, getattr(app.state, name), other) for name, other in CHANGES if name in only]


def server_times(repeat: int, only: tuple[str, ...] = CONTROLS) -> dict[str, dict[str, Any]]:
    """Per control: the first change (a fresh estimate) and the median of ``repeat`` changes, in seconds,
    with the titles each value shows (what the browser waits for)."""
    from panel.io.state import set_curdoc

    app, doc = _attached_app()
    out: dict[str, dict[str, Any]] = {}
    for name, base, other in _values(app, only):
        titles = {base: _expected_titles(app)}
        times = []
        for i in range(repeat):
            value = other if i % 2 == 0 else base
            start = time.perf_counter()
            with set_curdoc(doc):
                setattr(app.state, name, value)
            times.append(time.perf_counter() - start)
            assert getattr(app.state, name) == value and app.store.estimate is not None, (name, value)
            titles.setdefault(value, _expected_titles(app))
        assert titles[base] != titles[other], f"{name}: the figures' titles do not tell {base} from {other}"
        out[name] = {
            "from": base,
            "to": other,
            "first_s": times[0],
            "median_s": statistics.median(times),
            "titles": titles,
        }
    return out


def browser_times(server: dict[str, dict[str, Any]], repeat: int) -> dict[str, dict[str, Any]]:
    """Per control: median browser time (s) and median kB received over the websocket per change."""
    from playwright.sync_api import sync_playwright
    from workbench_widgets.app.server import ThreadedApp

    outside: list[str] = []
    out: dict[str, dict[str, Any]] = {}
    with ThreadedApp(address="127.0.0.1") as served, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})

            def route(r: Any) -> None:
                if urlparse(r.request.url).hostname == "127.0.0.1":
                    r.continue_()
                else:
                    outside.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.add_init_script(f"({PATCH_CLOCK_JS})()")
            received: list[int] = []
            page.on(
                "websocket",
                lambda ws: ws.on("framereceived", lambda payload: received.append(len(payload))),
            )
            page.goto(served.url, wait_until="load", timeout=120_000)
            page.wait_for_function(f"() => Object.keys(({FIGURE_TITLES_JS})()).length === 2", timeout=120_000)
            page.wait_for_timeout(1500)  # the page settles (fonts, layout) before the first change
            for name, case in server.items():
                select = page.locator(f".wb-{name} select").first.element_handle()
                times, patch_times, kbytes = [], [], []
                for i in range(repeat):
                    value = case["to"] if i % 2 == 0 else case["from"]
                    received.clear()
                    ms, patch_ms = page.evaluate(
                        CHANGE_JS, [select, str(value), case["titles"][value], 30_000]
                    )
                    if ms < 0:
                        raise TimeoutError(f"{name} = {value}: the figures did not change within 30 s")
                    page.wait_for_timeout(300)  # late messages (e.g. option lists) are counted too
                    times.append(ms / 1e3)
                    patch_times.append(patch_ms / 1e3)
                    kbytes.append(sum(received) / 1e3)
                out[name] = {
                    "median_s": statistics.median(times),
                    "max_s": max(times),
                    "patch_at_s": statistics.median(patch_times),
                    "median_kB": statistics.median(kbytes),
                }
        finally:
            browser.close()
    if outside:
        raise RuntimeError(f"requests left 127.0.0.1: {outside}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=6, help="changes per control (>= 5; median)")
    parser.add_argument("--only", nargs="+", choices=CONTROLS, help="controls to measure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.repeat < 5:
        parser.error("--repeat must be at least 5")
    server = server_times(args.repeat, tuple(args.only or CONTROLS))
    browser = browser_times(server, args.repeat)
    rows = {
        name: {
            "change": f"{case['from']} <-> {case['to']}",
            "browser_median_s": browser[name]["median_s"],
            "browser_max_s": browser[name]["max_s"],
            "patch_arrives_s": browser[name]["patch_at_s"],
            "received_kB": browser[name]["median_kB"],
            "server_median_s": case["median_s"],
            "server_first_s": case["first_s"],
        }
        for name, case in server.items()
    }
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'control':<18}{'change':<32}{'browser':>9}{'max':>8}{'patch at':>10}{'received':>10}"
        f"{'server':>8}{'first':>8}"
    )
    for name, r in rows.items():
        print(
            f"{name:<18}{r['change']:<32}{_ms(r['browser_median_s']):>9}{_ms(r['browser_max_s']):>8}"
            f"{_ms(r['patch_arrives_s']):>10}{r['received_kB']:>7.0f} kB{_ms(r['server_median_s']):>8}"
            f"{_ms(r['server_first_s']):>8}"
        )
    worst_browser = max(r["browser_median_s"] for r in rows.values())
    worst_server = max(r["server_median_s"] for r in rows.values())
    print(
        f"browser: median from the change event to the painted figures; patch at: when the session's patch "
        f"arrives; server: State -> figures in process (first: a fresh estimate). "
        f"{args.repeat} changes per control, 64 devices, load average {os.getloadavg()[0]:.1f}.\n"
        f"floors: browser <= {BROWSER_FLOOR_S * 1e3:.0f} ms "
        f"[{'OK' if worst_browser <= BROWSER_FLOOR_S else 'SLOW'}: worst median {worst_browser * 1e3:.0f} ms], "
        f"server <= {SERVER_FLOOR_S * 1e3:.0f} ms "
        f"[{'OK' if worst_server <= SERVER_FLOOR_S else 'SLOW'}: worst median {worst_server * 1e3:.0f} ms]"
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


if __name__ == "__main__":
    main()
