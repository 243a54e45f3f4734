"""What a checkpoint holds, and how long writing, staging and reading it take on a cluster's storage path.

**Size.** A checkpoint holds the model states of the plan: weights and optimizer states (fp32 master weights,
Adam moments), plus RNG states (small). Every device saves its shard; a state that several devices hold (the
dp replicas under ZeRO-0, the weights under ZeRO-1/2) is saved once, by one of its holders (PyTorch DCP
deduplicates replicated items, ``dedup_save_plans``; Megatron-Core's ``--ckpt-fully-parallel-save`` spreads
the replicated shards over the dp ranks). So the checkpoint is the sum over devices of the unique shards, which
is the whole model state once: ``num_parameters * (weight + optimizer bytes per parameter)``. From an
``Estimate`` it is the sum of each pipeline rank's per-device states times the devices of a stage, divided by
how many devices hold each copy (see ``checkpoint_bytes``).

**Write.** The saved bytes are spread over every node (fully parallel save), so a synchronous save takes
``bytes / min(num_nodes * node_write, filesystem)``: each node writes its share, the file system caps the sum.
**Asynchronous save** (PyTorch DCP ``async_save``; DataStates-LLM, Maurya et al., arXiv:2406.10707) stalls
training only for the copy of the device's share to pinned host memory, ``bytes / num_devices /
device_to_host``; the write runs behind training, and the checkpoint is durable a write time later.
**Restore** reads the checkpoint back at ``bytes / min(num_nodes * node_read, filesystem)``. **Resharding**
onto another layout (an elastic shrink of dp) converts it first (Universal Checkpointing, Lian et al.,
arXiv:2406.18820: a distributed checkpoint is turned into per-parameter atomic files that any layout loads);
priced here as one more full read plus write of the checkpoint, an assumption.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.specs.hardware import StorageSpec

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate
    from workbench.specs.model import ModelSpec

DEFAULT_STORAGE = StorageSpec(
    node_write_bytes_per_s=10e9,
    node_read_bytes_per_s=20e9,
    filesystem_bytes_per_s=500e9,
    device_to_host_bytes_per_s=25e9,
    source=(
        "ASSUMED defaults for a cluster without [storage]: 10 GB/s write and 20 GB/s read per node (a parallel "
        "file-system client on one 200-400 Gb/s storage NIC), 500 GB/s aggregate file-system cap, 25 GB/s "
        "device-to-host copy (PCIe Gen4 x16)"
    ),
)
"""The storage path used when a cluster preset has no ``[storage]`` table (every number an assumption)."""

RNG_BYTES_PER_DEVICE = 8192.0
"""RNG states saved per device: torch's CPU generator state (5,056 bytes, ``torch.get_rng_state()``), the CUDA
Philox seed and offset (16 bytes) and Python's/numpy's Mersenne Twister (about 2.5 KB each) round to ~8 KiB."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointSize:
    """Bytes of one checkpoint of a plan (each state once)."""

    weights_bytes: float
    optimizer_bytes: float
    rng_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.optimizer_bytes + self.rng_bytes


def expert_parameter_frac(model: ModelSpec) -> float:
    """Share of the model's parameters that are routed-expert weights (0 for a dense model); the rest (and the
    shared experts) replicate over dp*cp, the routed experts over the expert-data-parallel group."""
    if not model.is_moe:
        return 0.0
    experts = model.num_moe_layers * model.num_experts * model.mlp_parameters(model.moe_ffn_hidden_size)
    return experts / model.total_parameters()


def _replicas(est: Estimate) -> float:
    """Mean number of devices that hold each parameter's state when ZeRO does not shard it: dp*cp for the
    non-expert weights, dp*cp*tp/(ep*expert_tp) for routed experts (weighted by their parameter share)."""
    p = est.plan
    dense = p.dp * p.cp
    expert = max(p.dp * p.cp * p.tp / (p.ep * p.expert_tp), 1.0)
    frac = expert_parameter_frac(est.model)
    return (1.0 - frac) * dense + frac * expert


def checkpoint_bytes(est: Estimate) -> CheckpointSize:
    """The checkpoint of ``est``'s plan from its memory table: per pipeline rank, ``parameters_bytes`` and
    ``optimizer_states_bytes`` per device times the ``num_devices / pp`` devices of the stage, divided by
    the replicas that hold the same state (``_replicas``; weights are sharded by ZeRO-3 and optimizer states
    by ZeRO >= 1, and then every device's shard is unique). A stack that runs ZeRO-3 under a pipeline as
    ZeRO-1 (``fsdp_reshard_with_pp`` false) keeps whole weights: between the two readings the one closer to
    ``total_parameters * bytes of the dtype`` is taken. Exact for a dense model; for MoE exact when dense and
    expert states use the same bytes per parameter."""
    p, mem = est.plan, est.memory
    per_stage = est.cluster.num_devices / p.pp
    weights = per_stage * float(mem["parameters_bytes"].sum())
    optimizer = per_stage * float(mem["optimizer_states_bytes"].sum())
    replicas = _replicas(est)
    if p.zero_stage < 3:
        weights /= replicas
    elif p.pp > 1:
        from workbench.specs.hardware import BYTES_PER_ELEMENT, DType

        expected = est.model.total_parameters() * BYTES_PER_ELEMENT[DType(est.workload.dtype)]
        if abs(np.log(weights / replicas / expected)) < abs(np.log(weights / expected)):
            weights /= replicas
    if p.zero_stage < 1:
        optimizer /= replicas
    return CheckpointSize(
        weights_bytes=weights,
        optimizer_bytes=optimizer,
        rng_bytes=RNG_BYTES_PER_DEVICE * est.cluster.num_devices,
    )


def write_s(total_bytes: Any, num_nodes: Any, storage: StorageSpec) -> Any:
    """Synchronous save: ``bytes / min(num_nodes * node_write, filesystem)`` seconds (arrays broadcast)."""
    rate = np.minimum(num_nodes * storage.node_write_bytes_per_s, storage.filesystem_bytes_per_s)
    return total_bytes / rate


def read_s(total_bytes: Any, num_nodes: Any, storage: StorageSpec) -> Any:
    """Restore: ``bytes / min(num_nodes * node_read, filesystem)`` seconds."""
    rate = np.minimum(num_nodes * storage.node_read_bytes_per_s, storage.filesystem_bytes_per_s)
    return total_bytes / rate


def staging_s(total_bytes: Any, num_devices: Any, storage: StorageSpec) -> Any:
    """Asynchronous save's stall: each device copies its ``1/num_devices`` share to host memory at
    ``device_to_host`` bytes/s, all devices at once (DataStates-LLM; DCP ``async_save`` staging)."""
    return total_bytes / num_devices / storage.device_to_host_bytes_per_s


def reshard_s(total_bytes: Any, num_nodes: Any, storage: StorageSpec) -> Any:
    """Conversion of the checkpoint for another layout (Universal Checkpointing): one more read and write of
    the whole checkpoint, an assumption (UCP reports the conversion as a one-off pass over the files)."""
    return read_s(total_bytes, num_nodes, storage) + write_s(total_bytes, num_nodes, storage)
