"""``workbench swarm``: SWARM parallelism (a pipeline of peer swarms on slow, unreliable links) against the same
peers in a synchronous pipeline on a reliable fabric (:mod:`workbench.hetero.swarm`)."""

from __future__ import annotations

from typing import Any

import click
from workbench_cli._common import GIB, echo_json, print_notes, print_table, say
from workbench_cli._types import amount, count

from workbench.specs import limits as L

MAX_PEERS_TEXT = 1_000
"""Longest ``--peers`` text read."""


def parse_peers(text: str) -> list[tuple[str, int]]:
    """``rtx4090-24gb:24+a100-sxm4-80gb:8`` as [(device ref, count), ...]; click.BadParameter names a bad part."""
    if len(text) > MAX_PEERS_TEXT:
        raise click.BadParameter(f"at most {MAX_PEERS_TEXT} characters", param_hint="--peers")
    out = []
    for part in text.split("+"):
        name, sep, num = part.strip().rpartition(":")
        if not sep or not name.strip() or not num.strip().isdigit() or int(num) < 1:
            raise click.BadParameter(
                f"each part is DEVICE:COUNT with COUNT >= 1, e.g. rtx4090-24gb:24+a100-sxm4-80gb:8; "
                f"got {part.strip()!r}",
                param_hint="--peers",
            )
        out.append((name.strip(), int(num)))
    return out


@click.command("swarm")
@click.option("--model", required=True, help="Model preset id or HF config.json path (dense models).")
@click.option("--stages", type=count(4096), required=True, help="S: pipeline stages.")
@click.option(
    "--peers", required=True,
    help="Peers as DEVICE:COUNT[+DEVICE:COUNT...] (device preset ids or TOML paths), e.g. rtx4090-24gb:24+a100-sxm4-80gb:8.",
)  # fmt: skip
@click.option(
    "--link-Mbps", "link_mbps", type=click.FloatRange(0, 1e9, min_open=True), required=True,
    help="Each peer's link: bandwidth per direction, Mb/s (10^6 bits/s), e.g. 100-1000 for the internet.",
)  # fmt: skip
@click.option(
    "--link-latency-ms",
    type=amount(1e5),
    default=50.0,
    show_default=True,
    help="Each peer's latency per message, ms.",
)
@click.option(
    "--failure-rate-per-hour", type=amount(1e4), required=True,
    help="Failures (preemptions) per peer per hour; 0 for reliable peers.",
)  # fmt: skip
@click.option(
    "--compress", type=click.Choice(["none", "int8"]), default="none", show_default=True,
    help="Activations and gradients on the wire: 16-bit, or SWARM's 8-bit blockwise quantisation.",
)  # fmt: skip
@click.option(
    "--rebalance", is_flag=True, help="Move peers to the slowest stage (SWARM's adaptive rebalancing)."
)
@click.option(
    "--delayed-updates/--no-delayed-updates", default=True, show_default=True,
    help="Average each stage's gradients during the next step's micro-batches.",
)  # fmt: skip
@click.option(
    "--seq-len", type=count(L.MAX_SEQ_LEN), default=2048, show_default=True, help="Tokens per sequence."
)
@click.option(
    "--global-batch", type=count(L.MAX_GLOBAL_BATCH_SIZE), default=512, show_default=True,
    help="Sequences per optimizer step.",
)  # fmt: skip
@click.option(
    "--micro-batch", type=count(2**16), default=1, show_default=True, help="Sequences per micro-batch."
)
@click.option("--dtype", type=click.Choice(["bf16", "fp16"]), default="bf16", show_default=True)
@click.option(
    "--fabric", default="dgx-a100", show_default=True,
    help="Cluster preset (or TOML path) whose outermost level is the reliable fabric of the synchronous baseline.",
)  # fmt: skip
@click.option(
    "--framework", default=None, help="Framework profile id or path (default: the shipped default)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def swarm_cmd(as_json: bool, **kw: Any) -> None:
    """SWARM parallelism over slow, unreliable links: per-stage throughput (compute- or link-bound), the
    bottleneck, tokens/s, work lost to failures, and the same peers in a synchronous pipeline on a fast fabric.

    Stage compute and memory come from the step model; the peers' links, failures and rebalancing from closed
    forms (Ryabinin et al. 2023, arXiv:2301.11913). Throughput only: the caveat printed says what is not
    modelled."""
    from workbench.hetero.swarm import PeerGroup, SwarmSettings, swarm_estimate
    from workbench.presets.calibration import load_calibration
    from workbench.presets.catalog import load_cluster, load_device, load_model
    from workbench.presets.frameworks import DEFAULT_FRAMEWORK
    from workbench.specs.hardware import NetworkLevel
    from workbench.specs.plan import Workload

    link = NetworkLevel(
        name="peer link", bytes_per_s=kw["link_mbps"] * 1e6 / 8, latency_s=kw["link_latency_ms"] * 1e-3
    )
    groups = tuple(
        PeerGroup(device=load_device(name), count=n, link=link) for name, n in parse_peers(kw["peers"])
    )
    settings = SwarmSettings(
        num_stages=kw["stages"],
        micro_batch_size=kw["micro_batch"],
        compression=kw["compress"],
        failure_rate_per_hour=kw["failure_rate_per_hour"],
        rebalance=kw["rebalance"],
        delayed_updates=kw["delayed_updates"],
    )
    model = load_model(kw["model"])
    workload = Workload(seq_len=kw["seq_len"], global_batch_size=kw["global_batch"], dtype=kw["dtype"])
    for g in groups:
        g.device.peak(workload.dtype)
    fabric = load_cluster(kw["fabric"]).levels[-1]
    cal = load_calibration("default", framework=kw["framework"] or DEFAULT_FRAMEWORK)
    est = swarm_estimate(model, groups, workload, settings, fabric=fabric, calibration=cal)
    if as_json:
        echo_json({"model": model.name, "link_bytes_per_s": link.bytes_per_s, **est.summary()})
        return
    _print(est, model.name, kw, fabric.name)


def _print(est: Any, model_name: str, kw: dict[str, Any], fabric_name: str) -> None:
    s = est.settings
    say(
        f"{model_name}: {s.num_stages} stages over {kw['peers']}, {kw['link_mbps']:g} Mb/s and "
        f"{kw['link_latency_ms']:g} ms per peer, {s.failure_rate_per_hour:g} failures per peer-hour, "
        f"{s.compression} activations, {'rebalanced' if s.rebalance else 'peers dealt in turn'}"
    )
    rows = [
        [r["stage"], f"{r['first_layer']}+{r['layers']}", r["peers"], f"{r['compute_rate_per_s']:.2f}",
         f"{r['link_rate_per_s']:.2f}", f"{r['goodput_rate_per_s']:.2f}", r["bound"], f"{r['comm_frac']:.0%}",
         f"{r['lost_call_frac']:.3%}", f"{r['memory_bytes'] / GIB:.1f}/{r['usable_bytes'] / GIB:.1f}",
         "*" if r["stage"] == est.bottleneck_stage else ""]
        for r in est.table().iter_rows(named=True)
    ]  # fmt: skip
    print_table(
        "Stages (micro-batches/s; * the bottleneck)",
        ["stage", "layers", "peers", "compute", "links", "goodput", "bound", "comm", "lost calls", "GiB", ""],
        rows,
    )
    say(
        f"pipeline: {est.microbatches_per_s:.2f} micro-batches/s ({est.microbatches_per_s_no_failures:.2f} "
        f"without failures), {est.tokens_per_s:,.0f} tokens/s; step of {est.microbatches_per_step} micro-batches "
        f"{est.step_time_s:.1f} s, of which gradient averaging exposed {est.exposed_average_s:.1f} s"
    )
    say(
        f"failures: {est.redone_calls_per_microbatch:.4f} stage calls re-done per micro-batch, "
        f"{est.lost_time_frac:.2%} of peer time lost (interrupted calls, rejoining peers loading their stage)"
    )
    fits = "" if est.sync_fits else " (some stages do not fit their peers)"
    say(
        f"synchronous pipeline of the same peers on {fabric_name}: {est.sync_tokens_per_s:,.0f} tokens/s{fits}; "
        f"SWARM is {est.speedup_vs_sync:.2f}x of it"
    )
    print_notes(est)
    say(f"caveat: {est.caveat}")


def register(group: click.Group) -> None:
    group.add_command(swarm_cmd)
