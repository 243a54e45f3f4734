"""Per-iteration cost of a serving engine: the ``IterationCost`` interface and ``ReplicaCost``, its analytic form.

One *iteration* is one forward pass of an engine over a mixed batch: some prefill chunks (new tokens on top of
tokens already cached) and some decode sequences (one new token each). ``ReplicaCost`` prices it with the cost
primitives of training: the roofline and GEMM efficiency of :mod:`workbench.cost.flops`, the kernel tables of the
calibration (GEMM curve per dtype, fused-attention forward fraction, achieved HBM share) and NCCL's collective
model of :mod:`workbench.cost.comm`, in two parts: everything but the attention cores
(:mod:`workbench.serving.cost_layers`: weight and activation widths, MoE experts touched, kernel floors,
collectives) and the attention cores (:mod:`workbench.serving.cost_attention`). KV bytes per token, weights, the
activation peak and the KV capacity per device are in :mod:`workbench.serving.memory` (re-exported here).

Engine execution (:class:`~workbench.specs.engine.EngineProfile`, named by ``ServingPlan.engine``): an iteration
costs its GPU time plus the engine's exposed host time per iteration (``step_overhead_s``), and no less than the
host work of its requests (``host_per_request_s``; per stage but the last where ``pp_host_serial``); every kernel
takes at least ``MIN_KERNEL_S``; an eager iteration (vLLM V0 prefills) at least its kernels x ``eager_kernel_s``
(CPU launches), by which it delays the previous iteration's tokens under async output (``eager_emit_delay_s``).

Layout (``shared/validation/README.md``): the engine has ``attention_dp`` attention ranks of ``tp`` devices and
``pp`` stages. Attention-DP ranks are assumed to carry equal shares of the batch (tokens and KV), except where
each rank schedules its own requests (``EngineProfile.dp_rank_batches``, an MoE model): a prompt's chunk then runs
on one rank and the lockstep ranks wait for the one holding the most prefill tokens (``heaviest_rank_chunks``). MoE experts
are spread over all ``tp * attention_dp`` devices of a stage (``ep`` groups of ``tp*attention_dp/ep``).
Pipeline: one iteration's batch passes the stages in turn, so its latency is the sum of the stage times (= the
per-layer costs summed over all layers) plus ``pp - 1`` activation hand-offs (``p2p_s``); engines keep up to
``pp`` batches in flight to fill the pipeline, which the request simulator models as ``pp`` virtual engines
(``simulate(..., pipeline_depth=pp)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, runtime_checkable

import numpy as np

from workbench.cost.comm import p2p_s
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_model
from workbench.presets.engines import load_engine
from workbench.serving.cost_attention import (
    ATTENTION_GRID_PER_OCTAVE,
    FULL,
    SERVING_ATTENTION_KERNELS,
    VARLEN_TILE_ROWS,
    AttentionCost,
    attention_layer_groups,
    held_keys,
)
from workbench.serving.cost_layers import (
    MIN_KERNEL_S,
    MOE_PERMUTE_PASSES,
    LayerCost,
    expected_experts_touched,
)
from workbench.serving.cost_speculative import DraftCost
from workbench.serving.dp_ranks import heaviest_rank_chunks
from workbench.serving.memory import (
    ACT_BYTES,
    GIB,
    NON_TORCH_BYTES_MULTI_DEVICE,
    NON_TORCH_BYTES_ONE_DEVICE,
    activation_peak_bytes,
    kv_bytes_per_token,
    kv_bytes_per_token_layer,
    kv_capacity_tokens,
    reserve_bytes,
    weight_bytes_per_device,
)
from workbench.serving.offload import HostOffload
from workbench.serving.precision import GemmPrecision, KvPrecision, gemm_precision, kv_precision
from workbench.specs.engine import EngineProfile
from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import AttentionKind, ModelSpec
from workbench.specs.serving import ROLES, ServingPlan

__all__ = [
    "ACT_BYTES",
    "ATTENTION_GRID_PER_OCTAVE",
    "ENGINE_STEP_OVERHEAD_S",
    "GIB",
    "MAX_TABLE_TOKENS",
    "MIN_KERNEL_S",
    "MOE_PERMUTE_PASSES",
    "NON_TORCH_BYTES_MULTI_DEVICE",
    "NON_TORCH_BYTES_ONE_DEVICE",
    "SERVING_ATTENTION_KERNELS",
    "VARLEN_TILE_ROWS",
    "AttentionCost",
    "IterationCost",
    "LayerCost",
    "ReplicaCost",
    "expected_experts_touched",
    "heaviest_rank_chunks",
    "kv_bytes_per_token",
    "kv_bytes_per_token_layer",
]

ENGINE_STEP_OVERHEAD_S = 1.0e-3
"""The ``generic`` engine profile's host time per iteration, seconds (``profiles/engines/generic.toml`` gives its
source); each engine profile states its own (``EngineProfile.step_overhead_s``)."""

MAX_TABLE_TOKENS = 2**16
"""Largest token count whose token-dependent costs are tabulated at construction (an iteration above it, e.g. a
whole long prompt without chunking, is priced directly, about a millisecond each)."""


@runtime_checkable
class IterationCost(Protocol):
    """What the request simulator needs from a cost model of one serving engine (one role).

    Units: seconds, tokens. Arrays are 1-D integer arrays (any length, including 0), one entry per sequence.
    """

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens one engine can hold (a whole number of ``kv_block_tokens`` blocks)."""
        ...

    @property
    def kv_block_tokens(self) -> int:
        """Tokens per KV block (vLLM PagedAttention block size); admission counts whole blocks."""
        ...

    def iteration_s(
        self,
        prefill_new_tokens: np.ndarray,
        prefill_context_tokens: np.ndarray,
        decode_context_tokens: np.ndarray,
    ) -> float:
        """Seconds of one engine iteration (one forward pass) over a mixed batch.

        prefill_new_tokens[i]: tokens of prefill chunk i computed in this iteration (>= 1);
        prefill_context_tokens[i]: tokens of that sequence already in the KV cache before the chunk (>= 0);
        same length as prefill_new_tokens. decode_context_tokens[j]: KV length of decode sequence j, which
        produces one token this iteration (>= 1). An empty batch costs 0.0.
        """
        ...

    def kv_transfer_s(self, tokens: int) -> float:
        """Seconds to move one request's KV cache of ``tokens`` tokens from a prefill to a decode engine
        (disaggregated serving); 0.0 when the plan is not disaggregated."""
        ...


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"ReplicaCost: role must be one of {', '.join(ROLES)}; got {role!r}")


class ReplicaCost:
    """Analytic per-iteration cost of one engine of ``role`` (``both``, ``prefill`` or ``decode``) of ``plan``
    serving ``model`` on ``cluster``, priced with ``calibration``'s kernel tables (only the tables and the
    framework's ``collective_efficiency_frac``: the training-fitted framework constants are not applied) and the
    serving engine profile ``engine`` (``step_overhead_s`` overrides its host time per iteration, and then drops
    its host time per request, ``EngineProfile.host_per_request_s``: a draft model has none of its own). Satisfies
    :class:`IterationCost`. Every number is fixed at construction; the constructor reads no file:
    :meth:`ReplicaCost.of` loads the presets a plan names (its engine profile, its draft model) and builds it.

    Raises ValueError naming the plan when the model cannot be laid out so (tp not dividing the attention heads,
    ep on a dense model or not dividing the experts, pp above the layer count, a dtype the device has no peak
    for), when the weights, activations and reserve leave no room for one KV block, or for an unknown engine
    profile (listing the known ones).
    """

    __slots__ = (
        "_attention", "_cal", "_capacity", "_cluster", "_draft", "_eager_floor_s", "_engine", "_graph_sizes",
        "_layers", "_layer_groups", "_logits_table", "_prefill_table", "_verify",
        "_host_per_request_s", "_model", "_plan", "_role", "_role_plan", "_step_overhead_s", "_tokens_table",
        "_dp_ranks", "_frontend_per_request_s", "_offload", "_kv_precision",
    )  # fmt: skip

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        plan: ServingPlan,
        calibration: Calibration,
        role: str = "both",
        *,
        engine: EngineProfile,
        draft: ReplicaCost | None = None,
        attention_kernels: tuple[str, ...] = SERVING_ATTENTION_KERNELS,
        step_overhead_s: float | None = None,
    ) -> None:
        _check_role(role)
        self._model, self._cluster, self._plan, self._cal, self._role = (
            model,
            cluster,
            plan,
            calibration,
            role,
        )
        rp = self._role_plan = plan.role_plan(role)
        self._check_layout(rp, engine)
        self._engine = engine
        # attention-DP ranks that schedule their own requests and run in lockstep (1: the batch is split evenly)
        lockstep = engine.dp_rank_batches and model.is_moe
        self._dp_ranks = rp.attention_dp if lockstep else 1
        overhead = self._engine.step_overhead_s if step_overhead_s is None else step_overhead_s
        self._step_overhead_s = float(overhead)
        self._host_per_request_s = self._engine.host_per_request_s if step_overhead_s is None else 0.0
        self._frontend_per_request_s = (
            self._engine.frontend_host_per_request_s if step_overhead_s is None else 0.0
        )
        bw = calibration.device(cluster.device).hbm_efficiency_frac * cluster.device.hbm_bytes_per_s
        self._layers = LayerCost(model, cluster, rp, calibration, self._engine, hbm_bytes_per_s=bw)
        self._layer_groups = attention_layer_groups(model)
        self._attention = AttentionCost(model, cluster.device, rp, calibration, self._engine, hbm_bytes_per_s=bw,
                                        families=attention_kernels)  # fmt: skip
        self._eager_floor_s = self._layers.eager_floor_s()
        self._offload = HostOffload.of(model, cluster, rp)  # experts held in host memory (None: off)
        self._capacity = kv_capacity_tokens(model, cluster.device, rp, engine.profile_sampler_bytes_per_logit,
                                            share_rule=engine.kv_memory_share)  # fmt: skip
        self._draft: DraftCost | None = None
        self._verify = 1  # positions the target computes per decode sequence and iteration
        if rp.speculative is not None:
            self._draft = DraftCost(model, rp, (self._layers, self._attention), draft)
            self._verify = rp.speculative.verify_tokens
            self._capacity = self._draft.kv_capacity_tokens(
                self._capacity, rp.kv_block_tokens, rp.max_num_seqs
            )
        # the CUDA-graph sizes one attention rank pads a decode batch to (none: the engine does not pad)
        per_rank = -(-min(rp.max_num_seqs, rp.max_num_batched_tokens) // rp.attention_dp)
        self._graph_sizes = self._engine.kept_graph_sizes(per_rank)
        # Everything but the attention cores depends only on the iteration's token count T and its number of
        # logit positions N; both are tabulated here (the cost functions broadcast over arrays), so one iteration
        # costs two look-ups and the attention sums.
        positions = rp.max_num_seqs * self._verify
        size = min(max(rp.max_num_batched_tokens, positions), MAX_TABLE_TOKENS) + 1
        self._tokens_table = self._layers.by_tokens_s(np.arange(size, dtype=float))
        self._prefill_table = self._tokens_table  # iterations with prefill tokens: the same, unless DeepEP's
        if self._engine.moe_dispatch == "deepep" and model.is_moe and rp.attention_dp > 1:  # normal kernels
            t = np.arange(size, dtype=float)  # only the MoE layers' dispatch and combine differ
            normal = self._layers.layer_comm_s(True, t, prefill=True) - self._layers.layer_comm_s(True, t)
            self._prefill_table = self._tokens_table + model.num_moe_layers * np.where(t > 0, normal, 0.0)
        self._logits_table = self._layers.by_logits_s(
            np.arange(min(positions, MAX_TABLE_TOKENS) + 1, dtype=float)
        )

    @classmethod
    def of(
        cls,
        model: ModelSpec,
        cluster: ClusterSpec,
        plan: ServingPlan,
        calibration: Calibration,
        role: str = "both",
        *,
        engine: EngineProfile | str | None = None,
        attention_kernels: tuple[str, ...] = SERVING_ATTENTION_KERNELS,
        step_overhead_s: float | None = None,
    ) -> ReplicaCost:
        """A ``ReplicaCost`` with the presets its plan names loaded: the engine profile (``engine``, a profile or
        an id or TOML path, else the one ``plan.engine`` names, from ``profiles/engines/``, cached) and, for
        speculative decoding with a separate draft model, that model (priced as its own ``ReplicaCost`` on the
        same engine layout, no host time of its own). Raises ValueError as the constructor does, and for an
        unknown engine profile (listing the known ones) or draft model."""
        _check_role(role)
        rp = plan.role_plan(role)
        draft = None
        if rp.speculative is not None and rp.speculative.draft_model is not None:
            layout = replace(rp, speculative=None, num_redundant_experts=0, ep=None)
            draft = cls.of(
                load_model(rp.speculative.draft_model), cluster, layout, calibration, step_overhead_s=0.0
            )
        return cls(
            model, cluster, plan, calibration, role, engine=load_engine(rp.engine if engine is None else engine),
            draft=draft, attention_kernels=attention_kernels, step_overhead_s=step_overhead_s,
        )  # fmt: skip

    # ---- plan checks ---------------------------------------------------------------------------------------
    def _check_layout(self, rp: ServingPlan, engine: EngineProfile) -> None:
        m = self._model
        where = f"ServingPlan {rp.describe()!r} for model {self._model.name!r}"
        problems = []
        if m.num_attention_heads % rp.tp:
            problems.append(f"tp={rp.tp} must divide num_attention_heads={m.num_attention_heads}")
        kv = m.num_key_value_heads
        if m.attention is not AttentionKind.MLA and kv % rp.tp and rp.tp % kv:
            problems.append(f"tp={rp.tp} and num_key_value_heads={kv} must divide one another")
        if rp.pp > m.num_layers:
            problems.append(f"pp={rp.pp} exceeds num_layers={m.num_layers}")
        if rp.ep is not None and rp.ep > 1 and not m.is_moe:
            problems.append(f"ep={rp.ep} needs an MoE model ({m.name} is dense)")
        physical = m.num_experts + rp.num_redundant_experts
        if m.is_moe and physical % rp.expert_parallel:
            problems.append(
                f"ep={rp.expert_parallel} must divide num_experts + num_redundant_experts = {physical}"
            )
        if rp.num_redundant_experts and not m.is_moe:
            problems.append(f"num_redundant_experts={rp.num_redundant_experts} needs an MoE model")
        if problems:
            raise ValueError(f"{where}: " + "; ".join(problems))
        try:
            gemm_precision(engine, self._cluster.device, rp.weight_dtype, rp.activation_dtype, moe=m.is_moe)
            self._kv_precision = kv_precision(engine, self._cluster.device, rp.kv_cache_dtype)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    # ---- memory --------------------------------------------------------------------------------------------
    def weight_bytes_per_device(self) -> float:
        """Weight bytes on the fullest device of one engine (``workbench.serving.memory``), bytes."""
        return weight_bytes_per_device(self._model, self._role_plan)

    def activation_peak_bytes(self) -> float:
        """Peak activation memory of the engine's start-up profile on one device (the forward, and the dummy
        sampler run where the engine profiles one: ``workbench.serving.memory``), bytes."""
        return activation_peak_bytes(
            self._model, self._role_plan, self._engine.profile_sampler_bytes_per_logit
        )

    def reserve_bytes(self) -> float:
        """Memory outside weights, activations and KV on one device (``workbench.serving.memory``), bytes."""
        return reserve_bytes(self._role_plan)

    def kv_bytes_per_token_per_device(self) -> float:
        """KV bytes one token takes on the fullest device: ceil(layers / pp) x the per-layer bytes on a tp rank."""
        rp = self._role_plan
        layer = kv_bytes_per_token_layer(self._model, rp.kv_cache_dtype, rp.tp)
        return math.ceil(self._model.num_layers / rp.pp) * layer

    @property
    def kv_capacity_tokens(self) -> int:
        """KV tokens one engine holds (all its attention-DP ranks together), whole blocks."""
        return self._capacity

    @property
    def kv_block_tokens(self) -> int:
        return self._role_plan.kv_block_tokens

    @property
    def precision(self) -> GemmPrecision:
        """How the main GEMMs run (``workbench.serving.precision.gemm_precision``: as-is or weight-only)."""
        return self._layers.precision

    @property
    def kv_precision(self) -> KvPrecision:
        """How the KV cache is stored and read (``workbench.serving.precision.kv_precision``)."""
        return self._kv_precision

    @property
    def plan(self) -> ServingPlan:
        """The plan of one engine of this role (the aggregated form)."""
        return self._role_plan

    @property
    def emit_delay_s(self) -> float:
        """Seconds from an iteration's end until its tokens reach the client: the next iteration's host time when
        the engine processes outputs asynchronously (``EngineProfile.async_output``), else 0."""
        return self._step_overhead_s if self._engine.async_output else 0.0

    @property
    def eager_emit_delay_s(self) -> float:
        """CPU seconds of the eager launch of a next iteration with prefill tokens, which delays this one's tokens
        under asynchronous output processing (vLLM 0.6 V0: module docstring, ``simulate``); else 0.0."""
        e = self._engine
        return self._eager_floor_s if e.async_output and not e.mixed_cuda_graphs else 0.0

    @property
    def max_chunk_tokens(self) -> int:
        """Most new tokens one request's prefill chunk may take in an iteration: the plan's
        ``max_num_batched_tokens``, or, where each attention-DP rank schedules its own requests
        (``EngineProfile.dp_rank_batches`` on an MoE model), one rank's budget, ``max_num_batched_tokens`` /
        ``attention_dp`` (at least 1)."""
        rp = self._role_plan
        return max(1, rp.max_num_batched_tokens // self._dp_ranks)

    @property
    def engine(self) -> EngineProfile:
        """The serving engine profile the iterations are priced with (its KV admission and chunking rules are
        the simulator's to apply)."""
        return self._engine

    @property
    def layers(self) -> LayerCost:
        """The part of an iteration outside the attention cores (:mod:`workbench.serving.cost_layers`)."""
        return self._layers

    @property
    def attention(self) -> AttentionCost:
        """The attention cores of one layer (:mod:`workbench.serving.cost_attention`)."""
        return self._attention

    # ---- time ----------------------------------------------------------------------------------------------
    @staticmethod
    def _table_lookup(table: np.ndarray, count: int, build: Callable[[np.ndarray], np.ndarray]) -> float:
        if count < table.size:
            return float(table[count])
        return float(build(np.array([float(count)]))[0])

    def iteration_s(
        self,
        prefill_new_tokens: np.ndarray,
        prefill_context_tokens: np.ndarray,
        decode_context_tokens: np.ndarray,
    ) -> float:
        """Seconds of one iteration (see :class:`IterationCost`): all layers in turn (pp stages summed), both
        ends, pp hand-offs, at least the CPU's launch time (kernels x ``eager_kernel_s``) when the engine launches
        the iteration eagerly, no shorter than the host work of its requests (``EngineProfile.host_per_request_s``;
        under pipeline parallelism with ``pp_host_serial`` that work is added once per stage but the last), the engine's
        ``step_overhead_s``, and its in-process API server's time per request (``frontend_host_per_request_s``,
        serial). A decode-only iteration runs at the engine's padded CUDA-graph batch
        (``EngineProfile.padded_decode_batch``). Attention-DP ranks take equal shares of the batch; the decodes of a mixed iteration share the prefills' varlen attention call where the engine runs
        one (``AttentionCost.varlen_decode_layer_s``). Raises ValueError when the two prefill arrays differ in
        length or hold a negative (or zero new) count."""
        return self._iteration_s(
            prefill_new_tokens, prefill_context_tokens, decode_context_tokens, offload=True
        )

    def _iteration_s(
        self,
        prefill_new_tokens: np.ndarray,
        prefill_context_tokens: np.ndarray,
        decode_context_tokens: np.ndarray,
        *,
        offload: bool,
    ) -> float:
        """:meth:`iteration_s`, with the wait for host-held experts' copies (``offload``) or without it."""
        new = np.asarray(prefill_new_tokens).ravel()
        ctx = np.asarray(prefill_context_tokens).ravel()
        dec = np.asarray(decode_context_tokens).ravel()
        n_pre, n_dec = new.size, dec.size
        requests = n_pre + n_dec  # before CUDA-graph padding: the host loops over real requests only
        if n_pre != ctx.size:
            raise ValueError(
                f"iteration_s: prefill_new_tokens ({n_pre}) and prefill_context_tokens ({ctx.size}) must have "
                "one entry per prefill chunk each"
            )
        if (n_pre and min(new.min(), ctx.min() + 1) < 1) or (n_dec and dec.min() < 1):
            raise ValueError(
                "iteration_s: new tokens and decode contexts must be >= 1, prefill contexts >= 0"
            )
        cached = float(dec.sum()) if n_dec else 0.0
        if n_pre and self._dp_ranks > 1:  # every lockstep rank lasts as long as the one with most prefill
            new, ctx = heaviest_rank_chunks(new, ctx, self._dp_ranks)
            n_pre = new.size
        if n_dec and not n_pre and self._graph_sizes:
            # a padded CUDA graph per attention rank: dummy sequences with a one-token cache fill its batch
            ranks = self._role_plan.attention_dp
            padded = ranks * self._engine.padded_decode_batch(-(-n_dec // ranks), self._graph_sizes)
            cached += padded - n_dec
            n_dec = padded
        q = self._verify
        prefill_tokens = int(new.sum()) if n_pre else 0
        tokens = prefill_tokens + n_dec * q
        if tokens == 0:
            return 0.0
        attention = draft = 0.0
        a = self._attention
        for count, kind, span in self._layer_groups:  # full, sliding-window, chunked layers
            one = 0.0
            if n_pre:
                one += max(a.prefill_layer_s(new, ctx, kind, span), MIN_KERNEL_S)
            if n_dec:
                keys = (
                    cached if kind == FULL else cached - float(dec.sum() - held_keys(dec, kind, span).sum())
                )
                if q > 1:  # speculative decoding: the k + 1 positions of every sequence verified in one pass
                    one += max(a.decode_layer_s(n_dec, keys, q), MIN_KERNEL_S)
                else:
                    decode = a.varlen_decode_layer_s if n_pre else a.decode_layer_s
                    one += max(decode(n_dec, keys), MIN_KERNEL_S)
            attention += count * one
        if n_dec and q > 1 and self._draft is not None:
            draft = self._draft.draft_s(n_dec, cached)
        if n_pre and self._prefill_table is not self._tokens_table:
            layers = self._table_lookup(self._prefill_table, tokens,
                                        lambda t: self._layers.by_tokens_s(t, prefill=True))  # fmt: skip
        else:
            layers = self._table_lookup(self._tokens_table, tokens, self._layers.by_tokens_s)
        heads = self._table_lookup(self._logits_table, n_pre + n_dec * q, self._layers.by_logits_s)
        gpu = layers + heads + attention + draft
        if offload and self._offload is not None:  # the host-held experts' copies the layers do not hide
            gpu += self._offload.wait_s(layers + attention)
        if not self._engine.graph_launched(prefill_tokens, n_dec):
            gpu = max(gpu, self._eager_floor_s)
        return (
            self._with_host_s(gpu, requests) + self._step_overhead_s + self._frontend_per_request_s * requests
        )

    def _with_host_s(self, gpu_s: float, requests: int) -> float:
        """An iteration's GPU time with the host work of its ``requests`` (``EngineProfile.host_per_request_s``):
        beside the GPU (max of the two), or, where the engine runs it after each pipeline stage's forward
        (``pp_host_serial``), once per stage but the last on top of the forward (the last stage samples
        asynchronously and overlaps its host work with its next micro-batch)."""
        host = self._host_per_request_s * requests
        pp = self._role_plan.pp
        if self._engine.pp_host_serial and pp > 1:
            return gpu_s + (pp - 1) * host
        return max(gpu_s, host)

    def pipeline_depth(self, num_seqs: int, context_tokens: int) -> int:
        """Batches the engine's pipeline keeps busy at a decode batch of ``num_seqs`` sequences of
        ``context_tokens`` KV tokens: pp when its stages take equal time; with an uneven split (the last stage
        carries the LM head, the first the embedding) the slowest stage paces the pipeline, so pp batches of
        whole-forward iterations would run faster than it can: floor(sum of stage times / slowest stage),
        1..pp (``LayerCost.stage_s``). 1 without pipeline parallelism."""
        rp = self._role_plan
        if rp.pp == 1:
            return 1
        batch = max(1, num_seqs)
        attention = self._attention.decode_layer_s(batch, batch * max(1, context_tokens))
        stages = self._layers.stage_s(float(batch), attention)
        return max(1, min(rp.pp, math.floor(sum(stages) / max(stages) + 1e-9)))

    # ---- conveniences --------------------------------------------------------------------------------------
    def prefill_s(self, input_tokens: int) -> float:
        """Seconds to prefill one prompt alone: one iteration, or with chunked prefill (the plan's scheduler unless
        the engine profile says) consecutive chunks of ``max_num_batched_tokens`` each on top of the previous ones."""
        if input_tokens < 1:
            raise ValueError(f"prefill_s: input_tokens must be >= 1, got {input_tokens!r}")
        rp = self._role_plan
        chunked = rp.chunked_prefill if self._engine.chunked_prefill is None else self._engine.chunked_prefill
        chunk = self.max_chunk_tokens if chunked else input_tokens
        total, done = 0.0, 0
        while done < input_tokens:
            n = min(chunk, input_tokens - done)
            total += self.iteration_s(np.array([n]), np.array([done]), np.array([], dtype=int))
            done += n
        return total

    def decode_s(self, batch: int, context: int) -> float:
        """Seconds of one decode-only iteration of ``batch`` sequences with ``context`` cached tokens each."""
        if batch < 1 or context < 1:
            raise ValueError(f"decode_s: batch and context must be >= 1, got {batch!r}, {context!r}")
        empty = np.array([], dtype=int)
        return self.iteration_s(empty, empty, np.full(batch, context))

    @property
    def offload(self) -> HostOffload | None:
        """The engine's MoE experts held in host memory (``ServingPlan.offload_group_size``); None when off."""
        return self._offload

    def offload_wait_s(self, batch: int, context: int) -> float:
        """Seconds one decode-only iteration of ``batch`` sequences with ``context`` cached tokens each spends
        waiting for the copies of host-held experts: ``decode_s`` less the same iteration priced without the wait
        (``HostOffload.wait_s``), so what the engine's host work hides is not counted. 0.0 with offload off."""
        if self._offload is None:
            return 0.0
        if batch < 1 or context < 1:
            raise ValueError(f"offload_wait_s: batch and context must be >= 1, got {batch!r}, {context!r}")
        empty, dec = np.array([], dtype=int), np.full(batch, context)
        return self._iteration_s(empty, empty, dec, offload=True) - self._iteration_s(
            empty, empty, dec, offload=False
        )

    def kv_transfer_s(self, tokens: int) -> float:
        """Seconds to send one request's KV cache of ``tokens`` tokens from its prefill engine to a decode engine:
        every device of the prefill engine sends its own share (its KV heads, or the whole MLA latent) to its
        peer at once, over the level joining the pools (``p2p_s`` at a stride of the prefill pool's device count:
        the decode pool is laid after the prefill pool); sliding-window and chunked layers send only the tokens they
        hold (``held_keys``). Where the engine sends the KV layer by layer (``EngineProfile.kv_transfer_layerwise``)
        only the last layer's share and what the prefill of the other layers cannot hide are exposed. 0.0 for an
        aggregated plan. Raises ValueError for tokens < 0."""
        if tokens < 0:
            raise ValueError(f"kv_transfer_s: tokens must be >= 0, got {tokens!r}")
        d = self._plan.disaggregation
        if d is None or tokens == 0:
            return 0.0
        prefill = self._plan.role_plan("prefill")
        held = sum(count * int(held_keys(tokens, kind, span)) for count, kind, span in self._layer_groups)
        share = (
            held
            * kv_bytes_per_token_layer(self._model, prefill.kv_cache_dtype, prefill.tp)
            / prefill.attention_dp
        )
        stride = d.prefill_workers * prefill.devices_per_engine
        eff = self._cal.framework.collective_efficiency_frac
        whole = float(p2p_s(self._cluster, share, stride, eff))
        if not self._engine.kv_transfer_layerwise or self._role != "prefill":
            return whole
        # layer by layer: each layer's share leaves while the later layers compute; the last one is exposed
        layers = self._model.num_layers
        hidden = self.prefill_s(tokens) * (layers - 1) / layers
        return whole / layers + max(0.0, whole * (layers - 1) / layers - hidden)
