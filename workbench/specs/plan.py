"""What to run and how: ``Workload`` (the training job) and ``ParallelPlan`` (the parallel layout)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.specs.axes import PLAN_AXES
from workbench.specs.axis_types import (
    DEFAULT_RANK_ORDER,
    RANK_ORDERS,
    Axis,
    Domain,
    Recompute,
    rank_order_name,
)
from workbench.specs.errors import check_choice, check_int
from workbench.specs.hardware import DType
from workbench.specs.limits import (
    MAX_CAPACITY_FACTOR,
    MAX_DEVICES,
    MAX_GLOBAL_BATCH_SIZE,
    MAX_SEQ_LEN,
    check_real,
)

__all__ = [  # the plan's named choices are defined with the axis records (workbench.specs.axis_types)
    "DEFAULT_RANK_ORDER",
    "RANK_ORDERS",
    "Axis",
    "Optimizer",
    "ParallelPlan",
    "Recompute",
    "Workload",
    "data_parallel_degree",
    "rank_order_name",
]

if TYPE_CHECKING:
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.rules import Violation


class Optimizer(StrEnum):
    ADAMW = "adamw"
    """Adam with decoupled weight decay: two fp32 moments per parameter (Loshchilov & Hutter 2019)."""
    SGD = "sgd"
    """SGD with momentum: one fp32 buffer per parameter."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A training job: what a step processes."""

    seq_len: int
    """Tokens per sequence. 1..``workbench.specs.limits.MAX_SEQ_LEN``."""
    global_batch_size: int
    """Sequences per optimizer step over all data-parallel replicas. 1..``limits.MAX_GLOBAL_BATCH_SIZE``."""
    dtype: DType = DType.BF16
    """Precision of the main matrix multiplies (parameters kept in bf16/fp16 with fp32 master copies)."""
    optimizer: Optimizer = Optimizer.ADAMW
    capacity_factor: float | None = None
    """Mixture-of-experts token capacity per expert over the balanced share, 1..``MAX_CAPACITY_FACTOR``:
    each expert takes at most that many tokens and is padded to it (drop-and-pad, GShard), so every expert GEMM
    and all-to-all carries ``capacity_factor`` x the balanced load and no host sync is needed; None: dropless
    (each expert takes what it is routed; the framework's ``moe_imbalance`` sets the busiest rank's load)."""

    def __post_init__(self) -> None:
        check_int(self, "seq_len", maximum=MAX_SEQ_LEN, limit="MAX_SEQ_LEN")
        check_int(self, "global_batch_size", maximum=MAX_GLOBAL_BATCH_SIZE, limit="MAX_GLOBAL_BATCH_SIZE")
        check_choice(self, "dtype", DType)
        check_choice(self, "optimizer", Optimizer)
        if self.capacity_factor is not None:
            check_real(
                "Workload",
                "capacity_factor",
                self.capacity_factor,
                minimum=1.0,
                maximum=MAX_CAPACITY_FACTOR,
                min_open=False,
                limit="MAX_CAPACITY_FACTOR",
            )

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch_size


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelPlan:
    """A parallel layout. Devices used = dp * tp * pp * cp; ep splits the experts inside dp * cp * tp.
    Every degree is bounded by its axis' limit (``workbench.specs.axes.PLAN_AXES``), their product by
    ``workbench.specs.limits.MAX_DEVICES``."""

    dp: int = 1
    """Data-parallel replicas (with ZeRO/FSDP: the shard degree). 1 means disabled."""
    tp: int = 1
    """Tensor-parallel degree (Megatron-style column/row split)."""
    pp: int = 1
    """Pipeline stages' ranks (pipeline-parallel degree)."""
    cp: int = 1
    """Context-parallel degree (sequence split across ranks for attention)."""
    ulysses: int = 1
    """Of the cp ranks, how many exchange attention heads by all-to-all (DeepSpeed-Ulysses, Jacobs et al. 2023,
    arXiv:2309.14509); the other cp / ulysses pass key/value blocks around a ring (ring attention, Liu et al.
    2023). 1: ring only; cp: Ulysses only; in between: the hybrid USP (Fang & Zhao 2024, arXiv:2405.07719;
    Transformer Engine's ``cp_comm_type="a2a+p2p"``), Ulysses inside, ring across. Must divide cp."""
    ep: int = 1
    """Expert-parallel degree: experts are split over ep ranks taken from dp * cp * tp (Megatron-Core)."""
    etp: int | None = None
    """Expert tensor-parallel degree: each expert's GEMMs split over etp ranks (Megatron-Core
    ``--expert-tensor-parallel-size``); ep * etp ranks are carved from dp * cp * tp, etp innermost. None: 1 when
    ep > 1 (the MoE recipes' setting), else tp (experts split like the dense MLP)."""
    vpp: int = 1
    """Virtual stages (model chunks) per pipeline rank; 1 means not interleaved."""
    micro_batch_size: int = 1
    """Sequences per micro-batch per data-parallel replica."""
    zero_stage: int = 0
    """0 = DDP, 1 = optimizer states sharded, 2 = plus gradients, 3 = plus parameters (FSDP)."""
    zero_shard: int | None = None
    """Hybrid sharding (HSDP, PyTorch FSDP's HYBRID_SHARD; ZeRO++'s secondary partition): the ZeRO states are
    sharded over groups of ``zero_shard`` consecutive ranks of dp*cp and replicated over the
    dp*cp / zero_shard groups, whose gradients are all-reduced. Needs zero_stage >= 1 and must divide dp*cp.
    None: one shard group of all dp*cp ranks."""
    loss_chunks: int = 1
    """The LM head and the cross-entropy run over this many chunks of the micro-batch's tokens, so only one
    chunk's logits exist at a time (fused linear cross-entropy: Liger-Kernel, Hsu et al. 2024,
    arXiv:2410.10989; Cut Cross-Entropy, Wijmans et al. 2024, arXiv:2411.09009). 1: the logits of the whole
    micro-batch are materialised (16-bit, their fp32 upcast and fp32 gradient)."""
    vocab_parallel: bool = False
    """Spread the embedding and the LM head with its loss over every pipeline rank (Yeung et al. 2024,
    "Balancing Pipeline Parallelism with Vocabulary Parallelism", arXiv:2411.05288) instead of putting them
    on the first and the last stage; each rank then takes part in the pp-group collectives of the output
    hidden states (``workbench.cost.step.vocab_parallel_comm_s``). Needs pp > 1 to matter."""
    offload_optimizer: bool = False
    """The optimizer states (fp32 master weights and moments) live in host memory and the step runs on the CPUs
    (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840; PyTorch FSDP2's CPUOffloadPolicy): the device keeps the
    16-bit weights and gradients; the step then streams the states through host DRAM and sends the new
    weights back over PCIe (``workbench.cost.step.optimizer_s``)."""
    offload_activations: bool = False
    """Each layer's saved activations go to host memory after its forward and come back before its backward,
    overlapped with the neighbouring layers' compute (Megatron-Core ``--cpu-offloading``); the device keeps
    a working set of ``workbench.cost.activations.OFFLOAD_WORKING_LAYERS`` layers."""
    offload_activation_layers: int | None = None
    """With ``offload_activations``: only the first N layers a pipeline rank holds send their saved activations
    to host memory; the others keep them on the device (Megatron-Core ``--cpu-offloading-num-layers N``,
    Transformer Engine ``get_cpu_offload_context(num_layers=N)``: groups 0..N-1 are offloaded). None: every
    layer. N at or above the rank's layers offloads every layer. Priced by
    ``workbench.cost.activations.offload_share``."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism alongside tp (norms and dropout sharded over the sequence)."""
    recompute: Recompute = Recompute.NONE
    recompute_num_layers: int | None = None
    """With ``recompute`` full: only the first N layers of each model chunk a pipeline rank holds are recomputed
    in the backward pass, the others keep their activations (Megatron-Core ``--recompute-granularity full
    --recompute-method block --recompute-num-layers N``; Korthikanti et al. 2022, arXiv:2205.05198, section 5
    checkpoint only as many layers as memory needs). None: every layer. The cost model prices the share of the
    layers this recomputes on a mean chunk, ``workbench.cost.step.recompute_share``."""
    schedule: str = "1f1b"
    """Pipeline schedule name (see ``workbench.pipeline.schedules.SCHEDULE_NAMES``); ignored when pp = 1."""
    fp8_recipe: str | None = None
    """With an fp8 workload: how the FP8 tensors are scaled (``workbench.specs.framework_values.FP8_RECIPES``),
    one the stack offers (``FrameworkProfile.offered``); None: the stack's own (``FrameworkProfile.fp8_recipe``)."""
    tp_comm_overlap: bool | None = None
    """The tensor-parallel all-gathers and reduce-scatters overlapped with the GEMMs they feed, as the stack offers
    it (``FrameworkProfile.offered``): Megatron-Core ``--tp-comm-overlap`` (Transformer Engine userbuffers),
    torchtitan ``parallelism.enable_async_tensor_parallel`` (torch's micro-pipelined TP on symmetric memory, which
    needs torch.compile: torchtitan/distributed/tensor_parallel.py ``maybe_enable_async_tp``). Priced as the
    profile field ``tp_comm_overlap`` (``workbench.cost.layer``: one of tp chunks exposed). None: the stack's own.
    """
    rank_order: tuple[Axis, ...] = DEFAULT_RANK_ORDER
    """Order in which the axes are laid on consecutive ranks, innermost first."""

    def __post_init__(self) -> None:
        for axis in PLAN_AXES:  # every count against its bound (workbench.specs.axes); zero_stage below
            if (
                axis.domain is Domain.COUNT
                and axis.limit is not None
                and (getattr(self, axis.name) is not None or not axis.optional)
            ):
                check_int(self, axis.name, minimum=axis.minimum, maximum=axis.maximum, limit=axis.limit)
            value = getattr(self, axis.name)
            if (
                axis.profile_field is not None
                and value is not None
                and value not in (axis.choices or {}).values()
            ):
                raise ValueError(
                    f"ParallelPlan: {axis.name} must be one of {', '.join(axis.choices or ())} or None (the "
                    f"stack's own), got {value!r}"
                )
        if self.num_devices > MAX_DEVICES:
            raise ValueError(
                f"ParallelPlan: dp*tp*pp*cp = {self.dp}*{self.tp}*{self.pp}*{self.cp} = {self.num_devices:,} "
                f"devices; at most {MAX_DEVICES:,} (MAX_DEVICES in workbench/specs/limits.py)"
            )
        if not isinstance(self.schedule, str):
            raise ValueError(f"ParallelPlan: schedule must be a schedule name, got {self.schedule!r}")
        if self.zero_stage not in (0, 1, 2, 3) or isinstance(self.zero_stage, bool):
            raise ValueError(f"ParallelPlan: zero_stage must be one of 0, 1, 2, 3, got {self.zero_stage!r}")
        for axis in PLAN_AXES:  # every flag true or false (or None where the axis is optional)
            flag = getattr(self, axis.name)
            if axis.domain is Domain.FLAG and not (
                isinstance(flag, bool) or (axis.optional and flag is None)
            ):
                allowed = "true, false or None" if axis.optional else "true or false"
                raise ValueError(f"ParallelPlan: {axis.name} must be {allowed}, got {flag!r}")
        check_choice(self, "recompute", Recompute)
        values = {a.name: getattr(self, a.name) for a in PLAN_AXES}
        # an axis that applies only with another's value (PlanAxis.only_with) is None without it
        for axis in PLAN_AXES:
            if axis.only_with is not None and values[axis.name] is not None and not axis.applies(values):
                other, needed = axis.only_with
                raise ValueError(
                    f"ParallelPlan: {axis.name}={values[axis.name]} needs {other} {_shown(needed)} (got {other} "
                    f"{_shown(values[other])}); allowed: {other} {_shown(needed)}, or {axis.name} None"
                )
        if self.zero_shard is not None and (self.zero_stage == 0 or (self.dp * self.cp) % self.zero_shard):
            raise ValueError(
                f"ParallelPlan: zero_shard={self.zero_shard} needs zero_stage >= 1 (got {self.zero_stage}) and must "
                f"divide dp*cp = {self.dp * self.cp}"
            )
        try:
            order = tuple(Axis(a) for a in self.rank_order)
        except (ValueError, TypeError):
            order = ()
        if sorted(order) != sorted(DEFAULT_RANK_ORDER):
            raise ValueError(
                f"ParallelPlan: rank_order must be a permutation of "
                f"{', '.join(DEFAULT_RANK_ORDER)}, got {self.rank_order!r}"
            )
        object.__setattr__(self, "rank_order", order)

    @property
    def num_devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def cp_kind(self) -> str:
        """How the cp ranks share attention: ``none`` (cp = 1), ``ring``, ``ulysses`` or ``usp`` (both)."""
        if self.cp == 1:
            return "none"
        return "ring" if self.ulysses == 1 else "ulysses" if self.ulysses == self.cp else "usp"

    @property
    def shard_group(self) -> int:
        """Ranks one ZeRO state is sharded over: ``zero_shard``, or all of dp*cp."""
        return self.zero_shard if self.zero_shard is not None else self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel degree in force (``etp``, or its default when None)."""
        if self.etp is not None:
            return self.etp
        return 1 if self.ep > 1 else self.tp

    def num_microbatches(self, workload: Workload) -> int:
        """Micro-batches per step per pipeline (gradient accumulation steps); 0 if it does not divide."""
        per_step = self.dp * self.micro_batch_size
        return workload.global_batch_size // per_step if workload.global_batch_size % per_step == 0 else 0

    def describe(self) -> str:
        """Short text such as ``dp8 tp8 pp4 vpp2 mbs1 zero1 sel 1f1b``."""
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        parts += [f"{k}{v}" for k, v in (("cp", self.cp), ("ep", self.ep), ("vpp", self.vpp)) if v > 1]
        if self.ulysses > 1:
            parts.append("ulysses" if self.ulysses == self.cp else f"usp{self.ulysses}")
        if self.etp is not None:
            parts.append(f"etp{self.etp}")
        parts += [f"mbs{self.micro_batch_size}", f"zero{self.zero_stage}"]
        if self.zero_shard is not None and self.zero_shard != self.dp * self.cp:
            parts.append(f"hsdp{self.zero_shard}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.loss_chunks > 1:
            parts.append(f"ce/{self.loss_chunks}")
        parts += [
            name
            for name, on in (
                ("offload-opt", self.offload_optimizer),
                (f"offload-act{self.offload_activation_layers or ''}", self.offload_activations),
                ("vocab-par", self.vocab_parallel and self.pp > 1),
            )
            if on
        ]
        if self.recompute is not Recompute.NONE:
            parts.append(f"rc-{self.recompute}{self.recompute_num_layers or ''}")
        if self.pp > 1:
            parts.append(self.schedule)
        if self.fp8_recipe is not None:
            parts.append(f"fp8-{self.fp8_recipe}")
        if self.tp_comm_overlap is not None:
            parts.append("tp-overlap" if self.tp_comm_overlap else "no-tp-overlap")
        if self.rank_order != DEFAULT_RANK_ORDER:
            parts.append(f"order {rank_order_name(self.rank_order)}")
        return " ".join(parts)

    def validate(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, *, uneven_stages: bool = False
    ) -> list[str]:
        """Every violated constraint as a sentence a user can act on; an empty list means the plan is valid.
        ``uneven_stages``: the stack that runs it lets stages hold different layer counts."""
        return [v.sentence for v in self.violations(model, cluster, workload, uneven_stages=uneven_stages)]

    def violations(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, *, uneven_stages: bool = False
    ) -> list[Violation]:
        """Every broken rule of the rule table (``workbench.specs.rule_table``) as a record: key, control,
        sentence."""
        from workbench.specs.rule_table import plan_violations
        from workbench.specs.rules import RuleContext

        ctx = RuleContext(
            model=model,
            cluster=cluster,
            seq_len=workload.seq_len,
            global_batch_size=workload.global_batch_size,
            schedule_names=(self.schedule,),
            uneven_stages=uneven_stages,
        )
        return plan_violations(self.rule_row(workload), ctx)

    def rule_row(self, workload: Workload) -> dict[str, int]:
        """The plan as the rules read it (``workbench.specs.rules.RULE_COLUMNS``); schedule_code 0 stands for
        ``self.schedule``."""
        row = {
            a.name: int(getattr(self, a.name) or 0)
            for a in PLAN_AXES
            if a.rule_column is not None and a.rule_column == a.name
        }
        return {**row, "schedule_code": 0, "num_microbatches": self.num_microbatches(workload)}


def _shown(value: Any) -> str:
    """A plan value as the refusals write it: booleans as true/false."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def data_parallel_degree(num_devices: int, *, tp: Any, pp: Any, cp: Any) -> Any:
    """The data-parallel degree that fills ``num_devices`` (dp * tp * pp * cp = devices): devices / (tp*pp*cp).

    ``tp``, ``pp``, ``cp``: ints, or integer numpy arrays of one shape (then the result is an array of dp per
    plan). Raises ValueError when tp*pp*cp does not divide the devices (of any plan of the arrays).
    """
    model_parallel = tp * pp * cp
    bad = np.asarray(model_parallel)[np.asarray(num_devices % model_parallel) != 0]
    if bad.size:
        raise ValueError(f"tp*pp*cp = {int(bad[0])} does not divide the cluster's {num_devices} devices")
    return num_devices // model_parallel
