"""``workbench models|devices|clusters`` and ``workbench show model``: what the catalog holds."""

from __future__ import annotations

from typing import Any

import click
from workbench_cli._common import GIB, echo_json, fmt_count, print_table, say
from workbench_cli._types import count

from workbench.presets import catalog
from workbench.specs.hardware import BYTES_PER_ELEMENT, DType
from workbench.specs.limits import MAX_SEQ_LEN

_JSON = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


@click.command("models")
@_JSON
def models_cmd(as_json: bool) -> None:
    """List the model presets (and the architecture families the config readers know)."""
    from workbench.presets.hf_config import family_of, supported_list_markdown

    rows: list[dict[str, Any]] = []
    for name in catalog.preset_names("model"):
        reading = catalog.read_model(name)
        m = reading.spec
        rows.append(
            {
                "id": name,
                "family": family_of(reading.architecture),
                "architecture": "moe" if m.is_moe else "dense",
                "layers": m.num_layers,
                "hidden_size": m.hidden_size,
                "parameters": m.total_parameters(),
                "active_parameters": m.active_parameters(),
            }
        )
    if as_json:
        echo_json(rows)
        return
    print_table(
        "Model presets",
        ["id", "family", "kind", "layers", "hidden", "params", "active"],
        [
            [
                r["id"],
                r["family"],
                r["architecture"],
                r["layers"],
                r["hidden_size"],
                fmt_count(r["parameters"]),
                fmt_count(r["active_parameters"]),
            ]
            for r in rows
        ],
    )
    say("Config readers: " + supported_list_markdown().replace("`", "") + "; any other architecture")
    say("transformers knows is derived from its meta-device model with the [hf] extra (docs/models.md).")


def _kernels_cell(table: dict[str, Any] | None) -> str:
    if table is None:
        return "-"
    return f"measured {table['date']}" if table["measured"] else "published"


@click.command("devices")
@_JSON
def devices_cmd(as_json: bool) -> None:
    """List the device presets (dense peaks) and where each one's kernel table comes from."""
    from workbench.presets.kernels import device_kernel_tables

    tables = device_kernel_tables()
    rows: list[dict[str, Any]] = []
    for name in catalog.preset_names("device"):
        d = catalog.load_device(name)
        table = tables.get(name)
        rows.append(
            {
                "id": name,
                "name": d.name,
                "hbm_bytes": d.hbm_bytes,
                "hbm_bytes_per_s": d.hbm_bytes_per_s,
                "peak_flop_per_s": {k.value: v for k, v in d.peak_flop_per_s.items()},
                "kernel_table": None
                if table is None
                else {
                    "measured": table.measured,
                    "date": table.provenance.get("date", "")[:10] if table.measured else None,
                    "source": table.source,
                },
            }
        )
    if as_json:
        echo_json(rows)
        return
    print_table(
        "Device presets (dense peaks; kernel tables measured here or from published benchmarks)",
        ["id", "name", "HBM", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "kernels"],
        [
            [
                r["id"],
                r["name"],
                f"{r['hbm_bytes'] / GIB:.0f} GiB",
                f"{r['hbm_bytes_per_s'] / 1e12:.2f}",
                f"{r['peak_flop_per_s'].get('bf16', 0) / 1e12:.0f}",
                f"{r['peak_flop_per_s']['fp8'] / 1e12:.0f}" if "fp8" in r["peak_flop_per_s"] else "-",
                _kernels_cell(r["kernel_table"]),
            ]
            for r in rows
        ],
    )


@click.command("clusters")
@_JSON
def clusters_cmd(as_json: bool) -> None:
    """List the cluster presets and their network levels."""
    rows: list[dict[str, Any]] = []
    for name in catalog.preset_names("cluster"):
        c = catalog.load_cluster(name)
        rows.append(
            {
                "id": name,
                "name": c.name,
                "device": c.device.id,
                "devices_per_node": c.devices_per_node,
                "levels": [
                    {
                        "name": lv.name,
                        "span": lv.span,
                        "bytes_per_s": lv.bytes_per_s,
                        "latency_s": lv.latency_s,
                    }
                    for lv in c.levels
                ],
            }
        )
    if as_json:
        echo_json(rows)
        return
    print_table(
        "Cluster presets",
        ["id", "device", "per node", "levels (GB/s per device, one way; us)"],
        [
            [
                r["id"],
                r["device"],
                r["devices_per_node"],
                "; ".join(
                    f"{lv['name']} {lv['bytes_per_s'] / 1e9:.0f} GB/s {lv['latency_s'] * 1e6:.1f} us"
                    + (f" x{lv['span']}" if lv["span"] else "")
                    for lv in r["levels"]
                ),
            ]
            for r in rows
        ],
    )


def model_summary(name_or_path: str, seq_len: int) -> dict[str, Any]:
    reading = catalog.read_model(name_or_path)
    m = reading.spec
    total = m.total_parameters()
    return {
        "name": m.name,
        "architecture": reading.architecture,
        "spec": m.to_dict(),
        "parameters": total,
        "active_parameters": m.active_parameters(),
        "active_parameters_without_embedding": m.non_embedding_active_parameters(),
        "encoder_parameters": reading.encoder_parameters,
        "notes": list(reading.notes),
        "embedding_parameters": m.embedding_parameters(),
        "seq_len": seq_len,
        "model_flop_per_token": m.model_flop_per_token(seq_len),
        "weights_bytes": {d.value: total * BYTES_PER_ELEMENT[d] for d in DType},
    }


@click.group("show")
def show_group() -> None:
    """Show one preset or file in detail."""


@show_group.command("model")
@click.argument("name_or_path")
@click.option(
    "--seq-len",
    type=count(MAX_SEQ_LEN),
    default=4096,
    show_default=True,
    help="Sequence length for the attention part of the FLOPs per token.",
)
@_JSON
def show_model(name_or_path: str, seq_len: int, as_json: bool) -> None:
    """Parameters, active parameters, FLOPs per token and weight memory of a model preset or config.json."""
    s = model_summary(name_or_path, seq_len)
    if as_json:
        echo_json(s)
        return
    spec = s["spec"]
    assert isinstance(spec, dict)
    rows: list[list[object]] = [
        [k, v] for k, v in spec.items() if v not in (0, False) or k == "tied_embeddings"
    ]
    rows += [
        ["parameters", fmt_count(s["parameters"])],
        ["active parameters", fmt_count(s["active_parameters"])],
        ["active without input embedding", fmt_count(s["active_parameters_without_embedding"])],
    ]
    if s["encoder_parameters"]:
        rows += [
            ["vision tower + projector (not priced)", fmt_count(s["encoder_parameters"])],
            ["parameters with the vision tower", fmt_count(s["parameters"] + s["encoder_parameters"])],
        ]
    rows += [["note", note] for note in s["notes"]]
    rows += [
        [f"model FLOPs per token (seq {seq_len})", f"{s['model_flop_per_token']:.4g} FLOP"],
    ]
    weights = s["weights_bytes"]
    assert isinstance(weights, dict)
    rows += [[f"weights in {k}", f"{v / GIB:.1f} GiB"] for k, v in weights.items()]
    print_table(f"Model {s['name']}", ["field", "value"], rows)


@click.command("frameworks")
@click.argument("framework_id", required=False)
@_JSON
def frameworks_cmd(framework_id: str | None, as_json: bool) -> None:
    """List the framework profiles (how a software stack runs a plan), or show one with every field's
    value, the fitted value in use and its source."""
    from dataclasses import asdict

    from workbench.presets.calibration import load_calibration
    from workbench.presets.frameworks import all_frameworks, load_framework

    if framework_id is None:
        rows = [p.describe() | {"aliases": list(p.aliases)} for p in all_frameworks()]
        if as_json:
            echo_json(rows)
            return
        keys = [
            "id",
            "name",
            "schedules",
            "zero_stages",
            "features",
            "attention",
            "elementwise",
            "pipeline",
            "fitted",
        ]
        print_table("Framework profiles", keys, [[r[k] for k in keys] for r in rows])
        return
    prof = load_framework(framework_id)
    used = load_calibration(framework=prof).framework
    fields = {k: v for k, v in asdict(prof).items() if k not in ("sources", "description", "aliases")}
    if as_json:
        echo_json({"profile": asdict(prof), "in_use": asdict(used)})
        return
    say(f"{prof.name}: {prof.description}")
    print_table(
        f"Framework profile {prof.id}",
        ["field", "value", "in use (fitted)", "source"],
        [
            [k, str(v), str(getattr(used, k)) if k in prof.fitted else "", prof.sources.get(k, "")]
            for k, v in fields.items()
        ],
    )


def register(group: click.Group) -> None:
    for cmd in (models_cmd, devices_cmd, clusters_cmd, frameworks_cmd, show_group):
        group.add_command(cmd)
