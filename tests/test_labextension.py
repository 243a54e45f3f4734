"""The prebuilt JupyterLab extension, its server extension and the ``.workbench.json`` file they show.

- the committed build (share/jupyter/labextensions/parallelism-workbench) is complete, names the source's
  version and bundles icon.svg; pyproject's data files ship every built file and the server config;
- this environment has both extensions enabled (``jupyter labextension list``, ``jupyter server extension
  list``; ``pip install -e`` installs them: tests/test_packaging.py);
- ``.workbench.json``: the summary is ``workbench estimate --json``'s object, the records round-trip to an
  equal Estimate, and bad files are refused with a message that says why;
- (slow) a real Jupyter server answers the report route: the report in a sandboxed page, 422 with the
  reason for a summary-only file, and nothing for other suffixes, paths outside the root or no token.
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_launcher import _env, _free_port, _stop

NAME = "parallelism-workbench"
BUILT = ROOT / "share" / "jupyter" / "labextensions" / NAME
SOURCE = ROOT / "labextension"
ICON = ROOT / "widgets" / "app" / "icon.svg"


# --- the committed build and the wheel's data files -------------------------------------------------------


def test_built_extension_is_complete_and_matches_the_source() -> None:
    built = json.loads((BUILT / "package.json").read_text())
    source = json.loads((SOURCE / "package.json").read_text())
    assert built["name"] == source["name"] == NAME
    assert built["version"] == source["version"]
    load = built["jupyterlab"]["_build"]["load"]
    assert (BUILT / load).is_file(), f"{load} missing: rebuild with `cd labextension && npm run build:prod`"
    bundle = "".join(p.read_text() for p in (BUILT / "static").glob("*.js"))
    for colour in ("#0072B2", "#E69F00", "#009E73", "#CC79A7"):  # icon.svg is bundled, as text
        assert colour in ICON.read_text() and colour in bundle
    # The source's constants, which the Python side serves under (a stale build would miss a renamed one).
    pytest.importorskip("jupyter_server")
    from workbench_widgets.app.launcher import PROXY_NAME
    from workbench_widgets.lab_server import REPORT_ROUTE, SUFFIX

    for text in ("parallelism-workbench:open", SUFFIX, f"{PROXY_NAME}/", REPORT_ROUTE):
        assert text in bundle and text in (SOURCE / "src" / "index.ts").read_text(), text


def test_data_files_ship_the_build_and_the_server_config() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data_files = config["tool"]["setuptools"]["data-files"]
    shipped = {
        f"{dest}/{Path(match).name}"
        for dest, patterns in data_files.items()
        for pattern in patterns
        for match in glob.glob(str(ROOT / pattern))
    }
    prefix = f"share/jupyter/labextensions/{NAME}"
    for path in BUILT.rglob("*"):
        if path.is_file():
            assert f"{prefix}/{path.relative_to(BUILT).as_posix()}" in shipped, path
    assert f"{prefix}/install.json" in shipped
    server_config = f"etc/jupyter/jupyter_server_config.d/{NAME}.json"
    assert server_config in shipped
    enabled = json.loads(next(SOURCE.rglob(f"{NAME}.json")).read_text())
    assert enabled == {"ServerApp": {"jpserver_extensions": {"workbench_widgets.lab_server": True}}}


def test_node_modules_and_intermediate_output_are_not_committed() -> None:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        # trailing slashes: the patterns name directories, which a fresh clone does not have yet
        ["git", "check-ignore", "labextension/node_modules/", "labextension/lib/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == ["labextension/node_modules/", "labextension/lib/"]


# --- this environment --------------------------------------------------------------------------------------


def test_lab_and_server_extensions_are_enabled_here() -> None:
    """What ``jupyter labextension list`` and ``jupyter server extension list`` read (those take ~20 s)."""
    pytest.importorskip("jupyterlab")
    from jupyter_core.paths import jupyter_config_path, jupyter_path
    from jupyter_server.extension.config import ExtensionConfigManager
    from jupyterlab_server.config import get_page_config

    page_config = get_page_config(jupyter_path("labextensions"))
    names = [ext["name"] for ext in page_config.get("federated_extensions", [])]
    assert NAME in names, "lab extension not installed: pip install -e '.[jupyter]' again"
    disabled = page_config.get("disabledExtensions", [])  # a list, or a dict of name -> bool
    assert NAME not in disabled or (isinstance(disabled, dict) and not disabled[NAME])
    servers = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
    assert servers.get("workbench_widgets.lab_server") is True


def test_server_extension_module_is_light() -> None:
    pytest.importorskip("jupyter_server")
    code = "import sys, workbench_widgets.lab_server as m; print(m._jupyter_server_extension_points()); print('bokeh' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[{'module': 'workbench_widgets.lab_server'}]", "False"]


# --- the .workbench.json file --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def estimate():
    from workbench.estimate.registry import get_backend
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.specs.plan import ParallelPlan, Recompute, Workload

    model, cluster = load_model("mixtral-8x7b"), load_cluster("dgx-h100", num_nodes=2)
    workload = Workload(seq_len=4096, global_batch_size=64, capacity_factor=1.25)
    plan = ParallelPlan(
        dp=4,
        tp=2,
        pp=2,
        ep=2,
        vpp=2,
        schedule="interleaved-1f1b",
        recompute=Recompute.SELECTIVE,
        zero_stage=1,
    )
    assert plan.validate(model, cluster, workload) == []
    return get_backend("analytic").estimate(model, cluster, workload, plan)


def test_workbench_file_is_the_estimate_summary_plus_records(tmp_path: Path, estimate) -> None:
    from workbench_widgets.workbench_file import read_workbench_file, write_workbench_file

    path = write_workbench_file(tmp_path / "a.workbench.json", [estimate, estimate], command="workbench x")
    data = json.loads(path.read_text())
    section = data.pop("workbench_file")
    assert data == json.loads(json.dumps(estimate.summary()))  # exactly `workbench estimate --json`
    assert section["format"] == "parallelism-workbench.estimates" and section["version"] == 1
    saved = read_workbench_file(path)
    assert saved.command == "workbench x" and len(saved.estimates) == 2
    back = saved.estimates[0]
    for name in ("model", "cluster", "workload", "plan", "breakdown", "notes", "measured", "backend"):
        assert getattr(back, name) == getattr(estimate, name), name
    assert back.timeline.equals(estimate.timeline) and back.memory.equals(estimate.memory)
    assert back.summary() == estimate.summary()


def test_workbench_file_refusals(tmp_path: Path, estimate) -> None:
    from workbench_widgets.workbench_file import read_workbench_file, workbench_document, write_workbench_file

    with pytest.raises(ValueError, match=r"\.workbench\.json"):
        write_workbench_file(tmp_path / "a.json", [estimate])
    path = write_workbench_file(tmp_path / "a.workbench.json", [estimate])
    with pytest.raises(FileExistsError):
        write_workbench_file(path, [estimate])
    with pytest.raises(ValueError, match="at least one"):
        workbench_document([])
    with pytest.raises(ValueError, match="summary"):
        read_workbench_file(json.dumps(estimate.summary()))
    with pytest.raises(ValueError, match="not JSON"):
        read_workbench_file("{")
    doc = workbench_document([estimate])
    doc["workbench_file"]["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        read_workbench_file(doc)
    doc = workbench_document([estimate])
    doc["workbench_file"]["estimates"][0]["plan"]["tp"] = 0
    with pytest.raises(ValueError, match=r"estimates\[0\].*tp"):
        read_workbench_file(doc)
    doc = workbench_document([estimate])
    doc["workbench_file"]["estimates"][0]["model"]["colour"] = "red"
    with pytest.raises(ValueError, match="unknown fields"):
        read_workbench_file(doc)


# --- the report route of a real server ----------------------------------------------------------------------


@pytest.mark.slow
def test_server_answers_the_report_route(tmp_path: Path, estimate) -> None:
    pytest.importorskip("jupyter_server")
    from workbench_widgets.app.server import wait_for_http
    from workbench_widgets.workbench_file import write_workbench_file

    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    write_workbench_file(root / "sub" / "good.workbench.json", [estimate])
    (root / "summary.workbench.json").write_text(json.dumps(estimate.summary()))
    shutil.copy(root / "sub" / "good.workbench.json", tmp_path / "outside.workbench.json")
    port, token = _free_port(), "workbench-ext-token"
    proc = subprocess.Popen(
        _server_command(port, token, root),
        cwd=root,
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/parallelism-workbench-api/report?path="
    try:
        wait_for_http(f"http://127.0.0.1:{port}/api/status?token={token}", 60)
        status, headers, body = _get(base + "sub/good.workbench.json", token)
        assert status == 200, body[:500]
        assert headers["Content-Type"].startswith("text/html")
        csp = headers["Content-Security-Policy"]
        assert (
            "sandbox allow-scripts" in csp and "default-src 'none'" in csp and "frame-ancestors 'self'" in csp
        )
        assert "Bokeh" in body and "mixtral" in body.lower()
        status, _, body = _get(base + "summary.workbench.json", token)
        assert status == 422 and "summary" in body
        assert _get(base + "../outside.workbench.json", token)[0] == 404
        assert _get(base + "sub/missing.workbench.json", token)[0] == 404
        assert _get(base + "notes.txt", token)[0] == 400
        status, headers, _ = _get(base + "sub/good.workbench.json", None)  # no token: to the login page
        assert status == 302 and "/login" in headers["Location"]
    finally:
        _stop(proc)


def _server_command(port: int, token: str, root: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "jupyter_server",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--allow-root",
    ]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


def _get(url: str, token: str | None) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of a GET; redirects are answers, not followed."""
    headers = {"Authorization": f"token {token}"} if token else {}
    req = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=60) as resp:  # noqa: S310 (local test server)
            return resp.status, dict(resp.headers), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode("utf-8", "replace")
