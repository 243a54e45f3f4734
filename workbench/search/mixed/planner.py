"""``plan_mixed``: rank plans over the pools of a ``MixedCluster`` (pipelines across pools and batch splits).

Two families (:mod:`workbench.estimate.mixed`):

- pipelines across pools (:mod:`workbench.search.mixed.pipeline`): every order of the pools, dp, tp per pool,
  micro-batch, ZeRO stage 0/1, recompute and one-stage-per-rank schedule, stages sized per pool; screened in
  closed form, the ``top_k`` best simulated;
- whole replicas per pool with the batch split by speed (:mod:`workbench.search.mixed.split`), each pool's plan from
  the homogeneous planner.

Plans that fit come first, fastest first. The result also keeps each pool's best plan alone on the whole
batch (the homogeneous planner's #1) so a caller can say what mixing the pools buys.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.search import Constraints
from workbench.search.mixed.layouts import layouts
from workbench.search.mixed.pipeline import PipelinePricer
from workbench.search.mixed.split import SplitPlanner, best_estimate
from workbench.search.space import DEFAULT_HEADROOM_FRAC
from workbench.specs.limits import check_count

if TYPE_CHECKING:
    from workbench.estimate.mixed import MixedEstimate
    from workbench.presets.calibration import Calibration
    from workbench.specs.estimate import Estimate
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload
    from workbench.specs.pools import MixedCluster

FAMILIES: tuple[str, ...] = ("pipeline", "split")
PIPELINE_SCHEDULES: tuple[str, ...] = ("1f1b", "zb-h1", "gpipe")
"""Schedules a pipeline across pools may run: one stage per rank (uneven stages, no virtual chunks)."""


@dataclass(frozen=True, kw_only=True)
class MixedOptions:
    """What ``plan_mixed`` searches. Every tuple must be non-empty."""

    tp: tuple[int, ...] = (1, 2, 4, 8)
    """Tensor-parallel degrees a pool may use (those that fit a node and split the heads are kept)."""
    micro_batch_sizes: tuple[int, ...] = (1, 2)
    zero_stages: tuple[int, ...] = (0, 1)
    """ZeRO stages of the pipeline family (sharding over each stage's dp replicas)."""
    recompute: tuple[str, ...] = ("none", "selective", "full")
    schedules: tuple[str, ...] = ("1f1b", "zb-h1")
    """Pipeline schedules, from ``PIPELINE_SCHEDULES``."""
    headroom_frac: float = DEFAULT_HEADROOM_FRAC
    """Share of every device's memory kept free (as ``workbench plan --headroom``)."""
    max_pp: int = 64
    """Deepest pipeline tried."""
    top_k: int = 5
    """Pipeline layouts simulated after the screen."""
    families: tuple[str, ...] = FAMILIES

    def __post_init__(self) -> None:
        for name in ("tp", "micro_batch_sizes", "zero_stages", "recompute", "schedules", "families"):
            if not getattr(self, name):
                raise ValueError(f"MixedOptions: {name} needs at least one value")
        bad = [s for s in self.schedules if s not in PIPELINE_SCHEDULES]
        if bad:
            raise ValueError(
                f"MixedOptions: schedules {bad} cannot run uneven stages across pools; allowed: "
                f"{', '.join(PIPELINE_SCHEDULES)}"
            )
        if [f for f in self.families if f not in FAMILIES]:
            raise ValueError(
                f"MixedOptions: families must be from {', '.join(FAMILIES)}, got {self.families}"
            )
        if [z for z in self.zero_stages if z not in (0, 1)]:
            raise ValueError(f"MixedOptions: zero_stages must be 0 or 1, got {self.zero_stages}")
        if not 0.0 <= self.headroom_frac < 1.0:
            raise ValueError(f"MixedOptions: headroom_frac must be in [0, 1), got {self.headroom_frac!r}")
        check_count("MixedOptions", "max_pp", self.max_pp, maximum=4096)
        check_count("MixedOptions", "top_k", self.top_k, maximum=1000)


@dataclass(frozen=True, kw_only=True)
class MixedSearchResult:
    """Plans over pools, best first (those that fit first), and each pool's best plan alone."""

    model: ModelSpec
    cluster: MixedCluster
    workload: Workload
    options: MixedOptions
    plans: tuple[MixedEstimate, ...]
    alone: tuple[Estimate | None, ...]
    """Per pool, the homogeneous planner's best plan on the whole batch (None: nothing fits)."""
    num_layouts: int
    """Pipeline layouts screened."""
    search_s: float
    notes: tuple[str, ...] = field(default=())

    @property
    def best(self) -> MixedEstimate | None:
        return self.plans[0] if self.plans and self.plans[0].fits else None

    def summary(self) -> dict[str, Any]:
        """Plain JSON: the cluster, the ranked plans (with their stages) and each pool alone."""
        return {
            "cluster": self.cluster.id,
            "pools": [
                {"label": lab, "cluster": p.id, "device": p.device.id, "num_nodes": p.num_nodes}
                for lab, p in zip(self.cluster.labels, self.cluster.pools, strict=True)
            ],
            "shared_level": {"name": self.cluster.link.name, "bytes_per_s": self.cluster.link.bytes_per_s},
            "model": self.model.name,
            "plans": [e.summary() for e in self.plans],
            "alone": [
                None if a is None else {"plan": a.plan.describe(), "tokens_per_s": a.tokens_per_s}
                for a in self.alone
            ],
            "num_layouts": self.num_layouts,
            "search_s": self.search_s,
            "notes": list(self.notes),
        }


def plan_mixed(
    model: ModelSpec,
    cluster: MixedCluster,
    workload: Workload,
    *,
    options: MixedOptions | None = None,
    calibration: Calibration | str | None = None,
) -> MixedSearchResult:
    """Search plans for ``model`` over the pools of ``cluster`` (module docstring). ``calibration``: as
    ``workbench.search.search`` (a Calibration, a name or path; default ``default``). Raises ValueError for bad
    options. No plan that fits is not an error: ``best`` is None and ``plans`` holds what was priced."""
    from workbench.presets.calibration import Calibration as _Cal
    from workbench.presets.calibration import load_calibration

    opts = options or MixedOptions()
    cal = calibration if isinstance(calibration, _Cal) else load_calibration(calibration or "default")
    start = time.perf_counter()
    splitter = SplitPlanner(
        model, cluster, workload, cal, Constraints(memory_headroom_frac=opts.headroom_frac)
    )
    found: list[MixedEstimate] = []
    notes: list[str] = []
    num_layouts = 0
    if "pipeline" in opts.families and model.is_moe:
        notes.append("pipelines across pools are planned for dense models only; MoE: whole replicas per pool")
    elif "pipeline" in opts.families:
        candidates = _bounded_layouts(cluster, model, workload, opts)
        num_layouts = len(candidates)
        found += _pipelines(model, cluster, workload, cal, opts, candidates)
    if "split" in opts.families:
        found += splitter.plans()
    alone = tuple(best_estimate(splitter.alone(k)) for k in range(cluster.num_pools))
    found.sort(key=lambda e: (not e.fits, e.step_time_s))
    return MixedSearchResult(
        model=model,
        cluster=cluster,
        workload=workload,
        options=opts,
        plans=tuple(found),
        alone=alone,
        num_layouts=num_layouts,
        search_s=time.perf_counter() - start,
        notes=tuple(notes),
    )


def _bounded_layouts(
    cluster: MixedCluster, model: ModelSpec, workload: Workload, opts: MixedOptions
) -> list[Any]:
    """The pipeline layouts (``layouts``); ValueError, with the size of the work, when there are more than
    ``limits.MAX_MIXED_LAYOUTS`` (enumeration stops there, so the refusal itself is quick)."""
    from workbench.search.mixed.layouts import layout_work
    from workbench.specs.limits import MAX_MIXED_LAYOUTS

    candidates = list(itertools.islice(layouts(cluster, model, workload, opts), MAX_MIXED_LAYOUTS + 1))
    if len(candidates) > MAX_MIXED_LAYOUTS:
        work = layout_work(cluster, model, workload, opts)
        raise ValueError(
            f"plan_mixed: more than {MAX_MIXED_LAYOUTS:,} pipeline layouts to price over {cluster.num_pools} pools "
            f"(up to {work:,}: pool orders x tp per pool x dp x micro-batch, ZeRO, recompute and schedule "
            f"choices); at most {MAX_MIXED_LAYOUTS:,} (MAX_MIXED_LAYOUTS in workbench/specs/limits.py): give fewer "
            "distinct pools (identical pools cost little), or fewer micro-batch sizes, ZeRO stages, recompute "
            "modes or schedules"
        )
    return candidates


def _pipelines(
    model: ModelSpec,
    cluster: MixedCluster,
    workload: Workload,
    cal: Calibration,
    opts: MixedOptions,
    candidates: list[Any],
) -> list[MixedEstimate]:
    """Screen every layout, simulate the ``top_k`` best."""
    pricer = PipelinePricer(model, cluster, workload, cal, opts.headroom_frac)
    pricer.prepare(candidates)
    splits = [s for lay in candidates if (s := pricer.split(lay)) is not None]
    splits.sort(key=lambda s: s.screen_step_s)
    return [pricer.estimate(s) for s in splits[: opts.top_k]]
