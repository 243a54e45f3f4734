"""Server-side latency of one widget change in the Panel app (target: at most 100 ms, issue 19 item 12).

The plan is the issue's case: 64 ranks (8 nodes of 8 devices), 256 micro-batches (global batch 256,
dp x micro-batch = 1), analytic backend. The page is attached to a bokeh ``Document`` as a served session
would be, and each measured change goes from the widget's new value through the Store (estimate), the views
(figures from ``workbench_widgets.plots``) to the document patch that would be sent to the browser.

Run: ``python benchmarks/bench_app.py [--repeat N] [--change latency|recompute] [--json]``. Each change
alternates between values whose estimates are not cached, so every sample pays for a fresh estimate.
``latency`` (the default) changes the scale-out latency: the app writes the new data into the timeline and
breakdown shown (no new bokeh models) and keeps the memory figure. ``recompute`` toggles selective/full
recompute: the memory bars change too and are written in place as well.

The time from a change in the browser to the painted figures, with this server-side part inside it, is
measured by ``benchmarks/bench_app_latency.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from bokeh.document import Document
from panel.io.state import set_curdoc

TARGET_S = 0.100
CASES: dict[str, dict[str, Any]] = {
    "tp8-pp8 (pp=8 lanes)": {"tp": 8, "pp": 8},
    "tp1-pp64-like (64 pipeline ranks)": {"tp": 1, "pp": 64},
}
"""The second case is a 128-layer edit of the model so that pp=64 divides the layers: 64 timeline lanes."""


def build(case: dict[str, Any]) -> tuple[Any, Any, Document]:
    from workbench_widgets.app.app import WorkbenchApp
    from workbench_widgets.app.state import WorkbenchState

    state = WorkbenchState()
    app = WorkbenchApp(state=state)
    updates: dict[str, Any] = {
        "num_nodes": 8,
        "global_batch_size": 256,
        "micro_batch_size": 1,
        "zero_stage": 1,
        "recompute": "selective",
        "schedule": "1f1b",
    }
    if case["pp"] == 64:
        updates["num_layers"] = 128
    state.param.update(**updates)
    app.store.load_plan({"tp": case["tp"], "pp": case["pp"], "cp": 1, "vpp": 1, "micro_batch_size": 1})
    doc = Document()
    with set_curdoc(doc):
        doc.add_root(app.panel().get_root(doc))
    return app, state, doc


def _change(app: Any, change: str, i: int) -> None:
    if change == "recompute":  # one batched change of two controls, so that the estimate is never cached
        app.state.param.update(recompute=("full", "selective")[i % 2], scale_out_latency_us=20.0 + i * 1e-3)
        return
    value = 1 + (i % 4) * 0.25  # scale-out latency in us: a change every layer of the app reacts to
    app.composer.widgets["scale_out_latency_us"].value = 10.0 + value + i * 1e-3


def measure(case: dict[str, Any], repeat: int, change: str = "latency") -> dict[str, Any]:
    app, state, doc = build(case)
    assert app.store.estimate is not None, app.store.violations or app.store.error
    est = app.store.estimate
    timings, cpu = [], []
    for i in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        with set_curdoc(doc):  # as in a served session's callback
            _change(app, change, i)
        timings.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        assert app.store.estimate is not None
    return {
        "ranks": est.plan.num_devices,
        "pp": est.plan.pp,
        "microbatches": est.plan.num_microbatches(est.workload),
        "timeline_rows": est.timeline.height,
        "median_s": statistics.median(timings),
        "max_s": max(timings),
        "min_s": min(timings),
        "median_cpu_s": statistics.median(cpu),
        "load_average_1min": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--change", choices=("latency", "recompute"), default="latency")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {name: measure(case, args.repeat, args.change) for name, case in CASES.items()}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, r in results.items():
        ok = "OK" if r["median_s"] < TARGET_S else "SLOW"
        print(
            f"{name}: {r['ranks']} ranks, pp={r['pp']}, m={r['microbatches']}, {r['timeline_rows']:,} timeline rows: "
            f"median {r['median_s'] * 1e3:.0f} ms (CPU {r['median_cpu_s'] * 1e3:.0f} ms), min {r['min_s'] * 1e3:.0f} ms, "
            f"max {r['max_s'] * 1e3:.0f} ms [{ok}: target {TARGET_S * 1e3:.0f} ms; load average "
            f"{r['load_average_1min']:.1f}]"
        )


if __name__ == "__main__":
    main()
