"""The ``torch-profile`` backend: op costs measured with torch, priced through the schedule simulator.

Per pipeline stage, the forward/backward-input/backward-weight times and activation bytes of its blocks,
plus the embedding on the first and the head on the last stage, come from a profile
(:mod:`workbench.presets.profile_table`, recorded by ``workbench profile``). Exposed communication is added on top:
tensor-parallel all-reduces (2 per block forward and 2 backward, Megatron-LM, arXiv:1909.08053 section 3),
expert all-to-alls (2 + 2 per MoE block), context-parallel key/value all-gathers, pipeline sends and the
data-parallel gradient reduction after the last backward (no overlap assumed). Communication uses the
alpha-beta model of :mod:`workbench.cost.comm` on the cluster's levels; when the profile holds a collective fit
for a level of the same name, the fitted latency and bandwidth replace the preset's. The schedule is
simulated by :func:`workbench.pipeline.simulate.simulate`. In split-backward schedules stage 0 is priced as
``torch.distributed.pipelining`` runs it: its I does nothing (``backward_one_chunk`` skips the first stage)
and its W is the fused backward B (``backward_weight_one_chunk`` calls ``stage_backward`` for stage 0);
every other stage's I and W are the profiled split, which carries the runtime's overhead. The optimizer step uses
the AdamW time per parameter measured with the profile. This module does not import torch: estimating
only reads the profile.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

from workbench.cost import comm
from workbench.cost.placement import axis_stride
from workbench.pipeline.schedules import build_schedule
from workbench.pipeline.simulate import StageCosts, simulate
from workbench.presets.catalog import profiles_dir
from workbench.presets.profile_table import OpCost, Profile, find_profile
from workbench.specs.estimate import Estimate, StepBreakdown
from workbench.specs.hardware import BYTES_PER_ELEMENT, ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Recompute, Workload

OPTIMIZER_STATE_BYTES = {"adamw": 12.0, "sgd": 8.0}
"""fp32 master weights plus two (Adam) or one (momentum) fp32 moments per parameter (ZeRO, Rajbhandari et
al. 2020, arXiv:1910.02054, section 3.1: K = 12 for mixed-precision Adam)."""


def stage_layers(num_layers: int, num_stages: int) -> list[range]:
    """Contiguous block ranges per pipeline stage; earlier stages take the remainder one block each."""
    base, extra = divmod(num_layers, num_stages)
    out, start = [], 0
    for s in range(num_stages):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


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
        """Cost one plan from the measured profile. ValueError for an invalid plan; LookupError (naming the
        ``workbench profile`` command to run) when no profile matches the model shape, device and dtype."""
        problems = plan.validate(model, cluster, workload)
        if problems:
            raise ValueError(f"invalid plan {plan.describe()}: " + " ".join(problems))
        prof = find_profile(self.profile_root, model, cluster.device.id, str(workload.dtype))
        return _Pricer(prof, model, _fitted_cluster(cluster, prof), workload, plan).estimate()


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
    """Builds stage costs, simulates and assembles the ``Estimate`` for one plan (one-shot helper)."""

    def __init__(
        self, prof: Profile, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan
    ) -> None:
        self.prof, self.model, self.cluster, self.workload, self.plan = prof, model, cluster, workload, plan
        self.notes: list[str] = [f"op costs measured on {prof.manifest['device_name']} ({prof.path})"]
        self.act_bytes = BYTES_PER_ELEMENT[workload.dtype]
        self.tokens = plan.micro_batch_size * workload.seq_len // plan.cp
        self.comm = {"tp": 0.0, "cp": 0.0, "ep": 0.0, "pp": 0.0, "dp": 0.0}
        fitted = {f["level"] for f in prof.manifest.get("collective_fit", [])}
        if not fitted & {lvl.name for lvl in cluster.levels}:
            self.notes.append(
                "communication from the analytic alpha-beta model (no collectives measured for "
                "this cluster's levels)"
            )

    def cost(self, op: str) -> OpCost:
        p = self.plan
        c = self.prof.op_cost(
            op, tp=p.tp, cp=p.cp, ep=p.ep, micro_batch_size=p.micro_batch_size, seq_len=self.workload.seq_len
        )
        if c.source != "measured":
            self.notes.append(f"{op}: {c.note} ({c.source})")
        return c

    def params(self, op: str) -> float:
        rows = self.prof.ops.filter(
            (pl.col("op") == op) & (pl.col("tp") == self.plan.tp) & (pl.col("ep") == self.plan.ep)
        )
        return float(rows["num_parameters"][0])

    def block_comm_s(self, moe: bool) -> dict[str, float]:
        """Exposed communication of one block's forward (the backward has the same), seconds per axis."""
        p, c, h = self.plan, self.cluster, self.model.hidden_size
        payload = self.tokens * h * self.act_bytes
        tp = float(comm.all_reduce_s(c, payload, p.tp, axis_stride(p, "tp"))) * 2 if p.tp > 1 else 0.0
        kv = (
            2
            * self.tokens
            * p.cp
            * self.model.num_key_value_heads
            * self.model.head_dim
            * self.act_bytes
            / p.tp
        )
        cp = float(comm.all_gather_s(c, kv, p.cp, axis_stride(p, "cp"))) if p.cp > 1 else 0.0
        ep = 0.0
        if moe and p.ep > 1:
            routed = payload * self.model.experts_per_token
            ep = 2 * float(comm.all_to_all_s(c, routed, p.ep, axis_stride(p, "ep")))
        return {"tp": tp, "cp": cp, "ep": ep}

    def stage_costs(self) -> tuple[StageCosts, list[float]]:
        p, model = self.plan, self.model
        ranges = stage_layers(model.num_layers, p.pp * p.vpp)
        kinds = {k: self.cost(k) for k in ("layer", "moe_layer") if self._needs(k)}
        emb, head = self.cost("embedding"), self.cost("head")
        cols: dict[str, list[float]] = {k: [] for k in ("f", "b", "i", "w", "act")}
        self.stage_comm: list[dict[str, float]] = []
        params: list[float] = []
        for s, layers in enumerate(ranges):
            parts = [kinds[self._kind(i)] for i in layers]
            comms = [self.block_comm_s(self._kind(i) == "moe_layer") for i in layers]
            parts += [emb] if s == 0 else []
            parts += [head] if s == len(ranges) - 1 else []
            self._add_stage(cols, parts, comms, layer_count=len(layers))
            params.append(
                sum(self.params(self._kind(i)) for i in layers)
                + (self.params("embedding") if s == 0 else 0)
                + (self.params("head") if s == len(ranges) - 1 else 0)
            )
        cols["i"][0], cols["w"][0] = 0.0, cols["b"][0]  # torch runs stage 0's backward as one fused W
        p2p = float(
            comm.p2p_s(self.cluster, self.tokens * model.hidden_size * self.act_bytes, axis_stride(p, "pp"))
        )
        costs = StageCosts(
            forward_s=tuple(cols["f"]),
            backward_s=tuple(cols["b"]),
            backward_input_s=tuple(cols["i"]),
            backward_weight_s=tuple(cols["w"]),
            activation_bytes=tuple(cols["act"]),
            p2p_s=p2p if p.pp > 1 else 0.0,
        )
        return costs, params

    def _add_stage(
        self,
        cols: dict[str, list[float]],
        parts: list[OpCost],
        comms: list[dict[str, float]],
        layer_count: int,
    ) -> None:
        per_axis = {k: sum(c[k] for c in comms) for k in ("tp", "cp", "ep")}
        self.stage_comm.append({k: 2 * v for k, v in per_axis.items()})
        one_way = sum(per_axis.values())
        f = sum(c.forward_s for c in parts) + one_way
        bi = sum(c.backward_input_s for c in parts) + one_way
        bw = sum(c.backward_weight_s for c in parts)
        b = sum(c.backward_s for c in parts) + one_way
        act = sum(c.activation_bytes for c in parts)
        if self.plan.recompute is Recompute.FULL:
            b, bi = b + f, bi + f
            act = layer_count * self.tokens * self.model.hidden_size * self.act_bytes
        cols["f"].append(f)
        cols["b"].append(b)
        cols["i"].append(bi)
        cols["w"].append(bw)
        cols["act"].append(act)

    def _needs(self, kind: str) -> bool:
        return any(self._kind(i) == kind for i in range(self.model.num_layers))

    def _kind(self, layer: int) -> str:
        return "moe_layer" if self.model.is_moe and layer >= self.model.num_dense_layers else "layer"

    def estimate(self) -> Estimate:
        p, w = self.plan, self.workload
        m = p.num_microbatches(w)
        if p.recompute is Recompute.SELECTIVE:
            self.notes.append("selective recompute priced as none (the profile measures whole blocks)")
        costs, stage_params = self.stage_costs()
        sim = simulate(
            build_schedule(p.schedule if p.pp > 1 else "1f1b", pp=p.pp, num_microbatches=m, vpp=p.vpp), costs
        )
        on_rank = [
            [s for s in range(len(stage_params)) if sim.schedule.stage_to_rank[s] == r] for r in range(p.pp)
        ]
        ranks = [sum(stage_params[s] for s in stages) for stages in on_rank]
        critical = max(range(p.pp), key=lambda r: sim.busy_s[r])
        for k in ("tp", "cp", "ep"):
            self.comm[k] = m * sum(self.stage_comm[s][k] for s in on_rank[critical])
        dp_s = self._dp_s(max(ranks))
        opt_s = self.prof.manifest["optimizer_s_per_parameter"] * max(ranks) / (p.dp if p.zero_stage else 1)
        step_s = sim.makespan_s + dp_s + opt_s
        return self._assemble(sim, ranks, step_s, dp_s, opt_s, m)

    def _dp_s(self, rank_params: float) -> float:
        p = self.plan
        if p.dp == 1:
            return 0.0
        grad_bytes = rank_params * 4.0
        fn = comm.reduce_scatter_s if p.zero_stage >= 2 else comm.all_reduce_s
        t = float(fn(self.cluster, grad_bytes, p.dp, axis_stride(p, "dp")))
        self.notes.append("data-parallel gradient reduction not overlapped with the backward pass")
        self.comm["dp"] = t
        return t

    def _assemble(
        self, sim: Any, ranks: list[float], step_s: float, dp_s: float, opt_s: float, m: int
    ) -> Estimate:
        p, w, model, cluster = self.plan, self.workload, self.model, self.cluster
        tokens_per_s = w.tokens_per_step / step_s
        peak = cluster.device.peak(w.dtype)
        mfu = model.model_flop_per_token(w.seq_len) * tokens_per_s / (p.num_devices * peak)
        exposed = {k: v for k, v in self.comm.items() if k != "dp"}
        busy = max(sim.busy_s)
        breakdown = (
            StepBreakdown(  # pipeline sends are waits inside the simulated makespan: counted as bubble
                compute_s=busy - sum(exposed.values()),
                exposed_tp_comm_s=exposed["tp"],
                exposed_cp_comm_s=exposed["cp"],
                exposed_ep_comm_s=exposed["ep"],
                exposed_dp_comm_s=dp_s,
                bubble_s=sim.makespan_s - busy,
                optimizer_s=opt_s,
            )
        )
        return Estimate(
            backend="torch-profile",
            model=model,
            cluster=cluster,
            workload=w,
            plan=p,
            step_time_s=step_s,
            tokens_per_s=tokens_per_s,
            mfu=mfu,
            hfu=mfu * (4 / 3 if p.recompute is Recompute.FULL else 1.0),
            model_flop_per_s_per_device=mfu * peak,
            bubble_fraction=sim.bubble_fraction_of_step,
            breakdown=breakdown,
            memory=self._memory(sim, ranks),
            memory_capacity_bytes=cluster.device.hbm_bytes,
            timeline=sim.timeline,
            measured=False,
            notes=tuple(dict.fromkeys(self.notes)),
        )

    def _memory(self, sim: Any, ranks: list[float]) -> pl.DataFrame:
        p = self.plan
        shard = {k: (p.dp if p.zero_stage >= z else 1) for k, z in (("param", 3), ("grad", 2), ("opt", 1))}
        opt_bytes = OPTIMIZER_STATE_BYTES[str(self.workload.optimizer)]
        rows = [
            {
                "rank": r,
                "parameters_bytes": n * self.act_bytes / shard["param"],
                "gradients_bytes": n * 4.0 / shard["grad"],
                "optimizer_states_bytes": n * opt_bytes / shard["opt"],
                "activations_bytes": float(sim.peak_activation_bytes_per_rank[r]),
                "buffers_bytes": 0.0,
                "other_bytes": 0.0,
            }
            for r, n in enumerate(ranks)
        ]
        frame = pl.DataFrame(rows)
        return frame.with_columns(total_bytes=pl.sum_horizontal(frame.columns[1:]))
