"""Low-bandwidth training: DiLoCo-style local SGD priced against synchronous data parallelism over the same link.

DiLoCo (Douillard et al. 2023, arXiv:2311.08105, Algorithm 1): W workers (islands of well-connected devices,
each running an ordinary plan) take H inner optimizer steps on their own data, then average their
pseudo-gradients (parameter deltas) over the slow level and apply an outer optimizer step. Per H inner steps a
worker therefore sends one all-reduce of the model where synchronous data parallelism sends H all-reduces of the
gradients: the traffic falls by H x (gradient bytes per parameter / pseudo-gradient bytes per parameter), e.g.
H = 500 with fp32 on both sides (DiLoCo's 500x), or H = 100 with int8 pseudo-gradients against fp32 gradients
(INTELLECT-1, arXiv:2412.01152: 400x).

Overlap of the outer all-reduce (``overlap``):

- ``blocking``: the workers wait for it (DiLoCo's Algorithm 1);
- ``eager``: it runs during the next H inner steps and is applied one outer step late (eager updates, Kale,
  Douillard & Donchev 2025, arXiv:2502.12996): exposed only beyond H inner steps;
- ``streaming``: the model is cut into ``fragments`` synchronised in turn, each overlapping ``overlap_steps``
  inner steps (Streaming DiLoCo, Douillard et al. 2025, arXiv:2501.18512): each fragment's all-reduce is exposed
  beyond that overlap, and the peak bandwidth falls by the number of fragments.

Pseudo-gradients cross the slow level as a ring all-reduce over the W workers, ``ring_all_reduce_s``: 2(W-1)
steps of alpha + P / (W B) (Thakur, Rabenseifner & Gropp 2005) with the level's own latency and per-worker
bandwidth. Cross-datacenter and internet rings run over TCP (gloo, hivemind, PRIME's int8 ring), not NCCL, so
NCCL's tuning model of :mod:`workbench.cost.comm` is not used on this level. Quantisation and the outer
optimizer's step are not timed (INTELLECT-1 ran them on the CPUs).

Convergence caveat: H, the compression and the overlap change the optimisation, not only the time. This module
prices the time and the traffic of the H a user chooses; it does not pick H for loss, and says so in
``CONVERGENCE_CAVEAT`` (DiLoCo's abstract reports 8 workers on C4 matching fully synchronous training while
communicating 500 times less; its ablations vary H and the number of workers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from workbench.specs.hardware import NetworkLevel
from workbench.specs.limits import check_count, check_real

PAYLOAD_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.0}
"""Bytes per parameter of the exchanged pseudo-gradients by compression (int8: INTELLECT-1's quantised ring;
fp16: OpenDiLoCo, arXiv:2407.07852, reports no loss from it)."""

OVERLAP_MODES: tuple[str, ...] = ("blocking", "eager", "streaming")

CONVERGENCE_CAVEAT = (
    "H is your choice, not optimised for loss: more inner steps, more workers or coarser compression save "
    "time and traffic but can cost model quality (DiLoCo, arXiv:2311.08105, matched synchronous training with 8 "
    "workers at H = 500 on C4; check it for your model and data)."
)


def ring_all_reduce_s(payload_bytes: float, num_workers: int, link: NetworkLevel) -> float:
    """Ring all-reduce of ``payload_bytes`` over ``num_workers`` on ``link``: 2(n-1) x (alpha + P/(n B)), s.

    Source: Thakur, Rabenseifner & Gropp, IJHPCA 2005 (alpha-beta model). 0 for one worker. Raises ValueError
    for n < 1 or a negative payload."""
    check_count("ring_all_reduce_s", "num_workers", num_workers, maximum=2**20)
    check_real("ring_all_reduce_s", "payload_bytes", payload_bytes, min_open=False)
    if num_workers == 1:
        return 0.0
    steps = 2 * (num_workers - 1)
    return steps * (link.latency_s + payload_bytes / (num_workers * link.bytes_per_s))


@dataclass(frozen=True, kw_only=True)
class DiLoCoSettings:
    """The user's choices (see the module docstring)."""

    inner_steps: int
    """H: inner optimizer steps between outer synchronisations. >= 1."""
    num_workers: int
    """W: workers (islands) that average their pseudo-gradients. >= 1."""
    compression: str = "fp32"
    """Pseudo-gradient precision on the wire: one of ``PAYLOAD_BYTES``."""
    overlap: str = "blocking"
    """One of ``OVERLAP_MODES``."""
    fragments: int = 1
    """``streaming``: the model is synchronised in this many fragments, in turn. >= 1."""
    overlap_steps: int = 1
    """``streaming``: inner steps each fragment's all-reduce may overlap (Streaming DiLoCo's tau). 1..H."""
    dp_grad_bytes_per_param: float = 4.0
    """Gradient bytes per parameter of the synchronous data-parallel baseline (fp32 gradients, the baseline
    INTELLECT-1's 400x is against)."""

    def __post_init__(self) -> None:
        for name in ("inner_steps", "num_workers", "fragments", "overlap_steps"):
            check_count("DiLoCoSettings", name, getattr(self, name), maximum=2**20)
        if self.compression not in PAYLOAD_BYTES:
            raise ValueError(
                f"DiLoCoSettings: compression must be one of {', '.join(PAYLOAD_BYTES)}, got {self.compression!r}"
            )
        if self.overlap not in OVERLAP_MODES:
            raise ValueError(
                f"DiLoCoSettings: overlap must be one of {', '.join(OVERLAP_MODES)}, got {self.overlap!r}"
            )
        if self.overlap == "streaming" and self.fragments > self.inner_steps:
            raise ValueError(
                f"DiLoCoSettings: {self.fragments} fragments need at least as many inner steps (H = {self.inner_steps})"
            )
        if self.overlap == "streaming" and self.overlap_steps > self.inner_steps:
            raise ValueError(
                f"DiLoCoSettings: overlap_steps (tau = {self.overlap_steps}) must be <= inner_steps (H = "
                f"{self.inner_steps}): a fragment's all-reduce must land before the fragment is synchronised again"
            )
        check_real("DiLoCoSettings", "dp_grad_bytes_per_param", self.dp_grad_bytes_per_param, maximum=16.0)


@dataclass(frozen=True, kw_only=True)
class DiLoCoEstimate:
    """Time and traffic of DiLoCo and of synchronous data parallelism on the same workers and link."""

    settings: DiLoCoSettings
    inner_step_s: float
    """One inner step of one worker (its own plan's step time), s."""
    outer_sync_s: float
    """One all-reduce of the whole model's pseudo-gradients over the link, s."""
    exposed_sync_s: float
    """Of the outer synchronisation, what the workers wait for per outer step, s."""
    outer_step_s: float
    """H inner steps plus the exposed synchronisation, s."""
    tokens_per_s: float
    """All workers together."""
    payload_bytes: float
    """One outer all-reduce's buffer (parameters x compressed bytes)."""
    bytes_sent_per_outer_step: float
    """What one worker sends per outer step (ring: 2(W-1)/W x payload)."""
    sync_dp_step_s: float
    """A synchronous data-parallel step over the same link: the inner step plus the gradient all-reduce, s."""
    sync_dp_tokens_per_s: float
    communication_reduction: float
    """Bytes synchronous data parallelism sends per H steps over those DiLoCo sends per outer step."""
    caveat: str = CONVERGENCE_CAVEAT
    notes: tuple[str, ...] = ()
    """Assumptions and warnings a user should read besides the caveat (``workbench.specs.estimate.Result``)."""

    @property
    def time_per_token_s(self) -> float:
        return 1.0 / self.tokens_per_s

    @property
    def speedup_vs_sync_dp(self) -> float:
        return self.tokens_per_s / self.sync_dp_tokens_per_s

    def summary(self) -> dict[str, Any]:
        """Plain JSON: the settings, DiLoCo's step, traffic and tokens/s, synchronous data parallelism's."""
        s = self.settings
        return {
            "inner_step_s": self.inner_step_s,
            "inner_steps": s.inner_steps,
            "num_workers": s.num_workers,
            "compression": s.compression,
            "overlap": s.overlap,
            "outer_sync_s": self.outer_sync_s,
            "exposed_sync_s": self.exposed_sync_s,
            "outer_step_s": self.outer_step_s,
            "tokens_per_s": self.tokens_per_s,
            "time_per_token_s": self.time_per_token_s,
            "payload_bytes": self.payload_bytes,
            "bytes_sent_per_outer_step": self.bytes_sent_per_outer_step,
            "sync_dp_step_s": self.sync_dp_step_s,
            "sync_dp_tokens_per_s": self.sync_dp_tokens_per_s,
            "speedup_vs_sync_dp": self.speedup_vs_sync_dp,
            "communication_reduction": self.communication_reduction,
            "convergence_caveat": self.caveat,
        }

    def table(self) -> pl.DataFrame:
        """DiLoCo and synchronous data parallelism side by side, one row each: mode, step_s (per inner step),
        tokens_per_s, time_per_token_s, exposed_sync_s (per ``exposed_sync_steps`` inner steps),
        exposed_sync_steps."""
        h = self.settings.inner_steps
        return pl.DataFrame(
            {
                "mode": ["DiLoCo", "synchronous DP"],
                "step_s": [self.outer_step_s / h, self.sync_dp_step_s],
                "tokens_per_s": [self.tokens_per_s, self.sync_dp_tokens_per_s],
                "time_per_token_s": [self.time_per_token_s, 1.0 / self.sync_dp_tokens_per_s],
                "exposed_sync_s": [self.exposed_sync_s, self.sync_dp_step_s - self.inner_step_s],
                "exposed_sync_steps": [h, 1],
            }
        )


def exposed_sync_s(
    settings: DiLoCoSettings, payload_bytes: float, inner_step_s: float, link: NetworkLevel
) -> float:
    """Per outer step, the seconds the workers wait for the outer synchronisation (module docstring)."""
    n = settings.num_workers
    if settings.overlap == "blocking":
        return ring_all_reduce_s(payload_bytes, n, link)
    if settings.overlap == "eager":
        return max(0.0, ring_all_reduce_s(payload_bytes, n, link) - settings.inner_steps * inner_step_s)
    piece = ring_all_reduce_s(payload_bytes / settings.fragments, n, link)
    return settings.fragments * max(0.0, piece - settings.overlap_steps * inner_step_s)


def diloco_estimate(
    *,
    num_parameters: float,
    inner_step_s: float,
    tokens_per_inner_step: float,
    link: NetworkLevel,
    settings: DiLoCoSettings,
) -> DiLoCoEstimate:
    """Price DiLoCo for workers whose inner step takes ``inner_step_s`` on ``tokens_per_inner_step`` tokens each
    (e.g. a homogeneous ``Estimate`` of one worker), synchronising ``num_parameters`` over ``link`` (per-worker
    bandwidth and latency of the slow level). Raises ValueError for non-positive inputs."""
    where = "diloco_estimate"
    check_real(where, "num_parameters", num_parameters)
    check_real(where, "inner_step_s", inner_step_s)
    check_real(where, "tokens_per_inner_step", tokens_per_inner_step)
    n, h = settings.num_workers, settings.inner_steps
    payload = num_parameters * PAYLOAD_BYTES[settings.compression]
    exposed = exposed_sync_s(settings, payload, inner_step_s, link)
    outer = h * inner_step_s + exposed
    tokens = n * tokens_per_inner_step
    dp_step = inner_step_s + ring_all_reduce_s(num_parameters * settings.dp_grad_bytes_per_param, n, link)
    ring_share = 2 * (n - 1) / n if n > 1 else 0.0
    return DiLoCoEstimate(
        settings=settings,
        inner_step_s=inner_step_s,
        outer_sync_s=ring_all_reduce_s(payload, n, link),
        exposed_sync_s=exposed,
        outer_step_s=outer,
        tokens_per_s=h * tokens / outer,
        payload_bytes=payload,
        bytes_sent_per_outer_step=ring_share * payload,
        sync_dp_step_s=dp_step,
        sync_dp_tokens_per_s=tokens / dp_step,
        communication_reduction=h * settings.dp_grad_bytes_per_param / PAYLOAD_BYTES[settings.compression],
    )
