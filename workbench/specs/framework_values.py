"""The values a framework profile may take: the names its list and choice fields accept, the fields
``workbench validate`` may fit, and the range of every numeric field (``check_number``).

Each tuple is the allowed set of one ``FrameworkProfile`` field (:mod:`workbench.specs.framework`), with the
stack documentation it follows.
"""

from __future__ import annotations

from typing import Any

from workbench.specs.limits import check_real

CP_KINDS = ("ring", "ulysses", "usp")
"""Context-parallel attention sharing: ring attention (Liu et al. 2023, arXiv:2310.01889; Transformer Engine
``cp_comm_type="p2p"``), DeepSpeed-Ulysses' all-to-all of heads (Jacobs et al. 2023, arXiv:2309.14509; TE
``"a2a"``) and the hybrid USP (Fang & Zhao 2024, arXiv:2405.07719; TE ``"a2a+p2p"``)."""

CP_ROTATE_METHODS = ("", "allgather", "alltoall")
"""Values of ``FrameworkProfile.cp_rotate_method``: how torch's experimental ring attention
(``torch.distributed.tensor.experimental.context_parallel``, ``_templated_ring_attention`` and its backward) passes
the key/value blocks, torchtitan's ``experimental.context_parallel_rotate_method`` (``set_rotate_method``):
``allgather`` gathers the whole sequence's keys and values once per attention call, ``alltoall`` passes one
block per step to the next rank; both select torch's ring for the memory (``workbench.cost.memory
.cp_ring_backward_bytes``) and the time (``workbench.cost.cp_ring``); ``""``: the generic ring."""

DEFAULT_MICROBATCHES = ("mbs1", "stages", "pp")
"""Values of ``FrameworkProfile.default_microbatches``."""

FP8_RECIPES = ("delayed", "current", "mxfp8", "blockwise", "tensorwise", "rowwise")
"""Values of ``FrameworkProfile.fp8_recipe`` (the bytes each moves:
``workbench.cost.elementwise_ops.FP8_CAST_BYTES``): Transformer Engine's delayed and current per-tensor scaling, MXFP8, DeepSeek's blockwise tiles, and torchao
float8's ``tensorwise`` (dynamic per-tensor scaling: current scaling by another stack) and ``rowwise`` (a scale
per row of each GEMM operand; the weight-gradient GEMM needs the other axis scaled, and its all-gathers stay
16-bit: torchao ``Float8LinearRecipeName.ROWWISE``, README "rowwise with bfloat16 all-gather")."""

MOE_DISPATCHERS = ("alltoall", "deepep", "hybridep")
"""Values of ``FrameworkProfile.moe_dispatcher``: ``alltoall`` sends every routed copy of a token to its
expert's rank (Megatron-Core's alltoall token dispatcher); ``deepep`` sends a token once to each node it is
routed to and forwards the copies inside the node over NVLink (DeepSeek's DeepEP normal kernels);
``hybridep`` sends a token once to each expert-parallel rank it is routed to, with the permutation to the
experts' order done inside the dispatch and combine kernels (NVIDIA's Hybrid-EP in DeepEP's ``hybrid-ep``
branch, Megatron-Core's flex dispatcher ``_HybridEPManager``: "permute, all-to-all and permute for experts in a
single step"; Megatron-Bridge allows it on GB200/GB300 NVL72 only, ``flex_dispatcher_backend.py``)."""

CUDA_GRAPH_SCOPES = ("attn", "moe_router", "moe_preprocess", "full_iteration")
"""Values of ``FrameworkProfile.cuda_graph_scopes``, Megatron-Core's ``cuda_graph_scope`` with
``cuda_graph_impl="transformer_engine"`` (megatron/core/transformer/transformer_layer.py, 0.15): ``attn`` the
input norm and the attention block, ``moe_router`` the pre-MLP norm and the router, ``moe_preprocess`` the
token dispatcher's preprocessing (token counts and split sizes; needs ``moe_router``). A graphed part is
replayed by one launch forward and one backward instead of its kernels one by one. ``full_iteration`` (alone:
``cuda_graph_impl="local"``, transformer_config.py 0.15 refuses it beside any other scope) replays a whole
forward-backward step as one graph, so no layer costs host time (``host_overhead_per_layer_s`` and the MoE
launches drop out); a step with host syncs (dropless MoE) cannot be captured so."""

RECOMPUTE_MODULES = ("layernorm", "moe_act", "mla_up_proj")
"""Values of ``FrameworkProfile.recompute_modules``, Megatron-Core's ``--recompute-modules`` with selective
granularity (megatron/core/transformer/transformer_config.py, 0.15): the norms' outputs, the MoE experts'
activation output, MLA's up-projections; each module's forward runs again in the backward pass instead of
keeping its output (``core_attn`` is the plan's ``recompute=selective``)."""

UNFUSED_MODEL_OPS = (
    "yarn_rope",
    "glu_clamp",
    "expert_bias",
    "attention_bias_add",
    "rmsnorm_fp32",
    "rope_complex",
)
"""Values of ``FrameworkProfile.unfused_model_ops``: model features a stack applies with unfused (eager PyTorch)
element-wise kernels, each priced from the HBM passes of its kernels
(``workbench.cost.elementwise_ops.unfused_model_ops``):
``yarn_rope`` YaRN-scaled rotary embeddings outside MLA (``ModelSpec.rope_scaling`` yarn), ``glu_clamp`` the
clamp of a clamped GLU before its fused activation (``ModelSpec.glu_clamp``), ``expert_bias`` the routed
experts' output bias scaled by the routing probability per expert (``ModelSpec.expert_bias``),
``attention_bias_add`` the attention output projection's bias added by its own kernel before the residual add
(``ModelSpec.attention_out_bias`` or ``linear_bias``: a bias-dropout-add left unfused).
``rmsnorm_fp32`` and ``rope_complex``: model code that writes RMSNorm as an fp32 chain of ATen ops and the rotary
embedding as a complex multiplication (torchtitan 2024's ``norms.RMSNorm`` and ``apply_rotary_emb``); they run
unfused only where the stack does not compile its blocks (``fused_elementwise`` false: torch.compile fuses them)."""

DEVICE_RECIPE_FIELDS = (
    "moe_dispatcher",
    "cuda_graph_scopes",
    "recompute_modules",
    "ep_comm_overlap",
    "tp_comm_overlap",
    "overlap_grad_reduce",
    "overlap_param_gather",
)
"""Fields a profile's ``device_recipes`` may set per device (the execution choices a stack's published recipes
make per GPU), also in a sub-table per FP8 recipe (:func:`recipe_for`)."""


def recipe_for(entry: dict[str, Any], fp8_recipe: str) -> dict[str, Any]:
    """The fields of a ``device_recipes`` or ``model_recipes`` entry for runs of ``fp8_recipe``: its own fields
    with its sub-table named by that FP8 recipe (a key of ``FP8_RECIPES``) laid over them, as a published recipe
    may choose per precision (Megatron-Bridge 25.11's Qwen3-30B-A3B on GB200 graphs the attention block in
    BF16 and FP8-CS but not in FP8-MX)."""
    plain = {k: v for k, v in entry.items() if k not in FP8_RECIPES}
    return {**plain, **entry.get(fp8_recipe, {})}


def model_key(name: str) -> str:
    """``name`` lower-cased on its letters and digits only: how ``FrameworkProfile.model_recipes`` keys and
    model names are compared (``GPT OSS 120B`` and ``gpt-oss-120b`` are both ``gptoss120b``)."""
    return "".join(c for c in str(name).lower() if c.isalnum())


MEMORY_REPORTS = ("allocated", "reserved", "required")
"""What a stack's published peak memory counts: ``allocated`` = the caching allocator's max allocated
(``torch.cuda.max_memory_allocated``: tensors only), ``reserved`` = max reserved (adds the allocator's
fragmentation and cached blocks), ``required`` = the whole device need (adds the CUDA context, NCCL and
cuBLAS workspaces): what a planner must fit into the HBM."""

FITTABLE = (
    "kernel_efficiency_frac",
    "host_overhead_per_layer_s",
    "comm_interference_frac",
    "fp8_matmul_scale",
    "host_s_per_kernel",
)
"""Fields a profile may name in ``fitted`` (each physically meaningful; see their docstrings)."""

POOLED = ("kernel_efficiency_frac", "host_overhead_per_layer_s", "comm_interference_frac")
"""Fitted fields first fitted as one value over every stack's rows: the value a stack gets when none of its
own runs is in the fit (its group's own fit refines it when its runs are)."""


NUMBER_RANGES: dict[str, tuple[float, float, bool]] = {
    "kernel_efficiency_frac": (0.0, 1.0, True),
    "collective_efficiency_frac": (0.0, 1.0, True),
    "comm_interference_frac": (0.0, 1.0, False),
    "reserved_sm_frac": (0.0, 0.9, False),
    "grad_bucket_params": (1e3, 1e13, False),
    "grad_bucket_params_per_rank": (0.0, 1e12, False),
    "moe_imbalance": (1.0, 1e3, False),
    "host_s_per_kernel": (0.0, 1e-2, False),
    "fp8_weight_copies": (0.0, 4.0, False),
    "fragmentation_frac": (0.0, 1.0, False),
    "grad_bytes_per_param": (0.0, 16.0, True),
    "grad_reduce_bytes_per_param": (0.0, 16.0, False),
    "fp16_grad_bytes_per_param": (0.0, 16.0, False),
    "host_overhead_per_layer_s": (0.0, 1.0, False),
    "moe_dispatch_passes": (0.0, 1e3, False),
    "moe_expert_sort_passes": (0.0, 1e3, False),
    "moe_fp8_padding_passes": (0.0, 1e3, False),
    "moe_grouped_gemm_streams": (0.0, 64.0, False),
    "fp8_matmul_scale": (0.0, 1e3, True),
    "context_bytes": (0.0, 2.0**50, False),
    "optimizer_moment_bytes": (0.0, 8.0, True),
    "optimizer_bytes_per_param": (0.0, 1e3, False),
    "loss_bytes_per_logit": (0.0, 64.0, False),
    "loss_parallel_bytes_per_logit": (0.0, 64.0, False),
}
"""Numeric field -> (lowest, highest, lowest excluded): every number finite. The efficiency shares divide a time,
so they exclude 0; overlap and fragmentation shares may be 0; the upper ends of the non-fractions are far above
any stack (a gradient of 16 bytes per parameter, a second of host time per layer, 1 PiB of context)."""


STRING_TUPLE_FIELDS = (
    "aliases",
    "fitted",
    "attention_kernels",
    "cp_kinds",
    "rank_orders",
    "cuda_graph_scopes",
    "recompute_modules",
    "unfused_model_ops",
    "keywords",
    "blocking_p2p_schedules",
)
FLAG_FIELDS = (
    "sequence_parallel",
    "default_sequence_parallel",
    "context_parallel",
    "expert_parallel",
    "fp8",
    "uneven_stages",
    "fused_elementwise",
    "dropout",
    "master_weights",
    "fsdp_reshard_with_pp",
    "pipeline_stage_buffers",
    "pipeline_keeps_outputs",
    "tp_comm_overlap",
    "cp_comm_overlap",
    "attention_repeats_kv",
    "ep_comm_overlap",
    "overlap_grad_reduce",
    "grad_reduce_overlaps_pipeline",
    "overlap_param_gather",
    "fsdp_prefetch",
    "moe_grouped_gemm",
    "moe_fp8_dispatch",
    "moe_host_sync",
    "moe_router_fusion",
    "fp8_param_gather",
    "fp8_tp_all_gather",
    "chunked_loss",
    "optimizer_offload",
    "activation_offload",
    "partial_recompute",
    "vocab_parallel",
    "fp8_activation_cache",
    "fp8_saved_inputs",
    "fused_glu",
    "recompute_cheap_ops",
    "optimizer_post_validation",
)


def check_number(where: str, name: str, value: object) -> float:
    """``value`` as a float if it is a finite number in the range ``NUMBER_RANGES[name]``; ValueError naming
    ``where``, the field, the value and the range otherwise (used for profiles and fitted constants)."""
    low, high, low_open = NUMBER_RANGES[name]
    return check_real(where, name, value, minimum=low, maximum=high, min_open=low_open)
