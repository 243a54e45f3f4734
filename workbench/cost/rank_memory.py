"""Memory of a pipeline rank that does not depend on the schedule (model states, buffers, the recompute
working set and the logits) and the memory columns of a rank.

Sources: ZeRO's sharding of weights, gradients and optimizer states (Rajbhandari et al. 2020,
arXiv:1910.02054, section 5); the sequence-parallel all-gather buffer (Korthikanti et al. 2022,
arXiv:2205.05198).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from workbench.cost.activations import ActivationSizes, activation_sizes, pipeline_buffer_bytes
from workbench.cost.context import Array, Cols, StepContext, expert_dp, shard_group, tokens, zero_exec
from workbench.cost.holdings import Holdings, params_held
from workbench.cost.layer import ACT_BYTES
from workbench.cost.memory import model_state_bytes, state_divisors

STATE_COLUMNS = ("parameters_bytes", "gradients_bytes", "optimizer_states_bytes")


class StaticShared(NamedTuple):
    """What ``static_memory`` needs that no pipeline rank changes, for one set of plan columns: the executed
    ZeRO stage, the sharding divisors of weights, gradients and optimizer states (``memory.state_divisors``)
    of the non-expert and of the expert parameters, the optimizer bytes per parameter, ZeRO-3's two gathered
    layers (parameters) and the buffers every rank holds. The screen builds it once per chunk for its ranks."""

    zero: Array
    dense_divisors: tuple[Array, Array, Array]
    expert_divisors: tuple[Array, Array, Array]
    optimizer_bytes: Array
    gathered: Array
    buffers: Array


def static_shared(ctx: StepContext, cols: Cols) -> StaticShared:
    """The rank-independent part of ``static_memory`` (see ``StaticShared``)."""
    model, tp = ctx.model, cols["tp"]
    zero = zero_exec(ctx, cols)
    gathered = 2 * model.layer_parameters(model.num_layers - 1) / tp
    buffers = np.where(tp > 1, 2 * tokens(ctx, cols) * model.hidden_size * ACT_BYTES, 0.0) + np.where(
        zero >= 3, gathered * ctx.param_bytes, 0.0
    )
    return StaticShared(
        zero=zero,
        dense_divisors=state_divisors(dp=shard_group(cols), zero_stage=zero),
        expert_divisors=state_divisors(dp=expert_dp(cols), zero_stage=zero),
        optimizer_bytes=np.where(cols.get("offload_optimizer", False), 0.0, ctx.optimizer_bytes),
        gathered=gathered,
        buffers=buffers,
    )


def static_memory(
    ctx: StepContext,
    cols: Cols,
    held: Holdings,
    sizes: ActivationSizes | None = None,
    shared: StaticShared | None = None,
) -> dict[str, Array]:
    """Memory of a pipeline rank that does not depend on the schedule, bytes per device: model states
    (``STATE_COLUMNS``: non-expert ones sharded over dp*cp, expert ones over the expert-data-parallel group,
    by ZeRO stage; FP8 runs with ``fp8_param_gather`` keep 1-byte weights), ``buffers_bytes`` (the
    sequence-parallel all-gather output of one layer when tp > 1, ZeRO-3's gathered weights of the current and
    the prefetched layer, and in FP8 runs the ``fp8_weight_copies`` of the layers' weights: all local ones, or
    the two gathered layers under ZeRO-3) and ``activation_extra_bytes`` (the recompute working set, plus the
    logits on the rank that holds the LM head or, where more, the offloaded layers still being copied out at the
    end of the forward pass, ``ActivationSizes.offload_in_flight``: freed before the loss, never alive with the
    logits, or where more again the ring attention's backward working set under context parallelism,
    ``ActivationSizes.cp_ring_work``, on a rank with attention layers: it comes after the LM head's backward has
    freed the logits; plus the pipeline runtime's buffers, ``activations.pipeline_buffer_bytes``). ``sizes``: ``activation_sizes(ctx, cols)`` and ``shared``:
    ``static_shared(ctx, cols)`` when the caller has them already (neither depends on the rank)."""
    dense, expert = params_held(ctx, cols, held)
    shared = static_shared(ctx, cols) if shared is None else shared
    zero = shared.zero
    kw: dict[str, Any] = {
        "param_bytes": ctx.param_bytes,
        "grad_bytes": ctx.cal.framework.held_grad_bytes_per_param(str(ctx.workload.dtype)),
        "optimizer_bytes": shared.optimizer_bytes,
    }
    d = model_state_bytes(num_params=dense, divisors=shared.dense_divisors, **kw)
    e = model_state_bytes(num_params=expert, divisors=shared.expert_divisors, **kw)
    sizes = activation_sizes(ctx, cols) if sizes is None else sizes
    gathered, buffers = shared.gathered, shared.buffers
    if ctx.fp8_copy_bytes:
        layers = sum(params_held(ctx, cols, {**held, "embedding": False, "head": False, "mtp": 0}))
        buffers = buffers + ctx.fp8_copy_bytes * np.where(zero >= 3, gathered, layers)
    return {
        **{k: a + b for k, a, b in zip(STATE_COLUMNS, d, e, strict=True)},
        "buffers_bytes": buffers + 0.0 * dense,
        "activation_extra_bytes": sizes.recompute_work
        + np.maximum(
            np.maximum((held["head"] + held["mtp"]) * sizes.logits, sizes.offload_in_flight),
            np.where(np.asarray(held["dense"]) + np.asarray(held["moe"]) > 0, sizes.cp_ring_work, 0.0),
        )
        + pipeline_buffer_bytes(sizes, held, cols)
        + 0.0 * dense,
    }


def memory_columns(
    static: Mapping[str, Array], stored_peak_bytes: Array, *, overhead_bytes: float, fragmentation_frac: float
) -> dict[str, Array]:
    """The ``MEMORY_COLUMNS`` of a rank: ``static_memory`` plus the peak of stored activations (simulated or
    closed form); other = the framework's overhead plus the allocator's fragmentation share of the rest."""
    cols = {k: static[k] for k in STATE_COLUMNS}
    cols["activations_bytes"] = stored_peak_bytes + static["activation_extra_bytes"]
    cols["buffers_bytes"] = static["buffers_bytes"]
    counted = sum(cols.values())
    cols["other_bytes"] = overhead_bytes + fragmentation_frac * counted
    return cols
