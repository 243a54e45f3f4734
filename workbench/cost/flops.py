"""Compute costs of one transformer layer: FLOPs and HBM bytes per op (their roofline time: op_time.py).

Every count is per device, per micro-batch, per layer, for the forward pass, after sharding by tp (heads and
MLP columns), cp (the sequence: a device holds ``tokens = b * s / cp`` queries and attends to all ``s`` keys)
and ep (experts). This module lists the attention and MLP ops, a whole block (``layer_ops``), the head,
the embedding and the multi-token-prediction modules; the element-wise, unfused and FP8-cast ops are in
:mod:`workbench.cost.elementwise_ops`, and the time of an op list, with the backward rule of each op kind
(matmul, attention, memory), in :mod:`workbench.cost.op_time` (``op_times``).

Causal convention: *model* FLOPs count the full s^2 score products (PaLM appendix B and Megatron eq. 3 both
do, so does ``ModelSpec.model_flop_per_token``); *executed* FLOPs count half of them when attention is
fused (FlashAttention skips masked blocks) and all of them on the unfused path, whose softmax and dropout
also move the b*a*s^2 scores through HBM.

Vectorisation contract: every function here takes Python scalars or numpy arrays for the plan-dependent
inputs (``tokens``, ``seq_len``, ``tp``, ``sequence_parallel``, ``ep``) and broadcasts elementwise; branches on
plan fields use ``np.where``. Model and device fields are scalars (the planner screens one model on one
device at a time). The analytic backend and the planner call these same functions.
"""

from __future__ import annotations

import numpy as np

from workbench.cost.elementwise_ops import (
    FP8_CAST_BYTES,
    FP8_VALUE_BYTES,
    FP8_WEIGHT_CAST_PER_USE,
    UNFUSED_MODEL_OP_PASSES,
    cheap_recompute_ops,
    elementwise_op,
    fp8_cast_op,
    unfused_model_ops,
)
from workbench.cost.op_time import (
    FLASH_BACKWARD_FLOP_RATIO,
    Array,
    Op,
    OpTimes,
    matmul_efficiency_frac,
    op_times,
    roofline_time_s,
)
from workbench.specs.model import AttentionKind, ModelSpec

__all__ = [
    "FLASH_BACKWARD_FLOP_RATIO",
    "FP8_CAST_BYTES",
    "FP8_VALUE_BYTES",
    "FP8_WEIGHT_CAST_PER_USE",
    "UNFUSED_MODEL_OP_PASSES",
    "UNFUSED_SCORE_PASSES",
    "Array",
    "Op",
    "OpTimes",
    "attended_keys_frac",
    "attention_ops",
    "cheap_recompute_ops",
    "elementwise_op",
    "embedding_ops",
    "fp8_cast_op",
    "fused_core_ops",
    "head_ops",
    "layer_ops",
    "matmul_efficiency_frac",
    "megatron_flop_per_iteration",
    "mlp_ops",
    "mtp_ops",
    "op_times",
    "roofline_time_s",
    "unfused_model_ops",
]

UNFUSED_SCORE_PASSES = 6.0
"""HBM passes over the b*a*s^2 score tensor per forward on the unfused path: the score GEMM writes it (1),
scale-mask-softmax reads and writes it (2), dropout reads it and writes output and mask (2.5, the mask is
1 byte), the value GEMM reads it (0.5 counted with the mask rounding). Korthikanti et al. 2022 section 4.1
lists the same tensors for memory (2 + 1 + 2 bytes per score)."""


def attended_keys_frac(model: ModelSpec, seq_len: Array) -> Array:
    """Mean keys a query attends to, over ``seq_len`` keys, as a share of the full score matrix, averaged
    over the layers: 1/2 for causal attention, ``(w - w^2 / (2 s)) / s`` in a layer with a window of
    w < s keys (``ModelSpec.sliding_window``; query i sees min(i + 1, w) keys, the mean over s queries to
    O(1/s)), ``c / (2 s)`` in a chunked-local layer with chunks of c < s tokens (``attention_chunk_size``;
    query i sees the i mod c + 1 keys of its chunk, Llama 4). What a fused kernel executes: it skips the
    blocks the causal, window or chunk mask empties (at block granularity, which this ignores)."""
    s = np.maximum(np.asarray(seq_len, dtype=float), 1.0)
    full = 0.5 + 0.0 * s
    if not model.sliding_window and not model.attention_chunk_size:
        return full
    total = (model.num_layers - model.num_sliding_window_layers - model.num_chunked_attention_layers) * full
    if model.sliding_window:
        w = np.minimum(float(model.sliding_window), s)
        total = total + model.num_sliding_window_layers * (w - w * w / (2 * s)) / s
    if model.attention_chunk_size:
        c = np.minimum(float(model.attention_chunk_size), s)
        total = total + model.num_chunked_attention_layers * c / (2 * s)
    return total / model.num_layers


def fused_core_ops(model: ModelSpec, *, seq_len: Array, score_flop: Array, core_bytes: Array) -> list[Op]:
    """The fused attention core of one layer, averaged over the layers: ``attention_core`` over the full (and
    chunked) layers and, for a model with sliding-window layers, ``attention_window`` over those, each with
    its share of the layers' executed FLOPs (:func:`attended_keys_frac`, ``score_flop`` the full s^2 products)
    and of ``core_bytes``, so a stack's windowed kernel can be read at its own rate
    (``Calibration.window_attention``); their FLOPs sum to the single op's."""
    total = attended_keys_frac(model, seq_len) * score_flop
    if not model.sliding_window or not model.num_sliding_window_layers:
        return [Op("attention_core", "attention", total, core_bytes)]
    share = model.num_sliding_window_layers / model.num_layers
    s = np.maximum(np.asarray(seq_len, dtype=float), 1.0)
    w = np.minimum(float(model.sliding_window), s)
    window = share * (w - w * w / (2 * s)) / s * score_flop
    return [
        Op("attention_core", "attention", total - window, (1 - share) * core_bytes),
        Op("attention_window", "attention", window, share * core_bytes),
    ]


def attention_ops(
    model: ModelSpec,
    *,
    tokens: Array,
    seq_len: Array,
    tp: Array,
    act_bytes: float,
    flash: bool,
    fused_elementwise: bool = True,
) -> list[Op]:
    """Projections and the attention core of one layer (MHA/GQA, or MLA with its low-rank projections,
    DeepSeek-V2 arXiv:2405.04434 eqs. 1-14). ``tokens`` = b*s/cp on this device, ``seq_len`` the keys.
    Without ``fused_elementwise`` (eager PyTorch modules) q, k, v are copied into the kernel's head-major
    layout and the attention output back (``.transpose().contiguous()``): one read and one write each."""
    h, a = model.hidden_size, model.num_attention_heads
    dqk, dv = model.qk_head_dim, model.value_head_dim
    if model.attention is AttentionKind.MLA:
        r_q, r_kv, rope = model.q_lora_rank, model.kv_lora_rank, model.qk_rope_head_dim
        q_down = h * r_q if r_q else 0
        q_up = (r_q if r_q else h) * a * dqk
        kv_down = h * (r_kv + rope)
        kv_up = r_kv * a * (model.qk_nope_head_dim + dv)
        proj_w, proj_out = (q_down + kv_down) / tp + (q_up + kv_up) / tp, (a * dqk + a * (dqk + dv)) / tp
    else:
        q_w, kv_w = a * model.head_dim, model.num_key_value_heads * model.head_dim
        proj_w, proj_out = h * (q_w + 2 * kv_w) / tp, (q_w + 2 * kv_w) / tp
    ops = [Op("qkv_proj", "matmul", 2.0 * tokens * proj_w, act_bytes * (tokens * (h + proj_out) + proj_w))]
    if model.qk_norm and model.attention is not AttentionKind.MLA:
        ops.append(qk_norm_op(model, tokens=tokens, tp=tp, act_bytes=act_bytes))
    if not fused_elementwise:
        layout = 2.0 * act_bytes * tokens * (proj_out + a * dv / tp)
        ops.append(Op("layout_copies", "memory", 0.0, layout))
    score_flop = 2.0 * tokens * seq_len * a * (dqk + dv) / tp
    core_bytes = act_bytes * tokens * a * (2 * dqk + 2 * dv) / tp
    if flash:  # causal (and windowed) blocks skipped
        ops.extend(fused_core_ops(model, seq_len=seq_len, score_flop=score_flop, core_bytes=core_bytes))
    else:
        ops.append(Op("attention_core", "attention", score_flop, core_bytes))
        scores = tokens * seq_len * a / tp
        ops.append(Op("softmax_dropout", "memory", 0.0, UNFUSED_SCORE_PASSES * act_bytes * scores))
    out_w = a * dv * h / tp
    ops.append(
        Op("out_proj", "matmul", 2.0 * tokens * out_w, act_bytes * (tokens * (a * dv / tp + h) + out_w))
    )
    return ops


QK_NORM_PASSES = (2.0, 3.0)
"""(forward, backward) HBM passes over the queries and keys of a model with per-head query/key norms (Qwen3,
Gemma 3, OLMo 2): Megatron-Core builds ``q_layernorm`` and ``k_layernorm`` as Transformer Engine norms applied
one after the other to the projected heads (NVIDIA/Megatron-LM @0d8e0714, megatron/core/transformer/
attention.py ``SelfAttention.get_query_key_value_tensors``: ``query = self.q_layernorm(query)``, ``key =
self.k_layernorm(key)``; the Qwen3 bridges set ``qk_layernorm=True``), each its own kernel outside the fused
QKV GEMM and the attention kernel: forward a read and a write (``rmsnorm_fwd``), backward a read of the output
gradient and of the input and a write of the input gradient (``rmsnorm_bwd``). The per-head weight and the
per-row statistics are left out (head_dim values per head, one fp32 per row)."""


def qk_norm_op(model: ModelSpec, *, tokens: Array, tp: Array, act_bytes: float) -> Op:
    """The per-head query and key norms of one layer (``QK_NORM_PASSES`` over tokens x (heads + kv heads) x
    head_dim 16-bit values per device, heads split over ``tp``): a memory op named ``qk_norm``."""
    values = tokens * (model.num_attention_heads + model.num_key_value_heads) * model.head_dim / tp
    fwd, bwd = QK_NORM_PASSES
    return Op("qk_norm", "memory", 0.0, fwd * act_bytes * values, backward_bytes=bwd * act_bytes * values)


def mlp_ops(
    model: ModelSpec,
    *,
    tokens: Array,
    tp: Array,
    ep: Array,
    act_bytes: float,
    moe_layer: bool,
    capacity_factor: float = 1.0,
    dispatch_passes: float = 0.0,
    grouped_gemm: bool = True,
    gemm_streams: int = 0,
) -> list[Op]:
    """The dense MLP, or an MoE block: router, the token permutation to the experts and back
    (``dispatch_passes`` HBM passes over the routed tokens), top-k routed experts (times the capacity
    factor, which also carries routing imbalance) and shared experts (DeepSeekMoE). Expert work per device is
    tokens*k/tp whatever the ep/etp split (balanced routing). The experts are two ops, ``experts`` (the up
    projection, gate fused beside it: h x 2f) and ``experts_down`` (f x h), each read on the efficiency curve
    at its own GEMM's size: over all local experts' tokens when they run as one ``grouped_gemm`` kernel, else
    one expert's, also with ``gemm_streams`` > 0 (one GEMM per local expert spread over that many streams, as
    Transformer Engine 2.9's GroupedLinear does). Measured on the lent H200 (``benchmarks/probe_expert_gemms.py``,
    ``profiles/measured/real-runs/expert-gemms-h200.csv``): 16 of Qwen3-30B-A3B's up projections on 4 streams
    run no faster than one after another from 1,024 tokens per expert up (1.35x faster at 256), and the six
    GEMMs of one expert of five MoE models take 5-7% longer than the curve read at their own sizes says from
    1,024 tokens per expert up (the curve keeps the best shape of each FLOP bin; 11% at 512, 25% at 256)."""
    h, n_mat = model.hidden_size, (3 if model.gated_mlp else 2)
    if not moe_layer:
        f = model.ffn_hidden_size
        w = n_mat * h * f / tp
        return [
            Op(
                "mlp",
                "matmul",
                2.0 * tokens * w,
                act_bytes * (tokens * (2 * h + n_mat * f / tp) + w),
                gemm_flop=2.0 * tokens * h * f / tp,
            )
        ]
    f, e, k = model.moe_ffn_hidden_size, model.num_experts, model.experts_per_token
    routed = tokens * k * capacity_factor / tp
    per_expert_tokens = routed * ep / e
    local = e / ep
    unit = per_expert_tokens if not grouped_gemm or gemm_streams > 0 else routed
    n_up = n_mat - 1  # the up projection, with the gate fused beside it when gated
    ops = [
        Op("router", "matmul", 2.0 * tokens * h * e / tp, act_bytes * tokens * (h + e) / tp),
        Op("moe_dispatch", "memory", 0.0, dispatch_passes * act_bytes * routed * h),
        Op(
            "experts",
            "matmul",
            2.0 * routed * n_up * h * f,
            act_bytes * (routed * (h + n_up * f) + n_up * h * f * local),
            gemm_flop=2.0 * unit * h * n_up * f,
        ),
        Op(
            "experts_down",
            "matmul",
            2.0 * routed * h * f,
            act_bytes * (routed * (f + h) + h * f * local),
            gemm_flop=2.0 * unit * f * h,
        ),
    ]
    if model.num_shared_experts:
        ws = model.num_shared_experts * n_mat * h * f / tp
        ops.append(
            Op(
                "shared_experts",
                "matmul",
                2.0 * tokens * ws,
                act_bytes * (tokens * (2 * h + model.num_shared_experts * n_mat * f / tp) + ws),
                gemm_flop=2.0 * tokens * h * f * model.num_shared_experts / tp,
            )
        )
    return ops


def layer_ops(
    model: ModelSpec,
    *,
    tokens: Array,
    seq_len: Array,
    tp: Array = 1,
    ep: Array = 1,
    sequence_parallel: Array = False,
    act_bytes: float = 2.0,
    flash: bool = True,
    dropout: bool = False,
    moe_layer: bool = False,
    capacity_factor: float = 1.0,
    fused_elementwise: bool = True,
    dispatch_passes: float = 0.0,
    grouped_gemm: bool = True,
    fp8_recipe: str | None = None,
    gemm_streams: int = 0,
    unfused: tuple[str, ...] = (),
) -> list[Op]:
    """All forward ops of one transformer block on one device for one micro-batch; ``fp8_recipe`` (FP8 runs)
    adds the quantisation of the linear layers' inputs (:func:`fp8_cast_op`), ``unfused`` (the stack's
    ``unfused_model_ops``) the element-wise kernels of :func:`unfused_model_ops`."""
    ops = attention_ops(
        model,
        tokens=tokens,
        seq_len=seq_len,
        tp=tp,
        act_bytes=act_bytes,
        flash=flash,
        fused_elementwise=fused_elementwise,
    )
    ops += mlp_ops(
        model,
        tokens=tokens,
        tp=tp,
        ep=ep,
        act_bytes=act_bytes,
        moe_layer=moe_layer,
        capacity_factor=capacity_factor,
        dispatch_passes=dispatch_passes,
        grouped_gemm=grouped_gemm,
        gemm_streams=gemm_streams,
    )
    ops.append(
        elementwise_op(
            model,
            tokens=tokens,
            tp=tp,
            sequence_parallel=sequence_parallel,
            act_bytes=act_bytes,
            dropout=dropout,
            moe_layer=moe_layer,
            fused=fused_elementwise,
        )
    )
    ops += unfused_model_ops(
        model,
        tokens=tokens,
        tp=tp,
        act_bytes=act_bytes,
        moe_layer=moe_layer,
        unfused=unfused,
        capacity_factor=capacity_factor,
        sequence_parallel=sequence_parallel,
        fused_elementwise=fused_elementwise,
    )
    if fp8_recipe is not None:
        ops.append(
            fp8_cast_op(
                model,
                tokens=tokens,
                tp=tp,
                moe_layer=moe_layer,
                recipe=fp8_recipe,
                capacity_factor=capacity_factor,
            )
        )
    return ops


def head_ops(
    model: ModelSpec, *, tokens: Array, tp: Array, act_bytes: float, loss_chunks: Array = 1
) -> list[Op]:
    """Last stage: final norm, LM head GEMM (vocab split over tp) and the fp32 softmax cross-entropy, which
    reads and writes the logits about 3 times in fp32 (Megatron's vocab-parallel cross-entropy).
    ``loss_chunks`` > 1: the head and the loss run chunk by chunk of the tokens (fused linear cross-entropy:
    Liger-Kernel, Hsu et al. 2024, arXiv:2410.10989; Cut Cross-Entropy, Wijmans et al. 2024,
    arXiv:2411.09009): the same FLOPs in GEMMs 1/loss_chunks the size, each chunk re-reading the weight.
    A soft cap on the logits (``final_logit_softcap``, Gemma 2: ``c * tanh(logits / c)``) adds one fp32 read and
    write of them before the loss (eager transformers; a fused loss kernel may fold it in)."""
    h, v = model.hidden_size, model.vocab_size
    passes = 3 + (2 if model.final_logit_softcap else 0)
    w = h * v / tp
    flop = 2.0 * tokens * w
    return [
        Op(
            "lm_head",
            "matmul",
            flop,
            act_bytes * (tokens * (h + v / tp) + w * loss_chunks),
            flop / loss_chunks,
        ),
        Op("loss", "memory", 0.0, passes * 4.0 * tokens * v / tp + act_bytes * tokens * h * 2),
    ]


def mtp_ops(model: ModelSpec, *, tokens: Array, tp: Array, act_bytes: float) -> list[Op]:
    """One multi-token-prediction module's own work on the last stage (``ModelSpec.num_mtp_layers``;
    DeepSeek-V3, arXiv:2412.19437 section 2.2), its block and the second pass through the head aside: the
    RMSNorms of the hidden state and of the next token's embedding (read and write h each) and the projection
    of their concatenation, 2h -> h (split over tp like the block's linear layers)."""
    h = model.hidden_size
    w = 2 * h * h / tp
    return [
        Op("mtp_norms", "memory", 0.0, act_bytes * tokens * 4 * h),
        Op("mtp_projection", "matmul", 2.0 * tokens * w, act_bytes * (tokens * 3 * h + w)),
    ]


def embedding_ops(model: ModelSpec, *, tokens: Array, act_bytes: float) -> list[Op]:
    """First stage: the embedding gather (one row read and written per token)."""
    return [Op("embedding", "memory", 0.0, 2 * act_bytes * tokens * model.hidden_size)]


def megatron_flop_per_iteration(
    *,
    global_batch_size: Array,
    seq_len: Array,
    num_layers: int,
    hidden_size: int,
    vocab_size: int,
    recompute_full: Array = True,
) -> Array:
    """FLOPs of one iteration of a GPT model, Narayanan et al. 2021 (arXiv:2104.04473) eq. 3:
    96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with full activation recomputation (4 forward-equivalents of the
    layers, 3 of the LM head); without it 72 B s l h^2 (1 + s/(6h) + V/(12 l h))."""
    b, s, l_, h, v = global_batch_size, seq_len, num_layers, hidden_size, vocab_size
    with_rc = 96.0 * b * s * l_ * h**2 * (1 + s / (6 * h) + v / (16 * l_ * h))
    without = 72.0 * b * s * l_ * h**2 * (1 + s / (6 * h) + v / (12 * l_ * h))
    return np.where(recompute_full, with_rc, without)
