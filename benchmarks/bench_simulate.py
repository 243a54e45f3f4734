"""Simulator speed: actions simulated per second for p=64, m=512, vpp=2 (interleaved ZB-H1, 196,608
actions with split backward). Floor: 1,000,000 actions/s.

Run: python benchmarks/bench_simulate.py [--repeat N]. Reports the best and median of N runs of building the
schedule and simulating it (timeline, comm and in-flight frames included), in CPU time (``time.process_time``:
on a shared machine wall time also counts the waits for a core) with wall time beside it. A refined plan pays
both (issue 52: the build was 4x the simulation; now it costs no more than the simulation).
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
    builds, sims, walls = [], [], []
    for _ in range(args.repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        schedule = build_schedule(args.schedule, pp=64, num_microbatches=512, vpp=2)
        built = time.process_time()
        costs = StageCosts.uniform(
            num_stages=schedule.num_stages,
            vpp=2,
            forward_s=1e-3,
            backward_s=2e-3,
            backward_weight_s=1e-3,
            p2p_s=1e-4,
            activation_bytes=1e9,
        )
        simulate(schedule, costs)
        builds.append(built - cpu)
        sims.append(time.process_time() - built)
        walls.append(time.perf_counter() - wall)
    n = schedule.num_actions
    totals = [b + s for b, s in zip(builds, sims, strict=True)]
    best, median = n / min(totals), n / statistics.median(totals)
    print(
        f"{args.schedule} p=64 m=512 vpp=2: {n:,} actions; CPU per run: build {min(builds):.3f} s, simulate "
        f"{min(sims):.3f} s (best of {args.repeat}); wall per run best {min(walls):.3f} s"
    )
    print(
        f"build + simulate: best {best:,.0f} actions per CPU-s, median {median:,.0f} "
        f"(wall best {n / min(walls):,.0f} actions/s; floor {FLOOR_ACTIONS_PER_S:,} per CPU-s)"
    )
    print("PASS" if best >= FLOOR_ACTIONS_PER_S else "BELOW FLOOR")
    print("build <= simulate" if min(builds) <= min(sims) else "build > simulate")


if __name__ == "__main__":
    main()
