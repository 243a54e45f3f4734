"""``workbench collective``: one collective priced as NCCL's tuning model would run it."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import click
from workbench_cli._common import echo_json, say
from workbench_cli._types import count

from workbench.specs import limits as L

UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
MAX_BYTES = 2**50
"""1 PiB: far beyond any one collective's buffer."""


def parse_bytes(text: str) -> int:
    """``1GiB``, ``512 MiB``, ``4096``, ``1.5GB`` -> bytes (GiB = 1024^3, GB = 10^9).

    Raises click.BadParameter naming the value and the accepted units."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in UNITS and unit != "":
        raise click.BadParameter(
            f"{text!r} is not a byte size; use a number with an optional unit: {', '.join(_unit_names())}",
            param_hint="'--bytes'",
        )
    value = float(match.group(1)) * UNITS[unit or "B"]
    if value > MAX_BYTES:
        raise click.BadParameter(f"{text!r} is more than 1 PiB", param_hint="'--bytes'")
    return round(value)


def _unit_names() -> list[str]:
    return [u if u in ("B", "KB", "MB", "GB", "TB") else u[:-2] + "iB" for u in UNITS]


def parse_group(text: str, stride: int | None, devices_per_node: int) -> tuple[int, int]:
    """``8x16`` (8 ranks on each of 16 nodes) -> (128, 1); ``1x16`` (one per node) -> (16, devices_per_node);
    a plain count ``16`` -> (16, stride or 1). Other ``KxM`` shapes are not one strided group: refused
    (click.BadParameter), as is --stride with a ``KxM`` group."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*", text)
    if match is None or int(match.group(1)) < 1 or (match.group(2) is not None and int(match.group(2)) < 1):
        raise click.BadParameter(
            f"{text!r} is not a group; use RANKS_PER_NODE x NODES (e.g. 8x16) or a rank count (e.g. 16)",
            param_hint="'--group'",
        )
    per_node, nodes = int(match.group(1)), match.group(2)
    if nodes is None:
        return per_node, stride or 1
    if stride is not None:
        raise click.BadParameter("give --stride only with a plain rank count", param_hint="'--stride'")
    if per_node == 1:
        return int(nodes), devices_per_node
    if per_node != devices_per_node and int(nodes) > 1:
        raise click.BadParameter(
            f"{text!r}: {per_node} ranks on each of {nodes} nodes of {devices_per_node} devices is not one "
            f"strided group; use 1x{nodes}, {devices_per_node}x{nodes}, or a count with --stride",
            param_hint="'--group'",
        )
    return per_node * int(nodes), 1


@click.command("collective")
@click.option("--cluster", required=True, help="Cluster preset id or TOML path.")
@click.option(
    "--nodes", type=count(L.MAX_NODES), default=None, help="Number of nodes (default: the preset's)."
)
@click.option("--op", type=click.Choice(OPS), default="all_reduce", show_default=True)
@click.option("--group", "group_text", default=None, help="RANKS_PER_NODE x NODES (8x16) or a rank count.")
@click.option("--stride", type=count(L.MAX_DEVICES), default=None, help="Rank distance with a plain count.")
@click.option("--bytes", "bytes_text", required=True, help="Buffer size: 1GiB, 256MiB, 4096, 1GB ...")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def collective_cmd(
    cluster: str,
    nodes: int | None,
    op: str,
    group_text: str | None,
    stride: int | None,
    bytes_text: str,
    as_json: bool,
) -> None:
    """Time of one collective, with the algorithm and protocol NCCL would pick, and nccl-tests' algbw/busbw."""
    from workbench.cost.comm import collective
    from workbench.presets.catalog import load_cluster

    payload = parse_bytes(bytes_text)
    spec = load_cluster(cluster, num_nodes=nodes)
    n, step = parse_group(group_text or str(spec.num_devices), stride, spec.devices_per_node)
    if (n - 1) * step + 1 > spec.num_devices:
        raise click.BadParameter(
            f"{n} ranks {step} apart need {(n - 1) * step + 1} devices; the cluster has {spec.num_devices}",
            param_hint="'--group'",
        )
    r = collective(spec, op, payload, n, step)
    if n == 1:  # nothing to exchange: the time is 0 and a bandwidth is undefined (JSON null, n/a here)
        r = replace(r, seconds=0.0, algbw_bytes_per_s=math.nan, busbw_bytes_per_s=math.nan)
    if as_json:
        echo_json(
            {
                "cluster": spec.id,
                "op": op,
                "bytes": payload,
                "ranks": n,
                "stride": step,
                "time_s": r.seconds,
                "algorithm": r.algorithm,
                "protocol": r.protocol,
                "algbw_bytes_per_s": _finite(r.algbw_bytes_per_s),
                "busbw_bytes_per_s": _finite(r.busbw_bytes_per_s),
            }
        )
        return
    say(f"{op} of {payload:,} B over {n} ranks (stride {step}) on {spec.num_nodes} x {spec.id}")
    if n == 1:
        say("one rank: no data moves, time 0 us; algbw and busbw are undefined (n/a)")
        return
    say(
        f"time {r.seconds * 1e6:,.1f} us   algorithm {r.algorithm}   protocol {r.protocol}   "
        f"algbw {r.algbw_bytes_per_s / 1e9:,.1f} GB/s   busbw {r.busbw_bytes_per_s / 1e9:,.1f} GB/s"
    )


def _finite(x: float) -> float | None:
    return x if x == x and abs(x) != float("inf") else None


def register(group: click.Group) -> None:
    group.add_command(collective_cmd)
