"""What a checkpoint holds, and how long writing, staging and reading it take on a cluster's storage path.

**Size.** A checkpoint holds the model states of the plan: weights and optimizer states (fp32 master weights,
Adam moments), plus RNG states (small). Every device saves its shard; a state that several devices hold (the
dp replicas under ZeRO-0, the weights under ZeRO-1/2) is saved once, by one of its holders (PyTorch DCP
deduplicates replicated items, ``dedup_save_plans``; Megatron-Core's ``--ckpt-fully-parallel-save`` spreads
the replicated shards over the dp ranks). So the checkpoint is the sum over devices of the unique shards, which
is the whole model state once: ``num_parameters * (weight + optimizer bytes per parameter)`` (``state_bytes``,
the one formula the estimate, the planner and the benchmark use).

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

from workbench.specs.hardware import DEFAULT_STORAGE as DEFAULT_STORAGE  # re-exported: the goodput defaults
from workbench.specs.hardware import StorageSpec

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate
    from workbench.specs.model import ModelSpec


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


def state_bytes(
    model: ModelSpec, *, weight_bytes_per_param: float, optimizer_bytes_per_param: float, num_devices: int
) -> CheckpointSize:
    """The checkpoint of any plan of ``model``: every state once (module docstring), ``total_parameters`` x the
    weight and the optimizer bytes per parameter, plus ``RNG_BYTES_PER_DEVICE`` per device. Bytes. However ZeRO,
    HSDP or expert parallelism shard and replicate the states, the unique shards add up to this."""
    n = model.total_parameters()
    return CheckpointSize(
        weights_bytes=n * weight_bytes_per_param,
        optimizer_bytes=n * optimizer_bytes_per_param,
        rng_bytes=RNG_BYTES_PER_DEVICE * num_devices,
    )


def checkpoint_bytes(est: Estimate) -> CheckpointSize:
    """The checkpoint of ``est``'s plan (``state_bytes``) with the bytes per parameter of its workload: the
    weights in the workload's dtype as the step model keeps them (``workbench.cost.layer.dtype_bytes``: 16-bit
    for FP8 runs) and mixed-precision optimizer states with fp32 master weights
    (``workbench.cost.step.optimizer_state_bytes_per_param``: 12 for AdamW). The planner prices the same
    function with its framework's bytes (``workbench.search.planner.checkpoint_state_bytes``)."""
    from workbench.cost.layer import dtype_bytes
    from workbench.cost.step import optimizer_state_bytes_per_param

    return state_bytes(
        est.model,
        weight_bytes_per_param=dtype_bytes(est.workload.dtype),
        optimizer_bytes_per_param=optimizer_state_bytes_per_param(est.workload.optimizer),
        num_devices=est.cluster.num_devices,
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
