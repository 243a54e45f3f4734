"""Presets by name or path: devices and clusters (TOML), models (Hugging Face ``config.json``).

Preset files live in ``profiles/`` of the checkout (``hardware/``, ``clusters/``, ``models/``), installed as
the package data ``workbench.presets.profiles``; set ``WORKBENCH_PROFILES`` to use another folder. Files are
parsed with ``tomllib`` and ``json`` only (no pickle). Units in preset keys are converted here, once: ``peak_tflops`` (10^12 FLOP/s), ``hbm_GiB``
(2^30 bytes) or ``hbm_GB`` (10^9 bytes), ``hbm_bandwidth_TBps`` (10^12 bytes/s), ``bandwidth_GBps``
(10^9 bytes/s, one direction per device), ``latency_us`` (10^-6 s).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import math
import os
import tomllib
from pathlib import Path
from typing import Any

from workbench.presets.hf_config import ConfigReading, family_of, load_json_object, read_hf_config
from workbench.presets.hf_hub import cached_config, is_hub_id
from workbench.specs.files import check_input_file
from workbench.specs.hardware import (
    ClusterSpec,
    DeviceSpec,
    DType,
    NetworkLevel,
    StorageSpec,
    efficiency_points,
)
from workbench.specs.limits import check_real, shown
from workbench.specs.model import ModelSpec
from workbench.specs.price import PRICE_KINDS, PriceSpec, check_iso_date

KINDS = {"model": ("models", ".json"), "device": ("hardware", ".toml"), "cluster": ("clusters", ".toml")}


PROFILES_PACKAGE = "workbench.presets.profiles"
"""The package whose data files are the presets (the checkout's ``profiles/``, mapped in pyproject.toml)."""


def profiles_dir() -> Path:
    """The presets folder: ``$WORKBENCH_PROFILES`` if set, else the folder of the package data
    :data:`PROFILES_PACKAGE` (the checkout's ``profiles/`` in an editable install, the installed copy from a
    wheel), else ``profiles/`` beside the source tree (a checkout that was never installed)."""
    env = os.environ.get("WORKBENCH_PROFILES")
    if env:
        return Path(env)
    spec = importlib.util.find_spec(PROFILES_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[2] / "profiles"


def preset_names(kind: str) -> list[str]:
    """Sorted preset ids of ``kind`` ('model', 'device' or 'cluster')."""
    folder, suffix = KINDS[kind]
    return sorted(p.stem for p in (profiles_dir() / folder).glob(f"*{suffix}"))


def resolve(kind: str, name_or_path: str | Path) -> Path:
    """Path of a preset id or an existing file; unknown ids raise ValueError with the closest names."""
    path = Path(name_or_path)
    looks_like_path = path.suffix in (".json", ".toml") or len(path.parts) > 1
    if path.is_file():
        return path
    folder, suffix = KINDS[kind]
    candidate = profiles_dir() / folder / f"{name_or_path}{suffix}"
    if candidate.is_file():
        return candidate
    if kind == "model" and is_hub_id(str(name_or_path)) and not path.exists():
        return cached_config(str(name_or_path))
    if looks_like_path or path.exists():  # a directory or a FIFO says so (stat only, never opened)
        check_input_file(path, f"{kind} file")
    names = preset_names(kind)
    close = difflib.get_close_matches(str(name_or_path), names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown {kind} {str(name_or_path)!r}{hint} (known: {', '.join(names)})")


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A model preset id (``llama-3.1-70b``), the path of a Hugging Face ``config.json``, or a hub id
    (``org/name``) whose ``config.json`` is in the local Hugging Face cache (:mod:`workbench.presets.hf_hub`)."""
    return read_model(name_or_path).spec


def read_model(name_or_path: str | Path) -> ConfigReading:
    """What :func:`load_model` reads, with the notes (defaults applied, derivation) and the parameters of a
    vision tower beside the decoder."""
    path = resolve("model", name_or_path)
    if path.stem != "config":
        return read_hf_config(path, name=path.stem)
    hub = is_hub_id(str(name_or_path)) and not Path(name_or_path).exists()
    return read_hf_config(path, name=str(name_or_path).split("/")[-1] if hub else None)


def model_choices() -> dict[str, str]:
    """The model presets as a picker shows them: label ``"<family> · <id>"`` -> preset id, grouped by
    architecture family (``hf_config.family_of`` of each preset's ``architectures``; the families in
    alphabetical order, the ids in ``preset_names`` order inside each). Each preset file is read once per
    modification time (the first call reads them all: about 0.1 s)."""
    names = preset_names("model")
    family = {}
    for name in names:
        path = resolve("model", name)
        family[name] = _family(name, str(path), path.stat().st_mtime_ns)
    ordered = sorted(names, key=lambda name: (family[name].lower(), names.index(name)))
    return {f"{family[name]} · {name}": name for name in ordered}


@functools.lru_cache(maxsize=1024)
def _family(name: str, path: str, mtime_ns: int) -> str:
    """The architecture family of the model preset ``name`` stored at ``path`` as of ``mtime_ns``."""
    return family_of(read_model(name).architecture)


def model_metadata(name_or_path: str | Path) -> dict[str, Any]:
    """The ``_source``/``_published_parameters``-style keys of a model file (keys starting with ``_``)."""
    data = load_json_object(resolve("model", name_or_path))
    return {k.lstrip("_"): v for k, v in data.items() if k.startswith("_")}


def read_toml(path: str | Path, what: str = "TOML file") -> dict[str, Any]:
    """Parse a TOML file (a regular file of at most ``limits.MAX_INPUT_FILE_BYTES``); every failure is a
    ValueError naming the file: bad syntax, bad UTF-8, nesting too deep for the parser."""
    path = check_input_file(path, what)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except RecursionError:
        raise ValueError(f"{path}: not valid TOML (nested too deeply for the parser)") from None
    except ValueError as exc:  # TOMLDecodeError, UnicodeDecodeError
        raise ValueError(f"{path}: not valid TOML ({' '.join(str(exc).split())[:200]})") from None


_read_toml = read_toml


class _Table:
    """A TOML table whose fields are read with errors naming the file and the key; unknown keys refused."""

    def __init__(self, data: dict[str, Any], origin: str, allowed: set[str]) -> None:
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(
                f"{origin}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
            )
        self.data, self.origin = data, origin

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise ValueError(f"{self.origin}: missing key {key!r}")
            return default
        value = self.data[key]
        if (
            not isinstance(value, kind)
            or isinstance(value, bool)
            and bool not in (kind if isinstance(kind, tuple) else (kind,))
        ):
            kinds = kind if isinstance(kind, tuple) else (kind,)
            names = [
                "a number" if k is int and float in kinds else _KIND_NAMES.get(k, k.__name__) for k in kinds
            ]
            want = " or ".join(dict.fromkeys(names))
            raise ValueError(f"{self.origin}: key {key!r} must be {want}, got {shown(value)}")
        return value

    def number(self, key: str, default: Any = ...) -> Any:
        """A finite number (nan, inf and integers too large for a float refused)."""
        value = self.get(key, (int, float), default)
        if value is default:
            return value
        return check_real(self.origin, f"key {key!r}", value, minimum=-math.inf, min_open=False)


_KIND_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    dict: "a table",
    list: "a list",
    bool: "true or false",
}


def _compute_capability(text: str, origin: str) -> tuple[int, int]:
    """``"major.minor"`` (e.g. ``"10.0"``) as integers; ValueError naming the file and the key otherwise."""
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(
            f'{origin}: key \'compute_capability\' must be "major.minor" (e.g. "9.0"), got {shown(text)}'
        )
    return int(parts[0]), int(parts[1])


def _device_from_toml(data: dict[str, Any], origin: str) -> DeviceSpec:
    top = _Table(
        data,
        origin,
        {"id", "name", "vendor", "source", "peak_tflops", "memory", "efficiency", "compute_capability"},
    )
    peaks = _Table(top.get("peak_tflops", dict), f"{origin} [peak_tflops]", {"bf16", "fp16", "fp8", "fp32"})
    mem = _Table(top.get("memory", dict), f"{origin} [memory]", {"hbm_GiB", "hbm_GB", "hbm_bandwidth_TBps"})
    if ("hbm_GiB" in mem.data) == ("hbm_GB" in mem.data):
        raise ValueError(f"{origin} [memory]: give exactly one of hbm_GiB or hbm_GB")
    hbm = mem.number("hbm_GiB") * 2**30 if "hbm_GiB" in mem.data else mem.number("hbm_GB") * 1e9
    eff = _Table(top.get("efficiency", dict, {}), f"{origin} [efficiency]", {"matmul", "hbm_frac"})
    extra: dict[str, Any] = {}
    if "matmul" in eff.data:
        extra["matmul_efficiency"] = efficiency_points(
            f"{origin} [efficiency]", eff.get("matmul", list), "matmul"
        )
    if "hbm_frac" in eff.data:
        extra["hbm_efficiency_frac"] = float(eff.number("hbm_frac"))
    if "compute_capability" in top.data:
        extra["compute_capability"] = _compute_capability(top.get("compute_capability", str), origin)
    try:
        return DeviceSpec(
            id=top.get("id", str),
            name=top.get("name", str),
            source=top.get("source", str, ""),
            peak_flop_per_s={DType(k): float(peaks.number(k)) * 1e12 for k in peaks.data},
            hbm_bytes=float(hbm),
            hbm_bytes_per_s=float(mem.number("hbm_bandwidth_TBps")) * 1e12,
            **extra,
        )
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(origin) else f"{origin}: {text}") from None


def load_device(name_or_path: str | Path) -> DeviceSpec:
    """A device preset id (``h100-sxm5-80gb``) or the path of a device TOML file."""
    path = resolve("device", name_or_path)
    return _device_from_toml(_read_toml(path), str(path))


def _level_from_toml(data: Any, origin: str) -> NetworkLevel:
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: each [[levels]] entry must be a table")
    keys = {
        "name",
        "span",
        "bandwidth_GBps",
        "latency_us",
        "nvlink_generation",
        "nvls",
        "sharp",
        "nics_per_node",
        "mesh",
    }
    t = _Table(data, origin, keys)
    try:
        return NetworkLevel(
            name=t.get("name", str),
            span=t.get("span", int, None),
            bytes_per_s=float(t.number("bandwidth_GBps")) * 1e9,
            latency_s=float(t.number("latency_us")) * 1e-6,
            nvlink_generation=t.get("nvlink_generation", int, None),
            nvls=t.get("nvls", bool, False),
            sharp=t.get("sharp", bool, False),
            nics_per_node=t.get("nics_per_node", int, None),
            mesh=t.get("mesh", bool, False),
        )
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(origin) else f"{origin}: {text}") from None


STORAGE_KEYS = (
    "node_write_GBps",
    "node_read_GBps",
    "filesystem_GBps",
    "device_to_host_GBps",
    "host_memory_GBps",
)
"""Keys of a cluster file's ``[storage]`` table (10^9 bytes/s); the first three are required, plus ``source``."""

_OPTIONAL_STORAGE = {
    "device_to_host_GBps": "device_to_host_bytes_per_s",
    "host_memory_GBps": "host_memory_bytes_per_s",
}


def _storage_from_toml(data: Any, origin: str) -> StorageSpec:
    """A cluster file's ``[storage]`` table as a ``StorageSpec`` (GB/s converted to bytes/s once)."""
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: [storage] must be a table, got {shown(data)}")
    t = _Table(data, origin, {*STORAGE_KEYS, "source"})
    rates = {
        key: check_real(origin, f"key {key!r}", t.number(key), maximum=1e7, unit="GB/s")
        for key in STORAGE_KEYS
        if key in t.data or key not in _OPTIONAL_STORAGE
    }
    extra = {field: rates[key] * 1e9 for key, field in _OPTIONAL_STORAGE.items() if key in rates}
    return StorageSpec(
        node_write_bytes_per_s=rates["node_write_GBps"] * 1e9,
        node_read_bytes_per_s=rates["node_read_GBps"] * 1e9,
        filesystem_bytes_per_s=rates["filesystem_GBps"] * 1e9,
        source=t.get("source", str, ""),
        **extra,
    )


def _device_ref(ref: str, cluster_path: Path) -> str | Path:
    """A cluster's ``device``: a preset id, or a TOML path, relative paths taken from the cluster file's folder."""
    if not ref.strip():
        raise ValueError(
            f"{cluster_path}: key 'device' must name a device preset or a device TOML file, got {ref!r}"
        )
    if not ref.endswith(".toml"):
        return ref
    local = cluster_path.parent / ref
    return local if local.is_file() else Path(ref)


def load_cluster(name_or_path: str | Path, num_nodes: int | None = None) -> ClusterSpec:
    """A cluster preset id (``dgx-h100``) or a cluster TOML path, with ``num_nodes`` nodes (default: the
    preset's ``default_num_nodes``). The device is looked up by the preset's ``device`` id."""
    path = resolve("cluster", name_or_path)
    origin = str(path)
    data = _read_toml(path)
    if "pools" in data:
        raise ValueError(
            f"{origin}: a mixed cluster ([[pools]] of several device kinds), not one cluster: load it with "
            "workbench.presets.pools.load_mixed_cluster (`workbench plan --cluster` takes it)"
        )
    top = _Table(
        data,
        origin,
        {
            "id",
            "name",
            "device",
            "devices_per_node",
            "default_num_nodes",
            "source",
            "levels",
            "storage",
            "price",
        },
    )
    levels = top.get("levels", list)
    storage = top.data.get("storage")
    device = load_device(_device_ref(top.get("device", str), path))
    price = None
    if "price" in top.data:
        price = price_row_from_toml(top.data["price"], f"{origin} [price]", device=device.id)
    try:
        return ClusterSpec(
            id=top.get("id", str),
            name=top.get("name", str),
            device=device,
            devices_per_node=top.get("devices_per_node", int),
            num_nodes=num_nodes if num_nodes is not None else top.get("default_num_nodes", int, 1),
            levels=tuple(_level_from_toml(lv, f"{origin} levels[{i}]") for i, lv in enumerate(levels)),
            source=top.get("source", str, ""),
            storage=None if storage is None else _storage_from_toml(storage, f"{origin} [storage]"),
            price=price,
        )
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(origin) else f"{origin}: {text}") from None


PRICE_ROW_KEYS = {
    "device",
    "kind",
    "usd_per_device_hour",
    "provider",
    "region",
    "date_read",
    "page_date",
    "source",
    "note",
}


def price_row_from_toml(data: Any, origin: str, device: str | None = None) -> PriceSpec:
    """One price row (``profiles/prices/*.toml`` ``[[prices]]``, or a cluster file's ``[price]`` for its
    ``device``, without the ``device`` key) as a ``PriceSpec``; ValueError naming ``origin``, the key and what is
    allowed (a price <= 0, no ``date_read``, no ``source``, an unknown key or kind)."""

    if not isinstance(data, dict):
        raise ValueError(f"{origin}: must be a table, got {type(data).__name__}")
    keys = PRICE_ROW_KEYS - {"device"} if device is not None else PRICE_ROW_KEYS
    t = _Table(data, origin, keys)
    if "date_read" not in t.data:
        raise ValueError(f"{origin}: missing key 'date_read' (YYYY-MM-DD: when the price was read)")
    kind = t.get("kind", str, "on_demand")
    if kind not in PRICE_KINDS[:2]:
        raise ValueError(f"{origin}: key 'kind' must be one of {', '.join(PRICE_KINDS[:2])}, got {kind!r}")
    price = t.number("usd_per_device_hour")
    if price <= 0:
        raise ValueError(
            f"{origin}: key 'usd_per_device_hour' must be > 0 (US dollars per device-hour), got {price!r}"
        )
    try:
        return PriceSpec(
            device=device if device is not None else t.get("device", str),
            usd_per_device_hour=float(price),
            kind=kind,
            provider=t.get("provider", str, ""),
            region=t.get("region", str, ""),
            date_read=check_iso_date(origin, "key 'date_read'", t.data["date_read"]),
            source=t.get("source", str),
            note=t.get("note", str, ""),
        )
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(origin) else f"{origin}: {text}") from None
