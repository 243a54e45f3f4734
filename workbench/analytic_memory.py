"""Per-pipeline-rank memory table of the analytic backend (formulas in :mod:`workbench.memory`).

Rows: one per pipeline rank (ranks differing only in dp/tp/cp/ep coordinates hold the same bytes), columns
``rank`` + ``MEMORY_COLUMNS`` + ``total_bytes``. Activations at peak = the simulated schedule's peak of
stored micro-batch activations on that rank (``SimResult.peak_activation_bytes_per_rank``) + the transient
working set of one recomputed layer + the logits of one micro-batch on the rank holding the LM head.
Buffers: the sequence-parallel all-gather output of one layer (2 x tokens*h), ZeRO-3's gathered weights of
the current and the prefetched layer. Other: the calibration's framework overhead plus its fragmentation
share of everything else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from workbench.costs import ACT_BYTES
from workbench.estimate import MEMORY_COLUMNS
from workbench.memory import (
    RECOMPUTE_CODES,
    activation_parts,
    layer_activation_bytes,
    logits_bytes,
    model_state_bytes,
    recompute_working_bytes,
)

if TYPE_CHECKING:
    from workbench.analytic import StagePlan
    from workbench.calibration import Calibration
    from workbench.model import ModelSpec
    from workbench.plan import ParallelPlan, Workload
    from workbench.schedules import Schedule


def expert_tp(plan: ParallelPlan) -> int:
    """Expert tensor-parallel degree: 1 when ep > 1 (Megatron-Core's usual setting), else tp."""
    return 1 if plan.ep > 1 else plan.tp


def stage_param_counts(
    model: ModelSpec, plan: ParallelPlan, layout: StagePlan
) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) parameters held per device for each stage."""
    expert_one = model.mlp_parameters(model.moe_ffn_hidden_size) if model.is_moe else 0
    experts_layer = model.num_experts * expert_one
    moe_other = model.layer_parameters(model.num_layers - 1) - experts_layer if model.is_moe else 0
    dense_layer = model.layer_parameters(0)
    nd, nm = np.array(layout.num_dense_layers), np.array(layout.num_moe_layers)
    emb, head = np.array(layout.has_embedding), np.array(layout.has_head)
    head_params = model.lm_head_parameters() + (model.embedding_parameters() if model.tied_embeddings else 0)
    dense = (
        nd * dense_layer + nm * moe_other + emb * model.embedding_parameters() + head * head_params
    ) / plan.tp
    expert = nm * experts_layer / (plan.ep * expert_tp(plan))
    return dense.astype(float), expert.astype(float)


def stage_activation_bytes(
    model: ModelSpec, workload: Workload, plan: ParallelPlan, cal: Calibration, layout: StagePlan
) -> tuple[np.ndarray, float, float]:
    """Per stage the stored activations of one micro-batch; the share freed when I ends (split backward);
    the transient of one recomputed layer."""
    tokens = plan.micro_batch_size * workload.seq_len / plan.cp
    kw = dict(
        tokens=tokens,
        seq_len=workload.seq_len,
        tp=plan.tp,
        sequence_parallel=plan.sequence_parallel,
        recompute=RECOMPUTE_CODES[plan.recompute.value],
    )
    op = cal.selective_recompute == "op"
    dense_parts = activation_parts(model, flash=cal.flash_attention, dropout=cal.dropout, act_bytes=ACT_BYTES)
    per_dense = float(layer_activation_bytes(dense_parts, selective_op=op, **kw))
    per_moe, moe_parts = 0.0, dense_parts
    if model.is_moe:
        moe_parts = activation_parts(
            model,
            flash=cal.flash_attention,
            dropout=cal.dropout,
            act_bytes=ACT_BYTES,
            moe_layer=True,
            capacity_factor=cal.capacity_factor,
        )
        per_moe = float(layer_activation_bytes(moe_parts, selective_op=op, **kw))
    nd, nm = np.array(layout.num_dense_layers), np.array(layout.num_moe_layers)
    emb = (
        np.array(layout.has_embedding)
        * tokens
        * model.hidden_size
        * ACT_BYTES
        / (plan.tp if plan.sequence_parallel else 1)
    )
    per_stage = nd * per_dense + nm * per_moe + emb
    total = dense_parts.outside_tp + dense_parts.inside_tp
    freed = (
        float(np.clip(1 - dense_parts.weight_grad_inputs / total, 0, 1))
        if plan.recompute.value == "none"
        else 0.0
    )
    worst = moe_parts if model.is_moe else dense_parts
    work = float(recompute_working_bytes(worst, **kw))
    return per_stage.astype(float), freed, work


def memory_table(
    model: ModelSpec,
    workload: Workload,
    plan: ParallelPlan,
    cal: Calibration,
    schedule: Schedule,
    layout: StagePlan,
    peak_activation_bytes_per_rank: tuple[float, ...],
    *,
    param_bytes: float,
    recompute_work_bytes: float,
) -> pl.DataFrame:
    """One row per pipeline rank: rank, MEMORY_COLUMNS (bytes), total_bytes."""
    dense, expert = stage_param_counts(model, plan, layout)
    s2r = np.array(schedule.stage_to_rank)
    dense_r = np.bincount(s2r, weights=dense, minlength=plan.pp)
    expert_r = np.bincount(s2r, weights=expert, minlength=plan.pp)
    optimizer_bytes = 12.0 if workload.optimizer.value == "adamw" else 8.0
    if not cal.master_weights:
        optimizer_bytes -= 4.0
    kw = dict(
        zero_stage=plan.zero_stage,
        param_bytes=param_bytes,
        grad_bytes=cal.grad_bytes_per_param,
        optimizer_bytes=optimizer_bytes,
    )
    edp = max(plan.dp * plan.cp * plan.tp // (plan.ep * expert_tp(plan)), 1)
    d_states = model_state_bytes(num_params=dense_r, dp=plan.dp * plan.cp, **kw)
    e_states = model_state_bytes(num_params=expert_r, dp=edp, **kw)
    tokens = plan.micro_batch_size * workload.seq_len / plan.cp
    head_rank = int(s2r[-1])
    logits = np.where(np.arange(plan.pp) == head_rank, logits_bytes(model, tokens=tokens, tp=plan.tp), 0.0)
    acts = np.array(peak_activation_bytes_per_rank) + recompute_work_bytes + logits
    buffers = np.full(plan.pp, 2 * tokens * model.hidden_size * ACT_BYTES if plan.tp > 1 else 0.0)
    if plan.zero_stage >= 3:
        buffers += 2 * model.layer_parameters(model.num_layers - 1) / plan.tp * param_bytes
    cols = {
        "parameters_bytes": d_states.parameters_bytes + e_states.parameters_bytes,
        "gradients_bytes": d_states.gradients_bytes + e_states.gradients_bytes,
        "optimizer_states_bytes": d_states.optimizer_states_bytes + e_states.optimizer_states_bytes,
        "activations_bytes": acts,
        "buffers_bytes": buffers,
    }
    counted = sum(np.asarray(v, dtype=float) for v in cols.values())
    cols["other_bytes"] = cal.framework_overhead_bytes + cal.fragmentation_frac * counted
    frame = pl.DataFrame(
        {"rank": np.arange(plan.pp), **{k: np.asarray(v, dtype=float) for k, v in cols.items()}}
    )
    assert tuple(frame.columns[1:]) == MEMORY_COLUMNS
    return frame.with_columns(total_bytes=pl.sum_horizontal(list(MEMORY_COLUMNS)))
