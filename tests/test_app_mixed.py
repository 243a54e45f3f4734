"""The app's Mixed cluster tab in process: pools composed in rows (or typed in the command line's form), planned on
a button press in a worker thread, ranked as ``workbench.hetero``'s planner ranks them for the same inputs, each
pool alone beside them, the selected plan drawn; a bad composition is said in the tab; the command it shows and
the TOML it writes reproduce its numbers."""

from __future__ import annotations

import asyncio
import json
import shlex
import threading
import tomllib

import pytest

pytest.importorskip("panel")

from click.testing import CliRunner  # noqa: E402
from workbench_cli import cli  # noqa: E402
from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.app.mixed_view import MixedView  # noqa: E402
from workbench_widgets.app.state import WorkbenchState  # noqa: E402
from workbench_widgets.app.tabs import tab_index  # noqa: E402

from workbench.presets.catalog import profiles_dir  # noqa: E402

SMALL = [("dgx-h100", 1), ("dgx-a100", 1)]
LLAMA_31_8B_LAYERS = 32  # Llama 3 herd paper, Table 3: 8B has 32 layers
HDR_GBPS = 200 / 8  # one ConnectX-6 HDR port, 200 Gb/s, per A100 (DGX A100 user guide): 25 GB/s


def _small(view: MixedView) -> MixedView:
    s = view.store.state
    s.param.update(pools=list(SMALL), model_preset="llama-3.1-8b", seq_len=2048, global_batch_size=32)
    return view


@pytest.fixture(scope="module")
def ran() -> MixedView:
    """A view after one run of the small composition (the planner takes about a second)."""
    view = _small(MixedView())
    view.panel()
    asyncio.run(view.run())
    return view


def test_the_view_opens_on_two_pools_and_plans_nothing_yet() -> None:
    view = MixedView()
    view.panel()
    assert view.store.state.pools == [("dgx-h100", 4), ("dgx-a100", 4)]
    assert len(view.rows.objects) == 2 and view.text.value == "dgx-h100:4+dgx-a100:4"
    assert (
        view.store.result is None
        and not view.results.visible
        and "Plan over the pools" in view.message.object
    )
    assert view.bandwidth.placeholder == f"empty: {HDR_GBPS:g}"  # the A100 pool's NIC is the slower end


def test_the_table_ranks_as_the_planner_does(ran: MixedView) -> None:
    from workbench.presets.calibration import load_calibration
    from workbench.presets.catalog import load_model
    from workbench.presets.pools import load_mixed_cluster
    from workbench.search.mixed.planner import MixedOptions, plan_mixed
    from workbench.search.space import DEFAULT_HEADROOM_FRAC
    from workbench.specs.plan import Workload

    core = plan_mixed(
        load_model("llama-3.1-8b"),
        load_mixed_cluster("dgx-h100:1+dgx-a100:1"),
        Workload(seq_len=2048, global_batch_size=32, dtype="bf16"),
        options=MixedOptions(headroom_frac=DEFAULT_HEADROOM_FRAC, top_k=20),
        calibration=load_calibration("default"),
    )
    table = ran.table.value
    assert core.best is not None and ran.results.visible and ran.message.object == ""
    assert list(table["plan"]) == [e.description for e in core.plans]
    assert table["tokens/s"][0] == pytest.approx(core.best.tokens_per_s, abs=0.05)
    assert table["MFU (%)"][0] == pytest.approx(100 * core.best.mfu, abs=0.005)
    assert table["step (s)"][0] == pytest.approx(core.best.step_time_s, abs=5e-5)
    assert set(table["kind"]) == {"pipeline", "split"} and set(table["fits"]) <= {"yes", "no"}
    alone = ran.alone.object
    assert list(alone["pool"]) == ["dgx-h100", "dgx-a100"]
    assert list(alone["plan (alone)"]) == [a.plan.describe() for a in core.alone]
    assert "over the fastest pool alone" in ran.summary.object


def test_the_selected_plan_is_drawn(ran: MixedView) -> None:
    plans = ran.store.result.plans
    for row in (0, len(plans) - 1):  # the best pipeline and the last (a batch split)
        ran.table.selection = [row]
        est = plans[row]
        data = ran.figures["placement"].object.renderers[0].data_source.data
        assert est.description in ran.figures["placement"].object.title.text
        if est.kind == "pipeline":  # one pipeline: its stages cover every layer once
            assert (
                sum(r - left for left, r in zip(data["left"], data["right"], strict=True))
                == LLAMA_31_8B_LAYERS
            )
        stage_ms = ran.figures["stage_time"].object.renderers[0].data_source.data["stage_ms"]
        st = est.stages
        assert list(stage_ms) == pytest.approx(
            [(f + b) * 1e3 for f, b in zip(st["forward_s"], st["backward_s"], strict=True)]
        )
        assert list(ran.stages.object["pool"]) == list(st["pool"])
    ran.table.selection = [0]


def test_the_command_it_shows_reproduces_the_table(ran: MixedView) -> None:
    args = shlex.split(ran.store.cli_command())
    assert args[:2] == ["workbench", "plan"] and "dgx-h100:1+dgx-a100:1" in args
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    mine = ran.store.result.plans
    assert [p["plan"] for p in out["plans"]] == [e.description for e in mine]
    assert out["plans"][0]["tokens_per_s"] == pytest.approx(mine[0].tokens_per_s, rel=1e-12)


def test_the_report_is_of_the_selected_plan(ran: MixedView) -> None:
    assert not ran.download.disabled
    ran.table.selection = [2]
    page = ran._report_file().getvalue().decode("utf-8")
    ran.table.selection = [0]
    assert "Plans for llama-3.1-8b on a mixed cluster" in page and "Plan #3" in page
    assert "workbench plan --model llama-3.1-8b --cluster dgx-h100:1+dgx-a100:1" in page


def test_the_planner_runs_off_the_callers_thread_with_the_button_off(ran: MixedView) -> None:
    view = _small(MixedView())
    seen = {}

    def search(inputs):
        seen.update(thread=threading.current_thread(), disabled=view.button.disabled,
                    busy=view.progress.visible, running=view.store.running)  # fmt: skip
        return ran.store.result

    view.store.search = search
    asyncio.run(view.run())
    assert seen["thread"] is not threading.current_thread()
    assert seen["disabled"] and seen["busy"] and seen["running"]
    assert not view.button.disabled and not view.progress.visible and view.store.result is ran.store.result


@pytest.mark.parametrize(
    ("pools", "said"),
    [
        ([("dgx-h100", 1)], "needs at least two pools, got 1"),
        ([("dgx-h100", 1), ("dgx-a100", 0)], "pool 2 (dgx-a100): nodes must be a whole number 1.."),
        (
            [("dgx-h100", 1), ("dgx-z9", 2)],
            "pool 2: unknown cluster preset 'dgx-z9'; known: amd-mi300x-platform,",
        ),
    ],
)
def test_a_bad_composition_is_said_in_the_tab(ran: MixedView, pools, said) -> None:
    view = _small(MixedView())
    view.panel()
    view.store.accept(ran.store.result)  # an earlier run's results are hidden, not left as if they were these
    view.store.state.pools = pools
    asyncio.run(view.run())
    assert said in view.message.object and view.message.object.startswith("**No plan:**")
    assert view.store.result is None and not view.results.visible and view.download.disabled
    assert not view.button.disabled


def test_rows_and_the_text_form_edit_the_same_pools() -> None:
    view = MixedView()
    view.panel()
    state = view.store.state
    view.add.clicks += 1  # a copy of the last row
    assert state.pools[-1] == ("dgx-a100", 4) and len(view.rows.objects) == 3
    view.rows.objects[2][1].value, view.rows.objects[2][2].value = "dgx-b200", 2
    assert state.pools[2] == ("dgx-b200", 2) and view.text.value == "dgx-h100:4+dgx-a100:4+dgx-b200:2"
    view.rows.objects[0][3].clicks += 1  # remove pool 1
    assert state.pools == [("dgx-a100", 4), ("dgx-b200", 2)] and len(view.rows.objects) == 2
    view.text.value = "dgx-h200:2+dgx-a100:3"
    assert state.pools == [("dgx-h200", 2), ("dgx-a100", 3)]
    assert [(r[1].value, r[2].value) for r in view.rows.objects] == state.pools
    view.text.value = "dgx-h200:2+dgx-q:1"  # refused: the pools stay
    assert "Pools not changed" in view.message.object and "dgx-q" in view.message.object
    assert state.pools == [("dgx-h200", 2), ("dgx-a100", 3)]
    view.rows.objects[1][3].clicks += 1
    assert view.rows.objects[0][3].disabled  # the last row stays


def test_a_mixed_preset_fills_the_rows_and_the_shared_level(tmp_path) -> None:
    from workbench.presets.pools import load_mixed_cluster

    view = MixedView()
    view.preset.value = "h100-a100-ib"
    data = tomllib.loads((profiles_dir() / "clusters" / "mixed" / "h100-a100-ib.toml").read_text())
    state = view.store.state
    assert state.pools == [(p["cluster"], p["num_nodes"]) for p in data["pools"]]
    assert (state.shared_bandwidth_GBps, state.shared_latency_us) == (
        data["shared"]["bandwidth_GBps"],
        data["shared"]["latency_us"],
    )
    state.shared_bandwidth_GBps = 12.5
    link = view.store.cluster().link
    assert link.bytes_per_s == 12.5e9 and link.latency_s == pytest.approx(data["shared"]["latency_us"] * 1e-6)
    assert "--cluster mixed-cluster.toml" in view.store.cli_command()
    path = tmp_path / "mixed-cluster.toml"
    path.write_bytes(view._toml_file().getvalue())
    again = load_mixed_cluster(str(path))
    assert again.pools == view.store.cluster().pools and again.link == link


def test_the_app_has_a_mixed_cluster_tab_of_its_own() -> None:
    app = WorkbenchApp(WorkbenchState())
    app.panel()
    assert app.tabs._names[tab_index("mixed")] == "Mixed cluster"
    assert app.views["mixed"].store.result is None  # nothing planned before the button
    other = WorkbenchApp(WorkbenchState())
    assert other.views["mixed"].store.state is not app.views["mixed"].store.state  # sessions share no choice
