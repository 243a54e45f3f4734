"""SWARM parallelism's closed forms: the peers and settings, a peer's traffic and rate, failures, rebalancing.

Used by :mod:`workbench.hetero.swarm` (which prices the stages with the step model and assembles the estimate);
every function here is a pure closed form over numbers or numpy arrays. Sources: Ryabinin, Dettmers, Diskin &
Borzunov, "SWARM Parallelism: Training Large Models Can Be Surprisingly Communication-Efficient", ICML 2023,
arXiv:2301.11913, and its reference implementation (github.com/yandex-research/swarm, ``swarm/pipeline/src/moe``):

- Traffic (``stage_traffic_bytes``): the trainer calls a stage peer twice per micro-batch; the forward call
  brings the stage's inputs and returns its outputs, the backward call brings the inputs again with the output
  gradients and returns the input gradients (``client/balanced_expert.py``, ``_BalancedRemoteModuleCall``; the
  peer re-runs the forward inside the backward, ``server/expert_backend.py``, ``ExpertBackend.backward``).
- Rate (``peer_rate_per_s``): a peer batches the requests it holds, so its transfers overlap other micro-batches'
  compute: 1 / max(compute, link) micro-batches per second. Stochastic wiring sends each micro-batch to a peer of
  the stage in proportion to measured throughput (``BalancedRemoteExpert``), so a stage serves the sum of rates.
- Failures: a peer fails at rate lambda, a Poisson process. A call interrupted by a failure is re-sent to another
  peer (the retry loop of ``_BalancedRemoteModuleCall``); a call of length t is interrupted with probability
  1 - e^{-lambda t} (``lost_call_frac``). Restarted until it completes, it takes E[T] = E[min(X, t)] + P(X < t)
  E[T] with X ~ Exp(lambda), so E[T] = (e^{lambda t} - 1) / lambda and the useful share of a peer's time is
  lambda t / (e^{lambda t} - 1) (``useful_frac``). A replacement first loads the stage's state for d seconds (the
  paper's Figure 2: a joining peer downloads the stage's parameters and statistics from its peers); a peer slot
  then serves Exp(lambda), loads d, and so on: it serves 1 / (1 + lambda d) of the time (renewal reward,
  ``available_frac``).
- Rebalancing (``rebalance_counts``): the paper's adaptive swarm rebalancing moves peers to the slowest stage;
  here one peer at a time to the slowest stage it can hold, the peer whose move leaves the best sorted stage
  rates, while they improve (leximin); a peer that cannot hold its stage moves too. Without it the peers are
  dealt to the stages in turn (``initial_counts``). A move's download time is not counted (steady state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.cost.layer import ACT_BYTES
from workbench.specs.estimate import DEFAULT_HEADROOM_FRAC
from workbench.specs.hardware import DeviceSpec, NetworkLevel
from workbench.specs.limits import check_count, check_real, shown

BYTES_PER_VALUE: dict[str, float] = {"none": ACT_BYTES, "int8": 1.0 + 4.0 / 4096}
"""Bytes per activation value on the wire: 16-bit, or SWARM's 8-bit blockwise quantisation
(``compression/quantization.py``, ``BlockwiseQuantization``: one byte per value and an fp32 absmax per block of
4,096 values, bitsandbytes' ``quantize_blockwise`` default; its 256-entry codebook is not counted)."""
TOKEN_ID_BYTES = 8.0
"""A token id or label on the wire: int64, torch's index dtype."""
SECONDS_PER_HOUR = 3600.0
MAX_PEERS = 10_000
"""Peers in one swarm (the paper's largest run used 400 T4s); bounds the rebalancing search."""


@dataclass(frozen=True, kw_only=True)
class PeerGroup:
    """Peers of one device kind, each on its own link."""

    device: DeviceSpec
    count: int
    """Peers alive on average (a preempted one is replaced). 1..``MAX_PEERS``."""
    link: NetworkLevel
    """Each peer's link to the others: bandwidth per direction (full duplex) and latency per message."""

    def __post_init__(self) -> None:
        check_count("PeerGroup", "count", self.count, maximum=MAX_PEERS)
        if not isinstance(self.device, DeviceSpec) or not isinstance(self.link, NetworkLevel):
            raise ValueError(
                f"PeerGroup: device must be a DeviceSpec and link a NetworkLevel, got {shown(self)}"
            )


@dataclass(frozen=True, kw_only=True)
class SwarmSettings:
    """What the user chooses (see :mod:`workbench.hetero.swarm`)."""

    num_stages: int
    """S: pipeline stages, 1..the model's layers (checked by ``swarm_estimate``)."""
    micro_batch_size: int = 1
    """Sequences per micro-batch."""
    compression: str = "none"
    """Activations and gradients on the wire: one of ``BYTES_PER_VALUE``."""
    failure_rate_per_hour: float = 0.0
    """lambda: failures (preemptions) per peer per hour. >= 0."""
    rebalance: bool = False
    """Move peers to the slowest stage (SWARM's adaptive rebalancing)."""
    delayed_updates: bool = True
    """Average a stage's gradients during the next step's micro-batches (delayed parameter updates)."""
    average_bytes_per_param: float = 4.0
    """Gradient bytes per parameter averaged within a stage (fp32), SWARM and the baseline alike."""
    headroom_frac: float = DEFAULT_HEADROOM_FRAC
    """Share of every device's memory kept free."""

    def __post_init__(self) -> None:
        check_count("SwarmSettings", "num_stages", self.num_stages, maximum=4096)
        check_count("SwarmSettings", "micro_batch_size", self.micro_batch_size, maximum=2**16)
        if self.compression not in BYTES_PER_VALUE:
            raise ValueError(
                f"SwarmSettings: compression must be one of {', '.join(BYTES_PER_VALUE)}, got {shown(self.compression)}"
            )
        check_real(
            "SwarmSettings", "failure_rate_per_hour", self.failure_rate_per_hour, min_open=False, maximum=1e4
        )
        check_real("SwarmSettings", "average_bytes_per_param", self.average_bytes_per_param, maximum=16.0)
        check_real(
            "SwarmSettings", "headroom_frac", self.headroom_frac, min_open=False, maximum=1.0, max_open=True
        )


def stage_traffic_bytes(
    payload_bytes: float, ids_bytes: float, *, first: bool, last: bool
) -> tuple[float, float]:
    """(bytes in, bytes out) of one peer per micro-batch: forward call inputs in, outputs out; backward call
    inputs and output gradients in, input gradients out. ``payload_bytes``: one tokens x hidden tensor;
    ``ids_bytes``: the micro-batch's token ids (the first stage's inputs) or labels (the last stage's)."""
    inputs = (ids_bytes if first else payload_bytes) + (ids_bytes if last else 0.0)
    outputs = 0.0 if last else payload_bytes  # the last stage returns a scalar loss (and takes its gradient)
    grad_inputs = 0.0 if first else payload_bytes  # token ids have no gradient
    return 2 * inputs + outputs, outputs + grad_inputs


def peer_rate_per_s(compute_s: Any, link_s: Any) -> Any:
    """Micro-batches per second of a peer whose transfers overlap its compute: 1 / max(c, l)."""
    return 1.0 / np.maximum(compute_s, link_s)


def lost_call_frac(failures_per_s: Any, exposure_s: Any) -> Any:
    """Share of calls a Poisson failure process of ``failures_per_s`` interrupts during ``exposure_s``: 1 - e^{-lambda t}."""
    return -np.expm1(-np.asarray(failures_per_s) * np.asarray(exposure_s))


def useful_frac(failures_per_s: Any, exposure_s: Any) -> Any:
    """Useful share of a peer's time when interrupted calls restart: lambda t / (e^{lambda t} - 1) (1 at 0)."""
    x = np.asarray(failures_per_s, dtype=float) * np.asarray(exposure_s, dtype=float)
    # e^x overflows to inf beyond x ~ 709: x / inf = 0 is the limit, so the overflow is no error
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(x > 0, x / np.expm1(x), 1.0)


def available_frac(failures_per_s: Any, rejoin_s: Any) -> Any:
    """Share of time a peer slot serves when each failure costs ``rejoin_s`` of loading: 1 / (1 + lambda d)."""
    return 1.0 / (1.0 + np.asarray(failures_per_s) * np.asarray(rejoin_s))


def initial_counts(group_counts: tuple[int, ...], num_stages: int) -> np.ndarray:
    """Peers dealt to the stages in turn, group after group: (groups, stages) counts."""
    out = np.zeros((len(group_counts), num_stages), dtype=int)
    dealt = 0
    for g, n in enumerate(group_counts):
        idx = (dealt + np.arange(n)) % num_stages
        np.add.at(out[g], idx, 1)
        dealt += n
    return out


def rebalance_counts(rates: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Move peers to the slowest stage while the stage rates, sorted ascending, improve (leximin). Each move
    takes one peer of some group from some stage (never its last peer) to the slowest stage that group can
    serve (rate > 0) other than its own, the move that leaves the best sorted rates. ``rates``: (groups, stages)
    micro-batches/s of one peer; ``counts``: (groups, stages). Terminates: every move strictly improves."""
    counts = counts.copy()
    best = np.sort((rates * counts).sum(axis=0))
    for _ in range(int(counts.sum()) * counts.shape[1] + 1):
        total = (rates * counts).sum(axis=0)
        move = None
        for g, s in zip(*np.nonzero(counts), strict=True):
            targets = np.where((rates[g] > 0) & (np.arange(total.size) != s), total, np.inf)
            if counts[:, s].sum() <= 1 or not np.isfinite(targets.min()):
                continue
            to = int(np.argmin(targets))
            trial = total.copy()
            trial[s] -= rates[g, s]
            trial[to] += rates[g, to]
            key = np.sort(trial)
            if _leximin_better(key, best):
                best, move = key, (g, s, to)
        if move is None:
            return counts
        g, s, to = move
        counts[g, s] -= 1
        counts[g, to] += 1
    return counts


def _leximin_better(a: np.ndarray, b: np.ndarray, rel: float = 1e-9) -> bool:
    """``a`` > ``b`` in lexicographic order of sorted rates, ignoring differences below ``rel`` (rounding)."""
    tol = rel * max(float(np.max(np.abs(b))), 1e-300)
    for x, y in zip(a, b, strict=True):
        if abs(x - y) > tol:
            return bool(x > y)
    return False
