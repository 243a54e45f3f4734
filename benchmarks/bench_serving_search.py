"""Serving search speed: ``serve_search`` for Llama-3.1-70B on one DGX H100 node (8 GPUs), TTFT p99 <= 2 s and
TPOT p99 <= 100 ms, Poisson arrivals of 1,024-token prompts and 1,024-token outputs (issue 16 floor: under 5 s).

The search screens every plan of the default space (tp 1-8, replicas filling the node, bf16/fp8 weights and KV,
max_num_seqs 64/256, token budgets 2,048/8,192, sarathi and vllm schedulers, disaggregated prefill:decode splits)
with closed forms and simulates the best ``--simulate`` of them (default 10), each to a 5% rate tolerance, with
``--requests`` judged requests per run (default 200) plus the warm-up ones.

Run: python benchmarks/bench_serving_search.py [--repeat N] [--requests N] [--simulate K]. Reports the best of N
runs in wall seconds and CPU seconds of this process (the search is single-threaded), the plans screened and
simulated, and the best plan with its goodput.
"""

from __future__ import annotations

import argparse
import time

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.search.serving import NO_TARGET_RATE_PER_S, ServingSearchConstraints, serve_search
from workbench.specs.serving import SLO, ServingWorkload

FLOOR_S = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--simulate", type=int, default=10, help="plans simulated")
    args = parser.parse_args()
    model, cluster, calibration = load_model("llama-3.1-70b"), load_cluster("dgx-h100", 1), load_calibration()
    workload = ServingWorkload(arrival="poisson", request_rate_per_s=NO_TARGET_RATE_PER_S,
                               num_requests=args.requests, input_tokens=1024, output_tokens=1024)  # fmt: skip
    slo = SLO(ttft_s=2.0, tpot_s=0.1, percentile="p99")
    constraints = ServingSearchConstraints(top_k=args.simulate)
    wall, cpu = [], []
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        result = serve_search(model, cluster, workload, slo, calibration, constraints=constraints)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    best = result.table.row(0, named=True)
    print(
        f"{model.name} on {cluster.num_devices} x {cluster.device.id}, TTFT p99 <= 2 s, TPOT p99 <= 100 ms, "
        f"Poisson 1024/1024 tokens; best of {args.repeat} runs"
    )
    print(
        f"{result.num_candidates} plans, {result.screened.height} passed the screen, {result.table.height} "
        f"simulated in {result.num_simulations} runs"
    )
    print(f"wall {min(wall):.2f} s, CPU {min(cpu):.2f} s (all runs: {', '.join(f'{w:.2f}' for w in wall)} s)")
    print(
        f"best: {best['plan']} max_num_seqs {best['max_num_seqs']}: {best['goodput_requests_per_s']:.2f} requests/s "
        f"({best['goodput_output_tokens_per_s_per_device']:,.0f} output tokens/s per device), TTFT p99 "
        f"{best['ttft_s_at_goodput'] * 1e3:.0f} ms, TPOT p99 {best['tpot_s_at_goodput'] * 1e3:.1f} ms"
    )
    print(f"floor {FLOOR_S:g} s: {'PASS' if min(wall) < FLOOR_S else 'ABOVE FLOOR'}")


if __name__ == "__main__":
    main()
