"""Compute costs of one transformer layer: FLOPs and HBM bytes per op, and their roofline time.

Every count is per device, per micro-batch, per layer, for the forward pass, after sharding by tp (heads and
MLP columns), cp (the sequence: a device holds ``tokens = b * s / cp`` queries and attends to all ``s`` keys)
and ep (experts). The backward pass is derived per op kind (``op_times``):

- ``matmul`` (a GEMM with a weight): backward-input and backward-weight GEMMs each cost the forward's FLOPs
  (Narayanan et al. 2021, arXiv:2104.04473, section 5.1: backward = 2x forward).
- ``attention`` (score and value products, no weight): backward is all input-gradient, 2x forward; with
  FlashAttention the kernel recomputes the scores, 2.5x forward (Dao 2023, FlashAttention-2: 5 GEMMs
  backward vs 2 forward).
- ``memory`` (norms, activations, residuals, softmax, dropout, loss): bandwidth-bound; backward moves 2x the
  forward bytes.

Causal convention: *model* FLOPs count the full s^2 score products (PaLM appendix B and Megatron eq. 3 both
do, so does ``ModelSpec.model_flop_per_token``); *executed* FLOPs count half of them when attention is
fused (FlashAttention skips masked blocks) and all of them on the unfused path, whose softmax and dropout
also move the b*a*s^2 scores through HBM.

Time per op is a roofline (Williams et al. 2009): ``max(flop / (peak * eff(flop)), bytes / (hbm * hbm_frac))``
where ``eff`` is the device's matmul efficiency curve over the op's FLOPs (Calculon, Isaev et al. SC23).

Vectorisation contract: every function here takes Python scalars or numpy arrays for the plan-dependent
inputs (``tokens``, ``seq_len``, ``tp``, ``sequence_parallel``, ``ep``) and broadcasts elementwise; branches on
plan fields use ``np.where``. Model and device fields are scalars (the planner screens one model on one
device at a time). The analytic backend and the planner call these same functions.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from workbench.cost.memory import FP8_TILE_BYTES
from workbench.specs.model import AttentionKind, ModelSpec

Array = Any
"""A float, an int or a numpy array (broadcast elementwise)."""

UNFUSED_SCORE_PASSES = 6.0
"""HBM passes over the b*a*s^2 score tensor per forward on the unfused path: the score GEMM writes it (1),
scale-mask-softmax reads and writes it (2), dropout reads it and writes output and mask (2.5, the mask is
1 byte), the value GEMM reads it (0.5 counted with the mask rounding). Korthikanti et al. 2022 section 4.1
lists the same tensors for memory (2 + 1 + 2 bytes per score)."""


FLASH_BACKWARD_FLOP_RATIO = 2.5
"""Backward FLOPs of a fused attention kernel over its forward FLOPs: it recomputes the scores, 5 GEMMs
backward vs 2 forward (Dao 2023, FlashAttention-2, section 4.1)."""


class Op(NamedTuple):
    """One forward op of a layer on one device: ``kind`` is matmul, attention or memory."""

    name: str
    kind: str
    flop: Array
    bytes: Array
    gemm_flop: Array = None
    """FLOPs of one GEMM of the op, the size the efficiency curve is read at (None: ``flop``)."""
    backward_bytes: Array = None
    """HBM bytes of a memory op's backward pass (None: twice ``bytes``, the memory-op rule)."""


def matmul_efficiency_frac(flop: Array, points: tuple[tuple[float, float], ...]) -> Array:
    """Fraction of the dense peak a GEMM of ``flop`` FLOPs reaches: linear in log10(flop) between the
    (flop, fraction) points, flat beyond the ends (Calculon's efficiency-vs-size idea)."""
    xs = np.log10([p[0] for p in points])
    fs = np.array([p[1] for p in points])
    return np.interp(np.log10(np.maximum(flop, 1.0)), xs, fs)


def roofline_time_s(
    flop: Array, bytes_moved: Array, *, peak_flop_per_s: float, efficiency_frac: Array, hbm_bytes_per_s: float
) -> Array:
    """``max(flop / (peak * efficiency), bytes / hbm_bytes_per_s)``: the roofline (Williams et al. 2009).
    ``hbm_bytes_per_s`` is the achievable bandwidth (peak times the device's hbm efficiency)."""
    return np.maximum(flop / (peak_flop_per_s * efficiency_frac), bytes_moved / hbm_bytes_per_s)


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
    if not fused_elementwise:
        layout = 2.0 * act_bytes * tokens * (proj_out + a * dv / tp)
        ops.append(Op("layout_copies", "memory", 0.0, layout))
    score_flop = 2.0 * tokens * seq_len * a * (dqk + dv) / tp
    core_bytes = act_bytes * tokens * a * (2 * dqk + 2 * dv) / tp
    if flash:  # causal (and windowed) blocks skipped
        ops.append(
            Op("attention_core", "attention", attended_keys_frac(model, seq_len) * score_flop, core_bytes)
        )
    else:
        ops.append(Op("attention_core", "attention", score_flop, core_bytes))
        scores = tokens * seq_len * a / tp
        ops.append(Op("softmax_dropout", "memory", 0.0, UNFUSED_SCORE_PASSES * act_bytes * scores))
    out_w = a * dv * h / tp
    ops.append(
        Op("out_proj", "matmul", 2.0 * tokens * out_w, act_bytes * (tokens * (a * dv / tp + h) + out_w))
    )
    return ops


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


def cheap_recompute_ops(
    model: ModelSpec,
    *,
    tokens: Array,
    tp: Array,
    act_bytes: float,
    moe_layer: bool,
    capacity_factor: float = 1.0,
    modules: tuple[str, ...] | None = None,
) -> list[Op]:
    """The forward work the backward pass redoes under ``FrameworkProfile.recompute_cheap_ops`` (DeepSeek-V3,
    arXiv:2412.19437 sections 3.2.3 and 3.3.3), one layer, one device: every RMSNorm (read its input, write
    its output: the block's two and MLA's two latent norms), MLA's up-projection GEMMs (q, k, v from their
    latents; the same FLOPs as in :func:`attention_ops`), and the MLP's activation function (read the gate
    and up outputs, write the product: 3 values per hidden unit of each routed and shared expert, or of the
    dense MLP). The recomputed values are the ones ``workbench.cost.memory.activation_parts`` drops.

    ``modules`` (``FrameworkProfile.recompute_modules``, Megatron-Core's ``--recompute-modules``) picks a
    subset: ``layernorm`` the norms, ``mla_up_proj`` the up-projections, ``moe_act`` the experts' activation
    in MoE layers only; None: all three, with the dense MLP's activation as well (DeepSeek-V3)."""
    h, a, n_mat = model.hidden_size, model.num_attention_heads, (3 if model.gated_mlp else 2)
    chosen = {"layernorm", "mla_up_proj", "moe_act"} if modules is None else set(modules)
    mla = model.attention is AttentionKind.MLA
    r_q, r_kv = (model.q_lora_rank, model.kv_lora_rank) if mla else (0, 0)
    ops: list[Op] = []
    if mla and "mla_up_proj" in chosen:
        up_w = (
            (r_q if r_q else h) * a * model.qk_head_dim
            + r_kv * a * (model.qk_nope_head_dim + model.value_head_dim)
        ) / tp
        up_out = a * (2 * model.qk_head_dim + model.value_head_dim) / tp
        ops.append(
            Op(
                "up_proj_recompute",
                "matmul",
                2.0 * tokens * up_w,
                act_bytes * (tokens * (r_q + r_kv + up_out) + up_w),
            )
        )
    if modules is None:  # DeepSeek-V3: routed and shared experts, or the dense MLP
        experts = model.experts_per_token * capacity_factor + model.num_shared_experts
        units = tokens * (experts * model.moe_ffn_hidden_size if moe_layer else model.ffn_hidden_size) / tp
    elif moe_layer and "moe_act" in chosen:  # Megatron-Core moe_act: the routed experts' activation
        units = tokens * model.experts_per_token * capacity_factor * model.moe_ffn_hidden_size / tp
    else:
        units = 0.0
    norms = 2 * tokens * (2 * h + r_q + r_kv) if "layernorm" in chosen else 0.0
    if modules is None or "layernorm" in chosen or (moe_layer and "moe_act" in chosen):
        # the activation function reads its (n_mat - 1) inputs per unit and writes its output
        ops.append(Op("norm_act_recompute", "memory", 0.0, act_bytes * (norms + n_mat * units)))
    return ops


def elementwise_op(
    model: ModelSpec,
    *,
    tokens: Array,
    tp: Array,
    sequence_parallel: Array,
    act_bytes: float,
    dropout: bool,
    moe_layer: bool,
    fused: bool = True,
) -> Op:
    """Norms, residual adds, dropout and the MLP activation of one layer, as HBM passes of the hidden state
    (``h``) or the MLP width (``f``). Fused (Megatron's bias-dropout-add and bias-SwiGLU fusions, Transformer
    Engine, torch.compile): per sublayer one norm (read, write) and one dropout-add (read x and residual,
    write, 1-byte mask); the activation reads its inputs and writes once (gated: 2f + f). Eager: dropout and
    the residual add are separate kernels (read, write, mask; then 2 reads, 1 write) and a gated activation is
    silu then a multiply (f + f, then 2f + f). Parts outside the tp region are split only with sequence
    parallelism (Korthikanti et al. 2022, section 4.2.2)."""
    h = model.hidden_size
    f = model.moe_ffn_hidden_size * model.experts_per_token if moe_layer else model.ffn_hidden_size
    mask = 0.5 if dropout else 0.0
    if fused:
        add = 3.0 + mask
        act = 3.0 if model.gated_mlp else 2.0
    else:
        add = 3.0 + (2.0 + mask if dropout else 0.0)
        act = 5.0 if model.gated_mlp else 2.0
    outside = (2 * 2 + 2 * add) * h
    inside = act * f
    split = np.where(sequence_parallel, tp, 1)
    return Op("norms_elementwise", "memory", 0.0, act_bytes * tokens * (outside / split + inside / tp))


UNFUSED_MODEL_OP_PASSES: dict[str, tuple[float, float]] = {
    "yarn_rope": (12.0, 14.0),
    "glu_clamp": (8.0, 15.0),
    "expert_bias": (6.0, 8.0),
}
"""(forward, backward) values read plus written per value of the tensor each unfused model op works on
(``workbench.specs.framework.UNFUSED_MODEL_OPS``), for the kernels of Megatron-Core 0.15 (NVIDIA/Megatron-LM
@0d8e0714, the core of Megatron-Bridge 0.2 / NeMo 25.11), as PyTorch's ATen ops move them (forward and autograd
backward counted op by op in ``tests/test_unfused_ops.py``):

- ``yarn_rope``, per value of the queries and keys: ``rope_utils._apply_rotary_pos_emb_bshd`` multiplies by
  cos (read, write: 2), negates half and concatenates for ``_rotate_half`` (1 + 2), multiplies by sin (2), adds
  (3) and concatenates with the empty pass-through part (2): 12; backward 14. Megatron-Bridge fuses RoPE only
  when ``position_embedding_type == 'rope'`` (``utils/fusions.validate_rope_fusion_compatibility``), and
  GPT-OSS's provider sets ``'yarn'``.
- ``glu_clamp``, per unit of the GLU's output width (its input has two): ``fused_bias_geglu.
  weighted_bias_quick_geglu_impl`` clamps each half (read, write: 2 + 2) and concatenates them (4) before the
  fused activation: 8; backward 15 (each clamp's gradient builds its mask from the saved input and selects).
- ``expert_bias``, per value of the routed experts' output: ``experts.TEGroupedMLP._apply_bias`` forms
  ``bias * prob`` per expert (write: 1), adds it (read 2, write 1) and concatenates the experts (2): 6;
  backward 8 (the bias and probability gradients each multiply the output gradient and reduce the product)."""


def unfused_model_ops(
    model: ModelSpec,
    *,
    tokens: Array,
    tp: Array,
    act_bytes: float,
    moe_layer: bool,
    unfused: tuple[str, ...],
    capacity_factor: float = 1.0,
) -> list[Op]:
    """The unfused element-wise kernels of one layer's model features the stack (``unfused``:
    ``FrameworkProfile.unfused_model_ops``) does not fuse, one device, one micro-batch, as memory ops of
    ``UNFUSED_MODEL_OP_PASSES``: YaRN RoPE on the local query and key heads (MLA applies its rotary part in its
    own fused path), the clamp of a clamped GLU on the dense MLP or the routed experts, and the routed experts'
    output bias. ``tokens`` = b*s/cp on this device (scalar or array, broadcast); each op's ``bytes`` and
    ``backward_bytes`` are HBM bytes (``act_bytes`` per value). Empty for a model without these features."""
    h, routed = model.hidden_size, model.experts_per_token * capacity_factor
    values: dict[str, Array] = {}
    if "yarn_rope" in unfused and model.rope_scaling == "yarn" and model.attention is not AttentionKind.MLA:
        values["yarn_rope"] = (
            tokens * (model.num_attention_heads + model.num_key_value_heads) * model.head_dim / tp
        )
    if "glu_clamp" in unfused and model.glu_clamp:
        width = routed * model.moe_ffn_hidden_size if moe_layer else model.ffn_hidden_size
        values["glu_clamp"] = tokens * width / tp
    if "expert_bias" in unfused and model.expert_bias and moe_layer:
        values["expert_bias"] = tokens * routed * h / tp
    ops = []
    for name, n in values.items():
        fwd, bwd = UNFUSED_MODEL_OP_PASSES[name]
        ops.append(
            Op(f"{name}_unfused", "memory", 0.0, fwd * act_bytes * n, backward_bytes=bwd * act_bytes * n)
        )
    return ops


FP8_CAST_BYTES: dict[str, float] = {
    "delayed": 4.0,
    "current": 6.0,
    "mxfp8": 3.25,
    "blockwise": 4.25,
    "tensorwise": 6.0,
    "rowwise": 8.0,
}
"""HBM bytes per value to quantise one 16-bit GEMM input to FP8, by Transformer Engine recipe: read 2, write 1,
and on Hopper-style recipes a transposed copy for the weight-gradient GEMM (+1); ``current`` scaling reads the
tensor once more for its amax (+2); MXFP8 needs no transposed copy on Blackwell but writes the rowwise and the
columnwise quantisation with an E8M0 scale per 32 values (+0.25); blockwise (1x128 activations) a transposed
copy and fp32 scales per 128 values (+0.25). Transformer Engine docs, "FP8 recipes"; DeepSeek-V3
(arXiv:2412.19437) section 3.3. torchao float8 (``torchao/float8/float8_scaling_utils.py``, compiled):
``tensorwise`` is current scaling (an amax pass, then a cast that writes both layouts: 6); ``rowwise`` scales
each row in the pass that casts it (read 2, write 1) and, for the weight-gradient GEMM, the other axis in a
second amax pass and cast (read 2, read 2, write 1): 8. The names match
``workbench.specs.framework.FP8_RECIPES``."""

FP8_WEIGHT_CAST_PER_USE = frozenset({"rowwise"})
"""Recipes whose linear layers cast their 16-bit weights to FP8 on every use (forward and backward of every
micro-batch), ``FP8_CAST_BYTES`` per weight value: torchao's rowwise recipe all-gathers 16-bit weights (no
float8 all-gather, torchao README "rowwise with bfloat16 all-gather") and caches no cast; the per-tensor
recipes cast before the float8 all-gather (torchao ``enable_fsdp_float8_all_gather``) or cache the cast weight
(Transformer Engine), which ``fp8_cast_op`` does not count."""


FP8_VALUE_BYTES: dict[str, float] = {
    "delayed": 1.0,
    "current": 1.0,
    "tensorwise": 1.0,
    "rowwise": 1.0,
    "mxfp8": 1.0 + 1.0 / 32,
    "blockwise": FP8_TILE_BYTES,
}
"""Bytes per value of an FP8 tensor in transit, by recipe: one e4m3 byte, plus for MXFP8 one E8M0 scale byte
per 32 values and for blockwise one fp32 scale per 128 values (per-tensor scales are one number per tensor).
Transformer Engine docs, "FP8 recipes"; OCP Microscaling Formats spec v1.0; DeepSeek-V3 (arXiv:2412.19437)
section 3.3."""


def fp8_cast_op(
    model: ModelSpec,
    *,
    tokens: Array,
    tp: Array,
    moe_layer: bool,
    recipe: str,
    capacity_factor: float = 1.0,
) -> Op:
    """The FP8 quantisation of one layer's linear-layer inputs (weights are cast once per step and cached, not
    counted): the attention projections' inputs (h, and a*dv/tp), the MLP's (h and f/tp; for an MoE block the
    routed copies' h and f, the shared experts' and the router stays 16-bit), ``FP8_CAST_BYTES[recipe]`` bytes
    per value. Backward quantises the output gradients, about as many values (the memory-op rule doubles it)."""
    h, a = model.hidden_size, model.num_attention_heads
    attn = h + a * model.value_head_dim / tp
    if moe_layer:
        f = model.moe_ffn_hidden_size
        routed = model.experts_per_token * capacity_factor / tp
        mlp = routed * (h + f) + (model.num_shared_experts * f / tp + h if model.num_shared_experts else 0.0)
    else:
        mlp = h + model.ffn_hidden_size / tp
    values = tokens * (attn + mlp)
    if recipe in FP8_WEIGHT_CAST_PER_USE:
        values = (
            values + (model.attention_parameters() + _mlp_weights(model, moe_layer, capacity_factor)) / tp
        )
    return Op("fp8_casts", "memory", 0.0, FP8_CAST_BYTES[recipe] * values)


def _mlp_weights(model: ModelSpec, moe_layer: bool, capacity_factor: float) -> float:
    """Weights of one layer's MLP a token passes through (an MoE layer: the routed experts a rank runs are
    at most all its experts; counted as top-k x capacity plus shared ones, the rows a cast reads per token)."""
    if not moe_layer:
        return float(model.mlp_parameters())
    routed = model.experts_per_token * capacity_factor + model.num_shared_experts
    return routed * model.mlp_parameters(model.moe_ffn_hidden_size, expert=True)


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


class OpTimes(NamedTuple):
    """Seconds per device for one micro-batch through a list of ops."""

    fwd_s: Array
    bwd_input_s: Array
    bwd_weight_s: Array
    attention_core_fwd_s: Array
    """Forward time of the attention core (what selective recompute repeats)."""
    attention_core_bwd_s: Array
    """Backward time of the attention core (the window ring attention hides its backward sends behind)."""
    fwd_flop: Array
    """Executed forward FLOPs (hardware FLOPs, causal half when fused)."""


def op_times(
    ops: list[Op],
    *,
    peak_flop_per_s: float,
    gemm_curve: tuple[tuple[float, float], ...],
    hbm_bytes_per_s: float,
    attention: tuple[Array, Array] | None,
    matmul_scale: float = 1.0,
) -> OpTimes:
    """Roofline time of each op, summed into forward, backward-input and backward-weight parts (see the
    module docstring for the backward rules). ``gemm_curve``: (flop, fraction) points of the GEMM efficiency
    (:func:`matmul_efficiency_frac`); ``attention``: (forward, backward) fraction of the peak of the fused
    attention kernel, or None for unfused attention (its score GEMMs run at the GEMM curve);
    ``matmul_scale`` multiplies the efficiency of the weight GEMMs (the FP8 recipe's overhead);
    ``hbm_bytes_per_s`` is the achieved bandwidth."""
    fwd = bwd_i = bwd_w = core = core_b = flop = 0.0
    for op in ops:
        size = op.flop if op.gemm_flop is None else op.gemm_flop
        bwd_eff = None
        if op.kind == "matmul":
            eff = matmul_efficiency_frac(size, gemm_curve) * matmul_scale
        elif op.kind == "attention" and attention is not None:
            eff, bwd_eff = attention
        else:
            eff = matmul_efficiency_frac(size, gemm_curve)
        t = roofline_time_s(
            op.flop,
            op.bytes,
            peak_flop_per_s=peak_flop_per_s,
            efficiency_frac=eff,
            hbm_bytes_per_s=hbm_bytes_per_s,
        )
        fwd = fwd + t
        flop = flop + op.flop
        if op.kind == "matmul":
            bwd_i, bwd_w = bwd_i + t, bwd_w + t
        elif op.kind == "attention":
            if bwd_eff is None:
                tb = 2 * t
            else:
                tb = roofline_time_s(
                    FLASH_BACKWARD_FLOP_RATIO * op.flop,
                    2 * op.bytes,
                    peak_flop_per_s=peak_flop_per_s,
                    efficiency_frac=bwd_eff,
                    hbm_bytes_per_s=hbm_bytes_per_s,
                )
            bwd_i, core, core_b = bwd_i + tb, core + t, core_b + tb
        else:
            bwd_i = bwd_i + (2 * t if op.backward_bytes is None else op.backward_bytes / hbm_bytes_per_s)
            if op.name == "softmax_dropout":
                core, core_b = core + t, core_b + 2 * t
    return OpTimes(fwd, bwd_i, bwd_w, core, core_b, flop)


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
