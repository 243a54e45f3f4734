"""What the planner may choose: ``Constraints`` and the candidate values of every plan axis.

A plan of N devices is a layout row times ep, micro_batch_size, zero_stage and recompute (``PlanSpace``).
Layout rows combine:

- (tp, sequence_parallel): sequence parallelism only with tp > 1 (it shards along tp);
- cp;
- (pp, vpp, schedule): pp = 1 has one row (vpp = 1, no schedule); a schedule that needs an exact vpp
  (``workbench.pipeline.schedules.required_vpp``) gets only that one;

keeping those whose tp * cp * pp divides N; dp is the quotient (so dp*tp*pp*cp = N). Every other rule (divisibility, schedule rules, memory) is a
rejection counted by ``workbench.search.grid``, not an exclusion from the space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.cost.placement import level_spans, order_strides, p2p_level_index
from workbench.pipeline.schedules import SCHEDULE_NAMES, required_vpp
from workbench.specs.axes import PLAN_AXES
from workbench.specs.degrees import divisors
from workbench.specs.estimate import DEFAULT_HEADROOM_FRAC
from workbench.specs.framework import CP_KINDS, FrameworkProfile
from workbench.specs.limits import (
    MAX_CANDIDATES,
    MAX_DEVICES,
    MAX_GLOBAL_BATCH_SIZE,
    check_count,
    shown,
)
from workbench.specs.plan import RANK_ORDERS, Recompute, data_parallel_degree

if TYPE_CHECKING:
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec

AXES: tuple[str, ...] = tuple(a.name for a in PLAN_AXES if a.constrainable)
"""Axes whose degrees ``Constraints.fixed`` and ``Constraints.maximum`` may name (``PlanAxis.constrainable``)."""

RECOMPUTE_CODES: tuple[str, ...] = tuple(r.value for r in Recompute)
"""Integer code i of the ``recompute`` column means ``RECOMPUTE_CODES[i]`` (none, selective, full)."""

AXIS_MAXIMUM: dict[str, tuple[int, str]] = {
    a.name: (a.maximum, a.limit) for a in PLAN_AXES if a.constrainable and a.maximum and a.limit
}
"""Largest value ``Constraints.fixed`` and ``Constraints.maximum`` accept per axis: the axis' bound
(``workbench.specs.axes``, a constant of ``workbench.specs.limits``)."""

NO_SCHEDULE = "1f1b"
"""Schedule name stored for pp = 1 plans (``ParallelPlan`` ignores it there)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Constraints:
    """Limits on the plans a search considers. Unset limits leave the axis free."""

    max_devices: int | None = None
    """Largest device count to use; node counts above it are skipped. None: no limit."""
    memory_headroom_frac: float = DEFAULT_HEADROOM_FRAC
    """Share of the device memory kept free: a plan fits if peak <= capacity * (1 - headroom). 0..1; the one
    rule of ``Estimate.fits`` (``workbench.specs.estimate.DEFAULT_HEADROOM_FRAC``)."""
    fixed: dict[str, int] = field(default_factory=dict)
    """Axis -> the only allowed degree, e.g. ``{"tp": 8}``. Axes: see ``AXES``."""
    maximum: dict[str, int] = field(default_factory=dict)
    """Axis -> largest allowed degree, e.g. ``{"tp": 8}``. Default for tp: the span of the cluster's
    innermost network level (the NVLink domain); vpp: 8."""
    micro_batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    """Candidate micro-batch sizes (sequences)."""
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = RECOMPUTE_CODES
    """Recompute choices (none, selective, full). With full, on a stack that runs partial recompute
    (``FrameworkProfile.partial_recompute``), the screen also prices the fitting plans' variants that
    recompute only the fewest layers per chunk that fit (``screen.trimmed_recompute``)."""
    sequence_parallel: tuple[bool, ...] = (False, True)
    """Allowed values when tp > 1 (tp = 1 always runs without)."""
    rank_orders: tuple[str, ...] = tuple(RANK_ORDERS)
    """Rank orders to search (names of ``workbench.specs.plan.RANK_ORDERS``); an order enters only where it
    moves a group onto other links than the default order does."""
    cp_kinds: tuple[str, ...] = CP_KINDS
    """How cp > 1 may share attention (``ParallelPlan.cp_kind``): ring, ulysses, usp; the ulysses degree is
    searched over the divisors of cp that give an allowed kind."""
    schedules: tuple[str, ...] = tuple(s for s in SCHEDULE_NAMES if s not in ("v-half", "v-min"))
    """Allowed pipeline schedules (pp > 1). By default every built-in one except the memory-capped V-Half
    and V-Min, whose bubble the closed-form screen can only roughly price (``workbench.pipeline.bubble``)."""

    def __post_init__(self) -> None:
        if self.max_devices is not None:
            check_count(
                "Constraints", "max_devices", self.max_devices, maximum=MAX_DEVICES, limit="MAX_DEVICES"
            )
        if (
            not isinstance(self.memory_headroom_frac, int | float)
            or not 0.0 <= self.memory_headroom_frac < 1.0
        ):
            raise ValueError(
                f"Constraints: memory_headroom_frac must be in [0, 1), got {shown(self.memory_headroom_frac)}"
            )
        for name in ("fixed", "maximum"):
            for axis, value in getattr(self, name).items():
                if axis not in AXES:
                    raise ValueError(
                        f"Constraints: {name} names unknown axis {shown(axis)}; allowed: {', '.join(AXES)}"
                    )
                bound, limit = AXIS_MAXIMUM[axis]
                check_count("Constraints", f"{name}[{axis}]", value, maximum=bound, limit=limit)
        self._check_choices()

    def _check_choices(self) -> None:
        bad = [s for s in self.schedules if s not in SCHEDULE_NAMES]
        if bad or not self.schedules:
            raise ValueError(
                f"Constraints: schedules {bad or '()'} unknown; allowed: {', '.join(SCHEDULE_NAMES)}"
            )
        bad_rc = [r for r in self.recompute if r not in RECOMPUTE_CODES]
        if bad_rc or not self.recompute:
            raise ValueError(
                f"Constraints: recompute {bad_rc} unknown; allowed: {', '.join(RECOMPUTE_CODES)}"
            )
        if not self.zero_stages or any(z not in (0, 1, 2, 3) for z in self.zero_stages):
            raise ValueError(f"Constraints: zero_stages must be among 0, 1, 2, 3, got {self.zero_stages!r}")
        sizes = self.micro_batch_sizes
        if (
            not sizes
            or len(sizes) > MAX_CANDIDATES
            or any(
                not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= MAX_GLOBAL_BATCH_SIZE
                for b in sizes
            )
        ):
            raise ValueError(
                f"Constraints: micro_batch_sizes must be 1 to {MAX_CANDIDATES} integers in "
                f"1..{MAX_GLOBAL_BATCH_SIZE:,} (workbench/specs/limits.py), got {shown(sizes)}"
            )
        if not self.sequence_parallel:
            raise ValueError("Constraints: sequence_parallel needs at least one allowed value")
        bad_order = [o for o in self.rank_orders if o not in RANK_ORDERS]
        if bad_order or not self.rank_orders:
            raise ValueError(
                f"Constraints: rank_orders {bad_order or '()'} unknown; allowed: {', '.join(RANK_ORDERS)}"
            )
        bad_cp = [k for k in self.cp_kinds if k not in CP_KINDS]
        if bad_cp or not self.cp_kinds:
            raise ValueError(
                f"Constraints: cp_kinds {bad_cp or '()'} unknown; allowed: {', '.join(CP_KINDS)}"
            )

    def allowed(self, axis: str, candidates: list[int], default_max: int | None = None) -> list[int]:
        """``candidates`` limited by ``fixed[axis]`` and ``maximum[axis]`` (or ``default_max``)."""
        if axis in self.fixed:
            return [c for c in candidates if c == self.fixed[axis]]
        cap = self.maximum.get(axis, default_max)
        return [c for c in candidates if cap is None or c <= cap]


def framework_constraints(constraints: Constraints, framework: FrameworkProfile) -> Constraints:
    """``constraints`` narrowed to what ``framework`` runs: its schedules (none: pp fixed to 1), ZeRO stages
    (with pp fixed above 1, those it runs under a pipeline; otherwise ``workbench.search.grid.stack_mask``
    refuses those plans one by one),
    sequence parallelism, cp and ep only when it offers them. ValueError when nothing allowed is left."""
    changes: dict[str, Any] = {}
    fixed = dict(constraints.fixed)
    if framework.schedules is not None:
        kept = tuple(s for s in constraints.schedules if s in framework.schedules)
        if kept:
            changes["schedules"] = kept
        else:
            if constraints.fixed.get("pp", 1) > 1:
                raise ValueError(
                    f"framework {framework.id} runs none of the schedules {', '.join(constraints.schedules)} "
                    f"(it runs: {', '.join(framework.schedules) or 'no pipeline parallelism'})"
                )
            fixed["pp"] = 1
    runs = framework.zero_stages_with_pipeline if fixed.get("pp", 1) > 1 else framework.zero_stages
    stages = tuple(z for z in constraints.zero_stages if z in runs)
    if not stages:
        with_pp = " with pp > 1" if runs != framework.zero_stages else ""
        raise ValueError(
            f"framework {framework.id} runs none of the ZeRO stages {constraints.zero_stages}{with_pp} "
            f"(it runs: {runs})"
        )
    changes["zero_stages"] = stages
    if not framework.sequence_parallel:
        changes["sequence_parallel"] = (False,)
    orders = tuple(o for o in constraints.rank_orders if o in framework.rank_orders)
    changes["rank_orders"] = orders or framework.rank_orders[:1]
    kinds = tuple(k for k in constraints.cp_kinds if k in framework.cp_kinds)
    changes["cp_kinds"] = kinds or ("ring",)
    offers_cp = framework.context_parallel and bool(kinds)
    for axis, offered in (("cp", offers_cp), ("ep", framework.expert_parallel)):
        if not offered:
            if constraints.fixed.get(axis, 1) > 1:
                raise ValueError(
                    f"framework {framework.id} offers no {axis} > 1 (fixed {axis}={fixed[axis]})"
                )
            fixed[axis] = 1
    return replace(constraints, fixed=fixed, **changes)


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanSpace:
    """The plan space of one cluster size: a layout table times four independent axes.

    ``layout`` rows are the (tp, sequence_parallel, cp, ulysses, pp, vpp, schedule) combinations whose degrees fit the
    device count (tp * cp * pp divides it; dp is the quotient). Every plan is one layout row combined with
    one value of each of ep, micro_batch_size, zero_stage and recompute_code (C order, recompute fastest).
    """

    num_devices: int
    layout: dict[str, np.ndarray]
    """Columns tp, cp, ulysses, pp, dp, vpp (int64), the group strides of the row's rank order (tp_stride,
    cp_stride, dp_stride, pp_stride) and order_code (int16), sequence_parallel (bool), schedule_code (int16: index into
    ``schedule_names``)."""
    ep: np.ndarray
    micro_batch_size: np.ndarray
    zero_stage: np.ndarray
    recompute_code: np.ndarray
    """Index into ``RECOMPUTE_CODES``."""
    schedule_names: tuple[str, ...]

    @property
    def inner_shape(self) -> tuple[int, ...]:
        """Values per inner axis: ep, micro_batch_size, zero_stage, recompute_code."""
        return (len(self.ep), len(self.micro_batch_size), len(self.zero_stage), len(self.recompute_code))

    @property
    def inner_size(self) -> int:
        return int(np.prod(self.inner_shape, dtype=np.int64))

    @property
    def size(self) -> int:
        return len(self.layout["tp"]) * self.inner_size


def _pipeline_table(
    model: ModelSpec, pps: list[int], vpps: list[int], schedules: tuple[str, ...]
) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    rows: list[tuple[int, int, int]] = []
    names = (NO_SCHEDULE, *[s for s in schedules if s != NO_SCHEDULE])
    for pp in pps:
        if pp == 1:
            rows.append((1, 1, 0))
            continue
        for code, name in enumerate(names):
            if name not in schedules:
                continue
            fixed = required_vpp(name)
            for vpp in [fixed] if fixed is not None else vpps:
                rows.append((pp, vpp, code))
    arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return {"pp": arr[:, 0], "vpp": arr[:, 1], "schedule_code": arr[:, 2].astype(np.int16)}, names


def _layout(
    tensor: list[tuple[int, bool]], cps: list[tuple[int, int]], pipeline: dict[str, np.ndarray], n: int
) -> dict:
    """The (tensor, (cp, ulysses), pipeline) combinations whose tp * cp * pp divides ``n``, in C order of the
    three lists. Built pp by pp from the (tp, cp) pairs that divide ``n``, so memory grows with the rows kept,
    not with the full product of the three lists."""
    tp_all = np.array([t[0] for t in tensor], dtype=np.int64).reshape(-1)
    sp_all = np.array([t[1] for t in tensor], dtype=bool).reshape(-1)
    cp_all = np.array([c[0] for c in cps], dtype=np.int64).reshape(-1)
    uly_all = np.array([c[1] for c in cps], dtype=np.int64).reshape(-1)
    t_idx, c_idx = (
        a.ravel() for a in np.meshgrid(np.arange(len(tp_all)), np.arange(len(cp_all)), indexing="ij")
    )
    tc = tp_all[t_idx] * cp_all[c_idx]
    fits = n % np.maximum(tc, 1) == 0
    t_idx, c_idx, tc = t_idx[fits], c_idx[fits], tc[fits]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for pp in np.unique(pipeline["pp"]):
        rows = np.flatnonzero(pipeline["pp"] == pp)
        sel = np.flatnonzero(n % (tc * pp) == 0)
        if sel.size and rows.size:
            parts.append(
                (np.repeat(t_idx[sel], rows.size), np.repeat(c_idx[sel], rows.size), np.tile(rows, sel.size))
            )
    empty = np.zeros(0, dtype=np.int64)
    t_sel, c_sel, p_sel = (np.concatenate([p[k] for p in parts]) if parts else empty for k in range(3))
    order = np.lexsort((p_sel, c_sel, t_sel))
    t_sel, c_sel, p_sel = t_sel[order], c_sel[order], p_sel[order]
    cols = {
        "tp": tp_all[t_sel],
        "sequence_parallel": sp_all[t_sel],
        "cp": cp_all[c_sel],
        "ulysses": uly_all[c_sel],
        "pp": pipeline["pp"][p_sel],
        "vpp": pipeline["vpp"][p_sel],
        "schedule_code": pipeline["schedule_code"][p_sel],
    }
    cols["dp"] = data_parallel_degree(n, tp=cols["tp"], pp=cols["pp"], cp=cols["cp"])
    return cols


def _links(cluster: ClusterSpec, stride: Any, size: Any) -> Any:
    """What a group of ``size`` ranks ``stride`` apart crosses, as one number per row: the level joining its two
    farthest members and how many of them share an innermost-level domain (its per-node fan-out)."""
    far = p2p_level_index(cluster, stride * np.maximum(size - 1, 0))
    inner = level_spans(cluster)[0]
    return far * (MAX_DEVICES + 1) + np.minimum(size, np.maximum(inner // np.maximum(stride, 1), 1))


def _with_orders(
    cols: dict[str, np.ndarray], orders: tuple[str, ...], cluster: ClusterSpec
) -> dict[str, np.ndarray]:
    """Layout rows with an ``order_code`` (index into ``RANK_ORDERS``) and the strides it gives: every row in the
    first order, and in each other order only where some group crosses other links than in the first (another
    level, or another share of a node): elsewhere the order would repeat the plan's costs."""
    base = order_strides(RANK_ORDERS[orders[0]], cols)
    parts = [{**cols, **{k: np.broadcast_to(v, cols["tp"].shape).copy() for k, v in base.items()}}]
    codes = list(RANK_ORDERS)
    parts[0]["order_code"] = np.full(len(cols["tp"]), codes.index(orders[0]), dtype=np.int16)
    for name in orders[1:]:
        code = codes.index(name)
        strides = order_strides(RANK_ORDERS[name], cols)
        moved = np.zeros(len(cols["tp"]), dtype=bool)
        for k, v in strides.items():  # a group of one rank has no links: its stride does not matter
            size = cols[k.removesuffix("_stride")]
            moved |= np.asarray((_links(cluster, v, size) != _links(cluster, base[k], size)) & (size > 1))
        rows = np.flatnonzero(moved)
        part = {k: v[rows] for k, v in cols.items()}
        part |= {k: np.broadcast_to(v, cols["tp"].shape)[rows].copy() for k, v in strides.items()}
        part["order_code"] = np.full(len(rows), code, dtype=np.int16)
        parts.append(part)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _cp_pairs(model: ModelSpec, c: Constraints, candidates: list[int]) -> list[tuple[int, int]]:
    """(cp, ulysses) pairs: each allowed cp with every divisor as its Ulysses degree whose kind
    (``ParallelPlan.cp_kind``) the constraints allow and that can hand each rank whole heads (it divides the
    attention and, unless MLA, the key/value heads: the rule ``ulysses_heads`` with tp = 1); cp = 1 once."""
    heads = model.num_attention_heads
    whole = heads if model.attention == "mla" else math.gcd(heads, model.num_key_value_heads)
    pairs = []
    for cp in c.allowed("cp", candidates):
        for u in c.allowed("ulysses", [d for d in divisors(cp) if whole % d == 0]):
            kind = "none" if cp == 1 else "ring" if u == 1 else "ulysses" if u == cp else "usp"
            if kind == "none" or kind in c.cp_kinds:
                pairs.append((cp, u))
    return pairs


def build_space(model: ModelSpec, cluster: ClusterSpec, constraints: Constraints) -> PlanSpace:
    """The plan space of ``model`` on ``cluster`` under ``constraints``.

    tp, cp and pp range over the divisors of the device count whose product divides it (dp takes the rest),
    pp only up to the model's layers (a stage holds at least one layer: larger pp could only be rejected, and
    on a cluster of 10^5-10^6 devices they would make most of the space);
    tp is capped by default at the span of the innermost network level; ep ranges over the divisors of the
    routed experts (1 for a dense model); vpp over 1..maximum (8 by default); the rest over the constraint's
    lists.
    """
    n = cluster.num_devices
    c = constraints
    tps = c.allowed("tp", divisors(n), default_max=cluster.levels[0].span or n)
    sp_values = sorted(set(c.sequence_parallel))
    tensor = [(tp, sp) for tp in tps for sp in ([False] if tp == 1 else sp_values)]
    vpps = c.allowed("vpp", list(range(1, 65)), default_max=8)
    pps = [
        pp for pp in divisors(n) if pp <= model.num_layers
    ]  # pp*vpp must divide the layers (rule "layers")
    pipeline, names = _pipeline_table(model, c.allowed("pp", pps), vpps, c.schedules)
    eps = c.allowed("ep", divisors(model.num_experts) if model.is_moe else [1])
    mbs = sorted(
        set(c.micro_batch_sizes) | ({c.fixed["micro_batch_size"]} if "micro_batch_size" in c.fixed else set())
    )
    return PlanSpace(
        num_devices=n,
        layout=_with_orders(
            _layout(tensor, _cp_pairs(model, c, divisors(n)), pipeline, n), c.rank_orders, cluster
        ),
        ep=np.array(eps, dtype=np.int64),
        micro_batch_size=np.array(c.allowed("micro_batch_size", mbs), dtype=np.int64),
        zero_stage=np.array(sorted(set(c.zero_stages)), dtype=np.int64),
        recompute_code=np.array(sorted(RECOMPUTE_CODES.index(r) for r in set(c.recompute)), dtype=np.int64),
        schedule_names=names,
    )
