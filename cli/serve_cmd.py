"""``workbench serve estimate``: simulate a serving deployment and print TTFT, TPOT, throughput and KV capacity."""

from __future__ import annotations

from typing import Any

import click
from workbench_cli._common import fmt_or_na, json_text, print_table, say
from workbench_cli._types import count
from workbench_cli.economics_opts import cli_price, price_options
from workbench_cli.serve_options import deployment_options, disaggregation_of, speculative_of
from workbench_cli.serve_plan_cmd import engine_option, memory_share_option, serve_plan_cmd

from workbench.serving.engine_defaults import with_engine_memory_share
from workbench.specs import limits as L

DTYPES = ("bf16", "fp16", "fp8", "fp4", "int4")


@click.group("serve")
def serve_group() -> None:
    """Serving plans: requests simulated on engines priced with the same cost model as training."""


serve_group.add_command(serve_plan_cmd)


@serve_group.command("estimate")
@click.option("--model", required=True, help="Model preset id or HF config.json path.")
@click.option("--cluster", required=True, help="Cluster preset id or TOML path.")
@click.option(
    "--nodes", type=count(L.MAX_NODES), default=None, help="Number of nodes (default: the preset's)."
)
@click.option(
    "--replicas", type=count(L.MAX_DEVICES), default=1, show_default=True, help="Engines behind a router."
)
@click.option("--tp", type=count(L.MAX_DEVICES), default=1, show_default=True)
@click.option("--pp", type=count(L.MAX_PP), default=1, show_default=True)
@click.option(
    "--ep", type=count(L.MAX_DEVICES), default=None, help="Expert-parallel degree (MoE; default: tp-wide)."
)
@click.option("--attention-dp", type=count(L.MAX_DEVICES), default=1, show_default=True)
@click.option("--input-tokens", type=count(L.MAX_SEQ_LEN), required=True, help="Prompt tokens per request.")
@click.option(
    "--output-tokens", type=count(L.MAX_SEQ_LEN), required=True, help="Generated tokens per request."
)
@click.option(
    "--num-requests",
    type=count(L.MAX_SIMULATED_REQUESTS),
    default=256,
    show_default=True,
    help="Requests simulated (MAX_SIMULATED_REQUESTS in workbench/specs/limits.py bounds it: within a minute).",
)
@click.option("--concurrency", type=count(2**24), default=None, help="Closed loop: requests kept in flight.")
@click.option("--rate", type=float, default=None, help="Open loop: Poisson arrivals, requests per second.")
@click.option(
    "--trace",
    "trace_path",
    default=None,
    help="CSV with arrival_s,input_tokens,output_tokens (overrides lengths).",
)
@click.option("--scheduler", type=click.Choice(["sarathi", "vllm"]), default="sarathi", show_default=True)
@click.option("--max-num-seqs", type=count(L.MAX_GLOBAL_BATCH_SIZE), default=256, show_default=True)
@click.option("--max-batched-tokens", type=count(L.MAX_SEQ_LEN), default=8192, show_default=True)
@click.option("--weight-dtype", type=click.Choice(DTYPES), default="bf16", show_default=True)
@click.option("--activation-dtype", type=click.Choice(DTYPES), default="bf16", show_default=True)
@click.option("--kv-dtype", type=click.Choice(DTYPES), default="bf16", show_default=True)
@memory_share_option
@engine_option
@deployment_options
@click.option(
    "--calibration", default="default", show_default=True, help="Fitted constants name or TOML path."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--report", "report_path", default=None, help="Write a self-contained HTML report (opens offline)."
)
@click.option("--force", is_flag=True, help="Overwrite an existing --report file.")
@price_options
def serve_estimate_cmd(as_json: bool, report_path: str | None, force: bool, **kw: Any) -> None:
    """Simulate the requests on the plan: TTFT, TPOT (mean and percentiles), tokens/s and KV capacity.

    Arrivals: all at once (offline, the default), --concurrency N (closed loop), --rate R (Poisson) or --trace.
    Deployments: --prefill-workers/--decode-workers (with their -tp, -ep, -attention-dp) split prefill and decode
    into two pools joined by a KV transfer; --speculative METHOD with --num-speculative-tokens and
    --acceptance-rate or --accepted-length; --prefix-hit-rate H. See docs/serving.md.
    """
    from workbench_cli._common import check_outputs, output_file

    from workbench.serving.estimate import serve_estimate

    check_outputs(output_file("--report", report_path), force=force)
    model, cluster, plan, workload, calibration = serving_inputs(kw)
    price, why = cli_price(kw, cluster)
    est = serve_estimate(model, cluster, plan, workload, calibration)
    from workbench.estimate.economics import serving_energy

    summary = {
        **est.summary(),
        **serving_dollars(price, why, plan.num_devices, est.summary()),
        **serving_energy(est),
    }
    text = json_text(summary) if as_json else None  # ready before the report: a failure leaves no file
    if report_path is not None:
        _write_report(est, calibration, report_path, force)
    if text is not None:
        click.echo(text)
        return
    say(
        f"{model.name} on {plan.num_devices} x {cluster.device.id} ({cluster.id}), {plan.describe()}, "
        f"{workload.request_count} requests ({workload.arrival.value})"
    )
    ms = 1e3
    print_table(
        "Latency (ms)",
        ["", "mean", "p50", "p90", "p99"],
        [
            [name, *(fmt_or_na(summary[f"{key}_s_{q}"] * ms, ".1f") for q in ("mean", "p50", "p90", "p99"))]
            for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("end to end", "e2e"))
        ],
    )
    say(
        f"output tokens/s {summary['output_tokens_per_s']:,.0f} "
        f"({summary['output_tokens_per_s_per_device']:,.0f} per device), requests/s {summary['requests_per_s']:.2f}, "
        f"preemptions {summary['num_preemptions']}, KV cache {summary['kv_cache_capacity_tokens']:,} tokens per engine"
    )
    if summary["disaggregated"]:
        say(
            f"KV transfer per request (mean prompt): {summary['kv_transfer_bytes_per_request'] / 2**20:,.1f} MiB, "
            f"{summary['kv_transfer_s'] * ms:.2f} ms exposed"
        )
    for note in summary["assumed"]:
        say(f"assumed: {note}")
    if summary["speculative"] is not None:
        say(
            f"speculative decoding {summary['speculative']}: {summary['accepted_length']:.2f} tokens per step"
        )
    say(
        f"energy {summary['energy_j_per_output_token']:,.3f} J per output token "
        f"({summary['output_tokens_per_joule']:,.2f} output tokens per joule; PUE 1, docs/cost.md)"
    )
    if summary["usd_per_million_output_tokens"] is not None:
        say(
            f"dollars per million output tokens ${summary['usd_per_million_output_tokens']:,.3f}; {summary['price']}"
        )
    else:
        say(f"dollars: {summary['price']}")
    if report_path is not None:
        from workbench_cli._common import shown

        say(f"report written to {shown(report_path)} (open it in a browser; it works offline)")


def serving_inputs(kw: dict[str, Any]) -> tuple[Any, Any, Any, Any, Any]:
    """(model, cluster, ServingPlan, ServingWorkload, Calibration) from the ``serve estimate`` options."""
    from workbench.presets.calibration import load_calibration
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.specs.serving import ServingPlan

    if kw["concurrency"] is not None and kw["rate"] is not None:
        raise click.BadParameter("give --concurrency or --rate, not both", param_hint="--rate")
    model = load_model(kw["model"])
    cluster = load_cluster(kw["cluster"], num_nodes=kw["nodes"])
    plan = ServingPlan(
        replicas=kw["replicas"],
        tp=kw["tp"],
        pp=kw["pp"],
        ep=kw["ep"],
        attention_dp=kw["attention_dp"],
        weight_dtype=kw["weight_dtype"],
        activation_dtype=kw["activation_dtype"],
        kv_cache_dtype=kw["kv_dtype"],
        max_num_seqs=kw["max_num_seqs"],
        max_num_batched_tokens=kw["max_batched_tokens"],
        scheduler=kw["scheduler"],
        gpu_memory_utilization_frac=0.9
        if kw["gpu_memory_utilization"] is None
        else kw["gpu_memory_utilization"],
        engine=kw["engine"],
        disaggregation=disaggregation_of(kw),
        speculative=speculative_of(kw),
        num_redundant_experts=kw["num_redundant_experts"],
        offload_group_size=kw["offload_group_size"],
    )
    if kw["gpu_memory_utilization"] is None:
        plan = with_engine_memory_share(plan)
    return model, cluster, plan, _workload(kw), load_calibration(kw["calibration"])


def serving_dollars(price: Any, why: str, num_devices: int, summary: dict[str, Any]) -> dict[str, Any]:
    """``usd_per_device_hour``, ``usd_per_million_output_tokens`` (the deployment's devices over its output
    tokens/s) and the ``price`` line (or why there is none)."""
    from workbench.estimate.economics import serving_usd_per_million_output_tokens

    if price is None:
        return {"usd_per_device_hour": None, "usd_per_million_output_tokens": None, "price": why}
    tokens = summary["output_tokens_per_s"]
    usd = (
        serving_usd_per_million_output_tokens(price.usd_per_device_hour, num_devices, tokens)
        if tokens > 0
        else None
    )
    return {
        "usd_per_device_hour": price.usd_per_device_hour,
        "usd_per_million_output_tokens": usd,
        "price": price.describe(),
    }


def _write_report(est: Any, calibration: Any, report_path: str, force: bool) -> None:
    """Write the serving report of ``est`` (``workbench_widgets.report.render_serving_report``) with a rate sweep of its requests
    (``workbench.serving.sweep.rate_sweep``, default rates); nothing is written if it fails."""
    from workbench_cli._common import text_writer, write_outputs
    from workbench_widgets.report import cli_command, render_serving_report

    from workbench.serving.sweep import rate_sweep

    sweep = rate_sweep(est.model, est.cluster, est.plan, est.workload, calibration)
    html = render_serving_report(est, sweep=sweep, command=cli_command())
    write_outputs({report_path: text_writer(html)}, force=force)


def _workload(kw: dict[str, Any]) -> Any:
    """The ServingWorkload of the options (ValueError names a bad field)."""
    from workbench.specs.serving import ServingWorkload

    if kw["trace_path"] is not None:
        from workbench.serving.simulate import Requests

        req = Requests.from_trace_csv(kw["trace_path"])
        rows = zip(req.arrival_s.tolist(), req.input_tokens.tolist(), req.output_tokens.tolist(), strict=True)
        trace = tuple((float(a), int(i), int(o)) for a, i, o in rows)
        return ServingWorkload(arrival="trace", trace=trace, prefix_hit_rate=kw["prefix_hit_rate"])
    common = {
        "num_requests": kw["num_requests"],
        "input_tokens": kw["input_tokens"],
        "output_tokens": kw["output_tokens"],
        "prefix_hit_rate": kw["prefix_hit_rate"],
    }
    if kw["concurrency"] is not None:
        return ServingWorkload(arrival="closed", concurrency=kw["concurrency"], **common)
    if kw["rate"] is not None:
        return ServingWorkload(arrival="poisson", request_rate_per_s=kw["rate"], **common)
    return ServingWorkload(arrival="offline", **common)


def register(group: click.Group) -> None:
    from workbench_cli.launch_cmd import add_serve_export

    group.add_command(serve_group)
    add_serve_export(serve_group)
