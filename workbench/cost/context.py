"""What the step model reads for one model, cluster and workload (``StepContext``) and a plan as columns.

Plans are columns (``Cols``): numpy arrays, or 0-d arrays for a single plan, of tp, cp, pp, dp, ep, vpp,
micro_batch_size, zero_stage, recompute_code (index into ``RECOMPUTE_CODES``), sequence_parallel and
num_microbatches, optionally with the group strides tp_stride, cp_stride, dp_stride and pp_stride (default:
Megatron's rank order, tp innermost, then cp, dp, pp; see :mod:`workbench.cost.placement`). This module also
gives the groups a plan implies (strides, the ZeRO shard group, expert tp and expert dp, the ZeRO stage the
stack executes) and the host path that offloading uses.

Sources: optimizer-state bytes per parameter (Rajbhandari et al. 2020, ZeRO, arXiv:1910.02054, section 3.1);
Adam's HBM traffic per parameter (read fp32 gradient, read and write fp32 master weight and both moments,
write the 16-bit weight: 4 + 24 + 2 bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.cost.layer import ACT_BYTES, dtype_bytes, routed_load
from workbench.cost.memory import RECOMPUTE_CODES, ActivationParts, activation_parts
from workbench.cost.placement import axis_stride
from workbench.specs.axes import PLAN_AXES
from workbench.specs.hardware import DEFAULT_STORAGE

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.framework import FrameworkProfile
    from workbench.specs.hardware import ClusterSpec, DeviceSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Optimizer, ParallelPlan, Workload

Array = Any
Cols = Mapping[str, Array]

COST_AXES = tuple(a for a in PLAN_AXES if a.cost_column is not None)
"""The plan axes that are a column of their own in ``plan_columns`` (``PlanAxis.cost_column``)."""

OPTIMIZER_BYTES_PER_PARAM = 30.0
"""HBM traffic of one Adam step per locally owned parameter, bytes (see the module docstring)."""


def optimizer_state_bytes_per_param(
    optimizer: Optimizer | str, *, master_weights: bool = True, moment_bytes: float = 4.0
) -> float:
    """Optimizer-state bytes per parameter: an fp32 master weight plus two (AdamW) or one (SGD with momentum)
    moments of ``moment_bytes`` each (ZeRO section 3.1: K = 4 + 2 x 4 = 12 for mixed-precision Adam;
    DeepSeek-V3's BF16 moments: 4 + 2 x 2 = 8); without master weights 4 less."""
    moments = 2 if str(optimizer) == "adamw" else 1
    return (4.0 if master_weights else 0.0) + moments * moment_bytes


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """What does not change from plan to plan: the model, cluster, workload and calibration, and what they
    imply (bytes per weight, optimizer-state bytes, activation sizes per token, achievable HBM bandwidth)."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    cal: Calibration
    param_bytes: float
    optimizer_bytes: float
    dense_parts: ActivationParts
    moe_parts: ActivationParts
    """The MoE layer's parts (the dense layer's for a dense model)."""
    hbm_bytes_per_s: float
    fp8_copy_bytes: float = 0.0
    """Bytes per linear-layer weight of the FP8 copies an FP8 run keeps for the step (0 otherwise)."""

    @classmethod
    def build(
        cls, model: ModelSpec, cluster: ClusterSpec, workload: Workload, cal: Calibration
    ) -> StepContext:
        fw, fp8 = cal.framework.for_device(cluster.device.id, model.name), str(workload.dtype) == "fp8"
        kw: dict[str, Any] = {
            "flash": fw.flash_attention,
            "dropout": fw.dropout,
            "act_bytes": ACT_BYTES,
            "fp8_cache": fp8 and fw.fp8_activation_cache,
            "fp8_saved_inputs": fp8 and fw.fp8_saved_inputs,
            "fused_glu": fw.fused_glu,
            "recompute_cheap": fw.recompute_cheap_ops,
            "recompute_modules": fw.recompute_modules,
            "unfused_glu_clamp": "glu_clamp" in fw.unfused_model_ops,
        }
        dense = activation_parts(model, **kw)
        moe = (
            activation_parts(
                model,
                moe_layer=True,
                capacity_factor=routed_load(fw, workload.capacity_factor),
                **kw,
            )
            if model.is_moe
            else dense
        )
        device = cal.device(cluster.device)
        return cls(
            model=model,
            cluster=cluster,
            workload=workload,
            cal=cal if fw is cal.framework else replace(cal, framework=fw),  # the recipe's fields
            param_bytes=1.0 if fp8 and fw.fp8_param_gather else dtype_bytes(workload.dtype),
            fp8_copy_bytes=fp8_weight_copy_bytes(fw, cluster.device) if fp8 else 0.0,
            optimizer_bytes=optimizer_state_bytes_per_param(
                workload.optimizer,
                master_weights=fw.master_weights,
                moment_bytes=fw.optimizer_moment_bytes,
            ),
            dense_parts=dense,
            moe_parts=moe,
            hbm_bytes_per_s=device.hbm_bytes_per_s * device.hbm_efficiency_frac,
        )


PER_TENSOR_FP8_RECIPES = ("delayed", "current")
"""Transformer Engine's per-tensor FP8 recipes (one scale per tensor: ``Float8Tensor``), whose row-wise data a
GPU that runs FP8 GEMMs in any layout reads for the column-wise use too."""


def fp8_weight_copy_bytes(fw: FrameworkProfile, device: DeviceSpec) -> float:
    """Bytes per linear-layer weight of the FP8 copies an FP8 run keeps beside the weight it holds: the profile's
    ``fp8_weight_copies`` (less the one the weight itself is under ``fp8_param_gather``). On a GPU whose FP8 GEMMs
    take either layout (``DeviceSpec.fp8_gemm_any_layout``: Blackwell) a per-tensor recipe keeps one copy, not
    a row-wise one and a transposed one: Transformer Engine 2.9 ``Float8TensorStorage.update_usage`` keeps the
    data and drops the transpose when ``is_non_tn_fp8_gemm_supported()``, and its quantizers allocate no
    transpose there (transformer_engine/pytorch/csrc/quantizer.cpp, ``with_transpose = columnwise_usage &&
    !nvte_is_non_tn_fp8_gemm_supported()``); MXFP8 and block scaling keep both directions' scales and data."""
    copies = fw.fp8_weight_copies
    if device.fp8_gemm_any_layout and fw.fp8_recipe in PER_TENSOR_FP8_RECIPES:
        copies = min(copies, 1.0)
    return max(copies - 1.0, 0.0) if fw.fp8_param_gather else copies


def plan_columns(plan: ParallelPlan, workload: Workload) -> dict[str, np.ndarray]:
    """One plan as 0-d columns: every axis' ``cost_column`` (``workbench.specs.axes.PLAN_AXES``; a None as the
    row's ``none_as``), and those worked out from several fields: etp (the expert tp in force), zero_shard (the
    shard group), recompute_code, num_microbatches, num_devices and the strides of its ``rank_order``."""
    cols = {str(a.cost_column): a.column_value(getattr(plan, a.name)) for a in COST_AXES}
    cols |= {
        "etp": plan.expert_tp,
        "zero_shard": plan.shard_group,
        "recompute_code": RECOMPUTE_CODES[plan.recompute.value],
        "num_microbatches": plan.num_microbatches(workload),
        "num_devices": plan.num_devices,
        **{f"{a}_stride": axis_stride(plan, a) for a in ("tp", "cp", "dp", "pp")},
    }
    return {k: np.asarray(v) for k, v in cols.items()}


def strides(cols: Cols) -> dict[str, Array]:
    """Rank distance between neighbours of the tp, cp, dp and pp groups, and of the joint dp*cp group that
    ZeRO shards over (it starts at cp's stride when cp > 1)."""
    tp, cp, dp = cols["tp"], cols["cp"], cols["dp"]
    out = {
        "tp": cols.get("tp_stride", 1),
        "cp": cols.get("cp_stride", tp),
        "dp": cols.get("dp_stride", tp * cp),
        "pp": cols.get("pp_stride", tp * cp * dp),
    }
    out["dpcp"] = np.where(cp > 1, out["cp"], out["dp"])
    return out


def shard_group(cols: Cols) -> Array:
    """Ranks the non-expert ZeRO states are sharded over: the plan's ``zero_shard`` column (HSDP), else all of
    dp*cp (``ParallelPlan.shard_group``)."""
    return cols.get("zero_shard", cols["dp"] * cols["cp"])


def tokens(ctx: StepContext, cols: Cols) -> Array:
    """Tokens of one micro-batch on one device: micro_batch_size * seq_len / cp."""
    return cols["micro_batch_size"] * ctx.workload.seq_len / cols["cp"]


def expert_tp(cols: Cols) -> Array:
    """Expert tensor-parallel degree: the plan's ``etp`` column where it is set (> 0), else 1 when ep > 1
    (the MoE recipes' setting) and tp otherwise (``ParallelPlan.expert_tp``)."""
    auto = np.where(cols["ep"] > 1, 1, cols["tp"])
    etp = np.asarray(cols.get("etp", 0))
    return np.where(etp > 0, etp, auto) if etp.any() else auto  # the planner's columns leave it all 0


def expert_dp(cols: Cols) -> Array:
    """Expert-data-parallel degree: dp*cp*tp / (ep * expert tp), at least 1."""
    return np.maximum(cols["dp"] * cols["cp"] * cols["tp"] // (cols["ep"] * expert_tp(cols)), 1)


def zero_exec(ctx: StepContext, cols: Cols) -> Array:
    """The ZeRO stage the stack executes: the plan's, except ZeRO-3 under a pipeline on a stack that keeps
    the stage's weights gathered and its gradients unsharded across micro-batches
    (``fsdp_reshard_with_pp`` False; torchtitan: ``reshard_after_forward = not pp_enabled``, and
    torch.distributed.pipelining's stage turns off gradient sync and resharding until the last backward),
    which runs and holds memory like ZeRO-1."""
    z = cols["zero_stage"]
    if ctx.cal.framework.fsdp_reshard_with_pp:
        return z
    return np.where((z >= 3) & (cols["pp"] > 1), 1, z)


def host_path(ctx: StepContext) -> tuple[float, float]:
    """(device <-> host copy bandwidth per device, host DRAM bandwidth per device), bytes/s: the cluster's
    ``[storage]`` figures, else the ``StorageSpec`` defaults (PCIe Gen4 x16, one DDR5 socket per node)."""
    st = ctx.cluster.storage or DEFAULT_STORAGE
    return st.device_to_host_bytes_per_s, st.host_memory_bytes_per_s / ctx.cluster.devices_per_node
