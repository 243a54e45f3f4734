"""``workbench validate``: predicted vs published for every row of a validation CSV, with MAPE."""

from __future__ import annotations

from typing import Any

import click
from workbench_cli._common import echo_json, print_table


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


@click.command("validate")
@click.option(
    "--data",
    "data",
    default=None,
    help="Validation CSV (default: profiles/validation/training_public.csv, a copy of shared/validation).",
)
@click.option("--calibration", default="default", show_default=True, help="Calibration name or TOML path.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def validate_cmd(data: str | None, calibration: str, as_json: bool) -> None:
    """Run the analytic model on every row of a validation file and print the errors."""
    from pathlib import Path

    from workbench.validate import DEFAULT_DATA, run_validation

    path = Path(data) if data else DEFAULT_DATA
    if not path.is_file():
        raise click.ClickException(f"{path}: no such file")
    result = run_validation(path, calibration=calibration)
    if as_json:
        echo_json(result)
        return
    rows = [
        [
            r["id"],
            (r["metric"] or "-").removeprefix("measured_"),
            _fmt(r["predicted"]),
            _fmt(r["measured"]),
            f"{r['ape']:.1%}" if r["ape"] is not None else "-",
            _fmt(r.get("predicted_memory_GiB")),
            _fmt(r.get("measured_memory_GiB")),
            ",".join(r["assumed"]) or "-",
        ]
        for r in result["rows"]
    ]
    print_table(
        "Predicted vs measured",
        ["id", "metric", "predicted", "measured", "APE", "mem pred GiB", "mem meas GiB", "assumed"],
        rows,
    )
    if result["skipped"]:
        print_table("Skipped rows", ["id", "reason"], [[s["id"], s["reason"]] for s in result["skipped"]])
    by = result["mape_by_source"]
    mem = result["memory_mape_by_source"]
    print_table(
        "MAPE per source",
        ["source", "throughput MAPE", "memory MAPE"],
        [
            [k, f"{by.get(k, 0):.1%}" if k in by else "-", f"{mem[k]:.1%}" if k in mem else "-"]
            for k in sorted(set(by) | set(mem))
        ],
    )
    overall = result["mape"]
    click.echo(f"overall throughput MAPE: {overall:.1%}" if overall is not None else "no throughput rows")
    if result["memory_mape"] is not None:
        click.echo(f"peak memory MAPE: {result['memory_mape']:.1%}")


def register(group: click.Group) -> None:
    group.add_command(validate_cmd)
