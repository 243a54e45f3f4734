"""MoE expert weights held in host memory and copied to the device every forward, as SGLang runs it
(``ServingPlan.offload_group_size``).

SGLang's ``ModuleOffloader`` (sgl-project/sglang ``python/sglang/srt/offloader.py``, the build of the LMSYS GB200
part II blog, 2025-09; ``SGLANG_OFFLOAD_GROUP_SIZE``, ``SGLANG_OFFLOAD_NUM_OFFLOAD_IN_GROUP`` = 1,
``SGLANG_OFFLOAD_PREFETCH_STEP`` = 1, mode ``cpu``), with DeepSeek's ``offloader_kwargs`` in
``models/deepseek_v2.py``:

- which: decoder layer ``i`` is offloaded when ``i % group_size >= group_size - num_in_group``; its
  ``mlp.experts`` keeps ``w13_weight`` and ``w2_weight`` (and the NVFP4 block scales) in pinned host memory
  (``_move_param_to_cpu``). Attention, the shared expert and the router stay on the device.
- when: after offloaded layer k's forward the copy of offloaded layer k + ``prefetch_step`` starts on a side
  stream (``start_onload``: ``param.to("cuda", non_blocking=True)`` after ``alt_stream.wait_stream(current)``),
  and offloaded layer k + 1 waits for its copy before it runs (``wait_and_get_device_tensors``). The index wraps
  around (``% len(offloaders)``), so the first offloaded layer of a forward is fetched during the previous
  forward's tail: in steady state no copy starts cold.
- memory: the offloaded experts leave the device; the layer being run and the one being fetched are on it
  (``prefetch_step`` + 1 layers of expert weights).

So with one offloaded layer in each group of g, consecutive offloaded layers are g layers apart and the copy of
the next one overlaps the g - 1 whole layers between them: an offloaded layer waits max(0, copy - (g - 1) x the
mean layer time). The attention part of the offloaded layer itself, which also runs before its experts wait, is
left out of the window (a slight over-estimate of the wait). The copy runs at the cluster's device-host link
(``StorageSpec.device_to_host_bytes_per_s``, per device and direction; the link is symmetric: GB200's NVLink-C2C
per the cluster preset).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.specs.hardware import DEFAULT_STORAGE, ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.serving import BYTES_PER_VALUE, ServingPlan

OFFLOAD_NUM_IN_GROUP = 1
"""Offloaded layers per group: SGLang's default ``SGLANG_OFFLOAD_NUM_OFFLOAD_IN_GROUP`` (offloader.py)."""

OFFLOAD_PREFETCH_STEP = 1
"""Offloaded layers fetched ahead: SGLang's default ``SGLANG_OFFLOAD_PREFETCH_STEP`` (offloader.py)."""


def routed_expert_params_per_device(model: ModelSpec, rp: ServingPlan) -> float:
    """Parameters of one MoE layer's routed experts (redundant EPLB copies included) on one device of the engine
    ``rp``: (num_experts + num_redundant_experts) x one expert's MLP / (tp x attention_dp)."""
    physical = model.num_experts + rp.num_redundant_experts
    return physical * model.mlp_parameters(model.moe_ffn_hidden_size, expert=True) / (rp.tp * rp.attention_dp)


def offload_unavailable(model: ModelSpec) -> str:
    """Why no ``offload_group_size`` applies to ``model``, or '' when one can: SGLang's offloader moves the routed
    experts (``mlp.experts``) of MoE layers only, which a dense model has none of."""
    if model.is_moe:
        return ""
    return f"model {model.name!r} has no MoE layers whose experts could be offloaded"


def offloaded_layers(model: ModelSpec, group_size: int) -> tuple[int, ...]:
    """Indices of the decoder layers whose routed experts SGLang keeps in host memory for ``group_size``: every
    ``i`` with ``i % group_size >= group_size - OFFLOAD_NUM_IN_GROUP``; () for 0. Raises ValueError when the
    model is dense or a chosen layer is one of its dense layers (SGLang's offloader takes ``w13_weight`` and
    ``w2_weight`` of ``mlp.experts``, which a dense layer does not have)."""
    if group_size == 0:
        return ()
    if why := offload_unavailable(model):
        raise ValueError(f"offload_group_size={group_size}: {why}; use 0")
    chosen = tuple(i for i in range(model.num_layers) if i % group_size >= group_size - OFFLOAD_NUM_IN_GROUP)
    if chosen and chosen[0] < model.num_dense_layers:
        raise ValueError(
            f"offload_group_size={group_size}: layer {chosen[0]} of {model.name!r} is dense (its first "
            f"{model.num_dense_layers} layers are); SGLang offloads MoE experts only: use a group size above "
            f"{model.num_dense_layers}"
        )
    return chosen


def expert_layer_bytes_per_device(model: ModelSpec, rp: ServingPlan) -> float:
    """Bytes of one layer's routed experts on one device (what one offloaded layer copies per forward)."""
    return routed_expert_params_per_device(model, rp) * BYTES_PER_VALUE[rp.weight_dtype]


def host_offload_bytes_per_device(model: ModelSpec, rp: ServingPlan) -> float:
    """Expert-weight bytes one device keeps in host memory instead of its own (0 with offload off)."""
    return len(offloaded_layers(model, rp.offload_group_size)) * expert_layer_bytes_per_device(model, rp)


def offload_buffer_bytes_per_device(model: ModelSpec, rp: ServingPlan) -> float:
    """Device bytes of the offloaded experts in flight: the layer being run and ``OFFLOAD_PREFETCH_STEP`` layers
    being fetched (0 with offload off)."""
    count = min(OFFLOAD_PREFETCH_STEP + 1, len(offloaded_layers(model, rp.offload_group_size)))
    return count * expert_layer_bytes_per_device(model, rp)


@dataclass(frozen=True, kw_only=True, slots=True)
class HostOffload:
    """The per-forward cost of an engine's host-held experts (module docstring)."""

    group_size: int
    """Layers per group, one offloaded (``ServingPlan.offload_group_size``)."""
    num_offloaded_layers: int
    """Offloaded layers of one forward."""
    num_layers: int
    """Decoder layers one forward runs (pp = 1)."""
    copy_s: float
    """Seconds to copy one offloaded layer's experts to the device: bytes / the device-host link."""

    @classmethod
    def of(cls, model: ModelSpec, cluster: ClusterSpec, rp: ServingPlan) -> HostOffload | None:
        """The offload of engine ``rp`` on ``cluster``; None when off. Raises ValueError for pp > 1 (the
        offloader of that SGLang build runs without pipeline stages; not priced) or an offload_group_size the
        model cannot take (``offloaded_layers``)."""
        layers = offloaded_layers(model, rp.offload_group_size)
        if not layers:
            return None
        if rp.pp > 1:
            raise ValueError(
                f"ServingPlan {rp.describe()!r}: host offload (offload_group_size) with pp={rp.pp} is not "
                "priced; use pp=1"
            )
        link = (cluster.storage or DEFAULT_STORAGE).device_to_host_bytes_per_s
        return cls(
            group_size=rp.offload_group_size,
            num_offloaded_layers=len(layers),
            num_layers=model.num_layers,
            copy_s=expert_layer_bytes_per_device(model, rp) / link,
        )

    def wait_s(self, layers_s: float) -> float:
        """Seconds a forward whose layers take ``layers_s`` on the GPU waits for copies: every offloaded layer
        waits max(0, copy - (group_size - 1) x layers_s / num_layers)."""
        window = (self.group_size - 1) * layers_s / self.num_layers
        return self.num_offloaded_layers * max(0.0, self.copy_s - window)

    @property
    def copy_per_forward_s(self) -> float:
        """Seconds of copying one forward needs in all (the wait if nothing overlapped it)."""
        return self.num_offloaded_layers * self.copy_s
