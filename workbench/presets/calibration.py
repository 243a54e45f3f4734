"""``Calibration``: what the analytic cost model prices a plan with, resolved in one place.

A calibration joins three things that stay apart on disk:

- the **framework profile** (``profiles/frameworks/<id>.toml``, :mod:`workbench.specs.framework`): how the
  software stack runs the plan (kernels it calls, fusion, overlap, memory it keeps and reports);
- the **kernel tables** (``profiles/kernels/<device>.toml`` or a ``workbench microbench`` output,
  :mod:`workbench.specs.kernels`): what the device's GEMM, attention and memory-bound kernels achieve,
  from microbenchmarks, never from step times;
- the **fitted constants** (``profiles/calibration/<name>.toml``): values of the few fields each profile
  names as ``fitted``, per fit group, fitted by ``workbench validate`` to the public validation set.

The formulas (:mod:`workbench.cost`) read ``cal.framework.<field>`` and the device's rates through
:meth:`Calibration.device`, :meth:`Calibration.gemm_curve` and :meth:`Calibration.attention`.

Fitted-constants file::

    source = "how the values were fitted"
    [fit.pooled]                      # pooled over every stack: used by groups without their own fit
    kernel_efficiency_frac = 0.8
    [fit."megatron-lm-2021"]          # a fit group (a profile id, or the fit_group of a fork)
    host_overhead_per_layer_s = 1.2e-4
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workbench.presets.catalog import profiles_dir, read_toml
from workbench.presets.frameworks import DEFAULT_FRAMEWORK, load_framework
from workbench.presets.kernels import device_kernel_tables, load_kernel_table, overlay
from workbench.specs.files import check_input_file
from workbench.specs.framework import FITTABLE, FrameworkProfile, check_number
from workbench.specs.hardware import DeviceSpec
from workbench.specs.kernels import KernelTable
from workbench.specs.limits import shown

NEUTRAL = FrameworkProfile(
    id="neutral",
    name="neutral: plain roofline and NCCL-model collectives, nothing hidden, no allowance",
    schedules=None,
    zero_stages=(0, 1, 2, 3),
    context_parallel=True,
    expert_parallel=True,
    fp8=True,
    uneven_stages=True,
    collective_efficiency_frac=1.0,
    fragmentation_frac=0.0,
    context_bytes=0.0,
    moe_dispatch_passes=0.0,
    memory_report="required",
)
"""The profile of ``Calibration()``: fused FlashAttention-2, no overlap, ideal collectives, no memory allowance
(the torch-profile backend and the plain model use it; it runs any plan)."""

POOLED_GROUP = "pooled"
"""Fit group of the constants fitted over every stack's runs at once (``workbench.specs.framework.POOLED``)."""

FALLBACK_ATTENTION_FRAC = 0.5
"""Fused-attention efficiency when a device has no kernel table: FlashAttention-2 reaches 50-73% of the A100
peak forward and somewhat less backward (Dao 2023, arXiv:2307.08691, section 4.1)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Calibration:
    """A framework profile (with its fitted constants applied) and the kernel tables of the devices."""

    name: str = "neutral"
    framework: FrameworkProfile = NEUTRAL
    kernels: dict[str, KernelTable] = field(default_factory=dict)
    """Kernel table per device preset id; a device without one keeps its preset's efficiency curve."""
    fits: dict[str, dict[str, float]] = field(default_factory=dict)
    """Fitted constants per fit group (what :meth:`with_framework` applies to a profile), and under
    ``POOLED_GROUP`` the values pooled over every stack (for a group without its own fit)."""

    def with_framework(self, framework: FrameworkProfile | str) -> Calibration:
        """The same kernels and fits, pricing with ``framework`` (its group's fitted constants applied)."""
        prof = load_framework(framework)
        values = {**self.fits.get(POOLED_GROUP, {}), **self.fits.get(prof.group, {})}
        fitted: dict[str, Any] = {k: v for k, v in values.items() if k in prof.fitted}
        return replace(self, framework=replace(prof, **fitted))

    def table(self, device: DeviceSpec) -> KernelTable | None:
        return self.kernels.get(device.id)

    def device(self, device: DeviceSpec) -> DeviceSpec:
        """``device`` with its kernel table's bf16 GEMM curve and HBM share (unchanged without a table)."""
        table = self.table(device)
        if table is None:
            return device
        changes: dict[str, Any] = {"hbm_efficiency_frac": table.hbm_frac}
        if "bf16" in table.gemm:
            changes["matmul_efficiency"] = table.gemm["bf16"]
        return replace(device, **changes)

    def gemm_curve(self, device: DeviceSpec, dtype: str) -> tuple[tuple[float, float], ...]:
        """GEMM (flop, fraction of ``dtype``'s dense peak) points: the kernel table's curve for ``dtype``, else
        the bf16 curve, else the device preset's."""
        table = self.table(device)
        if table is not None:
            for key in (dtype, "bf16"):
                if key in table.gemm or (key == "fp16" and "bf16" in table.gemm):
                    return table.gemm_curve(key)
        return device.matmul_efficiency

    def attention(
        self,
        device: DeviceSpec,
        *,
        dtype: str,
        seq_len: Any,
        head_dim: int,
        families: tuple[str, ...] | None = None,
        causal: bool = True,
    ) -> tuple[Any, Any]:
        """(forward, backward) fraction of the dense peak of the framework's fused attention kernel on
        ``device`` (causal unless ``causal`` is False, the kernel table's nearest head dim, interpolated in
        seq_len); the first family of ``families`` (default ``framework.attention_kernels``) the table has,
        else ``FALLBACK_ATTENTION_FRAC``."""
        families = self.framework.attention_kernels if families is None else families
        hit = self._attention_fracs(
            device, families, dtype=dtype, seq_len=seq_len, head_dim=head_dim, window=0, causal=causal
        )
        return hit if hit is not None else (FALLBACK_ATTENTION_FRAC, FALLBACK_ATTENTION_FRAC)

    def window_attention(
        self, device: DeviceSpec, *, dtype: str, seq_len: Any, head_dim: int, window: int
    ) -> tuple[Any, Any] | None:
        """(forward, backward) fraction of the dense peak of the framework's fused attention kernel on
        ``device`` in a sliding-window layer of ``window`` keys (FLOPs of the band), from the kernel table's
        window tables (``AttentionTable.window``, within ``WINDOW_MATCH_FACTOR`` of ``window``); None when the
        table has none, and the caller reads the layer at the full kernel's rate."""
        if window <= 0:
            return None
        families = self.framework.attention_kernels
        return self._attention_fracs(
            device, families, dtype=dtype, seq_len=seq_len, head_dim=head_dim, window=window
        )

    def _attention_fracs(
        self,
        device: DeviceSpec,
        families: tuple[str, ...],
        *,
        dtype: str,
        seq_len: Any,
        head_dim: int,
        window: int,
        causal: bool = True,
    ) -> tuple[Any, Any] | None:
        """The (forward, backward) fractions (causal unless ``causal`` is False) of the kernel table of
        ``device`` at ``dtype``, else bf16 (``KernelTable.attention_fracs``); None without a table or a
        matching one."""
        table = self.table(device)
        if table is None:
            return None
        for key in (dtype, "bf16"):
            hit = table.attention_fracs(
                families, dtype=key, head_dim=head_dim, causal=causal, seq_len=seq_len, window=window
            )
            if hit is not None:
                return hit[1], hit[2]
        return None


def fits_from_dict(data: dict[str, Any], *, where: str) -> dict[str, dict[str, float]]:
    """The ``[fit.<group>]`` tables of a fitted-constants file; unknown keys raise ValueError."""
    unknown = set(data) - {"fit", "source"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: fit, source")
    if not isinstance(data.get("source", ""), str):
        raise ValueError(f"{where}: source must be a string, got {shown(data['source'])}")
    groups = data.get("fit", {})
    if not isinstance(groups, dict):
        raise ValueError(f"{where}: fit must be a table of [fit.<group>] tables, got {shown(groups)}")
    fits: dict[str, dict[str, float]] = {}
    for group, table in groups.items():
        if not isinstance(table, dict):
            raise ValueError(f"{where}: fit.{group} must be a table of constants, got {shown(table)}")
        bad = set(table) - set(FITTABLE)
        if bad:
            raise ValueError(
                f"{where}: [fit.{group}] unknown key(s) {sorted(bad)}; allowed: {', '.join(FITTABLE)}"
            )
        fits[group] = {k: check_number(f"{where} [fit.{group}]", k, v) for k, v in table.items()}
    return fits


def load_calibration(
    name_or_path: str | Path = "default",
    *,
    framework: FrameworkProfile | str = DEFAULT_FRAMEWORK,
    kernels: str | Path | KernelTable | None = None,
) -> Calibration:
    """Resolve a calibration: fitted constants by name (``profiles/calibration/<name>.toml``) or path
    (``neutral``: none, and the neutral profile unless ``framework`` is given explicitly), the framework
    profile by id or path, the kernel tables of every device (published, with the committed measurements laid
    over them: :func:`workbench.presets.kernels.device_kernel_tables`) plus ``kernels`` (a table, file or
    microbench folder: a measured one is laid over the table of its device like a committed one, any other
    replaces it). ValueError names the bad file or key."""
    tables = device_kernel_tables()
    if kernels is not None:
        extra = kernels if isinstance(kernels, KernelTable) else load_kernel_table(kernels)
        base = tables.get(extra.device)
        tables[extra.device] = extra if base is None or not extra.measured else overlay(base, extra)
    if str(name_or_path) == "neutral":
        cal = Calibration(kernels=tables)
        return cal if framework == DEFAULT_FRAMEWORK else cal.with_framework(framework)
    path = Path(name_or_path)
    if not path.suffix:
        path = profiles_dir() / "calibration" / f"{name_or_path}.toml"
    if path.exists() and not path.is_file():  # a directory or a FIFO says so
        check_input_file(path, "calibration file")
    if not path.is_file() and Path(name_or_path).exists():
        check_input_file(name_or_path, "calibration file")  # e.g. a FIFO without a suffix: never opened
    if not path.is_file():
        raise ValueError(f"calibration {str(name_or_path)!r}: no such file {path}")
    data = read_toml(path, "calibration file")
    cal = Calibration(name=path.stem, kernels=tables, fits=fits_from_dict(data, where=str(path)))
    return cal.with_framework(framework)
