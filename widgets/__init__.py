"""Pictures and controls on top of the core: bokeh figure builders (``workbench_widgets.plots``), the self-contained
HTML report (``workbench_widgets.report``), and the Panel / ipywidgets front ends.

Kept light on purpose: importing ``widgets`` imports neither bokeh nor panel; the submodules do.
"""


def __getattr__(name: str) -> object:
    """``from workbench_widgets import Workbench`` imports the notebook workbench (and Panel) only when asked for."""
    if name == "Workbench":
        from workbench_widgets.notebook import Workbench

        return Workbench
    raise AttributeError(f"module 'workbench_widgets' has no attribute {name!r}")
