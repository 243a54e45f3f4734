"""Accuracy of the analytic backend on the public validation set, and its per-estimate time.

Prints: throughput MAPE overall and per source, Korthikanti Table 5 step-time MAPE, peak-memory MAPE
(overall and per source), the published plans the memory model calls non-fitting (by the planner's fit rule),
skipped rows with reasons, the plan-ranking check on the public set's grids (for
each group of rows with the same model, device, device count and sequence length: the measured throughput
of the predicted-best row over the measured best), and the time of one estimate at pp=64, m=512.
With ``--cv`` the MAPE figures are leave-one-source-out (the headline) with the in-sample ones beside them.
With ``--cv`` it also prints the mean signed error, the error band's out-of-sample coverage and every fitted
constant's spread over the folds (:mod:`workbench.validate.band`).
Usage: python benchmarks/bench_accuracy.py [--data CSV] [--calibration NAME] [--cv]
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


def ranking(rows: list[dict]) -> None:
    """Plan-ranking check: groups of >= 3 rows of one source with the same model, devices and sequence."""
    import csv
    from collections import defaultdict

    from workbench.validate import DEFAULT_DATA

    with open(DEFAULT_DATA, encoding="utf-8") as fh:
        meta = {r["id"]: r for r in csv.DictReader(fh)}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        m = meta[r["id"]]
        if r["metric"] in ("measured_tokens_per_s_per_device", "measured_mfu", "measured_tflops_per_device"):
            key = (r["source_key"], m["model_name"], m["device"], m["num_devices"], m["seq_len"], m["dtype"])
            groups[key].append(r)
    worst = 1.0
    for key, members in sorted(groups.items()):
        if len(members) < 3:
            continue
        picked = max(members, key=lambda r: r["predicted"])
        best = max(r["measured"] for r in members)
        ratio = picked["measured"] / best
        worst = min(worst, ratio)
        if ratio < 0.95:
            print(
                f"  ranking miss {key}: predicted-best {picked['id']} reaches {ratio:.1%} of the measured best"
            )
    print(f"plan ranking: worst predicted-best / measured-best over the grids = {worst:.1%}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--calibration", default="default")
    ap.add_argument("--cv", action="store_true", help="leave one source out (refits; a few minutes)")
    args = ap.parse_args()
    if args.cv:
        from workbench.validate.band import cross_validate_with_band

        res, _ = cross_validate_with_band(args.data, calibration=args.calibration)
    else:
        res = run_validation(args.data, calibration=args.calibration)
    if args.cv:
        ins = res["in_sample"]
        print(f"in-sample throughput MAPE: {ins['mape']:.1%}; memory {ins['memory_mape']:.1%}")
        for src, v in sorted(ins["mape_by_source"].items()):
            print(f"  in-sample {src:20s} {v:6.1%}")
        print("out-of-sample (leave one source out):")
    n = sum(r["ape"] is not None for r in res["rows"])
    print(f"throughput MAPE overall: {res['mape']:.1%} over {n} rows")
    for src, v in sorted(res["mape_by_source"].items()):
        k = sum(r["source_key"] == src and r["ape"] is not None for r in res["rows"])
        print(f"  {src:20s} {v:6.1%}  ({k} rows)")
    print(f"Korthikanti T5 step-time MAPE: {res['mape_by_source'].get('KORTHIKANTI22_T5', float('nan')):.1%}")
    print(f"peak memory MAPE: {res['memory_mape']:.1%}")
    for src, v in sorted(res["memory_mape_by_source"].items()):
        print(f"  {src:20s} {v:6.1%}")
    misses = res.get("not_fitting", [])
    print(f"published plans the memory model calls non-fitting: {len(misses)} (floor: 0)")
    for m in misses:
        print(
            f"  {m['id']:20s} {m['plan']}: needs {m['predicted_need_GiB']:.1f} of {m['usable_GiB']:.1f} GiB usable"
        )
    for s in res["skipped"]:
        print(f"skipped {s['id']}: {s['reason']}")
    ranking(res["rows"])
    if args.cv:
        signed = res["signed_error"]
        print(f"mean signed error (predicted / measured throughput - 1): {signed['overall']:+.1%}")
        for src, v in signed["by_source"].items():
            print(f"  {src:20s} {v:+6.1%}")
        cov = res["band"]["coverage"]
        print(
            f"80% band coverage out of sample: {cov['overall']:.1%} of {cov['num_residuals']} runs "
            f"(validated {cov['validated']:.1%}, widened {cov['widened'] or 0:.1%} of {cov['num_widened']})"
        )
        for c in res["constant_spread"]:
            print(
                f"  {c['group']:20s} {c['constant']:28s} {c['value']:.3g} "
                f"[{c['fold_min']:.3g}, {c['fold_max']:.3g}] std {c['fold_std']:.2g} over {c['num_folds']} folds"
                f" (applied {c['applied_min']:.3g}-{c['applied_max']:.3g})"
            )
    first, best = per_estimate_time_s()
    print(f"estimate at pp=64, m=512: first call {first:.3f} s, repeated (cached schedule) {best:.3f} s")


if __name__ == "__main__":
    main()
