"""Goodput of Llama 3.1 405B on 16,384 H100, and Llama 3's published "more than 90% effective training time".

Run: ``.venv/bin/python benchmarks/bench_goodput.py`` (a few seconds; no GPU).

(a) The Llama 3 plan at 8K sequences (Llama 3 paper, arXiv:2407.21783, Table 4: 16,384 GPUs, TP 8, CP 1, PP 16,
    DP 128, batch 16 sequences per DP rank = 2,048 sequences of 8,192 tokens, ~16M tokens per step) on 2,048
    DGX H100 nodes, with the ``llama3`` failure preset (Table 5): job MTBF, checkpoint size and write time,
    the optimal interval and goodput, for sync/async saves and with/without hot spares. The model has 126
    layers, which pp=16 does not divide; the paper (sec. 3.3.2) balances the pipeline by giving the first and
    the last stage one layer fewer (the embedding and the LM head take their place), so the step time is priced
    on a 128-layer copy of the model; the checkpoint is the real model's (405B parameters).
(b) Llama 3's "more than 90% effective training time" (sec. 3.3.4) from its published inputs: 419 unexpected
    interruptions in a 54-day snapshot on 16,384 GPUs (Table 5) and 47 planned ones; checkpoints of the model
    state to Tectonic at 2 TB/s sustained (sec. 3.3.1); spare capacity to restart without waiting for repairs
    (Meta, "How Meta trains large language models at scale", 2024-06-12). The restart time is not published:
    10 minutes ASSUMED (``profiles/failures/llama3.toml``), with 5 and 15 minutes shown as the band. Done when the
    central figure is within 5 points of 90%.
(c) Each failure preset with its own practice (``[practice]``: Llama 3 kept spare capacity and checkpointed
    asynchronously; OPT-175B waited for nodes) on its own run, beside the published figure, and the same run with
    the practice changed on purpose (``--spare-nodes``/``--on-failure``). Issue 50's bar: Llama 3 88-97%.
    OPT-175B's published figure is derived, not stated: the chronicles give ~33 days of compute "assuming no
    hardware issues, no numerical instabilities" (final_update.md, 2022-01-07) for a lineage that ran from
    2021-11-11 (10_percent_update.md) to 2022-01-06 12:46 PST, 56 days: ~59%, a floor for a model of hardware
    interruptions only (the wall time also holds the loss-explosion rollbacks of 27_percent_update.md).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from workbench.estimate.analytic import estimate_plan
from workbench.goodput import (
    GoodputOptions,
    cluster_goodput_columns,
    estimate_goodput,
    load_failures,
    state_bytes,
)
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.plan import ParallelPlan, Workload

PLAN = ParallelPlan(dp=128, tp=8, pp=16, cp=1, micro_batch_size=1, zero_stage=1, sequence_parallel=True)
WORKLOAD = Workload(seq_len=8192, global_batch_size=2048)


def _row(label: str, g: dict, step_s: float) -> str:
    return (
        f"{label:<38} MTBF {g['mtbf_s'] / 3600:5.2f} h  write {g['checkpoint_write_s']:6.1f} s  "
        f"stall {g['checkpoint_stall_s']:6.2f} s  interval {g['checkpoint_interval_s'] / 60:5.1f} min "
        f"({g['checkpoint_interval_s'] / step_s:4.0f} steps)  restart {g['restart_s']:5.0f} s  "
        f"goodput {g['goodput_frac']:.1%}"
    )


def _columns(cluster, size: float, step_s: float, failures, **options: object) -> dict:
    g = cluster_goodput_columns(
        cluster,
        dp=PLAN.dp,
        tp=PLAN.tp,
        cp=PLAN.cp,
        pp=PLAN.pp,
        checkpoint_bytes=size,
        step_time_s=step_s,
        failures=failures,
        options=GoodputOptions(**options),  # type: ignore[arg-type]
    )
    return {k: float(v) for k, v in g.items()}


def _checkpoint_bytes(model: Any, cluster: Any) -> float:
    """bf16 weights (2 B) + fp32 master and Adam moments (12 B, ZeRO sec. 3.1) per parameter, once."""
    return state_bytes(
        model, weight_bytes_per_param=2.0, optimizer_bytes_per_param=12.0, num_devices=cluster.num_devices
    ).total_bytes


def part_a() -> None:
    model = load_model("llama-3.1-405b")
    cluster = load_cluster("dgx-h100", num_nodes=2048)
    est = estimate_plan(replace(model, num_layers=128), cluster, WORKLOAD, PLAN)
    size = _checkpoint_bytes(model, cluster)
    failures = load_failures("llama3")
    print("(a) Llama 3.1 405B, 16,384 H100 (2,048 DGX H100), " + PLAN.describe() + ", seq 8192, batch 2048")
    print(
        f"    step {est.step_time_s:.2f} s, MFU {est.mfu:.1%} (paper, Table 4: 41%); checkpoint "
        f"{size / 1e12:.2f} TB = {model.total_parameters() / 1e9:.0f}B params x (2 B bf16 weights + 12 B fp32 "
        f"master + Adam moments); storage {cluster.storage.source if cluster.storage else 'defaults'}"
    )
    for label, opts in (
        ("sync, no spares (wait 4 h repair)", dict(checkpoint="sync")),
        ("async, no spares", dict(checkpoint="async")),
        ("async, 16 hot spare nodes", dict(checkpoint="async", spare_nodes=16)),
        ("async, no spares, shrink dp", dict(checkpoint="async", on_failure="shrink")),
    ):
        print(
            "    " + _row(label, _columns(cluster, size, est.step_time_s, failures, **opts), est.step_time_s)
        )


def part_b() -> float:
    model = load_model("llama-3.1-405b")
    tectonic = load_cluster("meta-grand-teton-h100").storage
    cluster = replace(load_cluster("dgx-h100", num_nodes=2048), storage=tectonic)
    size = _checkpoint_bytes(model, cluster)
    step_s = 16.8e6 / (16384 * 400e12 / (6 * 405e9 + 12 * 126 * 16384 * 8192 / 2))  # Table 4: 400 TFLOP/s/GPU
    base = load_failures("llama3")
    print("\n(b) Llama 3 effective training time, published: 'higher than 90%' (arXiv:2407.21783 sec. 3.3.4)")
    print(
        f"    inputs: 419 unexpected interruptions / 54 days / 16,384 GPUs (Table 5); checkpoint {size / 1e12:.2f} TB "
        f"to Tectonic at 2 TB/s sustained (sec. 3.3.1); spares: yes (Meta 2024-06-12); step {step_s:.1f} s "
        "(16M tokens at Table 4's 400 TFLOP/s per GPU)"
    )
    central = 0.0
    for restart_min in (5, 10, 15):
        failures = replace(base, restart_s=restart_min * 60.0)
        for mode in ("sync", "async"):
            g = _columns(cluster, size, step_s, failures, checkpoint=mode, spare_nodes=64)
            print("    " + _row(f"restart {restart_min:2d} min, {mode}, 64 spare nodes", g, step_s))
            if restart_min == 10 and mode == "sync":
                central = g["goodput_frac"]
    planned = replace(
        base,
        causes=(*base.causes, replace(base.causes[4], name="planned", rate_per_hour=47 / (2048 * 54 * 24))),
    )
    g = _columns(cluster, size, step_s, planned, checkpoint="sync", spare_nodes=64)
    print("    " + _row("+ 47 planned, each a full restart", g, step_s))
    ok = abs(central - 0.90) <= 0.05
    print(
        f"    central (10 min restart, sync save): {central:.1%} vs published > 90%: {'within' if ok else 'NOT within'} 5 points"
    )
    return central


PRESET_RUNS = {
    # preset: (model id, cluster id, nodes, plan, workload, published goodput text, (low, high) bar or None)
    "llama3": (
        "llama-3.1-405b",
        "dgx-h100",
        2048,
        PLAN,
        WORKLOAD,
        "> 90% effective training time (arXiv:2407.21783 sec. 3.3.4)",
        (0.88, 0.97),
    ),
    "opt-175b": (
        "gpt3-175b",  # OPT-175B has GPT-3 175B's shapes (arXiv:2205.01068 Table 1: 96 layers, 12288 wide)
        "dgx-a100",
        124,
        ParallelPlan(dp=124, tp=8, pp=1, micro_batch_size=8, zero_stage=3, sequence_parallel=False),
        Workload(seq_len=2048, global_batch_size=992),  # ~2M tokens per step (arXiv:2205.01068 Table 1)
        "~59% derived: 33 days of compute in 56 days of wall time (metaseq OPT chronicles)",
        None,
    ),
}


def part_c() -> bool:
    print("\n(c) each failure preset with its run's own practice, beside the published figure")
    ok = True
    for preset, (model_id, cluster_id, nodes, plan, work, published, bar) in PRESET_RUNS.items():
        failures = load_failures(preset)
        model = load_model(model_id)
        cluster = load_cluster(cluster_id, num_nodes=nodes)
        est = estimate_plan(model, cluster, work, plan)
        p = failures.practice
        print(
            f"    {preset}: {failures.name}; step {est.step_time_s:.2f} s on {cluster.num_devices} x "
            f"{cluster.device.id}"
        )
        rows = [
            ("its practice", p),
            ("no spares", p.with_overrides(spare_nodes=0)),
            ("shrink dp", p.with_overrides(spare_nodes=0, on_failure="shrink")),
        ]
        if int(p.spares(nodes)) == 0:
            rows[1] = ("16 spare nodes", p.with_overrides(spare_nodes=16))
        for label, opts in rows:
            # what `workbench estimate --failures` reports (its checkpoint from the estimate's memory table)
            g = {
                k: v for k, v in asdict(estimate_goodput(est, failures, opts)).items() if isinstance(v, float)
            }
            spares = int(opts.spares(nodes))
            text = f"{label} ({opts.checkpoint}, {spares} spares, {opts.on_failure})"
            print("      " + _row(text, g, est.step_time_s))
            if label == "its practice":
                verdict = ""
                if bar is not None:
                    inside = bar[0] <= g["goodput_frac"] <= bar[1]
                    ok = ok and inside
                    verdict = f"  bar {bar[0]:.0%}-{bar[1]:.0%}: {'PASS' if inside else 'FAIL'}"
                print(f"      -> model {g['goodput_frac']:.1%} vs published {published}{verdict}")
    return ok


if __name__ == "__main__":
    part_a()
    part_b()
    print("\n(c) " + ("PASS" if part_c() else "FAIL"))
