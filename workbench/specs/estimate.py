"""What every backend returns: ``Estimate`` (with its ``StepBreakdown``), the ``Backend`` protocol, and ``Result``:
what the faces read from a result of any mode.

Tables are polars DataFrames (polars is imported lazily so ``import workbench`` stays light):

- ``timeline``: one row per action: rank (pipeline rank, int), stage (int), chunk (int), microbatch (int),
  op (str: F, B, I, W, or ``comm``/``wait`` kinds), start_s, end_s (float, seconds from the step start).
- ``memory``: one row per pipeline rank (ranks that differ only in their dp/tp/cp/ep coordinates hold the
  same memory): rank (int), then ``MEMORY_COLUMNS`` in bytes, then total_bytes.
- ``activation_timeline`` (optional): rank, time_s, activation_bytes: live activation memory over the step.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import polars as pl

    from workbench.specs.band import ErrorBand
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan, Workload

MEMORY_COLUMNS: tuple[str, ...] = (
    "parameters_bytes",
    "gradients_bytes",
    "optimizer_states_bytes",
    "activations_bytes",
    "buffers_bytes",
    "other_bytes",
)
"""Memory kinds of one rank at its peak, bytes. buffers: communication and ZeRO-3 gather buffers;
other: allocator fragmentation allowance and framework overhead."""

TIMELINE_COLUMNS: tuple[str, ...] = ("rank", "stage", "chunk", "microbatch", "op", "start_s", "end_s")

DEFAULT_HEADROOM_FRAC = 0.05
"""The share of device memory a plan must leave free (80 GiB -> 76 GiB usable): the one rule by which a plan fits, in
``Estimate.fits``, ``workbench estimate`` and ``plan --headroom``, the search, the app and the report's usable line.

The memory model already counts the CUDA context, NCCL/cuBLAS workspaces and a typical share of caching-allocator
fragmentation (``FrameworkProfile.context_bytes``, ``fragmentation_frac``); the headroom covers what it cannot
see: its own error (peak memory MAPE 5.4 % on the published runs, README "How good are the numbers"), and
fragmentation and transient peaks beyond the typical share, which PyTorch's CUDA notes describe as memory
reserved by the caching allocator but unusable for a large block ("Memory management", ``expandable_segments``:
https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf). A plan
picked at 99.8 % of the HBM runs out of memory on the first step that deviates."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepBreakdown:
    """Where one optimizer step's time goes, seconds; the parts add up to the step time."""

    compute_s: float
    """Forward, backward and recompute on the critical path."""
    exposed_tp_comm_s: float = 0.0
    exposed_cp_comm_s: float = 0.0
    exposed_ep_comm_s: float = 0.0
    exposed_pp_comm_s: float = 0.0
    exposed_dp_comm_s: float = 0.0
    """Gradient reduction (and ZeRO-3 gathers) not hidden behind the backward pass."""
    bubble_s: float = 0.0
    """Pipeline idle time on the critical rank."""
    optimizer_s: float = 0.0
    overlapped_tp_comm_s: float = 0.0
    """Communication hidden behind compute, by kind (not part of the step time; see
    :mod:`workbench.cost.overlap`). pp: pipeline sends that did not delay the critical rank."""
    overlapped_cp_comm_s: float = 0.0
    overlapped_ep_comm_s: float = 0.0
    overlapped_pp_comm_s: float = 0.0
    overlapped_dp_comm_s: float = 0.0
    """Hidden gradient reduction, weight gathers and ZeRO-3 per-layer traffic."""

    @property
    def total_s(self) -> float:
        """The step time: every part but the overlapped ones."""
        return sum(self.as_dict().values())

    def as_dict(self) -> dict[str, float]:
        """The parts that add up to the step time, seconds."""
        return {
            f.name: float(getattr(self, f.name)) for f in fields(self) if not f.name.startswith("overlapped_")
        }

    def overlapped(self) -> dict[str, float]:
        """Hidden communication by kind (tp, cp, ep, pp, dp), seconds."""
        return {
            f.name.removeprefix("overlapped_").removesuffix("_comm_s"): float(getattr(self, f.name))
            for f in fields(self)
            if f.name.startswith("overlapped_")
        }


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """The cost of one plan from one backend; predicted and measured estimates share this shape."""

    backend: str
    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    plan: ParallelPlan
    step_time_s: float
    """Wall time of one optimizer step."""
    tokens_per_s: float
    """Trained tokens per second over the whole cluster."""
    mfu: float
    """Model FLOPs utilisation (PaLM's definition: model FLOPs of ``ModelSpec.model_flop_per_token``, no
    recompute, over the dense peak of the workload's dtype)."""
    hfu: float
    """Hardware FLOPs utilisation: recompute counted."""
    model_flop_per_s_per_device: float
    """Achieved model FLOP/s per device (printed as TFLOP/s per device)."""
    bubble_fraction: float
    """The critical (busiest) pipeline rank's idle time, pipeline sends excluded, over the step time
    (``workbench.estimate.metrics.bubble_fraction``); the one figure shown as "bubble" everywhere."""
    breakdown: StepBreakdown
    memory: pl.DataFrame
    memory_capacity_bytes: float
    timeline: pl.DataFrame
    activation_timeline: pl.DataFrame | None = None
    measured: bool = False
    """True when the numbers come from a real run, not a model."""
    notes: tuple[str, ...] = ()
    """Assumptions and warnings a user should read (defaults used, interpolations, ...)."""
    memory_headroom_frac: float = DEFAULT_HEADROOM_FRAC
    """Share of ``memory_capacity_bytes`` a plan must leave free to fit (``DEFAULT_HEADROOM_FRAC``; ``workbench
    estimate --headroom``, ``plan --headroom``)."""
    framework: str = ""
    """The framework profile (stack) the plan was priced for, by id; empty when the backend names none."""
    framework_version: str = ""
    """The release(s) of that stack (``FrameworkProfile.version``)."""
    band: ErrorBand | None = None
    """The 80 % error band of the throughput (and, inverted, the step time) from the out-of-sample residuals
    of published runs of the plan's regime (:mod:`workbench.estimate.band`); None for measured estimates or
    without a band table."""

    @property
    def peak_memory_bytes(self) -> float:
        """Largest per-rank total, bytes."""
        return float(self.memory["total_bytes"].max())  # type: ignore[arg-type]

    @property
    def memory_usable_bytes(self) -> float:
        """Memory a rank may fill, bytes: the capacity less the headroom share (the line every face draws)."""
        return self.memory_capacity_bytes * (1.0 - self.memory_headroom_frac)

    @property
    def fits(self) -> bool:
        """The peak of every rank is within ``memory_usable_bytes`` (the one fit rule)."""
        return self.peak_memory_bytes <= self.memory_usable_bytes

    def peak_memory_row(self) -> dict[str, Any]:
        """The memory row of the rank with the largest total."""
        idx = int(self.memory["total_bytes"].arg_max())  # type: ignore[arg-type]
        return self.memory.row(idx, named=True)

    def summary(self) -> dict[str, Any]:
        """Plain-JSON summary (the object ``workbench estimate --json`` prints)."""
        peak = self.peak_memory_row()
        return {
            "backend": self.backend,
            "framework": self.framework,
            "framework_version": self.framework_version,
            "model": self.model.name,
            "cluster": self.cluster.id,
            "num_devices": self.cluster.num_devices,
            "plan": self.plan.describe(),
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "tflops_per_device": self.model_flop_per_s_per_device / 1e12,
            "peak_memory_bytes": self.peak_memory_bytes,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "memory_headroom_frac": self.memory_headroom_frac,
            "memory_usable_bytes": self.memory_usable_bytes,
            "fits": self.fits,
            "bubble_fraction": self.bubble_fraction,
            "breakdown": self.breakdown.as_dict(),
            "overlapped_comm_s": self.breakdown.overlapped(),
            "memory": {k: float(peak[k]) for k in (*MEMORY_COLUMNS, "total_bytes")},
            "measured": self.measured,
            "notes": list(self.notes),
            "band": None if self.band is None else self.band_summary(),
        }

    def table(self) -> pl.DataFrame:
        """``memory``: one row per pipeline rank (``Result.table``)."""
        return self.memory

    def band_summary(self) -> dict[str, Any]:
        """The band (``ErrorBand.as_dict``) with the step-time and tokens/s ranges it gives; {} without one."""
        if self.band is None:
            return {}
        low_s, high_s = self.band.time_range(self.step_time_s)
        low_tps, high_tps = self.band.throughput_range(self.tokens_per_s)
        return {
            **self.band.as_dict(),
            "step_time_low_s": low_s,
            "step_time_high_s": high_s,
            "tokens_per_s_low": low_tps,
            "tokens_per_s_high": high_tps,
        }


@runtime_checkable
class Result(Protocol):
    """What every face (the CLI's printers and ``--json``, the report, the app) reads from a priced plan of any
    mode. ``Estimate`` (training), ``workbench.serving.estimate.ServingEstimate``,
    ``workbench.estimate.mixed.MixedEstimate`` (a plan over pools), ``workbench.hetero.swarm.SwarmEstimate``,
    ``workbench.hetero.diloco.DiLoCoEstimate`` and ``workbench.goodput.model.GoodputEstimate`` satisfy it;
    ``isinstance(x, Result)`` checks the three names."""

    @property
    def notes(self) -> tuple[str, ...]:
        """Assumptions and warnings a user should read, one sentence each (printed as ``note: ...``); () when
        there are none."""
        ...

    def summary(self) -> dict[str, Any]:
        """Plain JSON: str, int, float, bool or None values (and lists or dicts of them), SI units in the keys
        (``_s``, ``_bytes``, ``_frac``, ``tokens_per_s``): the object ``--json`` prints for this result."""
        ...

    def table(self) -> pl.DataFrame:
        """The result's main table, one row per part, its columns documented by the record (``Estimate``: the
        memory per pipeline rank; serving: the requests; a plan over pools and SWARM: the stages; DiLoCo: it and
        synchronous data parallelism side by side; goodput: its figures in one row)."""
        ...


@runtime_checkable
class Backend(Protocol):
    """A way to cost a plan. Implementations register under the ``workbench.backends`` entry-point group."""

    name: str
    """Registry name, e.g. ``analytic``."""

    def unavailable_reason(self) -> str | None:
        """None when the backend can run here, else why not (e.g. 'torch is not installed')."""
        ...

    def estimate(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
    ) -> Estimate:
        """Cost one plan. Raises ValueError for a plan that violates its constraints."""
        ...
