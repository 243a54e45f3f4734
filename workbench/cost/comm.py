"""Collective and point-to-point times as NCCL's own tuning model prices them, on a cluster's network levels.

Source: NVIDIA/nccl v2.30.7 (commit 5067397), ``src/graph/tuning.cc`` (``ncclTopoTuneModel``,
``ncclTopoGetAlgoTime``), ``src/graph/topo.h`` (NVLink bandwidth per link), ``src/graph/search.cc`` (speed
arrays) and ``src/transport/nvls.cc`` (NVLS channel counts). The constants below are NCCL's; the code is ours.

NCCL prices a call as ``time = latency(algorithm, protocol) + bytes / bandwidth(algorithm, protocol)`` for
every enabled pair (Ring, Tree, NVLS, NVLS-Tree, CollNet-Chain, PAT x LL, LL128, Simple) and runs the cheapest.
Latencies are a base per algorithm and protocol plus per-hop hardware latencies (NVLink or PCI inside an NVLink
domain, the network across); bandwidths are the topology graph's bandwidth with per-protocol efficiencies and
per-channel caps. What we supply in place of NCCL's topology search is the graph bandwidth per rank:

- inside an NVLink domain (NCCL's "node", level 0): the preset's NVLink bandwidth per device times NCCL's
  per-link NVLink bandwidth over the line rate (``SM80/SM90/SM100_NVLINK_BW``: 20/25, 20.6/25, 40.1/50); on a
  switchless mesh (``NetworkLevel.mesh``: 4 GH200 joined pairwise, 8 AMD Instinct GPUs on xGMI) only the
  members' direct links, ``(ppn - 1) / (span - 1)`` of it;
- host levels (``host_level_count``: levels after the first spanning no more than one node, the PCIe switches,
  CPU root ports and socket link of a PCIe server) belong to NCCL's node too, but are one shared path: a ring
  that crosses one is bound by that level's bandwidth whatever its member count, not one PCIe link per card,
  and its hops take NCCL's PCI latencies (tuning.cc ``intraHw``: PCI unless the graph is all NVLink). So the
  NVLink bridge of an H100 NVL pair serves a 2-card group only; 4 and 8 cards run at the host's bandwidth, as
  nccl-tests measures on bridged pairs (NVIDIA/nccl-tests#178: 208 GB/s on the pair, ~20 GB/s with a third GPU
  across PCIe; tests/test_comm_pcie_host.py). NVLS needs the group inside the NVSwitch domain;
- across domains (rail accounting): the group's members in one domain share that domain's NICs:
  ``members x nics_per_node / devices_per_node`` NICs, each at NCCL's search speed for it (the largest entry of
  the architecture's ``speedArrayInter`` not above the NIC's rate: 48 GB/s for a 400 Gb/s NIC). A group with one
  member per node (stride 8 on a DGX) uses one NIC per member; eight members use all eight;
- the graph bandwidth is the smallest of these (the slowest level crossed).

Payload P: all-reduce, reduce-scatter, all-gather: the full (unsharded) buffer, as nccl-tests' "size";
all-to-all: each rank holds P and keeps 1/n; point-to-point: the bytes sent. Bus bandwidth (nccl-tests):
all-reduce algbw x 2(n-1)/n, reduce-scatter / all-gather / all-to-all algbw x (n-1)/n.

All-to-all and send/recv are not in tuning.cc (NCCL runs them as grouped point-to-point): all-to-all moves its
(ppn-1)/n share over NVLink and (n-ppn)/n over the member's own NIC share at the same time (NCCL cannot
aggregate NICs for all-to-all: S. Jeaugey, NVIDIA/nccl-tests#267, #130), with one grouped start-up.
``p2p_s`` stays the alpha-beta send over the level that joins the two ranks (the preset's latency and rate).

Known error: NCCL's latencies are for ranking algorithms, not for prediction: medium sizes are off by up to 2x
(the tree correction factors show it). NVLS takes the NVLS graph's channels and per-channel bandwidth without
the search's rounding (``_nvls``): 8 H100 reach ~487 GB/s all-reduce bus bandwidth at 1 GiB where nccl-tests
measures ~480 (NVIDIA/nccl-tests#212, NVIDIA/nccl#1455). One deliberate departure: a one-domain NVLS all-reduce on
Hopper starts in the 80 us published nccl-tests curves show (``NVLS_STARTUP_US``), not tuning.cc's 25 us; 8 H100,
64 KiB-1 GiB, are then within 20% of three published tables (2-32 MiB within 15%, tests/test_comm_nccl_tests.py). CollNet-Direct is not modelled; CPU vendor is taken as
Intel/Arm (``llMaxBws`` row 0) across nodes.

``efficiency_frac`` scales every bandwidth (default 1.0). Payloads, group sizes and strides may be scalars or
numpy arrays (broadcast elementwise); loops run only over levels and (algorithm, protocol) pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from workbench.cost.placement import level_fanouts, p2p_level_index
from workbench.specs.hardware import ClusterSpec, NetworkLevel

Array = Any


class Op(StrEnum):
    """Collectives the model prices."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


ALGOS = ("tree", "ring", "collnet_chain", "nvls", "nvls_tree", "pat", "p2p")
PROTOS = ("LL", "LL128", "Simple")
_LL, _LL128, _SIMPLE = 0, 1, 2

BASE_LAT_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "pat": (8.0, 8.0, 8.0)}
"""tuning.cc ``baseLatencies`` (LL, LL128, Simple), us; CollNet and NVLS algorithms: 0."""
HW_LAT_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "collnet_chain": (0, 0, 2.8),
               "nvls": (0, 0, 25.0), "nvls_tree": (0, 0, 25.0), "pat": (0, 0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "collnet_chain": (0, 0, 2.8),
            "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (0, 0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "collnet_chain": (0, 0, 30.0),
            "nvls": (0, 0, 18.0), "nvls_tree": (0, 0, 20.9), "pat": (0, 0, 14.0)},
}  # fmt: skip
"""tuning.cc ``hwLatencies`` per hop, us, by hardware (NVLink, PCI, network) and algorithm."""

# Per-architecture tables of tuning.cc, rows Volta, Ampere, Hopper, Blackwell; columns 1, 2, >2 nodes; GB/s.
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_RING_LL128_BW = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
PER_CH_TREE_LL128_BW = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_NVLS_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
NVLS_CHANNELS = ((0, 0), (0, 0), (16, 16), (24, 32))
"""nvls.cc: NVLS_NCHANNELS_SM90 16; SM100 24 inside one NVLink domain, 32 across (single, multi): the kernel's
channels, used here only for the NVLS-Tree per-channel cap."""
NVLS_MAX_ARITY = 32
"""device.h ``NCCL_MAX_NVLS_ARITY``: the NVLS graph has at most this many channels (one head GPU each)."""
NVLS_STARTUP_US = {2: 80.0}
"""Measured start-up of a one-domain NVLS all-reduce by architecture (Hopper), us, in place of tuning.cc's 25 us.
Source: the intercept of published nccl-tests all_reduce_perf curves on 8x H100 SXM at 32 MiB, the smallest
size at which the NVLS-enabled tables run faster than a node without NVLS (so NVLS is what runs), after NCCL's
own NVLS bandwidth (``_nvls``, 280.2 GB/s algbw for 8 H100): 199.3 - 119.8 = 79.5 us (NVIDIA/exemplar-performance
@b4ac983 microbenchmarks/nccl/README.md, DGX H100) and 200.1 - 119.8 = 80.3 us (togethercomputer/together-nccl-tests
@c9a53f3 benchmarks/H100/results/20260306_001221_slurm/all_reduce_nvls.out, NCCL 2.26.2). With 25 us the model ran
NVLS from 2 MiB at 0.66-0.77x the published times up to 32 MiB and 0.81-0.90x to 512 MiB; with 80 us Ring keeps
2-16 MiB, where those tables equal the NVLS-less table (tests/fixtures/nccl_tests_h100.csv). Blackwell keeps NCCL's
25 us (no published table checked)."""
NVLINK_LINK_FRAC = {3: 20.0 / 25.0, 4: 20.6 / 25.0, 5: 40.1 / 50.0}
"""topo.h SM80/SM90/SM100_NVLINK_BW over the NVLink3/4/5 line rate per link (25, 25, 50 GB/s)."""
SPEED_ARRAY_INTER = (
    (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
     0.24, 0.12),
)  # fmt: skip
"""search.cc ``speedArrayInter`` (pre-Hopper), ``sm90SpeedArrayInter``, ``sm100SpeedArrayInter``, GB/s."""
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)  # fmt: skip
"""tuning.cc ``treeCorrectionFactor`` per protocol, by log2(bytes / 64) (Tree all-reduce only)."""
NET_OVERHEAD_US = 1.0
"""tuning.cc ``getNetOverhead``: 1 us per network step (x3 for Simple) on Intel and Arm hosts."""
RING_PLATEAU = 1.4
"""tuning.cc ``ncclTopoGetAlgoTime``: multi-node Ring/Simple all-reduce latency x1.4 (sm80 and later)."""
CHANNEL_BYTES_PER_S = 24e9
"""Our estimate of one channel's bandwidth after ``ncclTopoDupChannels`` (24 GB/s on NVLink4 / NDR systems),
used only to count channels for the per-channel caps."""
_ARCH_OF_NVLINK = {3: 1, 4: 2, 5: 3}


@dataclass(frozen=True, slots=True)
class CollectiveTime:
    """One priced collective: the time and what NCCL would run."""

    seconds: float
    """Predicted time of the call, s."""
    algorithm: str
    """NCCL algorithm: tree, ring, nvls, nvls_tree, collnet_chain, pat (or p2p for all-to-all, send/recv)."""
    protocol: str
    """NCCL protocol: LL, LL128 or Simple."""
    algbw_bytes_per_s: float
    """payload / seconds (nccl-tests' algbw)."""
    busbw_bytes_per_s: float
    """algbw x the op's bus factor (nccl-tests' busbw)."""


@dataclass(frozen=True, slots=True)
class _Group:
    n: Array
    ppn: Array
    """Members inside one NVLink domain (level 0)."""
    nodes: Array
    intra_bytes_per_s: Array
    """NCCL's NVLink bandwidth per rank; inf where ppn == 1."""
    inter_bytes_per_s: Array
    """The group's NIC share per domain at NCCL's search speed; inf on one domain."""
    nic_bytes_per_s: Array
    """One member's NIC share (all-to-all); inf on one domain."""
    arch: int
    intra_hw: str
    """Hardware of the innermost level for NCCL's per-hop latencies: "nvlink" or "pci"."""
    host: Array
    """The group crosses a host level (PCIe switches, CPU root ports, the socket link): its hops use NCCL's
    PCI latencies and NVLS is off."""
    nvls: bool
    sharp: bool
    col: Array = None
    """Column of the per-architecture tables: 0, 1 or 2 for 1, 2 or more NVLink domains."""
    solo: Array = None
    """One member per NVLink domain (NCCL then charges the tree's network latency)."""

    def __post_init__(self) -> None:
        col = np.where(self.nodes <= 1, 0, np.where(self.nodes <= 2, 1, 2))
        object.__setattr__(self, "col", col)
        object.__setattr__(self, "solo", self.ppn == 1)


def _nic_speed(bytes_per_s: float, arch: int) -> float:
    """NCCL's search speed for one NIC: the largest entry of the speed array not above its rate, bytes/s."""
    table = SPEED_ARRAY_INTER[min(max(arch - 1, 0), 2)]
    gbps = bytes_per_s / 1e9
    return next((s for s in table if s <= gbps), table[-1]) * 1e9


def host_level_count(cluster: ClusterSpec) -> int:
    """How many levels after the innermost lie inside one host (a span no wider than ``devices_per_node``):
    the PCIe switches, CPU root ports and socket link that join NVLink-bridged pairs, or groups of cards, in a
    PCIe server. NCCL sees them as part of one node, not as a network: no NICs, one ring's traffic per hop."""
    count = 0
    for level in cluster.levels[1:]:
        if level.span is None or level.span > cluster.devices_per_node:
            break
        count += 1
    return count


def _mesh_share(level: NetworkLevel, members: Array) -> Array:
    """Share of a level's per-device bandwidth that ``members`` devices of it reach: 1 on a switch; on a switchless
    mesh only their direct links, ``(members - 1) / (span - 1)`` (NCCL's rings over a full mesh use every link
    between the members and no other)."""
    if not level.mesh or level.span is None:
        return np.ones_like(np.asarray(members, dtype=float))
    return np.clip((np.asarray(members, dtype=float) - 1) / (level.span - 1), 0.0, 1.0)


def _group(cluster: ClusterSpec, n: Array, stride: Array) -> _Group:
    """The group as NCCL's tuning model sees it. NCCL's node is the innermost level plus the host levels
    (``host_level_count``); a host level is one shared path, so a ring over it is bound by that level's
    bandwidth whatever the number of members (no rail per card), and its hops use PCI latencies."""
    n = np.asarray(n, dtype=float)
    fans = level_fanouts(cluster, np.asarray(stride), n)
    inner = cluster.levels[0]
    arch = _ARCH_OF_NVLINK.get(inner.nvlink_generation or 0, 1)
    frac = NVLINK_LINK_FRAC.get(inner.nvlink_generation or 0, 1.0)
    node = 1 + host_level_count(cluster)
    ppn = np.asarray(fans[0], dtype=float)
    intra = np.where(ppn > 1, inner.bytes_per_s * frac * _mesh_share(inner, ppn), np.inf)
    host: Array = np.zeros_like(ppn, dtype=bool)
    for level, fan in zip(cluster.levels[1:node], fans[1:node], strict=True):
        crossed = np.asarray(fan) > 1
        intra = np.where(crossed, np.minimum(intra, level.bytes_per_s), intra)
        host = host | crossed
        ppn = ppn * np.asarray(fan, dtype=float)
    inter: Array = np.inf
    nic: Array = np.inf
    sharp = len(cluster.levels) > node
    for level, fan in zip(cluster.levels[node:], fans[node:], strict=True):
        nics = level.nics_per_node or cluster.devices_per_node
        per_nic = level.bytes_per_s * cluster.devices_per_node / nics
        share = _nic_speed(per_nic, arch) * nics / cluster.devices_per_node
        crossed = np.asarray(fan) > 1
        nic = np.where(crossed, np.minimum(nic, share), nic)
        inter = np.where(crossed, np.minimum(inter, share * ppn), inter)
        sharp = sharp and level.sharp
    return _Group(n, ppn, n / ppn, intra, inter, nic, arch, "nvlink" if inner.nvlink_generation else "pci",
                  host, inner.nvls, sharp)  # fmt: skip


def _by_nodes(table: tuple[tuple[float, ...], ...], g: _Group) -> Array:
    """A per-architecture row of a tuning.cc table, picked per element by node count (1, 2, >2)."""
    return np.asarray(table[g.arch], dtype=float)[g.col]


def _log2i(x: Array) -> Array:
    return np.floor(np.log2(np.maximum(x, 1)))


def _lats(g: _Group, algo: str, p: int) -> tuple[Array, Array]:
    """(intra-domain, inter-domain) per-hop latency in us; one member per domain uses the tree's network one."""
    intra = _intra_lat(g, algo, p)
    tree, own = HW_LAT_US["net"]["tree"][p], HW_LAT_US["net"][algo][p]
    inter = np.asarray(own, dtype=float) if tree == own else np.where(g.solo, tree, own)
    return intra, inter


def _intra_lat(g: _Group, algo: str, p: int) -> Array:
    """NCCL's per-hop latency inside a node, us: the innermost level's hardware, PCI where a host level is crossed."""
    return np.where(g.host, HW_LAT_US["pci"][algo][p], HW_LAT_US[g.intra_hw][algo][p])


def _channels(graph_bytes_per_s: Array) -> Array:
    return np.clip(
        np.ceil(np.where(np.isfinite(graph_bytes_per_s), graph_bytes_per_s, 0) / CHANNEL_BYTES_PER_S), 2, 32
    )


def _ring(op: Op, g: _Group, p: int, graph: Array, nch: Array, payload: Array) -> tuple[Array, Array]:
    """Ring (latency us, algorithm bandwidth bytes/s) for protocol ``p``."""
    bus = graph
    if p == _LL:
        bus = np.minimum(_by_nodes(LL_MAX_BW, g) * 1e9, bus * 0.5)
    elif p == _LL128:
        bus = np.minimum(bus * 0.92, nch * _by_nodes(PER_CH_RING_LL128_BW, g) * 1e9)
    steps = 2 * (g.n - 1) if op is Op.ALL_REDUCE else g.n - 1
    inter_steps = np.where(g.nodes > 1, (2 if op is Op.ALL_REDUCE else 1) * (g.nodes - 1), 0)
    intra, inter = _lats(g, "ring", p)
    overhead = np.where(g.nodes > 1, NET_OVERHEAD_US * (3 if p == _SIMPLE else 1), 0.0)
    lat = BASE_LAT_US["ring"][p] + (steps - inter_steps) * np.maximum(intra, overhead) + inter_steps * inter
    if op is Op.ALL_REDUCE and p == _SIMPLE:
        plateau = (g.nodes > 1) & (payload / (nch * g.n) >= 64)
        lat = np.where(plateau, lat * RING_PLATEAU, lat)
    return lat, bus * g.n / np.maximum(steps, 1)


def _tree(g: _Group, p: int, graph: Array, nch: Array, payload: Array) -> tuple[Array, Array]:
    """Tree all-reduce (chain inside a domain, double binary tree across): (latency us, algbw bytes/s)."""
    bus = np.minimum(graph * 0.92, nch * _by_nodes(PER_CH_TREE_BW, g) * 1e9)
    if p == _LL:
        bus = np.minimum(bus / 3.8, _by_nodes(LL_MAX_BW, g) * 1e9)
    elif p == _LL128:
        frac = np.where(g.nodes == 1, 7.0 / 9.0, 120.0 / 128.0)
        bus = np.minimum(bus * frac, nch * _by_nodes(PER_CH_TREE_LL128_BW, g) * 1e9)
    log_size = np.floor(np.log2(np.maximum(payload, 1) / 64.0))
    fix = np.asarray(TREE_CORRECTION[p])[np.clip(log_size, 0, 22).astype(int)]
    bus = bus * np.where((log_size >= 0) & (log_size < 23), fix, 1.0)
    intra, inter = _lats(g, "tree", p)
    lat = BASE_LAT_US["tree"][p] + 2 * ((g.ppn - 1) * intra + _log2i(g.nodes) * inter)
    return lat, bus * 0.5


def _nvls(op: Op, g: _Group, tree: bool) -> tuple[Array, Array]:
    """NVLS (NVLink SHARP; across domains with IB SHARP) or NVLS-Tree, Simple: (latency us, algbw bytes/s).

    tuning.cc prices NVLS as ``nChannels x min(bwIntra x nvlsEfficiency x (nChannels-1)/nChannels x 2, bwInter)``
    with the NVLS *graph's* channels and per-channel bandwidth (search.cc): one channel per member of the domain
    (``maxChannels = min(NCCL_MAX_NVLS_ARITY, ngpus)``), each channel's head GPU carrying its traffic twice
    (``ncclTopoSearchTryNvls``, ``d0 == g ? 2 : 1``), so a GPU's NVLink carries ``(ppn + 1) x bwIntra``:
    ``bwIntra = B / (ppn + 1)``. On one domain the search raises ``bwInter`` to twice ``bwIntra`` (pass 2), so it
    does not bind. Together: all-reduce bus bandwidth ``2 x eff x B x (ppn - 1) / (ppn + 1)``, i.e. algbw
    ``eff x B / (1 + 1/ppn)``: every GPU moves ``(1 + 1/ppn)`` times the payload each way (the switch reduces
    and multicasts). NCCL's search rounds ``bwIntra`` down to its speed array (40 GB/s for 8 H100); we keep
    the unrounded value (the rounding is a ranking artefact: it gives 476 GB/s for 8 H100, and 300-408 GB/s for
    5-7 GPUs where nccl-tests measures 420-460, NVIDIA/nccl#1455)."""
    nch: Array = np.maximum(np.where(g.nodes > 1, NVLS_CHANNELS[g.arch][1], NVLS_CHANNELS[g.arch][0]), 1)
    heads = np.minimum(g.ppn, NVLS_MAX_ARITY)
    with np.errstate(divide="ignore", invalid="ignore"):
        intra = g.intra_bytes_per_s / (heads + 1) * NVLS_EFFICIENCY[g.arch] * (heads - 1)
    intra = intra * 2.0 if op is Op.ALL_REDUCE else intra * (g.ppn - 1) / g.ppn
    inter: Array = np.where(g.nodes > 1, g.inter_bytes_per_s, np.inf)
    if tree:
        inter = np.where(g.nodes <= 2, inter * 2, inter)
        inter = np.minimum(inter, nch * _by_nodes(PER_CH_NVLS_TREE_BW, g) * 1e9)
    bus = np.minimum(intra, inter)
    _, inter_lat = _lats(g, "nvls_tree" if tree else "nvls", _SIMPLE)
    hops = 2 * _log2i(g.nodes) if tree else np.where(g.nodes > 1, 1.0, 0.0)
    lat = HW_LAT_US[g.intra_hw]["nvls_tree" if tree else "nvls"][_SIMPLE] + hops * inter_lat
    if op is Op.ALL_REDUCE and not tree and g.arch in NVLS_STARTUP_US:
        lat = np.where(g.nodes <= 1, NVLS_STARTUP_US[g.arch], lat)
    if op is not Op.ALL_REDUCE:
        return lat, bus
    steps = 2 * (g.n - 1)
    return lat, bus * g.n / np.maximum(steps, 1)


def _candidates(op: Op, g: _Group, payload: Array) -> list[tuple[str, int, Array, Array, Array]]:
    """(algorithm, protocol, latency us, algorithm bandwidth bytes/s, enabled mask) for every pair NCCL
    would consider for ``op`` on this hardware."""
    graph = np.minimum(g.intra_bytes_per_s, g.inter_bytes_per_s)
    nch = _channels(graph)
    one = np.ones_like(g.n, dtype=bool)
    out: list[tuple[str, int, Array, Array, Array]] = []
    for p in (_LL, _LL128, _SIMPLE):
        out.append(("ring", p, *_ring(op, g, p, graph, nch, payload), one))
        if op is Op.ALL_REDUCE:
            out.append(("tree", p, *_tree(g, p, graph, nch, payload), one))
    multi = g.nodes > 1
    if g.nvls and g.arch >= 2:
        shared = (g.ppn > 1) & ~g.host
        if op is Op.ALL_REDUCE:
            out.append(("nvls", _SIMPLE, *_nvls(op, g, tree=False), shared & (~multi | g.sharp)))
            out.append(("nvls_tree", _SIMPLE, *_nvls(op, g, tree=True), shared & multi))
        else:
            out.append(("nvls", _SIMPLE, *_nvls(op, g, tree=False), shared & ~multi))
    if op is Op.ALL_REDUCE and g.sharp:
        intra, inter = _lats(g, "collnet_chain", _SIMPLE)
        lat = 2 * (g.ppn - 1) * intra + inter
        out.append(("collnet_chain", _SIMPLE, lat, graph * 0.5, multi))
    if op in (Op.REDUCE_SCATTER, Op.ALL_GATHER):
        _, inter = _lats(g, "pat", _SIMPLE)
        lat = BASE_LAT_US["pat"][_SIMPLE] + _log2i(g.nodes) * inter / 3.5 + g.n * 2.8
        out.append(("pat", _SIMPLE, lat, graph * 0.75, (g.ppn == 1) & multi))
    return out


DEDUP_MIN_SIZE = 4096
"""Inputs at least this long are priced once per run of equal (payload, n, stride) (``_runs``)."""


def _runs(
    payload_bytes: Array, n: Array, stride: Array
) -> tuple[tuple[Array, Array, Array], np.ndarray] | None:
    """Runs of consecutive equal (payload, n, stride) across 1-D inputs of one length (a scalar matches
    everything): the inputs at the first element of each run, and each element's run.

    The planner's columns repeat every layout row over the inner axes (ZeRO stage, recompute, micro-batch
    size), so a collective's arguments come in long runs; pricing one element per run gives the same values
    for a fraction of the work. None when the inputs are not 1-D of one length, are short, or the runs would
    not halve the work."""
    arrays = [np.asarray(a) for a in (payload_bytes, n, stride)]
    if any(a.ndim > 1 for a in arrays):
        return None
    vectors = [a for a in arrays if a.ndim == 1]
    size = len(vectors[0]) if vectors else 0
    if size < DEDUP_MIN_SIZE or any(len(v) != size for v in vectors):
        return None
    change = np.empty(size, dtype=bool)
    change[0] = True
    np.not_equal(vectors[0][1:], vectors[0][:-1], out=change[1:])
    for v in vectors[1:]:
        change[1:] |= v[1:] != v[:-1]
    starts = np.flatnonzero(change)
    if 2 * len(starts) > size:
        return None
    p, k, s = (a[starts] if a.ndim else a for a in arrays)
    return (p, k, s), np.cumsum(change) - 1


def _priced(
    cluster: ClusterSpec, op: Op, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float
) -> tuple[Array, Array, list[tuple[str, int]]]:
    """(seconds, index of the chosen pair, the pairs) elementwise; 0 s for groups of one."""
    runs = _runs(payload_bytes, n, stride)
    if runs is not None:
        (p, k, s), run_of = runs
        seconds, best, pairs = _priced_each(cluster, op, p, k, s, efficiency_frac)
        count = int(run_of[-1]) + 1
        return np.broadcast_to(seconds, count)[run_of], np.broadcast_to(best, count)[run_of], pairs
    return _priced_each(cluster, op, payload_bytes, n, stride, efficiency_frac)


def _priced_each(
    cluster: ClusterSpec, op: Op, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float
) -> tuple[Array, Array, list[tuple[str, int]]]:
    g = _group(cluster, n, stride)
    payload = np.asarray(payload_bytes, dtype=float)
    pairs: list[tuple[str, int]] = []
    seconds: Array = np.inf
    best: Array = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, (algo, p, lat_us, bw, enabled) in enumerate(_candidates(op, g, payload)):
            t = lat_us * 1e-6 + payload / (bw * efficiency_frac)
            t = np.where(enabled & (bw > 0), t, np.inf)
            better = t < seconds
            seconds, best = np.where(better, t, seconds), np.where(better, i, best)
            pairs.append((algo, p))
    return np.where(g.n > 1, seconds, 0.0), best, pairs


def reduce_scatter_s(
    cluster: ClusterSpec, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float = 1.0
) -> Array:
    """Reduce-scatter of a P-byte buffer over ``n`` ranks spaced ``stride`` apart (Ring, NVLS or PAT, the
    cheapest as NCCL picks it), s. Shapes broadcast; 0 where n == 1."""
    return _priced(cluster, Op.REDUCE_SCATTER, payload_bytes, n, stride, efficiency_frac)[0]


def all_gather_s(
    cluster: ClusterSpec, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float = 1.0
) -> Array:
    """All-gather into a P-byte buffer; NCCL prices it as the reduce-scatter (same algorithms), s."""
    return _priced(cluster, Op.ALL_GATHER, payload_bytes, n, stride, efficiency_frac)[0]


def all_reduce_s(
    cluster: ClusterSpec, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float = 1.0
) -> Array:
    """All-reduce of a P-byte buffer: the cheapest of Ring, Tree, NVLS, NVLS-Tree, CollNet-Chain x LL, LL128,
    Simple as NCCL's tuning model prices them, s. Shapes broadcast; 0 where n == 1."""
    return _priced(cluster, Op.ALL_REDUCE, payload_bytes, n, stride, efficiency_frac)[0]


def all_to_all_s(
    cluster: ClusterSpec, payload_bytes: Array, n: Array, stride: Array, efficiency_frac: float = 1.0
) -> Array:
    """All-to-all where each rank holds P bytes and keeps 1/n: the NVLink share and the NIC share move at
    once, the slower sets the time, plus one grouped start-up (Ring/Simple base latency and one hop), s."""
    runs = _runs(payload_bytes, n, stride)
    if runs is not None:
        (p, k, s), run_of = runs
        return np.broadcast_to(all_to_all_s(cluster, p, k, s, efficiency_frac), int(run_of[-1]) + 1)[run_of]
    g = _group(cluster, n, stride)
    payload = np.asarray(payload_bytes, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        intra = payload * (g.ppn - 1) / g.n / (g.intra_bytes_per_s * efficiency_frac)
        inter = payload * (g.n - g.ppn) / g.n / (g.nic_bytes_per_s * efficiency_frac)
    hop = np.where(g.nodes > 1, HW_LAT_US["net"]["ring"][_SIMPLE], _intra_lat(g, "ring", _SIMPLE))
    t = (BASE_LAT_US["ring"][_SIMPLE] + hop) * 1e-6 + np.maximum(np.nan_to_num(intra), np.nan_to_num(inter))
    return np.where(g.n > 1, t, 0.0)


def all_to_all_forwarded_s(
    cluster: ClusterSpec,
    token_bytes: Array,
    copies: int,
    n: Array,
    stride: Array,
    efficiency_frac: float = 1.0,
) -> Array:
    """MoE dispatch (or combine) of DeepEP's normal kernels, s: each rank holds T bytes of tokens, each token bound
    for ``copies`` ranks drawn uniformly from the n; a token crosses the network once per remote node that holds
    one of its experts and NVLink forwards it to the GPUs there (DeepSeek-V3, arXiv:2412.19437 section 3.2.2;
    DeepEP README, "asymmetric-domain bandwidth forwarding"). Network bytes: T x (nodes - 1) x (1 - (1 - 1/nodes)^k)
    (each remote node is hit with that probability); NVLink bytes: T x k x (ppn - 1) / ppn (every copy but those
    for the receiving GPU itself lands over NVLink). Both move at once; the slower sets the time, plus one grouped
    start-up as ``all_to_all_s``."""
    g = _group(cluster, n, stride)
    payload = np.asarray(token_bytes, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        remote = (g.nodes - 1) * (1.0 - (1.0 - 1.0 / g.nodes) ** copies)
        inter = payload * remote / (g.nic_bytes_per_s * efficiency_frac)
        intra = payload * copies * (g.ppn - 1) / g.ppn / (g.intra_bytes_per_s * efficiency_frac)
    hop = np.where(g.nodes > 1, HW_LAT_US["net"]["ring"][_SIMPLE], _intra_lat(g, "ring", _SIMPLE))
    t = (BASE_LAT_US["ring"][_SIMPLE] + hop) * 1e-6 + np.maximum(np.nan_to_num(intra), np.nan_to_num(inter))
    return np.where(g.n > 1, t, 0.0)


def p2p_s(cluster: ClusterSpec, payload_bytes: Array, stride: Array, efficiency_frac: float = 1.0) -> Array:
    """Point-to-point send between ranks ``stride`` apart: alpha + P / B on the level that joins them (the
    preset's latency and per-device bandwidth; on a switchless mesh level, one peer's links), s."""
    idx = p2p_level_index(cluster, stride)
    bw = np.array([lvl.bytes_per_s * float(_mesh_share(lvl, 2)) for lvl in cluster.levels]) * efficiency_frac
    lat = np.array([lvl.latency_s for lvl in cluster.levels])
    return lat[idx] + payload_bytes / bw[idx]


BUS_FACTOR = {
    Op.ALL_REDUCE: lambda n: 2 * (n - 1) / n,
    Op.REDUCE_SCATTER: lambda n: (n - 1) / n,
    Op.ALL_GATHER: lambda n: (n - 1) / n,
    Op.ALL_TO_ALL: lambda n: (n - 1) / n,
    Op.SEND_RECV: lambda n: 1.0,
}
"""nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md)."""


def collective(
    cluster: ClusterSpec,
    op: Op | str,
    payload_bytes: float,
    n: int,
    stride: int = 1,
    efficiency_frac: float = 1.0,
) -> CollectiveTime:
    """One collective on scalars, with the algorithm and protocol NCCL would pick and nccl-tests' bandwidths.

    ``op``: all_reduce, reduce_scatter, all_gather, all_to_all, send_recv (``stride`` apart, n ignored).
    Raises ValueError for an unknown op, n < 1 or a negative payload."""
    try:
        op = Op(op)
    except ValueError:
        allowed = ", ".join(o.value for o in Op)
        raise ValueError(f"collective: op must be one of {allowed}; got {op!r}") from None
    if not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"collective: n must be an integer >= 1, got {n!r}")
    if not math.isfinite(payload_bytes) or payload_bytes < 0:
        raise ValueError(f"collective: payload_bytes must be a finite number >= 0, got {payload_bytes!r}")
    if op is Op.SEND_RECV:
        seconds, algo, proto = float(p2p_s(cluster, payload_bytes, stride, efficiency_frac)), "p2p", "Simple"
    elif op is Op.ALL_TO_ALL:
        seconds, algo, proto = (
            float(all_to_all_s(cluster, payload_bytes, n, stride, efficiency_frac)),
            "p2p",
            "Simple",
        )
    else:
        t, best, pairs = _priced(cluster, op, payload_bytes, n, stride, efficiency_frac)
        algo, p = pairs[int(best)]
        seconds, proto = float(t), PROTOS[p]
    if n == 1 and op is not Op.SEND_RECV:
        return CollectiveTime(0.0, "none", "none", math.inf, math.inf)
    algbw = payload_bytes / seconds if seconds > 0 else math.inf
    return CollectiveTime(seconds, algo, proto, algbw, algbw * BUS_FACTOR[op](n))
