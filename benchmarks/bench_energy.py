"""Power and energy of the model (workbench/cost/energy.py, profiles/power/devices.toml) beside published figures.

Run: ``.venv/bin/python benchmarks/bench_energy.py`` (a few seconds; no GPU). No constant is fitted to these
figures; the activity fractions of the power table are stated assumptions, and this is where they are checked.

(a) Node power while training an LLM on one 8x H100 node (the model's mean IT power of a DGX H100 node, devices and
    node overhead) against measurements: Latif et al., "Single-Node Power Demand During AI Training: Measurements on
    an 8-GPU NVIDIA H100 System", IEEE Access 13:61740-61747 (2025): maximum ~8.4 kW while training Llama 2 13B;
    Newkirk et al., arXiv:2506.14551 (2025-06-17): compute-intensive training at 76% of the node's 10.2 kW rating
    (7.75 kW). Floor: within 15% of 7.75 kW and not above the measured maximum.
(b) A power cap: Meta's H100 96GB at 500 W reaches a 780 TFLOP/s BF16 peak where the 700 W part has ~1,000 (MTIA 300
    paper, Table III and its footnote). The model's clock fraction at 500 W (cube law, energy.py) beside it.
(c) Energy per GPU-hour of the Llama 3.1 405B run: the model card (meta-llama/Llama-3.1-405B, "Training
    Energy Use") counts 30.84M H100-80GB GPU-hours at the 700 W TDP ("peak power capacity per GPU device") and
    8,930 t CO2eq location-based; the model's IT power per GPU-hour of the paper's plan, the run's energy over the
    card's GPU-hours, and the CO2e at the grid intensity the card's figures imply.
"""

from __future__ import annotations

from dataclasses import replace

from workbench.estimate.analytic import estimate_plan
from workbench.estimate.economics import economics, power_inputs
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.plan import ParallelPlan, Workload
from workbench.specs.power import EnergyOptions

LATIF_MAX_W = 8400.0
NEWKIRK_W = 0.76 * 10200.0
MTIA_RATIO = 780.0 / 1000.0
CARD_GPU_HOURS = 30.84e6
CARD_TDP_W = 700.0
CARD_CO2E_T = 8930.0


def part_a() -> bool:
    cluster = load_cluster("dgx-h100")
    options = EnergyOptions()
    power, overhead, _ = power_inputs(cluster, options)
    print("(a) one DGX H100 node training Llama 2 13B (seq 4096, batch 64), model IT power vs measured")
    ok = True
    for plan in (ParallelPlan(dp=8, zero_stage=3), ParallelPlan(dp=4, tp=2, zero_stage=1)):
        est = estimate_plan(
            load_model("llama-2-13b"), cluster, Workload(seq_len=4096, global_batch_size=64), plan
        )
        e = economics(est, power=power, options=options, node_overhead_w=overhead)
        err = e.node_avg_w / NEWKIRK_W - 1
        good = abs(err) <= 0.15 and e.node_avg_w <= LATIF_MAX_W
        ok = ok and good
        print(
            f"    {plan.describe():<32} MFU {est.mfu:5.1%}  node {e.node_avg_w / 1e3:5.2f} kW "
            f"({e.device_avg_w:4.0f} W per GPU + {overhead / 1e3:.1f} kW overhead)  vs 7.75 kW (Newkirk) "
            f"{err:+.1%}, max 8.4 kW (Latif): {'PASS' if good else 'FAIL'}"
        )
    return ok


def part_b() -> None:
    from workbench.cost.energy import compute_clock_frac

    cluster = load_cluster("dgx-h100")
    power, _, _ = power_inputs(cluster, EnergyOptions())
    frac = compute_clock_frac(power, 500.0)
    print("\n(b) H100 capped at 500 W: compute throughput over the 700 W part")
    print(
        f"    model (P - P_idle ~ f^3, idle {power.idle_w:.0f} W): {frac:.3f}   published (MTIA 300 paper, "
        f"Table III: 780 vs ~1,000 TFLOP/s): {MTIA_RATIO:.3f}   error {frac / MTIA_RATIO - 1:+.1%}"
    )


def part_c() -> None:
    model = load_model("llama-3.1-405b")
    cluster = load_cluster("dgx-h100", num_nodes=2048)
    plan = ParallelPlan(dp=128, tp=8, pp=16, micro_batch_size=1, zero_stage=1, sequence_parallel=True)
    # 126 layers on pp16: priced on a 128-layer copy, as bench_goodput.py does (the paper's first and last
    # stages hold one layer fewer)
    est = estimate_plan(
        replace(model, num_layers=128), cluster, Workload(seq_len=8192, global_batch_size=2048), plan
    )
    options = EnergyOptions()
    power, overhead, _ = power_inputs(cluster, options)
    e = economics(est, power=power, options=options, node_overhead_w=overhead)
    per_gpu_w = e.node_avg_w / cluster.devices_per_node
    card_kwh = CARD_GPU_HOURS * CARD_TDP_W / 1e3
    model_kwh = CARD_GPU_HOURS * per_gpu_w / 1e3
    grid = CARD_CO2E_T * 1e3 / card_kwh
    print("\n(c) Llama 3.1 405B on 16,384 H100 (tp8 pp16 dp128): energy per GPU-hour")
    print(
        f"    model: {e.device_avg_w:.0f} W per GPU + {overhead / 8:.0f} W node overhead per GPU = {per_gpu_w:.0f} W "
        f"(IT, PUE 1); model card: {CARD_TDP_W:.0f} W (the TDP, GPU only)"
    )
    print(
        f"    over the card's 30.84M GPU-hours: model {model_kwh / 1e6:.1f} GWh vs card {card_kwh / 1e6:.1f} GWh "
        f"({model_kwh / card_kwh - 1:+.1%}); CO2e at the card's implied {grid:.3f} kg/kWh: "
        f"{model_kwh * grid / 1e3:,.0f} t vs {CARD_CO2E_T:,.0f} t"
    )


if __name__ == "__main__":
    ok = part_a()
    part_b()
    part_c()
    print(f"\n(a) {'PASS' if ok else 'FAIL'}")
