"""Illustrative ``Estimate`` objects for demos, benchmarks and the figure tests.

The timeline is real: ``workbench.pipeline.schedules.build_schedule`` priced by ``workbench.pipeline.simulate.simulate`` with
uniform stage costs. Memory and the step breakdown are *synthetic* round numbers (stated in the
Estimate's notes), chosen to exercise every part of the figures, not to predict anything: use a backend
(``workbench estimate``) for real numbers.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from workbench.pipeline.schedules import build_schedule
from workbench.pipeline.simulate import SimResult, StageCosts, simulate
from workbench.specs.estimate import MEMORY_COLUMNS, Estimate, StepBreakdown
from workbench.specs.hardware import ClusterSpec, DeviceSpec, NetworkLevel
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

SAMPLE_DEVICE = DeviceSpec(
    id="sample-device",
    name="Sample device (synthetic)",
    peak_flop_per_s={"bf16": 1e15},  # type: ignore[dict-item]
    hbm_bytes=80 * 2**30,
    hbm_bytes_per_s=3e12,
    source="synthetic round numbers for figures and tests; not a real product",
)
SAMPLE_MODEL = ModelSpec(
    name="sample-model",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    ffn_hidden_size=14336,
    vocab_size=128256,
)
"""Shape of Llama 3.1 8B (Meta's config.json), named apart because the numbers around it are synthetic."""


def sample_cluster(
    num_nodes: int, devices_per_node: int = 8, device: DeviceSpec = SAMPLE_DEVICE
) -> ClusterSpec:
    """A synthetic two-level cluster (intra-node and inter-node links, round numbers)."""
    return ClusterSpec(
        id="sample-cluster",
        name="Sample cluster (synthetic)",
        device=device,
        devices_per_node=devices_per_node,
        num_nodes=num_nodes,
        levels=(
            NetworkLevel(name="intra-node", bytes_per_s=400e9, latency_s=3e-6, span=devices_per_node),
            NetworkLevel(name="inter-node", bytes_per_s=50e9, latency_s=10e-6),
        ),
        source="synthetic round numbers for figures and tests",
    )


def sample_estimate(
    *,
    plan: ParallelPlan,
    num_microbatches: int,
    model: ModelSpec = SAMPLE_MODEL,
    cluster: ClusterSpec | None = None,
    seq_len: int = 4096,
    forward_s: float = 2e-3,
    activation_bytes: float = 2 * 2**30,
    memory_scale: float = 1.0,
) -> Estimate:
    """An Estimate whose timeline is ``plan.schedule`` simulated with F = ``forward_s``, B = 2F, W = F.

    ``num_microbatches`` sets the global batch (dp x micro_batch_size x m). ``memory_scale`` multiplies the
    synthetic memory so tests can push ranks over capacity. Raises ValueError for an unknown schedule or
    a (pp, vpp, m) the schedule does not accept.
    """
    cluster = cluster or sample_cluster(max(1, -(-plan.num_devices // 8)))
    workload = Workload(seq_len=seq_len, global_batch_size=plan.dp * plan.micro_batch_size * num_microbatches)
    schedule = build_schedule(plan.schedule, pp=plan.pp, num_microbatches=num_microbatches, vpp=plan.vpp)
    split = schedule.uses_split_backward()
    costs = StageCosts.uniform(
        num_stages=schedule.num_stages,
        vpp=schedule.vpp,
        forward_s=forward_s,
        backward_s=2 * forward_s,
        backward_weight_s=forward_s if split else 0.0,
        p2p_s=forward_s / 20,
        activation_bytes=activation_bytes,
    )
    sim = simulate(schedule, costs)
    breakdown = StepBreakdown(
        compute_s=sim.makespan_s * (1 - sim.bubble_fraction_of_step),
        bubble_s=sim.makespan_s * sim.bubble_fraction_of_step,
        exposed_tp_comm_s=forward_s,
        exposed_dp_comm_s=2 * forward_s,
        optimizer_s=forward_s,
    )
    step_s = breakdown.total_s
    tokens_per_s = workload.tokens_per_step / step_s
    mfu = (
        tokens_per_s * model.model_flop_per_token(seq_len) / (plan.num_devices * cluster.device.peak("bf16"))
    )
    return Estimate(
        backend="sample",
        model=model,
        cluster=cluster,
        workload=workload,
        plan=plan,
        step_time_s=step_s,
        tokens_per_s=tokens_per_s,
        mfu=mfu,
        hfu=mfu,
        bubble_fraction=sim.bubble_fraction_of_step,
        model_flop_per_s_per_device=mfu * cluster.device.peak("bf16"),
        breakdown=breakdown,
        memory=_memory(sim, memory_scale),
        memory_capacity_bytes=cluster.device.hbm_bytes,
        timeline=sim.timeline,
        activation_timeline=sim.inflight.select("rank", "time_s", "activation_bytes"),
        notes=("sample estimate: real simulated schedule, synthetic memory and breakdown",),
    )


def _memory(sim: SimResult, scale: float) -> pl.DataFrame:
    pp = sim.schedule.pp
    act = np.asarray(sim.peak_activation_bytes_per_rank)
    gib = float(2**30)
    base = {
        "parameters_bytes": 8 * gib,
        "gradients_bytes": 8 * gib,
        "optimizer_states_bytes": 24 * gib,
        "buffers_bytes": 1 * gib,
        "other_bytes": 2 * gib,
    }
    cols = {k: np.full(pp, v * scale) for k, v in base.items()}
    cols["activations_bytes"] = act * scale
    frame = pl.DataFrame({"rank": np.arange(pp), **{k: cols[k] for k in MEMORY_COLUMNS}})
    return frame.with_columns(total_bytes=pl.sum_horizontal(*MEMORY_COLUMNS))


def renamed(estimate: Estimate, model_name: str) -> Estimate:
    """The same estimate with another model name (user-supplied names reach the report this way)."""
    return replace(estimate, model=replace(estimate.model, name=model_name))
