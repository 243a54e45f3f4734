"""The MoE layer's own costs: how the stack runs it on a device, its host launches, and its token dispatch.

- ``on_device``: the framework profile as the stack's recipes run a model on a device
  (``FrameworkProfile.for_device``: dispatcher, CUDA graphs, recomputed modules, EP overlap per GPU and model).
- Host launches (``moe_layer_launches``, ``expert_launches``, ``moe_host_s``): dropless routing syncs the host once per MoE layer
  forward, so the layer costs at least the host time to launch its kernels, and the launches after the sync
  plus the GPU's work before it (``moe_post_sync_host_s``, ``PRE_SYNC_OPS``, ``moe_synced_forward_s``);
  CUDA-graphed parts launch once.
- Token copies (``dispatch_passes``): HBM passes over the routed tokens outside GEMMs and transfers.
- Dispatch and combine (``moe_dispatch_s``): the all-to-all (``alltoall``, ``hybridep``) or DeepEP's
  node-deduplicated transfer (``deepep``), FP8 dispatch, expert tensor parallelism.

Vectorisation contract as in :mod:`workbench.cost.flops`: plan fields may be numpy arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from workbench.cost.comm import all_gather_s, all_to_all_s, reduce_scatter_s
from workbench.cost.memory import FP8_TILE_BYTES
from workbench.presets.calibration import Calibration
from workbench.specs.framework import FrameworkProfile
from workbench.specs.hardware import ClusterSpec, DeviceSpec, DType
from workbench.specs.model import AttentionKind, ModelSpec

Array = Any

ACT_BYTES = 2.0
"""Activations and communicated tensors are 16-bit (bf16/fp16; FP8 runs keep bf16 activations)."""


def on_device(cal: Calibration, device: DeviceSpec, model: ModelSpec) -> Calibration:
    """``cal`` with its framework profile as the stack's recipes run ``model`` on ``device``
    (``FrameworkProfile.for_device``: the device's recipe and the model's recipe on it); ``cal`` itself when
    the profile sets nothing for that pair."""
    fw = cal.framework.for_device(device.id, model.name)
    return cal if fw is cal.framework else dataclasses.replace(cal, framework=fw)


def dispatch_passes(
    fw: FrameworkProfile, model: ModelSpec, *, ep: Array, dtype: DType | str, dropless: bool
) -> Array:
    """HBM passes over the routed tokens (tokens x top-k x hidden, 16-bit) per MoE layer forward outside the
    GEMMs and the transfers: the permutation to the experts and back (``moe_dispatch_passes``), the sort by
    local expert of the ``alltoall`` dispatcher when a rank holds several experts (``moe_expert_sort_passes``)
    and the FP8 alignment padding of dropless FP8 runs (``moe_fp8_padding_passes``). ``hybridep`` permutes
    the received tokens straight into expert order, padded to the FP8 alignment (DeepEP hybrid-ep branch
    2025-11, csrc/hybrid_ep/executor/executor.cu: ``permute_launcher`` with ``pad_multiple``, which Megatron-Core
    sets to the FP8 alignment, so the experts' Fp8Padding finds aligned splits): the permutation only."""
    passes: Array = fw.moe_dispatch_passes
    if fw.moe_dispatcher == "hybridep":
        return passes
    if fw.moe_dispatcher == "alltoall":
        passes = passes + np.where(model.num_experts / np.maximum(ep, 1) > 1, fw.moe_expert_sort_passes, 0.0)
    if str(dtype) == "fp8" and dropless:
        passes = passes + fw.moe_fp8_padding_passes
    return passes


MOE_LAYER_KERNEL_PARTS: dict[str, int] = {
    "attn": 20,
    "moe_router": 12,
    "moe_preprocess": 6,
    "permute": 10,
    "dispatch": 2,
    "expert_act": 10,
}
"""Kernels one transformer layer with an MoE block launches forward, apart from the per-expert GEMMs, by part
of the layer in layer order: the attention block with its input norm and Transformer Engine's fusions
(``attn``), the pre-MLP norm and the router (logits, softmax or sigmoid, top-k, auxiliary loss or bias update:
``moe_router``), the dispatcher's preprocessing (tokens per expert, the split sizes and their exchange over
the expert group: ``moe_preprocess``), permute and unpermute with their index and probability copies
(``permute``), the dispatch and the combine (``dispatch``), the expert activation and the residual adds
(``expert_act``). Counts read from Megatron-Core's MoE layer (megatron/core/transformer/moe/, 0.15), rounded;
the first three are the parts ``FrameworkProfile.cuda_graph_scopes`` can graph."""

FUSED_ROUTER_LAUNCHES: dict[str, int] = {
    "pre_mlp_norm": 1,
    "gating_gemm": 1,
    "force_balance_logits": 2,
    "topk_with_score_function": 1,
    "aux_loss_scores": 1,
    "tokens_per_expert": 1,
    "aux_loss": 1,
    "aux_loss_tracker": 2,
}
"""Forward kernels of the ``moe_router`` part of a layer when the stack fuses the router
(``FrameworkProfile.moe_router_fusion``), in call order, read from Megatron-Core 0.15 (NVIDIA/Megatron-LM
@0d8e0714, the submodule of Megatron-Bridge v0.2.0) with Transformer Engine release_v2.9 for a top-k router with
an auxiliary load-balancing loss at tp x cp = 1 (Qwen3, GPT-OSS): the pre-MLP norm (one TE norm kernel); the
gating GEMM (moe_utils.py ``RouterGatingLinearFunction.forward``: one ``te_general_gemm``); the benchmark's
forced balance (router.py ``TopKRouter.forward`` -> ``apply_random_logits``: ``RandomSTE.forward`` clones the
logits and fills them with ``normal_``, 2; every Megatron-Bridge 25.11 MoE performance recipe sets
``moe_router_force_load_balancing = True``); ``topk_routing_with_score_function(fused=True)`` ->
``fused_topk_with_score_function`` (transformer_engine/pytorch/router.py ``FusedTopkScoreFunction``:
``tex.fused_topk_with_score_function_fwd``, whose common/fused_router/fused_topk_with_score_function.cu
launches one kernel into ``at::empty`` outputs); ``compute_routing_scores_for_aux_loss(fused=True)`` ->
``fused_score_for_moe_aux_loss_fwd`` (one kernel); ``_apply_aux_loss``: ``routing_map.sum(dim=0)`` (one
reduction; the tp x cp all-reduce is a no-op at size 1) and ``switch_load_balancing_loss_func(fused=True)`` ->
``fused_moe_aux_loss_fwd`` (one kernel, fused_moe_aux_loss.cu); ``save_to_aux_losses_tracker``: the loss over
its coefficient and the in-place add into the layer's slot (2). ``MoEAuxLossAutoScaler.forward`` launches
nothing. 10 in all. The same call sequence unfused launches 25: the softmax top-k path 8 (``torch.topk``,
``torch.softmax``, ``zeros_like`` + ``scatter`` for the probabilities, ``zeros_like`` + ``.int()`` +
``scatter`` + ``.bool()`` for the map), the aux-loss scores 6 (softmax, top-k, the map's 4) and the aux loss 4
(``probs.sum``, the product, ``torch.sum``, the scaling), where ``MOE_LAYER_KERNEL_PARTS`` keeps its rounded 12
for every stack. Backward launches are ``BACKWARD_KERNELS`` times these, as for the layer's other eager
parts."""

MOE_LAYER_KERNELS = sum(MOE_LAYER_KERNEL_PARTS.values())
"""All of them (60): what a layer launches with nothing graphed and the alltoall dispatcher."""

BACKWARD_KERNELS = 2.0
"""Kernels launched backward per kernel forward (input and weight gradients) in the eager parts of the layer."""

EXPERT_QUANTIZE_LAUNCHES: dict[str, float] = {
    "delayed": 0.0,
    "current": 3.0,
    "mxfp8": 1.0,
    "blockwise": 1.0,
    "tensorwise": 3.0,
    "rowwise": 3.0,
}
"""Kernels Transformer Engine launches per expert to quantise one input of a grouped expert GEMM to FP8, by
``FrameworkProfile.fp8_recipe`` (Transformer Engine 2.9, the release Megatron-Bridge 25.11 pins:
``GroupedLinear`` quantises its input forward and its output gradient backward with ``tex.split_quantize``,
csrc/extensions/cast.cpp, which quantises split by split except for delayed scaling; per split,
``Float8CurrentScalingQuantizer::quantize`` (csrc/quantizer.cpp) launches an amax, a scale and a cast kernel,
the MXFP8 and blockwise quantizers one cast kernel that also writes the block scales). Delayed scaling casts
every split in one fused ``nvte_multi_cast_transpose`` launch: ``GROUPED_QUANTIZE_LAUNCHES``. The weights are
quantised on the first micro-batch of a step and cached (``is_first_microbatch``): not counted."""

GROUPED_QUANTIZE_LAUNCHES: dict[str, float] = {
    "delayed": 1.0,
    "current": 0.0,
    "mxfp8": 0.0,
    "blockwise": 0.0,
    "tensorwise": 0.0,
    "rowwise": 0.0,
}
"""Launches per grouped GEMM input that do not scale with the experts (delayed scaling's fused multi-tensor
cast, see ``EXPERT_QUANTIZE_LAUNCHES``). torchao's recipes (no grouped GEMMs in torchao float8 of 2024-25)
count as current scaling: an amax, a scale and a cast per input."""


def routed_load(fw: FrameworkProfile, capacity_factor: float | None) -> float:
    """Routed copies on the busiest expert rank over the balanced share: the workload's capacity factor (experts
    padded to it), or for dropless routing the framework's ``moe_imbalance``."""
    return float(capacity_factor) if capacity_factor is not None else fw.moe_imbalance


def layer_kernel_parts(fw: FrameworkProfile) -> dict[str, int]:
    """``MOE_LAYER_KERNEL_PARTS`` as the stack runs them: the router part launches
    ``FUSED_ROUTER_LAUNCHES`` where the profile fuses the router (``moe_router_fusion``)."""
    if not fw.moe_router_fusion:
        return MOE_LAYER_KERNEL_PARTS
    return {**MOE_LAYER_KERNEL_PARTS, "moe_router": sum(FUSED_ROUTER_LAUNCHES.values())}


def moe_layer_launches(fw: FrameworkProfile) -> float:
    """Host launches of one MoE layer's forward apart from the per-expert kernels: the kernels of the
    ``MOE_LAYER_KERNEL_PARTS`` (:func:`layer_kernel_parts`) the profile does not graph, plus one launch per CUDA graph (graphed parts that
    follow one another in layer order replay as one graph, as Megatron-Core captures attn, moe_router and
    moe_preprocess in one callable); none when the whole step replays as one graph (``full_iteration``)."""
    if fw.graphs_whole_step:
        return 0.0
    scopes = set(fw.cuda_graph_scopes)
    eager = sum(n for k, n in layer_kernel_parts(fw).items() if k not in scopes)
    flags = [k in scopes for k in MOE_LAYER_KERNEL_PARTS]
    graphs = sum(1 for i, f in enumerate(flags) if f and (i == 0 or not flags[i - 1]))
    return float(eager + graphs)


def expert_launches(
    fw: FrameworkProfile, model: ModelSpec, *, dtype: DType | str, local: Array
) -> tuple[Array, Array]:
    """(forward, backward) kernel launches of the ``local`` experts' two grouped GEMMs (up/gate and down
    projection) per micro-batch: forward one GEMM per expert and each, backward an input-gradient and a
    weight-gradient GEMM; in FP8 runs each grouped GEMM's input (forward) and output gradient (backward) is
    quantised with ``EXPERT_QUANTIZE_LAUNCHES`` per expert plus ``GROUPED_QUANTIZE_LAUNCHES``. With an unfused
    expert bias (``workbench.cost.elementwise_ops.unfused_model_ops``) its product and sum add 2 forward, 4
    backward.
    ``local``: experts per rank, a number or an array over plans; the counts broadcast with it."""
    quant: Array = 0.0
    grouped = 0.0
    if str(dtype) == "fp8":
        quant = EXPERT_QUANTIZE_LAUNCHES[fw.fp8_recipe]
        grouped = GROUPED_QUANTIZE_LAUNCHES[fw.fp8_recipe]
    fwd = 2 * ((1 + quant) * local + grouped)
    bwd = 2 * ((2 + quant) * local + grouped)
    if model.expert_bias and "expert_bias" in fw.unfused_model_ops:
        fwd, bwd = fwd + 2 * local, bwd + 4 * local
    return fwd, bwd


MOE_POST_SYNC_KERNEL_SHARE: dict[str, float] = {"permute": 0.5, "dispatch": 1.0, "expert_act": 1.0}
"""Share of each part of ``MOE_LAYER_KERNEL_PARTS`` the host launches after the dropless host sync of an MoE
layer's forward (the rest, and the parts not named, come before it). Megatron-Core 0.15 (NVIDIA/Megatron-LM
@0d8e0714) ``MoEAlltoAllTokenDispatcher``: ``preprocess`` sets ``cuda_sync_point = "before_ep_alltoall"``
for dropless routing with ep > 1, so the host blocks in ``token_dispatch`` (``_maybe_dtoh_and_synchronize``:
``d2h_event.synchronize()``) after the router, the preprocessing and the first permutation
(``dispatch_preprocess``) and before the all-to-all, the sort by local expert, the experts, the unsort, the
combine and the unpermutation: half of ``permute`` (the first permutation comes before), all of ``dispatch``
and ``expert_act``, and every per-expert launch (:func:`expert_launches`). The flex dispatcher's HybridEP
syncs inside its dispatch, at the same place in the layer."""

PRE_SYNC_OPS = frozenset(
    {
        "qkv_proj",
        "qk_norm",
        "layout_copies",
        "attention_core",
        "attention_window",
        "out_proj",
        "router",
        "yarn_rope_unfused",
    }
)
"""Forward ops of an MoE layer (``workbench.cost.flops.layer_ops``) the GPU runs before the layer's dropless
host sync (the attention block and the router: ``MOE_POST_SYNC_KERNEL_SHARE``). Ops that straddle the sync
(the norms and residual adds with the experts' activation in ``norms_elementwise``, the FP8 casts of attention
and expert inputs) are left out, so their sum is a lower bound of the GPU's time before the sync."""


UNFUSED_OP_LAUNCHES: dict[str, float] = {
    "yarn_rope": 24.0,
    "glu_clamp": 4.0,
    "expert_bias": 2.0,
    "attention_bias_add": 1.0,
}
"""Forward kernel launches per layer of each unfused model op (``workbench.cost.elementwise_ops.
UNFUSED_MODEL_OP_PASSES`` prices their bytes), read from Megatron-Core 0.15 (NVIDIA/Megatron-LM @0d8e0714):

- ``yarn_rope``: ``rope_utils._apply_rotary_pos_emb_bshd`` on the queries and on the keys, 12 each: cos, the
  mscale product and the cast of the frequencies (3), the same for sin (3), the product by cos, the negation
  and the concatenation of ``_rotate_half``, the product by sin, the sum and the concatenation with the
  pass-through part (6). Inside the attention block: before the MoE sync, and replayed in its CUDA graph
  where ``cuda_graph_scopes`` has ``attn``.
- ``glu_clamp``: ``fused_bias_geglu.weighted_bias_quick_geglu_impl`` clamps each half and concatenates them
  (3) and copies ``linear_offset`` to the device with ``torch.tensor`` (1). After the sync.
- ``expert_bias``: ``experts.TEGroupedMLP._apply_bias`` concatenates the experts' outputs and casts the fp32
  result back (2), besides the product and the sum per expert that :func:`expert_launches` counts. After the
  sync.
- ``attention_bias_add``: ``fused_bias_dropout._bias_dropout_add_func`` unfused adds the output projection's
  bias (1) before the residual add a fused bias-dropout-add launches too (dropout at p = 0 launches nothing).
  In the attention block (``TransformerLayer._forward_attention``): before the sync, and replayed in its CUDA
  graph where ``cuda_graph_scopes`` has ``attn``.

Backward launches are ``BACKWARD_KERNELS`` times these, as for the layer's other eager kernels."""


def unfused_op_launches(fw: FrameworkProfile, model: ModelSpec) -> tuple[float, float]:
    """(before the dropless sync, after it) forward launches of the unfused model ops of one MoE layer
    (``UNFUSED_OP_LAUNCHES``) that the stack runs eagerly (``FrameworkProfile.unfused_model_ops``) and the
    model has: YaRN RoPE outside MLA and the attention output bias's add (none where the attention block is
    CUDA-graphed), a clamped GLU, the experts' output bias."""
    unfused, pre, post = fw.unfused_model_ops, 0.0, 0.0
    yarn = model.rope_scaling == "yarn" and model.attention is not AttentionKind.MLA
    if "yarn_rope" in unfused and yarn and "attn" not in fw.cuda_graph_scopes:
        pre += UNFUSED_OP_LAUNCHES["yarn_rope"]
    bias_add = model.attention_out_bias or model.linear_bias
    if "attention_bias_add" in unfused and bias_add and "attn" not in fw.cuda_graph_scopes:
        pre += UNFUSED_OP_LAUNCHES["attention_bias_add"]
    if "glu_clamp" in unfused and model.glu_clamp:
        post += UNFUSED_OP_LAUNCHES["glu_clamp"]
    if "expert_bias" in unfused and model.expert_bias:
        post += UNFUSED_OP_LAUNCHES["expert_bias"]
    return pre, post


QK_NORM_LAUNCHES = 2.0
"""Forward launches of the per-head query and key norms of a model with ``qk_norm`` (Qwen3): Megatron-Core
0.15 calls ``q_layernorm`` and ``k_layernorm``, each a Transformer Engine norm module, one ``rmsnorm_fwd``
kernel apiece (megatron/core/transformer/attention.py ``get_query_key_value_tensors``), inside the attention
block: before the MoE host sync, and replayed in its CUDA graph where ``cuda_graph_scopes`` has ``attn``. Not
in ``MOE_LAYER_KERNEL_PARTS``' attention count, which is the block every model has. Backward launches are
``BACKWARD_KERNELS`` times these."""


def qk_norm_launches(fw: FrameworkProfile, model: ModelSpec) -> float:
    """Eager forward launches of one layer's query/key norms (``QK_NORM_LAUNCHES``): none without ``qk_norm``,
    under MLA (its latent norms are in its own block) or where the attention block is CUDA-graphed."""
    if not model.qk_norm or model.attention is AttentionKind.MLA or "attn" in fw.cuda_graph_scopes:
        return 0.0
    return QK_NORM_LAUNCHES


RECOMPUTE_LAUNCHES: dict[str, float] = {"layernorm": 1.0, "moe_act": 1.0}
"""Forward kernels the backward pass launches again per MoE layer for each module of
``FrameworkProfile.recompute_modules`` (Megatron-Core 0.15, NVIDIA/Megatron-LM @0d8e0714, each rerun by a
``CheckpointWithoutOutput`` in the backward): ``layernorm`` the pre-MLP norm (one Transformer Engine norm
kernel; the input norm is fused into the QKV projection, ``IdentityOp`` in the Transformer Engine layer spec,
and transformer/transformer_layer.py recomputes the pre-MLP norm of an MoE layer only where neither ``moe`` nor
``moe_router`` is CUDA-graphed), ``moe_act`` the experts' activation (``TEGroupedMLP`` checkpoints
``bias_act_func``: the weighted SwiGLU or quick-GeGLU that ``megatron.core.jit.jit_fuser`` compiles into one
kernel), plus the eager clamps of a clamped GLU (``UNFUSED_OP_LAUNCHES`` glu_clamp) that the same function
runs first."""


def recompute_launches(fw: FrameworkProfile, model: ModelSpec) -> float:
    """Forward launches one MoE layer's backward reissues to recompute the profile's ``recompute_modules``
    (``RECOMPUTE_LAUNCHES``); 0 when it recomputes none of them."""
    modules, scopes = fw.recompute_modules, fw.cuda_graph_scopes
    n = 0.0
    if "layernorm" in modules and not {"moe", "moe_router"} & set(scopes):
        n += RECOMPUTE_LAUNCHES["layernorm"]
    if "moe_act" in modules:
        n += RECOMPUTE_LAUNCHES["moe_act"]
        if "glu_clamp" in fw.unfused_model_ops and model.glu_clamp:
            n += UNFUSED_OP_LAUNCHES["glu_clamp"]
    return n


def moe_post_sync_host_s(model: ModelSpec, cal: Calibration, *, dtype: DType | str, ep: Array) -> Array:
    """Host seconds to launch the forward kernels of one MoE layer that follow its dropless host sync
    (``MOE_POST_SYNC_KERNEL_SHARE`` of the eager parts plus the local experts' :func:`expert_launches`), times
    ``host_s_per_kernel``; 0 when the whole step replays as one CUDA graph. The graphable parts
    (``cuda_graph_scopes``: attn, moe_router, moe_preprocess) all come before the sync."""
    fw = cal.framework
    local = model.num_experts / np.maximum(ep, 1)
    if fw.graphs_whole_step:
        return 0.0 * local
    experts_f, _ = expert_launches(fw, model, dtype=dtype, local=local)
    eager = sum(MOE_LAYER_KERNEL_PARTS[k] * share for k, share in MOE_POST_SYNC_KERNEL_SHARE.items())
    return (eager + unfused_op_launches(fw, model)[1] + experts_f) * fw.host_s_per_kernel


def moe_synced_forward_s(
    host_s: Array, post_sync_host_s: Array, gpu_s: Array, pre_sync_gpu_s: Array
) -> Array:
    """Forward seconds of one MoE layer whose host blocks once per layer until the GPU has drained (the
    dropless sync, ``moe_host_sync``): ``max(G, H, H_post + G_pre)``. Between two syncs the host launches the
    kernels after this layer's sync (``post_sync_host_s``, H_post) and then the next layer's up to its sync; the
    GPU, idle when the sync returns, runs the first part as the launches arrive and cannot start the second
    part (``pre_sync_gpu_s``, G_pre) before the host has launched the first, so a period lasts at least
    H_post + G_pre, besides the layer's GPU time G (``gpu_s``) and host time H (``host_s``). Without the sync
    the host queues layers ahead and only ``max(G, H)`` binds. Arrays broadcast."""
    return np.maximum(np.maximum(gpu_s, host_s), post_sync_host_s + pre_sync_gpu_s)


def moe_host_s(model: ModelSpec, cal: Calibration, *, dtype: DType | str, ep: Array) -> tuple[Array, Array]:
    """(forward, backward) host seconds to launch one MoE layer per micro-batch: ``moe_layer_launches``, the
    unfused model ops' :func:`unfused_op_launches` and the query/key norms' :func:`qk_norm_launches` (and
    ``BACKWARD_KERNELS`` times them backward, with the recomputed modules' :func:`recompute_launches`) plus the
    local experts' :func:`expert_launches`, times the framework's ``host_s_per_kernel``. A stack that syncs the host on every MoE layer (``moe_host_sync``:
    Megatron-Core's alltoall dispatcher copies the tokens per expert to the CPU before the all-to-all, the flex
    dispatcher's Hybrid-EP reads the dispatched token count on the host when dropless, and grouped GEMMs take
    their splits from the host) cannot queue work ahead, so the layer takes at least this long each way. A
    capacity factor (drop-and-pad) fixes the splits and removes the sync; CUDA graphs (``cuda_graph_scopes``)
    cut launches. ``cal``'s profile as resolved for the device (:func:`on_device`)."""
    fw = cal.framework
    local = model.num_experts / np.maximum(ep, 1)
    if fw.graphs_whole_step:
        return 0.0 * local, 0.0 * local
    experts_f, experts_b = expert_launches(fw, model, dtype=dtype, local=local)
    eager = moe_layer_launches(fw) + sum(unfused_op_launches(fw, model)) + qk_norm_launches(fw, model)
    per_kernel, redo = fw.host_s_per_kernel, recompute_launches(fw, model)
    return (eager + experts_f) * per_kernel, (BACKWARD_KERNELS * eager + experts_b + redo) * per_kernel


FP8_DISPATCH_BYTES = FP8_TILE_BYTES
"""Bytes per value of an FP8 dispatch: one e4m3 byte plus one fp32 scale per 128 values (DeepSeek-V3's
1x128 tile-wise quantisation, arXiv:2412.19437 section 3.3.2; DeepEP's FP8 dispatch)."""


def nodes_reached(model: ModelSpec, ep_nodes: Array) -> Array:
    """Expected distinct nodes a token's top-k experts lie on, with the experts spread evenly over
    ``ep_nodes`` nodes and routing uniform over the allowed ones: ``M (1 - (1 - 1/M)^k)`` for M allowed nodes
    (the chance a node holds none of k independent picks is (1 - 1/M)^k). Group-limited routing caps M: a
    token may use ``routed_groups_per_token`` of ``num_expert_groups`` groups, each spanning
    ``max(1, ep_nodes / num_expert_groups)`` nodes (DeepSeek-V3 section 2.1.2: at most 4 nodes)."""
    n = np.maximum(np.asarray(ep_nodes, dtype=float), 1.0)
    allowed = n
    if model.num_expert_groups and model.routed_groups_per_token:
        per_group = np.maximum(n / model.num_expert_groups, 1.0)
        allowed = np.minimum(n, model.routed_groups_per_token * per_group)
    k = model.experts_per_token
    return allowed * (1 - (1 - 1 / allowed) ** k)


def ranks_reached(model: ModelSpec, ep: Array) -> Array:
    """Expected distinct expert-parallel ranks a token's top-k experts lie on, the experts spread evenly over
    ``ep`` ranks and routing uniform (forced-balance benchmarks): ``ep (1 - (1 - 1/ep)^k)`` (the chance a rank
    holds none of k independent picks is (1 - 1/ep)^k; :func:`nodes_reached` with ranks for nodes)."""
    n = np.maximum(np.asarray(ep, dtype=float), 1.0)
    return n * (1 - (1 - 1 / n) ** model.experts_per_token)


def moe_dispatch_s(
    model: ModelSpec,
    cluster: ClusterSpec,
    cal: Calibration,
    *,
    dtype: DType | str,
    tokens: Array,
    tp: Array,
    ep: Array,
    capacity_factor: float | None = None,
    etp: Array = 1,
) -> tuple[Array, Array]:
    """(forward, backward) seconds of one MoE layer's token dispatch and combine on one device per micro-batch.

    Each device sends ``tokens/tp`` tokens, ``k x routed_load`` routed copies each, of
    ``hidden`` values, over an ep group of ranks ``etp`` apart. ``alltoall``: every copy travels to its
    expert's rank (:func:`workbench.cost.comm.all_to_all_s`). ``hybridep`` is priced the same: it sends a token
    once per rank it reaches (:func:`ranks_reached`) but from 32 SMs, and its published GB200 rate, ~545 GB/s
    of received bytes at 8 ranks and ~480-520 GB/s at 16-32 (deepseek-ai/DeepEP hybrid-ep branch,
    docs/README_Hybrid-EP.md: 4096 tokens x 7168, top-8, 32 SMs, torch API), matches the NCCL-model time of all
    copies at 8 ranks (0.58 ms vs 0.57 ms) and runs up to 1.35x slower at 32. ``deepep``: a token crosses the network once per
    remote node it reaches (``nodes_reached`` times (N - 1) / N of them for N nodes in the group), then its
    copies fan out over NVLink; the network and NVLink legs run pipelined, the slower one sets the time.
    The forward dispatch sends FP8 (``FP8_DISPATCH_BYTES``) in FP8 runs with ``moe_fp8_dispatch``; the combine
    and both backward transfers carry 16-bit values. With expert tensor parallelism (ep > 1, etp > 1; the ep
    ranks ``etp`` apart) the etp ranks of an expert all-gather the tokens routed to it before its GEMMs and
    reduce-scatter the outputs after (Megatron-Core's MoE parallel folding), each way again backward."""
    cal = on_device(cal, cluster.device, model)
    fw = cal.framework
    eff = fw.collective_efficiency_frac
    copies = model.experts_per_token * routed_load(fw, capacity_factor)
    per_value = tokens / tp * model.hidden_size
    dispatch_bytes = FP8_DISPATCH_BYTES if (str(dtype) == "fp8" and fw.moe_fp8_dispatch) else ACT_BYTES

    def one(bytes_per_value: float) -> Array:
        routed = per_value * copies * bytes_per_value
        if fw.moe_dispatcher in ("alltoall", "hybridep"):
            return all_to_all_s(cluster, routed, ep, etp, eff)
        node = cluster.devices_per_node
        per_node = np.maximum(np.minimum(ep, node // np.minimum(etp, node)), 1)
        inside = all_to_all_s(cluster, routed, per_node, etp, eff)
        nodes = np.maximum(ep // per_node, 1)
        remote = nodes_reached(model, nodes) * (nodes - 1) / nodes
        network = all_to_all_s(
            cluster,
            per_value * remote * bytes_per_value * nodes / np.maximum(nodes - 1, 1),
            nodes,
            per_node * etp,
            eff,
        )
        return np.maximum(inside, np.where(nodes > 1, network, 0.0))

    gathered = per_value * copies * ACT_BYTES * etp
    folding = np.where(
        (ep > 1) & (etp > 1),
        all_gather_s(cluster, gathered, etp, 1, eff) + reduce_scatter_s(cluster, gathered, etp, 1, eff),
        0.0,
    )
    fwd = one(dispatch_bytes) + one(ACT_BYTES) + folding
    return fwd, 2 * one(ACT_BYTES) + folding
