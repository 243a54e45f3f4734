"""Measured profiles as data: the op table schema, the JSON manifest, lookup by device and shape.

A profile is a folder with ``manifest.json`` and ``ops.parquet`` (and optionally ``collectives.parquet``),
written by ``workbench profile`` (:mod:`workbench_backends.torch_profile`). One row of ``ops.parquet`` is one op
kind of one rank at one shard shape, for one micro-batch (``OP_COLUMNS`` gives the units). Manifest keys:
``schema_version``, ``model`` (the ``ModelSpec`` as a dict, possibly shrunk), ``base_model``, ``overrides``
(``num_layers``/``hidden_size`` of a shrunk variant, {} otherwise), ``device_kind`` (cpu|cuda), ``device_id``
(catalog preset id, or ``host-cpu``), ``device_name``, ``device_peak_flop_per_s`` and
``device_memory_bytes_per_s`` (micro-benchmarked on that device), ``optimizer_s_per_parameter`` and
``grad_accumulate_s_per_parameter`` (seconds per parameter of an AdamW step and of adding a micro-batch's
gradients into those already there, probed on a whole model: ``step_probe_layers``, ``step_probe_parameters``;
a profile without the second prices accumulation 0), ``dtype``, ``torch_version``,
``cuda_version`` (null on CPU), ``host``, ``created_at`` (ISO 8601, UTC), ``num_threads``, ``warmup``,
``repeats``, ``shapes`` (every shape measured), ``collective_fit`` (per level: level, num_ranks, latency_s,
bytes_per_s, backend) and ``columns`` (column -> unit).

Lookup (``Profile.op_cost``) never crosses devices or model shapes. A shape that was not measured is
interpolated linearly in the micro-batch's token count between the two nearest measured rows of the same
op, tp, cp, ep and sequence length (compute and activations of a layer are affine in the batch at a fixed
sequence length); beyond the measured range the nearest row is scaled by the token ratio. Either way the
result carries ``source`` ``interpolated``/``extrapolated`` and a note. A missing (tp, cp, ep, seq_len)
raises ``LookupError`` naming the ``workbench profile`` command that records it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.specs.files import check_input_file
from workbench.specs.limits import MAX_PROFILE_ROWS, check_real, shown
from workbench.specs.model import ModelSpec

if TYPE_CHECKING:
    import polars as pl

    from workbench.specs.hardware import ClusterSpec

SCHEMA_VERSION = 1
MANIFEST_NAME, OPS_NAME, COLLECTIVES_NAME = "manifest.json", "ops.parquet", "collectives.parquet"
OP_KINDS: tuple[str, ...] = ("embedding", "layer", "moe_layer", "head")
"""embedding: token embedding; layer: dense decoder block; moe_layer: MoE block; head: final norm, LM head, loss."""

OP_COLUMNS: dict[str, str] = {
    "op": "one of OP_KINDS",
    "tp": "count",
    "cp": "count",
    "ep": "count",
    "micro_batch_size": "sequences",
    "seq_len": "tokens (whole sequence; this rank holds seq_len / cp)",
    "num_tokens": "tokens on this rank per micro-batch",
    "forward_s": "s",
    "backward_s": "s (fused)",
    "backward_input_s": "s",
    "backward_weight_s": "s",
    "forward_spread_frac": "IQR / median",
    "backward_spread_frac": "IQR / median",
    "backward_input_spread_frac": "IQR / median",
    "backward_weight_spread_frac": "IQR / median",
    "activation_bytes": "bytes saved for backward",
    "peak_allocated_bytes": "bytes (GPU only, else null)",
    "num_parameters": "count (this rank)",
    "num_repeats": "count",
}
COLLECTIVE_COLUMNS: dict[str, str] = {
    "collective": "all_reduce|all_gather|reduce_scatter|all_to_all|send_recv",
    "num_ranks": "count",
    "message_bytes": "bytes per rank",
    "time_s": "s (median)",
    "spread_frac": "IQR / median",
    "level": "network level name",
}
# Layer shape fields that must match; the name, the layer counts and the routing-group limits (which change
# where tokens travel, not one device's kernels) do not change a layer's cost.
_SHAPE_EXEMPT = (
    "name",
    "num_layers",
    "num_dense_layers",
    "num_expert_groups",
    "routed_groups_per_token",
    "rope_scaling",
)
"""Fields that leave one layer's measured cost unchanged: the name, the layer counts, the routing groups, and
the RoPE scaling (it changes the rotary frequencies, not the kernels that apply them)."""


def shape_key(model: ModelSpec | dict[str, Any]) -> dict[str, Any]:
    """The fields of a model that determine one layer's cost (everything but name and layer counts). A stored
    manifest written before a field existed reads as that field's default (e.g. no sliding window)."""
    if isinstance(model, ModelSpec):
        data = model.to_dict()
    else:
        defaults = {f.name: f.default for f in fields(ModelSpec) if isinstance(f.default, int | float | str)}
        data = defaults | dict(model)
    return {k: v for k, v in data.items() if k not in _SHAPE_EXEMPT}


def record_command(
    model: ModelSpec, *, device: str, dtype: str, tp: int, micro_batch_size: int, seq_len: int
) -> str:
    """The ``workbench profile`` command line that would record a missing shape."""
    return (
        f"workbench profile --model {model.name} --device {device} --dtype {dtype} --tp {tp} "
        f"--micro-batch {micro_batch_size} --seq-len {seq_len} --out profiles/measured/<name>"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class OpCost:
    """One op on one rank for one micro-batch, from a profile: seconds and bytes."""

    forward_s: float
    backward_s: float
    backward_input_s: float
    backward_weight_s: float
    activation_bytes: float
    source: str = "measured"
    """measured, interpolated or extrapolated."""
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A loaded profile: the manifest dict, the ops table and the collectives table (or None)."""

    path: Path
    manifest: dict[str, Any]
    ops: pl.DataFrame
    collectives: pl.DataFrame | None = None

    @property
    def device_id(self) -> str:
        return str(self.manifest["device_id"])

    @property
    def model(self) -> ModelSpec:
        return model_from_manifest(self.manifest)

    def matches(self, model: ModelSpec, device_id: str, dtype: str) -> bool:
        """Same device id, dtype and layer shape (layer counts may differ)."""
        return (
            self.device_id == device_id
            and self.manifest["dtype"] == str(dtype)
            and shape_key(self.manifest["model"]) == shape_key(model)
        )

    def op_cost(self, op: str, *, tp: int, cp: int, ep: int, micro_batch_size: int, seq_len: int) -> OpCost:
        """Cost of ``op`` at a shape: measured, else interpolated/extrapolated in tokens (flagged).

        Raises LookupError when no row has the same op, tp, cp, ep and seq_len.
        """
        import polars as pl

        rows = self.ops.filter(
            (pl.col("op") == op)
            & (pl.col("tp") == tp)
            & (pl.col("cp") == cp)
            & (pl.col("ep") == ep)
            & (pl.col("seq_len") == seq_len)
        ).sort("micro_batch_size")
        if rows.is_empty():
            model = self.model
            raise LookupError(
                f"profile {self.path} has no {op} rows for tp={tp} cp={cp} ep={ep} seq_len={seq_len} on "
                f"{self.device_id}; record them with: "
                + record_command(
                    model,
                    device=self.manifest["device_kind"],
                    dtype=self.manifest["dtype"],
                    tp=tp,
                    micro_batch_size=micro_batch_size,
                    seq_len=seq_len,
                )
            )
        return _interpolate(rows, micro_batch_size)


_COST_COLS = ("forward_s", "backward_s", "backward_input_s", "backward_weight_s", "activation_bytes")


def _interpolate(rows: pl.DataFrame, micro_batch_size: int) -> OpCost:
    sizes = rows["micro_batch_size"].to_list()
    records = rows.select(_COST_COLS).to_dicts()
    if micro_batch_size in sizes:
        return OpCost(**records[sizes.index(micro_batch_size)])
    below = [i for i, b in enumerate(sizes) if b < micro_batch_size]
    above = [i for i, b in enumerate(sizes) if b > micro_batch_size]
    if below and above:
        lo, hi = below[-1], above[0]
        w = (micro_batch_size - sizes[lo]) / (sizes[hi] - sizes[lo])
        values = {k: (1 - w) * records[lo][k] + w * records[hi][k] for k in _COST_COLS}
        note = f"micro_batch_size={micro_batch_size} interpolated between {sizes[lo]} and {sizes[hi]}"
        return OpCost(**values, source="interpolated", note=note)
    near = below[-1] if below else above[0]
    scale = micro_batch_size / sizes[near]
    values = {k: records[near][k] * scale for k in _COST_COLS}
    note = f"micro_batch_size={micro_batch_size} extrapolated from {sizes[near]} (scaled by tokens)"
    return OpCost(**values, source="extrapolated", note=note)


def model_from_manifest(manifest: dict[str, Any]) -> ModelSpec:
    """The (possibly shrunk) ``ModelSpec`` a profile was measured for."""
    names = {f.name for f in fields(ModelSpec)}
    return ModelSpec(**{k: v for k, v in manifest["model"].items() if k in names})


def write_profile(
    folder: str | Path,
    manifest: dict[str, Any],
    ops: pl.DataFrame,
    collectives: pl.DataFrame | None = None,
    *,
    force: bool = False,
) -> Path:
    """Write ``manifest.json``, ``ops.parquet`` (and ``collectives.parquet``); refuses to overwrite unless force."""
    out = Path(folder)
    target = out / MANIFEST_NAME
    if target.exists() and not force:
        raise FileExistsError(f"{target} exists; pass --force to overwrite it")
    missing = [c for c in OP_COLUMNS if c not in ops.columns]
    if missing:
        raise ValueError(f"ops table lacks column(s) {missing}; required: {list(OP_COLUMNS)}")
    out.mkdir(parents=True, exist_ok=True)
    ops.select(list(OP_COLUMNS)).write_parquet(out / OPS_NAME)
    data = {**manifest, "schema_version": SCHEMA_VERSION, "table": OPS_NAME, "columns": OP_COLUMNS}
    if collectives is not None:
        collectives.write_parquet(out / COLLECTIVES_NAME)
        data["collectives"] = COLLECTIVES_NAME
    target.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return out


_MANIFEST_STRINGS = ("device_id", "device_kind", "device_name", "dtype")
_MANIFEST_RATES = ("device_peak_flop_per_s", "device_memory_bytes_per_s")
_KEY_COLUMNS = ("tp", "cp", "ep", "micro_batch_size", "seq_len")
"""Integer columns of ``ops.parquet`` a lookup filters on (each >= 1)."""


def _check_manifest(manifest: Any, where: Path) -> dict[str, Any]:
    """The parsed manifest if it holds what the readers use, with the types they need; ValueError naming the
    file, the key and the value otherwise (the model is checked by building its ``ModelSpec``)."""
    if not isinstance(manifest, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(manifest).__name__}")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"{where}: schema_version {shown(manifest.get('schema_version'))}; this workbench reads {SCHEMA_VERSION}"
        )
    for key in _MANIFEST_STRINGS:
        if not isinstance(manifest.get(key), str) or not manifest[key]:
            raise ValueError(f"{where}: {key} must be a non-empty string, got {shown(manifest.get(key))}")
    for key in _MANIFEST_RATES:
        check_real(str(where), key, manifest.get(key))
    for key in ("device_memory_bytes", "optimizer_s_per_parameter", "grad_accumulate_s_per_parameter"):
        if key in manifest:
            check_real(str(where), key, manifest[key], min_open=key == "device_memory_bytes")
    fits = manifest.get("collective_fit", [])
    if not isinstance(fits, list) or any(
        not isinstance(f, dict) or not isinstance(f.get("level"), str) for f in fits
    ):
        raise ValueError(
            f"{where}: collective_fit must be a list of tables with a level name, got {shown(fits)}"
        )
    for fit in fits:
        for key in ("bytes_per_s", "latency_s"):
            if key in fit:
                check_real(
                    str(where),
                    f"collective_fit {fit['level']!r} {key}",
                    fit[key],
                    min_open=key != "latency_s",
                )
    if not isinstance(manifest.get("model"), dict):
        raise ValueError(
            f"{where}: model must be a JSON object of ModelSpec fields, got {shown(manifest.get('model'))}"
        )
    try:
        model_from_manifest(manifest)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: model: {' '.join(str(exc).split())}") from None
    return manifest


def _read_parquet(path: Path, what: str) -> pl.DataFrame:
    """A Parquet table (a regular file within ``limits.MAX_INPUT_FILE_BYTES`` holding at most
    ``limits.MAX_PROFILE_ROWS`` rows, counted from its footer before anything is decoded: a small compressed
    file may hold a huge table); a file polars cannot read is a ValueError naming it."""
    import polars as pl

    check_input_file(path, what)
    num_rows = _polars(path, what, lambda: pl.scan_parquet(path).select(pl.len()).collect().item())
    if num_rows > MAX_PROFILE_ROWS:
        raise ValueError(
            f"{path}: {num_rows:,} rows; at most {MAX_PROFILE_ROWS:,} (MAX_PROFILE_ROWS in workbench/specs/limits.py)"
        )
    frame: pl.DataFrame = _polars(path, what, lambda: pl.read_parquet(path))
    return frame


def _polars(path: Path, what: str, read: Any) -> Any:
    """``read()``, with any failure of polars on a corrupt file turned into a ValueError naming ``path``."""
    try:
        return read()
    except Exception as exc:  # polars raises ComputeError, OSError, ... for a corrupt file
        reason = " ".join(str(exc).split())[:200]
        raise ValueError(f"{path}: not a readable Parquet {what} ({type(exc).__name__}: {reason})") from None
    except BaseException as exc:  # a panic inside polars' Rust code surfaces as pyo3's PanicException
        if type(exc).__name__ != "PanicException":
            raise
        raise ValueError(
            f"{path}: not a readable Parquet {what} (the reader failed on its content)"
        ) from None


def _check_ops(ops: pl.DataFrame, where: Path) -> pl.DataFrame:
    """``ops`` if it has the columns a lookup reads, of the right types and values, and at most
    ``limits.MAX_PROFILE_ROWS`` rows; ValueError naming the file, the column and a bad value otherwise."""
    import polars as pl

    if ops.height > MAX_PROFILE_ROWS:
        raise ValueError(
            f"{where}: {ops.height:,} rows; at most {MAX_PROFILE_ROWS:,} (MAX_PROFILE_ROWS in workbench/specs/limits.py)"
        )
    missing = [c for c in ("op", *_KEY_COLUMNS, *_COST_COLS) if c not in ops.columns]
    if missing:
        raise ValueError(
            f"{where}: missing column(s) {', '.join(missing)}; a profile table has {', '.join(OP_COLUMNS)}"
        )
    if ops.schema["op"] != pl.String:
        raise ValueError(f"{where}: column op must hold text ({', '.join(OP_KINDS)}), got {ops.schema['op']}")
    for col, minimum in [(c, 1) for c in _KEY_COLUMNS] + [(c, 0) for c in _COST_COLS]:
        dtype = ops.schema[col]
        integer = col in _KEY_COLUMNS
        if not (dtype.is_integer() if integer else dtype.is_numeric()):
            kind = "integers" if integer else "numbers"
            raise ValueError(f"{where}: column {col} must hold {kind}, got {dtype}")
        values = ops[col].cast(pl.Float64)
        bad = values.is_null() | values.is_nan() | values.is_infinite() | (values < minimum)
        if bad.any():
            row = int(bad.arg_max() or 0)
            raise ValueError(
                f"{where}: row {row}: column {col} must be a finite number >= {minimum}, got {shown(ops[col][row])}"
            )
    return ops


def read_profile(folder: str | Path) -> Profile:
    """Load a profile folder. Raises ValueError naming the file for a missing or corrupt manifest, an unknown
    schema version, a manifest key of the wrong type, or an ``ops.parquet`` (``collectives.parquet``) that
    cannot be read or lacks the columns and values a lookup needs."""
    path = Path(folder)
    manifest_path = path / MANIFEST_NAME
    if not manifest_path.is_file():
        raise ValueError(f"{path}: not a profile folder (no {MANIFEST_NAME})")
    check_input_file(manifest_path, "profile manifest")
    try:
        manifest = json.loads(manifest_path.read_text())
    except RecursionError:
        raise ValueError(f"{manifest_path}: not valid JSON (nested too deeply for the parser)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        raise ValueError(f"{manifest_path}: not valid JSON ({' '.join(str(exc).split())[:200]})") from None
    _check_manifest(manifest, manifest_path)
    ops = _check_ops(_read_parquet(path / OPS_NAME, "op table"), path / OPS_NAME)
    coll = path / COLLECTIVES_NAME
    return Profile(
        path=path,
        manifest=manifest,
        ops=ops,
        collectives=_read_parquet(coll, "collectives table") if coll.exists() else None,
    )


def find_profile(root: str | Path, model: ModelSpec, device_id: str, dtype: str) -> Profile:
    """The profile under ``root`` (a profile folder or a folder of them) for this layer shape, device and
    dtype. Raises LookupError naming what was found and the command that records the missing profile."""
    base = Path(root)
    if not base.is_dir():
        raise LookupError(f"profile folder {base} does not exist")
    folders = (
        [base]
        if (base / MANIFEST_NAME).is_file()
        else sorted(p.parent for p in base.glob(f"*/{MANIFEST_NAME}"))
    )
    profiles = [read_profile(f) for f in folders]
    for prof in profiles:
        if prof.matches(model, device_id, dtype):
            return prof
    seen = (
        "; ".join(
            f"{p.path.name}: {p.manifest['model'].get('name')} on {p.device_id} {p.manifest['dtype']}"
            for p in profiles
        )
        or "none"
    )
    kind = "cpu" if device_id.startswith("host-cpu") else "cuda"
    raise LookupError(
        f"no profile under {base} for model {model.name!r} (this layer shape) on device {device_id!r} in {dtype} "
        f"(found: {seen}); record one with: workbench profile --model {model.name} --device {kind} "
        f"--dtype {dtype} --out {base / model.name}"
    )


HOST_LINK_BYTES_PER_S = 5e9
"""Placeholder loopback bandwidth between processes on one host when no collective was measured (flagged
by the backend's notes): shared-memory copies on a server CPU move a few GB/s per process (measured by
``workbench profile --collectives`` when it matters)."""


def host_cluster(profile: Profile, *, num_devices: int = 1) -> ClusterSpec:
    """A one-node cluster of the profile's device (for a CPU profile: this host, peak and bandwidth as
    micro-benchmarked when the profile was recorded), one ``host`` network level."""
    from workbench.specs.hardware import ClusterSpec, DeviceSpec, NetworkLevel

    m = profile.manifest
    device = DeviceSpec(
        id=m["device_id"],
        name=m["device_name"],
        peak_flop_per_s={m["dtype"]: m["device_peak_flop_per_s"]},
        hbm_bytes=float(m.get("device_memory_bytes", 64 * 2**30)),
        hbm_bytes_per_s=m["device_memory_bytes_per_s"],
        hbm_efficiency_frac=1.0,
        source=f"micro-benchmarked by workbench profile ({profile.path})",
    )
    fit = {f["level"]: f for f in m.get("collective_fit", [])}.get("host", {})
    level = NetworkLevel(
        name="host",
        bytes_per_s=fit.get("bytes_per_s", HOST_LINK_BYTES_PER_S),
        latency_s=fit.get("latency_s", 20e-6),
    )
    return ClusterSpec(
        id=f"{m['device_id']}-x{num_devices}",
        name=f"{m['device_name']} x{num_devices}",
        device=device,
        devices_per_node=num_devices,
        levels=(level,),
    )
