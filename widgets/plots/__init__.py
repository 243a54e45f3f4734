"""Figure builders: pure functions from core results (``Estimate``, a search frame, a plan and a cluster)
to bokeh models. The Panel app, the notebook widgets and the HTML report reuse them.

- ``estimate_timeline_figure`` / ``timeline_figure``: pipeline timeline (aggregated beyond ``MAX_BLOCKS``)
- ``comparison_timeline_figure``: predicted and measured timelines of one plan on the same axes
- ``estimate_memory_figure`` / ``memory_figure``: memory per rank against the device capacity
- ``estimate_activation_figure`` / ``activation_figure``: live activation memory over the step
- ``estimates_breakdown_figure`` / ``breakdown_figure``: step-time breakdown
- ``search_figure``: search space with the Pareto frontier
- ``placement_figure``: ranks on the nodes x devices grid
"""

from workbench_widgets.plots.breakdown import breakdown_figure, estimates_breakdown_figure
from workbench_widgets.plots.compare import comparison_timeline_figure, step_time_error_frac
from workbench_widgets.plots.memory import (
    activation_figure,
    estimate_activation_figure,
    estimate_memory_figure,
    memory_figure,
)
from workbench_widgets.plots.placement import placement_figure
from workbench_widgets.plots.search import SEARCH_COLUMNS, search_figure
from workbench_widgets.plots.timeline import MAX_BLOCKS, estimate_timeline_figure, timeline_figure

__all__ = [
    "MAX_BLOCKS",
    "SEARCH_COLUMNS",
    "activation_figure",
    "breakdown_figure",
    "comparison_timeline_figure",
    "estimate_activation_figure",
    "estimate_memory_figure",
    "estimate_timeline_figure",
    "estimates_breakdown_figure",
    "memory_figure",
    "placement_figure",
    "search_figure",
    "step_time_error_frac",
    "timeline_figure",
]
