"""Memory of one serving engine's device: weights, the activation peak vLLM profiles (its dummy forward, and in
vLLM V1 the dummy sampler run after it: ``activation_peak_bytes``), the memory outside PyTorch,
and the KV cache that fits beside them, as each engine's memory flag sizes it (vLLM's share of the whole device,
SGLang's of weights and KV, TensorRT-LLM's of the memory left free: ``kv_capacity_tokens``).

KV bytes per token and layer (Kwon et al. 2023, PagedAttention, arXiv:2309.06180, section 2): GQA/MHA store K and
V, ``2 * num_key_value_heads * head_dim * bytes``, split over tp by heads (a rank keeps at least one head: vLLM
replicates KV heads when tp > num_key_value_heads); MLA stores the compressed latent and the shared rope key,
``(kv_lora_rank + qk_rope_head_dim) * bytes`` (DeepSeek-V2, arXiv:2405.04434, section 2.1.2), which every tp rank
holds whole.
"""

from __future__ import annotations

import math

from workbench.serving.offload import (
    host_offload_bytes_per_device,
    offload_buffer_bytes_per_device,
    routed_expert_params_per_device,
)
from workbench.specs.engine import KV_MEMORY_SHARES
from workbench.specs.hardware import DeviceSpec
from workbench.specs.model import AttentionKind, ModelSpec
from workbench.specs.serving import BYTES_PER_VALUE, ServingDType, ServingPlan

GIB = 2**30

ACT_BYTES = 2.0
"""Bytes per activation value between kernels (bf16/fp16; FP8 GEMM inputs are quantised inside the GEMM
prologue or a fused norm, so the HBM traffic stays 16-bit at the boundaries)."""

NON_TORCH_BYTES_ONE_DEVICE = 0.25 * GIB
"""Memory outside PyTorch's allocator on an engine of one device (CUDA context, cuBLAS workspace): vLLM's own
profiling step measures it and prints it at start-up ("Memory profiling ... non_torch_memory takes 0.11-0.26 GiB"
on one H100 in vLLM 0.6-0.8 logs; vllm/worker/worker.py ``determine_num_available_blocks``), bytes."""

NON_TORCH_BYTES_MULTI_DEVICE = 1.4 * GIB
"""The same on a device of a multi-device engine, with NCCL's buffers and vLLM's custom all-reduce buffers (the
same log line reads 1.39-2.10 GiB per device with tensor parallelism), bytes."""


def kv_bytes_per_token_layer(model: ModelSpec, kv_dtype: ServingDType | str, tp: int = 1) -> float:
    """KV-cache bytes one token adds to one layer on one of ``tp`` tensor-parallel devices (see the module
    docstring): GQA/MHA ``2 * ceil(num_key_value_heads / tp) * head_dim * bytes``; MLA
    ``(kv_lora_rank + qk_rope_head_dim) * bytes`` whatever tp. Raises ValueError for tp < 1."""
    if tp < 1:
        raise ValueError(f"kv_bytes_per_token_layer: tp must be >= 1, got {tp!r}")
    width = BYTES_PER_VALUE[ServingDType(kv_dtype)]
    if model.attention is AttentionKind.MLA:
        return (model.kv_lora_rank + model.qk_rope_head_dim) * width
    return 2.0 * math.ceil(model.num_key_value_heads / tp) * model.head_dim * width


def kv_bytes_per_token(model: ModelSpec, kv_dtype: ServingDType | str, tp: int = 1) -> float:
    """KV-cache bytes of one token over all layers on one tp device (pp = 1). Llama-3.1-70B in bf16, tp=1:
    2 * 8 * 128 * 2 * 80 = 327,680 bytes."""
    return model.num_layers * kv_bytes_per_token_layer(model, kv_dtype, tp)


def layer_weight_params(model: ModelSpec, rp: ServingPlan, moe: bool) -> tuple[float, float]:
    """(parameters in weight_dtype, parameters kept 16-bit: the two norms and the router) of one layer on one
    device of the engine ``rp`` (aggregated form)."""
    m = model
    attn = m.attention_parameters() / rp.tp
    if not moe:
        return attn + m.mlp_parameters() / rp.tp, 2.0 * m.hidden_size
    routed = routed_expert_params_per_device(m, rp)  # redundant copies (EPLB) are whole experts too
    shared = m.num_shared_experts * m.mlp_parameters(m.moe_ffn_hidden_size) / rp.tp
    return attn + routed + shared, m.router_parameters() + 2.0 * m.hidden_size


def weight_bytes_per_device(model: ModelSpec, rp: ServingPlan) -> float:
    """Weight bytes on the fullest device of one engine: ceil(layers / pp) layers (MoE layers first), the 16-bit
    embedding and LM head shards (vocab split over tp; both on one device when pp = 1 and untied) and the final
    norm, less the experts held in host memory (``ServingPlan.offload_group_size``) but for those in flight,
    bytes."""
    m, wb = model, BYTES_PER_VALUE[rp.weight_dtype]
    per_stage = math.ceil(m.num_layers / rp.pp)
    n_moe = min(m.num_moe_layers, per_stage)
    total = 0.0
    for moe, count in ((True, n_moe), (False, per_stage - n_moe)):
        low, high = layer_weight_params(m, rp, moe)
        total += count * (low * wb + high * 2.0)
    table = m.vocab_size * m.hidden_size / rp.tp * 2.0
    tables = 1 if m.tied_embeddings or rp.pp > 1 else 2
    held = total + tables * table + 2.0 * m.hidden_size  # + the final norm
    # experts SGLang keeps in host memory leave the device, but for the layers in flight (workbench.serving.offload)
    return held - host_offload_bytes_per_device(m, rp) + offload_buffer_bytes_per_device(m, rp)


def activation_peak_bytes(model: ModelSpec, rp: ServingPlan, sampler_bytes_per_logit: float = 0.0) -> float:
    """Peak activation memory of the engine's start-up profile on one device, bytes.

    The forward over ``max_num_batched_tokens`` tokens, as vLLM's profiling run sees it: the residual stream and
    normed input (2 x T x h) plus the larger of the attention projections (T (q + 2 kv) / tp) and the MLP
    intermediates (gate-up output and activation, 3 T f / tp; for MoE vLLM's fused_moe caches T k (3 f / etp + h)),
    16-bit. With ``sampler_bytes_per_logit`` = 0 (an engine that profiles no sampler run) fp32 logits of
    ``max_num_seqs`` sequences (gathered on every rank) are added to it. With ``sampler_bytes_per_logit`` = b > 0
    the engine runs a dummy sampler over N = min(``max_num_seqs``, ``max_num_batched_tokens``) sequences after
    the forward has freed its intermediates (vLLM V1 ``GPUModelRunner.profile_run``: ``_dummy_run`` then
    ``_dummy_sampler_run``), so the peak is the larger of the forward's and the sampler's, b N vocab, beside the
    hidden states the forward returned (T + N rows of h, 16-bit; ``EngineProfile.profile_sampler_bytes_per_logit``
    gives b and its derivation); with attention data parallelism each rank is an engine of its own and profiles
    its share, N / attention_dp sequences."""
    m = model
    t = rp.max_num_batched_tokens / rp.attention_dp
    h = m.hidden_size
    attn = t * (m.num_attention_heads * m.qk_head_dim + 2 * m.num_key_value_heads * m.head_dim) / rp.tp
    mlp = 3.0 * t * m.ffn_hidden_size / rp.tp if m.num_layers > m.num_moe_layers else 0.0
    if m.is_moe:
        routed = rp.max_num_batched_tokens * m.experts_per_token
        mlp = max(mlp, routed * (3.0 * m.moe_ffn_hidden_size / rp.expert_tp + h))
    forward = ACT_BYTES * (2.0 * t * h + max(attn, mlp))
    seqs = min(rp.max_num_seqs, rp.max_num_batched_tokens)
    if sampler_bytes_per_logit <= 0.0:
        return forward + seqs * m.vocab_size * 4.0
    rank_seqs = math.ceil(seqs / rp.attention_dp)  # each data-parallel rank profiles its own engine's caps
    sampler = sampler_bytes_per_logit * rank_seqs * m.vocab_size + ACT_BYTES * (t + rank_seqs) * h
    return max(forward, sampler)


def bounded_kv_capacity_tokens(
    model: ModelSpec, free_bytes: float, layer_bytes: float, num_seqs: int
) -> float:
    """Tokens T whose KV cache fits in ``free_bytes`` when sliding-window and chunked layers hold at most their
    window (chunk) per sequence: the largest T with ``n_full T b + sum_g n_g min(T, S span_g) b <= free`` (S =
    ``num_seqs`` running sequences, b = ``layer_bytes`` per token and layer): a local layer never holds more
    than the tokens of the full layers, nor more than a window per sequence (vLLM's hybrid KV-cache manager frees
    the blocks that leave the window: vLLM docs, design "Hybrid KV Cache Manager"). Where every layer is local
    the pool is sized as if they were full (a token pool bounds nothing then), bytes in, tokens out."""
    groups = [
        (model.num_sliding_window_layers, model.sliding_window),
        (model.num_chunked_attention_layers, model.attention_chunk_size),
    ]
    full = model.num_layers - sum(n for n, _ in groups)
    caps = sorted((num_seqs * span, n) for n, span in groups if n)
    if full == 0:
        return free_bytes / (model.num_layers * layer_bytes)
    # piecewise linear in T: below a cap a group adds n_g b per token, above it a constant n_g S span_g b
    slope, fixed, lo = float(model.num_layers), 0.0, 0.0
    for cap, n in caps:
        if (fixed + slope * cap) * layer_bytes >= free_bytes:
            break
        slope, fixed, lo = slope - n, fixed + n * cap, cap
    return max((free_bytes / layer_bytes - fixed) / slope, lo)


def reserve_bytes(rp: ServingPlan) -> float:
    """Memory outside weights, activations and KV on one device (``NON_TORCH_BYTES_*``), bytes."""
    return NON_TORCH_BYTES_MULTI_DEVICE if rp.devices_per_engine > 1 else NON_TORCH_BYTES_ONE_DEVICE


def kv_capacity_tokens(
    model: ModelSpec,
    device: DeviceSpec,
    rp: ServingPlan,
    sampler_bytes_per_logit: float = 0.0,
    *,
    share_rule: str = "of_total",
) -> int:
    """(HBM x gpu_memory_utilization - weights - peak activation - reserve) / KV bytes per token per device,
    floored to whole blocks, times the attention-DP ranks (each keeps its own cache). vLLM's sizing
    (``determine_num_available_blocks``: total memory x utilisation - weights - non-torch - activation peak), with
    our estimates of each term (``sampler_bytes_per_logit``: see ``activation_peak_bytes``). ``share_rule`` (one of
    ``workbench.specs.engine.KV_MEMORY_SHARES``, the engine profile's ``kv_memory_share``) says what the share bounds:
    ``of_total`` as above; ``weights_and_kv`` (HBM - reserve) x share - weights, activations living outside the share
    (SGLang's ``--mem-fraction-static``: ``ModelRunner.profile_max_num_token`` takes the free memory after loading
    the weights less the free memory at start x (1 - share)); ``of_free`` (HBM - weights - activations - reserve) x
    share (TensorRT-LLM's ``--kv_cache_free_gpu_memory_fraction``: ``KvCacheCreator._cal_max_memory`` takes
    (total - peak memory of its profiling run, inside and outside torch) x fraction). Raises ValueError when not one
    block fits or for another ``share_rule``."""
    weights, acts, reserve = (
        weight_bytes_per_device(model, rp),
        activation_peak_bytes(model, rp, sampler_bytes_per_logit),
        reserve_bytes(rp),
    )
    hbm, share = device.hbm_bytes, rp.gpu_memory_utilization_frac
    if share_rule == "of_total":
        free = hbm * share - weights - acts - reserve
    elif share_rule == "weights_and_kv":
        free = (hbm - reserve) * share - weights
        acts = reserve = 0.0  # outside the share
    elif share_rule == "of_free":
        free = (hbm - weights - acts - reserve) * share
    else:
        raise ValueError(
            f"kv_capacity_tokens: share_rule must be one of {', '.join(KV_MEMORY_SHARES)}, got {share_rule!r}"
        )
    budget = free + weights + acts + reserve  # what the share gives the engine (the refusal names it)
    layer_bytes = kv_bytes_per_token_layer(model, rp.kv_cache_dtype, rp.tp)
    per_stage = math.ceil(model.num_layers / rp.pp)
    if model.num_sliding_window_layers or model.num_chunked_attention_layers:
        seqs = math.ceil(rp.max_num_seqs / rp.attention_dp)
        tokens = bounded_kv_capacity_tokens(model, free, layer_bytes * per_stage / model.num_layers, seqs)
        blocks = math.floor(tokens / rp.kv_block_tokens)
    else:
        blocks = math.floor(free / (per_stage * layer_bytes) / rp.kv_block_tokens)
    if blocks < 1:
        raise ValueError(
            f"ServingPlan {rp.describe()!r} for model {model.name!r}: the weights ({weights / GIB:.1f} GiB per "
            f"device), activations ({acts / GIB:.1f} GiB) and reserve ({reserve / GIB:.1f} GiB) leave no room for "
            f"one KV block in {budget / GIB:.1f} GiB ({device.id}, gpu_memory_utilization_frac="
            f"{rp.gpu_memory_utilization_frac:g}); use more tensor/pipeline parallelism, a narrower weight_dtype or "
            "a higher utilisation"
        )
    return blocks * rp.kv_block_tokens * rp.attention_dp
