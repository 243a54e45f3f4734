"""``Calibration``: every fitted constant and execution assumption of the analytic cost model, in one place.

The analytic formulas (:mod:`workbench.cost.flops`, :mod:`workbench.cost.comm`, :mod:`workbench.cost.memory`) take these
values as arguments; none is written inside a formula. The named file ``profiles/calibration/default.toml``
holds the fitted values (with their source: the public validation set, ``workbench validate``); the field
defaults below are neutral (no overlap, the device preset's own efficiency curve) so that a model without a
calibration file stays a plain roofline + alpha-beta model.

File keys (all optional)::

    [model]                      # global knobs, names as the fields below
    tp_comm_overlap_frac = 0.0
    [device."a100-sxm4-80gb"]    # per device preset id
    matmul = [[1e9, 0.5], [1e12, 0.8]]   # (flop, fraction of dense peak) points
    flash_attention_frac = 0.5           # FlashAttention kernel efficiency, fraction of dense peak
    hbm_frac = 0.8
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from workbench.presets.catalog import profiles_dir
from workbench.specs.hardware import DeviceSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceCalibration:
    """Fitted efficiencies of one device; None keeps the device preset's value."""

    matmul: tuple[tuple[float, float], ...] | None = None
    """(flop, fraction of the dense peak) points of the matmul efficiency curve (Calculon's idea)."""
    flash_attention_frac: float | None = None
    """Fraction of the dense peak a fused (FlashAttention) attention kernel reaches on executed FLOPs."""
    hbm_frac: float | None = None
    """Share of the peak HBM bandwidth memory-bound kernels reach."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Calibration:
    """Fitted constants and execution assumptions; fractions are 0..1, times in seconds."""

    name: str = "neutral"
    flash_attention: bool = True
    """Attention runs as a fused kernel (FlashAttention, Dao et al. 2022): it executes the causal half of the
    score FLOPs, stores no s^2 activations and recomputes the scores in the backward pass. False: Megatron's
    2021-2022 unfused path (full s^2 scores, softmax and dropout in HBM)."""
    flash_attention_frac: float = 0.5
    """Default FlashAttention efficiency when the device has no fitted value (FlashAttention-2, Dao 2023,
    reports 50-73% of the A100 peak forward, lower backward)."""
    selective_recompute: str = "attention"
    """What ``recompute=selective`` recomputes: ``attention`` (Megatron: the attention core, Korthikanti et
    al. 2022 section 4.3) or ``op`` (torchtitan's per-op SAC: every second matmul output and the attention
    output are saved, the rest recomputed)."""
    dropout: bool = False
    """The model applies dropout (GPT-3/Megatron GPT: yes, Llama: no); adds masks to activations and passes."""
    capacity_factor: float = 1.0
    """MoE token capacity factor: expert work is top-k x capacity_factor tokens (1.0: dropless, balanced)."""
    grad_bytes_per_param: float = 4.0
    """Gradient accumulation buffer precision (Megatron main_grad fp32 = 4; FSDP pure bf16 = 2)."""
    master_weights: bool = True
    """fp32 master copy of the weights in the optimizer (mixed precision, Micikevicius et al. 2018)."""
    tp_comm_overlap_frac: float = 0.0
    """Share of tensor-parallel collectives hidden behind GEMMs (TE userbuffers, async TP)."""
    cp_comm_overlap_frac: float = 0.0
    """Share of context-parallel KV exchange hidden behind the attention kernel (ring attention)."""
    ep_comm_overlap_frac: float = 0.0
    """Share of expert-parallel all-to-all hidden behind compute."""
    dp_comm_overlap_frac: float = 0.0
    """Share of the data-parallel gradient reduction hidden behind the backward pass (bucketed)."""
    fsdp_comm_overlap_frac: float = 0.0
    """Share of the ZeRO-3 per-micro-batch parameter gathers and gradient reduce-scatters hidden behind compute."""
    collective_efficiency_frac: float = 1.0
    """Achieved share of the link bandwidth in large collectives (nccl-tests bus bandwidth over the link's)."""
    layer_overhead_s: float = 0.0
    """Fixed cost per layer per forward pass (kernel launches, framework); backward counts it twice."""
    moe_layer_overhead_s: float = 0.0
    """Extra fixed cost per MoE layer per forward pass (routing, token permutation, host syncs of dropless
    token counts); backward counts it twice."""
    fp8_matmul_scale: float = 1.0
    """Efficiency of FP8 matrix multiplies relative to the bf16 curve (casts, scaling, smaller tiles)."""
    fragmentation_frac: float = 0.0
    """Allocator fragmentation allowance: share added on top of the counted memory."""
    framework_overhead_bytes: float = 0.0
    """Fixed per-device memory outside the model (CUDA context, NCCL and cuBLAS workspaces)."""
    devices: dict[str, DeviceCalibration] = field(default_factory=dict)
    """Per device preset id."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_frac") and not (isinstance(value, int | float) and 0 <= value <= 1):
                raise ValueError(f"Calibration {self.name!r}: {f.name} must be in [0, 1], got {value!r}")
        if self.selective_recompute not in ("attention", "op"):
            raise ValueError(
                f"Calibration {self.name!r}: selective_recompute must be attention or op, "
                f"got {self.selective_recompute!r}"
            )
        if self.capacity_factor < 1 or self.grad_bytes_per_param <= 0:
            raise ValueError(
                f"Calibration {self.name!r}: capacity_factor must be >= 1 and grad_bytes_per_param > 0"
            )

    def device(self, device: DeviceSpec) -> DeviceSpec:
        """``device`` with this calibration's matmul curve and HBM share applied (unchanged if none)."""
        cal = self.devices.get(device.id)
        if cal is None:
            return device
        changes: dict[str, Any] = {}
        if cal.matmul is not None:
            changes["matmul_efficiency"] = cal.matmul
        if cal.hbm_frac is not None:
            changes["hbm_efficiency_frac"] = cal.hbm_frac
        return replace(device, **changes) if changes else device

    def flash_frac(self, device: DeviceSpec) -> float:
        cal = self.devices.get(device.id)
        return (
            cal.flash_attention_frac
            if cal and cal.flash_attention_frac is not None
            else self.flash_attention_frac
        )


_GLOBAL_KEYS = {f.name for f in fields(Calibration)} - {"name", "devices"}


def calibration_from_dict(data: dict[str, Any], *, name: str) -> Calibration:
    """Build from the parsed TOML (see the module docstring). Unknown keys raise ValueError."""
    unknown = set(data) - {"model", "device", "source"}
    if unknown:
        raise ValueError(
            f"calibration {name}: unknown section(s) {sorted(unknown)}; allowed: model, device, source"
        )
    top = dict(data.get("model", {}))
    bad = set(top) - _GLOBAL_KEYS
    if bad:
        raise ValueError(
            f"calibration {name}: unknown key(s) {sorted(bad)} in [model]; allowed: {sorted(_GLOBAL_KEYS)}"
        )
    devices = {}
    for dev_id, table in data.get("device", {}).items():
        extra = set(table) - {"matmul", "flash_attention_frac", "hbm_frac"}
        if extra:
            raise ValueError(f"calibration {name}: unknown key(s) {sorted(extra)} in [device.{dev_id}]")
        matmul = table.get("matmul")
        devices[dev_id] = DeviceCalibration(
            matmul=tuple((float(x), float(f)) for x, f in matmul) if matmul is not None else None,
            flash_attention_frac=table.get("flash_attention_frac"),
            hbm_frac=table.get("hbm_frac"),
        )
    return Calibration(name=name, devices=devices, **top)


def load_calibration(name_or_path: str | Path = "default") -> Calibration:
    """A calibration file by name (``profiles/calibration/<name>.toml``) or path; ``neutral`` gives the defaults."""
    if str(name_or_path) == "neutral":
        return Calibration()
    path = Path(name_or_path)
    if not path.suffix:
        path = profiles_dir() / "calibration" / f"{name_or_path}.toml"
    if not path.is_file():
        raise ValueError(f"calibration {str(name_or_path)!r}: no such file {path}")
    with path.open("rb") as fh:
        try:
            data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML ({exc})") from None
    return calibration_from_dict(data, name=path.stem)
