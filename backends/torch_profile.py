"""The ``torch-profile`` backend: op costs measured with torch, priced as ``PlanCosts`` for the one assembly.

From the profile (:mod:`workbench.presets.profile_table`, recorded by ``workbench profile``): per pipeline stage,
the compute of its forward F, backward-input I, backward-weight W and fused backward B and the activation bytes
one micro-batch leaves stored, summed over the ops the stage holds (its dense or MoE blocks, the embedding on
the first stage, the LM head with its loss on the last), each looked up at the plan's shard shape (tp, cp, ep,
micro-batch, sequence length; an unmeasured micro-batch is interpolated in tokens and noted); the gradient
accumulation of every micro-batch after the first (the step probe's seconds per parameter times the stage's
parameters, spread over the micro-batches); and the optimizer step, the AdamW time per parameter measured by the
step probe over a whole model times the parameters a rank owns (over the ZeRO shard group with ZeRO >= 1: dp*cp,
or ``zero_shard`` ranks with HSDP, as :func:`workbench.cost.step.optimizer_s` shards them).

From the step model (:mod:`workbench.cost.step`), the very functions the analytic backend calls: which blocks each
stage holds (``stage_holdings``: uneven splits give the remainder to the middle stages), the exposed tensor-,
context- and expert-parallel communication per block (``layer_pair``), ZeRO-3's per-layer gathers against the
measured per-layer compute (``fsdp_layer_s``), the pipeline hop (``pp_hop_s``), the data-parallel reduction after
the last backward (``dp_comm_s``), the parameters held (``params_held``) and every memory part but the stored
activations (``static_memory``). They run with the neutral ``Calibration()``: no overlap assumed, collective
efficiency 1. When the profile holds a collective fit for a network level of the same name, the fitted latency
and bandwidth replace the preset's. :func:`workbench.estimate.assemble.assemble` then simulates the schedule
and derives the step time, breakdown, tokens/s, MFU, HFU, the bubble and the memory table, as for every backend.

How torch runs a plan, kept in the stage costs:

- split-backward schedules: stage 0's I does nothing (``backward_one_chunk`` skips the first stage) and its W
  is the fused backward B (``backward_weight_one_chunk`` calls ``stage_backward`` for stage 0); every other
  stage's I and W are the profiled split, which carries the runtime's overhead. The I pass frees nothing
  (``stage_backward_input`` keeps the graph for W).
- full recompute: each block's measured forward is added to its backward, a block keeps only its input
  (tokens x hidden in the run's dtype) and the transient working set is one block's measured activations;
  the embedding and the head are not recomputed. Selective recompute is priced as none (the profile
  measures whole blocks), with a note.

Every field of ``ParallelPlan`` and ``Workload`` is priced or refused by name (``field_pricing``: this backend's
line in ``PLAN_FIELD_PRICING``, else the axis' ``pricing`` in ``workbench.specs.axes``: a step-model term is the
step model's, a field that changes the measured ops is refused unless it holds the plan's default;
``WORKLOAD_FIELD_PRICING``; :func:`unsupported` lists what a plan asks that the profile cannot price: a chunked
loss, vocabulary parallelism, activation offload, an expert tp other than tp, an optimizer other than AdamW, a
capacity factor, an FP8 recipe the plan chooses). An optimizer step offloaded to the host (``offload_optimizer``) is the step model's host path,
not the measured on-device AdamW, with a note.

This module does not import torch: estimating only reads the profile.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from workbench.cost import step
from workbench.cost.layer import EdgeCosts, LayerCosts
from workbench.estimate.analytic import build_pipeline, pipeline_holdings
from workbench.estimate.assemble import COMM_KINDS, PlanCosts, assemble
from workbench.pipeline.simulate import StageCosts
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import profiles_dir
from workbench.presets.profile_table import OpCost, Profile, find_profile
from workbench.specs.axes import PLAN_AXES
from workbench.specs.axis_types import PlanAxis, Pricing
from workbench.specs.estimate import Estimate
from workbench.specs.hardware import BYTES_PER_ELEMENT, ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Recompute, Workload

_TIMES = ("forward_s", "backward_s", "backward_input_s", "backward_weight_s")

PLAN_FIELD_PRICING: dict[str, str] = {
    "dp": "data-parallel reduction, ZeRO sharding and the optimizer's owned parameters (step model)",
    "tp": "ops measured at the tp shard; tensor-parallel communication from the step model",
    "pp": "blocks per stage (stage_holdings), the pipeline hop (pp_hop_s) and the simulated schedule",
    "cp": "ops measured at seq_len / cp; context-parallel communication from the step model",
    "ulysses": "the cp shard's measured ops; the Ulysses all-to-alls from the step model (layer_pair)",
    "ep": "MoE blocks measured at the ep shard; the dispatch and combine from the step model",
    "etp": "refused unless the expert tp equals tp: the profile splits each expert over tp like the dense MLP",
    "vpp": "virtual stages of the simulated schedule",
    "micro_batch_size": "ops measured at the micro-batch, else interpolated or extrapolated in tokens (noted)",
    "zero_stage": "ZeRO-3 gathers against the measured compute, the reduction and the model states (step model)",
    "zero_shard": "the shard group of the reduction, the model states and the optimizer step (step model)",
    "loss_chunks": "refused unless 1: the profile measures the LM head and its loss over the whole micro-batch",
    "vocab_parallel": "refused with pp > 1: the profile's embedding and head run whole on the first and last stage",
    "offload_optimizer": "the step model's host path (optimizer_s), not the measured AdamW (noted); no device states",
    "offload_activations": "refused: the stages keep the measured activations on the device",
    "sequence_parallel": "tensor-parallel communication kind and the input full recompute keeps (the profile's "
    "blocks are measured without sequence parallelism: their stored activations as measured)",
    "recompute": "full: each block's measured forward again before its backward, its input kept; selective: "
    "priced as none (noted)",
    "recompute_num_layers": "the share of the blocks recomputed (recompute_share)",
    "schedule": "the simulated schedule (stage 0's backward one fused W in the split-backward ones)",
    "rank_order": "the group strides the step model's communication is priced on",
    "fp8_recipe": "refused when set: the profile's ops are measured with the recipe it was recorded with",
}
"""How this backend prices the ``ParallelPlan`` fields it has its own words for; any other field by its axis'
``pricing`` (``field_pricing``: a new axis needs no line here)."""

MEASURED_HERE = frozenset(
    {"tp", "cp", "ep", "etp", "micro_batch_size", "sequence_parallel", "recompute", "recompute_num_layers",
     "vocab_parallel"}
)  # fmt: skip
"""The fields that change the measured ops (``Pricing.MEASURED_OPS``) which this backend prices from the profile
or refuses by a rule of its own (``unsupported``); it refuses any other such field unless it holds the plan's
default."""

_DEFAULT_PLAN = ParallelPlan()


def field_pricing(axis: PlanAxis) -> str:
    """How this backend prices plan field ``axis.name``: its line in ``PLAN_FIELD_PRICING``, else from the row's
    ``pricing`` (a step-model term: the step model around the measured ops; a field that changes the measured
    ops: refused unless it holds the plan's default)."""
    if axis.name in PLAN_FIELD_PRICING:
        return PLAN_FIELD_PRICING[axis.name]
    if axis.pricing is Pricing.STEP_MODEL:
        return (
            "the step model's term (workbench.cost.step) around the measured ops, as the analytic backend's"
        )
    default = getattr(_DEFAULT_PLAN, axis.name)
    return f"refused unless {axis.name}={default}: it changes the ops one device runs, measured without it"


WORKLOAD_FIELD_PRICING: dict[str, str] = {
    "seq_len": "ops measured at the sequence length",
    "global_batch_size": "the number of micro-batches of the simulated schedule",
    "dtype": "the profile measured in the run's dtype (find_profile)",
    "optimizer": "refused unless adamw: the profile times AdamW",
    "capacity_factor": "refused for an MoE model: the profile's MoE blocks run dropless, balanced",
}
"""How this backend prices each ``Workload`` field."""


def unsupported(model: ModelSpec, workload: Workload, plan: ParallelPlan) -> list[str]:
    """What of ``plan`` and ``workload`` this backend cannot price from a profile, one line each naming the
    field, its value and what the backend supports (``field_pricing``); empty when it prices all of it."""
    out = [  # the fields that change the measured ops this backend has no rule of its own for
        f"{a.name}={getattr(plan, a.name)} ({field_pricing(a)}; supports {a.name}={getattr(_DEFAULT_PLAN, a.name)})"
        for a in PLAN_AXES
        if a.pricing is Pricing.MEASURED_OPS
        and a.name not in MEASURED_HERE
        and getattr(plan, a.name) != getattr(_DEFAULT_PLAN, a.name)
    ]
    if plan.vocab_parallel and plan.pp > 1:
        out.append(
            f"vocab_parallel=True with pp={plan.pp} (the profile's embedding and LM head run whole on the first "
            "and the last stage; supports vocab_parallel=False)"
        )
    if model.is_moe and plan.expert_tp != plan.tp:
        default = " (the default with ep > 1)" if plan.etp is None else ""
        out.append(
            f"etp={plan.expert_tp}{default} (the profile splits each expert over tp={plan.tp} like the dense "
            f"MLP; supports etp=tp: etp={plan.tp})"
        )
    if str(workload.optimizer) != "adamw":
        out.append(f"optimizer={workload.optimizer} (the profile times AdamW; supports optimizer=adamw)")
    if model.is_moe and workload.capacity_factor is not None:
        out.append(
            f"capacity_factor={workload.capacity_factor} (the profile's MoE blocks run dropless; supports no "
            "capacity factor)"
        )
    return out


def _refuse_unpriced(model: ModelSpec, workload: Workload, plan: ParallelPlan) -> None:
    """ValueError listing ``unsupported``'s lines, when there are any."""
    refused = unsupported(model, workload, plan)
    if refused:
        raise ValueError(
            f"the torch-profile backend does not price {'; '.join(refused)}. Price such plans with the "
            "analytic backend."
        )


class TorchProfileBackend:
    """``workbench.backends`` entry ``torch-profile``. ``profile``: a profile folder or a folder of them
    (default ``profiles/measured``)."""

    name = "torch-profile"

    def __init__(self, profile: str | Path | None = None, **_: Any) -> None:
        self.profile_root = Path(profile) if profile else profiles_dir() / "measured"

    def unavailable_reason(self) -> str | None:
        if not self.profile_root.is_dir():
            return (
                f"no profile folder {self.profile_root}; record one with: workbench profile --model M "
                f"--out {self.profile_root}/M"
            )
        return None

    def estimate(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
    ) -> Estimate:
        """Cost one plan from the measured profile. ValueError for an invalid plan or one asking what a profile
        cannot price (:func:`unsupported`); LookupError (naming the ``workbench profile`` command to run) when no
        profile matches the model shape, device and dtype."""
        problems = plan.validate(model, cluster, workload)
        if problems:
            raise ValueError(f"invalid plan {plan.describe()}: " + " ".join(problems))
        _refuse_unpriced(model, workload, plan)
        prof = find_profile(self.profile_root, model, cluster.device.id, str(workload.dtype))
        fitted = _fitted_cluster(cluster, prof)
        costs = profile_costs(prof, model, fitted, workload, plan)
        return assemble(model, fitted, workload, plan, costs, backend=self.name)


def profile_costs(
    prof: Profile, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
) -> PlanCosts:
    """Price one valid plan's pieces from ``prof`` and the step model (see the module docstring).
    ``cluster``: the cluster with the profile's collective fits applied (``_fitted_cluster``). ValueError for
    what a profile cannot price (:func:`unsupported`)."""
    _refuse_unpriced(model, workload, plan)
    return _Pricer(prof, model, cluster, workload, plan).costs()


def _fitted_cluster(cluster: ClusterSpec, prof: Profile) -> ClusterSpec:
    fits = {f["level"]: f for f in prof.manifest.get("collective_fit", [])}
    levels = tuple(
        replace(lvl, bytes_per_s=fits[lvl.name]["bytes_per_s"], latency_s=fits[lvl.name]["latency_s"])
        if lvl.name in fits
        else lvl
        for lvl in cluster.levels
    )
    return replace(cluster, levels=levels)


class _Pricer:
    """Builds the ``PlanCosts`` of one plan (one-shot helper)."""

    def __init__(
        self, prof: Profile, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
    ) -> None:
        self.prof, self.model, self.workload, self.plan = prof, model, workload, plan
        self.notes: list[str] = [
            f"op costs measured on {prof.manifest['device_name']} ({prof.path})",
            "communication, pipeline hop, data-parallel reduction and memory accounting from the step model "
            "(workbench.cost.step) with the neutral calibration: no overlap, collective efficiency 1",
            "MFU: PaLM model FLOPs (6N + full-s^2 attention, no recompute) over the dense peak of the dtype",
        ]
        fitted = {f["level"] for f in prof.manifest.get("collective_fit", [])}
        if not fitted & {lvl.name for lvl in cluster.levels}:
            self.notes.append(
                "communication from the analytic collective model (no collectives measured for "
                "this cluster's levels)"
            )
        self.ctx = step.StepContext.build(model, cluster, workload, Calibration())
        self.cols = step.plan_columns(plan, workload)
        self.schedule = build_pipeline(plan, plan.num_microbatches(workload))
        self.stage_held, self.rank_held = pipeline_holdings(model, self.schedule)

    def cost(self, op: str) -> OpCost:
        p = self.plan
        c = self.prof.op_cost(
            op, tp=p.tp, cp=p.cp, ep=p.ep, micro_batch_size=p.micro_batch_size, seq_len=self.workload.seq_len
        )
        if c.source != "measured":
            self.notes.append(f"{op}: {c.note} ({c.source})")
        return c

    def op_costs(self) -> dict[str, OpCost]:
        """The measured ops this model needs: embedding, head, and the dense and/or MoE block."""
        model = self.model
        kinds = ["embedding"]
        kinds += ["layer"] if model.num_layers > model.num_moe_layers else []
        kinds += ["moe_layer"] if model.num_moe_layers > 0 else []
        return {k: self.cost(k) for k in (*kinds, "head")}

    def costs(self) -> PlanCosts:
        p, model, ctx, cols = self.plan, self.model, self.ctx, self.cols
        if p.recompute is Recompute.SELECTIVE:
            self.notes.append("selective recompute priced as none (the profile measures whole blocks)")
        full = p.recompute is Recompute.FULL
        share = float(step.recompute_share(model, cols))  # of the blocks recomputed (partial: below 1)
        ops = self.op_costs()
        held = self.stage_held
        n = self.schedule.num_stages

        def blocks(field: str) -> np.ndarray:
            """Per stage, the sum of ``field`` over the blocks it holds."""
            out = np.zeros(n)
            for kind, count in (("layer", held["dense"]), ("moe_layer", held["moe"])):
                if kind in ops:
                    out = out + count * getattr(ops[kind], field)
            return out

        def whole(field: str) -> np.ndarray:
            emb, head = np.asarray(held["embedding"]), np.asarray(held["head"])
            return blocks(field) + emb * getattr(ops["embedding"], field) + head * getattr(ops["head"], field)

        f, b, i, w = (whole(t) for t in _TIMES)
        act = whole("activation_bytes")
        layer_f = blocks("forward_s")
        if full:  # the recomputed blocks' forward runs again before their backward; each keeps only its input
            b, i = b + share * layer_f, i + share * layer_f
            layer_input = step.tokens(ctx, cols) * model.hidden_size * BYTES_PER_ELEMENT[self.workload.dtype]
            if p.sequence_parallel:
                layer_input = layer_input / p.tp
            num_blocks = np.asarray(held["dense"]) + np.asarray(held["moe"])
            act = act - share * (blocks("activation_bytes") - num_blocks * float(layer_input))

        accumulate = self._grad_accumulate_s()
        b, w = b + accumulate, w + accumulate

        comm_only = _comm_only(step.layer_pair(ctx, cols))
        fsdp = step.fsdp_layer_s(ctx, cols, self._layer_compute_s(ops, share))
        comm = step.share_s(comm_only, held, fsdp)
        comm_f, comm_b = _stage_array(comm["f"], n), _stage_array(comm["i"], n)
        forward = f + comm_f
        backward = b + comm_b
        backward_input = i + comm_b
        backward_weight = w.copy()
        backward_input[0], backward_weight[0] = 0.0, backward[0]  # torch: stage 0's backward is one fused W

        split = self.schedule.uses_split_backward()
        stage_compute = f + np.where(split & (np.arange(n) > 0), i + w, b)
        stages = StageCosts(
            forward_s=tuple(forward),
            backward_s=tuple(backward),
            backward_input_s=tuple(backward_input),
            backward_weight_s=tuple(backward_weight),
            activation_bytes=tuple(act),
            p2p_s=float(step.pp_hop_s(ctx, cols)),
        )
        rank_comm = step.share_s(comm_only, self.rank_held, fsdp)
        dense, expert = step.params_held(ctx, cols, self.rank_held)
        dp = step.dp_comm_s(ctx, cols, dense, expert, {"compute_f": f.sum(), "compute_b": b.sum()})
        static = step.static_memory(ctx, cols, self.rank_held)
        static["activation_extra_bytes"] = self._recompute_working_bytes(ops, full)
        if p.dp * p.cp > 1 and p.zero_stage < 3:
            self.notes.append("data-parallel gradient reduction not overlapped with the backward pass")
        return PlanCosts(
            schedule=self.schedule,
            stages=stages,
            rank_compute_s=self._per_rank_sum(stage_compute),
            rank_comm_s={k: _per_rank(rank_comm[k], p.pp) for k in COMM_KINDS},
            rank_hidden_s={k: _per_rank(rank_comm[f"hidden_{k}"], p.pp) for k in COMM_KINDS},
            dp_comm_s=float(np.max(dp.exposed)),
            dp_hidden_s=float(np.max(dp.hidden)),
            optimizer_s=self._optimizer_s(dense, expert),
            rank_memory={k: _per_rank(v, p.pp) for k, v in static.items()},
            notes=tuple(dict.fromkeys(self.notes)),
        )

    def _optimizer_s(self, dense: np.ndarray, expert: np.ndarray) -> float:
        """The slowest rank's optimizer step: the measured AdamW seconds per parameter times the parameters it
        owns (ZeRO >= 1: 1/shard group of them, ``step.shard_group``); offloaded to the host, the step model's
        host path (``step.optimizer_s``), which the profile does not measure."""
        ctx, cols = self.ctx, self.cols
        if self.plan.offload_optimizer:
            self.notes.append(
                "optimizer step offloaded to the host: the step model's host path (host DRAM and PCIe "
                "bandwidth of the cluster's [storage]), not measured"
            )
            return float(np.max(step.optimizer_s(ctx, cols, dense, expert)))
        owned = (dense + expert) / np.where(cols["zero_stage"] >= 1, step.shard_group(cols), 1)
        return float(self.prof.manifest["optimizer_s_per_parameter"] * np.max(owned))

    def _grad_accumulate_s(self) -> np.ndarray:
        """Per stage, the mean per micro-batch of adding into gradients already there: every micro-batch but
        the first of a step accumulates (autograd's ``AccumulateGrad`` adds in place), so
        ``grad_accumulate_s_per_parameter`` x the stage's parameters x (m - 1) / m, m the micro-batches. The
        weight gradients are what accumulate: the fused backward and W carry it. 0, with a note, for a profile
        recorded before the step probe measured it."""
        per_param = self.prof.manifest.get("grad_accumulate_s_per_parameter")
        m = self.plan.num_microbatches(self.workload)
        if per_param is None:
            if m > 1:
                self.notes.append(
                    "gradient accumulation over micro-batches priced 0: the profile predates the step probe "
                    "(re-record it with workbench profile)"
                )
            return np.zeros(self.schedule.num_stages)
        dense, expert = step.params_held(self.ctx, self.cols, self.stage_held)
        return float(per_param) * np.asarray(dense + expert, dtype=float) * (m - 1) / m

    def _layer_compute_s(self, ops: dict[str, OpCost], share: float) -> tuple[float, float]:
        """Measured (F, B + the recomputed F) of one block, the mean over the model's blocks: the compute
        ZeRO-3 prefetches its gathers behind; ``share``: of the blocks recomputed."""
        model = self.model
        fwd = bwd = 0.0
        for kind, count in (
            ("layer", model.num_layers - model.num_moe_layers),
            ("moe_layer", model.num_moe_layers),
        ):
            if kind in ops and count:
                c = ops[kind]
                fwd += count * c.forward_s
                bwd += count * (c.forward_s * share + c.backward_s)
        return fwd / model.num_layers, bwd / model.num_layers

    def _recompute_working_bytes(self, ops: dict[str, OpCost], full: bool) -> np.ndarray:
        """Full recompute: one block's measured activations, live while it is recomputed and run backward."""
        held = self.rank_held
        work = np.zeros(self.plan.pp)
        if full:
            for kind, count in (("layer", held["dense"]), ("moe_layer", held["moe"])):
                if kind in ops:
                    work = np.maximum(work, np.where(np.asarray(count) > 0, ops[kind].activation_bytes, 0.0))
        return work

    def _per_rank_sum(self, per_stage: np.ndarray) -> np.ndarray:
        out = np.zeros(self.plan.pp)
        np.add.at(out, np.asarray(self.schedule.stage_to_rank), per_stage)
        return out


def _comm_only(pair: step.LayerPair) -> step.LayerPair:
    """The step model's layer costs with the compute zeroed: ``step.share_s`` on it gives the exposed
    communication of what a stage or rank holds (f: forward, i: backward, and by kind)."""

    def no_compute(layer: LayerCosts) -> LayerCosts:
        return layer._replace(compute_f_s=0.0, compute_i_s=0.0, compute_w_s=0.0)

    moe = no_compute(pair.moe) if pair.moe is not None else None
    return step.LayerPair(no_compute(pair.dense), moe, EdgeCosts(0.0, 0.0, 0.0, 0.0, 0.0))


def _stage_array(values: Any, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(values, dtype=float), n).copy()


def _per_rank(values: Any, pp: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(values, dtype=float), pp).copy()
