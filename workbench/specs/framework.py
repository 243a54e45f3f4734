"""``FrameworkProfile``: how one training software stack runs a plan, apart from the hardware it runs on.

A profile says which features the stack offers (schedules, ZeRO stages, sequence/context/expert parallelism,
FP8) and how it executes them: which fused attention kernels it calls (looked up in the device's
:class:`~workbench.specs.kernels.KernelTable`), whether element-wise ops are fused, how much communication it
hides behind compute, what it keeps in memory and what its memory report counts. Every field of a profile
file carries its source (the framework's docs or flags) in ``[sources]``. A few fields are named as
``fitted``: those (and only those) ``workbench validate`` may fit to published runs, per ``fit_group``;
everything else comes from the stack's documentation.

Profiles live in ``profiles/frameworks/<id>.toml`` (loader: :mod:`workbench.presets.frameworks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.specs.kernels import ATTENTION_FAMILIES
from workbench.specs.limits import check_real, shown

if TYPE_CHECKING:
    from workbench.specs.plan import ParallelPlan

DEFAULT_MICROBATCHES = ("mbs1", "stages")
"""Values of ``FrameworkProfile.default_microbatches``."""

MEMORY_REPORTS = ("allocated", "reserved", "required")
"""What a stack's published peak memory counts: ``allocated`` = the caching allocator's max allocated
(``torch.cuda.max_memory_allocated``: tensors only), ``reserved`` = max reserved (adds the allocator's
fragmentation and cached blocks), ``required`` = the whole device need (adds the CUDA context, NCCL and
cuBLAS workspaces): what a planner must fit into the HBM."""

FITTABLE = (
    "kernel_efficiency_frac",
    "host_overhead_per_layer_s",
    "dp_comm_overlap_frac",
    "fsdp_comm_overlap_frac",
    "fp8_matmul_scale",
    "moe_dispatch_passes",
)
"""Fields a profile may name in ``fitted`` (each physically meaningful; see their docstrings)."""

POOLED = ("kernel_efficiency_frac", "host_overhead_per_layer_s")
"""Fitted fields first fitted as one value over every stack's rows: the value a stack gets when none of its
own runs is in the fit (its group's own fit refines it when its runs are)."""


NUMBER_RANGES: dict[str, tuple[float, float, bool]] = {
    "kernel_efficiency_frac": (0.0, 1.0, True),
    "collective_efficiency_frac": (0.0, 1.0, True),
    "tp_comm_overlap_frac": (0.0, 1.0, False),
    "cp_comm_overlap_frac": (0.0, 1.0, False),
    "ep_comm_overlap_frac": (0.0, 1.0, False),
    "dp_comm_overlap_frac": (0.0, 1.0, False),
    "fsdp_comm_overlap_frac": (0.0, 1.0, False),
    "fragmentation_frac": (0.0, 1.0, False),
    "grad_bytes_per_param": (0.0, 16.0, True),
    "capacity_factor": (1.0, 1e3, False),
    "host_overhead_per_layer_s": (0.0, 1.0, False),
    "moe_dispatch_passes": (0.0, 1e3, False),
    "fp8_matmul_scale": (0.0, 1e3, True),
    "context_bytes": (0.0, 2.0**50, False),
}
"""Numeric field -> (lowest, highest, lowest excluded): every number finite. The efficiency shares divide a time,
so they exclude 0; overlap and fragmentation shares may be 0; the upper ends of the non-fractions are far above
any stack (a gradient of 16 bytes per parameter, a second of host time per layer, 1 PiB of context)."""

_STRING_TUPLES = ("aliases", "fitted", "attention_kernels")
_FLAGS = (
    "sequence_parallel",
    "default_sequence_parallel",
    "context_parallel",
    "expert_parallel",
    "fp8",
    "uneven_stages",
    "fused_elementwise",
    "dropout",
    "master_weights",
    "fsdp_reshard_with_pp",
)


def check_number(where: str, name: str, value: object) -> float:
    """``value`` as a float if it is a finite number in the range ``NUMBER_RANGES[name]``; ValueError naming
    ``where``, the field, the value and the range otherwise (used for profiles and fitted constants)."""
    low, high, low_open = NUMBER_RANGES[name]
    return check_real(where, name, value, minimum=low, maximum=high, min_open=low_open)


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkProfile:
    """One software stack (see the module docstring). Fractions are 0..1, times in seconds, bytes in bytes."""

    id: str
    name: str
    aliases: tuple[str, ...] = ()
    """Names under which sources cite the stack (the ``framework`` column of the validation set)."""
    fit_group: str = ""
    """Profiles with the same group share fitted constants (a fork with its parent); default: the id."""
    description: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    """Field name -> where its value comes from (docs, flags, papers)."""
    fitted: tuple[str, ...] = ()
    """Fields ``workbench validate`` fits to published runs (a subset of ``FITTABLE``)."""

    # -- what the stack offers ------------------------------------------------------------------------
    schedules: tuple[str, ...] | None = ("1f1b", "interleaved-1f1b")
    """Pipeline schedules the stack runs (names of :mod:`workbench.pipeline.schedules`); empty: no pipeline
    parallelism; None (``"any"`` in a file): every schedule the workbench models."""
    zero_stages: tuple[int, ...] = (0, 1)
    sequence_parallel: bool = True
    """Offers Megatron sequence parallelism (Korthikanti et al. 2022)."""
    default_sequence_parallel: bool = False
    """Sequence parallelism is on with tp > 1 unless a plan says otherwise (the stack's default flags)."""
    context_parallel: bool = False
    expert_parallel: bool = False
    fp8: bool = False
    uneven_stages: bool = False
    """Lets pipeline stages hold different numbers of layers."""
    default_microbatches: str = "mbs1"
    """How the stack splits a data-parallel rank's batch under pp > 1 when the micro-batch size is not set:
    ``mbs1`` (one sample per micro-batch) or ``stages`` (as many micro-batches as pipeline stages, pp x vpp;
    torchtitan's ``pipeline_parallel_microbatches`` default). Used for blank fields of validation rows."""

    # -- how it runs a plan ---------------------------------------------------------------------------
    attention_kernels: tuple[str, ...] = ("fa2",)
    """Fused attention kernel families in the order the stack prefers them; the first one the device's kernel
    table has is used. Empty: attention runs unfused (score GEMMs, softmax and dropout through HBM)."""
    cp_attention_kernels: tuple[str, ...] | None = None
    """The families the stack's ring attention can call when cp > 1, in preference order; None: the same as
    ``attention_kernels`` (a ring implementation that wraps only some fused kernels falls back to those)."""
    fused_elementwise: bool = True
    """Bias, activation, dropout and residual adds run fused (Transformer Engine, torch.compile, Apex fused
    kernels); False: eager PyTorch, one HBM round trip per element-wise op."""
    dropout: bool = False
    """The stack's reference models train with dropout (Megatron GPT defaults: hidden and attention 0.1)."""
    selective_recompute: str = "attention"
    """What ``recompute=selective`` recomputes: ``attention`` (Megatron's attention core) or ``op`` (torchtitan
    per-op SAC: every second matmul output and the attention output saved, the rest recomputed)."""
    grad_bytes_per_param: float = 4.0
    """Gradient buffer precision: Megatron main_grad fp32 = 4; FSDP pure bf16 reduction = 2."""
    master_weights: bool = True
    """fp32 master copy of the weights in the optimizer (mixed precision, Micikevicius et al. 2018)."""
    capacity_factor: float = 1.0
    """MoE token capacity factor (1.0: dropless, balanced)."""
    collective_efficiency_frac: float = 0.8
    """Achieved share of the link bandwidth in large collectives (nccl-tests bus bandwidth ~80% of link rate)."""
    tp_comm_overlap_frac: float = 0.0
    """Share of tensor-parallel collectives hidden behind GEMMs (TE userbuffers, async TP)."""
    cp_comm_overlap_frac: float = 0.0
    """Share of the context-parallel KV exchange hidden behind the attention kernel (ring attention)."""
    ep_comm_overlap_frac: float = 0.0
    """Share of the expert-parallel all-to-all hidden behind compute."""
    dp_comm_overlap_frac: float = 0.0
    """Share of the data-parallel gradient reduction hidden behind the backward pass (bucketed)."""
    fsdp_comm_overlap_frac: float = 0.0
    """Share of ZeRO-3 parameter gathers and gradient reduce-scatters hidden behind compute (prefetch)."""
    fsdp_reshard_with_pp: bool = True
    """ZeRO-3 keeps sharding the weights per micro-batch when pp > 1. False (torchtitan): with a pipeline
    the stage's weights stay gathered and its gradients accumulate unsharded (in ``grad_bytes_per_param``)
    across micro-batches, so there is one all-gather and one reduce-scatter per step, and the memory of
    weights and gradients is that of ZeRO-1."""
    kernel_efficiency_frac: float = 1.0
    """Share of the kernel tables' microbenchmarked rates the stack sustains over a whole training step:
    power-limited sustained clocks (microbenchmarks run short bursts near boost), the model's real GEMM and
    attention shapes, SMs and HBM bandwidth taken by concurrent communication kernels, stream syncs. Divides
    every compute time."""
    host_overhead_per_layer_s: float = 0.0
    """Exposed host time per layer per forward pass (hooks, allocator calls, syncs the GPU waits for);
    backward counts it twice."""
    moe_dispatch_passes: float = 4.0
    """HBM passes over the routed tokens (tokens x top-k x hidden) per MoE layer forward to permute them to
    their experts and back (gather, scatter, their index copies); backward moves them again."""
    fp8_matmul_scale: float = 1.0
    """FP8 GEMM rate of the stack relative to the kernel table's FP8 GEMM curve (casts, scaling factors,
    amax history, transposes for the backward pass)."""
    memory_report: str = "allocated"
    """What the stack's own peak-memory report counts (see ``MEMORY_REPORTS``)."""
    fragmentation_frac: float = 0.05
    """Caching-allocator fragmentation: share of the counted tensors added to reserved memory."""
    context_bytes: float = 1.5e9
    """Device memory outside the allocator: CUDA context, cuBLAS and NCCL workspaces (~1-2 GB observed)."""

    def __post_init__(self) -> None:
        where = f"framework profile {shown(self.id)}"
        self._check_types(where)
        for name in NUMBER_RANGES:
            check_number(where, name, getattr(self, name))
        if self.selective_recompute not in ("attention", "op"):
            raise ValueError(
                f"{where}: selective_recompute must be attention or op, got {self.selective_recompute!r}"
            )
        bad = [
            k
            for k in (*self.attention_kernels, *(self.cp_attention_kernels or ()))
            if k not in ATTENTION_FAMILIES
        ]
        if bad:
            raise ValueError(
                f"{where}: attention kernel families {bad} unknown; allowed: {', '.join(ATTENTION_FAMILIES)}"
            )
        if self.default_microbatches not in DEFAULT_MICROBATCHES:
            raise ValueError(
                f"{where}: default_microbatches must be one of {', '.join(DEFAULT_MICROBATCHES)}, "
                f"got {self.default_microbatches!r}"
            )
        if self.memory_report not in MEMORY_REPORTS:
            raise ValueError(f"{where}: memory_report must be one of {', '.join(MEMORY_REPORTS)}")
        bad = [k for k in self.fitted if k not in FITTABLE]
        if bad:
            raise ValueError(f"{where}: fitted {bad} cannot be fitted; allowed: {', '.join(FITTABLE)}")

    def _check_types(self, where: str) -> None:
        """Strings, flags and lists of the right kind (a TOML file may hold any type in any key)."""
        strings = ("id", "name", "fit_group", "description", "selective_recompute", "memory_report")
        for name in (*strings, "default_microbatches"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{where}: {name} must be a string, got {shown(getattr(self, name))}")
        if not self.id:
            raise ValueError("framework profile: id must be a non-empty string")
        for name in _FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{where}: {name} must be true or false, got {shown(getattr(self, name))}")
        lists = [(n, getattr(self, n), str) for n in _STRING_TUPLES] + [
            ("zero_stages", self.zero_stages, int)
        ]
        for name in ("schedules", "cp_attention_kernels"):
            if getattr(self, name) is not None:
                lists.append((name, getattr(self, name), str))
        for name, value, kind in lists:
            if not isinstance(value, tuple) or any(
                not isinstance(v, kind) or isinstance(v, bool) for v in value
            ):
                what = "strings" if kind is str else "integers"
                raise ValueError(f"{where}: {name} must be a list of {what}, got {shown(value)}")
        if any(z not in (0, 1, 2, 3) for z in self.zero_stages):
            raise ValueError(f"{where}: zero_stages must be among 0, 1, 2, 3, got {shown(self.zero_stages)}")
        if not isinstance(self.sources, dict) or any(
            not isinstance(k, str) or not isinstance(v, str) for k, v in self.sources.items()
        ):
            raise ValueError(f'{where}: sources must be a table of field = "source" strings')

    @property
    def group(self) -> str:
        """The fit group (the id when none is set)."""
        return self.fit_group or self.id

    @property
    def flash_attention(self) -> bool:
        """Attention runs as a fused kernel (some family is named)."""
        return bool(self.attention_kernels)

    def unsupported(self, plan: ParallelPlan, *, dtype: str = "bf16") -> list[str]:
        """Reasons ``plan`` is not something this stack runs (empty when it is)."""
        out = []
        if plan.pp > 1 and self.schedules is not None and plan.schedule not in self.schedules:
            runs = ", ".join(self.schedules) or "no pipeline parallelism"
            out.append(f"schedule {plan.schedule} (runs: {runs})")
        if plan.zero_stage not in self.zero_stages:
            out.append(f"zero_stage {plan.zero_stage} (runs: {', '.join(map(str, self.zero_stages))})")
        if plan.sequence_parallel and plan.tp > 1 and not self.sequence_parallel:
            out.append("sequence parallelism")
        if plan.cp > 1 and not self.context_parallel:
            out.append(f"cp={plan.cp} (no context parallelism)")
        if plan.ep > 1 and not self.expert_parallel:
            out.append(f"ep={plan.ep} (no expert parallelism)")
        return out + self.unsupported_dtype(dtype)

    def unsupported_dtype(self, dtype: str) -> list[str]:
        """``["fp8 GEMMs"]`` when ``dtype`` is fp8 and the stack has no FP8 recipe, else empty."""
        return ["fp8 GEMMs"] if str(dtype) == "fp8" and not self.fp8 else []

    def describe(self) -> dict[str, Any]:
        """A flat summary for tables (id, name, schedules, features, kernels)."""
        features = [
            name
            for name, on in (
                ("sp", self.sequence_parallel),
                ("cp", self.context_parallel),
                ("ep", self.expert_parallel),
                ("fp8", self.fp8),
                ("uneven", self.uneven_stages),
            )
            if on
        ]
        return {
            "id": self.id,
            "name": self.name,
            "schedules": "any" if self.schedules is None else ", ".join(self.schedules) or "none (pp = 1)",
            "zero_stages": ", ".join(map(str, self.zero_stages)),
            "features": ", ".join(features),
            "attention": ", ".join(self.attention_kernels) or "unfused",
            "elementwise": "fused" if self.fused_elementwise else "eager",
            "fitted": ", ".join(self.fitted),
        }
