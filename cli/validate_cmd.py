"""``workbench validate``: predicted vs published for every row of a validation CSV, with MAPE."""

from __future__ import annotations

from typing import Any

import click
from workbench_cli._common import echo_json, print_table, say


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
@click.option(
    "--calibration", default="default", show_default=True, help="Fitted constants name or TOML path."
)
@click.option(
    "--framework", default=None, help="Price every row with this framework profile (default: each row's own)."
)
@click.option("--kernels", default=None, help="Kernel table TOML or `workbench microbench` folder to add.")
@click.option(
    "--cv",
    type=click.Choice(["source"]),
    default=None,
    help="Leave one source out: refit the constants without each source and score it (out-of-sample).",
)
@click.option(
    "--write-fit", "fit_path", default=None, help="With --cv: write the in-sample fit as a TOML file."
)
@click.option(
    "--write-band",
    "band_path",
    default=None,
    help="With --cv: write the error-band table (out-of-sample residuals, calibrated) as a TOML file.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing --write-fit or --write-band file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def validate_cmd(
    data: str | None,
    calibration: str,
    framework: str | None,
    kernels: str | None,
    cv: str | None,
    fit_path: str | None,
    band_path: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Run the analytic model on every row of a validation file and print the errors (with --cv source:
    the out-of-sample errors, in-sample beside them)."""
    from workbench_cli._common import check_outputs, output_file, write_outputs

    from workbench.specs.files import check_input_file
    from workbench.validate import DEFAULT_DATA, run_validation, write_fits

    for flag, given in (("--write-fit", fit_path), ("--write-band", band_path)):
        if given and not cv:
            raise click.BadParameter("needs --cv source (made from its folds)", param_hint=flag)
    check_outputs(output_file("--write-fit", fit_path), output_file("--write-band", band_path), force=force)
    path = check_input_file(data or DEFAULT_DATA, "file")  # a directory or a FIFO is named as such
    from workbench.validate.serving import is_serving_file

    if is_serving_file(path):
        if cv or framework or kernels:
            raise click.BadParameter(
                "a serving file is scored as it is (no --cv, --framework or --kernels)", param_hint="--data"
            )
        _serving(path, calibration, as_json)
        return
    source = f"workbench validate --cv source --data {path}"
    if cv:
        from workbench.validate.band import cross_validate_with_band, write_band_table

        result, table = cross_validate_with_band(
            path,
            calibration=calibration,
            framework=framework,
            kernels=kernels,
            generated=_generated_stamp(),
            source=source,
        )
        if band_path:
            write_outputs({band_path: lambda tmp: write_band_table(tmp, table)}, force=force)
    else:
        result = run_validation(path, calibration=calibration, framework=framework, kernels=kernels)
    if fit_path:
        write_outputs({fit_path: lambda tmp: write_fits(tmp, result["fits"], source=source)}, force=force)
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
            "yes" if r.get("fits", True) else "NO",
            ",".join(r["assumed"]) or "-",
        ]
        for r in result["rows"]
    ]
    print_table(
        "Predicted vs measured",
        ["id", "metric", "predicted", "measured", "APE", "mem pred GiB", "mem meas GiB", "fits", "assumed"],
        rows,
    )
    if result["skipped"]:
        print_table("Skipped rows", ["id", "reason"], [[s["id"], s["reason"]] for s in result["skipped"]])
    if result["not_fitting"]:
        print_table(
            "Published plans the memory model calls non-fitting (they ran: memory-model failures to explain)",
            ["id", "plan", "need GiB", "usable GiB"],
            [
                [r["id"], r["plan"], _fmt(r["predicted_need_GiB"]), _fmt(r["usable_GiB"])]
                for r in result["not_fitting"]
            ],
        )
    else:
        say("every published plan fits by the planner's rule (need within the usable memory)")
    print_table(
        "Fitted framework-profile constants" + (" (in-sample fit)" if cv else ""),
        ["framework", "fit group", "constant", "value", "prior", "fitted"],
        [
            [
                c["framework"],
                c["group"],
                c["constant"],
                _fmt(c["value"]),
                _fmt(c["prior"]),
                "yes" if c["fitted"] else "no",
            ]
            for c in result["constants"]
        ],
    )
    _print_readings(result.get("readings", []), "out-of-sample" if cv else "in-sample")
    _print_mape(result, "out-of-sample (leave one source out)" if cv else "")
    if cv:
        _print_mape(result["in_sample"], "in-sample (fit on all rows)")
        _print_cv_extras(result)


def _generated_stamp() -> str:
    """Today's date and the checkout's commit (``git rev-parse --short HEAD``; 'unknown' outside git)."""
    import datetime
    import subprocess

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return f"{datetime.date.today().isoformat()} at commit {commit}"


def _print_readings(readings: list[dict[str, Any]], kind: str) -> None:
    """Rows read two ways (a blank recompute the row's arithmetic leaves open, a table layout its stack's recipe
    contradicts): each reading's prediction and need, the one scored, the one nearer the measured value."""
    if not readings:
        return
    print_table(
        f"Rows read two ways (recompute blank and not settled by the row's arithmetic, or table and recipe"
        f" layouts that disagree; {kind} predictions)",
        ["id", "question", "metric", "measured", "readings (need GiB)", "scored", "nearer the measured"],
        [
            [
                r["id"],
                r["question"],
                (r["metric"] or "-").removeprefix("measured_"),
                _fmt(r["measured"]),
                ", ".join(f"{k}: {_fmt(v)} ({r['need_GiB'][k]:.1f})" for k, v in r["readings"].items()),
                r["scored"],
                r["supported"],
            ]
            for r in readings
        ],
    )


def _print_cv_extras(result: dict[str, Any]) -> None:
    """Fitted constants' spread over the folds, mean signed error and the error band's coverage."""
    print_table(
        "Fitted constants over the leave-one-source-out folds",
        [
            "fit group",
            "constant",
            "in-sample",
            "fold min",
            "fold max",
            "fold std",
            "folds",
            "spread",
            "applied",
        ],
        [
            [
                c["group"],
                c["constant"],
                _fmt(c["value"]),
                _fmt(c["fold_min"]),
                _fmt(c["fold_max"]),
                _fmt(c["fold_std"]),
                str(c["num_folds"]),
                _pct(c["spread_frac"]),
                f"{_fmt(c['applied_min'])}-{_fmt(c['applied_max'])}",
            ]
            for c in result["constant_spread"]
        ],
    )
    signed = result["signed_error"]
    print_table(
        "Mean signed error, out-of-sample (predicted / measured throughput - 1; > 0: predicted faster)",
        ["source", "mean signed error"],
        [[k, _pct(v)] for k, v in signed["by_source"].items()],
    )
    say(f"out-of-sample mean signed error: {_pct(signed['overall'])}")
    band = result["band"]
    cov = band["coverage"]
    say(
        f"80% error band, out-of-sample coverage: {_pct(cov['overall'])} of {cov['num_residuals']} runs"
        f" (validated regimes {_pct(cov['validated'])}, widened {_pct(cov['widened'])} of"
        f" {cov['num_widened']}); stretch {band['inflation']:g}, widening {band['widening']:g}"
    )


def _serving(path: Any, calibration: str, as_json: bool) -> None:
    """Score a serving file (``workbench.validate.serving``): rows, skipped rows, MAPE per metric and source."""
    from workbench.validate.serving import validate_serving

    result = validate_serving(path, calibration=calibration)
    if as_json:
        echo_json(result)
        return
    print_table(
        "Serving: predicted vs measured (SI units: s, tokens/s)",
        ["id", "metric", "predicted", "measured", "APE", "plan"],
        [
            [r["id"], r["metric"], _fmt(r["predicted"]), _fmt(r["measured"]), _pct(r["ape"]), r["plan"]]
            for r in result["rows"]
        ],
    )
    if result["skipped"]:
        print_table("Skipped rows", ["id", "reason"], [[s["id"], s["reason"]] for s in result["skipped"]])
    if result["readings"]:
        print_table(
            "Rows read several ways (a blank the source leaves open: each reading predicted)",
            ["id", "metric", "measured", "readings", "scored", "nearer the measured"],
            [
                [
                    r["id"],
                    r["metric"],
                    _fmt(r["measured"]),
                    ", ".join(f"{k}: {_fmt(v)}" for k, v in r["readings"].items()),
                    r["scored"],
                    r["supported"],
                ]
                for r in result["readings"]
            ],  # fmt: skip
        )
    print_table(
        "Serving MAPE per metric",
        ["metric", "MAPE"],
        [[k, _pct(v)] for k, v in result["mape_by_metric"].items()],
    )
    print_table(
        "Serving MAPE per source",
        ["source", "MAPE"],
        [[k, _pct(v)] for k, v in result["mape_by_source"].items()],
    )
    groups = sorted({g for by in result["mape_by_engine_metric"].values() for g in by})
    print_table(
        "Serving MAPE per engine profile and metric",
        ["engine", *groups],
        [[eng, *(_pct(by.get(g)) for g in groups)] for eng, by in result["mape_by_engine_metric"].items()],
    )


def _pct(v: float | None) -> str:
    return f"{v:.1%}" if v is not None else "-"


def _print_mape(result: dict[str, Any], label: str) -> None:
    by, mem = result["mape_by_source"], result["memory_mape_by_source"]
    print_table(
        "MAPE per source" + (f", {label}" if label else ""),
        ["source", "throughput MAPE", "memory MAPE"],
        [[k, _pct(by.get(k)), _pct(mem.get(k))] for k in sorted(set(by) | set(mem))],
    )
    prefix = f"{label}: " if label else ""
    overall = result["mape"]
    say(f"{prefix}overall throughput MAPE: {_pct(overall)}" if overall is not None else "no throughput rows")
    if result["memory_mape"] is not None:
        say(f"{prefix}peak memory MAPE: {_pct(result['memory_mape'])}")


def register(group: click.Group) -> None:
    group.add_command(validate_cmd)
