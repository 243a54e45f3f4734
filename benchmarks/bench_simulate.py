"""Simulator speed: actions simulated per second for p=64, m=512, vpp=2 (interleaved ZB-H1, 196,608
actions with split backward). Floor: 1,000,000 actions/s.

Run: python benchmarks/bench_simulate.py [--repeat N]. Reports the best and median of N runs of
``simulate`` (timeline, comm and in-flight frames included; building the schedule excluded).
"""

from __future__ import annotations

import argparse
import statistics
import time

from workbench.pipeline.schedules import build_schedule
from workbench.pipeline.simulate import StageCosts, simulate

FLOOR_ACTIONS_PER_S = 1_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--schedule", default="zb-h1")
    args = parser.parse_args()
    t0 = time.perf_counter()
    schedule = build_schedule(args.schedule, pp=64, num_microbatches=512, vpp=2)
    build_s = time.perf_counter() - t0
    costs = StageCosts.uniform(
        num_stages=schedule.num_stages,
        vpp=2,
        forward_s=1e-3,
        backward_s=2e-3,
        backward_weight_s=1e-3,
        p2p_s=1e-4,
        activation_bytes=1e9,
    )
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        simulate(schedule, costs)
        times.append(time.perf_counter() - t0)
    n = schedule.num_actions
    best, median = n / min(times), n / statistics.median(times)
    print(f"{args.schedule} p=64 m=512 vpp=2: {n:,} actions; build {build_s:.2f} s")
    print(
        f"simulate: best {best:,.0f} actions/s, median {median:,.0f} actions/s (floor {FLOOR_ACTIONS_PER_S:,})"
    )
    print("PASS" if best >= FLOOR_ACTIONS_PER_S else "BELOW FLOOR")


if __name__ == "__main__":
    main()
