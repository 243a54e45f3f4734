"""The fields of a framework profile, each with its docstring, and their validation: what a profile file
(``profiles/frameworks/<id>.toml``) may say. :class:`~workbench.specs.framework.FrameworkProfile` adds what a
profile answers (its recipe for a device and model, whether it runs a plan, its summary).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from workbench.specs.axes import PROFILE_AXES
from workbench.specs.framework_values import (
    CP_KINDS,
    CP_ROTATE_METHODS,
    CUDA_GRAPH_SCOPES,
    DEFAULT_MICROBATCHES,
    DEVICE_RECIPE_FIELDS,
    FITTABLE,
    FLAG_FIELDS,
    FP8_RECIPES,
    MEMORY_REPORTS,
    MOE_DISPATCHERS,
    NUMBER_RANGES,
    RECOMPUTE_MODULES,
    STRING_TUPLE_FIELDS,
    UNFUSED_MODEL_OPS,
    check_number,
    model_key,
    recipe_for,
)
from workbench.specs.kernels import ATTENTION_FAMILIES
from workbench.specs.limits import shown
from workbench.specs.plan import RANK_ORDERS


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkFields:
    """The fields of one software stack's profile (see :mod:`workbench.specs.framework`) and their checks.
    Fractions are 0..1, times in seconds, bytes in bytes."""

    id: str
    name: str
    aliases: tuple[str, ...] = ()
    """Names under which sources cite the stack (the ``framework`` column of the validation set)."""
    keywords: tuple[str, ...] = ()
    """Words that name the stack inside a longer text ("NeMo 24.07", "Megatron-LM (2023)", "PyTorch FSDP"),
    compared with hyphens, underscores and case ignored (``workbench.presets.frameworks.profile_for_text``)."""
    years: tuple[int, ...] = ()
    """The calendar years the profile describes, ``[first, last]`` (empty: any): a text naming the stack in a
    source of another year is matched to the profile of that year when one exists (Megatron-LM before 2023 ran
    without FlashAttention; from 2023 on it is Megatron-Core)."""
    fit_group: str = ""
    """Profiles with the same group share fitted constants (a fork with its parent); default: the id."""
    version: str = ""
    """The release(s) of the stack the profile describes ("Megatron-Core 0.15 (Megatron-Bridge 25.11)"): what a
    plan priced with it is for, shown with every plan (CLI header, report, app, the ``framework`` of the JSON)."""
    as_of: str = ""
    """When the profile was checked against the stack's code and docs, ``YYYY-MM``."""
    description: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    """Field name -> where its value comes from (docs, flags, papers)."""
    fitted: tuple[str, ...] = ()
    """Fields ``workbench validate`` fits to published runs (a subset of ``FITTABLE``)."""

    # -- what the stack offers ------------------------------------------------------------------------
    schedules: tuple[str, ...] | None = ("1f1b", "interleaved-1f1b")
    """Pipeline schedules the stack runs (names of :mod:`workbench.pipeline.schedules`); empty: no pipeline
    parallelism; None (``"any"`` in a file): every schedule the workbench models."""
    zero_stages: tuple[int, ...] = (0, 1)
    pipeline_zero_stages: tuple[int, ...] | None = None
    """The ``zero_stages`` the stack runs together with pipeline parallelism (pp > 1); None: all of them
    (DeepSpeed's PipelineEngine refuses ZeRO-2 and -3)."""
    sequence_parallel: bool = True
    """Offers Megatron sequence parallelism (Korthikanti et al. 2022)."""
    default_sequence_parallel: bool = False
    """Sequence parallelism is on with tp > 1 unless a plan says otherwise (the stack's default flags)."""
    context_parallel: bool = False
    cp_kinds: tuple[str, ...] = ("ring",)
    """How the stack's context parallelism may share attention when cp > 1 (``ParallelPlan.cp_kind``): ``ring``
    (key/value blocks passed around a ring), ``ulysses`` (all-to-all of heads) and ``usp`` (Ulysses inside,
    ring across); see ``CP_KINDS``."""
    expert_parallel: bool = False
    rank_orders: tuple[str, ...] = ("tp-cp-ep-dp-pp",)
    """Rank orders the stack can lay its groups in (names of ``workbench.specs.plan.RANK_ORDERS``)."""
    offers: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    """Profile field -> the values the stack offers for it besides the profile's own, for the fields a plan
    chooses (the ``profile_field`` of ``workbench.specs.axes.PLAN_AXES``: ``fp8_recipe``); ``[offers]`` in a
    file. A field not listed: the stack runs only its own value."""
    fp8: bool = False
    chunked_loss: bool = False
    """Runs the LM head and the loss chunk by chunk (fused linear cross-entropy; ``ParallelPlan.loss_chunks``)."""
    optimizer_offload: bool = False
    """Can keep the optimizer states in host memory and step on the CPUs (``ParallelPlan.offload_optimizer``)."""
    activation_offload: bool = False
    """Can move saved activations to host memory between forward and backward (``offload_activations``)."""
    partial_recompute: bool = False
    """Can recompute only some layers whole and keep the others' activations
    (``ParallelPlan.recompute_num_layers``)."""
    vocab_parallel: bool = False
    """Can spread the vocabulary layers over the pipeline ranks (``ParallelPlan.vocab_parallel``)."""
    uneven_stages: bool = False
    """Lets pipeline stages hold different numbers of layers."""
    default_microbatches: str = "mbs1"
    """How the stack splits a data-parallel rank's batch under pp > 1 when the micro-batch size is not set:
    ``mbs1`` (one sample per micro-batch; torchtitan's ``pipeline_parallel_microbatch_size`` default 1 since
    2025-04), ``stages`` (as many micro-batches as pipeline stages, pp x vpp; torchtitan from 2025-01-07 to
    2025-04) or ``pp`` (as many as pipeline ranks; torchtitan of 2024-12, ``build_pipeline_schedule``:
    ``n_microbatches = pipeline_parallel_degree`` when ``pipeline_parallel_microbatches`` is unset). Used for
    blank fields of validation rows."""

    # -- how it runs a plan ---------------------------------------------------------------------------
    attention_kernels: tuple[str, ...] = ("fa2",)
    """Fused attention kernel families in the order the stack prefers them; the first one the device's kernel
    table has is used. Empty: attention runs unfused (score GEMMs, softmax and dropout through HBM)."""
    cp_attention_kernels: tuple[str, ...] | None = None
    """The families the stack's ring attention can call when cp > 1, in preference order; None: the same as
    ``attention_kernels`` (a ring implementation that wraps only some fused kernels falls back to those)."""
    cp_rotate_method: str = ""
    """How the stack's ring attention passes key/value blocks when cp > 1 (``CP_ROTATE_METHODS``):
    ``allgather`` or ``alltoall`` for torch's experimental context parallel, whose backward pass holds a working
    set beside the layer's saved activations (``workbench.cost.memory.cp_ring_backward_bytes``) and whose
    collectives, waits and eager merges are priced from its code (``workbench.cost.cp_ring``, in place of
    ``cp_comm_overlap``); ``""``: the generic ring (``workbench.cost.layer``)."""
    attention_repeats_kv: bool = False
    """Grouped-query attention hands the attention kernel keys and values repeated to the query heads (torchtitan
    @9dec370 ``repeat_kv`` before ``F.scaled_dot_product_attention``): the ring attention's key/value buffers
    are as wide as the queries."""
    fused_elementwise: bool = True
    """Bias, activation, dropout and residual adds run fused (Transformer Engine, torch.compile, Apex fused
    kernels); False: eager PyTorch, one HBM round trip per element-wise op."""
    dropout: bool = False
    """The stack's reference models train with dropout (Megatron GPT defaults: hidden and attention 0.1)."""
    selective_recompute: str = "attention"
    """What ``recompute=selective`` recomputes: ``attention`` (Megatron's attention core) or ``op`` (torchtitan
    per-op SAC: every second matmul output and the attention output saved, the rest recomputed)."""
    grad_bytes_per_param: float = 4.0
    """Gradient buffer precision: Megatron main_grad fp32 = 4; FSDP pure bf16 reduction = 2."""
    launch_dtype: str = ""
    """The precision the stack's published launch scripts run (``""``, ``bf16``, ``fp16``, ``fp32``, ``fp8``):
    what ``workbench validate`` reads for a row that leaves its dtype blank (listed in the row's ``assumed``),
    before the arithmetic of its FLOP figures and the ``bf16`` default. ``""``: none stated."""
    fp16_grad_bytes_per_param: float = 0.0
    """Gradient buffer precision of an fp16 run where it differs from ``grad_bytes_per_param``; 0: the same.
    Megatron-LM forces fp32 gradient accumulation only for bf16 (megatron/arguments.py: ``if args.bf16: ...
    args.accumulate_allreduce_grads_in_fp32 = True``; the flag is off by default), and its DDP gives each
    parameter a ``torch.float if accumulate_allreduce_grads_in_fp32 else param.dtype`` buffer
    (megatron/core/distributed/distributed_data_parallel.py), so an fp16 run keeps 2-byte main grads."""
    grad_reduce_bytes_per_param: float = 0.0
    """Bytes per gradient element on the wire of the data-parallel reduction (ZeRO-3's per-layer
    reduce-scatter, ZeRO 1-2's reduce-scatter, ZeRO-0's all-reduce) where it differs from the held gradient;
    0: ``grad_bytes_per_param``. PyTorch FSDP1 casts each unit's unsharded gradient to
    ``MixedPrecision.reduce_dtype`` before the reduce-scatter (torch/distributed/fsdp/_runtime_utils.py
    ``_reduce_grad``); Composer's ``mixed_precision: DEFAULT`` sets ``reduce_dtype=torch.float32`` with 16-bit
    parameters and ``PURE`` the 16-bit dtype (composer/trainer/mosaic_fsdp_utils.py ``get_mixed_precision``,
    v0.16.4 and @4e0068a08, 2024-04): 4 and 2 bytes."""
    master_weights: bool = True
    """fp32 master copy of the weights in the optimizer (mixed precision, Micikevicius et al. 2018)."""
    loss_bytes_per_logit: float = 10.0
    """Bytes per logit the loss holds at its peak, at the start of the backward (``workbench.cost.memory.
    logits_bytes``): 10 = the 16-bit logits, their fp32 upcast and its fp32 gradient; PyTorch's
    ``cross_entropy`` on an fp32 upcast whose 16-bit input is freed before the backward peaks at 12 (the saved
    log-softmax, its incoming gradient and the input gradient, all fp32)."""
    loss_parallel_bytes_per_logit: float = 0.0
    """``loss_bytes_per_logit`` where tp > 1 and the stack computes the loss on the vocabulary-sharded logits
    (torch.distributed.tensor.parallel ``loss_parallel``, torchtitan's default with TP); 0: the same as
    without TP. torch 2.13.0 ``torch/distributed/tensor/parallel/loss.py``: the log-softmax keeps its fp32
    output (``_log_softmax`` line 218) and the fused backward allocates a zero fp32 gradient, ``exp`` of the
    saved output and their sum before the product (``_nll_loss_and_log_softmax_backward`` lines 470 and
    518), 16 bytes per logit at the peak."""
    optimizer_bytes_per_param: float = 0.0
    """HBM bytes the optimizer step moves per locally owned parameter where the stack's optimizer is not one
    fused pass; 0: ``workbench.cost.context.OPTIMIZER_BYTES_PER_PARAM`` (a fused Adam: 30). An unfused
    per-tensor AdamW reads and writes its fp32 tensors once per element-wise op (count them in its ``step``)."""
    optimizer_moment_bytes: float = 4.0
    """Bytes per stored optimizer moment (Adam keeps two per parameter): fp32 4; DeepSeek-V3 keeps them in
    BF16, 2 (arXiv:2412.19437 section 3.3.3, "Low-Precision Optimizer States")."""
    fp8_activation_cache: bool = False
    """FP8 runs store the activations the backward pass needs in FP8 with a scale per 1x128 tile: the inputs
    of the linear layers and of the MoE SwiGLU, with the attention output (the input of the output
    projection) in 12-bit E5M6 (DeepSeek-V3 section 3.3.3, "Low-Precision Activation");
    ``workbench.cost.memory.activation_parts``. False: 16-bit as in Transformer Engine's defaults."""
    fp8_saved_inputs: bool = False
    """FP8 runs keep the quantised FP8 copy (1 byte per value) of each linear layer's input for its backward
    pass, the norm outputs of fused norm+linear layers included, instead of the 16-bit input: Transformer
    Engine ``module/linear.py`` (``saved_inputmat = inputmat``, the input after ``input_quantizer``, row-wise
    data discarded) and ``module/layernorm_linear.py`` (``ln_out_to_save = ln_out``, quantised); the attention
    kernel still keeps its own 16-bit output, so the output projection's FP8 copy comes on top of it.
    ``workbench.cost.memory.activation_parts``."""
    fused_glu: bool = False
    """A gated MLP's activation runs as one fused function that saves only its input (gate and up projections)
    and recomputes the rest in the backward pass: Megatron-Core ``fusions/fused_bias_swiglu.py``
    (``ctx.save_for_backward(input_for_backward, bias)``), on with ``bias_activation_fusion`` (Megatron-Bridge's
    Llama, DeepSeek and Qwen providers). False: eager SiLU and product keep their own inputs and outputs."""
    recompute_cheap_ops: bool = False
    """The backward pass recomputes what is cheap to redo instead of storing it: every RMSNorm output, the
    MLA up-projections (q, k, v from their low-rank latents) and the SwiGLU output (DeepSeek-V3 sections
    3.2.3 and 3.3.3); their forward time is added to the backward
    (``workbench.cost.elementwise_ops.cheap_recompute_ops``)."""
    collective_efficiency_frac: float = 1.0
    """Extra factor on every link bandwidth in collectives and sends. 1.0: the collective model
    (:mod:`workbench.cost.comm`) already carries NCCL's own bandwidth factors; below 1 for a stack or fabric
    known to reach less."""
    tp_comm_overlap: bool = False
    """Tensor-parallel collectives run in chunks overlapped with the layer's GEMMs (Transformer Engine
    userbuffers, torchtitan async TP): hidden behind the GEMM time, one of the tp chunks stays exposed
    (:mod:`workbench.cost.overlap`)."""
    cp_comm_overlap: bool = False
    """Ring attention sends the next KV block while the current block's attention runs: each of the cp - 1
    steps exposes max(0, send - attention block)."""
    ep_comm_overlap: bool = False
    """Expert all-to-all (dispatch and combine) of one micro-batch runs while another micro-batch computes
    the same layer (DeepSeek-V3's DualPipe, Megatron-Core's combined 1F1B EP overlap): hidden behind the
    layer's forward + backward compute."""
    overlap_grad_reduce: bool = False
    """Data-parallel gradient reduction in buckets during the last micro-batch's backward pass
    (Megatron-Core --overlap-grad-reduce, PyTorch DDP, DeepSpeed overlap_comm); the last bucket stays
    exposed."""
    grad_reduce_overlaps_pipeline: bool = True
    """Under a pipeline schedule (pp > 1) the reduction still runs behind the last backward of each rank;
    False: the stack reduces after the whole schedule (DeepSpeed's PipelineEngine runs a ``ReduceGrads``
    instruction once the last micro-batch's backward is done), so with pp > 1 all of it is exposed."""
    overlap_param_gather: bool = False
    """The distributed optimizer's all-gather of updated weights runs during the next step's first forward
    pass (Megatron-Core --overlap-param-gather); the first bucket stays exposed."""
    blocking_p2p_schedules: tuple[str, ...] = ()
    """Pipeline schedules whose sends and receives block compute: each F and B of a chunk batches its transfer
    (``torch.distributed.batch_isend_irecv``), waits for it and synchronises the device (Megatron's
    ``p2p_communication`` with ``batch_p2p_comm`` and ``batch_p2p_sync``, the defaults, "to protect against
    race condition when using batch_isend_irecv"), so every pipeline action exposes one hop
    (``workbench.cost.micro_batch.pp_blocking_s``); the others post their transfers asynchronously and only
    the simulated dependencies wait for them."""
    optimizer_post_validation: bool = False
    """Each rank steps its optimizer as soon as its own backward ends and the global checks (gradient norm for
    clipping, NaN/Inf) are validated afterwards, rolling the step back in the rare case they fail (Qi et al.
    2024, arXiv:2401.10241 section 4): no step-wide sync, so schedules whose ranks' spans are shorter than the
    step (``ScheduleSpec.tiles_across_steps``) overlap consecutive steps."""
    grad_bucket_params: float = 4.0e7
    """Parameters per gradient bucket (Megatron-Core DDP default 40M; PyTorch DDP 25 MB): the reduction (and
    ZeRO-1/2's gather of updated weights) runs as one collective per bucket
    (``workbench.cost.update.grad_buckets``)."""
    grad_bucket_params_per_rank: float = 0.0
    """Bucket growth with the data-parallel group: buckets hold max(``grad_bucket_params``, this x dp*cp)
    parameters (Megatron-Core: max(40M, 1M x dp), so that large groups stay bandwidth-bound); 0: fixed."""
    grad_bucket_per_layer: bool = False
    """The stack reduces and gathers per FSDP unit, each transformer block wrapped on its own (PyTorch FSDP1
    with a per-block wrap policy, FSDP2 ``fully_shard`` per block): one bucket per layer plus the root unit,
    whatever ``grad_bucket_params`` says."""
    fsdp_prefetch: bool = False
    """ZeRO-3/FSDP gathers the next layer's weights while the current layer computes, forward and
    backward (FSDP2 implicit prefetch, Megatron FSDP); False: each gather waits in line."""
    comm_interference_frac: float = 0.0
    """Compute slowdown per second of communication hidden behind it: the SMs and HBM bandwidth the
    communication kernels take while they run (NCCL runs on SMs). Added to the exposed time of each kind."""
    reserved_sm_frac: float = 0.0
    """Share of the SMs kept for communication kernels for the whole step, so every compute kernel runs on the
    rest (DeepSeek-V3 section 3.2.2: 20 of the 132 H800 SMs run DualPipe's all-to-all); 0: communication
    borrows SMs only while it runs (``comm_interference_frac``)."""
    fsdp_reshard_with_pp: bool = True
    """ZeRO-3 keeps sharding the weights per micro-batch when pp > 1. False (torchtitan): with a pipeline
    the stage's weights stay gathered and its gradients accumulate unsharded (in ``grad_bytes_per_param``)
    across micro-batches, so there is one all-gather and one reduce-scatter per step, and the memory of
    weights and gradients is that of ZeRO-1."""
    pipeline_stage_buffers: bool = False
    """The pipeline runtime keeps a receive buffer per micro-batch and the stage outputs until their backward
    (torch.distributed.pipelining): each stage allocates, once, one activation receive buffer per micro-batch
    (every stage but the first; the buffer is the stage's input, so it is the saved input of its first layer
    while the micro-batch is in flight) and one output-gradient receive buffer per micro-batch (every stage
    but the last), and keeps each micro-batch's output in ``fwd_cache`` until its backward (torch 2.13.0
    ``torch/distributed/pipelining/stage.py``: ``PipelineStage._setup_forward_recv_info`` lines 2251-2270,
    ``_setup_backward_recv_info`` lines 329-333 with ``PipelineStage._create_grad_recv_info`` line 2314,
    ``forward_one_chunk`` line 913; the torch 2.5/2.6 ``PipelineStage._prepare_forward_infra`` has the same
    loop ``for chunk_id in range(num_microbatches)`` over ``_make_tensor_from_meta``). False: the stage output is freed once sent and receive buffers live for one
    transfer (Megatron-Core ``deallocate_output_tensor``, ``p2p_communication`` allocating per receive).
    Priced by ``workbench.cost.activations.pipeline_buffer_bytes``."""
    pipeline_keeps_outputs: bool = False
    """The last pipeline stage keeps every micro-batch's output (the logits) until the step ends: torch
    .distributed.pipelining appends each output of the last stage to ``output_chunks`` for the step's return
    value (torch 2.13.0 ``stage.py`` ``forward_one_chunk`` line 908; ``return_outputs`` defaults to True,
    ``schedules.py`` line 489). torchtitan passes ``return_outputs=False`` since 2025-10-22 (pytorch/torchtitan
    e5ef99aab, "Update PP to release memory earlier", #1922)."""
    kernel_efficiency_frac: float = 1.0
    """Share of the kernel tables' microbenchmarked rates the stack sustains over a whole training step:
    power-limited sustained clocks (microbenchmarks run short bursts near boost), the model's real GEMM and
    attention shapes, SMs and HBM bandwidth taken by concurrent communication kernels, stream syncs. Divides
    every compute time."""
    host_overhead_per_layer_s: float = 0.0
    """Exposed host time per layer per forward pass (hooks, allocator calls, syncs the GPU waits for);
    backward counts it twice."""
    moe_dispatch_passes: float = 4.0
    """HBM passes over the routed tokens (tokens x top-k x hidden) per MoE layer forward to permute them to
    their experts and back (permute: read the token, write each copy; unpermute: read each copy, write the
    weighted sum; 4 with index copies); backward moves them again. From the kernels' bytes, not fitted."""
    moe_expert_sort_passes: float = 0.0
    """HBM passes over the routed tokens per MoE layer forward to sort the received tokens by local expert and
    back, when the ``alltoall`` dispatcher's rank holds more than one expert (Megatron-Core's
    ``sort_chunks_by_idxs`` after the dispatch and before the combine: a read and a write each, 4)."""
    moe_fp8_padding_passes: float = 0.0
    """HBM passes over the routed tokens per MoE layer forward in dropless FP8 runs to pad each local expert's
    tokens to the FP8 GEMM alignment and to unpad the output (Megatron-Core's TEGroupedMLP with Transformer
    Engine's Fp8Padding / Fp8Unpadding: a read and a write each, 4)."""
    moe_dispatcher: str = "alltoall"
    """How routed tokens travel to their experts (``MOE_DISPATCHERS``)."""
    moe_fp8_dispatch: bool = False
    """In FP8 runs the dispatch sends FP8 tokens (1 byte + a scale per 128 values) and the combine returns
    BF16 (DeepSeek-V3 section 3.3, DeepEP); False: both 16-bit."""
    moe_grouped_gemm: bool = True
    """The local experts run as one grouped GEMM (Megatron-Core --moe-grouped-gemm, TE GroupedLinear,
    torchtitan grouped_mm): the efficiency curve is read at the size of all local experts' work; False: one
    GEMM per expert, read at one expert's size."""
    moe_grouped_gemm_streams: float = 0.0
    """How a grouped GEMM runs: 0 one kernel for all local experts (CUTLASS grouped GEMM, torch grouped_mm);
    n > 0 one GEMM per local expert issued round-robin on n streams (Transformer Engine 2.9 GroupedLinear:
    ``multi_stream_cublas_gemm`` with ``num_compute_streams = 4``; its CUTLASS grouped GEMM is Hopper-only
    behind ``NVTE_USE_CUTLASS_GROUPED_GEMM``). Priced as one GEMM per expert at its own size, whatever n: on
    the lent H200, 16 expert GEMMs on 4 streams ran no faster than one after another from 1,024 tokens per
    expert up (``benchmarks/probe_expert_gemms.py``); the launches still count per expert."""
    moe_host_sync: bool = False
    """The host waits for the GPU once per MoE layer forward (token counts per expert copied to the CPU), so
    the layer cannot be queued ahead and costs at least its launch time (``workbench.cost.moe.moe_host_s``).
    Megatron-Core's alltoall dispatcher does; drop-and-pad, CUDA graphs and DeepEP's fixed buffers avoid it."""
    moe_router_fusion: bool = False
    """The MoE router's top-k with its score function, the auxiliary-loss scores and the auxiliary loss run as
    Transformer Engine's fused kernels, one launch each (Megatron-Core ``moe_router_fusion``, TE 2.6+
    ``fused_topk_with_score_function``): the router part of a layer launches
    ``workbench.cost.moe.FUSED_ROUTER_LAUNCHES`` instead of ``MOE_LAYER_KERNEL_PARTS['moe_router']``."""
    host_s_per_kernel: float = 0.0
    """Host seconds to issue one kernel from the framework's Python code (PyTorch dispatch, autograd
    bookkeeping and the CUDA launch: ~5-20 us per op in eager PyTorch)."""
    cuda_graph_scopes: tuple[str, ...] = ()
    """Parts of each layer the stack replays as CUDA graphs (``CUDA_GRAPH_SCOPES``): a graphed part costs the
    host one launch instead of one per kernel (``workbench.cost.moe.moe_host_s``)."""
    recompute_modules: tuple[str, ...] = ()
    """Modules whose output the backward pass recomputes instead of keeping (``RECOMPUTE_MODULES``): their
    forward time is added to the backward (``workbench.cost.elementwise_ops.cheap_recompute_ops``) and their
    outputs leave the saved activations (``workbench.cost.memory.activation_parts``)."""
    unfused_model_ops: tuple[str, ...] = ()
    """Model features the stack runs as unfused element-wise kernels (``UNFUSED_MODEL_OPS``), each adding its
    HBM passes to the layers of a model that has it (``workbench.cost.elementwise_ops.unfused_model_ops``)."""
    device_recipes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Device preset id -> execution fields (``DEVICE_RECIPE_FIELDS``) the stack's recipes set on that GPU,
    applied by :meth:`for_device` when a plan is priced on it; each entry's source is in ``sources``."""
    model_recipes: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Model key -> device preset id -> execution fields (``DEVICE_RECIPE_FIELDS``) of the stack's recipe for
    that model on that GPU, laid over the device's own entry by :meth:`for_device` (a published recipe is per
    model and GPU: Megatron-Bridge's GPT-OSS keeps the alltoall dispatcher where its Qwen3 recipes take
    Hybrid-EP). A key names the models whose name starts with it, compared lower-case on letters and digits
    only (``gpt-oss`` matches ``GPT OSS 120B`` and ``gpt-oss-120b``); the longest matching key wins."""
    moe_imbalance: float = 1.0
    """Routed tokens on the busiest expert-parallel rank over the mean (1: balanced, as forced-balance
    benchmarks run); scales expert compute and the all-to-all."""
    fp8_recipe: str = "delayed"
    """How FP8 runs scale their tensors (``FP8_RECIPES``: delayed or current per-tensor,
    mxfp8, blockwise): sets the bytes of the quantisation kernels before each linear layer and, for grouped
    expert GEMMs, how many kernels the host launches per expert (``workbench.cost.moe.expert_launches``)."""
    fp8_param_gather: bool = False
    """FP8 runs keep the weights only in FP8 (1 byte, masters in the optimizer) and all-gather them in FP8
    (Megatron-Core --fp8-param-gather, torchao enable_fsdp_float8_all_gather)."""
    fp8_tp_all_gather: bool = False
    """FP8 runs with sequence parallelism quantise a linear layer's sharded input before the tensor-parallel
    all-gather, so the all-gathers (forward, and the output-gradient all-gathers backward) move FP8 values while
    the reduce-scatters stay 16-bit (``workbench.cost.layer_comm.tp_bytes_per_value``). Transformer Engine
    ``LayerNormLinear``/``Linear`` gather their quantised input (``gather_along_first_dim(..., quantizer=...)``);
    torchao's ``Float8ColwiseParallel``/``PrepareFloat8ModuleInput`` cast to float8 before the redistribute."""
    fp8_weight_copies: float = 0.0
    """Bytes per linear-layer weight of the FP8 copies kept for the step beside the 16-bit weight (Transformer
    Engine caches the cast weight across micro-batches, rowwise and transposed: 2; torchao casts per use: 0).
    With ``fp8_param_gather`` the FP8 weight itself is the rowwise copy, so ``fp8_weight_copies - 1`` more
    (the column-wise/transposed copy the backward pass reads)."""
    fp8_matmul_scale: float = 1.0
    """FP8 GEMM rate of the stack relative to the kernel table's FP8 GEMM curve (casts, scaling factors,
    amax history, transposes for the backward pass)."""
    memory_report: str = "allocated"
    """What the stack's own peak-memory report counts (see ``MEMORY_REPORTS``)."""
    fragmentation_frac: float = 0.05
    """Caching-allocator fragmentation: share of the counted tensors added to reserved memory."""
    context_bytes: float = 1.5e9
    """Device memory outside the allocator: CUDA context, cuBLAS and NCCL workspaces (~1-2 GB observed)."""

    def __post_init__(self) -> None:
        where = f"framework profile {shown(self.id)}"
        self._check_types(where)
        for name in NUMBER_RANGES:
            check_number(where, name, getattr(self, name))
        if self.selective_recompute not in ("attention", "op"):
            raise ValueError(
                f"{where}: selective_recompute must be attention or op, got {self.selective_recompute!r}"
            )
        bad = [
            k
            for k in (*self.attention_kernels, *(self.cp_attention_kernels or ()))
            if k not in ATTENTION_FAMILIES
        ]
        if bad:
            raise ValueError(
                f"{where}: attention kernel families {bad} unknown; allowed: {', '.join(ATTENTION_FAMILIES)}"
            )
        if any(o not in RANK_ORDERS for o in self.rank_orders):
            raise ValueError(
                f"{where}: rank_orders must be among {', '.join(RANK_ORDERS)}, got {shown(self.rank_orders)}"
            )
        if any(k not in CP_KINDS for k in self.cp_kinds):
            raise ValueError(
                f"{where}: cp_kinds must be among {', '.join(CP_KINDS)}, got {shown(self.cp_kinds)}"
            )
        if self.launch_dtype not in ("", "bf16", "fp16", "fp32", "fp8"):
            raise ValueError(
                f"{where}: launch_dtype must be one of '', 'bf16', 'fp16', 'fp32', 'fp8', got {shown(self.launch_dtype)}"
            )
        if self.cp_rotate_method not in CP_ROTATE_METHODS:
            raise ValueError(
                f"{where}: cp_rotate_method must be one of {', '.join(map(repr, CP_ROTATE_METHODS))}, "
                f"got {shown(self.cp_rotate_method)}"
            )
        if self.default_microbatches not in DEFAULT_MICROBATCHES:
            raise ValueError(
                f"{where}: default_microbatches must be one of {', '.join(DEFAULT_MICROBATCHES)}, "
                f"got {self.default_microbatches!r}"
            )
        self._check_offers(where)
        if self.fp8_recipe not in FP8_RECIPES:
            raise ValueError(
                f"{where}: fp8_recipe must be one of {', '.join(FP8_RECIPES)}, got {self.fp8_recipe!r}"
            )
        if self.moe_dispatcher not in MOE_DISPATCHERS:
            raise ValueError(
                f"{where}: moe_dispatcher must be one of {', '.join(MOE_DISPATCHERS)}, got {self.moe_dispatcher!r}"
            )
        if self.memory_report not in MEMORY_REPORTS:
            raise ValueError(f"{where}: memory_report must be one of {', '.join(MEMORY_REPORTS)}")
        bad = [k for k in self.fitted if k not in FITTABLE]
        if bad:
            raise ValueError(f"{where}: fitted {bad} cannot be fitted; allowed: {', '.join(FITTABLE)}")
        self._check_execution_lists(where)
        self._check_device_recipes(where)
        self._check_model_recipes(where)
        if self.years and (
            len(self.years) != 2
            or any(isinstance(y, bool) or not isinstance(y, int) for y in self.years)
            or not 1990 <= self.years[0] <= self.years[1] <= 2100
        ):
            raise ValueError(
                f"{where}: years must be [first, last] with 1990 <= first <= last <= 2100, got "
                f"{shown(self.years)}"
            )

    def _check_execution_lists(self, where: str) -> None:
        """CUDA graph scopes and recompute modules: known names, and the pairs Megatron-Core refuses
        (transformer_config.py: moe_preprocess needs moe_router; an attn graph with mla_up_proj recompute)."""
        for name, allowed in (
            ("cuda_graph_scopes", CUDA_GRAPH_SCOPES),
            ("recompute_modules", RECOMPUTE_MODULES),
            ("unfused_model_ops", UNFUSED_MODEL_OPS),
        ):
            bad = [v for v in getattr(self, name) if v not in allowed]
            if bad:
                raise ValueError(f"{where}: {name} {bad} unknown; allowed: {', '.join(allowed)}")
        scopes = self.cuda_graph_scopes
        if "full_iteration" in scopes and len(scopes) > 1:
            raise ValueError(
                f"{where}: cuda_graph_scopes: full_iteration captures the whole step and goes alone, "
                f"got {list(scopes)}"
            )
        if "moe_preprocess" in scopes and "moe_router" not in scopes:
            raise ValueError(
                f"{where}: cuda_graph_scopes: moe_preprocess needs moe_router, got {list(scopes)}"
            )
        if "attn" in scopes and "mla_up_proj" in self.recompute_modules:
            raise ValueError(
                f"{where}: an attn CUDA graph cannot recompute mla_up_proj (Megatron-Core refuses the pair)"
            )

    def _check_device_recipes(self, where: str) -> None:
        """Each entry names known fields with values the profile itself would accept."""
        if not isinstance(self.device_recipes, dict):
            raise ValueError(f"{where}: device_recipes must be a table of device id -> fields")
        for device, recipe in self.device_recipes.items():
            self._check_recipe(f"{where}: device_recipes.{device}", recipe)

    def _check_model_recipes(self, where: str) -> None:
        """Each model key has letters or digits and a table of device entries, each as ``device_recipes``."""
        if not isinstance(self.model_recipes, dict):
            raise ValueError(f"{where}: model_recipes must be a table of model key -> device id -> fields")
        for key, devices in self.model_recipes.items():
            if not model_key(key):
                raise ValueError(f"{where}: model_recipes: key {shown(key)} has no letter or digit")
            if not isinstance(devices, dict):
                raise ValueError(f"{where}: model_recipes.{key} must be a table of device id -> fields")
            for device, recipe in devices.items():
                under = self.device_recipes.get(device, {})
                self._check_recipe(f"{where}: model_recipes.{key}.{device}", recipe, under)

    def _check_recipe(
        self, where: str, recipe: object, under: dict[str, Any] | None = None, top: bool = True
    ) -> None:
        """``recipe`` (laid over ``under``, the device's own entry) names known fields, and at the top level
        sub-tables per FP8 recipe (``recipe_for``), and gives a profile."""
        if not isinstance(recipe, dict):
            raise ValueError(f"{where} must be a table, got {shown(recipe)}")
        subs = {k: v for k, v in recipe.items() if top and k in FP8_RECIPES}
        bad = sorted(set(recipe) - set(DEVICE_RECIPE_FIELDS) - set(subs))
        if bad:
            raise ValueError(f"{where}: unknown field(s) {bad}; allowed: {', '.join(DEVICE_RECIPE_FIELDS)}")
        plain = {**recipe_for(under or {}, ""), **recipe_for(recipe, "")}
        for name, sub in subs.items():
            self._check_recipe(f"{where}.{name}", sub, {**plain, **(under or {}).get(name, {})}, top=False)
        try:
            self._with_recipe(plain)
        except (TypeError, ValueError) as exc:
            reason = str(exc).removeprefix(f"framework profile {shown(self.id)}: ")
            raise ValueError(f"{where}: {reason}") from None

    def _check_offers(self, where: str) -> None:
        """ValueError naming ``where`` for an ``offers`` key no plan axis chooses or a value that axis does not
        take."""
        axes = {a.profile_field or "": a for a in PROFILE_AXES}
        for key, values in self.offers.items():
            if key not in axes:
                raise ValueError(
                    f"{where}: offers.{key}: no plan axis chooses {key!r}; allowed: {', '.join(axes)}"
                )
            allowed = (axes[key].choices or {}).values()  # the plan's values (on/off: true/false)
            bad = [v for v in values if not any(v == a and type(v) is type(a) for a in allowed)]
            if bad or not isinstance(values, tuple):
                raise ValueError(
                    f"{where}: offers.{key} must be a list among {', '.join(map(shown, allowed))}, got "
                    f"{shown(values)}"
                )

    def _check_types(self, where: str) -> None:
        """Strings, flags and lists of the right kind (a TOML file may hold any type in any key)."""
        for name in (
            "cuda_graph_scopes",
            "recompute_modules",
            "unfused_model_ops",
        ):  # TOML lists arrive as lists
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        strings = (
            "id",
            "name",
            "fit_group",
            "version",
            "as_of",
            "description",
            "selective_recompute",
            "memory_report",
            "moe_dispatcher",
            "fp8_recipe",
            "cp_rotate_method",
            "launch_dtype",
        )
        for name in (*strings, "default_microbatches"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{where}: {name} must be a string, got {shown(getattr(self, name))}")
        if not self.id:
            raise ValueError("framework profile: id must be a non-empty string")
        for name in FLAG_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{where}: {name} must be true or false, got {shown(getattr(self, name))}")
        lists = [(n, getattr(self, n), str) for n in STRING_TUPLE_FIELDS] + [
            ("zero_stages", self.zero_stages, int)
        ]
        for name in ("schedules", "cp_attention_kernels"):
            if getattr(self, name) is not None:
                lists.append((name, getattr(self, name), str))
        if self.pipeline_zero_stages is not None:
            lists.append(("pipeline_zero_stages", self.pipeline_zero_stages, int))
        for name, value, kind in lists:
            if not isinstance(value, tuple) or any(
                not isinstance(v, kind) or isinstance(v, bool) for v in value
            ):
                what = "strings" if kind is str else "integers"
                raise ValueError(f"{where}: {name} must be a list of {what}, got {shown(value)}")
        if any(z not in (0, 1, 2, 3) for z in self.zero_stages):
            raise ValueError(f"{where}: zero_stages must be among 0, 1, 2, 3, got {shown(self.zero_stages)}")
        if self.pipeline_zero_stages is not None and any(
            z not in self.zero_stages for z in self.pipeline_zero_stages
        ):
            raise ValueError(
                f"{where}: pipeline_zero_stages must be among zero_stages {shown(self.zero_stages)}, "
                f"got {shown(self.pipeline_zero_stages)}"
            )
        if not isinstance(self.sources, dict) or any(
            not isinstance(k, str) or not isinstance(v, str) for k, v in self.sources.items()
        ):
            raise ValueError(f'{where}: sources must be a table of field = "source" strings')

    def _with_recipe(self, recipe: dict[str, Any]) -> Any:
        """A copy of this profile (of its own class) with the ``recipe`` fields laid over it."""
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in recipe.items()}
        return replace(self, device_recipes={}, model_recipes={}, **values)
