"""The attention cores of one serving iteration: ``AttentionCost`` prices one layer's prefill and decode attention
on one device for ``ReplicaCost`` (:mod:`workbench.serving.cost`), with the fused-attention forward fractions of
the calibration's kernel tables (``Calibration.attention``).

Attention runs per sequence over its own context: prefill chunks are compute-bound causal attention over
``context + new`` keys; decode attention reads every cached K/V once (memory-bound, the KV bytes of
:mod:`workbench.serving.memory`). An engine that runs a mixed batch's prefills and decodes in one FlashAttention
varlen call (``EngineProfile.varlen_attention``, vLLM V1) prices the decodes of a mixed iteration as FA2 query
tiles (``VARLEN_TILE_ROWS``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench.presets.calibration import Calibration
from workbench.serving.memory import ACT_BYTES, kv_bytes_per_token_layer
from workbench.serving.precision import kv_precision
from workbench.specs.engine import EngineProfile
from workbench.specs.hardware import DeviceSpec, DType
from workbench.specs.limits import MAX_SEQ_LEN
from workbench.specs.model import AttentionKind, ModelSpec
from workbench.specs.serving import ServingPlan

FULL, SLIDING, CHUNKED = "full", "sliding", "chunked"
"""Attention kinds of a layer: the whole causal prefix, a sliding window, a chunk (``attention_layer_groups``)."""

SERVING_ATTENTION_KERNELS = ("fa3", "fa2")
"""Fused attention families a serving engine calls on the device, in preference order (vLLM uses FlashAttention
3 on Hopper and FlashAttention 2 elsewhere, vLLM docs "Attention backends"); the first the kernel table has."""

ATTENTION_GRID_PER_OCTAVE = 4
"""Points per doubling of the key count at which the attention efficiency is sampled (see
``AttentionCost.fwd_frac``)."""

VARLEN_TILE_ROWS = 128
"""Query rows of one FlashAttention-2 forward tile at head_dim 128 (``Flash_fwd_kernel_traits<128, 128, ...>`` in
flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h ``run_mha_fwd_hdim128``). In one varlen call over
a mixed batch a decode sequence's single query still takes a whole tile for each query head: FA2 packs the query
heads of a GQA group into one tile only when every query of the call has length 1 (``seqlenq_ngroups_swapped`` in
flash_api.cpp ``mha_varlen_fwd``). LLMServingSim's vLLM 0.19 microbenchmarks show that cost (casys-kaist/
LLMServingSim@5daddb2 profiler/perf/*/attention.csv): 128 decodes over 1024 cached tokens beside a 1024-token chunk
take 764 us (Llama-3.1-8B, 8 KV heads) and 725 us (Qwen3, 4 KV heads) instead of 405 / 230 us alone on an RTX PRO
6000, 1.55 ms instead of 0.61 ms on an RTX 4090: the time follows query heads x keys, not the KV bytes; this tile
count prices those points within -12..+39% (1024, 4096 and 256 keys, both cards)."""


MLA_DECODE_FLOP_PER_S: dict[str, float] = {
    "h100-sxm5-80gb": 660e12,
    "h100-sxm5-96gb": 660e12,
    "h800-sxm5-80gb": 660e12,
    "h200-sxm-141gb": 660e12,
    "b200-sxm-180gb": 700e12,
    "gb200": 700e12,
    "gb300": 700e12,
}
"""Achieved FLOP/s of the absorbed-MLA decode kernel (MQA form, 576-wide keys, 512-wide values) by device, where a
kernel benchmark is published: Hopper, FlashMLA's dense decoding kernel at "660 TFLOPS in computation-bound
configuration on H800 SXM5" (deepseek-ai/FlashMLA README, 2025-04 kernel; the H100/H200 share the H800's SMs and
clocks); Blackwell, FlashMLA's "up to 700 TFlops on B200" for its token-level sparse MLA decoding kernel (FP8 KV
cache, BF16 MMA; ASSUMPTION: the only published Blackwell MLA decode figure, taken for dense decoding too).
``decode_layer_s`` prices MLA decode FLOPs at this rate instead of the prefill kernel table's fraction (a
different kernel: FlashAttention over 192-wide heads). The rate serves every engine's Hopper MLA decode kernel:
SGLang's default there is FA3's MLA path, not FlashMLA (docs/serving.md, ``SGLM-*``), whose only published gap to
FlashMLA is with variable-length batches (Dao-AILab/flash-attention PR #1770); no published timing sets it apart
at equal lengths."""


class AttentionCost:
    """Attention cores of one layer on one device of an engine of ``role_plan`` (the aggregated form of one role)
    serving ``model`` on ``device`` with the serving ``engine``: FLOPs at the 16-bit peak times the kernel
    table's forward fraction of the first of ``families`` it has, bytes at ``hbm_bytes_per_s`` (the achieved HBM
    bandwidth); attention-DP ranks take equal shares of the batch. Every number is fixed at construction.

    Raises ValueError when the device has no bf16 peak.
    """

    __slots__ = ("_adp", "_bw", "_dims", "_grid_frac", "_kv_layer", "_mla_frac", "_peak", "_tile_frac")

    def __init__(
        self,
        model: ModelSpec,
        device: DeviceSpec,
        role_plan: ServingPlan,
        calibration: Calibration,
        engine: EngineProfile,
        *,
        hbm_bytes_per_s: float,
        families: tuple[str, ...] = SERVING_ATTENTION_KERNELS,
    ) -> None:
        self._peak = device.peak(DType.BF16)
        self._bw = hbm_bytes_per_s
        self._adp = role_plan.attention_dp
        self._kv_layer = kv_bytes_per_token_layer(model, role_plan.kv_cache_dtype, role_plan.tp)
        self._dims = _attention_dims(model, role_plan.tp)
        grid = (
            np.arange(0.0, math.log2(MAX_SEQ_LEN) * ATTENTION_GRID_PER_OCTAVE + 1.0)
            / ATTENTION_GRID_PER_OCTAVE
        )
        fwd, _ = calibration.attention(device, dtype="bf16", seq_len=2.0**grid, head_dim=model.qk_head_dim,
                                       families=families)  # fmt: skip
        self._grid_frac = np.broadcast_to(np.asarray(fwd, dtype=float), grid.shape).tolist()
        varlen = kv_precision(engine, device, role_plan.kv_cache_dtype).varlen_decodes
        self._tile_frac = (
            self._varlen_tile_frac(model, device, calibration, engine, families) if varlen else None
        )
        rate = MLA_DECODE_FLOP_PER_S.get(device.id) if model.attention is AttentionKind.MLA else None
        self._mla_frac = None if rate is None else min(1.0, rate / self._peak)

    @property
    def tile_frac(self) -> float | None:
        """The forward fraction a decode query tile runs at inside one FlashAttention-2 varlen call shared with
        prefills, or None where the engine, model or device does not run one (``_varlen_tile_frac``)."""
        return self._tile_frac

    def fwd_frac(self, seq_len: float) -> float:
        """The fused-attention forward fraction at ``seq_len`` keys, from a log2 grid (``ATTENTION_GRID_PER_OCTAVE``
        points per octave, 1 to ``MAX_SEQ_LEN`` keys) of ``Calibration.attention`` laid down at construction:
        exact where the kernel table's lengths are powers of two (the published tables' are), linear in
        log(seq_len) between them."""
        x = math.log2(max(seq_len, 1.0)) * ATTENTION_GRID_PER_OCTAVE
        i = min(int(x), len(self._grid_frac) - 2)
        lo, hi = self._grid_frac[i], self._grid_frac[i + 1]
        return float(lo + (min(x, i + 1.0) - i) * (hi - lo))

    def prefill_layer_s(self, new: np.ndarray, ctx: np.ndarray, kind: str = FULL, span: int = 0) -> float:
        """Prefill attention of one layer on one device (batch split evenly over the attention-DP ranks), seconds.
        Chunk of n new tokens on c cached (a loop: an iteration holds few chunks): causal FLOPs 2 n (c + (n+1)/2)
        H (d_qk + d_v) (the kernel table's convention: 2 s^2 d H for a whole causal prompt, FA2/FA3 papers) at the
        table's forward fraction for c + n keys; bytes: the chunks' q and output plus the c + n cached K/V read
        once. One varlen kernel: max(sum of compute times, sum of bytes / HBM). A sliding-window or chunked
        layer (``kind``, ``span``: window or chunk tokens) counts only the keys each query sees
        (:func:`attended_keys`) and reads only the K/V of those keys."""
        heads, dqk, dv, _ = self._dims
        compute = moved = 0.0
        for n, c in zip(new.tolist(), ctx.tolist(), strict=True):
            if kind == FULL:
                keys, span_keys = n * (c + (n + 1) / 2.0), c + n
            else:
                keys = float(attended_keys(c + n, kind, span) - attended_keys(c, kind, span))
                span_keys = min(c + n, span + n) if kind == SLIDING else min(c + n, c % span + n)
            compute += 2.0 * keys / self.fwd_frac(span_keys)
            moved += ACT_BYTES * n * heads * (dqk + dv) + span_keys * self._kv_layer
        compute *= heads * (dqk + dv) / self._peak
        return max(compute, moved / self._bw) / self._adp

    def decode_layer_s(self, num_seqs: int, cached_tokens: float, queries_per_seq: int = 1) -> float:
        """Decode attention of one layer on one device over ``num_seqs`` sequences holding ``cached_tokens`` in
        all, each with ``queries_per_seq`` query positions (1; k + 1 when speculative decoding verifies k draft
        tokens), seconds: 2 q c H (d_qk + d_v) FLOPs (MLA absorbed: 2 q c H (2 r_kv + d_rope)) at the table's
        fraction for the mean context (MLA: the rate of ``MLA_DECODE_FLOP_PER_S`` where the device has one), and
        every cached K/V read once (the query positions of a sequence share one
        pass over its cache, as FlashInfer's and FlashMLA's multi-token decode kernels do); one kernel:
        max(compute, bytes / HBM)."""
        heads, dqk, dv, width = self._dims
        frac = self._mla_frac or self.fwd_frac(cached_tokens / num_seqs)
        compute = 2.0 * queries_per_seq * cached_tokens * heads * width / (self._peak * frac)
        queries = num_seqs * queries_per_seq
        moved = cached_tokens * self._kv_layer + ACT_BYTES * queries * heads * (dqk + dv)
        return max(compute, moved / self._bw) / self._adp

    def varlen_decode_layer_s(self, num_seqs: int, cached_tokens: float) -> float:
        """Decode attention of one layer inside a mixed FlashAttention-2 varlen call (``VARLEN_TILE_ROWS``),
        seconds: each sequence and local query head computes a full tile over its keys, 2 x rows x keys x
        (d_qk + d_v) FLOPs, at ``tile_frac`` of the 16-bit peak; never less than the decode kernel alone
        (``decode_layer_s``), which it is when ``tile_frac`` is None."""
        heads, dqk, dv, _ = self._dims
        alone = self.decode_layer_s(num_seqs, cached_tokens)
        if self._tile_frac is None:
            return alone
        flop = 2.0 * VARLEN_TILE_ROWS * cached_tokens * heads * (dqk + dv)
        return max(alone, flop / (self._peak * self._tile_frac) / self._adp)

    def _varlen_tile_frac(
        self,
        model: ModelSpec,
        device: DeviceSpec,
        calibration: Calibration,
        engine: EngineProfile,
        families: tuple[str, ...],
    ) -> float | None:
        """The forward fraction a decode query tile runs at when the engine shares one FlashAttention-2 varlen
        call between prefills and decodes (``EngineProfile.varlen_attention``): the kernel table's fraction at its
        longest sequence (every SM busy, as with one tile per decode sequence and query head). None when the engine
        does not, the model uses MLA, the device has no kernel table, or its serving kernel is not FA2. vLLM V1 runs
        FA2 on Ampere, Ada and workstation Blackwell, FA3 on Hopper (its varlen kernel packs GQA heads) and
        FlashInfer on datacenter Blackwell (decodes in their own kernel); the tables tell them apart: FA3 and cuDNN
        fused-attention tables exist only for the Hopper and datacenter-Blackwell parts. Not called (None) when
        the KV cache sends the engine to a backend with its own decode kernel (``KvPrecision.varlen_decodes``:
        vLLM's fp8 KV cache off Hopper, FlashInfer or V0's XFormers)."""
        table = calibration.table(device)
        if not engine.varlen_attention or model.attention is AttentionKind.MLA or table is None:
            return None
        if any(t.family in ("fa3", "cudnn") for t in table.attention):
            return None
        hit = table.attention_fracs(families, dtype="bf16", head_dim=model.qk_head_dim, causal=True,
                                    seq_len=1.0)  # fmt: skip
        return self._grid_frac[-1] if hit is not None and hit[0] == "fa2" else None


def attention_layer_groups(model: ModelSpec) -> tuple[tuple[int, str, int], ...]:
    """(layers, kind, span) of each attention kind the model has: ``full`` (span 0), ``sliding`` (span: the
    window, ``ModelSpec.sliding_window``) and ``chunked`` (span: the chunk, ``attention_chunk_size``)."""
    full = model.num_layers - model.num_sliding_window_layers - model.num_chunked_attention_layers
    groups = [(full, FULL, 0), (model.num_sliding_window_layers, SLIDING, model.sliding_window)]
    groups.append((model.num_chunked_attention_layers, CHUNKED, model.attention_chunk_size))
    return tuple(g for g in groups if g[0] > 0)


def attended_keys(positions: Any, kind: str, span: int) -> Any:
    """Keys attended by the queries at positions 1..P together (elementwise over ``positions`` P): P (P+1)/2
    causal; with a window of w keys, sum of min(p, w); in chunks of C tokens, sum of ((p - 1) mod C) + 1 (query p
    sees its own chunk up to itself: Llama 4's chunked attention)."""
    p = np.asarray(positions, dtype=float)
    if kind == SLIDING:
        w = float(span)
        return np.where(p <= w, p * (p + 1) / 2, w * (w + 1) / 2 + (p - w) * w)
    if kind == CHUNKED:
        q, r = np.divmod(p, float(span))
        return q * span * (span + 1) / 2 + r * (r + 1) / 2
    return p * (p + 1) / 2


def held_keys(context: Any, kind: str, span: int) -> Any:
    """Keys the next query of a sequence with ``context`` tokens attends to (and the K/V a decode reads): all of
    them, the last ``span`` (window), or those of its chunk so far, ((context - 1) mod span) + 1."""
    c = np.asarray(context)
    if kind == SLIDING:
        return np.minimum(c, span)
    if kind == CHUNKED:
        return (c - 1) % span + 1
    return c


def _attention_dims(model: ModelSpec, tp: int) -> tuple[float, int, int, int]:
    """(query heads per tp rank, d_qk, d_v, decode width: d_qk + d_v, or 2 r_kv + d_rope for absorbed MLA)."""
    width = model.qk_head_dim + model.value_head_dim
    if model.attention is AttentionKind.MLA:
        width = 2 * model.kv_lora_rank + model.qk_rope_head_dim
    return model.num_attention_heads / tp, model.qk_head_dim, model.value_head_dim, width
