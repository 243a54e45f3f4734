"""The bandwidth-bound ops of one layer beside its GEMMs and attention: norms, residual adds, dropout and the
MLP activation (``elementwise_op``), the element-wise kernels of model features a stack leaves unfused
(``unfused_model_ops``), the FP8 casts of the linear layers' inputs (``fp8_cast_op``) and the forward work
cheap recompute redoes (``cheap_recompute_ops``). Per device, per micro-batch, per layer, forward pass;
arrays broadcast elementwise, as in :mod:`workbench.cost.flops`.
"""

from __future__ import annotations

import numpy as np

from workbench.cost.memory import FP8_TILE_BYTES
from workbench.cost.op_time import Array, Op
from workbench.specs.model import AttentionKind, ModelSpec, NormKind


def cheap_recompute_ops(
    model: ModelSpec,
    *,
    tokens: Array,
    tp: Array,
    act_bytes: float,
    moe_layer: bool,
    capacity_factor: float = 1.0,
    modules: tuple[str, ...] | None = None,
    unfused: tuple[str, ...] = (),
) -> list[Op]:
    """The forward work the backward pass redoes under ``FrameworkProfile.recompute_cheap_ops`` (DeepSeek-V3,
    arXiv:2412.19437 sections 3.2.3 and 3.3.3), one layer, one device: every RMSNorm (read its input, write
    its output: the block's two and MLA's two latent norms), MLA's up-projection GEMMs (q, k, v from their
    latents; the same FLOPs as in :func:`attention_ops`), and the MLP's activation function (read the gate
    and up outputs, write the product: 3 values per hidden unit of each routed and shared expert, or of the
    dense MLP). The recomputed values are the ones ``workbench.cost.memory.activation_parts`` drops.

    ``modules`` (``FrameworkProfile.recompute_modules``, Megatron-Core's ``--recompute-modules``) picks a
    subset: ``layernorm`` the norms, ``mla_up_proj`` the up-projections, ``moe_act`` the experts' activation
    in MoE layers only; None: all three, with the dense MLP's activation as well (DeepSeek-V3). Recomputing the
    experts' activation reruns the whole activation function, so a clamped GLU the stack runs eagerly
    (``glu_clamp`` in ``unfused``, ``FrameworkProfile.unfused_model_ops``) reruns its clamps too
    (``glu_clamp_recompute``, the forward bytes of :func:`unfused_model_ops`' op): Megatron-Core 0.15
    ``TEGroupedMLP.forward`` checkpoints ``bias_act_func``, which calls ``weighted_bias_quick_geglu_impl`` with
    its clamps (NVIDIA/Megatron-LM @0d8e0714, transformer/moe/experts.py)."""
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
    if moe_layer and "moe_act" in chosen and "glu_clamp" in unfused and model.glu_clamp:
        (clamp,) = unfused_model_ops(
            model,
            tokens=tokens,
            tp=tp,
            act_bytes=act_bytes,
            moe_layer=True,
            unfused=("glu_clamp",),
            capacity_factor=capacity_factor,
        )
        ops.append(clamp._replace(name="glu_clamp_recompute"))
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
    "attention_bias_add": (2.0, 0.0),
    "rmsnorm_fp32": (16.0, 44.0),
    "rope_complex": (10.0, 10.0),
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
  backward 8 (the bias and probability gradients each multiply the output gradient and reduce the product).
- ``attention_bias_add``, per value of the attention block's output (h per token, split over tp with sequence
  parallelism): a stack that leaves the bias-dropout-add unfused (Megatron-Core 0.15 ``fused_bias_dropout.
  bias_dropout_add_unfused`` where ``bias_dropout_fusion`` is False: Megatron-Bridge 0.2's ``GPTOSSProvider``
  sets it False; ``TransformerConfig`` defaults to False; the Llama, DeepSeek, GLM and T5 providers set True)
  adds the output projection's bias (``skip_bias_add``: read, write: 2), then ``dropout`` at p = 0 returns its
  input (ATen ``_dropout_impl``) and the residual add moves what a fused bias-dropout-add moves
  (``elementwise_op`` prices those 3); backward 0 beyond it (the bias gradient's reduction of the output
  gradient is in the fused kernel too). A block without an output bias (Qwen3) runs the same 3 passes either
  way.
- ``rmsnorm_fp32``, per value of each norm's input (two norms a layer, four with ``post_norms``): torchtitan
  2024's ``norms.RMSNorm`` (pytorch/torchtitan @9dec370, the commit of its 2024-12 benchmarks) runs
  ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight``: a copy to fp32 (2 + 4 bytes), the
  square (4 + 4), the mean (4), the product (4 + 4), the copy back (4 + 2) and the weight (2 + 2): 36 bytes, 18
  values; backward 48. Counted here beyond the read and the write of a fused norm that ``elementwise_op``
  prices already (2 forward, 4 backward): 16 and 44.
- ``rope_complex``, per value of the local query and key heads: torchtitan 2024's ``apply_rotary_emb`` casts
  each to fp32 (2 + 4 bytes), multiplies by the complex frequencies (8 + 8 per pair) and casts back (4 + 2): 10
  values; backward 10. A compiled block fuses the rotation into neighbouring kernels (left unpriced there)."""


def unfused_model_ops(
    model: ModelSpec,
    *,
    tokens: Array,
    tp: Array,
    act_bytes: float,
    moe_layer: bool,
    unfused: tuple[str, ...],
    capacity_factor: float = 1.0,
    sequence_parallel: Array = False,
    fused_elementwise: bool = True,
) -> list[Op]:
    """The unfused element-wise kernels of one layer's model features the stack (``unfused``:
    ``FrameworkProfile.unfused_model_ops``) does not fuse, one device, one micro-batch, as memory ops of
    ``UNFUSED_MODEL_OP_PASSES``: YaRN RoPE on the local query and key heads (MLA applies its rotary part in its
    own fused path), the clamp of a clamped GLU on the dense MLP or the routed experts, the routed experts'
    output bias and the attention output bias added before the residual (split over tp with
    ``sequence_parallel``); where the stack does not compile (not ``fused_elementwise``) the fp32 RMSNorm chain (split
    over tp with ``sequence_parallel``) and the complex rotary embedding of a RoPE model (no learned positions,
    not MLA). ``tokens`` = b*s/cp on this device (scalar or array, broadcast); each op's ``bytes`` and
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
    if "attention_bias_add" in unfused and (model.attention_out_bias or model.linear_bias):
        values["attention_bias_add"] = tokens * h / np.where(sequence_parallel, tp, 1)
    if not fused_elementwise and "rmsnorm_fp32" in unfused and model.norm is NormKind.RMSNORM:
        norms = 4 if model.post_norms else 2
        values["rmsnorm_fp32"] = norms * tokens * h / np.where(sequence_parallel, tp, 1)
    rotary = model.num_learned_positions == 0 and model.attention is not AttentionKind.MLA
    if not fused_elementwise and "rope_complex" in unfused and rotary:
        values["rope_complex"] = (
            tokens * (model.num_attention_heads + model.num_key_value_heads) * model.head_dim / tp
        )
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
