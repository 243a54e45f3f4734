"""``EngineProfile``: how one serving engine (vLLM, SGLang, TensorRT-LLM) runs an iteration, apart from the hardware.

The training stacks have :class:`~workbench.specs.framework.FrameworkProfile`; a serving engine differs in what
costs time around the GPU's kernels: host work per iteration that the GPU waits for (scheduling, input
preparation, sampling, output processing), whether an iteration's kernels are replayed from a CUDA graph or
launched one by one from Python, how many small kernels a decoder layer launches beside its GEMMs, and how the
scheduler admits requests into the KV cache. Every field of a profile file carries its source (the engine's
docs, source-code defaults or a published measurement) in ``[sources]``; nothing here is fitted to the
validation runs.

Profiles live in ``profiles/engines/<id>.toml`` (loader: :mod:`workbench.presets.engines`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from workbench.specs.limits import check_count, check_real, shown

KV_ADMISSIONS = ("prompt", "full")
"""How an engine's scheduler admits a request into the KV cache: ``prompt`` reserves the prompt's blocks and
grows block by block, preempting when the pool runs out (vLLM's PagedAttention scheduler, SGLang); ``full``
reserves the blocks of the prompt and every output token at admission, so a running request is never evicted
(TensorRT-LLM's default ``CapacitySchedulerPolicy.GUARANTEED_NO_EVICT``)."""

MOE_DISPATCHES = ("all_to_all", "allgather_reducescatter", "deepep")
"""How an engine moves tokens to the experts when attention is data-parallel (``attention_dp > 1``): ``all_to_all``
sends each rank's token copies to the ranks holding their top-k experts and back (DeepSeek-V3's DeepEP,
TensorRT-LLM and SGLang with attention DP); ``allgather_reducescatter`` gathers every rank's hidden states on every
rank, which routes them to its own experts, then reduce-scatters the expert outputs back (vLLM's default
``--all2all-backend``: one copy of each token per rank instead of top-k copies); ``deepep`` is DeepEP in its "auto"
mode (SGLang ``--moe-a2a-backend deepep --deepep-mode auto``): iterations with prefill tokens run the normal
kernels, which cross the network once per destination node and forward over NVLink
(``workbench.cost.comm.all_to_all_forwarded_s``), decode-only iterations the low-latency kernels, which send each
copy and are priced from DeepEP's own kernel benchmark (``workbench.cost.deepep``)."""

KV_MEMORY_SHARES = ("of_total", "weights_and_kv", "of_free")
"""What the plan's memory share (``ServingPlan.gpu_memory_utilization_frac``, the engine's memory flag) bounds, which
sizes the KV pool (``workbench.serving.memory.kv_capacity_tokens``): ``of_total`` everything on the device, the pool
is HBM x share - weights - activation peak - reserve (vLLM's ``--gpu-memory-utilization``,
``determine_num_available_blocks``); ``weights_and_kv`` the weights and the pool only, activations and CUDA graphs
living in the rest, the pool is (HBM - reserve) x share - weights (SGLang's ``--mem-fraction-static``,
``ModelRunner.profile_max_num_token``); ``of_free`` the memory left after the weights, the profiled activation
peak and the memory outside PyTorch, the pool is (HBM - weights - activation peak - reserve) x share (TensorRT-LLM's
``--kv_cache_free_gpu_memory_fraction``, ``KvCacheCreator._cal_max_memory``)."""

MEMORY_SHARE_LABELS = {
    "of_total": "GPU memory utilisation (of the device: weights, activations and KV)",
    "weights_and_kv": "static memory share (weights and KV)",
    "of_free": "KV share of the memory left free",
}
"""How a report names the plan's memory share under each ``KV_MEMORY_SHARES`` rule (the engine's flag: vLLM
``--gpu-memory-utilization``, SGLang ``--mem-fraction-static``, TensorRT-LLM ``--kv_cache_free_gpu_memory_fraction``)."""

TP_ALL_REDUCES = ("nccl", "vllm_custom", "trtllm_custom")
"""The kernel family an engine runs its tensor-parallel all-reduces with (priced by ``workbench.cost.tp_allreduce``):
``nccl`` (NCCL's own choice, priced by NCCL's tuning model), ``vllm_custom`` (vLLM's custom all-reduce, one- and
two-stage), ``trtllm_custom`` (TensorRT-LLM's custom one-shot / two-shot kernels, as SGLang's ``sgl_kernel``
ports them)."""

MAX_HOST_S = 1.0
"""Largest per-iteration or per-kernel host time a profile may state, seconds (engines spend 10^-5..10^-2)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineProfile:
    """One serving engine (see the module docstring). Times in seconds, counts of kernels per decoder layer.

    Raises ValueError naming the field, the bad value and what is allowed."""

    id: str
    name: str
    engine: str = "generic"
    """The ``engine`` code of the validation files this profile serves (``vllm``, ``sglang``, ``trtllm``)."""
    versions: str = ""
    """Engine releases the profile describes, as text (``0.5-0.6``, ``>= 0.8``)."""
    description: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    """Field name -> where its value comes from."""

    step_overhead_s: float = 1.0e-3
    """Host time per iteration that the GPU waits for (scheduler, input preparation, GPU->CPU sync of the
    sampled tokens, output processing not overlapped with the next iteration). 0..``MAX_HOST_S``."""
    host_per_request_s: float = 0.0
    """Host time per request an iteration schedules (the engine's Python loop over its requests: scheduling, input
    preparation, updating each request with its sampled token, responses). An engine that overlaps its host work
    with the GPU (``step_overhead_s`` = 0: an overlap scheduler) still waits for it when it is the longer: the
    iteration lasts max(GPU time, host time) (``step_overhead_s`` is added after that). 0..``MAX_HOST_S``."""
    frontend_host_per_request_s: float = 0.0
    """Host time per request an iteration schedules that the engine's own process spends on the API server when
    the server runs in that process (a vLLM V0 server launched with ``--disable-frontend-multiprocessing``, as the
    APEX runs of vLLM 0.6.0 were: the OpenAI server's per-request work on every iteration's outputs runs on the
    engine's event loop, between its iterations); added to the iteration's time, not overlapped. 0 when the server
    has a process of its own (the vLLM default since PR #6883, 2024-07). 0..``MAX_HOST_S``."""
    pp_host_serial: bool = False
    """Under pipeline parallelism every stage runs its host work for a micro-batch after its forward of that
    micro-batch, not beside it (TensorRT-LLM 1.0 ``PyExecutor._executor_loop_pp``; its last rank samples
    asynchronously and overlaps): a micro-batch's passage through the pp stages then takes its forward plus pp - 1
    times its host time (``host_per_request_s``)."""
    decode_cuda_graphs: bool = True
    """Decode-only iterations (up to ``max_graph_batch`` sequences) replay a captured CUDA graph: no per-kernel
    CPU launch cost."""
    mixed_cuda_graphs: bool = True
    """Iterations with prefill tokens are graph-launched too (vLLM V1's piecewise CUDA graphs, TRT-LLM); False:
    they run eagerly and may wait for the CPU's kernel launches (``eager_kernel_s``)."""
    max_graph_batch: int = 512
    """Largest decode batch with a captured graph (vLLM V0 captures batch sizes up to 256); larger batches run
    eagerly. 1..2**20."""
    graph_batch_sizes: tuple[int, ...] = ()
    """Decode batch sizes with a captured CUDA graph, ascending, where the engine runs a decode-only batch as the
    graph of the next captured size up, dummy sequences filling the gap (TensorRT-LLM's ``cuda_graph_config``
    with ``enable_padding``; vLLM V0 pads to ``_BATCH_SIZES_TO_CAPTURE``): the iteration's GEMMs, small kernels
    and LM head then process the padded batch, and each dummy's attention reads a one-token cache
    (``kept_graph_sizes``, ``padded_decode_batch``). Empty: every decode batch runs at its own size. Each 1..``max_graph_batch``."""
    eager_kernel_s: float = 0.0
    """CPU time to launch one kernel eagerly (Python module call, PyTorch dispatch, launch): an eager iteration
    takes at least its kernel count (every layer's GEMMs, small kernels, collectives and quantisations) times this.
    0..``MAX_HOST_S``."""
    async_output: bool = False
    """Sampled tokens are processed, and reach the client, while the next iteration runs (vLLM 0.6's asynchronous
    output processor): a token is out ``step_overhead_s`` after its iteration ends (the next iteration's host
    part), which TTFT and end-to-end latency include."""
    layer_kernels: int = 6
    """Kernels one decoder layer launches besides its GEMMs and collectives in a decode iteration (norms,
    rotary embedding, KV-cache write, attention, activation): each costs at least the device's minimum kernel
    time (``workbench.serving.cost_layers.MIN_KERNEL_S``). 0..64."""
    fp8_quant_kernels: int = 0
    """Extra kernels per GEMM input when the GEMMs take fp8 activations (activation scale and cast outside the
    GEMM). 0..8."""
    kv_admission: str = "prompt"
    """One of ``KV_ADMISSIONS``."""
    chunked_prefill: bool | None = None
    """Whether prompts are split into chunks; None: the plan's scheduler decides (``sarathi`` chunks); False:
    whole prompts join the running decodes' iterations (TensorRT-LLM's in-flight batching without
    ``enable_chunked_prefill``)."""
    moe_dispatch: str = "all_to_all"
    """One of ``MOE_DISPATCHES``: the collectives of an MoE layer under attention data parallelism."""
    tp_all_reduce: str = "nccl"
    """One of ``TP_ALL_REDUCES``: the kernel family of the tensor-parallel all-reduces of every layer, priced
    from that family's published latency table where one exists for the device and tp, else by NCCL's model."""
    varlen_attention: bool = False
    """Prefill chunks and decodes of an iteration share one FlashAttention varlen call (vLLM V1's FlashAttention
    backend) instead of separate prefill and decode kernels: with FlashAttention-2 each decode query then fills a
    whole query tile per query head (``workbench.serving.cost_attention.VARLEN_TILE_ROWS``)."""

    profile_sampler_bytes_per_logit: float = 0.0
    """Bytes per (sequence, vocabulary entry) the engine's start-up memory profile holds at the peak of its dummy
    sampler run over ``max_num_seqs`` sequences, which runs after the dummy forward, so the profiled activation
    peak is the larger of the two (vLLM V1 ``GPUModelRunner.profile_run``: ``_dummy_run`` then
    ``_dummy_sampler_run`` with top-k and top-p set; ``workbench.serving.memory.activation_peak_bytes``). 0: the
    engine profiles no sampler run, and the peak is the forward's plus fp32 logits. 0..256."""

    dp_rank_batches: bool = False
    """Each attention-data-parallel rank is an engine of its own: the front end assigns a request to one rank,
    whose scheduler runs its prefill chunks within the rank's own token budget (``max_num_batched_tokens`` /
    ``attention_dp``), and on an MoE model the ranks run every forward in lockstep, synchronised by the expert
    layers' collectives, each padded to the largest rank's token count (vLLM V1: one ``DPEngineCoreProc`` per rank,
    ``docs/serving/data_parallel_deployment.md``; ``vllm/v1/worker/dp_utils.py`` ``coordinate_batch_across_dp``).
    An iteration holding prefill chunks then lasts as long as the rank holding the most prefill tokens
    (``workbench.serving.dp_ranks.heaviest_rank_chunks``); False: the ranks split every iteration's tokens evenly."""

    kv_memory_share: str = "of_total"
    """One of ``KV_MEMORY_SHARES``: what the engine's memory flag (the plan's ``gpu_memory_utilization_frac``)
    bounds, and so how its KV pool is sized."""

    memory_share_by_gpus: tuple[tuple[int, float], ...] = ((1, 0.9),)
    """The engine's own default for its memory flag by the GPUs of one engine: (at least this many GPUs, share)
    pairs, counts rising from 1, shares in (0, 1]; the last pair whose count the engine reaches applies
    (``default_memory_share``). vLLM's ``--gpu-memory-utilization`` defaults to 0.9 at any size."""

    kv_transfer_layerwise: bool = False
    """A disaggregated prefill engine sends each layer's KV as soon as that layer is computed, overlapping the
    transfer with the rest of the prefill (Splitwise, Patel et al. ISCA 2024, section 4.3; vLLM-Ascend's
    ``MooncakeLayerwiseConnector``); False: the whole KV leaves after the prefill (SGLang's disaggregation, vLLM's
    NIXL connector, TensorRT-LLM's cache transceiver; its chunk-pipelined transfer is NVIDIA/TensorRT-LLM PR
    #15727, open in 2026)."""

    def __post_init__(self) -> None:
        where = f"EngineProfile {self.id!r}"
        for name in ("id", "name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{where}: {name} must be a non-empty string, got {shown(value)}")
        for name in (
            "step_overhead_s",
            "eager_kernel_s",
            "host_per_request_s",
            "frontend_host_per_request_s",
        ):
            check_real(where, name, getattr(self, name), minimum=0.0, min_open=False, maximum=MAX_HOST_S,
                       unit="s")  # fmt: skip
        for name in ("decode_cuda_graphs", "mixed_cuda_graphs", "async_output", "varlen_attention",
                     "kv_transfer_layerwise", "pp_host_serial", "dp_rank_batches"):  # fmt: skip
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{where}: {name} must be true or false, got {shown(getattr(self, name))}")
        if self.chunked_prefill is not None and not isinstance(self.chunked_prefill, bool):
            raise ValueError(
                f"{where}: chunked_prefill must be true, false or absent, got {shown(self.chunked_prefill)}"
            )
        check_count(where, "max_graph_batch", self.max_graph_batch, maximum=2**20)
        sizes = self.graph_batch_sizes
        if not isinstance(sizes, list | tuple):
            raise ValueError(f"{where}: graph_batch_sizes must be a list of batch sizes, got {shown(sizes)}")
        for size in sizes:
            check_count(
                where, "graph_batch_sizes entry", size, maximum=self.max_graph_batch, limit="max_graph_batch"
            )
        if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise ValueError(f"{where}: graph_batch_sizes must rise strictly, got {list(sizes)}")
        object.__setattr__(self, "graph_batch_sizes", tuple(sizes))
        check_real(where, "profile_sampler_bytes_per_logit", self.profile_sampler_bytes_per_logit, minimum=0.0,
                   min_open=False, maximum=256.0, unit="bytes")  # fmt: skip
        check_count(where, "layer_kernels", self.layer_kernels, minimum=0, maximum=64)
        check_count(where, "fp8_quant_kernels", self.fp8_quant_kernels, minimum=0, maximum=8)
        if self.moe_dispatch not in MOE_DISPATCHES:
            raise ValueError(
                f"{where}: moe_dispatch must be one of {', '.join(MOE_DISPATCHES)}; got {shown(self.moe_dispatch)}"
            )
        if self.tp_all_reduce not in TP_ALL_REDUCES:
            raise ValueError(
                f"{where}: tp_all_reduce must be one of {', '.join(TP_ALL_REDUCES)}; got {shown(self.tp_all_reduce)}"
            )
        self._check_memory_shares(where)
        if self.kv_memory_share not in KV_MEMORY_SHARES:
            raise ValueError(
                f"{where}: kv_memory_share must be one of {', '.join(KV_MEMORY_SHARES)}; "
                f"got {shown(self.kv_memory_share)}"
            )
        if self.kv_admission not in KV_ADMISSIONS:
            raise ValueError(
                f"{where}: kv_admission must be one of {', '.join(KV_ADMISSIONS)}; got {shown(self.kv_admission)}"
            )

    def kept_graph_sizes(self, max_seqs: int) -> tuple[int, ...]:
        """The ``graph_batch_sizes`` an engine admitting at most ``max_seqs`` sequences per iteration keeps: those
        up to ``max_seqs``, and ``max_seqs`` itself in place of the first larger one (TensorRT-LLM's
        ``_filter_cuda_graph_batch_sizes``); empty when the engine does not pad. Work it out once per engine."""
        kept = [b for b in self.graph_batch_sizes if b <= max_seqs]
        if len(kept) < len(self.graph_batch_sizes) and max_seqs not in kept:
            kept.append(max_seqs)
        return tuple(kept)

    def padded_decode_batch(self, num_decode_seqs: int, kept: tuple[int, ...]) -> int:
        """Sequences a decode-only iteration of ``num_decode_seqs`` runs as (see ``graph_batch_sizes``): the
        smallest of the ``kept`` sizes (``kept_graph_sizes``) at least that large; ``num_decode_seqs`` itself when
        none is, or when the batch runs eagerly (above ``max_graph_batch``)."""
        n = num_decode_seqs
        at = bisect.bisect_left(kept, n)
        return kept[at] if at < len(kept) and self.graph_launched(0, n) else n

    def graph_launched(self, num_prefill_tokens: int, num_decode_seqs: int) -> bool:
        """Whether an iteration of this composition replays a CUDA graph (no eager launch cost)."""
        if num_prefill_tokens:
            return self.mixed_cuda_graphs
        return self.decode_cuda_graphs and num_decode_seqs <= self.max_graph_batch

    def _check_memory_shares(self, where: str) -> None:
        """ValueError naming the profile unless ``memory_share_by_gpus`` is (count, share) pairs, counts whole and
        rising from 1, shares in (0, 1]; stores them as a tuple of tuples."""
        pairs = self.memory_share_by_gpus
        bad = f"{where}: memory_share_by_gpus must be [[1, share], [count, share], ...] with rising counts and shares in (0, 1]"
        if not isinstance(pairs, list | tuple) or not pairs:
            raise ValueError(f"{bad}; got {shown(pairs)}")
        out = []
        for pair in pairs:
            if not isinstance(pair, list | tuple) or len(pair) != 2:
                raise ValueError(f"{bad}; got the entry {shown(pair)}")
            count, share = pair
            check_count(where, "memory_share_by_gpus count", count, maximum=2**20)
            check_real(where, "memory_share_by_gpus share", share, minimum=0.0, maximum=1.0)
            out.append((int(count), float(share)))
        counts = [c for c, _ in out]
        if counts[0] != 1 or any(b <= a for a, b in zip(counts, counts[1:], strict=False)):
            raise ValueError(f"{bad}; got counts {counts}")
        object.__setattr__(self, "memory_share_by_gpus", tuple(out))

    def default_memory_share(self, gpus: int) -> float:
        """The engine's default memory flag for an engine of ``gpus`` GPUs (``memory_share_by_gpus``). ValueError
        for a count below 1."""
        check_count(f"EngineProfile {self.id!r}", "gpus", gpus, maximum=2**31)
        return [share for count, share in self.memory_share_by_gpus if gpus >= count][-1]
