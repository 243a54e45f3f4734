"""The app's calls into the planner (``workbench.search.search``).

``run_planner``: the Search tab's search, with progress as one fraction. The planner screens the whole plan
space (reported as ``(done, total)`` plans) and then refines the best ``top_k`` with a backend (reported per
refined plan); this adapter maps both phases onto 0..1 (screen: 0 to SCREEN_SHARE, refinement: the rest) and
hands back the planner's ``SearchResult`` unchanged.

``best_plan``: the plan a new session opens on, the one ``workbench plan`` ranks first for the same inputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from workbench.search.space import DEFAULT_HEADROOM_FRAC
from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

BEST_PLAN_TOP_K = 20
"""Plans the start-up search refines: the default of ``workbench plan --top``, so that the app opens on the
plan the command ranks first."""
HEADROOM_FRAC = DEFAULT_HEADROOM_FRAC
"""Share of device memory a plan must leave free, in the opening plan and the Search tab: the core's default
(``workbench.search.space.DEFAULT_HEADROOM_FRAC``, which says why), the same as ``workbench plan --headroom``."""
SCREEN_SHARE = 0.6
"""Share of the progress bar given to the closed-form screen (it is fast; refinement runs the simulator)."""


def run_planner(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    *,
    progress: Callable[[float], None] | None = None,
    top_k: int = 20,
    **options: Any,
) -> Any:
    """``workbench.search.search(model, cluster, workload, top_k=top_k, **options)`` with progress 0..1."""
    from workbench.search import search

    def screened(done: int, total: int) -> None:
        if progress is not None and total:
            progress(SCREEN_SHARE * done / total)

    def refined(done: int) -> None:
        if progress is not None and top_k:
            progress(SCREEN_SHARE + (1 - SCREEN_SHARE) * min(done, top_k) / top_k)

    result = search(
        model, cluster, workload, top_k=top_k, progress=screened, refine_progress=refined, **options
    )
    if progress is not None:
        progress(1.0)
    return result


def best_plan(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, framework: str
) -> ParallelPlan | None:
    """The first plan the planner ranks for these inputs, priced with ``framework``'s profile and fitted
    constants, as ``workbench plan`` ranks it with its defaults (throughput objective, ``--top``
    BEST_PLAN_TOP_K, ``--headroom`` HEADROOM_FRAC, the analytic backend); the first refined plan
    that fits, None when none does.

    A pure function of frozen specs, memoised per process (a served app opens every session on the same
    default inputs: one search, about a second, at the first session). The plan is frozen, so sessions share
    nothing they could change.
    """
    result = best_search(model, cluster, workload, framework)
    fits = result.plans.head(len(result.estimates))["fits"].to_list()
    return next((e.plan for e, ok in zip(result.estimates, fits, strict=True) if ok), None)


def best_plan_why(model: ModelSpec, cluster: ClusterSpec, workload: Workload, framework: str) -> str:
    """Why the planner ranks ``best_plan`` first: ``SearchResult.explanation`` of the same (memoised) search,
    '' with fewer than two plans."""
    return best_search(model, cluster, workload, framework).explanation


@functools.lru_cache(maxsize=8)
def best_search(model: ModelSpec, cluster: ClusterSpec, workload: Workload, framework: str) -> Any:
    """The search behind ``best_plan`` (a ``SearchResult``), memoised per process."""
    from workbench.presets.calibration import load_calibration
    from workbench.search import Constraints, search

    return search(
        model,
        cluster,
        workload,
        Constraints(memory_headroom_frac=HEADROOM_FRAC),
        top_k=BEST_PLAN_TOP_K,
        calibration=load_calibration(framework=framework),
    )
