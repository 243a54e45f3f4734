"""The planner: enumerate every parallel plan, screen them in closed form, refine the best, explain.

``search(model, cluster, workload, constraints)`` returns a ``SearchResult`` (frames documented in
:mod:`workbench.search.result`). Modules: ``space`` (constraints and the plan space), ``grid`` (chunks of plan
columns and rule checks), ``screen`` (the step model of :mod:`workbench.cost.step` on arrays, with the
closed-form pipeline terms),
``rank`` (objectives, top-k), ``run`` (the chunked screen), ``refine`` (full backend, explanations),
``planner`` (``search``). Shared by every strategy: ``frontier`` (the Pareto mask, divisors, the tie band).
Across cluster sizes: ``sizes`` (the best plan per node count, a plan scaled over node counts). The serving
plan search: the ``serving`` subpackage.
"""

from workbench.search.grid import REASONS
from workbench.search.planner import search
from workbench.search.rank import DEFAULT_TOKEN_BUDGET, OBJECTIVES
from workbench.search.result import SearchResult
from workbench.search.space import Constraints

__all__ = ["DEFAULT_TOKEN_BUDGET", "OBJECTIVES", "REASONS", "Constraints", "SearchResult", "search"]
