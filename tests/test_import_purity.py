"""``import workbench`` (and every core module) pulls in neither torch nor a UI library, and stays fast."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

HEAVY = ("torch", "bokeh", "panel", "ipywidgets", "jupyterlab")

PROBE_TEMPLATE = """
import importlib, json, pkgutil, sys, time
t0 = time.perf_counter()
import workbench
elapsed = time.perf_counter() - t0
for info in pkgutil.walk_packages(workbench.__path__, "workbench."):
    if info.name.endswith("__main__"):
        continue
    importlib.import_module(info.name)
print(json.dumps({"elapsed_s": elapsed, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
"""
PROBE = f"HEAVY = {HEAVY!r}\n" + PROBE_TEMPLATE


def test_core_imports_no_heavy_module() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [], f"workbench pulled in {result['loaded']}"
    assert result["elapsed_s"] < 2.0  # design target 0.5 s; the bound allows for a cold, loaded CI machine
