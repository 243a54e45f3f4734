"""The Search tab's call into the planner (``workbench.search.search``), with progress as one fraction.

The planner screens the whole plan space (reported as ``(done, total)`` plans) and then refines the best
``top_k`` with a backend (reported per refined plan); this adapter maps both phases onto 0..1 (screen:
0 to SCREEN_SHARE, refinement: the rest) and hands back the planner's ``SearchResult`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.plan import Workload

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
