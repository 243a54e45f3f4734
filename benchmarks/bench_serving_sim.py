"""Serving simulator speed: simulated requests per second on one core for a 10,000-request Poisson trace on one
8-GPU engine (issue 16 floor: 50,000 requests/s).

Two costs: a closed-form fake (a few arithmetic operations per iteration, so the number is the simulator's own
speed) and ``ReplicaCost`` of Llama-3.1-70B at tp=8 on one DGX H100 node with the default calibration (the
analytic per-iteration cost, about 5 us a call; the simulator makes about 3.5 calls per request). Lengths: prompts
uniform in 128..2047 tokens, outputs uniform in 16..511 tokens; 10 requests/s, the same trace for both costs (the
engine's offline capacity for these lengths: about 14 requests/s under ``ReplicaCost``, 19 under the fake).

Run: python benchmarks/bench_serving_sim.py [--repeat N] [--requests N] [--rate R]. Reports, per cost and
scheduler policy, the best of N runs of ``simulate`` in requests per CPU second of this process (``process_time``:
the simulator is single-threaded, so this is one core's rate even on a shared machine) and per wall second
(request and iteration tables included; building the trace and the cost excluded).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from workbench.serving.simulate import IterationCost, Requests, simulate

FLOOR_REQUESTS_PER_S = 50_000


class FakeCost:
    """Closed form: 10 ms per iteration + 10 ms per prefill chunk + 0.1 ms per decode sequence."""

    kv_capacity_tokens = 1_400_000
    kv_block_tokens = 16

    def iteration_s(self, new: np.ndarray, context: np.ndarray, decode: np.ndarray) -> float:
        return 0.01 + 1e-2 * len(new) + 1e-4 * len(decode)

    def kv_transfer_s(self, tokens: int) -> float:
        return 0.0


def replica_cost() -> IterationCost | None:
    """ReplicaCost of Llama-3.1-70B, tp=8 on one DGX H100 node, or None when the serving cost is unavailable."""
    try:
        from workbench.presets.calibration import load_calibration
        from workbench.presets.catalog import load_cluster, load_model
        from workbench.serving.cost import ReplicaCost
        from workbench.specs.serving import ServingPlan
    except ImportError:
        return None
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", 1)
    return ReplicaCost.of(model, cluster, ServingPlan(tp=8), load_calibration())


def measure(requests: Requests, cost: IterationCost, policy: str, repeat: int) -> tuple[float, float, int]:
    """Best requests per CPU second and per wall second over ``repeat`` runs, and the iterations simulated."""
    cpu, wall, iterations = [], [], 0
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        result = simulate(requests, cost, policy=policy, max_num_seqs=256, max_num_batched_tokens=8192)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        iterations = result.iterations.height
    n = len(requests)
    return n / min(cpu), n / min(wall), iterations


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=10.0, help="arrivals per second")
    args = parser.parse_args()
    n = args.requests
    rng = np.random.default_rng(0)
    requests = Requests.poisson(
        args.rate, n, input_tokens=rng.integers(128, 2048, n), output_tokens=rng.integers(16, 512, n), seed=1
    )
    costs: list[tuple[str, IterationCost | None]] = [
        ("fake closed form", FakeCost()),
        ("ReplicaCost 70B tp8", None),
    ]
    costs[1] = (costs[1][0], replica_cost())
    print(f"{n:,} Poisson requests at {args.rate:g}/s, one engine; best of {args.repeat} runs")
    slowest_fake = math.inf
    for name, cost in costs:
        if cost is None:
            print(f"{name}: unavailable (workbench.serving.cost.ReplicaCost missing)")
            continue
        for policy in ("vllm", "sarathi"):
            per_cpu_s, per_wall_s, iterations = measure(requests, cost, policy, args.repeat)
            if cost is costs[0][1]:
                slowest_fake = min(slowest_fake, per_cpu_s)
            print(
                f"{name:20s} {policy:8s}: {per_cpu_s:,.0f} requests per CPU second, {per_wall_s:,.0f} per wall "
                f"second ({iterations:,} iterations)"
            )
    print(
        f"floor {FLOOR_REQUESTS_PER_S:,} requests/s (fake cost): {'PASS' if slowest_fake >= FLOOR_REQUESTS_PER_S else 'BELOW FLOOR'}"
    )


if __name__ == "__main__":
    main()
