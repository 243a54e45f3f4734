"""One pool's share of a pipeline, priced with the step model of :mod:`workbench.cost.step` (no formula of its own).

A pool runs some stages of a pipeline that crosses pools. Its stages are priced exactly as the homogeneous
estimate prices a stage: ``StepContext.build`` on the pool's own ``ClusterSpec`` (its device, kernel table and
calibration, its NVLink and fabric), ``plan_columns`` of a ``ParallelPlan`` carrying the pool's tensor-parallel
degree and the fields every pool shares (dp, the pipeline depth, micro-batch, ZeRO stage, recompute, schedule),
then ``layer_pair``, ``share_s`` (seconds per micro-batch of what a stage holds), ``static_memory``,
``stored_activation_bytes``, ``memory_columns``, ``dp_comm_s`` and ``optimizer_s``. ``PoolGrid`` holds the answers
to "how long and how big is a stage of n layers at this position on this pool" for many layouts of the pool at
once: the plan columns are arrays over the layouts and the holdings arrays over the stage position (first,
middle, last, the only one) and the layer count, so one call of each step function prices the whole grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.cost import step
from workbench.specs.plan import ParallelPlan, Recompute

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

Array = Any


def pool_plan(
    *, tp: int, dp: int, pp: int, micro_batch_size: int, zero_stage: int, recompute: str, schedule: str
) -> ParallelPlan:
    """The ``ParallelPlan`` a pool's stages are priced with: its tp (sequence parallel when tp > 1), the shared
    dp (replicas of each stage, all inside the pool), the whole pipeline's depth ``pp`` (ZeRO's behaviour under a
    pipeline and the overlap of the gradient reduction read it), micro-batch, ZeRO stage, recompute, schedule."""
    return ParallelPlan(
        dp=dp,
        tp=tp,
        pp=pp,
        micro_batch_size=micro_batch_size,
        zero_stage=zero_stage,
        sequence_parallel=tp > 1,
        recompute=Recompute(recompute),
        schedule=schedule,
    )


def holdings(layers: Array, *, embedding: Array = False, head: Array = False) -> step.Holdings:
    """What a stage of a dense model holds: ``layers`` decoder layers, and the embedding / LM head flags (mixed
    clusters price models without multi-token prediction)."""
    return {
        "dense": np.asarray(layers),
        "moe": 0,
        "embedding": np.asarray(embedding),
        "head": np.asarray(head),
        "mtp": 0,
    }


POSITIONS: tuple[tuple[bool, bool], ...] = ((True, False), (False, False), (False, True), (True, True))
"""Stage positions as (holds the embedding, holds the LM head): first, middle, last, the only stage."""


def position_index(stage: int, num_stages: int) -> int:
    """Index into ``POSITIONS`` of pipeline ``stage`` of ``num_stages``."""
    return POSITIONS.index((stage == 0, stage == num_stages - 1))


@dataclass(frozen=True, kw_only=True)
class PoolGrid:
    """One pool priced for K layouts over every stage position and layer count 0..L: arrays of shape
    (position, layout, layers) = (4, K, L + 1), each from the step model (see the module docstring)."""

    plans: tuple[ParallelPlan, ...]
    forward_s: np.ndarray
    backward_input_s: np.ndarray
    backward_weight_s: np.ndarray
    """F, I, W of one micro-batch on a stage holding that many layers (communication folded in), s."""
    stored_bytes: np.ndarray
    """Activations one micro-batch leaves on such a stage, bytes."""
    empty_bytes: np.ndarray
    """Peak memory of such a rank with no stage activations stored, bytes (``memory_columns`` total)."""
    per_microbatch_bytes: np.ndarray
    """What each micro-batch in flight adds to that peak (its stored activations through ``memory_columns``,
    which is linear in them), bytes."""
    total_s: np.ndarray
    """F + I + W, s."""
    dp_comm_s: np.ndarray
    """Exposed data-parallel reduction of such a stage after the pipeline flush, s."""
    optimizer_s: np.ndarray
    usable_bytes: float
    """Memory a rank of this pool may use: (1 - headroom) x the device's HBM, bytes."""
    share_s: dict[str, np.ndarray]
    """Every part of ``step.share_s`` (compute, the exposed communication by kind, the hidden ``hidden_<kind>``), s,
    read-only views of that shape: what ``PlanCosts`` reports per rank."""
    static_bytes: dict[str, np.ndarray]
    """``step.static_memory`` by part, bytes, read-only views of that shape: ``PlanCosts.rank_memory``."""


def price_grid(
    model: ModelSpec,
    pool: ClusterSpec,
    workload: Workload,
    cal: Calibration,
    plans: list[ParallelPlan],
    *,
    headroom_frac: float,
) -> PoolGrid:
    """Price ``plans`` on ``pool`` for every position and layer count in one pass (``PoolGrid``)."""
    ctx = step.StepContext.build(model, pool, workload, cal)
    one = [step.plan_columns(p, workload) for p in plans]
    cols = {k: np.stack([c[k] for c in one])[None, :, None] for k in one[0]}
    pair = step.layer_pair(ctx, cols)
    fsdp = step.fsdp_layer_s(ctx, cols, step.mean_layer_compute_s(model, pair))
    sizes = step.activation_sizes(ctx, cols)
    first = np.array([p[0] for p in POSITIONS])[:, None, None]
    last = np.array([p[1] for p in POSITIONS])[:, None, None]
    held = holdings(np.arange(model.num_layers + 1)[None, None, :], embedding=first, head=last)
    shape = (len(POSITIONS), len(plans), model.num_layers + 1)
    share = step.share_s(pair, held, fsdp)
    stored = step.stored_activation_bytes(sizes, held)
    static = step.static_memory(ctx, cols, held)
    fw = cal.framework

    def total(stored_peak: Any) -> Any:
        parts = step.memory_columns(
            static, stored_peak, overhead_bytes=fw.context_bytes, fragmentation_frac=fw.fragmentation_frac
        )
        return sum(np.asarray(v, dtype=float) for v in parts.values())

    dense, expert = step.params_held(ctx, cols, held)
    whole = step.whole_share(model, pair, fsdp)
    empty = total(0.0 * stored)

    def full(x: Any) -> np.ndarray:
        return view(x).copy()

    def view(x: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(x, dtype=float), shape)

    return PoolGrid(
        plans=tuple(plans),
        forward_s=full(share["f"]),
        backward_input_s=full(share["i"]),
        backward_weight_s=full(share["w"]),
        total_s=full(share["f"] + share["i"] + share["w"]),
        stored_bytes=full(stored),
        empty_bytes=full(empty),
        per_microbatch_bytes=full(total(stored) - empty),
        dp_comm_s=full(step.dp_comm_s(ctx, cols, dense, expert, whole).exposed),
        optimizer_s=full(step.optimizer_s(ctx, cols, dense, expert)),
        usable_bytes=(1.0 - headroom_frac) * pool.device.hbm_bytes,
        share_s={k: view(v) for k, v in share.items()},
        static_bytes={k: view(v) for k, v in static.items()},
    )
