"""Mixed clusters and slow links on the command line.

- ``workbench plan --cluster dgx-h100:4+dgx-a100:4 ...`` (or a mixed preset id / TOML file): ``plan_cmd`` hands
  a cluster of several pools to ``run_mixed_plan`` (pipelines across pools and batch splits, ranked; each pool's
  best plan alone beside them; ``--report`` draws which pool runs which stages). ``--cluster dgx-h100:4`` (one
  pool) is ``--cluster dgx-h100 --nodes 4``.
- ``workbench diloco ...``: DiLoCo-style local SGD over a slow link against synchronous data parallelism.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from workbench_cli._common import (
    GIB,
    check_outputs,
    echo_json,
    output_file,
    print_notes,
    print_table,
    say,
    text_writer,
    write_outputs,
)
from workbench_cli._types import count

from workbench.specs import limits as L

UNSUPPORTED: tuple[tuple[str, object, str], ...] = (
    ("nodes", None, "--nodes (give each pool's nodes in --cluster, e.g. dgx-h100:4+dgx-a100:4)"),
    ("fix", (), "--fix"),
    ("max", (), "--max"),
    ("objective", "throughput", "--objective other than throughput"),
    ("failures", None, "--failures"),
    ("csv_path", None, "--csv"),
    ("backend", "analytic", "--backend other than analytic"),
    ("max_devices", None, "--max-devices"),
    ("sequence_parallel", None, "--sequence-parallel/--no-sequence-parallel (on whenever tp > 1)"),
)
"""Options of ``workbench plan`` a mixed cluster does not take, with their default (given means refused)."""


def mixed_cluster(kw: dict[str, Any]) -> Any:
    """The ``MixedCluster`` ``--cluster`` names, or None for a plain cluster (today's meaning, untouched)."""
    from workbench.presets.pools import is_mixed_ref, load_mixed_cluster

    if not is_mixed_ref(kw["cluster"]):
        return None
    return load_mixed_cluster(kw["cluster"])


def _refuse_unsupported(kw: dict[str, Any]) -> None:
    given = [name for key, default, name in UNSUPPORTED if kw.get(key, default) not in (default, None, ())]
    if given:
        raise click.UsageError(f"a mixed cluster (several pools) does not take {', '.join(given)}")


def _options(kw: dict[str, Any]) -> Any:
    from workbench_cli._types import schedule_list
    from workbench_cli.plan_cmd import _ints

    from workbench.search.mixed.planner import PIPELINE_SCHEDULES, MixedOptions

    extra: dict[str, Any] = {"headroom_frac": kw["headroom"], "top_k": max(kw["top"], 1)}
    if kw["schedules"]:
        text = kw["schedules"]
        names = PIPELINE_SCHEDULES if text.strip().lower() == "all" else schedule_list(text)
        extra["schedules"] = tuple(names)
    for key, opt in (("zero_stages", "zero"), ("micro_batch_sizes", "micro_batches")):
        values = _ints(kw[opt], "--" + opt.replace("_", "-"))
        if values is not None:
            extra[key] = values
    if kw["recompute"]:
        extra["recompute"] = tuple(r.strip() for r in kw["recompute"].split(","))
    return MixedOptions(**extra)


def run_mixed_plan(mixed: Any, kw: dict[str, Any], as_json: bool) -> None:
    """``workbench plan`` on a mixed cluster: search, print (or ``--json``), write ``--report``."""
    from workbench_cli.plan_cmd import _calibration

    from workbench.presets.catalog import load_model
    from workbench.search.mixed.planner import plan_mixed
    from workbench.specs.plan import Workload

    _refuse_unsupported(kw)
    check_outputs(output_file("--report", kw["report_path"]), force=kw["force"])
    model = load_model(kw["model"])
    workload = Workload(
        seq_len=kw["seq_len"],
        global_batch_size=kw["global_batch"],
        dtype=kw["dtype"],
        capacity_factor=kw["capacity_factor"],
    )
    for pool in mixed.pools:
        pool.device.peak(workload.dtype)
    result = plan_mixed(model, mixed, workload, options=_options(kw), calibration=_calibration(kw))
    if as_json:
        out = result.summary()
        out["memory_headroom_frac"] = kw["headroom"]
        echo_json(out)
    else:
        print_mixed(result)
    if result.best is None:
        if as_json:
            sys.exit(1)
        raise click.ClickException("no plan over these pools fits the devices' memory")
    if kw["report_path"]:
        from workbench_widgets.report import cli_command, render_mixed_report

        html = render_mixed_report(result, command=cli_command())
        for path in write_outputs({Path(kw["report_path"]): text_writer(html)}, force=kw["force"]):
            say(f"wrote {path}", err=True)


def print_mixed(result: Any) -> None:
    """The human output of a mixed search: header, ranked plans, each pool alone, the best plan's stages."""
    w = result.workload
    say(
        f"{result.model.name} on {result.cluster.describe()}, seq {w.seq_len}, global batch "
        f"{w.global_batch_size}, {w.dtype}"
    )
    say(
        f"{result.num_layouts:,} pipeline layouts screened, {len(result.plans)} plans priced in "
        f"{result.search_s:.1f} s"
    )
    rows = [
        [i + 1, e.kind, e.description, f"{e.tokens_per_s:,.0f}", f"{e.mfu:.1%}", f"{e.step_time_s:.3f}",
         f"{e.bubble_fraction:.1%}", "yes" if e.fits else "no"]
        for i, e in enumerate(result.plans)
    ]  # fmt: skip
    print_table(
        "Plans over the pools", ["#", "kind", "plan", "tokens/s", "MFU", "step s", "bubble", "fits"], rows
    )
    alone = [
        [lab, "-" if a is None else a.plan.describe(), "-" if a is None else f"{a.tokens_per_s:,.0f}"]
        for lab, a in zip(result.cluster.labels, result.alone, strict=True)
    ]
    print_table(
        "Each pool alone on the whole batch (homogeneous planner's #1)", ["pool", "plan", "tokens/s"], alone
    )
    best = result.best
    if best is None:
        return
    fastest = max((a.tokens_per_s for a in result.alone if a is not None), default=0.0)
    if fastest:
        say(f"best plan: {best.tokens_per_s / fastest - 1:+.1%} tokens/s over the fastest pool alone")
    st = best.table()
    print_table(
        "Stages of the best plan (which pool runs what)",
        ["stage", "pool", "device", "tp", "layers", "F ms", "B ms", "memory GiB", "usable GiB"],
        [
            [r["stage"], r["pool"], r["device"], r["tp"], f"{r['first_layer']}+{r['layers']}",
             f"{r['forward_s'] * 1e3:.1f}", f"{r['backward_s'] * 1e3:.1f}", f"{r['memory_bytes'] / GIB:.1f}",
             f"{r['usable_bytes'] / GIB:.1f}"]
            for r in st.iter_rows(named=True)
        ],
    )  # fmt: skip
    print_notes(result, best)


@click.command("diloco")
@click.option("--model", required=True, help="Model preset id or HF config.json path.")
@click.option("--cluster", required=True, help="One worker's cluster: preset id or TOML path.")
@click.option(
    "--nodes", type=count(L.MAX_NODES), default=None, help="Nodes of one worker (default: the preset's)."
)
@click.option("--seq-len", type=count(L.MAX_SEQ_LEN), required=True, help="Tokens per sequence.")
@click.option(
    "--global-batch",
    type=count(L.MAX_GLOBAL_BATCH_SIZE),
    required=True,
    help="Sequences per inner step, per worker.",
)
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True)
@click.option("--workers", type=count(2**20), required=True, help="Workers (islands) that synchronise.")
@click.option("--inner-steps", type=count(2**20), required=True, help="H: inner steps between outer syncs.")
@click.option(
    "--link-GBps", "link_gbps", type=click.FloatRange(0, 1e6, min_open=True), required=True,
    help="Slow level between workers: bandwidth per worker, one direction, GB/s (10^9 bytes/s).",
)  # fmt: skip
@click.option(
    "--link-latency-ms", type=click.FloatRange(0, 1e5), default=50.0, show_default=True,
    help="Slow level latency per message, ms.",
)  # fmt: skip
@click.option(
    "--compression", type=click.Choice(["fp32", "bf16", "fp16", "int8"]), default="fp32", show_default=True
)
@click.option(
    "--overlap", type=click.Choice(["blocking", "eager", "streaming"]), default="blocking", show_default=True,
    help="blocking: wait for the outer all-reduce; eager: overlap it with the next H steps; streaming: sync "
    "--fragments pieces in turn, each overlapping --overlap-steps inner steps.",
)  # fmt: skip
@click.option("--fragments", type=count(2**20), default=1, show_default=True)
@click.option("--overlap-steps", type=count(2**20), default=1, show_default=True)
@click.option("--framework", default=None, help="Framework profile id or path for the inner plan.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def diloco_cmd(as_json: bool, **kw: Any) -> None:
    """DiLoCo-style local SGD over a slow link: time per token and traffic against synchronous data parallelism.

    Each worker runs the homogeneous planner's best plan on its cluster for its inner batch; every H inner
    steps the workers all-reduce their pseudo-gradients over the slow link. H is your choice, not optimised
    for loss (see the caveat printed)."""
    from workbench.hetero.diloco import DiLoCoSettings, diloco_estimate
    from workbench.presets.calibration import load_calibration
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.presets.frameworks import DEFAULT_FRAMEWORK
    from workbench.search import Constraints, search
    from workbench.search.mixed.split import best_estimate
    from workbench.search.space import DEFAULT_HEADROOM_FRAC
    from workbench.specs.hardware import NetworkLevel
    from workbench.specs.plan import Workload

    settings = DiLoCoSettings(
        inner_steps=kw["inner_steps"],
        num_workers=kw["workers"],
        compression=kw["compression"],
        overlap=kw["overlap"],
        fragments=kw["fragments"],
        overlap_steps=kw["overlap_steps"],
    )
    model = load_model(kw["model"])
    worker = load_cluster(kw["cluster"], num_nodes=kw["nodes"])
    workload = Workload(seq_len=kw["seq_len"], global_batch_size=kw["global_batch"], dtype=kw["dtype"])
    cal = load_calibration("default", framework=kw["framework"] or DEFAULT_FRAMEWORK)
    result = search(
        model,
        worker,
        workload,
        Constraints(memory_headroom_frac=DEFAULT_HEADROOM_FRAC),
        top_k=3,
        calibration=cal,
    )
    inner = best_estimate(result)
    if inner is None:
        raise click.ClickException(f"no plan of {model.name} fits one worker ({worker.num_devices} devices)")
    link = NetworkLevel(
        name="slow link", bytes_per_s=kw["link_gbps"] * 1e9, latency_s=kw["link_latency_ms"] * 1e-3
    )
    est = diloco_estimate(
        num_parameters=float(model.total_parameters()),
        inner_step_s=inner.step_time_s,
        tokens_per_inner_step=float(workload.tokens_per_step),
        link=link,
        settings=settings,
    )
    _print_diloco(est, inner, as_json)


def _print_diloco(est: Any, inner: Any, as_json: bool) -> None:
    s = est.settings
    if as_json:
        echo_json({"inner_plan": inner.plan.describe(), **est.summary()})
        return
    say(f"inner plan (each worker): {inner.plan.describe()}, {est.inner_step_s:.3f} s per inner step")
    rows = [
        [r["mode"], f"{r['step_s']:.3f}", f"{r['tokens_per_s']:,.0f}", f"{r['time_per_token_s'] * 1e6:.3f}",
         f"{r['exposed_sync_s']:.2f} per " + (f"{r['exposed_sync_steps']} steps" if r["exposed_sync_steps"] > 1 else "step")]
        for r in est.table().iter_rows(named=True)
    ]  # fmt: skip
    print_table(
        f"{s.num_workers} workers, H = {s.inner_steps}, {s.compression} pseudo-gradients, {s.overlap} sync",
        ["", "s per step", "tokens/s", "us per token", "exposed sync s"],
        rows,
    )
    say(
        f"traffic: {est.payload_bytes / 1e9:.2f} GB all-reduced per outer step; "
        f"{est.communication_reduction:,.0f}x less than synchronous DP; "
        f"{est.speedup_vs_sync_dp:.2f}x its tokens/s"
    )
    print_notes(est)
    say(f"caveat: {est.caveat}")


def register(group: click.Group) -> None:
    group.add_command(diloco_cmd)
