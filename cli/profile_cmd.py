"""``workbench profile`` (measure a model's ops with torch) and ``workbench calibrate`` (fit the analytic curve).

Torch is imported only inside the command functions, through ``backends``. A profile folder holds
``manifest.json`` and ``ops.parquet`` (schema: :mod:`workbench.presets.profile_table`), the profiled model as a
Hugging Face style ``config.json`` (so ``--model DIR/config.json`` works for a shrunk variant) and, for a
CPU profile, ``device.toml``/``cluster.toml`` describing this host (so ``--cluster DIR/cluster.toml`` works).
A shrunk variant (``--layers``/``--hidden``) follows ``workbench_backends.shrink.shrink_model``, the rule of
``workbench run``. This module only parses and prints.
"""

from __future__ import annotations

from pathlib import Path

import click
from workbench_cli._common import say
from workbench_cli._types import count

from workbench.specs import limits as L


def _ints(text: str, option: str, maximum: int = L.MAX_DEVICES) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(
            f"expected comma-separated integers, got {text!r}", param_hint=option
        ) from None
    if not values or any(not 1 <= v <= maximum for v in values):
        raise click.BadParameter(
            f"expected integers in 1..{maximum:,} (workbench/specs/limits.py), got {text!r}",
            param_hint=option,
        )
    return values


@click.command("profile")
@click.option("--model", "model_name", required=True, help="Model preset id or HF config.json path.")
@click.option("--tp", default="1", show_default=True, help="Tensor-parallel degrees, comma-separated.")
@click.option("--micro-batch", default="1,2,4", show_default=True, help="Micro-batch sizes, comma-separated.")
@click.option("--seq-len", default="128", show_default=True, help="Sequence lengths, comma-separated.")
@click.option("--cp", type=count(L.MAX_DEVICES), default=1, show_default=True)
@click.option("--ep", type=count(L.MAX_DEVICES), default=1, show_default=True)
@click.option(
    "--dtype",
    type=click.Choice(["fp32", "bf16", "fp16"]),
    default=None,
    help="Default: fp32 on cpu, bf16 on cuda.",
)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "--device-id",
    default=None,
    help="Device preset id to file the profile under (default: host-cpu, "
    "or the preset whose name matches the GPU).",
)
@click.option(
    "--layers",
    type=count(L.MAX_LAYERS),
    default=None,
    help="Shrink to this many blocks (a quick-look variant).",
)
@click.option(
    "--hidden",
    type=count(L.MAX_HIDDEN_SIZE),
    default=None,
    help="Shrink to this width (heads, FFN, vocab scale along).",
)
@click.option("--repeats", type=count(L.MAX_TIMING_REPEATS), default=5, show_default=True)
@click.option("--warmup", type=count(L.MAX_TIMING_REPEATS, minimum=0), default=2, show_default=True)
@click.option(
    "--threads",
    type=count(L.MAX_THREADS),
    default=None,
    help="torch.set_num_threads (default: torch's).",
)
@click.option(
    "--collectives/--no-collectives",
    default=False,
    show_default=True,
    help="Also run the collective micro-benchmarks (2 processes over gloo/NCCL) and fit alpha-beta.",
)
@click.option("--out", "out_dir", required=True, help="Profile folder to write.")
@click.option("--force", is_flag=True, help="Overwrite an existing profile folder.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def profile_cmd(
    model_name: str,
    tp: str,
    micro_batch: str,
    seq_len: str,
    cp: int,
    ep: int,
    dtype: str | None,
    device: str,
    device_id: str | None,
    layers: int | None,
    hidden: int | None,
    repeats: int,
    warmup: int,
    threads: int | None,
    collectives: bool,
    out_dir: str,
    force: bool,
    quiet: bool,
) -> None:
    """Measure forward, backward-input, backward-weight and fused backward of every op kind of a model at
    every (tp, micro-batch, seq-len) shape on this device; write a profile folder."""
    from workbench_cli._common import Output, check_outputs, shown, write_folder

    from workbench.presets.catalog import load_model
    from workbench.presets.profile_table import MANIFEST_NAME

    out = Path(out_dir)
    check_outputs(Output("--out", out, folder=True, marker=MANIFEST_NAME), force=force)
    from workbench_backends.shrink import shrink_model

    base = load_model(model_name)
    spec = shrink_model(base, num_layers=layers, hidden_size=hidden)
    shapes_args = (
        _ints(tp, "--tp"),
        _ints(micro_batch, "--micro-batch", L.MAX_GLOBAL_BATCH_SIZE),
        _ints(seq_len, "--seq-len", L.MAX_SEQ_LEN),
    )
    dtype = dtype or ("fp32" if device == "cpu" else "bf16")
    from workbench_backends.profile_record import run_profile  # torch is imported from here on

    done: list[tuple[int, str, bool]] = []

    def fill(folder: Path) -> None:  # measured into a temporary folder, moved into --out at the end
        done.append(
            run_profile(
                spec,
                base_model=base.name,
                shapes_args=shapes_args,
                cp=cp,
                ep=ep,
                dtype=dtype,
                device=device,
                device_id=device_id,
                repeats=repeats,
                warmup=warmup,
                threads=threads,
                collectives=collectives,
                out=folder,
                force=True,
                quiet=quiet,
                overrides={k: v for k, v in (("num_layers", layers), ("hidden_size", hidden)) if v},
            )
        )

    write_folder(out, fill, force=force, marker=MANIFEST_NAME, owned=PROFILE_FILES)
    rows, device_name, has_config = done[0]
    say(f"wrote {shown(out)} ({rows} rows, {shown(device_name)}, {dtype})")
    model_hint = out / "config.json" if has_config else model_name
    cluster_hint = out / "cluster.toml" if device == "cpu" else "<cluster>"
    say(
        f"use it: workbench estimate --backend torch-profile --profile {shown(out)} --model {shown(model_hint)} "
        f"--cluster {shown(cluster_hint)} --dtype {dtype} ..."
    )


PROFILE_FILES = (
    "manifest.json",
    "ops.parquet",
    "collectives.parquet",
    "config.json",
    "device.toml",
    "cluster.toml",
)
"""What ``workbench profile`` writes into its folder (files of an earlier run not written again are removed)."""


@click.command("calibrate")
@click.option("--profile", "profile_dir", required=True, help="Profile folder (from workbench profile).")
@click.option("--device", "device_id", required=True, help="Device preset id the profile was measured on.")
@click.option(
    "--kernels",
    default=None,
    help="Kernel table to start from: a `workbench microbench` folder or TOML (default: the device's published one).",
)
@click.option(
    "--out", "out_path", default=None, help="Kernel table TOML to write (default: <profile>/kernels.toml)."
)
@click.option("--force", is_flag=True, help="Overwrite an existing kernel table file.")
@click.option("--json", "as_json", is_flag=True, help="Print the fit as one JSON object.")
def calibrate_cmd(
    profile_dir: str, device_id: str, kernels: str | None, out_path: str | None, force: bool, as_json: bool
) -> None:
    """Fit a device's kernel table (GEMM curve, attention and HBM fractions) to a measured per-op profile,
    starting from a microbench or published table; write the table (``--kernels`` of estimate, plan and
    validate reads it); print the error before and after."""
    from workbench_cli._common import Output, check_outputs, echo_json, print_table, shown, write_outputs

    from workbench.presets.kernels import kernel_table_names, load_kernel_table
    from workbench.presets.profile_table import read_profile
    from workbench.validate.calibrate import calibrate_device, write_calibration

    target = Path(out_path) if out_path else Path(profile_dir) / "kernels.toml"
    check_outputs(Output("--out", target), force=force)
    prof = read_profile(profile_dir)
    start_from = kernels or (device_id if device_id in kernel_table_names() else None)
    start = load_kernel_table(start_from) if start_from else None
    fit = calibrate_device(prof, device_id, start=start)
    write_outputs({target: lambda tmp: write_calibration(tmp, fit)}, force=force)
    if as_json:
        echo_json({**fit.summary(), "path": str(target)})
        return
    rows = [
        [
            r["op"],
            r["shape"],
            f"{r['measured_s'] * 1e3:.2f}",
            f"{r['before_s'] * 1e3:.2f}",
            f"{r['after_s'] * 1e3:.2f}",
        ]
        for r in fit.rows
    ]
    print_table(
        f"Analytic vs measured per op on {fit.device.id}",
        ["op", "shape", "measured ms", "before ms", "after ms"],
        rows,
    )
    say(
        f"mean |error| before {fit.error_before_frac:.1%}, after {fit.error_after_frac:.1%}; "
        f"wrote {shown(target)}"
    )


def register(group: click.Group) -> None:
    group.add_command(profile_cmd)
    group.add_command(calibrate_cmd)
