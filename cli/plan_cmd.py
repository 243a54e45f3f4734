"""``workbench plan``: search every parallel plan, print the ranked table, why #1 wins and the rejections.

Exit codes: 0 with at least one feasible plan, 1 for bad input or no feasible plan (the closest misses are
printed), 2 for usage errors.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from workbench_cli._common import (
    GIB,
    Writer,
    check_outputs,
    echo_json,
    fmt_count,
    output_file,
    print_table,
    say,
    shown,
    text_writer,
    write_outputs,
)
from workbench_cli._types import capacity_factor_option, count, headroom_option, schedule_list
from workbench_cli.estimate_cmd import goodput_options, load_goodput
from workbench_cli.plan_sizes import print_goodput_sizes, print_sizes

from workbench.specs import limits as L

if TYPE_CHECKING:
    from workbench.search.sizes import SizeBest

PROGRESS_MIN_PLANS = 2_000_000
"""Searches at least this large show a screening progress bar on stderr (when it is a terminal); the
refinement of the top plans always shows one there."""


def _ints(text: str | None, name: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{name} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise click.BadParameter(f"{name} must be comma-separated integers >= 0, got {text!r}")
    return values


def _degrees(items: tuple[str, ...], option: str) -> dict[str, int]:
    out = {}
    for item in items:
        axis, _, value = item.partition("=")
        axis = axis.strip().replace("-", "_")
        axis = "micro_batch_size" if axis in ("mbs", "micro_batch") else axis
        if not value.strip().isdigit() or len(value.strip()) > 18:
            raise click.BadParameter(f"{option} takes AXIS=N (e.g. tp=8), got {shown(item)}")
        try:
            out[axis] = int(value)
        except ValueError:  # a digit that int() does not read (e.g. a superscript)
            raise click.BadParameter(f"{option} takes AXIS=N (e.g. tp=8), got {shown(item)}") from None
    return out


def _token_budget(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """--token-budget: a finite number of tokens in (0, MAX_TOKEN_BUDGET] (click's float accepts nan and inf)."""
    try:
        return L.check_token_budget(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("search: token_budget ")) from None


def build_constraints(kw: dict[str, Any]) -> Any:
    """``Constraints`` from the CLI options (ValueError names the bad field)."""
    from workbench.pipeline.schedules import SCHEDULE_NAMES
    from workbench.search import Constraints

    extra: dict[str, Any] = {}
    if kw["schedules"]:
        names = SCHEDULE_NAMES if kw["schedules"].strip().lower() == "all" else schedule_list(kw["schedules"])
        extra["schedules"] = names
    for key, opt in (("zero_stages", "zero"), ("micro_batch_sizes", "micro_batches")):
        values = _ints(kw[opt], "--" + opt.replace("_", "-"))
        if values is not None:
            extra[key] = values
    if kw["recompute"]:
        extra["recompute"] = tuple(r.strip() for r in kw["recompute"].split(","))
    if kw["sequence_parallel"] is not None:
        extra["sequence_parallel"] = (kw["sequence_parallel"],)
    return Constraints(
        max_devices=kw["max_devices"],
        memory_headroom_frac=kw["headroom"],
        fixed=_degrees(kw["fix"], "--fix"),
        maximum=_degrees(kw["max"], "--max"),
        **extra,
    )


def _calibration(kw: dict[str, Any]) -> Any:
    from workbench.presets.calibration import load_calibration
    from workbench.presets.frameworks import DEFAULT_FRAMEWORK

    return load_calibration(
        kw["calibration"] or "default", framework=kw["framework"] or DEFAULT_FRAMEWORK, kernels=kw["kernels"]
    )


def _search_args(nodes: tuple[int, ...] | None, kw: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``workbench.search.search`` from the CLI options."""
    if "_calibration" not in kw:
        kw["_calibration"] = _calibration(kw)
    return dict(
        nodes=nodes,
        objective=kw["objective"],
        top_k=kw["top"],
        token_budget=kw["token_budget"],
        calibration=kw["_calibration"],
        backend=kw["backend"],
        failures=kw["_failures"],
        goodput_options=kw["_goodput_options"],
        price=kw.get("_price"),
    )


def _run_search(
    model: Any,
    cluster: Any,
    workload: Any,
    constraints: Any,
    nodes: tuple[int, ...] | None,
    kw: dict[str, Any],
    show_progress: bool,
) -> Any:
    from workbench.search import search

    args = _search_args(nodes, kw)
    if not show_progress:
        return search(model, cluster, workload, constraints, **args)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        screen = bar.add_task("screening plans", total=None)
        refine = bar.add_task("refining top plans", total=kw["top"], visible=False)

        def on_screen(done: int, total: int) -> None:
            if total < PROGRESS_MIN_PLANS:
                return
            bar.update(screen, completed=done, total=total)

        def on_refine(done: int) -> None:
            bar.update(refine, completed=done, visible=True)

        return search(
            model, cluster, workload, constraints, progress=on_screen, refine_progress=on_refine, **args
        )


def _header(result: Any) -> str:
    c = result.clusters[0] if result.clusters else None
    sizes = ", ".join(
        f"{x.num_nodes} node{'s' if x.num_nodes > 1 else ''} ({x.num_devices} devices)"
        for x in result.clusters
    )
    device = c.device.id if c is not None else "?"
    w = result.workload
    refined = int(result.plans["refined"].sum()) if result.plans.height else 0
    stack = f"for {result.framework} ({result.framework_version})\n" if result.framework_version else ""
    return stack + (
        f"{result.model.name} on {device} ({c.id if c else '?'}: {sizes}), seq {w.seq_len}, global batch "
        f"{w.global_batch_size}, {w.dtype}, objective {result.objective}, "
        f"token budget {_budget(result.token_budget)} (days to train and device-hours are for this many)\n"
        f"{result.num_plans:,} plans screened in {result.screen_cpu_s:.2f} CPU-s ({result.plans_per_s:,.0f} "
        f"plans per CPU-s; wall {result.screen_s:.2f} s), "
        f"{result.num_feasible:,} feasible; top {refined} refined in {result.refine_s:.2f} s"
        + (f"\nprice: {result.price['describe']}" if result.price else "")
    )


def _budget(tokens: float) -> str:
    """A token budget for the header: ``1.00T tokens (1,000,000,000,000)``."""
    return f"{fmt_count(tokens)} tokens ({tokens:,.0f})"


def usable_bytes(result: Any) -> float:
    """Device memory a plan may fill: the HBM less the ``--headroom`` share (the screen's fit limit)."""
    capacity = result.clusters[0].device.hbm_bytes if result.clusters else 0.0
    return float(capacity) * (1.0 - result.constraints.memory_headroom_frac)


def memory_header(result: Any) -> str:
    """The memory column's header, naming the usable capacity: ``memory (of 76.0 GiB usable)``."""
    return f"memory (of {usable_bytes(result) / GIB:.1f} GiB usable)"


def _band_cell(r: dict[str, Any]) -> str:
    """The step time's 80% error band (``workbench.search.planner.BAND_COLUMNS``), '+' when widened."""
    low, high = r.get("step_time_low_s"), r.get("step_time_high_s")
    if low is None or high is None:
        return "-"
    return f"{low:.3f}-{high:.3f}" + (" +" if r.get("band_note") else "")


def _plan_rows(
    frame: Any, objective: str, multi: bool, limit: int, *, memory_col: str, usable: float
) -> tuple[list[str], list[list[Any]]]:
    cols = (
        ["#"]
        + (["nodes"] if multi else [])
        + ["plan", "tokens/s", "MFU", "step s", "80% band s", memory_col, "bubble", "bottleneck"]
    )
    if objective == "time":
        cols.append("days to train")
    if objective == "cost":
        cols.append("device-hours")
    priced = "usd_to_train" in frame.columns
    if priced:
        cols.append("dollars")
    goodput = "goodput_frac" in frame.columns
    if goodput:
        cols += ["goodput", "days (failures)", "device-hours (failures)"]
        if priced:
            cols.append("dollars (failures)")
    rows = []
    for r in frame.head(limit).iter_rows(named=True):
        mark = ("" if r["refined"] else " *") + (" =" if r.get("tied") and r["rank"] > 1 else "")
        row = [f"{r['rank']}{mark}"] + ([r["num_nodes"]] if multi else [])
        row += [
            ("  └ " if r.get("variant") else "") + r["plan"],
            f"{r['tokens_per_s']:,.0f}",
            f"{r['mfu']:.1%}",
            f"{r['step_time_s']:.3f}",
            _band_cell(r),
            f"{r['peak_memory_bytes'] / GIB:.1f} GiB"
            + ("" if r["fits"] and r["peak_memory_bytes"] <= usable else " !"),
            f"{r['bubble_fraction']:.1%}",
            r["bottleneck"],
        ]
        if objective == "time":
            row.append(f"{r['time_to_train_s'] / 86400:.1f}")
        if objective == "cost":
            row.append(fmt_count(r["device_hours"]))
        if priced:
            row.append(f"${fmt_count(r['usd_to_train'])}")
        if goodput:
            row += [
                f"{r['goodput_frac']:.1%}",
                f"{r['goodput_time_to_train_s'] / 86400:.1f}",
                fmt_count(r["goodput_device_hours"]),
            ]
            if priced:
                row.append(f"${fmt_count(r['goodput_usd_to_train'])}")
        rows.append(row)
    return cols, rows


def _print_rejections(result: Any) -> None:
    rows = [[text, f"{count:,}"] for _, text, count in result.rejection_table() if count]
    if rows:
        print_table("Rejected plans (counted under the first rule they break)", ["reason", "plans"], rows)


def _print_misses(result: Any) -> None:
    frame = result.closest_misses
    if result.num_plans == 0:
        say("the constraints leave no plan to screen (check --fix, --max, --schedules and --micro-batches)")
        return
    if not frame.height:
        say("no plan got as far as the memory check: every plan breaks a divisibility or schedule rule")
        return
    usable = usable_bytes(result)
    rows = [
        [
            r["plan"],
            r["num_nodes"],
            f"{r['peak_memory_bytes'] / GIB:.1f} GiB",
            f"{usable / GIB:.1f} GiB",
            f"{r['memory_frac']:.0%}",
        ]
        for r in frame.iter_rows(named=True)
    ]
    print_table(
        "Closest misses (smallest peak memory)",
        ["plan", "nodes", "needs", "usable (--headroom)", "of HBM"],
        rows,
    )


def _write_outputs(result: Any, kw: dict[str, Any]) -> None:
    """Render the --csv and --report files, then write both at once (nothing is written if one fails)."""
    writers: dict[Path, Writer] = {}
    if kw["csv_path"]:
        plans = result.plans
        writers[Path(kw["csv_path"])] = lambda tmp: plans.write_csv(tmp)
    if kw["report_path"]:
        if not result.estimates:
            raise click.ClickException("--report needs at least one refined plan (use --top >= 1)")
        try:
            from workbench_widgets.report import (  # lazy: the core stays free of bokeh
                cli_command,
                render_report,
            )
        except ImportError as exc:
            raise click.ClickException(
                f"--report needs the visuals package workbench_widgets.report ({exc})"
            ) from None
        html = render_report(
            estimates=list(result.estimates),
            command=cli_command(),
            search=result,
            calibration=kw.get("_calibration"),
            title=f"Plans for {result.model.name}",
            notes=([result.explanation] if result.explanation else [])
            + ([f"price: {result.price['describe']}"] if result.price else []),
        )
        writers[Path(kw["report_path"])] = text_writer(html)
    for path in write_outputs(writers, force=kw["force"]):
        say(f"wrote {shown(path)}", err=True)


@click.command("plan")
@click.option("--model", required=True, help="Model preset id or HF config.json path.")
@click.option(
    "--cluster",
    required=True,
    help="Cluster preset id or TOML path; a mixed cluster of pools as CLUSTER:NODES+CLUSTER:NODES (e.g. "
    "dgx-h100:4+dgx-a100:4), a mixed preset id or a TOML file with [[pools]]: stages are then sized per pool.",
)
@click.option(
    "--nodes", default=None, help="Node count, or several separated by commas (default: the preset's)."
)
@click.option("--seq-len", type=count(L.MAX_SEQ_LEN), required=True, help="Tokens per sequence.")
@click.option(
    "--global-batch",
    type=count(L.MAX_GLOBAL_BATCH_SIZE),
    required=True,
    help="Sequences per optimizer step.",
)
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True)
@capacity_factor_option()
@click.option(
    "--objective",
    type=click.Choice(["throughput", "time", "cost", "goodput-time", "goodput-cost"]),
    default="throughput",
    show_default=True,
    help="Rank by tokens/s, time to train --token-budget, or its device-hours; goodput-*: the same once "
    "failures, checkpoints and restarts count (needs --failures).",
)
@click.option(
    "--top",
    type=count(L.MAX_REFINED_PLANS, minimum=0),
    default=20,
    show_default=True,
    help="Plans refined with the full backend and shown.",
)
@click.option(
    "--token-budget",
    type=float,
    default=1e12,
    show_default=True,
    callback=_token_budget,
    help="Tokens of the training run.",
)
@click.option(
    "--max-devices",
    type=count(L.MAX_DEVICES),
    default=None,
    help="Skip node counts above this.",
)
@headroom_option()
@click.option(
    "--fix", multiple=True, metavar="AXIS=N", help="Fix a degree, e.g. --fix tp=8 (tp cp pp ep vpp mbs)."
)
@click.option("--max", multiple=True, metavar="AXIS=N", help="Cap a degree, e.g. --max pp=16.")
@click.option("--schedules", default=None, help="Allowed schedules, comma-separated, or 'all'.")
@click.option("--zero", default=None, help="Allowed ZeRO stages, e.g. 0,1.")
@click.option("--recompute", default=None, help="Allowed recompute modes, e.g. none,selective.")
@click.option("--micro-batches", default=None, help="Candidate micro-batch sizes, e.g. 1,2,4.")
@click.option(
    "--sequence-parallel/--no-sequence-parallel", default=None, help="Force sequence parallelism on/off."
)
@click.option("--calibration", default=None, help="Fitted constants name or path (default: default).")
@click.option(
    "--framework",
    default=None,
    help="Framework profile id or path: price with it and offer only what it runs (see `workbench frameworks`).",
)
@click.option("--kernels", default=None, help="Kernel table TOML or `workbench microbench` folder.")
@click.option("--backend", default="analytic", show_default=True, help="Backend that refines the top plans.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--csv", "csv_path", default=None, help="Write the ranked plans as CSV.")
@click.option("--report", "report_path", default=None, help="Write a self-contained HTML report.")
@click.option("--force", is_flag=True, help="Overwrite existing --csv and --report files.")
@click.option(
    "--export",
    "export_stack",
    default=None,
    help="Write the #1 plan's launch files for this stack "
    "(megatron-core, megatron-bridge, torchtitan, deepspeed) into --export-dir; see `workbench export`.",
)
@click.option("--export-dir", default=None, help="Folder for --export (new or empty).")
@goodput_options
@click.option(
    "--price-per-device-hour",
    type=float,
    default=None,
    help="US dollars per device-hour: adds dollars to train --token-budget and ranks --objective cost by them "
    "(default: the cluster file's [price], else the price table's row; docs/cost.md).",
)
@click.option(
    "--price-kind", type=click.Choice(["on-demand", "reserved"]), default="on-demand", show_default=True
)
def plan_cmd(as_json: bool, **kw: Any) -> None:
    """Search every parallel plan and rank them (closed-form screen, top plans refined)."""
    from workbench_cli.mixed_cmd import mixed_cluster, run_mixed_plan

    from workbench.presets.catalog import load_cluster, load_model
    from workbench.specs.plan import Workload

    # several pools (dgx-h100:4+dgx-a100:4) go to the mixed planner; None: a plain cluster, as before
    if kw["report_path"] and kw["top"] == 0:  # the mixed planner refuses it alike
        raise click.BadParameter(
            "--report needs at least one refined plan; use --top >= 1", param_hint="--top"
        )
    mixed = mixed_cluster(kw)
    if mixed is not None and mixed.num_pools > 1:
        run_mixed_plan(mixed, kw, as_json)
        return
    if mixed is not None and kw["nodes"] is not None:
        raise click.UsageError("--cluster CLUSTER:N already gives the node count; leave out --nodes")
    check_outputs(
        output_file("--csv", kw["csv_path"]), output_file("--report", kw["report_path"]), force=kw["force"]
    )
    _check_export(kw)
    if kw["report_path"] and kw["top"] == 0:
        raise click.BadParameter(
            "--report needs at least one refined plan; use --top >= 1", param_hint="--top"
        )
    kw["_failures"], kw["_goodput_options"] = load_goodput(kw)
    if kw["objective"].startswith("goodput-") and kw["_failures"] is None:
        raise click.BadParameter(
            f"--objective {kw['objective']} needs --failures (a preset id such as llama3, or a TOML path)",
            param_hint="--failures",
        )
    nodes = _ints(kw["nodes"], "--nodes")
    if nodes is not None and (min(nodes) < 1 or max(nodes) > L.MAX_NODES or len(nodes) > L.MAX_NODE_COUNTS):
        raise click.BadParameter(
            f"--nodes takes 1 to {L.MAX_NODE_COUNTS} node counts, each in 1..{L.MAX_NODES:,} "
            f"(workbench/specs/limits.py), got {shown(kw['nodes'])}"
        )
    model = load_model(kw["model"])
    cluster = mixed.pools[0] if mixed else load_cluster(kw["cluster"], num_nodes=nodes[0] if nodes else None)
    workload = Workload(
        seq_len=kw["seq_len"],
        global_batch_size=kw["global_batch"],
        dtype=kw["dtype"],
        capacity_factor=kw["capacity_factor"],
    )
    cluster.device.peak(workload.dtype)
    kw["_price"] = _price(cluster, kw)
    constraints = build_constraints(kw)
    result = _run_search(
        model, cluster, workload, constraints, nodes, kw, show_progress=not as_json and sys.stderr.isatty()
    )
    sizes = _sizes(model, cluster, workload, constraints, result, kw)
    if as_json:
        echo_json(_summary(result, sizes))
    else:
        _print_human(result, sizes, kw.get("_calibration"))
    if not result.feasible:
        if as_json:
            sys.exit(1)
        raise click.ClickException("no feasible plan under these constraints")
    _write_outputs(result, kw)
    if kw["export_stack"] and result.estimates:
        from workbench_cli.launch_cmd import export_estimate, model_ref
        from workbench_widgets.report import cli_command

        export_estimate(
            result.estimates[0],
            kw["export_stack"],
            kw["export_dir"],
            kw["force"],
            framework=kw["framework"],
            ref=model_ref(kw["model"]),
            command=cli_command(),
        )
        if not as_json:
            say(f"launch files of plan #1 for {kw['export_stack']} written to {shown(kw['export_dir'])}")


def _check_export(kw: dict[str, Any]) -> None:
    """--export needs --export-dir, a known stack and a refined plan; the folder is checked before the search."""
    from workbench_cli._common import Output

    from workbench.launch.export import PREDICTION_FILE
    from workbench.launch.stacks import TRAINING_STACKS

    if kw["export_stack"] is None:
        return
    if kw["export_stack"] not in TRAINING_STACKS:
        raise click.BadParameter(
            f"{shown(kw['export_stack'])}; allowed: {', '.join(TRAINING_STACKS)}", param_hint="--export"
        )
    if kw["export_dir"] is None or kw["top"] == 0:
        raise click.UsageError("--export needs --export-dir DIR and a refined plan (--top >= 1)")
    from workbench_cli.launch_cmd import target_stack

    target_stack(kw["export_stack"], kw["framework"])  # the profile's stack, or refused
    check_outputs(
        Output("--export-dir", Path(kw["export_dir"]), folder=True, marker=PREDICTION_FILE), force=kw["force"]
    )


def _price(cluster: Any, kw: dict[str, Any]) -> Any:
    """The price the search uses (``--price-per-device-hour``, the cluster's [price], the price table), or None
    when the device has none (then ``cost`` ranks by device-hours, as the header says)."""
    from workbench.estimate.economics import resolve_price

    override = kw.get("price_per_device_hour")
    if override is not None and not override > 0:
        raise click.BadParameter(
            f"must be > 0 (US dollars per device-hour), got {override!r}",
            param_hint="--price-per-device-hour",
        )
    price, why = resolve_price(cluster, override, kw.get("price_kind", "on-demand").replace("-", "_"))
    kw["_price_why"] = why
    return price


def _sizes(
    model: Any, cluster: Any, workload: Any, constraints: Any, result: Any, kw: dict[str, Any]
) -> list[SizeBest]:
    """With several node counts: the best plan of each, each count searched on its own (``plan_sizes``)."""
    if len(result.clusters) < 2:
        return []
    from workbench.search import search
    from workbench.search.sizes import best_per_size

    def search_one(n: int) -> Any:
        return search(model, cluster, workload, constraints, **_search_args((n,), kw))

    return best_per_size(search_one, [c.num_nodes for c in result.clusters], result.objective)


def _summary(result: Any, sizes: list[SizeBest]) -> dict[str, Any]:
    """``plan --json``: the core's summary plus the memory limit used and, for several node counts, the best
    plan of each (``best_per_node_count``)."""
    out = result.summary()
    out["memory_headroom_frac"] = result.constraints.memory_headroom_frac
    out["memory_usable_bytes"] = usable_bytes(result)
    if sizes:
        from workbench.search.sizes import sizes_json

        out["best_per_node_count"] = sizes_json(sizes)
    return out


def _print_human(result: Any, sizes: list[SizeBest] | None = None, calibration: Any = None) -> None:
    say(_header(result))
    if not result.feasible:
        if result.num_plans:
            say("no feasible plan: nothing fits the device memory under these constraints")
        _print_misses(result)
        _print_rejections(result)
        return
    cols, rows = _plan_rows(
        result.plans,
        result.objective,
        len(result.clusters) > 1,
        max(result.plans.height, 1),
        memory_col=memory_header(result),
        usable=usable_bytes(result),
    )
    refined = int(result.plans["refined"].sum())
    shown = rows[: refined or 10]  # --top N shows the N refined plans; --top 0 the 10 best screened ones
    print_table(
        "Best plans (* = screened only, not refined; ! = over the usable memory after refinement; = tied with "
        "#1 within the model's ranking error; └ a variant of the layout above)",
        cols,
        shown,
    )
    if result.explanation:
        say(f"why: {result.explanation}")
    if result.estimates and calibration is not None:  # #1 beside the stack's published recipe, if any
        from workbench.search.frontier import TIE_FRAC
        from workbench.validate.recipes import reference_comparison

        best, usable = result.estimates[0], usable_bytes(result)
        ref = reference_comparison(best, result.framework, calibration, usable_bytes=usable)
        if ref is not None:
            say(ref.sentence(TIE_FRAC))
    notes = (
        sorted({n for n in result.plans.head(len(shown)).get_column("band_note").to_list() if n})
        if ("band_note" in result.plans.columns)
        else []
    )
    for note in notes:
        say(f"80% band widened (+): {note}")
    if sizes:
        print_sizes(sizes, result.token_budget, result.objective)
    if result.goodput is not None:
        print_goodput_sizes(result)
    _print_rejections(result)


def register(group: click.Group) -> None:
    group.add_command(plan_cmd)
