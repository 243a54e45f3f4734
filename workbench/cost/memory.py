"""Memory per device: weights, gradients, optimizer states, activations, buffers (bytes).

Model states (Rajbhandari et al. 2020, ZeRO, arXiv:1910.02054, section 3.1; Megatron-LM distributed
optimizer docs): mixed precision keeps a ``param_bytes`` copy of every weight (2 for bf16/fp16/fp8 runs), a
gradient buffer of ``grad_bytes`` (Megatron accumulates in fp32: 4), and Adam's fp32 master weights and two
moments (12 bytes; SGD with momentum: 8). Megatron counts 2 + 4 + 12 = 18 bytes per parameter, or
6 + 12/dp with the distributed optimizer (= ZeRO-1). ZeRO stage >= 1 shards the optimizer states over the
data-parallel group, >= 2 also the gradients, 3 also the weights. Expert weights shard over the
expert-data-parallel group ``dp*cp*tp/ep``.

Activations per layer per micro-batch follow Korthikanti et al. 2022 (arXiv:2205.05198), section 4 and
Table 2: ``s b h (34 + 5 a s / h)`` bytes for a GPT layer with 16-bit activations and dropout, of which
``10 s b h`` lie outside the tensor-parallel region (split only with sequence parallelism), ``24 s b h`` and
the ``5 a s^2 b`` score tensors inside it; selective recompute drops the score tensors; full recompute keeps
only the layer input ``2 s b h``. Here the 34 is derived from the layer's shapes (GQA/MLA widths, gated MLP,
MoE top-k, dropout on or off) so that it reduces to Korthikanti's numbers for GPT; FlashAttention keeps no
s^2 tensor, only a 4-byte log-sum-exp per head and token.

All functions take scalars or numpy arrays for plan fields and broadcast elementwise. Recompute is coded
``RECOMPUTE_CODES`` (none 0, selective 1, full 2) so that it vectorises with ``np.where``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from workbench.specs.model import AttentionKind, ModelSpec

Array = Any

RECOMPUTE_CODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2}


class StateBytes(NamedTuple):
    parameters_bytes: Array
    gradients_bytes: Array
    optimizer_states_bytes: Array


def state_divisors(*, dp: Array, zero_stage: Array) -> tuple[Array, Array, Array]:
    """(weights, gradients, optimizer states) sharding divisors over ``dp`` ranks by ZeRO stage: stage >= 1
    divides the optimizer states, >= 2 the gradients, 3 the weights (Rajbhandari et al., ZeRO, sec. 5)."""
    return (
        np.where(zero_stage >= 3, dp, 1),
        np.where(zero_stage >= 2, dp, 1),
        np.where(zero_stage >= 1, dp, 1),
    )


def model_state_bytes(
    *,
    num_params: Array,
    dp: Array = 1,
    zero_stage: Array = 0,
    param_bytes: float = 2.0,
    grad_bytes: float = 4.0,
    optimizer_bytes: Array = 12.0,
    divisors: tuple[Array, Array, Array] | None = None,
) -> StateBytes:
    """Weights, gradients and optimizer states of ``num_params`` local parameters sharded over ``dp`` ranks
    by ZeRO stage (``state_divisors``; pass ``divisors`` instead of dp and zero_stage when they are known)."""
    w, g, o = state_divisors(dp=dp, zero_stage=zero_stage) if divisors is None else divisors
    return StateBytes(
        param_bytes * num_params / w, grad_bytes * num_params / g, optimizer_bytes * num_params / o
    )


class ActivationParts(NamedTuple):
    """Bytes per token of one layer's saved activations (16-bit values, 1-byte dropout masks)."""

    outside_tp: float
    """Norm inputs, block inputs and dropout masks: replicated over tp unless sequence parallel."""
    inside_tp: float
    """Q, K, V, attention output, MLP hidden: split over tp."""
    scores_per_key: float
    """Bytes per (token, key) of the unfused attention scores over all heads (0 with FlashAttention)."""
    weight_grad_inputs: float
    """What a deferred weight-gradient pass (W) holds from the end of the layer's I pass until it runs (the
    GEMM inputs and the GEMMs' output gradients, ``weight_grad_stash_bytes``): its h-wide part, whole on every
    tensor-parallel rank."""
    layer_input: float
    """The layer's input, all that full recompute keeps (replicated over tp unless sequence parallel)."""
    op_sac_inside: float = 0.0
    """Per-op selective checkpointing (torchtitan): attention output and log-sum-exp plus every second
    matmul output, inside the tp region (the layer input is kept as well)."""
    weight_grad_inside_tp: float = 0.0
    """The part of the deferred weight-gradient stash split over tp (``weight_grad_stash_bytes``)."""


FP8_TILE_BYTES = 1.0 + 4.0 / 128
"""Bytes per value kept in FP8 (E4M3) with one fp32 scale per 1x128 tile (DeepSeek-V3, arXiv:2412.19437,
section 3.3.2, fine-grained quantisation)."""
TE_FP8_BYTES = 1.0
"""Bytes per value of the FP8 (E4M3) copy Transformer Engine keeps of a linear layer's input under per-tensor
scaling (delayed or current: one fp32 scale per tensor, negligible per value)."""
E5M6_BYTES = 1.5
"""12-bit E5M6: DeepSeek-V3's format for the attention output kept for the output projection's backward
(section 3.3.3)."""


def activation_parts(
    model: ModelSpec,
    *,
    flash: bool,
    dropout: bool,
    act_bytes: float = 2.0,
    moe_layer: bool = False,
    capacity_factor: float = 1.0,
    fp8_cache: bool = False,
    fp8_saved_inputs: bool = False,
    fused_glu: bool = False,
    recompute_cheap: bool = False,
    recompute_modules: tuple[str, ...] = (),
    unfused_glu_clamp: bool = False,
) -> ActivationParts:
    """Korthikanti et al. 2022 section 4.1, generalised to GQA/MLA, gated MLPs and MoE (see module doc).

    MLA layers also keep their low-rank latents (the up-projections' inputs, and the inputs of the latents'
    RMSNorms). ``fp8_cache`` (``FrameworkProfile.fp8_activation_cache``): the linear layers' inputs and the
    MLP's stored values in FP8 (``FP8_TILE_BYTES``), the attention output in E5M6 (``E5M6_BYTES``).
    ``fp8_saved_inputs`` (``FrameworkProfile.fp8_saved_inputs``, Transformer Engine's FP8 linears): every linear
    layer keeps its quantised input (``TE_FP8_BYTES`` per value) for the backward pass, the norm outputs of the
    fused norm+linear layers included; the attention kernel keeps its own 16-bit output and the output
    projection an FP8 copy of it. ``fused_glu`` (``FrameworkProfile.fused_glu``): the MLP's activation saves
    only its input ((n_mat - 1) f values, 16-bit) and the second linear its input (f values at the linear
    layers' bytes), instead of the eager activation's inputs and outputs.
    ``recompute_cheap`` (``FrameworkProfile.recompute_cheap_ops``): RMSNorm outputs (the QKV, latent and MLP
    inputs), MLA's up-projected q, k, v and everything the MLP derives from its activation function's inputs
    are recomputed, not stored. DeepSeek-V3 sections 3.2.3 and 3.3.3 (arXiv:2412.19437).
    ``recompute_modules`` (``FrameworkProfile.recompute_modules``, Megatron-Core's selective modules) drops
    a subset: ``layernorm`` the norm outputs, ``mla_up_proj`` MLA's up-projected q, k, v, ``moe_act`` the
    routed experts' activation output (MoE layers). ``unfused_glu_clamp`` (a clamped GLU,
    ``ModelSpec.glu_clamp``, that the stack clamps with eager kernels:
    ``workbench.cost.elementwise_ops.unfused_model_ops``): the clamp keeps its own input for its backward pass
    beside the clamped copy the activation keeps, (n_mat - 1) * f more values per token through the MLP
    (dropped with the activation under ``moe_act`` recompute or the cheap-op recompute)."""
    h, a = model.hidden_size, model.num_attention_heads
    mla = model.attention is AttentionKind.MLA
    kv = a if mla else model.num_key_value_heads
    dqk, dv = model.qk_head_dim, model.value_head_dim
    drop = 1.0 if dropout else 0.0
    te_fp8 = fp8_saved_inputs and not fp8_cache
    # a linear layer's stored input
    linear = FP8_TILE_BYTES if fp8_cache else TE_FP8_BYTES if te_fp8 else act_bytes
    modules = set(recompute_modules)
    norm_out = 0.0 if (recompute_cheap or "layernorm" in modules) else linear  # a norm output feeding a GEMM
    # two norm inputs, QKV input and MLP input (the norms' outputs), two dropout masks
    outside = act_bytes * 2 * h + norm_out * 2 * h + drop * 2 * h
    up_proj = recompute_cheap or "mla_up_proj" in modules
    qkv = 0.0 if (mla and up_proj) else act_bytes * (a * dqk + kv * dqk + kv * dv)
    attn = qkv + (E5M6_BYTES if fp8_cache else act_bytes) * a * dv + (0.0 if not flash else 4.0 * a)
    attn += TE_FP8_BYTES * a * dv if te_fp8 else 0.0  # the output projection's own FP8 copy of its input
    if mla:  # latents: their norms' inputs and outputs (the up-projections' inputs)
        attn += (act_bytes + norm_out) * (model.q_lora_rank + model.kv_lora_rank)
    mlp = _mlp_bytes(
        model,
        moe_layer=moe_layer,
        capacity_factor=capacity_factor,
        act_bytes=act_bytes,
        linear=linear,
        per_value=linear if fp8_cache else act_bytes,
        recompute_cheap=recompute_cheap,
        fused_glu=fused_glu,
        modules=modules,
        unfused_glu_clamp=unfused_glu_clamp,
    )
    scores = 0.0 if flash else a * (act_bytes + drop * (1 + act_bytes))
    wgrad_whole, wgrad_split = weight_grad_stash_bytes(model, moe_layer=moe_layer, act_bytes=act_bytes)
    if mla or moe_layer:  # half of the matmul outputs, in no exact order
        proj_out = act_bytes * (a * dqk + kv * dqk + kv * dv) + act_bytes * h
        mm_out = (mlp - (4.0 * model.num_experts if moe_layer else 0.0)) * 2 / 3 + proj_out
        saved_mm = 0.5 * mm_out
    else:
        saved_mm = act_bytes * sum(op_sac_saved_matmul_widths(model))
    op_sac = act_bytes * a * dv + 4.0 * a + saved_mm
    return ActivationParts(outside, attn + mlp, scores, wgrad_whole, act_bytes * h, op_sac, wgrad_split)


def weight_grad_stash_bytes(
    model: ModelSpec, *, moe_layer: bool = False, act_bytes: float = 2.0
) -> tuple[float, float]:
    """Bytes per token one layer's deferred weight-gradient pass (W of a split backward) holds between the
    layer's I pass and its W pass, as (whole on every tensor-parallel rank, split over tp): for each linear
    layer its input and its output gradient (``dW = X^T dY`` needs both), 16-bit. The zero-bubble fork stashes
    exactly these: its ``LinearWithGradAccumulationAndAsyncCommunication.backward`` computes the input gradient
    and hands ``(total_input, grad_output, weight, func)`` to ``WeightGradStore.put``
    (megatron/core/tensor_parallel/layers.py), which keeps them until the schedule's W pops them and runs
    ``func(total_input, grad_output, weight.main_grad)`` (megatron/core/weight_grad_store.py;
    sail-sg/zero-bubble-pipeline-parallelism @ed85b11c, 2023-11-03, the release of the ICLR 2024 paper's code).

    Per token, with ``n_mat`` = 3 for a gated MLP else 2 and f the (expert) MLP width. Whole (h wide: the
    column-parallel GEMMs' ``total_input``, gathered under sequence parallelism, and the row-parallel GEMMs'
    output gradients): QKV input h, first MLP GEMM input h, output-projection and second MLP GEMM output
    gradients h each. Split over tp: output-projection input ``a d_v``, second MLP GEMM input f, QKV output
    gradient ``a d_qk + kv (d_qk + d_v)``, first MLP GEMM output gradient ``(n_mat - 1) f``. An MoE layer's
    expert GEMMs count ``experts_per_token`` times (the routed copies of each token). A GPT layer (f = 4h):
    16h values, 32h bytes, at tp = 1."""
    h, a = model.hidden_size, model.num_attention_heads
    kv = a if model.attention is AttentionKind.MLA else model.num_key_value_heads
    dqk, dv = model.qk_head_dim, model.value_head_dim
    n_mat = 3 if model.gated_mlp else 2
    f, k = (model.moe_ffn_hidden_size, model.experts_per_token) if moe_layer else (model.ffn_hidden_size, 1)
    whole = (h + h) + k * (h + h)
    split = (a * dv + a * dqk + kv * (dqk + dv)) + k * (f + (n_mat - 1) * f)
    return act_bytes * whole, act_bytes * split


def _mlp_bytes(
    model: ModelSpec,
    *,
    moe_layer: bool,
    capacity_factor: float,
    act_bytes: float,
    linear: float,
    per_value: float,
    recompute_cheap: bool,
    fused_glu: bool,
    modules: set[str],
    unfused_glu_clamp: bool,
) -> float:
    """Bytes per token the MLP of one layer keeps for its backward pass (``activation_parts``): the dense MLP's
    hidden values, or an MoE layer's routed copies (their inputs and hidden values), its shared experts and
    the fp32 router logits. ``linear``: bytes per stored linear-layer input; ``per_value``: per other stored
    value (FP8 with the activation cache, else 16-bit)."""
    h = model.hidden_size
    n_mat = 3 if model.gated_mlp else 2
    clamp = (n_mat - 1) if unfused_glu_clamp and model.glu_clamp else 0  # the clamp's saved input, per f
    if moe_layer:
        f = model.moe_ffn_hidden_size
        k = model.experts_per_token * capacity_factor
        full = (2 * (n_mat - 1) + 1) * f
        kept = per_value * (n_mat - 1) * f if recompute_cheap else per_value * full
        routed = per_value * (
            (n_mat - 1) * f if (recompute_cheap or "moe_act" in modules) else full + clamp * f
        )
        if fused_glu and not recompute_cheap:  # the fused activation's input and the second GEMM's input
            kept = fused_mlp_bytes(f, n_mat, act_bytes, linear)
            if "moe_act" not in modules:
                routed = fused_mlp_bytes(f, n_mat, act_bytes, linear) + per_value * clamp * f
        mlp = k * (linear * h + routed) + model.num_shared_experts * kept
        return mlp + 4.0 * model.num_experts  # fp32 router logits
    f = model.ffn_hidden_size
    eager = (2 * (n_mat - 1) + (1 if model.gated_mlp else 0) + clamp) * f
    if fused_glu and not recompute_cheap:
        return fused_mlp_bytes(f, n_mat, act_bytes, linear) + per_value * clamp * f
    return per_value * ((n_mat - 1) * f if recompute_cheap else eager)


def op_sac_saved_matmul_widths(model: ModelSpec) -> tuple[int, ...]:
    """Output widths (values per token) of the matmuls torchtitan's per-op selective checkpointing saves in a
    dense layer: it counts the block's matmuls in forward order and saves the odd-numbered ones, recomputing
    the rest (pytorch/torchtitan @b5bcd76, torchtitan/distributed/activation_checkpoint.py, ``wrapped_policy``:
    "Save all compute/comm ops, except every second mm/linear", ``meta[mm_count_key] % 2 == 0`` ->
    PREFER_RECOMPUTE). The order is that of torchtitan's Llama block (models/llama3/model.py): wq, wk, wv, wo,
    then w1, w3, w2 (gated) or w1, w2; so wq, wv, w1 and, gated, w2 are kept. The attention op's output and
    log-sum-exp are saved too (the SDPA ops are in the save list)."""
    a, kv = model.num_attention_heads, model.num_key_value_heads
    widths = [a * model.qk_head_dim, kv * model.qk_head_dim, kv * model.value_head_dim, model.hidden_size]
    f = model.ffn_hidden_size
    widths += [f, f, model.hidden_size] if model.gated_mlp else [f, model.hidden_size]
    return tuple(widths[0::2])


def fused_mlp_bytes(f: float, n_mat: int, act_bytes: float, linear_bytes: float) -> float:
    """Bytes per token an MLP of width ``f`` keeps with a fused activation (``FrameworkProfile.fused_glu``):
    the activation's 16-bit input, (n_mat - 1) f values (gate and up projections for a gated MLP), and the
    second linear layer's input, f values at ``linear_bytes`` (16-bit, or the FP8 copy Transformer Engine
    keeps). Megatron-Core ``fusions/fused_bias_swiglu.py`` (``save_for_backward(input_for_backward, bias)``)."""
    return act_bytes * (n_mat - 1) * f + linear_bytes * f


def layer_activation_bytes(
    parts: ActivationParts,
    *,
    tokens: Array,
    seq_len: Array,
    tp: Array,
    sequence_parallel: Array,
    recompute: Array,
    selective_op: bool = False,
) -> Array:
    """Saved activations of one layer for one micro-batch on one device (``tokens`` = b s / cp; ``seq_len``
    the keys each query sees). Recompute codes: 0 none, 1 selective (no score tensors; with ``selective_op``
    torchtitan's per-op SAC), 2 full (layer input only): Korthikanti et al. 2022 Table 2."""
    split_out = np.where(sequence_parallel, tp, 1)
    kept = parts.outside_tp / split_out + parts.inside_tp / tp
    scores = parts.scores_per_key * seq_len / tp
    full = parts.layer_input / split_out
    selective = full + parts.op_sac_inside / tp if selective_op else kept
    return tokens * np.select([recompute == 0, recompute == 1], [kept + scores, selective], full)


def recompute_working_bytes(
    parts: ActivationParts,
    *,
    tokens: Array,
    seq_len: Array,
    tp: Array,
    sequence_parallel: Array,
    recompute: Array,
) -> Array:
    """Transient memory of recomputing one layer during the backward pass (full recompute: the whole layer's
    activations of one micro-batch; selective: the score tensors of one layer)."""
    split_out = np.where(sequence_parallel, tp, 1)
    whole = tokens * (
        parts.outside_tp / split_out + parts.inside_tp / tp + parts.scores_per_key * seq_len / tp
    )
    sel = tokens * parts.scores_per_key * seq_len / tp
    return np.select([recompute == 2, recompute == 1], [whole, sel], 0.0)


def logits_bytes(
    model: ModelSpec, *, tokens: Array, tp: Array, bytes_per_logit: float = 10.0, loss_chunks: Array = 1
) -> Array:
    """Last stage: what the loss keeps alive at the start of the backward, ``bytes_per_logit`` per logit of
    one micro-batch (vocab split over tp; ``FrameworkProfile.loss_bytes_per_logit``: 10 = the 16-bit logits,
    their fp32 upcast and its fp32 gradient). With ``loss_chunks`` > 1 (fused linear cross-entropy,
    ``workbench.cost.flops.head_ops``) only one chunk's are alive at a time."""
    return tokens / loss_chunks * model.vocab_size / tp * bytes_per_logit


def cp_ring_backward_bytes(
    model: ModelSpec,
    *,
    tokens: Array,
    cp: Array,
    tp: Array,
    rotate_method: str,
    repeats_kv: bool = False,
) -> Array:
    """Peak working set of one attention layer's backward pass under torch's experimental context parallel
    (``FrameworkProfile.cp_rotate_method``), bytes per device, beyond what the same SDPA backward holds without
    cp (its dQ, dK, dV outputs): 0 where cp = 1 or ``rotate_method`` is ``""``.

    Source: ``_templated_ring_attention_backward`` (torch/distributed/tensor/experimental/_attention.py, torch
    @1963fc8 of 2024-12-23, the torch of torchtitan's 2024-12 benchmarks; the same code in torch 2.13's
    ``_context_parallel/_attention.py``). It runs inside DTensor's dispatch of the SDPA backward op, below
    autograd, so what the layer saves for its backward is unchanged (local q, k, v, output, log-sum-exp); the
    working set is its own buffers. With ``y`` = query values and ``x`` = key+value values of the local tokens
    (``tokens`` x the widths per tp rank), the peak over the ring's steps and ranks is the larger of

    - a step i >= 1 on a rank that adds dK/dV into part of the block (``i <= rank``): the fp32 dQ accumulator
      (``torch.zeros_like(query, dtype=float32)``, 4y), four fp32 dK/dV blocks (16x: the block received from the
      previous rank, which the all-to-all rotater still holds; the ``_partial_update`` copies; the concatenation
      sent on; the receive buffer of the next), the 16-bit keys and values (``allgather``: the gathered
      sequence, ``2 cp x``, and the concatenation ``next_kv``, 2x; ``alltoall``: the received block and
      ``next_kv``, plus the next receive buffer when the step is not the last: 4x or 6x), less the half of dK/dV
      that step's kernel skips (-x);
    - with ``allgather``, step 1's ``next_kv`` concatenation: the gathered sequence, the step-0 contiguous copies
      of the keys and values (``key = key.contiguous()`` on the transposed views the model hands SDPA), the
      step-0 and step-1 concatenations when step 1 is not the last (``2 cp x + 2x + 2x [+ 2x]``), three fp32
      dK/dV blocks (the step-0 zero accumulators, the concatenation sent, its receive buffer: 12x) and 4y.

    That is ``allgather``: ``(2 cp + 17 + [cp >= 3]) x + 4 y``; ``alltoall``: ``(19 + 2 [cp >= 3]) x + 4 y``, as
    tests/test_cp_ring_memory.py measures on torch's own function (its live tensors on 2 and 4 gloo ranks, each
    collective's input held until its output is waited on, as ProcessGroupNCCL stashes it).
    ``repeats_kv`` (``FrameworkProfile.attention_repeats_kv``): the keys and values reach the kernel repeated to
    the query heads (torchtitan @9dec370 ``repeat_kv``), ``x = t (a / tp)(d_qk + d_v)`` (so too under MLA,
    whose keys and values have a heads); else ``t max(1, kv / tp)(d_qk + d_v)``. The forward's ring (the
    gathered keys and values, the fp32 merge of the partial outputs in ``_SDPAMerger``) holds less and is freed
    before the layer's backward starts. Shapes: numpy arrays or scalars, broadcast."""
    cp = np.asarray(cp)
    if rotate_method not in ("", "allgather", "alltoall"):
        raise ValueError(
            f"cp_ring_backward_bytes: rotate_method must be '', 'allgather' or 'alltoall'; got {rotate_method!r}"
        )
    if not rotate_method:
        return np.zeros_like(cp * tokens, dtype=float)
    a, dqk, dv = model.num_attention_heads, model.qk_head_dim, model.value_head_dim
    tp = np.asarray(tp)
    full_heads = repeats_kv or model.attention is AttentionKind.MLA
    kv_local = a / tp if full_heads else np.maximum(model.num_key_value_heads / tp, 1)
    y = tokens * a / tp * dqk
    x = tokens * kv_local * (dqk + dv)
    later = cp >= 3  # step 1 is not the last step
    per_x = 2 * cp + 17 + later if rotate_method == "allgather" else 19 + 2 * later
    return np.where(cp > 1, per_x * x + 4.0 * y, 0.0)
