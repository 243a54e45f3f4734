"""Pictures and controls on top of the core: bokeh figure builders (``widgets.plots``), the self-contained
HTML report (``widgets.report``), and the Panel / ipywidgets front ends.

Kept light on purpose: importing ``widgets`` imports neither bokeh nor panel; the submodules do.
"""


def __getattr__(name: str) -> object:
    """``from widgets import Workbench`` imports the notebook workbench (and Panel) only when asked for."""
    if name == "Workbench":
        from widgets.notebook import Workbench

        return Workbench
    raise AttributeError(f"module 'widgets' has no attribute {name!r}")
