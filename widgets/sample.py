"""Illustrative ``Estimate`` objects for demos, benchmarks and the figure tests.

The timeline is real: ``workbench.pipeline.schedules.build_schedule`` with uniform stage costs, assembled by
``workbench.estimate.assemble`` like every backend's. Memory and the communication parts are *synthetic*
round numbers (stated in the Estimate's notes), chosen to exercise every part of the figures, not to predict anything: use a backend
(``workbench estimate``) for real numbers.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from workbench.estimate.assemble import PlanCosts, assemble
from workbench.pipeline.schedules import build_schedule
from workbench.pipeline.simulate import StageCosts
from workbench.specs.estimate import Estimate
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
        activation_bytes=activation_bytes * memory_scale,
    )
    pp, gib = plan.pp, float(2**30)
    base = {"parameters_bytes": 8, "gradients_bytes": 8, "optimizer_states_bytes": 24, "buffers_bytes": 1}
    rank_memory = {k: np.full(pp, v * gib * memory_scale) for k, v in base.items()}
    rank_memory["activation_extra_bytes"] = np.zeros(pp)
    per_stage = np.add(costs.forward_s, costs.backward_s)
    busy = np.bincount(schedule.stage_to_rank, weights=per_stage, minlength=pp)  # per micro-batch
    plan_costs = PlanCosts(
        schedule=schedule,
        stages=costs,
        rank_compute_s=0.9 * busy,
        rank_comm_s={"tp": 0.1 * busy},
        dp_comm_s=2 * forward_s,
        optimizer_s=forward_s,
        rank_memory=rank_memory,
        overhead_bytes=2 * gib * memory_scale,
        notes=("sample estimate: real simulated schedule, synthetic memory and breakdown",),
    )
    est = assemble(model, cluster, workload, plan, plan_costs, backend="sample")
    return replace(est, timeline=est.timeline.filter(est.timeline["op"] != "comm"))  # compute actions only


def renamed(estimate: Estimate, model_name: str) -> Estimate:
    """The same estimate with another model name (user-supplied names reach the report this way)."""
    return replace(estimate, model=replace(estimate.model, name=model_name))
