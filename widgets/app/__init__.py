"""The interactive workbench in Panel, in four roles (Panel's own guidance):

- ``state.WorkbenchState``: the user's choices, parameters only;
- ``store.WorkbenchStore``: calls the core and the backends, holds the Estimate and the tables;
- ``views`` / ``compare_search``: presentation (controls built from the State, figures from ``workbench_widgets.plots``);
- ``tabs.TABS``: the tab registry (a title, the tab's store slice, its view); the Serving, Mixed cluster, Goodput
  and run-compare tabs have their own State and Store in the same style (``*_store``, ``run_compare``);
- ``app.WorkbenchApp`` / ``app.build_app``: composition, one per session; ``server`` serves it.

``launcher.setup_workbench_proxy`` is the JupyterLab launcher entry (jupyter-server-proxy); it is loaded by
the Jupyter server at start-up, so this package imports Panel only when one of the names below is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

_EXPORTS: Mapping[str, str] = MappingProxyType(
    {
        "WorkbenchApp": "workbench_widgets.app.app",
        "build_app": "workbench_widgets.app.app",
        "WorkbenchState": "workbench_widgets.app.state",
        "WorkbenchStore": "workbench_widgets.app.store",
    }
)
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'workbench_widgets.app' has no attribute {name!r}")
