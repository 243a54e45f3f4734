"""SWARM parallelism: a pipeline whose stages are swarms of peers on slow, unreliable links, against the same
peers in a synchronous pipeline on a reliable fast fabric.

Source: Ryabinin, Dettmers, Diskin & Borzunov, "SWARM Parallelism: Training Large Models Can Be Surprisingly
Communication-Efficient", ICML 2023, arXiv:2301.11913, and its reference implementation
(github.com/yandex-research/swarm); the closed forms (traffic, rates, failures, rebalancing) and their sources
are in :mod:`workbench.hetero.swarm_model`. Per stage s of S and per peer of a ``PeerGroup``:

- the layers are cut as ``step.stage_layer_span`` cuts them, the embedding on the first stage, the LM head on
  the last; compute c is F + I + W of the stage on the peer's device from the step model
  (:func:`workbench.hetero.pricing.price_grid`: one device, tp = dp = 1, pp = S) with full recomputation, as a
  SWARM peer keeps nothing between a micro-batch's forward and backward; its memory is the step model's
  states plus one micro-batch (a peer that cannot hold its stage serves nothing);
- link l is the busier direction of its traffic over its bandwidth (full duplex): a middle stage receives 3 and
  sends 2 tensors of tokens x hidden values per micro-batch, 16-bit or 8-bit (``compression="int8"``);
- the peer serves 1 / max(c, l) micro-batches per second (compute-bound or link-bound), times the useful share
  left by failures (calls of t = c + (bytes in + out) / bandwidth + 4 latencies are lost at rate lambda and
  re-done) and by rejoins (a replacement downloads the stage's weights and optimizer state over its link);
- a stage serves the sum of its peers' rates (stochastic wiring), the pipeline the slowest stage;
- once per optimizer step of M = global batch / micro-batch micro-batches, a stage's k peers average its
  gradients in a ring over their slowest link (``diloco.ring_all_reduce_s``: TCP, as every internet level);
  with delayed parameter updates it runs during the next step, exposed only beyond the idle time of the stage's
  busiest link.

The square-cube law (the paper's "square-cube law of distributed training"): a stage of L_s layers of width h
computes about t L_s (72 h^2 + 12 s h) FLOPs per micro-batch of t tokens of s-token sequences (Narayanan et al.
2021, arXiv:2104.04473, eq. 3 without recomputation; 96 h^2 + 16 s h with it) and moves 3 t h values, so
link time / compute time ~ h / (L_s (72 h^2 + 12 s h)) = 1 / (72 L_s (h + s / 6)) at a fixed FLOP rate: for a
fixed link the share of time spent communicating falls as the model widens (compute ~ h^2 per token, traffic
~ h; the paper states it as n^3 compute against n^2 traffic for an n x n layer on n inputs). With the step
model's efficiency curves small layers run below their peak, so the fall starts once the GEMMs are large.

The baseline: the same peers per stage in a synchronous pipeline on a reliable ``fabric``: no failures, no
recomputation where the 1F1B in-flight micro-batches (S - s at stage s) fit, each stage's k peers take equal
shares so its slowest device sets the pace (t_s = max c / k), a step in the 1F1B closed form
sum(t) + (M - 1) max(t) plus the 2 (S - 1) hops (``comm.p2p_s``; as :mod:`workbench.search.mixed.pipeline` screens
uneven stages), and the largest stage gradient all-reduce after the flush (``comm.all_reduce_s``).

Not modelled: the trainers' own links and CPUs, queueing, the time a rebalancing move takes, and the loss:
``CONVERGENCE_CAVEAT``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from workbench.cost.comm import all_reduce_s, p2p_s
from workbench.cost.layer import ACT_BYTES
from workbench.hetero.diloco import ring_all_reduce_s
from workbench.hetero.swarm_model import (
    BYTES_PER_VALUE,
    MAX_PEERS,
    SECONDS_PER_HOUR,
    TOKEN_ID_BYTES,
    PeerGroup,
    SwarmSettings,
    available_frac,
    initial_counts,
    lost_call_frac,
    peer_rate_per_s,
    rebalance_counts,
    stage_traffic_bytes,
    useful_frac,
)
from workbench.hetero.swarm_prices import PeerPrices, peer_cluster, price_peers
from workbench.specs.hardware import NetworkLevel
from workbench.specs.limits import check_count, shown

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

__all__ = ["CONVERGENCE_CAVEAT", "PeerGroup", "SwarmEstimate", "SwarmSettings", "swarm_estimate"]

CONVERGENCE_CAVEAT = (
    "SWARM's asynchrony is not modelled for loss: stochastic wiring, delayed parameter updates, 8-bit "
    "activations and rebalancing change the optimisation, not only the time. This prices throughput; check "
    "convergence for your model (the paper trains a 1B-shared-parameter model on preemptible T4s, "
    "arXiv:2301.11913)."
)

STAGE_COLUMNS: tuple[str, ...] = (
    "stage", "first_layer", "layers", "peers", "num_peers", "compute_rate_per_s", "link_rate_per_s",
    "rate_per_s", "goodput_rate_per_s", "bound", "comm_frac", "link_bytes", "lost_call_frac",
    "memory_bytes", "usable_bytes", "fits",
)  # fmt: skip
"""Per stage: rates in micro-batches/s of the peers that can hold it (compute alone: sum of 1/c; links alone:
sum of 1/l; both; after failures and rejoins), ``bound`` ("link" when the links alone serve less than the compute
alone), ``comm_frac`` l / (c + l) and ``lost_call_frac`` 1 - e^{-lambda t} of its peers (rate-weighted),
``link_bytes`` per micro-batch in the busier direction, the largest memory of its peers and the smallest usable
memory (bytes), ``fits``: every peer assigned to it can hold it."""


# ---- the estimate -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SwarmEstimate:
    """Throughput of a SWARM pipeline and of the same peers in a synchronous pipeline on a fast fabric."""

    settings: SwarmSettings
    group_labels: tuple[str, ...]
    counts: np.ndarray
    """(groups, stages): peers of each group serving each stage (after rebalancing when asked)."""
    stages: pl.DataFrame
    """One row per stage, ``STAGE_COLUMNS``."""
    bottleneck_stage: int
    microbatches_per_s: float
    """Pipeline throughput after failures: the slowest stage's goodput rate."""
    microbatches_per_s_no_failures: float
    tokens_per_s: float
    """Tokens per second over optimizer steps, the exposed gradient averaging included."""
    step_time_s: float
    """One optimizer step of ``microbatches_per_step`` micro-batches, exposed averaging included, s."""
    microbatches_per_step: int
    exposed_average_s: float
    """Per step, the stage gradient averaging the pipeline waits for, s."""
    redone_calls_per_microbatch: float
    """Expected stage visits re-done per micro-batch because a failure interrupted them: sum of e^{lambda t} - 1."""
    lost_time_frac: float
    """Share of all peers' time lost to interrupted calls and to rejoining peers loading their stage."""
    sync_step_time_s: float
    sync_tokens_per_s: float
    sync_fits: bool
    """Every baseline stage fits its peers' memory (with or without recomputation)."""
    caveat: str = CONVERGENCE_CAVEAT
    notes: tuple[str, ...] = field(default=())

    @property
    def speedup_vs_sync(self) -> float:
        """SWARM tokens/s over the synchronous pipeline's (below 1: the fast fabric wins)."""
        return self.tokens_per_s / self.sync_tokens_per_s

    def table(self) -> pl.DataFrame:
        """The stages, one row each (``STAGE_COLUMNS``)."""
        return self.stages

    def summary(self) -> dict[str, Any]:
        """Plain JSON: the settings, per stage rows, the pipeline and the baseline."""
        s = self.settings
        return {
            "num_stages": s.num_stages,
            "micro_batch_size": s.micro_batch_size,
            "compression": s.compression,
            "failure_rate_per_hour": s.failure_rate_per_hour,
            "rebalance": s.rebalance,
            "groups": list(self.group_labels),
            "peers_per_stage": self.counts.T.tolist(),
            "stages": self.stages.to_dicts(),
            "bottleneck_stage": self.bottleneck_stage,
            "microbatches_per_s": self.microbatches_per_s,
            "microbatches_per_s_no_failures": self.microbatches_per_s_no_failures,
            "tokens_per_s": self.tokens_per_s,
            "step_time_s": self.step_time_s,
            "microbatches_per_step": self.microbatches_per_step,
            "exposed_average_s": self.exposed_average_s,
            "redone_calls_per_microbatch": self.redone_calls_per_microbatch,
            "lost_time_frac": self.lost_time_frac,
            "sync_step_time_s": self.sync_step_time_s,
            "sync_tokens_per_s": self.sync_tokens_per_s,
            "sync_fits": self.sync_fits,
            "speedup_vs_sync": self.speedup_vs_sync,
            "convergence_caveat": self.caveat,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True)
class _Peers:
    """Per (group, stage) figures of the SWARM side, shape (groups, stages)."""

    compute_s: np.ndarray
    link_s: np.ndarray
    rate: np.ndarray
    """Micro-batches/s without failures (0 where the stage does not fit the device)."""
    good: np.ndarray
    """Micro-batches/s after interrupted calls and rejoins."""
    exposure_s: np.ndarray
    lam_per_s: float
    link_bytes: np.ndarray
    """(stages,): bytes per micro-batch in the busier direction."""


def _peers(
    model: ModelSpec,
    groups: tuple[PeerGroup, ...],
    workload: Workload,
    settings: SwarmSettings,
    prices: PeerPrices,
) -> _Peers:
    num = settings.num_stages
    tokens = settings.micro_batch_size * workload.seq_len
    payload = tokens * model.hidden_size * BYTES_PER_VALUE[settings.compression]
    traffic = [
        stage_traffic_bytes(payload, tokens * TOKEN_ID_BYTES, first=s == 0, last=s == num - 1)
        for s in range(num)
    ]
    busy = np.array([max(t) for t in traffic])
    both = np.array([sum(t) for t in traffic])
    bw = np.array([g.link.bytes_per_s for g in groups])[:, None]
    lat = np.array([g.link.latency_s for g in groups])[:, None]
    compute = prices.swarm_compute_s
    link = busy[None, :] / bw
    fits = prices.swarm_memory_bytes <= prices.usable_bytes[:, None]
    rate = np.where(fits, peer_rate_per_s(compute, link), 0.0)
    lam = settings.failure_rate_per_hour / SECONDS_PER_HOUR
    exposure = compute + both[None, :] / bw + 4 * lat
    rejoin = prices.stage_params[None, :] * prices.state_bytes_per_param / bw
    good = rate * useful_frac(lam, exposure) * available_frac(lam, rejoin)
    return _Peers(
        compute_s=compute,
        link_s=link,
        rate=rate,
        good=good,
        exposure_s=exposure,
        lam_per_s=lam,
        link_bytes=busy,
    )


def _weighted(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per stage, the mean of ``values`` (groups, stages) weighted by ``weights`` (0 where no weight)."""
    total = weights.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, (values * weights).sum(axis=0) / total, 0.0)


def _stage_frame(
    prices: PeerPrices, peers: _Peers, counts: np.ndarray, labels: tuple[str, ...]
) -> pl.DataFrame:
    flow = peers.good * counts
    used = counts > 0
    memory = np.where(used, prices.swarm_memory_bytes, 0.0).max(axis=0)
    usable = np.where(used, prices.usable_bytes[:, None], np.inf).min(axis=0)
    serving = np.where(peers.rate > 0, counts, 0)
    comp_rate = (serving / peers.compute_s).sum(axis=0)
    link_rate = (serving / peers.link_s).sum(axis=0)
    rows = {
        "stage": list(range(counts.shape[1])),
        "first_layer": list(prices.first_layer),
        "layers": list(prices.layers),
        "peers": [
            " + ".join(f"{n} x {lab}" for n, lab in zip(counts[:, s], labels, strict=True) if n)
            for s in range(counts.shape[1])
        ],
        "num_peers": counts.sum(axis=0).tolist(),
        "compute_rate_per_s": comp_rate.tolist(),
        "link_rate_per_s": link_rate.tolist(),
        "rate_per_s": (peers.rate * counts).sum(axis=0).tolist(),
        "goodput_rate_per_s": flow.sum(axis=0).tolist(),
        "bound": ["link" if lk < cp else "compute" for lk, cp in zip(link_rate, comp_rate, strict=True)],
        "comm_frac": _weighted(peers.link_s / (peers.link_s + peers.compute_s), flow).tolist(),
        "link_bytes": peers.link_bytes.tolist(),
        "lost_call_frac": _weighted(lost_call_frac(peers.lam_per_s, peers.exposure_s), flow).tolist(),
        "memory_bytes": memory.tolist(),
        "usable_bytes": usable.tolist(),
        "fits": np.all(~used | (prices.swarm_memory_bytes <= prices.usable_bytes[:, None]), axis=0).tolist(),
    }
    return pl.DataFrame(rows).select(STAGE_COLUMNS)


def _averaging_s(groups: tuple[PeerGroup, ...], counts: np.ndarray, payload: np.ndarray) -> np.ndarray:
    """Per stage, the ring all-reduce of ``payload`` bytes over its peers on the slowest of their links."""
    out = np.zeros(counts.shape[1])
    for s in range(counts.shape[1]):
        present = [g for g, n in zip(groups, counts[:, s], strict=True) if n]
        link = NetworkLevel(
            name="peer links",
            bytes_per_s=min(g.link.bytes_per_s for g in present),
            latency_s=max(g.link.latency_s for g in present),
        )
        out[s] = ring_all_reduce_s(float(payload[s]), int(counts[:, s].sum()), link)
    return out


def swarm_estimate(
    model: ModelSpec,
    groups: tuple[PeerGroup, ...] | list[PeerGroup],
    workload: Workload,
    settings: SwarmSettings,
    *,
    fabric: NetworkLevel,
    calibration: Calibration | str | None = None,
) -> SwarmEstimate:
    """Price a SWARM pipeline of ``settings.num_stages`` stages over ``groups`` of peers, and the same peers in
    a synchronous pipeline on ``fabric`` (module docstring). ``calibration``: a Calibration, a name or a path
    (default ``default``). Raises ValueError for a MoE model (stages are priced for dense models), more stages
    than layers or than peers, a batch the micro-batch does not divide, or a stage no assigned peer can hold."""
    from workbench.presets.calibration import Calibration as _Cal
    from workbench.presets.calibration import load_calibration

    groups = tuple(groups)
    m = _checked(model, groups, workload, settings)
    cal = calibration if isinstance(calibration, _Cal) else load_calibration(calibration or "default")
    prices = price_peers(model, groups, workload, settings, cal)
    peers = _peers(model, groups, workload, settings, prices)
    counts = initial_counts(tuple(g.count for g in groups), settings.num_stages)
    if settings.rebalance:
        counts = rebalance_counts(peers.good, counts)
    labels = tuple(g.device.id for g in groups)
    stages = _stage_frame(prices, peers, counts, labels)
    flow = (peers.good * counts).sum(axis=0)
    if not flow.min() > 0:
        bad = int(np.argmin(flow))
        raise ValueError(
            f"swarm_estimate: no peer assigned to stage {bad} ({prices.layers[bad]} layers) can hold it "
            f"({stages['memory_bytes'][bad] / 2**30:.1f} GiB); use more stages or rebalance"
        )
    rate = float(flow.min())
    exposed = _exposed_average_s(groups, settings, prices, peers, counts, rate, m / rate)
    tokens = settings.micro_batch_size * workload.seq_len
    share = peers.good * counts / flow
    sync_s, sync_fits = _synchronous_step_s(model, groups, workload, settings, prices, counts, fabric, cal, m)
    return SwarmEstimate(
        settings=settings,
        group_labels=labels,
        counts=counts,
        stages=stages,
        bottleneck_stage=int(np.argmin(flow)),
        microbatches_per_s=rate,
        microbatches_per_s_no_failures=float((peers.rate * counts).sum(axis=0).min()),
        tokens_per_s=m * tokens / (m / rate + exposed),
        step_time_s=m / rate + exposed,
        microbatches_per_step=m,
        exposed_average_s=exposed,
        redone_calls_per_microbatch=float((share * np.expm1(peers.lam_per_s * peers.exposure_s)).sum()),
        lost_time_frac=1.0 - float(flow.sum() / (peers.rate * counts).sum()),
        sync_step_time_s=sync_s,
        sync_tokens_per_s=m * tokens / sync_s,
        sync_fits=sync_fits,
        notes=_idle_notes(prices, peers, counts, labels),
    )


def _checked(
    model: ModelSpec, groups: tuple[PeerGroup, ...], workload: Workload, settings: SwarmSettings
) -> int:
    """Micro-batches per optimizer step, after the checks ``swarm_estimate`` documents."""
    where = "swarm_estimate"
    if not groups or not all(isinstance(g, PeerGroup) for g in groups):
        raise ValueError(f"{where}: groups needs at least one PeerGroup, got {shown(groups)}")
    if model.is_moe:
        raise ValueError(
            f"{where}: {model.name} is a MoE model; SWARM stages are priced for dense models only"
        )
    check_count(where, "num_stages", settings.num_stages, maximum=model.num_layers)
    total = sum(g.count for g in groups)
    check_count(where, "peers in all", total, maximum=MAX_PEERS)
    if total < settings.num_stages:
        raise ValueError(
            f"{where}: {total} peers cannot serve {settings.num_stages} stages (one each at least)"
        )
    if workload.global_batch_size % settings.micro_batch_size:
        raise ValueError(
            f"{where}: global batch {workload.global_batch_size} is not a multiple of micro_batch_size "
            f"{settings.micro_batch_size}"
        )
    return workload.global_batch_size // settings.micro_batch_size


def _exposed_average_s(
    groups: tuple[PeerGroup, ...],
    settings: SwarmSettings,
    prices: PeerPrices,
    peers: _Peers,
    counts: np.ndarray,
    rate: float,
    step_s: float,
) -> float:
    """Per step, the gradient averaging the pipeline waits for: the slowest stage's ring, or with delayed
    updates what of it the idle time of the stage's busiest link cannot hide. A peer's link is busy
    l / max(c, l) of its time at full load (lost attempts included); the stage runs at ``rate`` / its capacity."""
    average = _averaging_s(groups, counts, prices.stage_params * settings.average_bytes_per_param)
    if settings.delayed_updates:
        flow = (peers.good * counts).sum(axis=0)
        busy = np.where(counts > 0, rate / flow * peers.link_s * peers.rate, 0.0).max(axis=0)
        average = np.maximum(0.0, average - step_s * (1.0 - busy))
    return float(average.max())


def _synchronous_step_s(
    model: ModelSpec,
    groups: tuple[PeerGroup, ...],
    workload: Workload,
    settings: SwarmSettings,
    prices: PeerPrices,
    counts: np.ndarray,
    fabric: NetworkLevel,
    cal: Calibration,
    m: int,
) -> tuple[float, bool]:
    """(step time, fits) of the baseline of the module docstring."""
    num = settings.num_stages
    usable = prices.usable_bytes[:, None]
    plain = prices.sync_memory_bytes <= usable
    compute = np.where(plain, prices.sync_compute_s, prices.swarm_compute_s)
    fits = bool(np.all((plain | (prices.swarm_memory_bytes <= usable))[counts > 0]))
    per = np.where(counts > 0, compute, 0.0).max(axis=0) / counts.sum(axis=0)
    bridge = peer_cluster(groups[0].device, fabric, num=max(2, int(counts.sum(axis=0).max())))
    eff = cal.framework.collective_efficiency_frac
    payload = settings.micro_batch_size * workload.seq_len * model.hidden_size * ACT_BYTES
    hop = float(p2p_s(bridge, payload, 1, eff)) if num > 1 else 0.0
    grads = prices.stage_params * settings.average_bytes_per_param
    reduce = max(float(all_reduce_s(bridge, grads[s], int(counts[:, s].sum()), 1, eff)) for s in range(num))
    return float(per.sum() + (m - 1) * per.max() + 2 * (num - 1) * hop + reduce), fits


def _idle_notes(
    prices: PeerPrices, peers: _Peers, counts: np.ndarray, labels: tuple[str, ...]
) -> tuple[str, ...]:
    """One note per (group, stage) whose assigned peers cannot hold the stage and so serve nothing."""
    return tuple(
        f"{counts[g, s]} x {labels[g]} on stage {s} cannot hold it ({prices.swarm_memory_bytes[g, s] / 2**30:.1f} "
        f"GiB > {prices.usable_bytes[g] / 2**30:.1f} GiB usable) and serve nothing"
        for g, s in zip(*np.nonzero((counts > 0) & (peers.rate == 0)), strict=True)
    )
