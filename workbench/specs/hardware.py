"""Devices and clusters: ``DeviceSpec``, ``NetworkLevel`` and ``ClusterSpec`` (SI units throughout)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from workbench.specs.errors import check_int, check_positive
from workbench.specs.limits import MAX_DEVICES, MAX_NODES, check_real, shown
from workbench.specs.price import PriceSpec


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


def efficiency_points(
    where: str, points: object, field: str = "matmul_efficiency"
) -> tuple[tuple[float, float], ...]:
    """``points`` as a tuple of (flop, fraction) pairs: finite flop > 0, fraction in (0, 1], sorted by flop, at
    least one; ValueError naming ``where`` and ``field`` otherwise."""
    items: list | tuple = points if isinstance(points, list | tuple) else ()
    good = len(items) > 0
    out: list[tuple[float, float]] = []
    for point in items:
        if not isinstance(point, list | tuple) or len(point) != 2:
            good = False
            break
        try:
            out.append((check_real(where, field, point[0]), check_real(where, field, point[1], maximum=1.0)))
        except ValueError:
            good = False
            break
    if not good or out != sorted(out):
        raise ValueError(
            f"{where}: {field} must be (flop > 0, fraction in (0, 1]) points sorted by flop, got {shown(points)}"
        )
    return tuple(out)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceSpec:
    """One accelerator. Peaks are dense (no structured sparsity)."""

    id: str
    """Preset id, e.g. ``h100-sxm5-80gb``."""
    name: str
    """Vendor's product name."""
    peak_flop_per_s: dict[DType, float]
    """Dense peak per precision, FLOP/s (finite, > 0). A missing precision is not supported by the device."""
    hbm_bytes: float
    """HBM capacity in bytes; finite, > 0."""
    hbm_bytes_per_s: float
    """Peak HBM bandwidth in bytes/s; finite, > 0."""
    matmul_efficiency: tuple[tuple[float, float], ...] = DEFAULT_MATMUL_EFFICIENCY
    """(flop, fraction of peak) points of the matmul efficiency curve; see DEFAULT_MATMUL_EFFICIENCY."""
    hbm_efficiency_frac: float = 0.8
    """Share of the peak HBM bandwidth that memory-bound kernels reach (STREAM-like copies reach ~80-90%
    on A100/H100 per vendor guidance)."""
    source: str = ""
    """Where the numbers come from."""
    compute_capability: tuple[int, int] | None = None
    """CUDA compute capability (major, minor) of an NVIDIA GPU (NVIDIA's CUDA GPUs table,
    https://developer.nvidia.com/cuda-gpus: A100 8.0, H100/H200 9.0, B200/GB200 10.0, GB300 10.3); None: not
    given or not an NVIDIA GPU. Stacks branch on it (``fp8_gemm_any_layout``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"DeviceSpec: id must be a non-empty string, got {shown(self.id)}")
        where = f"DeviceSpec {shown(self.id)}"
        cc = self.compute_capability
        if cc is not None and not (
            isinstance(cc, tuple) and len(cc) == 2 and all(isinstance(v, int) and v >= 0 for v in cc)
        ):
            raise ValueError(
                f"{where}: compute_capability must be (major, minor) integers >= 0, got {shown(cc)}"
            )
        check_positive(self, "hbm_bytes")
        check_positive(self, "hbm_bytes_per_s")
        check_real(where, "hbm_efficiency_frac", self.hbm_efficiency_frac, maximum=1.0)
        if not isinstance(self.peak_flop_per_s, dict) or not self.peak_flop_per_s:
            raise ValueError(f"{where}: peak_flop_per_s needs at least one precision")
        peaks = {}
        for key, value in self.peak_flop_per_s.items():
            try:
                dtype = DType(key)
            except ValueError:
                raise ValueError(
                    f"{where}: peak_flop_per_s has unknown precision {shown(key)}; "
                    f"allowed: {', '.join(d.value for d in DType)}"
                ) from None
            peaks[dtype] = check_real(where, f"peak_flop_per_s[{dtype.value}]", value, unit="FLOP/s")
        object.__setattr__(self, "peak_flop_per_s", peaks)
        object.__setattr__(self, "matmul_efficiency", efficiency_points(where, self.matmul_efficiency))

    @property
    def fp8_gemm_any_layout(self) -> bool:
        """Whether the GPU's FP8 GEMMs take either operand transposed, so a per-tensor-scaled FP8 tensor needs
        no transposed copy for the backward pass: Transformer Engine 2.9 ``is_non_tn_fp8_gemm_supported``
        (transformer_engine/pytorch/utils.py: compute capability 10.x, 11.x or >= 13.0; Hopper runs FP8 GEMMs
        in the TN layout only). False when the capability is not given."""
        cc = self.compute_capability
        return cc is not None and ((10, 0) <= cc < (12, 0) or cc >= (13, 0))

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


NVLINK_GENERATIONS: tuple[int, ...] = (3, 4, 5)
"""NVLink generations the collective model knows: 3 (Ampere), 4 (Hopper), 5 (Blackwell)."""


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
    None: the whole cluster. A level after the first whose span fits in one node (<= ``devices_per_node``) is a
    host level (PCIe switches, CPU root ports, the socket link): collectives take its ``bytes_per_s`` as the
    one path every ring shares, not one link per device (:func:`workbench.cost.comm.host_level_count`)."""
    nvlink_generation: int | None = None
    """NVLink generation of this level (3: A100, 4: H100/H200/H800, 5: B200/GB200/GB300); None: not NVLink
    (PCIe or a network). Picks NCCL's per-architecture constants in :mod:`workbench.cost.comm`."""
    nvls: bool = False
    """The level's NVSwitches reduce in the switch (NVLink SHARP, third-generation NVSwitch and later);
    needs ``nvlink_generation`` >= 4."""
    sharp: bool = False
    """The level's switches reduce in the network (InfiniBand SHARP, NCCL's CollNet); deployment-specific."""
    nics_per_node: int | None = None
    """NICs per node on this network level, sharing the node's ``devices_per_node * bytes_per_s``;
    None: one NIC per device (rail-optimised DGX/HGX builds)."""
    mesh: bool = False
    """The level joins its ``span`` devices directly, without a switch, each pair by its own links of an equal
    share (``bytes_per_s / (span - 1)`` per peer): a group of k of them reaches ``(k - 1) / (span - 1)`` of
    ``bytes_per_s`` and a send between two reaches one peer's share (the 4-GH200 nodes: 6 NVLink4 links to each
    of 3 peers; the AMD Instinct platforms: one xGMI link to each of 7 peers). Needs ``span`` >= 2 and no ``nvls`` (a mesh has no switch to reduce in)."""

    def __post_init__(self) -> None:
        check_positive(self, "bytes_per_s")
        check_positive(self, "latency_s", allow_zero=True)
        if self.span is not None:
            check_int(self, "span", maximum=MAX_DEVICES, limit="MAX_DEVICES")
        if self.nics_per_node is not None:
            check_int(self, "nics_per_node", maximum=MAX_DEVICES, limit="MAX_DEVICES")
        for flag in ("nvls", "sharp"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(
                    f"NetworkLevel {shown(self.name)}: {flag} must be true or false, got {shown(getattr(self, flag))}"
                )
        gen = self.nvlink_generation
        if gen is not None and (
            not isinstance(gen, int) or isinstance(gen, bool) or gen not in NVLINK_GENERATIONS
        ):
            allowed = ", ".join(str(g) for g in NVLINK_GENERATIONS)
            raise ValueError(
                f"NetworkLevel {shown(self.name)}: nvlink_generation must be one of {allowed} or unset, got {shown(gen)}"
            )
        if not isinstance(self.mesh, bool):
            raise ValueError(
                f"NetworkLevel {shown(self.name)}: mesh must be true or false, got {shown(self.mesh)}"
            )
        if self.mesh and (self.span is None or self.span < 2 or self.nvls):
            raise ValueError(
                f"NetworkLevel {shown(self.name)}: mesh needs a span >= 2 and nvls off (no switch), got "
                f"span={shown(self.span)}, nvls={shown(self.nvls)}"
            )
        if self.nvls and (gen is None or gen < 4):
            raise ValueError(
                f"NetworkLevel {shown(self.name)}: nvls (NVLink SHARP) needs nvlink_generation 4 or 5 "
                f"(third-generation NVSwitch or later), got nvlink_generation={shown(gen)}"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class StorageSpec:
    """The checkpoint and host path of a cluster: what one node and the whole file system write and read, and
    what a device reaches of its host's memory, bytes/s.

    Preset files give ``node_write_GBps``, ``node_read_GBps``, ``filesystem_GBps`` and optionally
    ``device_to_host_GBps`` and ``host_memory_GBps`` (10^9 bytes/s) in a ``[storage]`` table; each cluster file cites its numbers.
    A cluster without one uses ``workbench.goodput.checkpoint.DEFAULT_STORAGE`` (stated there)."""

    node_write_bytes_per_s: float
    """Sustained checkpoint write bandwidth of one node to the checkpoint store, bytes/s. > 0."""
    node_read_bytes_per_s: float
    """Sustained read bandwidth of one node from the checkpoint store (restore), bytes/s. > 0."""
    filesystem_bytes_per_s: float
    """Aggregate bandwidth cap of the file system for all nodes together (read and write), bytes/s. > 0."""
    device_to_host_bytes_per_s: float = 25e9
    """Copy of a device's checkpoint shard to pinned host memory (the stall of an asynchronous save), bytes/s
    per device. Default 25 GB/s: PCIe Gen4 x16 reaches about 25 GB/s of its 32 GB/s per direction
    (PCI-SIG PCIe 4.0 spec: 16 GT/s x 16 lanes, 128b/130b); Gen5 hosts double it. > 0."""
    host_memory_bytes_per_s: float = 307.2e9
    """Host DRAM bandwidth of one node, bytes/s: what an optimizer step offloaded to the CPUs streams its states
    through (ZeRO-Offload). Default: one socket of 8 DDR5-4800 channels, 4800e6 x 8 bytes x 8 = 307.2 GB/s
    (Intel Xeon 4th generation product brief: 8 DDR5 channels at up to 4800 MT/s). > 0."""
    source: str = ""
    """Where the numbers come from."""

    def __post_init__(self) -> None:
        for name in (
            "node_write_bytes_per_s",
            "node_read_bytes_per_s",
            "filesystem_bytes_per_s",
            "device_to_host_bytes_per_s",
            "host_memory_bytes_per_s",
        ):
            check_real("StorageSpec", name, getattr(self, name), maximum=1e16, unit="bytes/s")


DEFAULT_STORAGE = StorageSpec(
    node_write_bytes_per_s=10e9,
    node_read_bytes_per_s=20e9,
    filesystem_bytes_per_s=500e9,
    device_to_host_bytes_per_s=25e9,
    source=(
        "ASSUMED defaults for a cluster without [storage]: 10 GB/s write and 20 GB/s read per node (a parallel "
        "file-system client on one 200-400 Gb/s storage NIC), 500 GB/s aggregate file-system cap, 25 GB/s "
        "device-to-host copy (PCIe Gen4 x16), one DDR5-4800 socket of host memory per node"
    ),
)
"""The storage and host path used when a cluster preset has no ``[storage]`` table (every number an
assumption)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """Nodes of identical devices joined by an ordered list of network levels, innermost first."""

    id: str
    name: str
    device: DeviceSpec
    devices_per_node: int
    """Devices per host (for NVL72 systems: per compute tray, 4)."""
    num_nodes: int = 1
    """Nodes; devices_per_node * num_nodes <= ``workbench.specs.limits.MAX_DEVICES``."""
    levels: tuple[NetworkLevel, ...] = field(default_factory=tuple)
    """Innermost first; spans strictly increase; the last one spans the whole cluster."""
    source: str = ""
    storage: StorageSpec | None = None
    """The checkpoint storage path (``[storage]`` of the preset); None: the goodput model's stated defaults."""
    price: PriceSpec | None = None
    """What a device-hour of this cluster costs (``[price]`` of the file); None: the price table's."""

    def __post_init__(self) -> None:
        check_int(self, "devices_per_node", maximum=MAX_DEVICES, limit="MAX_DEVICES")
        check_int(self, "num_nodes", maximum=MAX_NODES, limit="MAX_NODES")
        if self.num_devices > MAX_DEVICES:
            raise ValueError(
                f"ClusterSpec {shown(self.id)}: {self.num_nodes} nodes x {self.devices_per_node} devices = "
                f"{self.num_devices:,} devices; at most {MAX_DEVICES:,} (MAX_DEVICES in workbench/specs/limits.py: "
                "the largest clusters today hold 100k-200k GPUs)"
            )
        if not isinstance(self.device, DeviceSpec):
            raise ValueError(
                f"ClusterSpec {shown(self.id)}: device must be a DeviceSpec, got {shown(self.device)}"
            )
        if self.storage is not None and not isinstance(self.storage, StorageSpec):
            raise ValueError(
                f"ClusterSpec {shown(self.id)}: storage must be a StorageSpec or None, got {shown(self.storage)}"
            )
        if not isinstance(self.levels, list | tuple) or not self.levels:
            raise ValueError(f"ClusterSpec {shown(self.id)}: levels needs at least one network level")
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
