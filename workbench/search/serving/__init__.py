"""The serving plan search: the highest SLO-goodput per device over the serving plans of a cluster.

``serve_search`` (``planner``) walks the plan space of ``space`` (engine layouts, replicas, dtypes, batching,
disaggregated prefill:decode splits), screens every plan in closed form (``screen``), simulates the best with the
request simulator of :mod:`workbench.serving` and returns a ``ServingSearchResult`` (``result``); its Pareto sets
come from :func:`workbench.search.frontier.pareto_mask`.
"""

from workbench.search.serving.planner import NO_TARGET_RATE_PER_S, serve_search, with_dollars
from workbench.search.serving.result import SCREEN_COLUMNS, TABLE_COLUMNS, ServingSearchResult
from workbench.search.serving.space import REASONS, ServingSearchConstraints

__all__ = [
    "NO_TARGET_RATE_PER_S",
    "REASONS",
    "SCREEN_COLUMNS",
    "TABLE_COLUMNS",
    "ServingSearchConstraints",
    "ServingSearchResult",
    "serve_search",
    "with_dollars",
]
