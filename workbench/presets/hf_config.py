"""Read a Hugging Face ``config.json`` into a :class:`~workbench.specs.model.ModelSpec`.

Supported ``architectures``: see ``SUPPORTED_ARCHITECTURES`` and ``supported_families()``; the readers live in
:mod:`workbench.presets.hf_readers`. An architecture no reader knows goes to the model derivers registered in
the ``workbench.model_derivers`` entry-point group (the ``[hf]`` extra registers one that builds the model with
transformers on the meta device); without one it is refused with the list of supported architectures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from workbench.presets.hf_fields import ConfigReader
from workbench.presets.hf_readers import FAMILIES, READERS
from workbench.presets.profile_table import shape_key
from workbench.specs.files import check_input_file
from workbench.specs.limits import shown
from workbench.specs.model import ModelSpec

SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(READERS)

DERIVERS_GROUP = "workbench.model_derivers"
"""Entry-point group of functions ``(config: Mapping, origin: str, name: str) -> ConfigReading`` that derive a
spec for an architecture no reader knows (``workbench_backends.hf_meta:derive_reading`` with the ``[hf]`` extra)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigReading:
    """A config read: the decoder's spec and what the spec does not hold."""

    spec: ModelSpec
    architecture: str
    """The config's ``architectures[0]``."""
    notes: tuple[str, ...] = ()
    """Defaults applied for missing fields, mechanisms recorded but not priced, how the spec was derived."""
    encoder_parameters: int = 0
    """Parameters of a vision tower and projector beside the decoder (Gemma 3, Llama 4): in memory, run per
    image, not priced per text token; ``spec.total_parameters() + encoder_parameters`` is the checkpoint's."""

    @property
    def total_with_encoder(self) -> int:
        return self.spec.total_parameters() + self.encoder_parameters


def supported_families() -> list[tuple[str, tuple[str, ...]]]:
    """(family label, ``architectures`` values) of every hand-written reader, in the order of
    :data:`~workbench.presets.hf_readers.FAMILIES`."""
    return [(label, archs) for label, (_, archs, _) in FAMILIES.items()]


def family_of(architecture: str) -> str:
    """The family label of an ``architectures`` value ("derived" when no reader knows it)."""
    return next((label for label, (_, archs, _) in FAMILIES.items() if architecture in archs), "derived")


def supported_list_markdown() -> str:
    """The README's one-line list of supported families (generated here; a test checks the README)."""
    return "; ".join(f"{label} (`{'`, `'.join(archs)}`)" for label, archs in supported_families())


def load_json_object(path: Path) -> dict[str, Any]:
    """Parse a JSON file that must hold one object; errors name the file."""
    check_input_file(path)  # a directory or a FIFO is named as such, and a FIFO is never opened
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply for the parser)") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        raise ValueError(f"{path}: not valid JSON ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_hf_config(source: Mapping[str, Any] | str | Path, *, name: str | None = None) -> ConfigReading:
    """Read a HF ``config.json`` path or parsed mapping into a :class:`ConfigReading`.

    The name defaults to the file's stem (``config`` files take their folder's name), else ``"model"``.
    Raises ValueError for an architecture no reader or deriver knows (listing the supported ones) or a bad field
    (naming the file, the field, the value and what is allowed), FileNotFoundError for a missing file.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        cfg: Mapping[str, Any] = load_json_object(path)
        origin = str(path)
        default_name = (path.parent.name if path.stem == "config" else path.stem) or "model"
    elif isinstance(source, Mapping):
        cfg, origin, default_name = source, "config", str(source.get("_name_or_path") or "model")
    else:
        raise ValueError(f"expected a path or a dict for a Hugging Face config, got {type(source).__name__}")
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(arch, str):
        raise ValueError(
            f"{origin}: field 'architectures' is {shown(archs)}; it must be a list whose first entry names the "
            f"architecture; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    try:
        if arch not in READERS:
            return _derive(cfg, origin, name or default_name, arch)
        r = ConfigReader(cfg, origin)
        spec = READERS[arch](r, name or default_name)
        return ConfigReading(
            spec=spec, architecture=arch, notes=tuple(r.notes), encoder_parameters=r.encoder_parameters
        )
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(origin) else f"{origin}: {text}") from None


def _derive(cfg: Mapping[str, Any], origin: str, name: str, arch: str) -> ConfigReading:
    """An architecture without a reader: the first registered deriver that is installed, else ValueError."""
    reasons = []
    for ep in sorted(entry_points(group=DERIVERS_GROUP), key=lambda e: e.name):
        try:
            derive = ep.load()
        except ImportError as exc:  # the extra is not installed
            reasons.append(f"{ep.name}: {exc}")
            continue
        try:
            reading = derive(cfg, origin, name)
        except ValueError as exc:
            text = str(exc) if str(exc).startswith(origin) else f"{origin}: {exc}"
            raise ValueError(
                f"{text} (field 'architectures' is {shown([arch])}, which no hand-written reader knows; derived "
                f"with {ep.name}); supported: "
                f"{', '.join(SUPPORTED_ARCHITECTURES)}"
            ) from None
        if not isinstance(reading, ConfigReading):
            raise TypeError(
                f"model deriver {ep.name!r} returned {type(reading).__name__}, not a ConfigReading"
            )
        return reading
    hint = f" ({'; '.join(reasons)})" if reasons else ""
    raise ValueError(
        f"{origin}: field 'architectures' is {shown([arch])}; no reader knows it and no transformers deriver is "
        f"installed{hint}: install the extra with pip install 'parallelism-workbench[hf]' to derive it from "
        f"transformers' own model; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
    )


def model_from_hf_config(source: Mapping[str, Any] | str | Path, *, name: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of :func:`read_hf_config` (same arguments and errors)."""
    return read_hf_config(source, name=name).spec


_HF_KEYS = {
    "num_layers": ("num_hidden_layers", "n_layer"),
    "hidden_size": ("hidden_size", "n_embd"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_key_value_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "vocab_size": ("vocab_size",),
    "num_dense_layers": ("first_k_dense_replace",),
    "moe_ffn_hidden_size": ("moe_intermediate_size",),
}


def shrunk_hf_config(base_config: dict[str, Any], spec: ModelSpec) -> dict[str, Any] | None:
    """The base model's config.json with the sizes of ``spec`` (a shrunk variant) written in; None when it
    does not read back as ``spec`` (an architecture whose keys differ). The inverse of
    :func:`model_from_hf_config` for the fields ``workbench profile`` shrinks."""
    cfg = dict(base_config)
    for field, keys in _HF_KEYS.items():
        for key in keys:
            if key in cfg or key == keys[0] and field in ("num_layers", "hidden_size", "num_attention_heads"):
                cfg[key] = getattr(spec, field)
    ffn = spec.ffn_hidden_size or spec.moe_ffn_hidden_size
    if "intermediate_size" in cfg:
        cfg["intermediate_size"] = ffn
    cfg["head_dim"] = spec.head_dim
    try:
        back = model_from_hf_config(cfg, name=spec.name)
    except ValueError:
        return None
    return cfg if shape_key(back) == shape_key(spec) and back.num_layers == spec.num_layers else None
