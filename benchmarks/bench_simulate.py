"""Simulator speed: actions simulated per second for p=64, m=512, vpp=2 (interleaved ZB-H1, 196,608
actions with split backward). Floor: 1,000,000 actions/s.

Run: python benchmarks/bench_simulate.py [--repeat N] [--schedule NAME]. Reports the best and median of N runs of
building the schedule and simulating it (timeline, comm and in-flight frames included), in CPU time
(``time.process_time``: on a shared machine wall time also counts the waits for a core) with wall time beside it.
A refined plan pays both (issue 52: the build was 2-4x the simulation; built as arrays it is a tenth to
two thirds of it at p=32, m=256; the greedy zero-bubble ones 0.4-0.6).
``--all`` prints, for every registered schedule at p=32 and m=256 (its default vpp), the best build and
simulation CPU time and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

from workbench.pipeline.schedules import SCHEDULE_NAMES, build_schedule, default_vpp
from workbench.pipeline.simulate import StageCosts, simulate

FLOOR_ACTIONS_PER_S = 1_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--schedule", default="zb-h1")
    parser.add_argument(
        "--all", action="store_true", help="build vs simulate for every schedule (p=32, m=256)"
    )
    args = parser.parse_args()
    if args.all:
        every_schedule(args.repeat)
        return
    builds, sims, walls = [], [], []
    for _ in range(args.repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        schedule = build_schedule(args.schedule, pp=64, num_microbatches=512, vpp=2)
        built = time.process_time()
        simulate(schedule, _costs(schedule.num_stages, 2))
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


def every_schedule(repeat: int) -> None:
    """Best CPU time of building and of simulating every registered schedule at p=32, m=256, default vpp."""
    for name in SCHEDULE_NAMES:
        vpp = default_vpp(name)
        builds, sims = [], []
        for _ in range(repeat):
            cpu = time.process_time()
            schedule = build_schedule(name, pp=32, num_microbatches=256, vpp=vpp)
            built = time.process_time()
            simulate(schedule, _costs(schedule.num_stages, vpp))
            builds.append(built - cpu)
            sims.append(time.process_time() - built)
        print(
            f"{name:17s} vpp={vpp} {schedule.num_actions:7,} actions: build {min(builds):.4f} CPU-s, simulate "
            f"{min(sims):.4f} CPU-s, build/simulate {min(builds) / min(sims):.2f}"
        )


def _costs(num_stages: int, vpp: int) -> StageCosts:
    return StageCosts.uniform(
        num_stages=num_stages,
        vpp=vpp,
        forward_s=1e-3,
        backward_s=2e-3,
        backward_weight_s=1e-3,
        p2p_s=1e-4,
        activation_bytes=1e9,
    )


if __name__ == "__main__":
    main()
