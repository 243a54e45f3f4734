"""One serving iteration without its attention cores: ``LayerCost`` prices the per-layer ops, their kernel counts
and collectives, the embedding, the LM head and the pipeline hand-offs for ``ReplicaCost``
(:mod:`workbench.serving.cost`), as functions of the token count that broadcast over arrays.

The op list is training's (:mod:`workbench.cost.flops`), changed where serving differs:

- weights and activations have separate widths (W8A16, W4A16, NVFP4), so weight bytes are priced at
  ``weight_dtype`` and activations at 16 bits; embedding and LM head stay 16-bit (vLLM and ModelOpt leave
  ``lm_head`` unquantised);
- small batches are memory-bound on the weight reads (the roofline's bytes term), and an MoE layer reads only
  the experts its tokens touch: with uniform routing of T tokens to top-k of E experts, the expected number of
  distinct experts hit is E (1 - (1 - k/E)^T), each read once (ASSUMPTION: uniform, independent routing; real
  routers are skewed, which touches fewer experts at small T and loads the busiest rank more at large T);
- every kernel takes at least ``MIN_KERNEL_S`` (a decode layer at batch 1 is a dozen such kernels beside its
  weight reads), counted per layer from the engine's ``layer_kernels`` and, for fp8 GEMM inputs,
  ``fp8_quant_kernels``; an MoE layer under attention DP moves its tokens as the engine's ``moe_dispatch`` says
  (DeepEP's low-latency kernels for the decode iterations of ``deepep``: :mod:`workbench.cost.deepep`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.cost.comm import (
    all_gather_s,
    all_to_all_forwarded_s,
    all_to_all_s,
    p2p_s,
    reduce_scatter_s,
)
from workbench.cost.deepep import deepep_low_latency_s, dispatch_bytes_per_value
from workbench.cost.flops import Op, elementwise_op, embedding_ops, op_times
from workbench.cost.tp_allreduce import tp_all_reduce_s
from workbench.presets.calibration import Calibration
from workbench.presets.gemm_shapes import GemmSeries, measured_gemm_series, shape_efficiency_frac
from workbench.serving.memory import ACT_BYTES
from workbench.serving.precision import GemmPrecision, gemm_precision
from workbench.specs.engine import EngineProfile
from workbench.specs.hardware import ClusterSpec, DType
from workbench.specs.model import AttentionKind, ModelSpec
from workbench.specs.serving import BYTES_PER_VALUE, ServingDType, ServingPlan

MIN_KERNEL_S = 3.8e-6
"""Shortest time one kernel of a decoder layer takes on the device, launch gap included, seconds: SGLang's H100
kernel benchmark (sgl-project/sglang PR #32994, benchmark/kernels/bench_fused_rmsnorm_fp8_quant.py, 512 tokens x
4096) times one fused RMSNorm + FP8-quant kernel at 3.78 us and the unfused pair at 7.17 us, i.e. ~3.6-3.8 us a
kernel whose data moves in ~1.4 us; vLLM's RMSNorm benchmark under CUDA graphs reads 5-7 us at batch 1 (vLLM PR
#36899). Taken for every device (the floor is launch and ramp-up time, not bandwidth): the same PR's B200 table
gives 2.81 us fused and 4.24 us unfused, of which ~0.8 us is the 6.3 MB at 8 TB/s, so the fixed part is ~2 us on
both devices (docs/serving.md, the ``TRTB-*`` rows)."""

MOE_PERMUTE_PASSES = 4.0
"""HBM passes over the routed token copies (tokens x top-k x hidden) per MoE layer forward: permute (read the
token, write each copy) and unpermute (read each copy, write the weighted sum), as
``FrameworkProfile.moe_dispatch_passes`` counts them for training."""


FP4_OVER_FP8_PEAK: dict[str, float] = {
    "b200-sxm-180gb": 2.0,
    "gb200": 2.0,
    "rtx-pro-6000-96gb": 2.0,
    "mi355x": 2.0,
}
"""Dense FP4 over dense FP8 tensor-core rate of the devices with FP4 tensor cores, where the datasheet gives both
(``DType`` has no 4-bit peak, so NVFP4 GEMMs with fp4 inputs run at the fp8 peak times this): DGX B200 datasheet,
FP4 144 vs FP8 72 PFLOPS per 8 GPUs; GB200 NVL72 datasheet, FP4 1,440 vs FP8 720 PFLOPS per 72 GPUs; RTX PRO 6000
Blackwell whitepaper, 4,000 FP4 vs 2,000 FP8 AI TOPS (all with sparsity, same ratio dense); AMD Instinct MI355X
product page, MXFP4 10.1 vs OCP-FP8 5.0 PFLOPS dense."""


def expected_experts_touched(tokens: Any, num_experts: int, experts_per_token: int) -> Any:
    """Distinct experts hit when ``tokens`` tokens (a number or an array, >= 0) each pick ``experts_per_token`` of
    ``num_experts`` uniformly and independently: E (1 - (1 - k/E)^T) (occupancy of E bins after T rounds of k
    draws; 0 for T = 0)."""
    if num_experts == 0:
        return 0.0 * np.asarray(tokens, dtype=float)
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** np.asarray(tokens, dtype=float))


class LayerCost:
    """Everything of one iteration but the attention cores, for one engine of ``role_plan`` (the aggregated form
    of one role) serving ``model`` on ``cluster`` with the serving ``engine``: GEMMs as ``precision``
    (:func:`workbench.serving.precision.gemm_precision`) says, on ``calibration``'s GEMM curve, memory-bound ops at
    ``hbm_bytes_per_s`` (the achieved HBM bandwidth), collectives at the framework's
    ``collective_efficiency_frac``. Token counts are engine tokens (float arrays, any shape); each attention-DP
    rank computes tokens / attention_dp.

    Raises ValueError naming the field for a weight/activation dtype pair the engine runs no path for on the
    device (``gemm_precision``).
    """

    __slots__ = ("_act", "_bw", "_cluster", "_curve", "_eff", "_engine", "_model", "_peak", "_rp", "_shapes", "_wb",
                 "precision")  # fmt: skip

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        role_plan: ServingPlan,
        calibration: Calibration,
        engine: EngineProfile,
        *,
        hbm_bytes_per_s: float,
    ) -> None:
        self._model, self._cluster, self._rp, self._engine = model, cluster, role_plan, engine
        self.precision: GemmPrecision = gemm_precision(
            engine, cluster.device, role_plan.weight_dtype, role_plan.activation_dtype, moe=model.is_moe
        )
        compute, self._act = self.precision.compute_dtype, self.precision.activation_dtype
        self._peak = cluster.device.peak(compute)
        if self._act is ServingDType.FP4 and compute is DType.FP8:  # NVFP4 tensor cores
            self._peak *= FP4_OVER_FP8_PEAK.get(cluster.device.id, 1.0)
        self._curve = calibration.gemm_curve(cluster.device, compute.value)
        self._shapes: tuple[GemmSeries, ...] = ()
        table = calibration.table(cluster.device)
        if table is not None and table.measured and self._act is not ServingDType.FP4:
            self._shapes = measured_gemm_series(cluster.device.id, compute.value)
        self._bw = hbm_bytes_per_s
        self._wb = BYTES_PER_VALUE[role_plan.weight_dtype]
        self._eff = calibration.framework.collective_efficiency_frac

    def by_tokens_s(self, tokens: np.ndarray, *, prefill: bool = False) -> np.ndarray:
        """All layers without attention cores, the embedding (and its vocab-parallel all-reduce) and the pp - 1
        hand-offs of the hidden states (``p2p_s``, stages tp*attention_dp ranks apart), for T tokens, seconds
        (0 where T = 0). ``prefill``: the iteration holds prefill tokens (DeepEP's normal kernels under the
        ``deepep`` dispatch, ``layer_comm_s``)."""
        m, rp = self._model, self._rp
        n_moe = m.num_moe_layers
        out = n_moe * self._layer_s(True, tokens, prefill) if n_moe else np.zeros_like(tokens)
        if m.num_layers > n_moe:
            out = out + (m.num_layers - n_moe) * self._layer_s(False, tokens)
        t_r = tokens / rp.attention_dp
        out = out + self._gemm_s(embedding_ops(m, tokens=t_r, act_bytes=ACT_BYTES))
        payload = ACT_BYTES * t_r * m.hidden_size
        if rp.tp > 1:
            out = out + self._tp_all_reduce_s(payload)
        if rp.pp > 1:
            out = out + (rp.pp - 1) * p2p_s(self._cluster, payload, rp.tp * rp.attention_dp, self._eff)
        return np.where(tokens > 0, out, 0.0)

    def stage_layers(self) -> list[tuple[int, int]]:
        """(dense, MoE) layer counts of each pipeline stage: the layers split as evenly as they go (the first
        ``num_layers % pp`` stages take one more), the dense layers first (DeepSeek's leading dense layers)."""
        m, pp = self._model, self._rp.pp
        base, extra = divmod(m.num_layers, pp)
        out, start, n_dense = [], 0, m.num_layers - m.num_moe_layers
        for i in range(pp):
            count = base + (i < extra)
            dense = max(0, min(n_dense, start + count) - start)
            out.append((dense, count - dense))
            start += count
        return out

    def stage_s(self, tokens: float, attention_layer_s: float) -> list[float]:
        """Seconds of each pipeline stage for one iteration of ``tokens`` decode tokens: its layers (each with
        ``attention_layer_s`` of attention), the embedding on the first stage, the LM head and logits on the last,
        and one hand-off per stage but the last."""
        t = np.array([float(tokens)])
        dense_s = float(self._layer_s(False, t)[0])
        moe_s = float(self._layer_s(True, t)[0]) if self._model.is_moe else 0.0
        embed = float(
            self._gemm_s(embedding_ops(self._model, tokens=t / self._rp.attention_dp, act_bytes=ACT_BYTES))[0]
        )
        handoff = float(p2p_s(self._cluster, ACT_BYTES * tokens / self._rp.attention_dp * self._model.hidden_size,
                              self._rp.tp * self._rp.attention_dp, self._eff))  # fmt: skip
        stages = []
        for i, (dense, moe) in enumerate(self.stage_layers()):
            stage = dense * dense_s + moe * moe_s + (dense + moe) * attention_layer_s
            stage += embed if i == 0 else 0.0
            stage += float(self.by_logits_s(t)[0]) if i == self._rp.pp - 1 else handoff
            stages.append(stage)
        return stages

    def by_logits_s(self, logits: np.ndarray) -> np.ndarray:
        """Final norm and LM head for N logit positions (16-bit weights, vocab split over tp), fp32 logits written
        and read once, and their all-gather over tp, seconds (0 where N = 0)."""
        m, rp = self._model, self._rp
        n_r, v_local = logits / rp.attention_dp, m.vocab_size / rp.tp
        head = Op("lm_head", "matmul", 2.0 * n_r * m.hidden_size * v_local,
                  2.0 * m.hidden_size * v_local + ACT_BYTES * n_r * (m.hidden_size + v_local))  # fmt: skip
        out = self._gemm_s([head, Op("logits", "memory", 0.0, 2 * 4.0 * n_r * v_local)])
        if rp.tp > 1:
            out = out + all_gather_s(self._cluster, ACT_BYTES * n_r * m.vocab_size, rp.tp, 1, self._eff)
        return np.where(logits > 0, out, 0.0)

    def draft_pass_s(
        self, moe: bool, tokens: np.ndarray, fused_inputs: int, logits: np.ndarray | None = None
    ) -> np.ndarray:
        """One pass of a one-layer draft head (DeepSeek-V3's MTP module, EAGLE, EAGLE-3) over ``tokens`` engine
        tokens without its attention core: the layer (MoE or dense, as the target's), the input projection of
        ``fused_inputs`` x h -> h (MTP and EAGLE: 2, the token embedding beside the target's hidden state; EAGLE-3:
        3 fused target layers on its first pass) and the shared LM head over ``logits`` positions (default: one
        per token), seconds."""
        h = self._model.hidden_size
        t_r = tokens / self._rp.attention_dp
        proj = self._gemm("draft_fc", t_r, fused_inputs * h * h / self._rp.tp, fused_inputs * h, h)
        heads = self.by_logits_s(tokens if logits is None else logits)
        return self._layer_s(moe, tokens) + self._gemm_s([proj], (1,)) + heads

    def _tp_all_reduce_s(self, payload: np.ndarray) -> np.ndarray:
        """A tp all-reduce of ``payload`` bytes with the engine's kernel family (``EngineProfile.tp_all_reduce``,
        ``workbench.cost.tp_allreduce``), seconds."""
        return tp_all_reduce_s(self._cluster, payload, self._rp.tp, self._engine.tp_all_reduce, self._eff)

    def layer_comm_s(self, moe: bool, tokens: np.ndarray, prefill: bool = False) -> np.ndarray:
        """Collectives of one layer: the tp all-reduce after attention and after the MLP (Megatron's two per
        layer, Shoeybi et al. 2019, arXiv:1909.08053); with attention_dp > 1 an MoE layer instead moves its
        tokens as the engine's ``moe_dispatch`` says: ``all_to_all`` dispatches and combines the token copies over
        the engine's tp * attention_dp devices (each rank sends its 1/tp share; 1-byte dispatch when the GEMM
        inputs are fp8/fp4, DeepSeek-V3 arXiv:2412.19437 section 3.3, 16-bit otherwise);
        ``allgather_reducescatter`` all-gathers the attention-DP ranks' 16-bit hidden states (the whole batch, T h
        values, on every rank) and reduce-scatters the expert outputs back (vLLM's
        ``AgRsAll2AllManager``); ``deepep`` runs DeepEP's normal kernels in iterations with prefill tokens
        (``all_to_all_forwarded_s``) and its low-latency kernels in decode-only ones, priced from DeepEP's own kernel
        benchmark (``workbench.cost.deepep``: a fixed 20 us a kernel plus the bytes; FP8 dispatch carries its
        per-128-channel scales). The tp all-reduces run the engine's kernel family (``_tp_all_reduce_s``); the rest is
        priced by NCCL's model (``workbench.cost.comm``), seconds."""
        rp, h, eff = self._rp, self._model.hidden_size, self._eff
        payload = ACT_BYTES * tokens / rp.attention_dp * h
        out = np.zeros_like(tokens)
        if rp.tp > 1:
            out = out + self._tp_all_reduce_s(payload)
        if moe and rp.attention_dp > 1 and self._engine.moe_dispatch == "allgather_reducescatter":
            gathered = payload * rp.attention_dp
            out = out + all_gather_s(self._cluster, gathered, rp.attention_dp, rp.tp, eff)
            out = out + reduce_scatter_s(self._cluster, gathered, rp.attention_dp, rp.tp, eff)
        elif moe and rp.attention_dp > 1:
            n, k = rp.tp * rp.attention_dp, self._model.experts_per_token
            values = payload / ACT_BYTES / rp.tp  # this rank's share of its tokens' hidden values
            send = 1.0 if self._act in (ServingDType.FP8, ServingDType.FP4) else ACT_BYTES
            if (
                prefill and self._engine.moe_dispatch == "deepep"
            ):  # normal kernels: once per node, NVLink fan-out
                out = out + all_to_all_forwarded_s(self._cluster, send * values, k, n, 1, eff)
                out = out + all_to_all_forwarded_s(self._cluster, ACT_BYTES * values, k, n, 1, eff)
            elif self._engine.moe_dispatch == "deepep":  # low-latency kernels, from DeepEP's kernel benchmark
                narrow = self._act.value if send == 1.0 else None
                sent = dispatch_bytes_per_value(narrow) * values
                out = out + deepep_low_latency_s(self._cluster, sent, k, n, 1)
                out = out + deepep_low_latency_s(self._cluster, ACT_BYTES * values, k, n, 1)
            else:
                out = out + all_to_all_s(self._cluster, send * values * k, n, 1, eff)
                out = out + all_to_all_s(self._cluster, ACT_BYTES * values * k, n, 1, eff)
        elif rp.tp > 1:
            out = out + self._tp_all_reduce_s(payload)
        return np.asarray(out, dtype=float)

    def eager_floor_s(self) -> float:
        """The CPU's launch time of an iteration the engine launches eagerly: every layer's kernels
        (``_eager_kernels``) times the engine's ``eager_kernel_s``, seconds."""
        n_moe = self._model.num_moe_layers
        kernels = n_moe * self._eager_kernels(True) + (self._model.num_layers - n_moe) * self._eager_kernels(
            False
        )
        return kernels * self._engine.eager_kernel_s

    def _gemm_s(self, ops: list[Op], kernels: tuple[int, ...] | None = None) -> np.ndarray:
        """Roofline time of weight GEMMs and memory-bound ops (``workbench.cost.flops.op_times``, forward); with
        ``kernels`` (the kernel count of each op) every op takes at least its count times ``MIN_KERNEL_S``."""
        if kernels is None:
            times = op_times(ops, peak_flop_per_s=self._peak, gemm_curve=self._curve, hbm_bytes_per_s=self._bw,
                             attention=None)  # fmt: skip
            return np.asarray(times.fwd_s, dtype=float)
        total = 0.0
        for op, count in zip(ops, kernels, strict=True):
            t = np.asarray(self._gemm_s([op]), dtype=float)
            total = total + np.maximum(t, count * MIN_KERNEL_S)
        return np.asarray(total, dtype=float)

    def _quant_kernels(self) -> int:
        """Activation-quantisation kernels per GEMM input (the engine's count for fp8/fp4 GEMM inputs as priced,
        ``GemmPrecision.activation_dtype``, else 0) plus the weight-unpacking kernels of a weight-only path."""
        narrow = self._act in (ServingDType.FP8, ServingDType.FP4)
        return (self._engine.fp8_quant_kernels if narrow else 0) + self.precision.dequant_kernels

    def _gemm(self, name: str, tokens: np.ndarray, params: float, d_in: float, d_out: float) -> Op:
        """A weight GEMM on one device: 2 T P FLOPs; weight bytes at weight_dtype, 16-bit input and output."""
        return Op(
            name, "matmul", 2.0 * tokens * params, params * self._wb + ACT_BYTES * tokens * (d_in + d_out)
        )

    def _layer_s(self, moe: bool, tokens: np.ndarray, prefill: bool = False) -> np.ndarray:
        """One layer on one device without its attention core: projections, MLP or MoE, norms, the activation
        quantisation of fp8 GEMM inputs and the layer's collectives, for ``tokens`` engine tokens (each
        attention-DP rank computes tokens / attention_dp). Every op takes at least its kernels' minimum time."""
        m, rp = self._model, self._rp
        t_r = tokens / rp.attention_dp
        h, tp = m.hidden_size, rp.tp
        q_out = m.num_attention_heads * m.qk_head_dim + 2 * m.num_key_value_heads * m.head_dim
        attn_in = m.num_attention_heads * m.value_head_dim / tp
        out_p = attn_in * h
        ops = [
            self._gemm("qkv_proj", t_r, m.attention_parameters() / tp - out_p, h, q_out / tp),
            self._gemm("out_proj", t_r, out_p, attn_in, h),
            elementwise_op(
                m,
                tokens=t_r,
                tp=tp,
                sequence_parallel=False,
                act_bytes=ACT_BYTES,
                dropout=False,
                moe_layer=moe,
            ),  # fmt: skip
        ]
        if moe:
            ops += self._moe_ops(tokens)
        else:
            ops.append(self._mlp_op(t_r, m.mlp_parameters() / tp, m.ffn_hidden_size / tp))
        kernels = self._op_kernels(moe)
        quant = self._quant_kernels()
        if quant:  # one pass over each GEMM input per quantisation kernel: read 16-bit, write 8-bit
            gemm_inputs = 2 * h + attn_in + m.ffn_hidden_size / tp if not moe else 2 * h + attn_in
            ops.append(Op("act_quant", "memory", 0.0, quant * 1.5 * ACT_BYTES * t_r * gemm_inputs))
            kernels += (quant * (4 if not moe else 2),)
        total = self._gemm_s(ops, kernels) + self.layer_comm_s(moe, tokens, prefill)
        if self._shapes and m.attention is not AttentionKind.MLA:
            shaped = [(ops[0], q_out / tp, h), (ops[1], h, attn_in)]
            priced = [(ops[0], kernels[0]), (ops[1], kernels[1])]
            if not moe:
                shaped += self._mlp_matrices(t_r)
                priced.append((ops[3], kernels[3]))
            total = total + self._shape_delta_s(shaped, priced, t_r)
        return total

    def _mlp_matrices(self, tokens: np.ndarray) -> list[tuple[Op, float, float]]:
        """The dense MLP as the engines run it, for :meth:`_shape_delta_s`: the up projection (gate and up fused
        into one GEMM when gated: vLLM's ``MergedColumnParallelLinear``, TensorRT-LLM's ``GatedMLP``
        ``gate_up_proj``) and the down projection, each a weight GEMM of its own shape on one device, with its
        outputs and inputs."""
        m, tp = self._model, self._rp.tp
        f, h = m.ffn_hidden_size / tp, m.hidden_size
        up = (2.0 if m.gated_mlp else 1.0) * f
        return [
            (self._gemm("mlp_up", tokens, up * h, h, up), up, h),
            (self._gemm("mlp_down", tokens, f * h, f, h), h, f),
        ]

    def _shape_delta_s(
        self, shaped: list[tuple[Op, float, float]], priced: list[tuple[Op, int]], tokens: np.ndarray
    ) -> np.ndarray:
        """What pricing the weight GEMMs ``shaped`` (op, outputs n, inputs k) at their own measured shape
        (``workbench.presets.gemm_shapes``: the series spanning the token count nearest in shape) adds
        to the FLOP-curve price of the same GEMMs as ``_layer_s`` lists them (``priced``: op, kernel count, each
        kernel at least ``MIN_KERNEL_S``), seconds; 0 at token counts no measured series spans. A shaped GEMM is
        the roofline of its FLOPs at the measured efficiency and its bytes at the achieved HBM bandwidth, one
        kernel."""
        shaped_s = np.zeros(np.shape(tokens))
        covered = np.ones(np.shape(tokens), dtype=bool)  # whether a series spans M: the same for every shape
        for op, n, k in shaped:
            eff = shape_efficiency_frac(self._shapes, tokens, n, k)
            covered &= ~np.isnan(eff)
            t = np.maximum(op.flop / (self._peak * np.where(np.isnan(eff), 1.0, eff)), op.bytes / self._bw)
            shaped_s = shaped_s + np.maximum(t, MIN_KERNEL_S)
        priced_s = np.zeros(np.shape(tokens))
        for op, count in priced:
            priced_s = priced_s + np.maximum(self._gemm_s([op]), count * MIN_KERNEL_S)
        return np.where(covered, shaped_s - priced_s, 0.0)

    def _op_kernels(self, moe: bool) -> tuple[int, ...]:
        """Kernels behind each op of ``_layer_s``'s list: qkv and out projections (one GEMM each; MLA's absorbed
        form ``MLA_PROJECTION_KERNELS``), the small kernels beside the attention kernel (the engine's
        ``layer_kernels`` less the attention, floored with the attention core in ``ReplicaCost.iteration_s``), then
        the MLP (two GEMMs) or the MoE ops (router GEMM and top-k selection, permute + unpermute, two grouped GEMMs,
        shared experts' two GEMMs and their activation; the routed experts' activation is one of
        ``layer_kernels``)."""
        qkv, out = (1, 1) if self._model.attention is not AttentionKind.MLA else self.mla_projection_kernels()
        kernels = [qkv, out, max(self._engine.layer_kernels - 1, 0)]
        if not moe:
            return (*kernels, 2)
        kernels += [2, 2, 2]
        if self._model.num_shared_experts:
            kernels.append(3)
        return tuple(kernels)

    def mla_projection_kernels(self) -> tuple[int, int]:
        """(before, after) the attention core: kernels of MLA's absorbed-form projections (SGLang
        ``DeepseekV2AttentionMLA.forward_absorb``, vLLM ``MLACommonImpl``): the fused q_a/kv_a down-projection,
        q_a_layernorm, q_b_proj, kv_a_layernorm and the W_UK batched GEMM before; the W_UV batched GEMM and o_proj
        after. Without a query LoRA (q_lora_rank 0) the query has one projection and no norm."""
        return (5 if self._model.q_lora_rank else 3), 2

    def _eager_kernels(self, moe: bool) -> int:
        """Kernels one layer launches: its ops' kernels, the attention kernel and the layer's collectives (two
        tensor-parallel all-reduces, or dispatch and combine with attention-DP)."""
        rp = self._rp
        collectives = 2 if rp.tp > 1 or (moe and rp.attention_dp > 1) else 0
        quant = self._quant_kernels() * (2 if moe else 4)
        return sum(self._op_kernels(moe)) + quant + 1 + collectives

    def _mlp_op(self, tokens: np.ndarray, params: float, width: float) -> Op:
        """A (gated) MLP on one device, efficiency read at one of its matrices (as ``flops.mlp_ops``)."""
        n_mat = 3 if self._model.gated_mlp else 2
        op = self._gemm("mlp", tokens, params, 2 * self._model.hidden_size, n_mat * width)
        return op._replace(gemm_flop=op.flop / n_mat)

    def _moe_ops(self, tokens: np.ndarray) -> list[Op]:
        """Router, permutation, the routed experts of this device and the shared experts. Routed work per device:
        T k / (tp * attention_dp) token-expert pairs; weights read: the local experts touched (module docstring),
        as one grouped GEMM."""
        m, rp = self._model, self._rp
        h, k, e = m.hidden_size, m.experts_per_token, m.num_experts
        expert = m.mlp_parameters(m.moe_ffn_hidden_size, expert=True)
        # redundant copies (EPLB) split a hot expert's tokens between devices: each copy is read where it is hit
        copies = (e + rp.num_redundant_experts) / e
        touched = np.minimum(expected_experts_touched(tokens, e, k) * copies, tokens * k) / rp.expert_parallel
        routed = tokens * k / (rp.tp * rp.attention_dp)
        n_mat = 3 if m.gated_mlp else 2
        flop = 2.0 * routed * expert
        moved = touched * expert / rp.expert_tp * self._wb
        moved = moved + ACT_BYTES * tokens * k / rp.expert_parallel * (
            2 * h + n_mat * m.moe_ffn_hidden_size / rp.expert_tp
        )
        t_r = tokens / rp.attention_dp
        ops = [
            Op("router", "matmul", 2.0 * t_r * h * e / rp.tp, ACT_BYTES * (t_r * (h + e) / rp.tp + h * e)),
            Op("moe_permute", "memory", 0.0, MOE_PERMUTE_PASSES * ACT_BYTES * routed * h),
            Op("experts", "matmul", flop, moved, gemm_flop=flop / n_mat),
        ]
        if m.num_shared_experts:
            ops.append(self._mlp_op(t_r, m.num_shared_experts * expert / rp.tp,
                                    m.num_shared_experts * m.moe_ffn_hidden_size / rp.tp))  # fmt: skip
        return ops
