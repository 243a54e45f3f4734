"""End-to-end latency of a control change in the served app, in a real browser (issue 19 item 12, issue 51 item 10).

Floors: a control change shows its figures in the browser within 150 ms at 64 devices, the Compare tab (plan A
pinned, B changed) within 300 ms, and the server-side part (State -> Store -> estimate -> figures -> document
patch) takes at most 100 ms.

The app is served on 127.0.0.1 by ``workbench_widgets.app.server.ThreadedApp`` and opened in headless Debian
Chromium (``/usr/bin/chromium``, driven by Playwright; every request leaving 127.0.0.1 is blocked) on Llama 3.1
70B on 8 DGX H100 nodes (64 devices) with a pipelined plan (``START``, set through the controls, so that every
run measures the same plan whatever the planner ranks first).
Each control is switched between its starting value and another one, back and forth (``--repeat`` changes,
median reported). The Compare row: the Compare tab open, the starting plan pinned as A, tp of B switched.

Browser time: from the ``change`` event dispatched on the control (``performance.now()`` in the page) until
the figures on screen show the new plan: the rendered views named ``plan-timeline`` and ``plan-memory``
carry the titles the app gives that plan (read from a WorkbenchApp built in this process with the same
change), plus one animation frame so that the canvas has been painted. ``patch at``: when the last PATCH-DOC
message before that arrived (the server's share, the network's and the wait for the page's event loop);
the rest is BokehJS applying the patch, laying out and painting. ``received``: the kilobytes the page got
over the websocket from the change until 300 ms after the figures showed (binary buffers included).

CPU time beside the wall time (on a shared machine wall times stretch with the load, CPU times much less),
from the change to the painted figures: ``page CPU``, the CPU time of Chromium's renderer process (every
thread: script, style, layout, paint, raster; Linux ``/proc/<pid>/task/*/schedstat``); ``srv CPU``, the CPU
time of the served app's thread (its event loop: the session's callbacks, serialising and writing the patch).
``page task``: the page's main-thread task time (Chrome's ``Performance.getMetrics`` ``TaskDuration``, a wall
time of the tasks, so it stretches with the load too).

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
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

BROWSER_FLOOR_S = 0.150
COMPARE_FLOOR_S = 0.300
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
START: tuple[tuple[str, Any], ...] = (
    ("cp", 1),
    ("tp", 4),
    ("pp", 2),
    ("schedule", "interleaved-1f1b"),
    ("vpp", 4),
    ("zero_stage", 1),
    ("micro_batch_size", 1),
)
"""The plan every measure starts from (dp8 tp4 pp2 vpp4 mbs1 zero1 interleaved-1f1b on 64 devices): pipelined,
so that pp, vpp and the schedule show; set control by control in this order from the opening plan (the
planner's first, which moves with the calibration: dp16 tp1 pp1 cp4 mbs1 zero3 with the 2026-11-28 fit, dp2 tp8
pp4 vpp7 mbs2 zero1 sp with the 2026-12-07 one, whose sequence parallelism then stays on), in the page as in
this process (pp > 1 and an interleaved schedule widen vpp's choices)."""
CHANGES: tuple[tuple[str, Any], ...] = (
    ("tp", 8),
    ("pp", 4),
    ("micro_batch_size", 2),
    ("schedule", "1f1b"),  # vpp 4 -> 1, said as an adjustment, and back
    ("model_preset", "llama-3.1-8b"),
)
"""(control, the other value): each is switched from the starting plan's value to this one and back."""
COMPARE_CHANGE = ("tp", 8)
"""Plan B's change in the Compare tab (issue 51 item 4: pin A, set tp 8 for B)."""
CONTROLS: tuple[str, ...] = (*(name for name, _ in CHANGES), "compare")

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
  // an option's value is the choice, or its label ('family · id': the model picker) where Panel sends labels
  const option = Array.from(select.options).find((o) => o.value === value || o.value.endsWith(" · " + value));
  const t0 = performance.now();
  select.value = option ? option.value : value;
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


COMPARE_JS = """() => {
  // Per rendered Compare figure named compare-b-*: its title and the sum of its bars' right edges (the
  // timeline's title stays 'B: pipeline timeline'; its blocks tell one plan from another).
  const out = {};
  if (!window.Bokeh || !Bokeh.index) return out;
  const column = (source, key) => {
    const d = source.data;
    const col = d instanceof Map ? d.get(key) : d[key];
    return col ? Array.from(col) : [];
  };
  const walk = (view) => {
    const m = view.model;
    if (m && typeof m.name === "string" && m.name.startsWith("compare-b-") && m.title) {
      let sum = 0;
      for (const r of m.renderers ?? []) {
        if (r.name === "blocks" || r.name === "runs" || r.name === "bars") {
          for (const v of column(r.data_source, r.name === "bars" ? "top" : "right")) sum += Number(v) || 0;
        }
      }
      out[m.name] = [m.title.text, sum];
    }
    for (const child of (view.child_views ?? [])) walk(child);
  };
  const idx = Bokeh.index;
  const roots = idx.roots !== undefined ? [...idx.roots] : [...(idx.values ? idx.values() : Object.values(idx))];
  roots.forEach(walk);
  return out;
}"""

COMPARE_CHANGE_JS = f"""async ([select, value, expected, timeoutMs]) => {{
  const shownNow = {COMPARE_JS};
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const near = (a, b) => Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(b));
  const shown = () => {{
    const t = shownNow();
    return Object.keys(expected).every((k) => t[k] && t[k][0] === expected[k][0] && near(t[k][1], expected[k][1]));
  }};
  // an option's value is the choice, or its label ('family · id': the model picker) where Panel sends labels
  const option = Array.from(select.options).find((o) => o.value === value || o.value.endsWith(" · " + value));
  const t0 = performance.now();
  select.value = option ? option.value : value;
  select.dispatchEvent(new Event("input", {{ bubbles: true }}));
  select.dispatchEvent(new Event("change", {{ bubbles: true }}));
  while (!shown()) {{
    if (performance.now() - t0 > timeoutMs) return [-1, -1];
    await frame();
  }}
  const shownAt = performance.now();
  await frame();
  const patches = (window.__wb_patch_at ?? []).filter((t) => t > t0 && t <= shownAt);
  return [performance.now() - t0, patches.length ? patches[patches.length - 1] - t0 : -1];
}}"""


def _expected_titles(app: Any) -> dict[str, str]:
    view = app.views["plan"]
    return {"plan-timeline": view.timeline.object.title.text, "plan-memory": view.memory.object.title.text}


def _expected_compare(app: Any) -> dict[str, list[Any]]:
    """What ``COMPARE_JS`` reads of plan B's figures once they show the current plan."""
    import numpy as np
    from bokeh.models import Plot

    view = app.views["compare"]
    out: dict[str, list[Any]] = {}
    for fig in _bokeh_figures(view):
        if not isinstance(fig, Plot) or not str(fig.name or "").startswith("compare-b-"):
            continue
        total = 0.0
        for r in fig.renderers:
            if r.name in ("blocks", "runs", "bars"):
                col = r.data_source.data.get("top" if r.name == "bars" else "right", [])
                total += float(np.nansum(np.asarray(col, dtype=float))) if len(col) else 0.0
        out[fig.name] = [fig.title.text, total]
    return out


def _bokeh_figures(view: Any) -> list[Any]:
    """The bokeh figures the Compare view's panes show."""
    import panel as pn

    return [p.object for p in view.sides.select(pn.pane.Bokeh) if p.object is not None]


def _attached_app() -> tuple[Any, Any]:
    """A WorkbenchApp on the served default, its page in a bokeh Document, moved to the ``START`` plan."""
    from bokeh.document import Document
    from panel.io.state import set_curdoc
    from workbench_widgets.app.app import WorkbenchApp

    app = WorkbenchApp()
    doc = Document()
    with set_curdoc(doc):
        doc.add_root(app.panel().get_root(doc))
        for name, value in START:
            setattr(app.state, name, value)
    assert all(getattr(app.state, k) == v for k, v in START) and app.store.estimate is not None, (
        app.store.adjusted
    )
    return app, doc


def _values(app: Any, only: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    return [(name, getattr(app.state, name), other) for name, other in CHANGES if name in only]


def server_times(repeat: int, only: tuple[str, ...] = CONTROLS) -> dict[str, dict[str, Any]]:
    """Per control: the first change (a fresh estimate) and the median of ``repeat`` changes, in seconds,
    with the titles each value shows (what the browser waits for); ``compare``: tp of plan B with the starting
    plan pinned as A and the Compare tab shown (the Plan tab's figures are written too)."""
    from panel.io.state import set_curdoc

    app, doc = _attached_app()
    out: dict[str, dict[str, Any]] = {}
    for name, base, other in _values(app, only):
        out[name] = _timed(app, doc, name, base, other, repeat, _expected_titles)
    if "compare" in only:
        with set_curdoc(doc):
            app.show_tab("compare")
            app.store.pin()
        name, other = COMPARE_CHANGE
        out["compare"] = _timed(app, doc, name, getattr(app.state, name), other, repeat, _expected_compare)
        out["compare"]["control"] = name
        with set_curdoc(doc):
            app.store.pinned = None
            app.show_tab("plan")
    return out


def _timed(
    app: Any, doc: Any, name: str, base: Any, other: Any, repeat: int, expected: Any
) -> dict[str, Any]:
    from panel.io.state import set_curdoc

    titles = {base: expected(app)}
    times = []
    for i in range(repeat):
        value = other if i % 2 == 0 else base
        start = time.perf_counter()
        with set_curdoc(doc):
            setattr(app.state, name, value)
        times.append(time.perf_counter() - start)
        assert getattr(app.state, name) == value and app.store.estimate is not None, (name, value)
        titles.setdefault(value, expected(app))
    assert titles[base] != titles[other], f"{name}: the figures do not tell {base} from {other}"
    return {
        "from": base,
        "to": other,
        "first_s": times[0],
        "median_s": statistics.median(times),
        "titles": titles,
    }


def thread_cpu_s(thread: threading.Thread) -> float:
    """CPU time (s) ``thread`` has used so far (Linux and macOS: its POSIX CPU clock); NaN where not offered."""
    if thread.ident is None or not hasattr(time, "pthread_getcpuclockid"):
        return float("nan")
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def renderer_cpu_s() -> float:
    """CPU time (s) used so far by the Chromium renderer processes started from this process (all their
    threads; Linux ``/proc``); NaN elsewhere."""
    proc = Path("/proc")
    if not (proc / "self" / "task").is_dir():
        return float("nan")
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            if b"--type=renderer" not in (proc / str(pid) / "cmdline").read_bytes():
                continue
            for task in (proc / str(pid) / "task").iterdir():
                total += int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return total


def browser_times(server: dict[str, dict[str, Any]], repeat: int) -> dict[str, dict[str, Any]]:
    """Per control: median and spread of the browser time (s), median page and server CPU time (s) and
    median kB received over the websocket per change."""
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
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")

            def task_s() -> float:
                metrics = cdp.send("Performance.getMetrics")["metrics"]
                return float(next(m["value"] for m in metrics if m["name"] == "TaskDuration"))

            received: list[int] = []
            page.on(
                "websocket",
                lambda ws: ws.on("framereceived", lambda payload: received.append(len(payload))),
            )
            page.goto(served.url, wait_until="load", timeout=120_000)
            page.wait_for_function(f"() => Object.keys(({FIGURE_TITLES_JS})()).length === 2", timeout=120_000)
            for name, value in START:  # as _attached_app moves the app in this process
                page.locator(f".wb-sidebar .wb-{name} select").first.select_option(str(value))
                page.wait_for_timeout(500)
            first = next(iter(server.values()))
            opening = first["titles"][first["from"]] if "control" not in first else None
            if opening is not None:  # the page shows the START plan
                page.wait_for_function(
                    f"(want) => JSON.stringify(({FIGURE_TITLES_JS})()) === JSON.stringify(want)",
                    arg=opening,
                    timeout=60_000,
                )
            page.wait_for_timeout(1500)  # the page settles (fonts, layout) before the first change
            for name, case in server.items():
                control = case.get("control", name)
                script = CHANGE_JS
                if name == "compare":
                    page.locator(".bk-tab", has_text="Compare").first.click()
                    page.locator(".wb-pin button").first.click()
                    page.wait_for_function(
                        f"""(want) => {{ const t = ({COMPARE_JS})();
                          return Object.keys(want).every((k) => t[k] && t[k][0] === want[k][0]); }}""",
                        arg=case["titles"][case["from"]],
                        timeout=60_000,
                    )
                    page.wait_for_timeout(1000)
                    script = COMPARE_CHANGE_JS
                select = page.locator(f".wb-sidebar .wb-{control} select").first.element_handle()
                times, patch_times, kbytes, page_cpu, server_cpu, tasks = [], [], [], [], [], []
                for i in range(repeat):
                    value = case["to"] if i % 2 == 0 else case["from"]
                    received.clear()
                    task0, page0, cpu0 = task_s(), renderer_cpu_s(), thread_cpu_s(served.thread)
                    ms, patch_ms = page.evaluate(script, [select, str(value), case["titles"][value], 30_000])
                    server_cpu.append(thread_cpu_s(served.thread) - cpu0)
                    page_cpu.append(renderer_cpu_s() - page0)
                    tasks.append(task_s() - task0)
                    if ms < 0:
                        raise TimeoutError(f"{name} = {value}: the figures did not change within 30 s")
                    page.wait_for_timeout(300)  # late messages (e.g. option lists) are counted too
                    times.append(ms / 1e3)
                    patch_times.append(patch_ms / 1e3)
                    kbytes.append(sum(received) / 1e3)
                out[name] = {
                    "median_s": statistics.median(times),
                    "min_s": min(times),
                    "max_s": max(times),
                    "page_cpu_s": statistics.median(page_cpu),
                    "server_cpu_s": statistics.median(server_cpu),
                    "page_task_s": statistics.median(tasks),
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
            "change": f"{case.get('control', '') + ' of B ' if name == 'compare' else ''}{case['from']} <-> {case['to']}",
            "browser_median_s": browser[name]["median_s"],
            "browser_min_s": browser[name]["min_s"],
            "browser_max_s": browser[name]["max_s"],
            "page_cpu_s": browser[name]["page_cpu_s"],
            "server_cpu_s": browser[name]["server_cpu_s"],
            "page_task_s": browser[name]["page_task_s"],
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
        f"{'control':<18}{'change':<32}{'browser':>9}{'min-max':>12}{'page CPU':>10}{'srv CPU':>9}{'page task':>11}"
        f"{'patch at':>10}{'received':>10}{'server':>8}{'first':>8}"
    )
    for name, r in rows.items():
        spread = f"{r['browser_min_s'] * 1e3:.0f}-{r['browser_max_s'] * 1e3:.0f}"
        print(
            f"{name:<18}{r['change']:<32}{_ms(r['browser_median_s']):>9}{spread:>12}"
            f"{_ms(r['page_cpu_s']):>10}{_ms(r['server_cpu_s']):>9}{_ms(r['page_task_s']):>11}"
            f"{_ms(r['patch_arrives_s']):>10}{r['received_kB']:>7.0f} kB{_ms(r['server_median_s']):>8}"
            f"{_ms(r['server_first_s']):>8}"
        )
    worst_browser = max((r["browser_median_s"] for n, r in rows.items() if n != "compare"), default=0.0)
    worst_server = max((r["server_median_s"] for n, r in rows.items() if n != "compare"), default=0.0)
    compare = rows["compare"]["browser_median_s"] if "compare" in rows else None
    print(
        f"browser: median (and min-max) from the change event to the painted figures; page CPU: the renderer "
        f"process's CPU time over it; srv CPU: the served app's thread's; page task: the page's main-thread "
        f"task time; patch at: when "
        f"the session's patch arrives; server: State -> figures in process (first: a fresh estimate). "
        f"{args.repeat} changes per control, 64 devices, load average {os.getloadavg()[0]:.1f}.\n"
        f"floors: browser <= {BROWSER_FLOOR_S * 1e3:.0f} ms "
        f"[{'OK' if worst_browser <= BROWSER_FLOOR_S else 'SLOW'}: worst median {worst_browser * 1e3:.0f} ms], "
        f"server <= {SERVER_FLOOR_S * 1e3:.0f} ms "
        f"[{'OK' if worst_server <= SERVER_FLOOR_S else 'SLOW'}: worst median {worst_server * 1e3:.0f} ms]"
        + (
            ""
            if compare is None
            else f", Compare tab <= {COMPARE_FLOOR_S * 1e3:.0f} ms "
            f"[{'OK' if compare <= COMPARE_FLOOR_S else 'SLOW'}: median {compare * 1e3:.0f} ms]"
        )
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


if __name__ == "__main__":
    main()
