"""Accuracy of the analytic backend on the public validation set, and its per-estimate time.

Prints: throughput MAPE overall and per source, Korthikanti Table 5 step-time MAPE, peak-memory MAPE
(overall and per source), skipped rows with reasons, and the time of one estimate at pp=64, m=512.
Usage: python benchmarks/bench_accuracy.py [--data CSV] [--calibration NAME]
"""

from __future__ import annotations

import argparse
import time

from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.plan import ParallelPlan, Workload
from workbench.validate import DEFAULT_DATA, run_validation


def per_estimate_time_s(repeats: int = 3) -> tuple[float, float]:
    """(first call, best repeated call) seconds for GPT 1T, tp8 pp64, 512 micro-batches, 1F1B."""
    model, cluster = load_model("megatron-gpt-1t"), load_cluster("dgx-a100", num_nodes=64)
    workload = Workload(seq_len=2048, global_batch_size=512, dtype="fp16")
    plan = ParallelPlan(tp=8, pp=64, dp=1, micro_batch_size=1, sequence_parallel=True, recompute="selective")
    cal = load_calibration()
    t0 = time.perf_counter()
    estimate_plan(model, cluster, workload, plan, calibration=cal)
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        estimate_plan(model, cluster, workload, plan, calibration=cal)
        best = min(best, time.perf_counter() - t0)
    return first, best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--calibration", default="default")
    args = ap.parse_args()
    res = run_validation(args.data, calibration=args.calibration)
    n = sum(r["ape"] is not None for r in res["rows"])
    print(f"throughput MAPE overall: {res['mape']:.1%} over {n} rows")
    for src, v in sorted(res["mape_by_source"].items()):
        k = sum(r["source_key"] == src and r["ape"] is not None for r in res["rows"])
        print(f"  {src:20s} {v:6.1%}  ({k} rows)")
    print(f"Korthikanti T5 step-time MAPE: {res['mape_by_source'].get('KORTHIKANTI22_T5', float('nan')):.1%}")
    print(f"peak memory MAPE: {res['memory_mape']:.1%}")
    for src, v in sorted(res["memory_mape_by_source"].items()):
        print(f"  {src:20s} {v:6.1%}")
    for s in res["skipped"]:
        print(f"skipped {s['id']}: {s['reason']}")
    first, best = per_estimate_time_s()
    print(f"estimate at pp=64, m=512: first call {first:.3f} s, repeated (cached schedule) {best:.3f} s")


if __name__ == "__main__":
    main()
