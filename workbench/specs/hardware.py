"""Devices and clusters: ``DeviceSpec``, ``NetworkLevel`` and ``ClusterSpec`` (SI units throughout)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from workbench.specs.errors import check_int, check_positive


class DType(StrEnum):
    """Precision of the main matrix multiplies."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP32 = "fp32"


BYTES_PER_ELEMENT: dict[DType, int] = {DType.BF16: 2, DType.FP16: 2, DType.FP8: 1, DType.FP32: 4}

DEFAULT_MATMUL_EFFICIENCY: tuple[tuple[float, float], ...] = (
    (1e8, 0.25),
    (1e9, 0.45),
    (1e10, 0.62),
    (1e11, 0.72),
    (1e12, 0.78),
)
"""Fraction of the dense peak a matrix multiply of a given FLOP count reaches, as (flop, fraction)
points, interpolated in log(flop) and held flat beyond the ends. Calculon's idea (Isaev et al. SC23,
"Calculon": efficiency as a curve over operation size); these defaults are a fit to published cuBLAS
GEMM throughput on A100/H100 (large bf16 GEMMs reach 70-80% of the dense peak) and are replaced by a
calibration file when one is loaded (see ``workbench calibrate``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceSpec:
    """One accelerator. Peaks are dense (no structured sparsity)."""

    id: str
    """Preset id, e.g. ``h100-sxm5-80gb``."""
    name: str
    """Vendor's product name."""
    peak_flop_per_s: dict[DType, float]
    """Dense peak per precision, FLOP/s. A missing precision is not supported by the device."""
    hbm_bytes: float
    """HBM capacity in bytes."""
    hbm_bytes_per_s: float
    """Peak HBM bandwidth in bytes/s."""
    matmul_efficiency: tuple[tuple[float, float], ...] = DEFAULT_MATMUL_EFFICIENCY
    """(flop, fraction of peak) points of the matmul efficiency curve; see DEFAULT_MATMUL_EFFICIENCY."""
    hbm_efficiency_frac: float = 0.8
    """Share of the peak HBM bandwidth that memory-bound kernels reach (STREAM-like copies reach ~80-90%
    on A100/H100 per vendor guidance)."""
    source: str = ""
    """Where the numbers come from."""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("DeviceSpec: id must be a non-empty string")
        check_positive(self, "hbm_bytes")
        check_positive(self, "hbm_bytes_per_s")
        if not 0 < self.hbm_efficiency_frac <= 1:
            raise ValueError(
                f"DeviceSpec {self.id!r}: hbm_efficiency_frac must be in (0, 1], "
                f"got {self.hbm_efficiency_frac!r}"
            )
        if not self.peak_flop_per_s:
            raise ValueError(f"DeviceSpec {self.id!r}: peak_flop_per_s needs at least one precision")
        peaks = {}
        for key, value in self.peak_flop_per_s.items():
            try:
                dtype = DType(key)
            except ValueError:
                raise ValueError(
                    f"DeviceSpec {self.id!r}: peak_flop_per_s has unknown precision {key!r}; "
                    f"allowed: {', '.join(d.value for d in DType)}"
                ) from None
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"DeviceSpec {self.id!r}: peak_flop_per_s[{key}] must be > 0, got {value!r}")
            peaks[dtype] = float(value)
        object.__setattr__(self, "peak_flop_per_s", peaks)
        points = self.matmul_efficiency
        if not points or any(not 0 < f <= 1 or x <= 0 for x, f in points) or list(points) != sorted(points):
            raise ValueError(
                f"DeviceSpec {self.id!r}: matmul_efficiency must be (flop > 0, fraction in (0, 1]) "
                f"points sorted by flop, got {points!r}"
            )

    def peak(self, dtype: DType | str) -> float:
        """Dense peak FLOP/s for ``dtype``; ValueError if the device has no such precision."""
        key = DType(dtype)
        if key not in self.peak_flop_per_s:
            have = ", ".join(d.value for d in self.peak_flop_per_s)
            raise ValueError(f"device {self.id!r} has no {key.value} peak; it supports {have}")
        return self.peak_flop_per_s[key]

    def __hash__(self) -> int:
        return hash(
            (self.id, self.hbm_bytes, self.hbm_bytes_per_s, tuple(sorted(self.peak_flop_per_s.items())))
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class NetworkLevel:
    """One level of the network as seen by a single device (NVLink domain, InfiniBand fabric, ...)."""

    name: str
    bytes_per_s: float
    """Achievable one-direction bandwidth per device, bytes/s. > 0."""
    latency_s: float
    """Start-up cost of one message (the alpha term), s. >= 0."""
    span: int | None = None
    """Devices this level connects (a group of up to ``span`` consecutive ranks talks over it);
    None: the whole cluster."""

    def __post_init__(self) -> None:
        check_positive(self, "bytes_per_s")
        check_positive(self, "latency_s", allow_zero=True)
        if self.span is not None:
            check_int(self, "span")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """Nodes of identical devices joined by an ordered list of network levels, innermost first."""

    id: str
    name: str
    device: DeviceSpec
    devices_per_node: int
    """Devices per host (for NVL72 systems: per compute tray, 4)."""
    num_nodes: int = 1
    levels: tuple[NetworkLevel, ...] = field(default_factory=tuple)
    """Innermost first; spans strictly increase; the last one spans the whole cluster."""
    source: str = ""

    def __post_init__(self) -> None:
        check_int(self, "devices_per_node")
        check_int(self, "num_nodes")
        if not self.levels:
            raise ValueError(f"ClusterSpec {self.id!r}: levels needs at least one network level")
        object.__setattr__(self, "levels", tuple(self.levels))
        spans = [lvl.span for lvl in self.levels[:-1]]
        if any(s is None for s in spans):
            raise ValueError(f"ClusterSpec {self.id!r}: only the outermost level may leave span unset")
        if spans != sorted(set(spans)):  # type: ignore[type-var]
            raise ValueError(f"ClusterSpec {self.id!r}: level spans must strictly increase, got {spans}")

    @property
    def num_devices(self) -> int:
        return self.devices_per_node * self.num_nodes

    def with_nodes(self, num_nodes: int) -> ClusterSpec:
        """The same cluster with another node count (ValueError if < 1)."""
        return replace(self, num_nodes=num_nodes)

    def level_for_group(self, span_devices: int) -> NetworkLevel:
        """The innermost level whose span covers ``span_devices`` consecutive ranks."""
        for level in self.levels:
            if level.span is None or span_devices <= level.span:
                return level
        return self.levels[-1]
