"""``workbench estimate``: cost one parallel plan with a backend and print the summary, breakdown and memory."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click
from workbench_cli._common import (
    GIB,
    Output,
    Writer,
    check_outputs,
    echo_json,
    output_file,
    print_table,
    say,
    shown,
    staged_files,
    text_writer,
    write_outputs,
)
from workbench_cli._types import capacity_factor_option, count, headroom_option, schedule_choice
from workbench_cli.economics_opts import economics_options, load_economics, print_economics

from workbench.specs import limits as L
from workbench.specs.axes import PLAN_AXES
from workbench.specs.axis_types import Domain, PlanAxis


def _axis_type(axis: PlanAxis) -> Any:
    """The click type of a plan axis (its bounds from ``workbench.specs.limits`` through the axis table)."""
    if axis.domain is Domain.COUNT:
        return count(axis.maximum, minimum=axis.minimum)  # a count always has its maximum (PlanAxis checks)
    if axis.domain is Domain.CHOICE:
        return click.Choice(list(axis.choices or ()))
    return schedule_choice() if axis.domain is Domain.SCHEDULE else None


def axis_option(axis: PlanAxis) -> Any:
    """The click option of one plan axis (``workbench.specs.axes.PlanAxis.cli``)."""
    cli = axis.cli
    kw: dict[str, Any] = {"default": cli.default, "help": cli.help, "show_default": cli.show_default}
    kind = _axis_type(axis)
    if kind is not None:
        kw["type"] = kind
    return click.option(axis.cli_declaration, **kw)


def _plan_options(f: Any) -> Any:
    """The model, cluster and workload options, then one option per plan axis (``workbench.specs.axes``)."""
    opts = [
        click.option("--model", required=True, help="Model preset id or HF config.json path."),
        click.option("--cluster", required=True, help="Cluster preset id or TOML path."),
        click.option(
            "--nodes", type=count(L.MAX_NODES), default=None, help="Number of nodes (default: the preset's)."
        ),
        click.option("--seq-len", type=count(L.MAX_SEQ_LEN), required=True, help="Tokens per sequence."),
        click.option(
            "--global-batch",
            type=count(L.MAX_GLOBAL_BATCH_SIZE),
            required=True,
            help="Sequences per optimizer step.",
        ),
        click.option(
            "--dtype", type=click.Choice(["bf16", "fp16", "fp8", "fp32"]), default="bf16", show_default=True
        ),
        capacity_factor_option(),
        *(axis_option(axis) for axis in PLAN_AXES),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def default_schedule(vpp: int) -> str:
    """The schedule a plan without ``--schedule`` runs: interleaved 1F1B with virtual stages (Megatron-LM
    selects the interleaved schedule whenever ``--num-layers-per-virtual-pipeline-stage`` is set:
    ``megatron/core/pipeline_parallel/schedules.py`` ``get_forward_backward_func``), else 1F1B."""
    return "interleaved-1f1b" if vpp > 1 else "1f1b"


def build_inputs(kw: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """(model, cluster, workload, plan) from the CLI options, one per plan axis (``workbench.specs.axes``; an
    option left out takes its default); dp defaults to the devices left over, sequence parallelism to tp > 1, the
    schedule to ``default_schedule``. ValueError for bad values."""
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.specs.plan import ParallelPlan, Workload, data_parallel_degree

    model = load_model(kw["model"])
    cluster = load_cluster(kw["cluster"], num_nodes=kw["nodes"])
    values = {a.name: kw.get(a.cli.param, a.cli.default) for a in PLAN_AXES}
    tp, pp, cp = values["tp"], values["pp"], values["cp"]
    if values["dp"] is None:  # the devices left over
        values["dp"] = data_parallel_degree(cluster.num_devices, tp=tp, pp=pp, cp=cp)
    if values["sequence_parallel"] is None:
        values["sequence_parallel"] = tp > 1
    if values["schedule"] is None:
        values["schedule"] = default_schedule(values["vpp"])
    workload = Workload(
        seq_len=kw["seq_len"],
        global_batch_size=kw["global_batch"],
        dtype=kw["dtype"],
        capacity_factor=kw.get("capacity_factor"),
    )
    plan = ParallelPlan(**{a.name: a.plan_value(values[a.name]) for a in PLAN_AXES})
    return model, cluster, workload, plan


def estimate_plan(
    kw: dict[str, Any],
    *,
    backend: str = "analytic",
    framework: str | None = None,
    kernels: str | None = None,
    profile_dir: str | None = None,
    adjust_cluster: Any = None,
) -> Any:
    """The Estimate of the plan in the plan options ``kw`` (``build_inputs``), checked against the rules first
    (``click.ClickException`` for an infeasible plan or an unavailable backend). ``adjust_cluster``: a function
    of the cluster giving the one to price on (``estimate``'s price and power-cap options)."""
    from workbench.estimate.registry import get_backend

    model, cluster, workload, plan = build_inputs(kw)
    if adjust_cluster is not None:
        cluster = adjust_cluster(cluster)
    uneven = False
    if backend == "analytic":  # the analytic backend prices uneven stages when its framework runs them
        from workbench.presets.frameworks import DEFAULT_FRAMEWORK, load_framework

        uneven = load_framework(framework or DEFAULT_FRAMEWORK).uneven_stages
    problems = plan.validate(model, cluster, workload, uneven_stages=uneven)
    if problems:
        raise click.ClickException("infeasible plan: " + " ".join(problems))
    options: dict[str, Any] = {"profile": profile_dir} if profile_dir else {}
    if framework or kernels:
        if backend != "analytic":
            raise click.BadParameter(
                "--framework and --kernels apply to the analytic backend", param_hint="--backend"
            )
        options.update(framework=framework, kernels=kernels)
    impl = get_backend(backend, **options)
    why = impl.unavailable_reason()
    if why:
        raise click.ClickException(f"backend {backend!r} is unavailable: {why}")
    est = impl.estimate(model, cluster, workload, plan)
    if kw.get("schedule") is None and plan.vpp > 1:
        note = f"schedule: {plan.schedule} (--vpp {plan.vpp} without --schedule, as Megatron infers it)"
        est = dataclasses.replace(est, notes=(*est.notes, note))
    return est


def goodput_options(f: Any) -> Any:
    """``--failures``, ``--checkpoint``, ``--spare-nodes`` and ``--on-failure`` (shared with ``plan``)."""
    opts = [
        click.option(
            "--failures",
            default=None,
            help="Failure preset id (e.g. llama3, opt-175b) or TOML path: adds goodput (checkpoints, restarts).",
        ),
        click.option(
            "--checkpoint",
            "checkpoint_mode",
            type=click.Choice(["async", "sync"]),
            default=None,
            help="Checkpoint save: async stalls for the copy to host memory only; sync for the whole write "
            "(default: the failure preset's practice).",
        ),
        click.option(
            "--spare-nodes",
            type=count(L.MAX_NODES, minimum=0),
            default=None,
            help="Hot spare nodes (swap in a failed node without waiting; paid for the whole run; default: "
            "the failure preset's practice).",
        ),
        click.option(
            "--on-failure",
            type=click.Choice(["wait", "shrink"]),
            default=None,
            help="With no free spare: wait for the repair, or shrink dp and run on (elastic; default: the "
            "failure preset's practice).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def load_goodput(kw: dict[str, Any]) -> tuple[Any, Any]:
    """(FailureModel or None, GoodputOptions) from the goodput options: the failure preset's practice with
    ``--checkpoint``, ``--spare-nodes`` and ``--on-failure`` replacing its fields; ValueError for a bad file or
    value."""
    from workbench.goodput import GoodputOptions, load_failures

    given = {
        "checkpoint": kw.pop("checkpoint_mode"),
        "spare_nodes": kw.pop("spare_nodes"),
        "on_failure": kw.pop("on_failure"),
    }
    name = kw.pop("failures")
    if name is None:
        if given["spare_nodes"] is not None or given["on_failure"] is not None:
            raise click.BadParameter(
                "needs --failures (a preset id or a TOML path)", param_hint="--spare-nodes/--on-failure"
            )
        return None, GoodputOptions().with_overrides(**given)
    failures = load_failures(name)
    return failures, failures.practice.with_overrides(**given)


def _print_goodput(g: Any) -> None:
    """The goodput block of the text output."""
    spares = f", {g.spare_nodes} spare node(s)" if g.spare_nodes else ""
    say(
        f"goodput {g.goodput_frac:.1%} with failures {g.failures_id!r}: job MTBF {g.mtbf_s / 3600:.2f} h, "
        f"{g.checkpoint_mode} checkpoints{spares}, on failure {g.on_failure}"
    )
    rows = [
        ["checkpoint size", f"{g.checkpoint_bytes / 1e9:,.1f} GB"],
        ["checkpoint write", f"{g.checkpoint_write_s:,.1f} s"],
        ["training stall per checkpoint", f"{g.checkpoint_stall_s:,.2f} s"],
        [
            "checkpoint interval",
            f"{g.checkpoint_interval_s / 60:,.1f} min ({g.checkpoint_interval_steps:,} steps)",
        ],
        ["restart (overhead + restore)", f"{g.restart_s:,.0f} s (restore {g.restore_s:,.1f} s)"],
        ["wait for a node per failure (mean)", f"{g.downtime_s:,.0f} s"],
    ]
    print_table("Goodput (failures, checkpoints, restarts)", ["figure", "value"], rows)


def _print_human(est: Any) -> None:
    s = est.summary()
    stack = f", for {est.framework} ({est.framework_version})" if est.framework_version else ""
    say(
        f"{s['model']} on {s['num_devices']} x {est.cluster.device.id} ({s['cluster']}), {s['plan']}, "
        f"backend {s['backend']}{stack}"
    )
    say(
        f"step time {s['step_time_s']:.3f} s   tokens/s {s['tokens_per_s']:,.0f}   "
        f"MFU {s['mfu']:.1%}   HFU {s['hfu']:.1%}   {s['tflops_per_device']:.0f} TFLOP/s per device   "
        f"bubble {s['bubble_fraction']:.1%} (critical rank)"
    )
    band = s.get("band")
    if band:
        say(
            f"{band['coverage_frac']:.0%} error band: step time {band['step_time_low_s']:.3f}-"
            f"{band['step_time_high_s']:.3f} s, tokens/s {band['tokens_per_s_low']:,.0f}-"
            f"{band['tokens_per_s_high']:,.0f} ({band['num_residuals']} published runs, {band['pool']})"
        )
        for note in band["notes"]:
            say(f"band widened: {note}")
    fits = "fits" if s["fits"] else "DOES NOT FIT"
    say(
        f"peak memory {s['peak_memory_bytes'] / GIB:.1f} GiB of {s['memory_usable_bytes'] / GIB:.1f} GiB usable"
        f" ({s['memory_capacity_bytes'] / GIB:.1f} GiB less {s['memory_headroom_frac']:.0%} headroom: {fits})"
    )
    step = s["step_time_s"]
    rows = [[k.removesuffix("_s"), f"{v * 1e3:.1f}", f"{v / step:.1%}"] for k, v in s["breakdown"].items()]
    print_table("Step time breakdown", ["part", "ms", "share"], rows)
    hidden = [[f"{k} comm", f"{v * 1e3:.1f}"] for k, v in s["overlapped_comm_s"].items() if v > 0]
    if hidden:
        print_table("Hidden communication", ["kind (not in the step)", "ms"], hidden)
    mem = [
        [int(r["rank"])] + [f"{r[c] / GIB:.2f}" for c in est.memory.columns[1:]]
        for r in est.memory.iter_rows(named=True)
    ][:16]
    print_table(
        "Memory per pipeline rank (GiB)",
        ["rank"] + [c.removesuffix("_bytes") for c in est.memory.columns[1:]],
        mem,
    )
    for note in est.notes:
        say(f"note: {note}")


@click.command("estimate")
@_plan_options
@goodput_options
@economics_options
@click.option(
    "--token-budget",
    type=float,
    default=None,
    help="Tokens of the whole run: adds dollars, energy and CO2e per run (docs/cost.md).",
)
@click.option("--backend", default="analytic", show_default=True, help="Registered backend name.")
@click.option(
    "--profile",
    "profile_dir",
    default=None,
    help="torch-profile backend: measured profile folder (default: profiles/measured).",
)
@click.option(
    "--framework",
    default=None,
    help="Framework profile id or TOML path (analytic; see `workbench frameworks`).",
)
@click.option(
    "--kernels", default=None, help="Kernel table TOML or `workbench microbench` folder (analytic backend)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--trace", "trace_path", default=None, help="Write the timeline as a Chrome trace JSON file.")
@click.option(
    "--report", "report_path", default=None, help="Write a self-contained HTML report (opens offline)."
)
@click.option(
    "--plan-index", type=int, default=0, show_default=True, help="Plan whose figures the report shows."
)
@click.option(
    "--csv",
    "csv_dir",
    default=None,
    help="Write the tables (timeline, memory, plans) as CSV into this folder.",
)
@click.option(
    "--save",
    "save_path",
    default=None,
    help="Write the estimate as FILE.workbench.json (JupyterLab opens it as its report).",
)
@headroom_option()
@click.option("--force", is_flag=True, help="Overwrite existing --trace, --report, --csv and --save files.")
def estimate_cmd(
    headroom: float,
    backend: str,
    profile_dir: str | None,
    framework: str | None,
    kernels: str | None,
    as_json: bool,
    trace_path: str | None,
    force: bool,
    report_path: str | None,
    plan_index: int,
    csv_dir: str | None,
    save_path: str | None,
    **kw: Any,
) -> None:
    """Estimate step time, throughput, MFU and memory of one parallel plan."""
    csv_out = Output("--csv", Path(csv_dir), folder=True, files=CSV_TABLES) if csv_dir else None
    if save_path is not None and not save_path.endswith(".workbench.json"):
        raise click.BadParameter(f"must end in .workbench.json, got {shown(save_path)}", param_hint="--save")
    check_outputs(
        output_file("--trace", trace_path),
        output_file("--report", report_path),
        output_file("--save", save_path),
        csv_out,
        force=force,
    )
    if plan_index != 0:
        raise click.BadParameter(
            f"must be 0: estimate costs one plan, got {plan_index}", param_hint="--plan-index"
        )
    failures, goodput_opts = load_goodput(kw)
    econ_kw = {
        k: kw.pop(k) for k in ("price_per_device_hour", "price_kind", "pue", "grid_intensity", "power_cap")
    }
    token_budget = kw.pop("token_budget")
    if token_budget is not None:
        L.check_token_budget(token_budget)
    priced: dict[str, Any] = {}

    def with_prices(cluster: Any) -> Any:  # the price and power settings (a power cap slows the device)
        cluster, priced["econ"] = load_economics(econ_kw, cluster)
        return cluster

    est = estimate_plan(
        kw,
        backend=backend,
        framework=framework,
        kernels=kernels,
        profile_dir=profile_dir,
        adjust_cluster=with_prices,
    )
    econ_in = priced["econ"]
    est = dataclasses.replace(est, memory_headroom_frac=headroom)
    goodput = None
    if failures is not None:
        from workbench.goodput import estimate_goodput

        goodput = estimate_goodput(est, failures, goodput_opts)
    econ = _economics(est, econ_in, token_budget, goodput)
    _write_outputs(
        est,
        trace_path,
        report_path,
        csv_dir,
        force,
        goodput=(goodput, failures, goodput_opts),
        save=save_path,
        notes=econ.lines(),
    )
    if as_json:
        out = est.summary()
        money = econ.summary()
        out["notes"] = out["notes"] + money.pop("notes")
        echo_json({**out, **money, **({"goodput": goodput.summary()} if goodput else {})})
    else:
        _print_human(est)
        if goodput is not None:
            _print_goodput(goodput)
        print_economics(econ, econ_in)
        if trace_path is not None:
            say(f"trace written to {shown(trace_path)}")
        if report_path is not None:
            say(f"report written to {shown(report_path)} (open it in a browser; it works offline)")
        if csv_dir is not None:
            say(f"tables written to {shown(csv_dir)}")
        if save_path is not None:
            say(f"estimate written to {shown(save_path)} (open it in JupyterLab)")


def _economics(est: Any, econ_in: dict[str, Any], token_budget: float | None, goodput: Any) -> Any:
    """Dollars and energy of ``est`` (``workbench.estimate.economics``), the run priced at wall time when
    ``--failures`` gave a goodput."""
    from workbench.estimate.economics import economics

    return economics(
        est,
        power=econ_in["power"],
        options=econ_in["options"],
        node_overhead_w=econ_in["node_overhead_w"],
        price=econ_in["price"],
        token_budget=token_budget,
        goodput_frac=1.0 if goodput is None else goodput.goodput_frac,
        spare_devices=0 if goodput is None else goodput.spare_devices,
    )


CSV_TABLES = ("plans.csv", "timeline.csv", "memory.csv", "activation.csv")
"""The files ``--csv DIR`` may write (``workbench_widgets.report.write_csv_tables``)."""


def _write_outputs(
    est: Any,
    trace_path: str | None,
    report_path: str | None,
    csv_dir: str | None,
    force: bool,
    *,
    goodput: tuple[Any, Any, Any] = (None, None, None),
    save: str | None = None,
    notes: list[str] | None = None,
) -> None:
    """Render every requested output, then write them all at once (nothing is written if one fails).
    ``goodput``: (GoodputEstimate, FailureModel, GoodputOptions) when ``--failures`` was given; the report then
    has its Goodput section (with the scaling over node counts). ``save``: a ``.workbench.json`` path."""
    writers: dict[Path, Writer] = {}
    if save is not None:
        from workbench_widgets.report import cli_command
        from workbench_widgets.workbench_file import workbench_document

        doc = workbench_document([est], command=cli_command())
        writers[Path(save)] = text_writer(json.dumps(doc, indent=1) + "\n")
    if trace_path is not None:
        from workbench.pipeline.trace import chrome_trace

        compute = est.timeline.filter(est.timeline["op"] != "comm")
        text = json.dumps(chrome_trace(compute, name=est.plan.describe()))
        writers[Path(trace_path)] = text_writer(text)
    if report_path is None and csv_dir is None:
        write_outputs(writers, force=force)
        return
    from workbench_widgets.report import (
        cli_command,
        render_report,
        write_csv_tables,
    )  # lazy: keeps the core pure

    if report_path is not None:
        section = None
        if goodput[0] is not None:
            from workbench.search.sizes import goodput_scaling

            section = (goodput[0], goodput_scaling(est, goodput[1], goodput[2]))
        html = render_report(estimates=[est], command=cli_command(), goodput=section, notes=notes or ())
        writers[Path(report_path)] = text_writer(html)
    if csv_dir is None:
        write_outputs(writers, force=force)
        return
    with staged_files(lambda tmp: write_csv_tables(tmp, estimates=[est], force=True)) as tables:
        writers.update({Path(csv_dir) / name: w for name, w in tables.items()})
        write_outputs(writers, force=force)


def register(group: click.Group) -> None:
    group.add_command(estimate_cmd)
