"""``workbench microbench``: measure this device's kernel efficiencies into a kernel table folder.

The folder holds ``kernels.toml`` (a ``KernelTable``, :mod:`workbench.presets.kernels`), ``gemm.csv``,
``attention.csv`` and ``memory.csv`` (the raw measurements). The measuring is :mod:`workbench_backends.microbench` (torch is
imported from there); this module only parses and prints.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click
from workbench_cli._common import Output, check_outputs, echo_json, print_table, say, shown, write_folder
from workbench_cli._types import count

from workbench.specs import limits as L

if TYPE_CHECKING:
    from workbench_backends.microbench import MicrobenchResult


def _command_line(ctx: click.Context) -> str:
    """The command as typed, rebuilt from the parsed options (stable under CliRunner and the console script)."""
    parts = ["workbench", "microbench"]
    for param in ctx.command.params:
        value, flag = ctx.params.get(param.name or ""), param.opts[0]
        if value is True:
            parts.append(flag)
        elif value not in (None, False):
            parts += [flag, str(value)]
    return shlex.join(parts)


def _output(out: Path) -> Output:
    """``--out``: a new or empty folder, or the folder of an earlier microbench (its kernels.toml)."""
    from workbench_backends.microbench import ATTENTION_CSV, GEMM_CSV, MEMORY_CSV

    from workbench.presets.kernels import TABLE_FILE

    files = (TABLE_FILE, GEMM_CSV, ATTENTION_CSV, MEMORY_CSV)
    return Output("--out", out, folder=True, files=files, marker=TABLE_FILE)


@click.command("microbench")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "--out",
    "out_dir",
    required=True,
    help="Folder to write kernels.toml, gemm.csv, attention.csv, memory.csv.",
)
@click.option(
    "--device-id", default=None, help="Device preset id (default: host-cpu, or the preset matching the GPU)."
)
@click.option("--quick", is_flag=True, help="Fewer sizes (a first look; the tests use it).")
@click.option(
    "--repeats",
    type=count(L.MAX_TIMING_REPEATS),
    default=5,
    show_default=True,
    help="Timed samples per point (median).",
)
@click.option(
    "--warmup",
    type=count(L.MAX_TIMING_REPEATS, minimum=0),
    default=2,
    show_default=True,
    help="Untimed calls before each point.",
)
@click.option(
    "--threads",
    type=count(L.MAX_THREADS),
    default=None,
    help="torch.set_num_threads (default: torch's).",
)
@click.option("--force", is_flag=True, help="Overwrite the files of an earlier microbench in --out.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as one JSON object.")
@click.option("--quiet", is_flag=True, help="No progress lines.")
@click.pass_context
def microbench_cmd(
    ctx: click.Context,
    device: str,
    out_dir: str,
    device_id: str | None,
    quick: bool,
    repeats: int,
    warmup: int,
    threads: int | None,
    force: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Measure GEMM efficiency by size and dtype, causal SDPA attention forward/backward by sequence length
    and head dim, and copy bandwidth on this device; write a kernel table (fractions of the dense peak)."""
    out = Path(out_dir)
    spec = _output(out)
    check_outputs(spec, force=force)
    from rich.console import Console
    from workbench_backends.microbench import require_device, run_microbench, write_microbench

    try:
        require_device(device)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    console = Console(stderr=True)
    result = run_microbench(
        device,
        device_id=device_id,
        quick=quick,
        warmup=warmup,
        repeats=repeats,
        threads=threads,
        command=_command_line(ctx),
        log=None if quiet or as_json else console.log,
    )
    paths = write_folder(
        out, lambda tmp: write_microbench(tmp, result), force=force, marker=spec.marker, owned=spec.files
    )
    if as_json:
        from workbench.presets.kernels import kernel_table_to_dict

        echo_json({**kernel_table_to_dict(result.table), "paths": [str(p) for p in paths]})
        return
    _print(result)
    say(f"wrote {', '.join(shown(p) for p in paths)}")


def _print(result: MicrobenchResult) -> None:
    table = result.table
    rows = [
        [dtype, f"{flop:.3g}", f"{frac:.3f}"] for dtype, points in table.gemm.items() for flop, frac in points
    ]
    print_table(
        f"GEMM on {table.device}: fraction of the dense peak by FLOPs", ["dtype", "flop", "frac"], rows
    )
    rows = [
        [t.family, t.dtype, t.head_dim, int(s), f"{f:.3f}", f"{b:.3f}"]
        for t in table.attention
        for s, f, b in zip(t.seq_len, t.fwd_frac, t.bwd_frac, strict=True)
    ]
    print_table(
        "Causal SDPA attention", ["family", "dtype", "head_dim", "seq_len", "fwd frac", "bwd frac"], rows
    )
    rows = [
        [op, dtype, n, f"{bps / 1e9:.1f}", f"{frac:.2f}"]
        for op, dtype, n, bps, frac in result.memory.select(
            "op", "dtype", "aten_ops", "bytes_per_s", "hbm_frac"
        ).iter_rows()
    ]
    print_table("Memory-bound ops (nominal bytes)", ["op", "dtype", "aten ops", "GB/s", "of HBM"], rows)
    say(
        f"copy {result.hbm_bytes_per_s / 1e9:.1f} GB/s = {table.hbm_frac:.2f} of "
        f"{float(table.provenance['memory_reference_bytes_per_s']) / 1e9:.1f} GB/s"
    )


def register(group: click.Group) -> None:
    group.add_command(microbench_cmd)
