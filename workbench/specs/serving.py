"""Serving specs: ``ServingPlan`` (how engines are laid out and batch), ``ServingWorkload`` (the requests) and
``SLO`` (the latency targets).

Layout conventions follow ``shared/validation/README.md`` ("Serving parallel layout"): an *engine* is one
serving instance (one vLLM, SGLang or TensorRT-LLM server); ``replicas`` engines sit behind a router; inside an
engine ``tp`` is the tensor-parallel degree of attention and the dense layers, ``attention_dp`` the number of
data-parallel attention ranks (SGLang ``--enable-dp-attention``, TRT-LLM ``enable_attention_dp``), ``pp`` the
pipeline stages, and ``ep`` the expert-parallel degree of the MoE layers, whose own tensor-parallel degree is
``tp * attention_dp / ep``. Devices per engine = ``tp * pp * attention_dp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from workbench.specs.errors import check_choice, check_int
from workbench.specs.limits import (
    MAX_DEVICES,
    MAX_GLOBAL_BATCH_SIZE,
    MAX_PP,
    MAX_SEQ_LEN,
    MAX_SIMULATED_REQUESTS,
    check_real,
    shown,
)
from workbench.specs.speculative import SpeculativeDecoding

MAX_KV_BLOCK_TOKENS = 2**12
"""Tokens per KV block: 4,096. vLLM offers 1-256 (``--block-size``: 8, 16, 32, 64, 128, 256 on CUDA); SGLang's
token-granular pool is a block of 1; TRT-LLM's ``tokens_per_block`` defaults to 32 (64 in some recipes)."""

MAX_REQUESTS = MAX_SIMULATED_REQUESTS
"""Requests of one simulated workload (``limits.MAX_SIMULATED_REQUESTS``, with the reason)."""

MAX_REQUEST_RATE_PER_S = 1e9
"""Mean arrival rate, requests/s. The busiest public deployments serve 10^4-10^5 requests/s in aggregate."""


class ServingDType(StrEnum):
    """Element type of weights, GEMM inputs or the KV cache (the codes of ``serving_public.csv``)."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    """E4M3 with per-tensor, per-channel or block scales (the scales are under 1% of the bytes)."""
    FP4 = "fp4"
    """NVFP4: 4-bit E2M1 values and one FP8 E4M3 scale per 16 values (NVIDIA Blackwell NVFP4 format)."""
    INT4 = "int4"
    """4-bit integers with a 16-bit scale and zero point per group of 128 (AWQ, GPTQ's default group size)."""


BYTES_PER_VALUE: dict[ServingDType, float] = {
    ServingDType.BF16: 2.0,
    ServingDType.FP16: 2.0,
    ServingDType.FP8: 1.0,
    ServingDType.FP4: 0.5 + 1.0 / 16,
    ServingDType.INT4: 0.5 + 4.0 / 128,
}
"""Bytes per stored value, scales included: NVFP4 0.5 + 1 byte per 16 values; int4 0.5 + (2 + 2) bytes per group
of 128 (AWQ, Lin et al. 2024, arXiv:2306.00978; GPTQ group size 128, Frantar et al. 2023, arXiv:2210.17323)."""


class Scheduler(StrEnum):
    """How an engine composes one iteration's batch. ``max_num_batched_tokens`` caps the tokens of every
    iteration under both policies."""

    VLLM = "vllm"
    """Continuous batching with whole prefills (Orca, Yu et al. OSDI 2022; vLLM V0 without chunked prefill):
    waiting prompts are prefilled whole, in an iteration with no decodes, before the running sequences decode."""
    SARATHI = "sarathi"
    """Chunked prefill with stall-free batching (Sarathi-Serve, Agrawal et al. OSDI 2024, arXiv:2403.02310; vLLM
    V1's only policy): every running sequence decodes each iteration, and prompt chunks fill the rest of the
    ``max_num_batched_tokens`` budget, so the chunk size is that budget."""


def _check_optional_degree(obj: object, field: str) -> None:
    if getattr(obj, field) is not None:
        check_int(obj, field, maximum=MAX_DEVICES, limit="MAX_DEVICES")


def _check_ep(where: str, field: str, ep: int | None, tp: int, attention_dp: int) -> None:
    if ep is not None and (tp * attention_dp) % ep:
        raise ValueError(
            f"{where}: {field}={ep} must divide tp * attention_dp = {tp * attention_dp} (the experts' own "
            "tensor-parallel degree is tp * attention_dp / ep)"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Disaggregation:
    """Prefill and decode on separate engines (DistServe, Zhong et al. OSDI 2024, arXiv:2401.09670; Splitwise):
    each prompt is prefilled on a prefill engine and its KV cache sent to a decode engine over the cluster's
    network levels. Layout fields per engine follow ``ServingPlan``'s; every degree 1..``MAX_DEVICES``."""

    prefill_workers: int
    """Prefill engines."""
    prefill_tp: int = 1
    """Tensor-parallel degree of one prefill engine."""
    prefill_ep: int | None = None
    """Expert-parallel degree of one prefill engine; None: experts tensor-parallel over the engine (as 1)."""
    prefill_attention_dp: int = 1
    """Data-parallel attention ranks of one prefill engine; 1 means off."""
    decode_workers: int
    """Decode engines."""
    decode_tp: int = 1
    decode_ep: int | None = None
    decode_attention_dp: int = 1
    prefill_dtypes: tuple[ServingDType | None, ServingDType | None, ServingDType | None] = (None, None, None)
    """(weight, activation, KV cache) element types of the prefill engines; None: the plan's (``ServingPlan``
    ``weight_dtype``, ``activation_dtype``, ``kv_cache_dtype``)."""
    decode_dtypes: tuple[ServingDType | None, ServingDType | None, ServingDType | None] = (None, None, None)
    """The same for the decode engines."""

    def __post_init__(self) -> None:
        for field in (
            "prefill_workers",
            "prefill_tp",
            "prefill_attention_dp",
            "decode_workers",
            "decode_tp",
            "decode_attention_dp",
        ):
            check_int(self, field, maximum=MAX_DEVICES, limit="MAX_DEVICES")
        _check_optional_degree(self, "prefill_ep")
        _check_optional_degree(self, "decode_ep")
        _check_ep("Disaggregation", "prefill_ep", self.prefill_ep, self.prefill_tp, self.prefill_attention_dp)
        _check_ep("Disaggregation", "decode_ep", self.decode_ep, self.decode_tp, self.decode_attention_dp)
        for field in ("prefill_dtypes", "decode_dtypes"):
            value = getattr(self, field)
            ok = isinstance(value, tuple) and len(value) == 3
            ok = ok and all(v is None or v in ServingDType._value2member_map_ for v in value)
            if not ok:
                raise ValueError(
                    f"Disaggregation: {field} must be (weight, activation, kv) dtypes, each one of "
                    f"{', '.join(d.value for d in ServingDType)} or None; got {shown(value)}"
                )
            object.__setattr__(self, field, tuple(None if v is None else ServingDType(v) for v in value))
        if self.num_devices > MAX_DEVICES:
            raise ValueError(
                f"Disaggregation: {self.num_devices:,} devices in all; at most {MAX_DEVICES:,} (MAX_DEVICES in "
                "workbench/specs/limits.py)"
            )

    @property
    def num_devices(self) -> int:
        """prefill_workers * prefill_tp * prefill_attention_dp + the same for decode (README's rule)."""
        return (
            self.prefill_workers * self.prefill_tp * self.prefill_attention_dp
            + self.decode_workers * self.decode_tp * self.decode_attention_dp
        )


ROLES = ("both", "prefill", "decode")
"""What one engine does: ``both`` (aggregated serving), or one side of a disaggregated plan."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingPlan:
    """How a model is served: engine layout, precisions, KV cache and batching. With ``disaggregation`` set the
    role layouts come from it, and ``replicas``, ``tp``, ``pp``, ``ep`` and ``attention_dp`` must stay at their
    defaults. Every degree is 1..``MAX_DEVICES`` (pp: ``MAX_PP``) and so is the device total."""

    replicas: int = 1
    """Independent engines behind a router."""
    tp: int = 1
    """Tensor-parallel degree of attention and the dense layers inside one attention rank."""
    pp: int = 1
    """Pipeline stages of one engine. One iteration passes every stage in turn (see ``workbench.serving.cost``)."""
    ep: int | None = None
    """Expert-parallel degree of the MoE layers; divides ``tp * attention_dp``. None: not set, the MoE layers are
    tensor-parallel over the engine (the same as 1)."""
    attention_dp: int = 1
    """Data-parallel attention ranks in one engine, each with ``tp`` devices; 1 means off."""
    weight_dtype: ServingDType = ServingDType.BF16
    """Storage type of the main GEMM weights (embedding and LM head stay 16-bit)."""
    activation_dtype: ServingDType = ServingDType.BF16
    """Input type of the main GEMMs (``fp8`` with fp8 weights = W8A8): picks the device peak they run at."""
    kv_cache_dtype: ServingDType = ServingDType.BF16
    """Element type of the KV cache."""
    kv_block_tokens: int = 16
    """Tokens per KV block (vLLM ``--block-size``, default 16); capacity and admission count whole blocks.
    1..``MAX_KV_BLOCK_TOKENS``."""
    max_num_seqs: int = 256
    """Sequences in flight per engine (vLLM ``--max-num-seqs``, default 256; TRT-LLM max batch size).
    1..``limits.MAX_GLOBAL_BATCH_SIZE``."""
    max_num_batched_tokens: int = 8192
    """Tokens per iteration (vLLM ``--max-num-batched-tokens``; its V1 default for the API server on large GPUs
    is 8192); the prefill chunk size under ``sarathi``. 1..``limits.MAX_SEQ_LEN``."""
    scheduler: Scheduler = Scheduler.SARATHI
    """Batch composition policy; ``chunked_prefill`` is true exactly under ``sarathi``."""
    gpu_memory_utilization_frac: float = 0.9
    """The engine's memory flag, read as the engine reads it (``EngineProfile.kv_memory_share``): vLLM's
    ``--gpu-memory-utilization`` (the share of each device for weights, activations and KV cache; default 0.9),
    SGLang's ``--mem-fraction-static`` (weights and KV cache) or TensorRT-LLM's ``--kv_cache_free_gpu_memory_fraction``
    (the share of the memory left after weights and activations that goes to KV). In (0, 1]."""
    disaggregation: Disaggregation | None = None
    """Separate prefill and decode engines; None: every engine does both (aggregated)."""
    speculative: SpeculativeDecoding | None = None
    """Speculative decoding on every engine (the decode engines of a disaggregated plan); None: off."""
    num_redundant_experts: int = 0
    """Extra physical copies of experts per MoE layer for load balancing (DeepSeek's EPLB, SGLang
    ``--ep-num-redundant-experts``): every MoE layer holds ``num_experts + num_redundant_experts`` experts, which
    ``ep`` must divide. >= 0."""
    offload_group_size: int = 0
    """Host offload of MoE expert weights as SGLang runs it (its ``ModuleOffloader``, ``SGLANG_OFFLOAD_GROUP_SIZE``,
    later ``--offload-group-size``): of every ``offload_group_size`` decoder layers the last keeps its routed-expert
    weights in pinned host memory and copies them to the device one offloaded layer ahead of use, every forward
    (:mod:`workbench.serving.offload`). Layers, 0: off; else 1 + the dense layers .. ``MAX_PP``."""
    engine: str = "generic"
    """Serving engine profile id (``profiles/engines/<id>.toml``, :mod:`workbench.presets.engines`): the engine's
    host overhead per iteration, CUDA-graph use, kernels per layer and KV admission rule. Checked when the plan is
    priced (``workbench.serving.cost.ReplicaCost``)."""

    def __post_init__(self) -> None:
        check_int(self, "replicas", maximum=MAX_DEVICES, limit="MAX_DEVICES")
        check_int(self, "tp", maximum=MAX_DEVICES, limit="MAX_DEVICES")
        check_int(self, "pp", maximum=MAX_PP, limit="MAX_PP")
        check_int(self, "attention_dp", maximum=MAX_DEVICES, limit="MAX_DEVICES")
        _check_optional_degree(self, "ep")
        _check_ep("ServingPlan", "ep", self.ep, self.tp, self.attention_dp)
        for field in ("weight_dtype", "activation_dtype", "kv_cache_dtype"):
            check_choice(self, field, ServingDType)
        check_int(self, "kv_block_tokens", maximum=MAX_KV_BLOCK_TOKENS, limit="MAX_KV_BLOCK_TOKENS")
        check_int(self, "max_num_seqs", maximum=MAX_GLOBAL_BATCH_SIZE, limit="MAX_GLOBAL_BATCH_SIZE")
        check_int(self, "max_num_batched_tokens", maximum=MAX_SEQ_LEN, limit="MAX_SEQ_LEN")
        check_choice(self, "scheduler", Scheduler)
        check_int(self, "num_redundant_experts", minimum=0, maximum=MAX_DEVICES, limit="MAX_DEVICES")
        check_int(self, "offload_group_size", minimum=0, maximum=MAX_PP, limit="MAX_PP")
        if self.speculative is not None and not isinstance(self.speculative, SpeculativeDecoding):
            raise ValueError(
                f"ServingPlan: speculative must be a SpeculativeDecoding or None, got {shown(self.speculative)}"
            )
        check_real(
            "ServingPlan", "gpu_memory_utilization_frac", self.gpu_memory_utilization_frac, maximum=1.0
        )
        if not isinstance(self.engine, str) or not self.engine.strip() or len(self.engine) > 200:
            raise ValueError(f"ServingPlan: engine must be an engine profile id, got {shown(self.engine)}")
        self._check_disaggregation()
        if self.num_devices > MAX_DEVICES:
            raise ValueError(
                f"ServingPlan: {self.num_devices:,} devices in all; at most {MAX_DEVICES:,} (MAX_DEVICES in "
                "workbench/specs/limits.py)"
            )

    def _check_disaggregation(self) -> None:
        if self.disaggregation is None:
            return
        if not isinstance(self.disaggregation, Disaggregation):
            raise ValueError(
                f"ServingPlan: disaggregation must be a Disaggregation or None, got {shown(self.disaggregation)}"
            )
        set_fields = [
            f"{f}={getattr(self, f)!r}"
            for f, default in (("replicas", 1), ("tp", 1), ("pp", 1), ("ep", None), ("attention_dp", 1))
            if getattr(self, f) != default
        ]
        if set_fields:
            raise ValueError(
                f"ServingPlan: with disaggregation the role layouts come from it; leave replicas, tp, pp, ep and "
                f"attention_dp at their defaults (got {', '.join(set_fields)})"
            )

    @property
    def chunked_prefill(self) -> bool:
        """Prompts are split into chunks of up to ``max_num_batched_tokens`` (the ``sarathi`` scheduler)."""
        return self.scheduler is Scheduler.SARATHI

    @property
    def devices_per_engine(self) -> int:
        """tp * pp * attention_dp (README: devices per engine); for a disaggregated plan use ``role_plan``."""
        return self.tp * self.pp * self.attention_dp

    @property
    def num_devices(self) -> int:
        """Devices of the whole deployment."""
        if self.disaggregation is not None:
            return self.disaggregation.num_devices
        return self.replicas * self.devices_per_engine

    @property
    def expert_parallel(self) -> int:
        """The expert-parallel degree in force (``ep``, or 1 when None)."""
        return 1 if self.ep is None else self.ep

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel degree of each expert: tp * attention_dp / ep (README)."""
        return self.tp * self.attention_dp // self.expert_parallel

    def role_plan(self, role: str) -> ServingPlan:
        """The aggregated-form plan of one engine of ``role`` (``both``, ``prefill`` or ``decode``): for a
        disaggregated plan the role's layout with ``replicas`` = its worker count; the plan itself for ``both``.
        Raises ValueError for an unknown role, or for ``prefill``/``decode`` without disaggregation, or ``both``
        with it."""
        if role not in ROLES:
            raise ValueError(f"ServingPlan: role must be one of {', '.join(ROLES)}; got {shown(role)}")
        d = self.disaggregation
        if role == "both":
            if d is not None:
                raise ValueError(
                    "ServingPlan: a disaggregated plan has no 'both' engines; ask for prefill or decode"
                )
            return self
        if d is None:
            raise ValueError(
                f"ServingPlan: role {role!r} needs a disaggregated plan (disaggregation is None)"
            )
        if role == "prefill":
            layout = (d.prefill_workers, d.prefill_tp, d.prefill_ep, d.prefill_attention_dp)
            dtypes = d.prefill_dtypes
        else:
            layout = (d.decode_workers, d.decode_tp, d.decode_ep, d.decode_attention_dp)
            dtypes = d.decode_dtypes
        workers, tp, ep, adp = layout
        plan_dtypes = (self.weight_dtype, self.activation_dtype, self.kv_cache_dtype)
        w, a, kv = (mine or theirs for mine, theirs in zip(dtypes, plan_dtypes, strict=True))
        spec = self.speculative if role == "decode" else None  # prefill engines emit one token per prompt
        return replace(self, disaggregation=None, replicas=workers, tp=tp, ep=ep, attention_dp=adp, speculative=spec,
                       weight_dtype=w, activation_dtype=a, kv_cache_dtype=kv)  # fmt: skip

    def describe(self) -> str:
        """Short text such as ``2x tp4 fp8/fp8 kv-bf16 sarathi8192``."""
        d = self.disaggregation
        if d is not None:
            layout = f"P{d.prefill_workers}x tp{d.prefill_tp} / D{d.decode_workers}x tp{d.decode_tp}" + (
                f" adp{d.decode_attention_dp}" if d.decode_attention_dp > 1 else ""
            )
            for role, dtypes in (("P", d.prefill_dtypes), ("D", d.decode_dtypes)):
                if any(dtypes):
                    layout += f" {role}:" + "/".join(str(v) if v else "-" for v in dtypes)
        else:
            layout = f"{self.replicas}x tp{self.tp}" + (f" pp{self.pp}" if self.pp > 1 else "")
            layout += f" ep{self.ep}" if self.ep is not None else ""
            layout += f" adp{self.attention_dp}" if self.attention_dp > 1 else ""
        return (
            f"{layout} {self.weight_dtype}/{self.activation_dtype} kv-{self.kv_cache_dtype} "
            f"{self.scheduler}{self.max_num_batched_tokens}"
            + ("" if self.speculative is None else f" spec-{self.speculative.describe()}")
            + (f" host-offload1/{self.offload_group_size}" if self.offload_group_size else "")
            + ("" if self.engine == "generic" else f" {self.engine}")
        )


class Arrival(StrEnum):
    """How requests reach the deployment (README ``workload_kind``)."""

    OFFLINE = "offline"
    """All requests are there at t = 0 (trtllm-bench throughput, MLPerf Offline)."""
    CLOSED = "closed"
    """``concurrency`` requests in flight; a new one is sent when one completes."""
    POISSON = "poisson"
    """Open loop: exponential gaps at ``request_rate_per_s`` (MLPerf Server), drawn with ``seed``."""
    TRACE = "trace"
    """Arrival times and lengths replayed from ``trace``."""


def _check_lengths(field: str, value: object, num_requests: int | None) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= MAX_SEQ_LEN:
            raise ValueError(
                f"ServingWorkload: {field} must be in 1..{MAX_SEQ_LEN:,} tokens (MAX_SEQ_LEN), got {shown(value)}"
            )
        return
    ok = isinstance(value, tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_SEQ_LEN for v in value
    )
    if not ok:
        raise ValueError(
            f"ServingWorkload: {field} must be a token count in 1..{MAX_SEQ_LEN:,} or a tuple of them (one per "
            f"request), got {shown(value)}"
        )
    if num_requests is not None and len(value) != num_requests:  # type: ignore[arg-type]
        raise ValueError(
            f"ServingWorkload: {field} has {len(value)} entries; it needs one per request "  # type: ignore[arg-type]
            f"(num_requests={num_requests})"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingWorkload:
    """The requests one simulation serves. Lengths are in tokens; times in seconds."""

    arrival: Arrival = Arrival.OFFLINE
    num_requests: int | None = None
    """Requests in the run, 1..``MAX_REQUESTS``; required except for ``trace`` (then the trace's length)."""
    input_tokens: int | tuple[int, ...] | None = None
    """Prompt length: one value for every request, or one per request. Required except for ``trace``."""
    output_tokens: int | tuple[int, ...] | None = None
    """Generated tokens per request (the first one included), as ``input_tokens``."""
    concurrency: int | None = None
    """Requests kept in flight (``closed`` only, required there), 1..``MAX_REQUESTS``."""
    request_rate_per_s: float | None = None
    """Mean arrival rate of the whole deployment (``poisson`` only, required there), > 0."""
    trace: tuple[tuple[float, int, int], ...] | None = None
    """(arrival_s, input_tokens, output_tokens) per request, arrival_s >= 0 and non-decreasing (``trace`` only,
    required there)."""
    seed: int = 0
    """Seed of every random draw of the simulation (Poisson gaps), >= 0."""
    prefix_hit_rate: float = 0.0
    """Share of every prompt's tokens found in the engine's prefix cache (vLLM automatic prefix caching, SGLang
    RadixAttention): their KV is reused, so the prefill computes only the rest, on top of the cached part. In
    [0, 1); whole KV blocks are reused and at least one prompt token is computed."""

    def __post_init__(self) -> None:
        check_choice(self, "arrival", Arrival)
        check_real("ServingWorkload", "prefix_hit_rate", self.prefix_hit_rate, minimum=0.0, min_open=False,
                   maximum=1.0, max_open=True)  # fmt: skip
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"ServingWorkload: seed must be an integer >= 0, got {shown(self.seed)}")
        if self.arrival is Arrival.TRACE:
            self._check_trace()
            return
        if self.trace is not None:
            raise ValueError(
                f"ServingWorkload: trace is only read with arrival='trace', not {self.arrival.value!r}"
            )
        if self.num_requests is None:
            raise ValueError(f"ServingWorkload: num_requests is required with arrival={self.arrival.value!r}")
        check_int(self, "num_requests", maximum=MAX_REQUESTS, limit="MAX_REQUESTS")
        for field in ("input_tokens", "output_tokens"):
            if getattr(self, field) is None:
                raise ValueError(f"ServingWorkload: {field} is required with arrival={self.arrival.value!r}")
            _check_lengths(field, getattr(self, field), self.num_requests)
        self._check_process()

    def _check_process(self) -> None:
        closed, poisson = self.arrival is Arrival.CLOSED, self.arrival is Arrival.POISSON
        if closed:
            if self.concurrency is None:
                raise ValueError("ServingWorkload: concurrency is required with arrival='closed'")
            check_int(self, "concurrency", maximum=MAX_REQUESTS, limit="MAX_REQUESTS")
        elif self.concurrency is not None:
            raise ValueError(
                f"ServingWorkload: concurrency is only read with arrival='closed', not {self.arrival.value!r}"
            )
        if poisson:
            if self.request_rate_per_s is None:
                raise ValueError("ServingWorkload: request_rate_per_s is required with arrival='poisson'")
            check_real(
                "ServingWorkload",
                "request_rate_per_s",
                self.request_rate_per_s,
                maximum=MAX_REQUEST_RATE_PER_S,
                unit="requests/s",
                limit="MAX_REQUEST_RATE_PER_S",
            )
        elif self.request_rate_per_s is not None:
            raise ValueError(
                f"ServingWorkload: request_rate_per_s is only read with arrival='poisson', not {self.arrival.value!r}"
            )

    def _check_trace(self) -> None:
        trace = self.trace
        if not isinstance(trace, tuple) or not trace:
            raise ValueError(
                "ServingWorkload: trace must be a non-empty tuple of (arrival_s, input_tokens, output_tokens) with "
                f"arrival='trace', got {shown(trace)}"
            )
        if len(trace) > MAX_REQUESTS:
            raise ValueError(f"ServingWorkload: trace has {len(trace):,} requests; at most {MAX_REQUESTS:,}")
        for field in ("input_tokens", "output_tokens", "concurrency", "request_rate_per_s"):
            if getattr(self, field) is not None:
                raise ValueError(
                    f"ServingWorkload: {field} must be left unset with arrival='trace' (the trace gives it)"
                )
        last = 0.0
        for i, item in enumerate(trace):
            ok = isinstance(item, tuple) and len(item) == 3
            if ok:
                t, n_in, n_out = item
                ok = isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) and t >= last
                ok = ok and all(
                    isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_SEQ_LEN
                    for n in (n_in, n_out)
                )
            if not ok:
                raise ValueError(
                    f"ServingWorkload: trace[{i}] must be (arrival_s >= the previous one and >= 0, input_tokens and "
                    f"output_tokens in 1..{MAX_SEQ_LEN:,}), got {shown(item)}"
                )
            last = float(item[0])
        if self.num_requests is not None and self.num_requests != len(trace):
            raise ValueError(
                f"ServingWorkload: num_requests={shown(self.num_requests)} must equal the trace length {len(trace)} "
                "(or be left unset)"
            )
        object.__setattr__(self, "num_requests", len(trace))

    @property
    def request_count(self) -> int:
        """Requests in the run (``num_requests``, set for every arrival kind after validation)."""
        assert self.num_requests is not None
        return self.num_requests

    def input_lengths(self) -> tuple[int, ...]:
        """Prompt tokens of each request, in arrival order."""
        return self._lengths(self.input_tokens, 1)

    def output_lengths(self) -> tuple[int, ...]:
        """Generated tokens of each request, in arrival order."""
        return self._lengths(self.output_tokens, 2)

    def arrival_times_s(self) -> tuple[float, ...] | None:
        """Arrival time of each request for ``trace`` (and 0.0 each for ``offline``); None for ``closed`` and
        ``poisson``, whose times the simulator makes."""
        if self.trace is not None:
            return tuple(float(t[0]) for t in self.trace)
        if self.arrival is Arrival.OFFLINE:
            return (0.0,) * self.request_count
        return None

    def _lengths(self, value: int | tuple[int, ...] | None, column: int) -> tuple[int, ...]:
        if self.trace is not None:
            return tuple(int(t[column]) for t in self.trace)
        if isinstance(value, tuple):
            return value
        assert value is not None
        return (value,) * self.request_count


class Percentile(StrEnum):
    """The percentile an SLO is read at."""

    P50 = "p50"
    P90 = "p90"
    P99 = "p99"

    @property
    def quantile(self) -> float:
        """0.5, 0.9 or 0.99."""
        return {"p50": 0.5, "p90": 0.9, "p99": 0.99}[self.value]


@dataclass(frozen=True, kw_only=True, slots=True)
class SLO:
    """Latency targets a request must meet to count towards goodput (DistServe's SLO attainment)."""

    ttft_s: float | None = None
    """Time to first token (arrival to first generated token), seconds, > 0; None: no target."""
    tpot_s: float | None = None
    """Time per output token after the first ((end - first token) / (output tokens - 1)), seconds, > 0; None:
    no target."""
    percentile: Percentile = Percentile.P99
    """The percentile of the run's requests that must meet each target."""

    def __post_init__(self) -> None:
        if self.ttft_s is None and self.tpot_s is None:
            raise ValueError("SLO: set ttft_s, tpot_s or both (a target with neither constrains nothing)")
        for field in ("ttft_s", "tpot_s"):
            if getattr(self, field) is not None:
                check_real("SLO", field, getattr(self, field), maximum=1e9, unit="s")
        check_choice(self, "percentile", Percentile)
