"""The serving plan space that ``serve_search`` walks: its constraints, its rejection reasons and the plans.

Layouts (``shared/validation/README.md`` "Serving parallel layout"): an engine of S devices is ``tp`` x
``attention_dp`` x ``pp``. S runs over the divisors of a node's device count; engines span nodes (S a power of
two times a node, as tp = S or as pp = S / node across nodes at tp = a node) only when the weights in the
widest searched dtype overflow one node's usable memory. Dense models use tp = S; MoE models also split S
into tp x attention_dp, with the experts tensor-parallel (ep unset) or expert-parallel over the whole engine
(ep = S). Aggregated plans fill the budget with ``budget // S`` replicas. Disaggregated plans (DistServe) pair a
prefill pool and a decode pool of single-node, tensor-parallel engines (tp from the node's divisors) that leave
no room for one more engine of either kind, at most ``MAX_DISAGGREGATED_SPLITS`` prefill counts per pair of
engine sizes, under the first searched scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from workbench.presets.engines import load_engine
from workbench.serving.engine_defaults import with_engine_memory_share
from workbench.serving.precision import gemm_runs, kv_dtypes
from workbench.specs.degrees import divisors
from workbench.specs.errors import check_int
from workbench.specs.limits import MAX_DEVICES, MAX_GLOBAL_BATCH_SIZE, MAX_SEQ_LEN, check_real, shown
from workbench.specs.model import AttentionKind
from workbench.specs.serving import BYTES_PER_VALUE, Disaggregation, Scheduler, ServingDType, ServingPlan

if TYPE_CHECKING:
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec

REASONS: tuple[tuple[str, str], ...] = (
    ("devices", "an engine needs more devices than the budget"),
    (
        "dtype",
        "a weight/GEMM-input dtype the engine runs no path for on the device (gemm_precision), or a KV-cache dtype "
        "it stores none of there (kv_precision)",
    ),
    ("heads", "tp does not divide the attention heads, or tp and the KV heads do not divide one another"),
    ("experts", "ep does not divide the experts"),
    ("layers", "pp exceeds the layers"),
    ("prompt_budget", "a prompt exceeds max_num_batched_tokens without chunked prefill"),
    ("weights", "the weights alone exceed the usable memory of a device"),
    ("no_kv", "weights, activations and reserve leave no KV block"),
    ("kv_request", "one engine's KV cache holds less than one request"),
    ("ttft_alone", "a prompt alone takes longer than the TTFT target"),
    ("tpot_alone", "a decode step alone takes longer than the TPOT target"),
    ("pruned", "not simulated: outside the top_k by steady-state estimate (one per layout first)"),
    ("slo", "misses the SLO at the target rate (Poisson), or no request meets it (other arrivals)"),
)
"""Reasons a plan leaves the search, in the order they are checked (a plan counts under the first)."""

MAX_DISAGGREGATED_SPLITS = 8
"""Prefill engine counts tried per (prefill size, decode size) pair, evenly spread over the possible ones."""

_DTYPES = tuple(d.value for d in ServingDType)

ACTIVATION_OF_WEIGHT: dict[ServingDType, ServingDType] = {
    ServingDType.BF16: ServingDType.BF16,
    ServingDType.FP16: ServingDType.FP16,
    ServingDType.FP8: ServingDType.FP8,
    ServingDType.FP4: ServingDType.FP4,
    ServingDType.INT4: ServingDType.BF16,
}
"""GEMM input dtype searched with each weight dtype: W8A8 for fp8 (vLLM's fp8 checkpoints on Hopper), W4A4 for
NVFP4, W4A16 for int4 (AWQ/GPTQ Marlin kernels), 16-bit weights at their own width."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingSearchConstraints:
    """What ``serve_search`` may vary, and how hard it works. Raises ValueError naming a bad field."""

    num_devices: int | None = None
    """Device budget of the deployment; None: the whole cluster."""
    weight_dtypes: tuple[str, ...] = ("bf16", "fp8")
    """Weight dtypes tried (``ServingDType`` values), each with its GEMM input dtype (``ACTIVATION_OF_WEIGHT``).
    A pair the engine runs no path for on the device (``gemm_precision``; fp8 weights without an fp8 peak run as
    weight-only W8A16 where the engine has that path) is counted under ``dtype``."""
    kv_cache_dtypes: tuple[str, ...] = ("bf16", "fp8")
    """KV-cache dtypes tried; one the engine stores none of on the device (:func:`workbench.serving.precision.
    kv_precision`, e.g. fp8 under TensorRT-LLM on Ampere) is counted under ``dtype``."""
    max_num_seqs: tuple[int, ...] = (64, 256)
    """Values of ``ServingPlan.max_num_seqs`` tried (vLLM's default is 256)."""
    max_num_batched_tokens: tuple[int, ...] = (2048, 8192)
    """Values of ``ServingPlan.max_num_batched_tokens`` tried (the chunk size under sarathi)."""
    schedulers: tuple[str, ...] = ("sarathi", "vllm")
    """Schedulers tried (``Scheduler`` values); disaggregated plans use the first."""
    disaggregation: bool = True
    """Also try disaggregated prefill:decode plans."""
    gpu_memory_utilization_frac: float | None = None
    """``ServingPlan.gpu_memory_utilization_frac`` of every plan, in (0, 1]; None: the engine's own default for each
    plan's engine size (``workbench.serving.engine_defaults.with_engine_memory_share``)."""
    kv_block_tokens: int = 16
    """``ServingPlan.kv_block_tokens`` of every plan."""
    engine: str = "generic"
    """``ServingPlan.engine`` (serving engine profile id) of every plan."""
    top_k: int = 10
    """Plans simulated, >= 1: by steady-state estimate per device, the best variant (dtypes, batching) of each
    engine layout first, then the next best; the rest are counted under ``pruned``."""
    rate_rel_tol: float = 0.05
    """Relative width at which the Poisson rate search stops, in (0, 1]."""

    def __post_init__(self) -> None:
        if self.num_devices is not None:
            check_int(self, "num_devices", maximum=MAX_DEVICES, limit="MAX_DEVICES")
        for name, allowed in (("weight_dtypes", _DTYPES), ("kv_cache_dtypes", _DTYPES),
                              ("schedulers", tuple(s.value for s in Scheduler))):  # fmt: skip
            values = getattr(self, name)
            if not isinstance(values, tuple) or not values or any(v not in allowed for v in values):
                raise ValueError(
                    f"ServingSearchConstraints: {name} must be a non-empty tuple of {', '.join(allowed)}; "
                    f"got {shown(values)}"
                )
        for name, top in (("max_num_seqs", MAX_GLOBAL_BATCH_SIZE), ("max_num_batched_tokens", MAX_SEQ_LEN)):
            values = getattr(self, name)
            ok = (
                isinstance(values, tuple)
                and values
                and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= top for v in values)
            )
            if not ok:
                raise ValueError(
                    f"ServingSearchConstraints: {name} must be a non-empty tuple of integers in 1..{top:,}; "
                    f"got {shown(values)}"
                )
        check_int(self, "top_k", maximum=10**6, limit="10**6")
        check_int(self, "kv_block_tokens", maximum=2**12, limit="MAX_KV_BLOCK_TOKENS")
        if self.gpu_memory_utilization_frac is not None:
            check_real("ServingSearchConstraints", "gpu_memory_utilization_frac", self.gpu_memory_utilization_frac,
                       maximum=1.0)  # fmt: skip
        check_real("ServingSearchConstraints", "rate_rel_tol", self.rate_rel_tol, maximum=1.0)


def layout_reason(model: ModelSpec, engine: ServingPlan) -> str | None:
    """The ``REASONS`` key of the first layout rule an aggregated-form engine plan breaks (``ReplicaCost``'s
    rules: tp divides the attention heads; tp and the KV heads divide one another unless MLA; pp at most the
    layers; ep divides the experts), or None."""
    tp, kv = engine.tp, model.num_key_value_heads
    if model.num_attention_heads % tp or (model.attention is not AttentionKind.MLA and kv % tp and tp % kv):
        return "heads"
    if model.is_moe and model.num_experts % engine.expert_parallel:
        return "experts"
    if engine.pp > model.num_layers:
        return "layers"
    return None


def engine_layouts(
    model: ModelSpec, cluster: ClusterSpec, *, widest_bytes: float, usable_frac: float
) -> list[ServingPlan]:
    """Aggregated one-engine layouts (module docstring) as plans with default dtypes and batching.
    ``widest_bytes``: bytes per weight of the widest searched dtype; ``usable_frac``: the share of a device's
    memory an engine may take."""
    node = cluster.devices_per_node
    sizes = [(s, 1) for s in divisors(node)]
    usable = cluster.device.hbm_bytes * usable_frac * node
    if model.total_parameters() * widest_bytes > usable:  # weights overflow a node: span nodes
        k = 2
        while node * k <= cluster.num_devices:
            sizes += [(node * k, 1), (node, k)]
            k *= 2
    out = []
    for size, pp in sizes:
        tps = [size] if not model.is_moe or pp > 1 else divisors(size)
        for tp in tps:
            for ep in (None, size) if model.is_moe and size > 1 else (None,):
                out.append(ServingPlan(tp=tp, pp=pp, attention_dp=size // tp, ep=ep))
    return out


def _splits(budget: int, prefill_size: int, decode_size: int) -> list[tuple[int, int]]:
    """(prefill engines, decode engines) pairs, each >= 1, leaving fewer devices than either engine size."""
    pairs = []
    for p in range(1, (budget - decode_size) // prefill_size + 1):
        d = (budget - p * prefill_size) // decode_size
        if d >= 1 and budget - p * prefill_size - d * decode_size < min(prefill_size, decode_size):
            pairs.append((p, d))
    if len(pairs) > MAX_DISAGGREGATED_SPLITS:
        picks = np.unique(np.linspace(0, len(pairs) - 1, MAX_DISAGGREGATED_SPLITS).round().astype(int))
        pairs = [pairs[i] for i in picks]
    return pairs


def candidate_plans(
    model: ModelSpec, cluster: ClusterSpec, budget: int, c: ServingSearchConstraints, counts: dict[str, int]
) -> list[ServingPlan]:
    """Every plan of the space on ``budget`` devices of ``cluster`` (module docstring), except those counted in
    ``counts`` under ``devices`` (an engine larger than the budget) and ``dtype`` (a weight/GEMM-input pair
    ``gemm_precision`` refuses for ``c.engine`` on the device, or a KV dtype ``kv_precision`` refuses).
    Batching pairs with ``max_num_batched_tokens < max_num_seqs`` are skipped (the simulator needs a budget of
    one token per running sequence)."""
    dtypes = [(ServingDType(w), ServingDType(k)) for w in c.weight_dtypes for k in c.kv_cache_dtypes]
    profile = load_engine(c.engine)
    usable = frozenset(kv_dtypes(profile, cluster.device))
    runs = {
        w: gemm_runs(profile, cluster.device, w, ACTIVATION_OF_WEIGHT[w], moe=model.is_moe) for w, _ in dtypes
    }
    batching = [(s, t) for s in c.max_num_seqs for t in c.max_num_batched_tokens if t >= s]
    widest = max(BYTES_PER_VALUE[w] for w, _ in dtypes)
    schedulers = [Scheduler(s) for s in c.schedulers]
    variants = []
    share = c.gpu_memory_utilization_frac
    # the share of a device the weights may fill under the engine's memory flag (EngineProfile.kv_memory_share):
    # the flag itself where it bounds the weights (vLLM, SGLang), the whole device where it is a share of the memory
    # the weights leave (TensorRT-LLM); ReplicaCost decides the rest
    weights_frac = max(s for _, s in profile.memory_share_by_gpus) if share is None else share
    if profile.kv_memory_share == "of_free":
        weights_frac = 1.0
    for engine in engine_layouts(model, cluster, widest_bytes=widest, usable_frac=weights_frac):
        replicas = max(1, budget // engine.devices_per_engine)
        variants += [replace(engine, replicas=replicas, scheduler=sched) for sched in schedulers]
    if c.disaggregation:
        sizes = [tp for tp in divisors(cluster.devices_per_node) if tp < budget]
        for ptp in sizes:
            for dtp in sizes:
                for p, d in _splits(budget, ptp, dtp):
                    dis = Disaggregation(prefill_workers=p, prefill_tp=ptp, decode_workers=d, decode_tp=dtp)
                    variants.append(ServingPlan(disaggregation=dis, scheduler=schedulers[0]))
    plans = []
    for layout in variants:
        for w, kv in dtypes:
            act = ACTIVATION_OF_WEIGHT[w]
            for seqs, tokens in batching:
                if not runs[w] or kv not in usable:
                    counts["dtype"] += 1
                    continue
                plan = replace(layout, weight_dtype=w, activation_dtype=act, kv_cache_dtype=kv, max_num_seqs=seqs,
                               max_num_batched_tokens=tokens, kv_block_tokens=c.kv_block_tokens, engine=c.engine)  # fmt: skip
                plan = with_engine_memory_share(plan) if share is None else replace(
                    plan, gpu_memory_utilization_frac=share)  # fmt: skip
                if plan.num_devices > budget:
                    counts["devices"] += 1
                    continue
                plans.append(plan)
    return plans
