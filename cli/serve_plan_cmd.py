"""``workbench serve plan``: search the serving plans of a cluster for the highest SLO-goodput per device."""

from __future__ import annotations

from typing import Any

import click
from workbench_cli._common import echo_json, print_table, say
from workbench_cli._types import count
from workbench_cli.economics_opts import cli_price, price_options

from workbench.specs import limits as L

DTYPES = ("bf16", "fp16", "fp8", "fp4", "int4")
MAX_SLO_MS = 1e9
"""Largest latency target accepted, milliseconds (about 11.6 days)."""


def _positive(maximum: float) -> click.FloatRange:
    return click.FloatRange(min=0.0, max=maximum, min_open=True)


def _dtype_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    items = tuple(v.strip().lower() for v in value.split(",") if v.strip())
    bad = [v for v in items if v not in DTYPES]
    if not items or bad:
        raise click.BadParameter(
            f"{value!r}: give a comma-separated list of {', '.join(DTYPES)}", ctx=ctx, param=param
        )
    return items


def _engine_names() -> list[str]:
    from workbench.presets.engines import engine_names

    return engine_names()


engine_option = click.option(
    "--engine",
    type=click.Choice(_engine_names()),
    default="generic",
    show_default=True,
    help="Serving engine profile (profiles/engines/): its host time per iteration, CUDA graphs, small kernels "
    "per layer and KV admission rule.",
)
"""``--engine`` of ``serve estimate`` and ``serve plan``."""

memory_share_option = click.option(
    "--gpu-memory-utilization",
    type=_positive(1.0),
    default=None,
    help="The engine's memory share, read as its own flag: vLLM --gpu-memory-utilization (of the device), SGLang "
    "--mem-fraction-static (weights and KV), TensorRT-LLM --kv_cache_free_gpu_memory_fraction (of the memory left). "
    "Default: the engine profile's own for the engine's GPUs (memory_share_by_gpus).",
)
"""``--gpu-memory-utilization`` of ``serve estimate`` and ``serve plan`` (``EngineProfile.kv_memory_share`` reads it;
``memory_share_by_gpus`` gives the default)."""


@click.command("plan")
@click.option("--model", required=True, help="Model preset id or HF config.json path.")
@click.option("--cluster", required=True, help="Cluster preset id or TOML path.")
@click.option(
    "--nodes", type=count(L.MAX_NODES), default=None, help="Number of nodes (default: the preset's)."
)
@click.option(
    "--devices", type=count(L.MAX_DEVICES), default=None, help="Device budget (default: the whole cluster)."
)
@click.option("--input-tokens", type=count(L.MAX_SEQ_LEN), required=True, help="Prompt tokens per request.")
@click.option(
    "--output-tokens", type=count(L.MAX_SEQ_LEN), required=True, help="Generated tokens per request."
)
@click.option(
    "--num-requests",
    type=count(L.MAX_SERVE_PLAN_REQUESTS),
    default=200,
    show_default=True,
    help="Requests judged per simulation (Poisson runs add warm-up requests).",
)
@click.option(
    "--rate",
    type=_positive(1e9),
    default=None,
    help="Target rate, requests/s: plans missing the SLO at it are rejected (default: Poisson, no target).",
)
@click.option("--concurrency", type=count(2**24), default=None, help="Closed loop: requests kept in flight.")
@click.option("--offline", is_flag=True, help="All requests at once instead of Poisson arrivals.")
@engine_option
@click.option("--ttft-slo-ms", type=_positive(MAX_SLO_MS), default=None, help="TTFT target, milliseconds.")
@click.option("--tpot-slo-ms", type=_positive(MAX_SLO_MS), default=None, help="TPOT target, milliseconds.")
@click.option("--percentile", type=click.Choice(["p50", "p90", "p99"]), default="p99", show_default=True)
@click.option(
    "--weight-dtypes",
    default="bf16,fp8",
    show_default=True,
    callback=_dtype_list,
    help="Weight dtypes tried.",
)
@click.option(
    "--kv-dtypes", default="bf16,fp8", show_default=True, callback=_dtype_list, help="KV-cache dtypes tried."
)
@click.option("--no-disaggregation", is_flag=True, help="Skip disaggregated prefill:decode plans.")
@memory_share_option
@click.option(
    "--simulate",
    "num_simulated",
    type=count(10**4),
    default=10,
    show_default=True,
    help="Plans simulated (best steady-state estimates, one per layout first).",
)
@click.option("--top", type=count(10**4), default=10, show_default=True, help="Plans printed.")
@click.option(
    "--calibration", default="default", show_default=True, help="Fitted constants name or TOML path."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--report",
    "report_path",
    default=None,
    help="Write a self-contained HTML report: the best plan simulated at its goodput, the top plans, the "
    "Pareto sets and the rejections (opens offline).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing --report file.")
@price_options
def serve_plan_cmd(as_json: bool, top: int, report_path: str | None, force: bool, **kw: Any) -> None:
    """Search replicas, tp/pp/ep, dtypes, batching and prefill:decode splits for the highest SLO-goodput.

    Goodput: with Poisson arrivals (the default) the highest request rate at which the TTFT and TPOT targets
    hold at the percentile; with --concurrency N or --offline, the requests meeting both targets per second.
    """
    from workbench_cli._common import check_outputs, output_file

    from workbench.presets.calibration import load_calibration
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.search.serving import serve_search

    check_outputs(output_file("--report", report_path), force=force)
    slo = _slo(kw)
    workload = _workload(kw)
    model = load_model(kw["model"])
    cluster = load_cluster(kw["cluster"], num_nodes=kw["nodes"])
    price, _ = cli_price(kw, cluster)
    result = serve_search(model, cluster, workload, slo, load_calibration(kw["calibration"]),
                          constraints=_constraints(kw), price=price)  # fmt: skip
    if report_path is not None:
        _write_report(result, report_path, force)
    if as_json:
        echo_json(result.to_dict(top))
        return
    _print(result, top)
    if report_path is not None:
        from workbench_cli._common import shown

        say(f"report written to {shown(report_path)} (open it in a browser; it works offline)")


def _write_report(result: Any, report_path: str, force: bool) -> None:
    """The serving report of the search (``workbench_widgets.report.render_serving_report``): the best plan simulated on its
    goodput workload, with the search's tables and figures. Raises ClickException when no plan meets the SLO."""
    from workbench_cli._common import shown, text_writer, write_outputs
    from workbench_widgets.report import cli_command, render_serving_report

    best = result.best_estimate()
    if best is None:
        raise click.ClickException(
            f"no plan meets the SLO, so there is no plan to report; {shown(report_path)} not written"
        )
    html = render_serving_report(best, search=result, slo=result.slo, command=cli_command())
    write_outputs({report_path: text_writer(html)}, force=force)


def _slo(kw: dict[str, Any]) -> Any:
    from workbench.specs.serving import SLO

    ttft, tpot = kw["ttft_slo_ms"], kw["tpot_slo_ms"]
    if ttft is None and tpot is None:
        raise click.UsageError("give --ttft-slo-ms, --tpot-slo-ms or both (the targets the goodput counts)")
    return SLO(
        ttft_s=None if ttft is None else ttft / 1e3,
        tpot_s=None if tpot is None else tpot / 1e3,
        percentile=kw["percentile"],
    )


def _workload(kw: dict[str, Any]) -> Any:
    from workbench.search.serving import NO_TARGET_RATE_PER_S
    from workbench.specs.serving import ServingWorkload

    given = [name for name in ("rate", "concurrency") if kw[name] is not None] + (
        ["offline"] if kw["offline"] else []
    )
    if len(given) > 1:
        raise click.UsageError(
            f"give one of --rate, --concurrency and --offline, not {' and '.join('--' + g for g in given)}"
        )
    common = {
        "num_requests": kw["num_requests"],
        "input_tokens": kw["input_tokens"],
        "output_tokens": kw["output_tokens"],
    }
    if kw["concurrency"] is not None:
        return ServingWorkload(arrival="closed", concurrency=kw["concurrency"], **common)
    if kw["offline"]:
        return ServingWorkload(arrival="offline", **common)
    rate = NO_TARGET_RATE_PER_S if kw["rate"] is None else kw["rate"]
    return ServingWorkload(arrival="poisson", request_rate_per_s=rate, **common)


def _constraints(kw: dict[str, Any]) -> Any:
    from workbench.search.serving import ServingSearchConstraints

    return ServingSearchConstraints(
        engine=kw["engine"],
        num_devices=kw["devices"],
        weight_dtypes=kw["weight_dtypes"],
        kv_cache_dtypes=kw["kv_dtypes"],
        disaggregation=not kw["no_disaggregation"],
        top_k=kw["num_simulated"],
        gpu_memory_utilization_frac=kw["gpu_memory_utilization"],
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def _print(result: Any, top: int) -> None:
    slo, w = result.slo, result.workload
    q = slo.percentile.value
    targets = ", ".join(
        f"{name} {q} <= {value * 1e3:g} ms"
        for name, value in (("TTFT", slo.ttft_s), ("TPOT", slo.tpot_s))
        if value
    )
    budget = result.constraints.num_devices or result.cluster.num_devices
    say(
        f"{result.model.name} on {budget} x {result.cluster.device.id} ({result.cluster.id}); {w.arrival.value} "
        f"arrivals, {w.input_lengths()[0]}/{w.output_lengths()[0]} tokens; SLO {targets}"
    )
    say(
        f"{result.num_candidates:,} plans, {result.screened.height:,} passed the screen, "
        f"{result.num_simulations} simulations"
    )
    table = result.table.head(top)
    priced = "usd_per_million_output_tokens" in table.columns
    if table.height:
        print_table(
            "Top plans by goodput per device" + (" (= by dollars per output token)" if priced else ""),
            ["#", "plan", "seqs", "devices", "goodput req/s", "req/s/device", "out tok/s/device",
             f"TTFT {q} ms", f"TPOT {q} ms", "KV tokens/engine", "pareto"]
            + (["$/M out tok"] if priced else []),  # fmt: skip
            [[r["rank"], r["plan"], r["max_num_seqs"], r["num_devices"], round(r["goodput_requests_per_s"], 2),
              round(r["goodput_requests_per_s_per_device"], 3), round(r["goodput_output_tokens_per_s_per_device"]),
              _ms(r["ttft_s_at_goodput"]), _ms(r["tpot_s_at_goodput"]), r["kv_cache_capacity_tokens"],
              _frontier(r)] + ([f"${r['usd_per_million_output_tokens']:,.3f}"] if priced else [])
             for r in table.iter_rows(named=True)],
        )  # fmt: skip
        print_table(
            "Pareto set: goodput per device against the latency at the goodput point",
            ["plan", "out tok/s/device", f"TTFT {q} ms", f"TPOT {q} ms", "frontier"],
            [[r["plan"], round(r["goodput_output_tokens_per_s_per_device"]), _ms(r["ttft_s_at_goodput"]),
              _ms(r["tpot_s_at_goodput"]), _frontier(r)] for r in result.pareto.iter_rows(named=True)],
        )  # fmt: skip
    else:
        say("no plan meets the SLO on this cluster (see the rejections)")
    print_table(
        "Rejected plans",
        ["reason", "plans", "why"],
        [[r["reason"], r["num_plans"], r["description"]] for r in result.rejections.iter_rows(named=True)],
    )
    if result.best is not None:
        say(f"best: {result.best.describe()} (max_num_seqs {result.best.max_num_seqs})")
    for note in result.notes:
        say(f"note: {note}")


def _frontier(row: dict[str, Any]) -> str:
    sides = [name for name in ("ttft", "tpot") if row[f"pareto_{name}"]]
    return "+".join(sides) if sides else ""
