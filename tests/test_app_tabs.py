"""The app's tabs come from one registry (``workbench_widgets.app.tabs.TABS``): each tab's store slice and view are
made from its entry, a new entry is a new tab with nothing else wired by hand, and the Compare tab shows a real
run beside its prediction (issue 47's "the app's Compare tab")."""

from __future__ import annotations

import base64
import json
import statistics
from pathlib import Path

import pytest

pytest.importorskip("panel")

import panel as pn  # noqa: E402
import param  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from workbench_cli import cli  # noqa: E402
from workbench_widgets.app import app as app_module  # noqa: E402
from workbench_widgets.app import tabs  # noqa: E402
from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.app.run_compare import MAX_RUN_BYTES, RunCompareView  # noqa: E402
from workbench_widgets.app.state import WorkbenchState  # noqa: E402
from workbench_widgets.app.store import WorkbenchStore  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "launch"


@pytest.fixture(scope="module")
def app() -> WorkbenchApp:
    return WorkbenchApp(WorkbenchState())  # no start-up search


def test_every_registered_tab_is_shown_in_order_with_its_store_slice(app: WorkbenchApp) -> None:
    assert app.tabs._names == [t.title for t in tabs.TABS]
    assert list(app.views) == [t.key for t in tabs.TABS]
    for key in ("plan", "search", "compare"):  # these show the training Store itself
        assert app.stores[key] is app.store and app.views[key].store is app.store
    assert app.stores["goodput"].training is app.store  # the Goodput slice prices the training estimate
    for key in ("serving", "mixed"):  # their own State and Store
        assert app.views[key].store is app.stores[key] and app.stores[key] is not app.store
    assert [t.key for t in tabs.TABS if t.own_inputs] == ["serving", "mixed"]
    with pytest.raises(ValueError, match="no tab 'nope'; tabs: plan, search"):
        tabs.tab_index("nope")
    with pytest.raises(ValueError, match="tab key\\(s\\) registered twice: plan"):
        tabs.registry(*tabs.TABS, tabs.TABS[0])


class _Probe(param.Parameterized):
    """A view that counts how often its tab is opened and left."""

    store = param.Parameter()
    shown = param.Integer(default=0)
    hidden = param.Integer(default=0)

    def show(self) -> None:
        self.shown += 1

    def hide(self) -> None:
        self.hidden += 1

    def panel(self) -> pn.pane.Markdown:
        return pn.pane.Markdown("probe")


def test_a_new_registry_entry_is_a_new_tab(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = tabs.Tab(key="probe", title="Probe", store=lambda shared: {"of": shared},
                     view=lambda store, app: _Probe(store=store), own_inputs=True)  # fmt: skip
    monkeypatch.setattr(app_module, "TABS", (*tabs.TABS, entry))
    monkeypatch.setattr(tabs, "TABS", (*tabs.TABS, entry))
    store = WorkbenchStore(WorkbenchState())
    app = WorkbenchApp(store=store)
    probe = app.views["probe"]
    assert app.tabs._names[-1] == "Probe" and probe.store == {"of": store}
    app.show_tab("probe")
    assert probe.shown == 1 and not app.sidebar.visible and not app.download.visible
    app.show_tab("plan")
    assert probe.hidden == 1 and app.sidebar.visible


def _upload(name: str, text: str) -> dict:
    data = text.encode()
    return {"name": name, "size": len(data), "data": base64.b64encode(data).decode(), "n": 1}


def test_the_compare_tab_lays_a_real_run_beside_its_prediction(app: WorkbenchApp, tmp_path: Path) -> None:
    view = app.views["compare"].measured
    assert isinstance(view, RunCompareView)
    out = tmp_path / "export"
    args = ["export", "--to", "megatron-core", "--out", str(out), "--model", "llama-3.1-8b", "--cluster",
            "dgx-h100", "--seq-len", "4096", "--global-batch", "64", "--tp", "2", "--framework", "megatron-core-2024"]  # fmt: skip
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    prediction = (out / "prediction.json").read_text()
    assert view.download.disabled
    view.run_upload.file = _upload("train.log", (FIXTURES / "megatron_pretrain_gpt.log").read_text())
    assert view.store.rows == [] and "Upload" in view.table.object  # one file is not a comparison yet
    view.prediction_upload.file = _upload("prediction.json", prediction)
    step_ms = statistics.fmean([2001.0, 2003.0, 1999.0, 2000.0, 1997.0])  # the fixture's steady iterations
    predicted_ms = json.loads(prediction)["summary"]["step_time_s"] * 1e3
    line = f"| step time (ms) | {step_ms:,.1f} | {predicted_ms:,.1f} | {(predicted_ms - step_ms) / step_ms:+.1%} |"
    assert line in view.table.object and not view.download.disabled
    page = view._report_file().getvalue().decode()
    assert 'id="predicted-vs-measured"' in page and f'<td class="num">{step_ms:,.1f}</td>' in page
    assert "workbench compare train.log --prediction prediction.json --report compare.html" in page
    view.run_upload.file = _upload("vllm.json", (FIXTURES / "vllm_bench_serve.json").read_text())
    assert "a serving run (vllm-bench) cannot be compared with a training prediction" in view.table.object
    assert view.download.disabled
    view.run_upload.file = {"name": "big.log", "size": MAX_RUN_BYTES + 1, "data": None, "n": 2}
    assert "big.log: 1,048,577 bytes; the page reads files up to 1 MiB" in view.table.object
