"""What the app opens on (issue 19): the plan the planner ranks first for the app's default inputs, on the
cluster preset as the catalog has it.

The expected plan is computed here, independently of the app, through the core planner API with the inputs
and defaults of ``workbench plan --model llama-3.1-70b --cluster dgx-h100 --nodes 8 --seq-len 8192
--global-batch 256`` (top 20 refined, 5 % of the memory kept free), and once through that command itself.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import pytest

pytest.importorskip("panel")

from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.app.state import APP_PLAN_FIELDS, WorkbenchState  # noqa: E402

from workbench.presets.calibration import load_calibration  # noqa: E402
from workbench.presets.catalog import load_cluster, load_model  # noqa: E402
from workbench.presets.frameworks import DEFAULT_FRAMEWORK  # noqa: E402
from workbench.specs.axes import plan_axis  # noqa: E402
from workbench.specs.hardware import DType  # noqa: E402
from workbench.specs.plan import Workload, rank_order_name  # noqa: E402

DEFAULT_INPUTS = ("--model", "llama-3.1-70b", "--cluster", "dgx-h100", "--nodes", "8")
CLI_HEADROOM_FRAC = 0.05
"""``workbench plan``'s default ``--headroom`` (80 GiB -> 76 GiB usable)."""
DEFAULT_WORKLOAD = ("--seq-len", "8192", "--global-batch", "256")


@pytest.fixture(scope="module")
def planned() -> Any:
    """The core planner's result for the app's default inputs, as ``workbench plan`` calls it."""
    from workbench.search import Constraints, search

    return search(
        load_model("llama-3.1-70b"),
        load_cluster("dgx-h100", num_nodes=8),
        Workload(seq_len=8192, global_batch_size=256, dtype=DType.BF16),
        Constraints(memory_headroom_frac=CLI_HEADROOM_FRAC),
        top_k=20,
        calibration=load_calibration("default", framework=DEFAULT_FRAMEWORK),
    )


@pytest.fixture(scope="module")
def app() -> WorkbenchApp:
    wb = WorkbenchApp()
    wb.panel()
    return wb


def test_the_app_opens_on_the_planners_best_plan(app: WorkbenchApp, planned: Any) -> None:
    first = planned.plans.row(0, named=True)
    assert first["refined"] and first["fits"]  # the planner's #1 for these inputs is a refined plan that fits
    best = planned.estimates[0].plan
    assert first["plan"] == best.describe()
    assert app.store.plan() == best
    shown = app.store.estimate
    assert shown is not None and shown.plan == best and shown.fits
    assert shown.tokens_per_s == pytest.approx(first["tokens_per_s"], rel=1e-9)
    for (
        field
    ) in APP_PLAN_FIELDS:  # the controls show it too (a None as the control's 0, a rank order by name)
        assert getattr(app.state, field) == plan_axis(field).face_value(getattr(best, field)), field
    assert app.state.etp == (best.etp or 0) and app.state.rank_order == rank_order_name(best.rank_order)
    assert app.state.recompute_num_layers == (best.recompute_num_layers or 0)
    assert best.describe() in app.views["plan"].summary.object


def test_it_is_the_plan_the_cli_ranks_first(app: WorkbenchApp, workbench_cli: Any) -> None:
    proc = workbench_cli("plan", *DEFAULT_INPUTS, *DEFAULT_WORKLOAD, "--json", check=True)
    first = json.loads(proc.stdout)["plans"][0]
    assert first["plan"] == app.store.plan().describe()
    assert first["tokens_per_s"] == pytest.approx(app.store.estimate.tokens_per_s, rel=1e-9)


def test_the_default_cluster_is_the_preset_unedited(app: WorkbenchApp) -> None:
    """The cluster the app prices is the catalog's (NVLS, storage and all), not a copy that lost the fields
    the controls do not show."""
    preset = load_cluster("dgx-h100", num_nodes=8)
    cluster = app.store.cluster_spec()
    assert cluster == preset, [
        f.name for f in fields(preset) if getattr(cluster, f.name) != getattr(preset, f.name)
    ]
    assert "(edited)" not in cluster.name
    app.state.scale_out_bandwidth_GBps = 25.0  # an edit keeps the hidden fields and says it is edited
    try:
        edited = app.store.cluster_spec()
        assert edited.name.endswith("(edited)") and edited.levels[-1].bytes_per_s == pytest.approx(25e9)
        assert edited.levels[0] == preset.levels[0] and edited.storage == preset.storage
    finally:
        app.state.scale_out_bandwidth_GBps = preset.levels[-1].bytes_per_s / 1e9


def test_given_choices_are_kept_and_the_search_runs_once() -> None:
    from workbench_widgets.app.planner import best_search as best_plan  # the memoised search behind it

    before = best_plan.cache_info()
    kept = WorkbenchApp(WorkbenchState())  # a given State is shown as it is: the parameters' defaults
    assert (kept.state.tp, kept.state.pp, kept.state.schedule) == (8, 8, "1f1b")
    assert best_plan.cache_info().misses == before.misses
    WorkbenchApp()
    WorkbenchApp()
    after = best_plan.cache_info()
    assert after.misses <= before.misses + 1 and after.hits >= before.hits + 1  # new sessions reuse it


def test_the_search_tab_ranks_it_first_too(app: WorkbenchApp, planned: Any) -> None:
    """The Search tab ranks with the same defaults (fitted constants, memory headroom) as the command."""
    frame = app.store.search(top_k=20)
    assert frame["plan"].to_list()[:5] == planned.plans["plan"].to_list()[:5]
    assert frame.row(0, named=True)["plan"] == app.store.plan().describe()
