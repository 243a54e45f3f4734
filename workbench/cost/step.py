"""The step model on arrays: every cost of a training step outside the pipeline schedule, one code path.

Plans are columns (``Cols``): numpy arrays, or 0-d arrays for a single plan, of tp, cp, pp, dp, ep, vpp,
micro_batch_size, zero_stage, recompute_code (index into ``RECOMPUTE_CODES``), sequence_parallel and
num_microbatches, optionally with the group strides tp_stride, cp_stride, dp_stride and pp_stride (default:
Megatron's rank order, tp innermost, then cp, dp, pp; see :mod:`workbench.cost.placement`). What a pipeline
stage or rank holds is a ``Holdings`` dict (dense and MoE layer counts, embedding and LM-head flags) that
broadcasts against the columns: the full estimate passes one plan and arrays over its stages and ranks, the
planner's screen millions of plans and their first or last rank. Both tiers call these functions and
nothing else for compute, exposed tp/cp/ep/ZeRO-3 communication, the pipeline hop, the data-parallel
reduction, the optimizer step and every memory part; they differ only in the pipeline term (simulated
schedule vs closed forms of :mod:`workbench.pipeline.bubble` and :mod:`workbench.pipeline.peak`).

The parts, each in its own module (all importable from here):

- :mod:`workbench.cost.context`: ``StepContext`` (model, cluster, workload, calibration and what they imply),
  a plan as columns (``plan_columns``), its groups (``strides``, ``shard_group``, ``expert_tp``, ``zero_exec``);
- :mod:`workbench.cost.holdings`: what a stage or rank holds (``stage_holdings``, ``rank_holdings``,
  ``spread_vocab``) and its parameters (``params_held``);
- :mod:`workbench.cost.activations`: activation bytes per micro-batch (``activation_sizes``) and the share of
  the layers recomputed (``recompute_share``);
- :mod:`workbench.cost.micro_batch`: seconds per micro-batch of what a stage or rank holds (``layer_pair``,
  ``share_s``, ``fsdp_layer_s``) and the pipeline hop (``pp_hop_s``);
- :mod:`workbench.cost.update`: the data-parallel reduction (``dp_comm_s``) and the optimizer step
  (``optimizer_s``);
- :mod:`workbench.cost.rank_memory`: the schedule-independent memory of a rank (``static_memory``) and its
  memory columns (``memory_columns``).

Sources: ZeRO sharding and its communication (Rajbhandari et al. 2020, arXiv:1910.02054, sections 5.1-5.3);
Megatron's pipeline hop of 1/tp of the activations (Narayanan et al. 2021, arXiv:2104.04473, section 4.1);
Adam's HBM traffic per parameter (read fp32 gradient, read and write fp32 master weight and both moments,
write the 16-bit weight: 4 + 24 + 2 bytes).
"""

from __future__ import annotations

from workbench.cost.activations import (
    OFFLOAD_WORKING_LAYERS,
    ActivationSizes,
    activation_sizes,
    recompute_share,
    stored_activation_bytes,
)
from workbench.cost.context import (
    OPTIMIZER_BYTES_PER_PARAM,
    Array,
    Cols,
    StepContext,
    expert_tp,
    host_path,
    optimizer_state_bytes_per_param,
    plan_columns,
    shard_group,
    strides,
    tokens,
    zero_exec,
)
from workbench.cost.holdings import (
    Holdings,
    params_held,
    rank_holdings,
    spread_vocab,
    stage_holdings,
    stage_layer_span,
)
from workbench.cost.memory import (
    RECOMPUTE_CODES,
)
from workbench.cost.micro_batch import (
    LAYER_COLUMNS,
    FsdpLayer,
    LayerPair,
    compute_s,
    fsdp_layer_s,
    layer_columns,
    layer_pair,
    mean_layer_compute_s,
    pp_blocking_s,
    pp_hop_s,
    pp_hop_table_s,
    pp_latency_s,
    share_s,
    vocab_parallel_comm_s,
    whole_share,
)
from workbench.cost.rank_memory import (
    STATE_COLUMNS,
    StaticShared,
    memory_columns,
    static_memory,
    static_shared,
)
from workbench.cost.update import (
    HOST_ADAM_BYTES_PER_PARAM,
    dp_comm_s,
    grad_buckets,
    optimizer_s,
)

__all__ = [
    "ActivationSizes",
    "Array",
    "Cols",
    "FsdpLayer",
    "HOST_ADAM_BYTES_PER_PARAM",
    "Holdings",
    "LAYER_COLUMNS",
    "LayerPair",
    "OFFLOAD_WORKING_LAYERS",
    "OPTIMIZER_BYTES_PER_PARAM",
    "RECOMPUTE_CODES",
    "STATE_COLUMNS",
    "StaticShared",
    "StepContext",
    "activation_sizes",
    "compute_s",
    "dp_comm_s",
    "expert_tp",
    "fsdp_layer_s",
    "grad_buckets",
    "host_path",
    "layer_columns",
    "layer_pair",
    "mean_layer_compute_s",
    "memory_columns",
    "optimizer_s",
    "optimizer_state_bytes_per_param",
    "params_held",
    "plan_columns",
    "pp_blocking_s",
    "pp_hop_s",
    "pp_hop_table_s",
    "pp_latency_s",
    "rank_holdings",
    "recompute_share",
    "shard_group",
    "share_s",
    "spread_vocab",
    "stage_holdings",
    "stage_layer_span",
    "static_memory",
    "static_shared",
    "stored_activation_bytes",
    "strides",
    "tokens",
    "vocab_parallel_comm_s",
    "whole_share",
    "zero_exec",
]
