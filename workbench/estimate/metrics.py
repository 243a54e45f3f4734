"""The figures every tier and backend reports, defined once: tokens/s, MFU, HFU, achieved FLOP/s, bubble.

MFU follows PaLM (Chowdhery et al. 2022, appendix B): ``ModelSpec.model_flop_per_token`` (6N + attention,
full s^2, no recompute) over the dense peak of the workload's dtype (FP8 runs: the FP8 peak). HFU adds the
recomputed FLOPs (full: the layers' forward, 2 N_layers + attention/3; selective: the attention scores'
forward, attention/3), the convention of Megatron's eq. 3 (Narayanan et al. 2021, arXiv:2104.04473).

Bubble vocabulary (one name per figure):
- ``bubble_s``: pipeline idle time of the critical rank (the busiest one) in one step, pipeline sends
  excluded (they are ``exposed_pp_comm_s``); ``bubble_fraction`` = bubble_s / step_time_s. This is the
  figure the CLI, the report and the app show as "bubble".
- ``mean_idle_fraction``: a schedule's property, the mean idle share of the makespan over the ranks
  (``SimResult.bubble_fraction_of_step``), shown only by ``workbench schedule`` as "mean idle".
All functions broadcast over numpy arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

Array = Any


def hardware_flop_per_token(
    model: ModelSpec, seq_len: int, recompute_code: Array, recompute_share: Array = 1.0
) -> Array:
    """Model FLOPs per token plus the recomputed ones (recompute code 0 none, 1 selective, 2 full; with full,
    ``recompute_share`` of the layers, ``workbench.cost.step.recompute_share``, for partial recompute)."""
    attention = model.attention_flop_per_token(seq_len)
    layers = model.non_embedding_active_parameters() - model.lm_head_parameters()
    extra = np.select(
        [recompute_code == 2, recompute_code == 1],
        [(2.0 * layers + attention / 3) * recompute_share, attention / 3],
        0.0,
    )
    return model.model_flop_per_token(seq_len) + extra


def throughput(
    model: ModelSpec,
    workload: Workload,
    *,
    step_time_s: Array,
    num_devices: Array,
    peak_flop_per_s: float,
    recompute_code: Array,
    recompute_share: Array = 1.0,
) -> dict[str, Array]:
    """tokens_per_s (whole cluster), mfu, hfu and model_flop_per_s_per_device of a step of ``step_time_s``;
    ``recompute_share``: see :func:`hardware_flop_per_token`."""
    tokens = workload.tokens_per_step
    model_flop = model.model_flop_per_token(workload.seq_len) * tokens
    hardware_flop = hardware_flop_per_token(model, workload.seq_len, recompute_code, recompute_share) * tokens
    per_device = model_flop / step_time_s / num_devices
    return {
        "tokens_per_s": tokens / step_time_s,
        "mfu": per_device / peak_flop_per_s,
        "hfu": hardware_flop / step_time_s / num_devices / peak_flop_per_s,
        "model_flop_per_s_per_device": per_device,
    }


def bubble_fraction(bubble_s: Array, step_time_s: Array) -> Array:
    """The critical rank's pipeline bubble over the step time (see the module docstring)."""
    return bubble_s / step_time_s
