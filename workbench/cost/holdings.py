"""What a pipeline stage or rank holds (``Holdings``): its layers, the embedding, the LM head and the
multi-token-prediction modules, and the parameters that makes on one device.

A ``Holdings`` dict broadcasts against the plan columns (:mod:`workbench.cost.context`): the full estimate
passes one plan and arrays over its stages and ranks, the planner's screen millions of plans and their first
or last rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workbench.cost.context import Array, Cols, StepContext, expert_tp

if TYPE_CHECKING:
    from workbench.specs.model import ModelSpec

Holdings = dict[str, Array]
"""dense, moe: layer counts (the blocks of multi-token-prediction modules included); embedding, head: 0/1 (or
bool) flags; mtp: multi-token-prediction modules held (their norms, projection and second head pass).
Arrays broadcast against ``Cols``."""


def _stage_position(num_stages: Array, stage: Array) -> Array:
    """Rank of ``stage`` in the order that receives the remainder layers: middle stages nearest the centre
    first (the lower one first on a tie), then the first stage, then the last."""
    d = np.abs(2 * stage - (num_stages - 1))
    middle = np.maximum(d - 1, 0) + (num_stages - 1 - stage < stage)
    edge = np.maximum(num_stages - 2, 0) + (stage == num_stages - 1) * (num_stages > 1)
    return np.where((stage == 0) | (stage == num_stages - 1), edge, middle)


def stage_layer_span(num_layers: int, num_stages: Array, stage: Array) -> tuple[Array, Array]:
    """(first layer, layer count) of pipeline ``stage`` of ``num_stages``, elementwise: layers go in order; when
    the stages do not divide them, the remainder goes one each to the middle stages nearest the centre,
    sparing the first and the last (embedding and LM head), as Megatron-LM's uneven split does."""
    base, extra = np.divmod(num_layers, num_stages)
    count = base + (_stage_position(num_stages, stage) < extra)
    # The remainder stages are a run [lo, lo + k) of middle stages around the centre (the centre-most first,
    # the lower on a tie, so the run grows alternately down and up), then the first stage once every middle
    # stage has one: count those before ``stage`` in closed form.
    k = np.minimum(extra, np.maximum(num_stages - 2, 0))
    centre = (num_stages - 1) // 2
    lo = np.where(num_stages % 2 == 0, centre + 1 - (k + 1) // 2, centre - k // 2)
    start = stage * base + np.clip(stage - lo, 0, k) + ((extra > num_stages - 2) & (stage > 0) & (extra > 0))
    return start, count


def stage_holdings(model: ModelSpec, num_stages: Array, stage: Array) -> Holdings:
    """What pipeline ``stage`` of ``num_stages`` holds, elementwise: the layers of ``stage_layer_span``
    (dense-first layers land on the first stages), the embedding on stage 0 and the LM head on the last.
    A model's multi-token-prediction modules (``ModelSpec.num_mtp_layers``) sit on the last stage after the
    head, and the split counts each as one more layer there (each is a block like the last layer, counted in
    ``dense`` or ``moe``), so that stage keeps fewer decoder layers, as Megatron-Bridge's DeepSeek-V3 recipes
    lay them out (``pipeline_model_parallel_layout``: the stage with ``mtp`` and ``loss`` holds the
    remainder, e.g. one decoder layer of 61 at pp16)."""
    mtp = model.num_mtp_layers
    start, count = stage_layer_span(model.num_layers + mtp, num_stages, stage)
    last = stage == num_stages - 1
    count = count - np.where(last, mtp, 0)  # the MTP blocks are the last "layers"
    dense = np.clip(model.num_layers - model.num_moe_layers - start, 0, count)
    held_mtp = np.where(last, mtp, 0)
    extra_moe = held_mtp if model.num_moe_layers else 0
    return {
        "dense": dense + (held_mtp - extra_moe),
        "moe": count - dense + extra_moe,
        "embedding": stage == 0,
        "head": last,
        "mtp": held_mtp,
    }


def rank_holdings(
    model: ModelSpec, *, pp: Array, vpp: Array, v_shape: Array, rank: Array, copies: Array = 1
) -> Holdings:
    """What pipeline ``rank`` holds: stages r, r+p, ... (looping placement) or r and 2p-1-r (V placement).

    ``copies``: copies of the model the pipeline holds, one per direction it is fed from (1; DualPipe: 2,
    ``workbench.pipeline.schedules.num_directions``; DeepSeek-V3 report, arXiv:2412.19437 Table 2: parameters
    2x). The model is then cut into pp*vpp/copies blocks and stage s holds block s mod pp*vpp/copies, so
    DualPipe's rank r holds blocks r and p-1-r. The ``copies`` entry of the result tells ``share_s`` that one
    micro-batch goes through one copy: 1/copies of what the rank holds."""
    out: Holdings = {"dense": 0, "moe": 0, "embedding": False, "head": False, "mtp": 0, "copies": copies}
    blocks = pp * vpp // copies
    for k in range(int(np.max(vpp)) if np.size(vpp) else 0):
        stage = np.where(v_shape, np.where(k == 0, rank, 2 * pp - 1 - rank), rank + k * pp)
        held = k < vpp
        one = stage_holdings(model, blocks, np.where(held, stage % blocks, 0))
        out = {
            "dense": out["dense"] + np.where(held, one["dense"], 0),
            "moe": out["moe"] + np.where(held, one["moe"], 0),
            "embedding": out["embedding"] | (held & one["embedding"]),
            "head": out["head"] | (held & one["head"]),
            "mtp": out["mtp"] + np.where(held, one["mtp"], 0),
            "copies": copies,
        }
    return out


def spread_vocab(held: Holdings, cols: Cols, holders: Array) -> Holdings:
    """``held`` with the vocabulary layers spread (``ParallelPlan.vocab_parallel``, pp > 1): every one of the
    ``holders`` (the pipeline ranks, or the stages) holds 1/holders of the embedding and of the LM head with its
    loss instead of the first and the last holding them whole (Yeung et al. 2024, "Balancing Pipeline
    Parallelism with Vocabulary Parallelism", arXiv:2411.05288)."""
    on = np.asarray(cols.get("vocab_parallel", False), dtype=bool) & (np.asarray(cols["pp"]) > 1)
    if not np.any(on):
        return held
    share = 1.0 / np.asarray(holders, dtype=float)
    return {
        **held,
        "embedding": np.where(on, share, held["embedding"]),
        "head": np.where(on, share, held["head"]),
    }


def params_held(ctx: StepContext, cols: Cols, held: Holdings) -> tuple[Array, Array]:
    """(non-expert, expert) parameters one device holds for ``held``: non-expert weights split over tp,
    experts over ep times the expert tp."""
    model = ctx.model
    experts_layer = (
        model.num_experts * model.mlp_parameters(model.moe_ffn_hidden_size, expert=True)
        if model.is_moe
        else 0
    )
    moe_other = model.layer_parameters(model.num_layers - 1) - experts_layer if model.is_moe else 0
    head_params = model.lm_head_parameters() + (model.embedding_parameters() if model.tied_embeddings else 0)
    mtp = np.asarray(held["mtp"])
    h = model.hidden_size
    # MTP modules: their norms and projection, and a copy of the shared embedding where the rank has none
    mtp_params = mtp * (2 * h * h + 2 * h) + np.where(
        (mtp > 0) & ~np.asarray(held["embedding"], dtype=bool) & (not model.tied_embeddings),
        model.embedding_parameters(),
        0,
    )
    dense = (
        held["dense"] * model.layer_parameters(0)
        + held["moe"] * moe_other
        + held["embedding"] * model.embedding_parameters()
        + held["head"] * head_params
        + mtp_params
    ) / cols["tp"]
    return dense * 1.0, held["moe"] * experts_layer / (cols["ep"] * expert_tp(cols))
