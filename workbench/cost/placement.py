"""Where the rank groups of a plan lie: the stride of each axis and the network level a group crosses.

Ranks are numbered with the plan's ``rank_order`` innermost first (default tp, cp, ep, dp, pp, Megatron-LM's
order): a group of axis X is ``n_X`` ranks spaced ``stride_X`` apart, where ``stride_X`` is the product of
the degrees of the axes inside X. ep is carved from tp*cp*dp (Megatron-Core with expert tensor parallel 1):
it takes no room of its own, and its group is ``ep`` consecutive ranks (stride 1).

A level of span L (devices that talk over it) holds ``clip(L // stride, 1, n)`` members of such a group;
the ratio between consecutive levels is the group's fan-out on that level (``level_fanouts``), which the
hierarchical collectives of :mod:`workbench.cost.comm` use. Functions take scalars or numpy arrays for the
degrees and broadcast elementwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.specs.hardware import ClusterSpec
from workbench.specs.plan import Axis, ParallelPlan

Array = Any


def axis_stride(plan: ParallelPlan, axis: Axis | str) -> int:
    """Rank distance between neighbours of an ``axis`` group under ``plan.rank_order`` (ep: 1)."""
    axis = Axis(axis)
    if axis is Axis.EP:
        return 1
    stride = 1
    for a in plan.rank_order:
        if a is axis:
            return stride
        if a is not Axis.EP:
            stride *= getattr(plan, a.value)
    raise AssertionError(f"{axis} missing from rank_order")


def order_strides(order: tuple[Axis | str, ...], degrees: dict[str, Array]) -> dict[str, Array]:
    """``{axis}_stride`` columns of the tp, cp, dp and pp groups for ranks laid in ``order`` (innermost
    first; ep takes no room), from the degree columns ``degrees`` (arrays broadcast): the vectorised
    :func:`axis_stride`."""
    out: dict[str, Array] = {}
    stride: Array = 1
    for a in order:
        name = Axis(a).value
        if name == "ep":
            continue
        out[f"{name}_stride"] = stride
        stride = stride * degrees[name]
    return out


def level_spans(cluster: ClusterSpec) -> list[int]:
    """Span of each level in devices, innermost first; the outermost is the whole cluster."""
    return [lvl.span if lvl.span is not None else max(cluster.num_devices, 1) for lvl in cluster.levels]


def level_fanouts(cluster: ClusterSpec, stride: Array, size: Array) -> list[Array]:
    """Per level (innermost first), how many sub-groups of the level below a group of ``size`` ranks spaced
    ``stride`` apart joins on that level; the product over levels equals ``size``."""
    out: list[Array] = []
    below: Array = 1
    spans = level_spans(cluster)
    for i, span in enumerate(spans):
        inside = size if i == len(spans) - 1 else np.clip(span // np.maximum(stride, 1), 1, size)
        inside = np.maximum(inside, below)
        out.append(inside / below)
        below = inside
    return out


def p2p_level_index(cluster: ClusterSpec, stride: Array) -> Array:
    """Index of the innermost level that joins two ranks ``stride`` apart (aligned groups assumed)."""
    spans = level_spans(cluster)
    idx: Array = len(spans) - 1
    for i in reversed(range(len(spans) - 1)):
        idx = np.where(stride < spans[i], i, idx)
    return idx


def pair_level_index(cluster: ClusterSpec, a: Array, b: Array) -> Array:
    """Index of the innermost level joining ranks ``a`` and ``b`` (absolute rank numbers): the first level
    whose span-sized blocks of consecutive ranks hold both, elementwise."""
    spans = level_spans(cluster)
    idx: Array = len(spans) - 1
    for i in reversed(range(len(spans) - 1)):
        idx = np.where(np.asarray(a) // spans[i] == np.asarray(b) // spans[i], i, idx)
    return idx
