"""Core specs from a ``WorkbenchState``, and State fields from a preset: the one place where the State's
display units (GB/s = 10^9 bytes/s, microseconds) are converted to and from SI.

``Presets`` caches loaded preset files per Store (one per session), never per module.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from workbench_widgets.app.state import CUSTOM, UPLOADED, WorkbenchState

from workbench.presets import catalog
from workbench.presets.hf_config import model_from_hf_config
from workbench.specs.axes import PLAN_AXES
from workbench.specs.hardware import ClusterSpec, NetworkLevel
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

MODEL_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "ffn_hidden_size",
    "vocab_size",
)
GBPS, US = 1e9, 1e-6
"""The State's display units: GB/s (10^9 bytes/s) and microseconds."""


class Presets:
    """Loaded presets by (kind, id), loaded on first use (kinds: model, device, cluster)."""

    def __init__(self) -> None:
        self._loaded: dict[tuple[str, str], Any] = {}

    def get(self, kind: str, name: str) -> Any:
        key = (kind, name)
        if key not in self._loaded:
            loaders = {
                "model": catalog.load_model,
                "device": catalog.load_device,
                "cluster": catalog.load_cluster,
            }
            self._loaded[key] = loaders[kind](name)
        return self._loaded[key]


def cluster_spec(s: WorkbenchState, presets: Presets) -> ClusterSpec:
    """The cluster the fields describe; a preset keeps what the fields do not show (its levels between the
    first and the last, each level's hardware features such as NVLS, its storage), and an edited preset is
    named ``<name> (edited)``."""
    if s.cluster_preset == CUSTOM:
        return ClusterSpec(
            id=CUSTOM,
            name="Custom cluster",
            device=presets.get("device", s.device),
            devices_per_node=s.devices_per_node,
            num_nodes=s.num_nodes,
            levels=(
                NetworkLevel(name="scale-up", **_inner_fields(s)),
                NetworkLevel(name="scale-out", **_outer_fields(s)),
            ),
        )
    base = presets.get("cluster", s.cluster_preset)
    last = base.levels[-1] if len(base.levels) > 1 else replace(base.levels[0], span=None)
    spec = replace(
        base,
        device=presets.get("device", s.device),
        devices_per_node=s.devices_per_node,
        num_nodes=s.num_nodes,
        levels=(
            replace(base.levels[0], **_inner_fields(s)),
            *base.levels[1:-1],
            replace(last, **_outer_fields(s)),
        ),
    )
    if replace(base, num_nodes=s.num_nodes) != spec:
        spec = replace(spec, name=f"{base.name} (edited)")
    return spec


def _inner_fields(s: WorkbenchState) -> dict[str, Any]:
    return {
        "span": s.scale_up_span,
        "bytes_per_s": s.scale_up_bandwidth_GBps * GBPS,
        "latency_s": s.scale_up_latency_us * US,
    }


def _outer_fields(s: WorkbenchState) -> dict[str, Any]:
    return {"bytes_per_s": s.scale_out_bandwidth_GBps * GBPS, "latency_s": s.scale_out_latency_us * US}


def cluster_fields(cluster: ClusterSpec) -> dict[str, Any]:
    """The State's cluster fields (display units) of a preset."""
    inner, outer = cluster.levels[0], cluster.levels[-1]
    return {
        "device": cluster.device.id,
        "devices_per_node": cluster.devices_per_node,
        "scale_up_span": inner.span or cluster.num_devices,
        "scale_up_bandwidth_GBps": inner.bytes_per_s / GBPS,
        "scale_up_latency_us": inner.latency_s / US,
        "scale_out_bandwidth_GBps": outer.bytes_per_s / GBPS,
        "scale_out_latency_us": outer.latency_s / US,
    }


def base_model(s: WorkbenchState, presets: Presets) -> ModelSpec:
    """The preset or uploaded model before the edits (ValueError if 'uploaded' is chosen without a file)."""
    if s.model_preset == UPLOADED:
        if not s.uploaded_config:
            raise ValueError("model: upload a Hugging Face config.json first, or pick a preset")
        return model_from_hf_config(s.uploaded_config)
    return presets.get("model", s.model_preset)


def model_spec(s: WorkbenchState, presets: Presets) -> ModelSpec:
    """The model with the edited fields applied (named ``<name> (edited)`` when they differ)."""
    base = base_model(s, presets)
    edits = {f: getattr(s, f) for f in MODEL_FIELDS if getattr(s, f) != getattr(base, f)}
    if not edits:
        return base
    if "hidden_size" in edits or "num_attention_heads" in edits:
        edits["head_dim"] = s.hidden_size // s.num_attention_heads
    return replace(base, name=f"{base.name} (edited)", **edits)


def model_fields(model: ModelSpec) -> dict[str, Any]:
    """The State's editable model fields of a model."""
    return {f: getattr(model, f) for f in MODEL_FIELDS}


def workload(s: WorkbenchState) -> Workload:
    return Workload(
        seq_len=s.seq_len,
        global_batch_size=s.global_batch_size,
        dtype=s.dtype,
        capacity_factor=s.capacity_factor,
    )


def plan_values(s: WorkbenchState) -> dict[str, Any]:
    """The plan's field values from the controls, axis by axis (``PlanAxis.plan_value``: the etp control's 0 is
    the automatic degree, ``etp=None``; the rank order is chosen by name); an axis that applies only with another
    axis' value (``PlanAxis.only_with``: the recomputed layers' count with full recompute, the offloaded layers'
    with activation offload) is None without it."""
    values = {a.name: a.plan_value(getattr(s, a.name)) for a in PLAN_AXES}
    return {a.name: values[a.name] if a.applies(values) else None for a in PLAN_AXES}


def plan(s: WorkbenchState) -> ParallelPlan:
    """The plan of the controls (``plan_values``); ValueError for an invalid one."""
    return ParallelPlan(**plan_values(s))
