"""The wheel, installed in a fresh venv outside the checkout, lists every preset and plans.

The wheel is built from a copy of the source tree (so the checkout gets no ``build/`` and no stale file of
an old layout slips into the wheel). The fresh venv has no pip and no dependencies of its own: the wheel is
installed with this interpreter's pip (``pip --python``), and a ``.pth`` file appends this environment's
site-packages for polars, click, rich... A ``.pth`` line is a plain path, so the ``.pth`` files in that
folder (among them the editable finder of this checkout) are not run: ``workbench`` comes from the wheel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "profiles"
IMPORT_NAMES = ("workbench", "workbench_cli", "workbench_backends", "workbench_widgets")
_SKIP_TOP = {"build", "dist", "node_modules"}

pytestmark = pytest.mark.slow


def _ignore(folder: str, names: list[str]) -> set[str]:
    top = Path(folder) == ROOT
    return {
        n
        for n in names
        if n == "__pycache__"
        or n.endswith((".pyc", ".egg-info"))
        or (top and (n.startswith(".") or n in _SKIP_TOP))
    }


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "WORKBENCH_PROFILES")}
    env.update(PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", COLUMNS="200", NO_COLOR="1")
    return env


def _run(args: list[str | Path], cwd: Path, timeout_s: float = 120) -> str:
    proc = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("source") / "src"
    shutil.copytree(ROOT, src, ignore=_ignore)
    return src


@pytest.fixture(scope="module")
def wheel(source_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = source_tree
    out = work / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, src],
        work,
    )
    (found,) = out.glob("*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel installed; dependencies from this environment."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", root], root.parent)
    python = root / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
        root,
    )
    site = Path(
        _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).strip()
    )
    ours = sysconfig.get_paths()
    deps = dict.fromkeys(p for p in (ours["purelib"], ours["platlib"]) if Path(p) != site)
    (site / "_workbench_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return root


def test_wheel_has_only_our_import_names_and_every_preset(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == set(IMPORT_NAMES), f"top-level entries of the wheel: {sorted(tops)}"
    presets = [p.relative_to(PROFILES).as_posix() for p in PROFILES.rglob("*") if p.is_file()]
    presets = [p for p in presets if "__pycache__" not in p and not p.endswith(".pyc")]
    missing = sorted(p for p in presets if f"workbench/presets/profiles/{p}" not in names)
    assert not missing, f"preset files not in the wheel: {missing}"


def test_installed_wheel_runs_outside_the_checkout(venv: Path, tmp_path: Path) -> None:
    python, workbench = venv / "bin" / "python", venv / "bin" / "workbench"
    where = _run(
        [
            python,
            "-c",
            "import json, sys, workbench_backends, workbench_cli, workbench_widgets, workbench;"
            "from workbench.presets.catalog import profiles_dir;"
            "mods = [workbench, workbench_cli, workbench_backends, workbench_widgets];"
            "print(json.dumps([m.__file__ for m in mods] + [str(profiles_dir())]))",
        ],
        tmp_path,
    )
    for path in json.loads(where):
        assert Path(path).resolve().is_relative_to(venv.resolve()), f"{path} is not the wheel's copy"
    listings = (
        ("models", "models", ".json"),
        ("devices", "hardware", ".toml"),
        ("clusters", "clusters", ".toml"),
    )
    for command, folder, suffix in listings:
        listed = {row["id"] for row in json.loads(_run([workbench, command, "--json"], tmp_path))}
        expected = {p.stem for p in (PROFILES / folder).glob(f"*{suffix}")}
        assert expected and expected <= listed, f"{command}: missing {sorted(expected - listed)}"
    table = _run([workbench, "models"], tmp_path)
    assert all(p.stem in table for p in (PROFILES / "models").glob("*.json"))
    plan = [workbench, "plan", "--model", "llama-3.1-70b", "--cluster", "dgx-h100", "--nodes", "8"]
    out = _run(plan + ["--seq-len", "8192", "--global-batch", "256"], tmp_path)
    assert "Best plans" in out and "dp" in out and "tp" in out, out


EXTRA_ONLY = ("panel", "ipywidgets", "jupyterlab", "jupyter_server_proxy", "torch")
"""Top-level modules only the [app], [jupyter] and [torch] extras install."""


def _requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[ ;(]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_wheel_requires_the_core_and_leaves_the_app_notebooks_and_torch_to_extras(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(meta).decode()
    requires = [
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")
    ]
    core = {_requirement_name(r) for r in requires if "extra ==" not in r}
    assert core == {"polars", "numpy", "click", "rich", "bokeh", "jinja2", "tomli-w"}
    by_extra: dict[str, set[str]] = {}
    for r in requires:
        found = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", r)
        if found:
            by_extra.setdefault(found.group(1), set()).add(_requirement_name(r))
    assert "panel" in by_extra["app"] and "torch" in by_extra["torch"]
    assert {"jupyterlab", "jupyter-server-proxy", "ipywidgets", "panel"} <= by_extra["jupyter"]


def test_core_install_plans_and_writes_a_report_without_the_extras(venv: Path, tmp_path: Path) -> None:
    """The installed wheel, with the extras' modules blocked (as if not installed): ``workbench plan --report``
    works, and ``workbench app`` names the extra to install."""
    python = venv / "bin" / "python"
    report = tmp_path / "plan.html"
    block = (
        f"import sys\nfor n in {EXTRA_ONLY!r}:\n    sys.modules[n] = None\nfrom workbench_cli import main\n"
    )
    plan = ["plan", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1", "--seq-len", "4096"]
    plan += ["--global-batch", "32", "--top", "2", "--report", str(report)]
    out = _run([python, "-c", block + f"main({plan!r})"], tmp_path)
    assert "Best plans" in out and report.stat().st_size > 100_000
    proc = subprocess.run(
        [str(python), "-c", block + "main(['app'])"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "pip install 'parallelism-workbench[app]'" in proc.stderr, proc.stderr


# --- JupyterLab from pip: the wheel and the editable install both register the extensions ------------------

LAB_NAME = "parallelism-workbench"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _data_files(wheel: Path) -> dict[str, bytes]:
    """The files a wheel installs under ``sys.prefix`` (its ``.data/data/`` folder), by install path."""
    with zipfile.ZipFile(wheel) as z:
        return {
            n.split(".data/data/", 1)[1]: z.read(n)
            for n in z.namelist()
            if ".data/data/" in n and not n.endswith("/")
        }


def _jupyter_list(python: Path, module: str, cwd: Path) -> str:
    """``python -m module list`` (Jupyter prints its listing on stderr), colours removed."""
    proc = subprocess.run(
        [str(python), "-m", module, "list"],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return _ANSI.sub("", proc.stdout + proc.stderr)


def test_installed_wheel_registers_the_lab_and_server_extensions(venv: Path, tmp_path: Path) -> None:
    """``jupyter labextension list`` and ``jupyter server extension list`` of the fresh venv (their modules,
    run by the venv's python, so its ``sys.prefix`` is where Jupyter looks) show both extensions enabled and
    OK, from the venv's own data folder."""
    python = venv / "bin" / "python"
    labs = _jupyter_list(python, "jupyterlab.labextensions", tmp_path)
    assert re.search(rf"{LAB_NAME} v0\.1\.0 enabled\s+OK \(python, {LAB_NAME}\)", labs), labs
    folder = labs.split(f"{LAB_NAME} v0.1.0", 1)[0].rsplit("\n", 3)[-3:]
    assert any(str(venv.resolve()) in line or str(venv) in line for line in folder), labs
    servers = _jupyter_list(python, "jupyter_server.extension.serverextension", tmp_path)
    assert re.search(r"workbench_widgets\.lab_server\s+enabled", servers), servers
    assert re.search(r"workbench_widgets\.lab_server\s+OK", servers), servers


def test_editable_wheel_carries_the_same_data_files_as_the_wheel(
    source_tree: Path, wheel: Path, tmp_path: Path
) -> None:
    """``pip install -e .`` builds an editable wheel with the project's backend (build_support/); it must hold
    the prebuilt lab extension and the server config like the wheel does, with RECORD lines whose hashes and
    sizes are those of the files (pip installs them under ``sys.prefix``)."""
    import base64
    import hashlib

    out = tmp_path / "dist"
    out.mkdir()
    code = (
        "import sys; sys.path.insert(0, 'build_support'); import workbench_build as b;"
        f"print(b.build_editable({str(out)!r}))"
    )
    name = _run([sys.executable, "-c", code], source_tree, 180).strip().splitlines()[-1]
    editable = out / name
    assert "editable" in editable.name
    shipped = _data_files(wheel)
    assert f"share/jupyter/labextensions/{LAB_NAME}/package.json" in shipped
    assert f"etc/jupyter/jupyter_server_config.d/{LAB_NAME}.json" in shipped
    assert _data_files(editable) == shipped
    with zipfile.ZipFile(editable) as z:
        (record,) = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
        lines = {row.split(",")[0]: row.split(",")[1:] for row in z.read(record).decode().splitlines()}
        for n in z.namelist():
            if ".data/data/" in n:
                payload = z.read(n)
                digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
                assert lines[n] == [f"sha256={digest}", str(len(payload))], n


def test_editable_install_here_has_the_extension_files() -> None:
    """This checkout's own ``pip install -e`` (scripts/test.sh) put the committed build under ``sys.prefix``,
    byte for byte (no step by hand links it any more)."""
    installed = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / LAB_NAME
    built = ROOT / "share" / "jupyter" / "labextensions" / LAB_NAME
    files = [p.relative_to(built) for p in built.rglob("*") if p.is_file()]
    assert files
    for rel in files:
        assert (installed / rel).read_bytes() == (built / rel).read_bytes(), rel
    config = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / f"{LAB_NAME}.json"
    assert json.loads(config.read_text()) == {
        "ServerApp": {"jpserver_extensions": {"workbench_widgets.lab_server": True}}
    }


@pytest.mark.browser
def test_jupyterlab_of_the_wheel_shows_the_launcher_card(venv: Path, tmp_path: Path) -> None:
    """JupyterLab run by the fresh venv's python (its ``sys.prefix`` is where Lab finds extensions) shows the
    "Parallelism Workbench" launcher card with our icon: the wheel's data files are all it needs. Lab's own
    page assets come from this environment (``JUPYTERLAB_DIR``): the fresh venv borrows its packages."""
    from tests.conftest import CHROMIUM, CHROMIUM_FLAGS, keep_local
    from tests.test_launcher import _free_port, _stop

    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent")
    sync_api = pytest.importorskip("playwright.sync_api")
    from workbench_widgets.app.server import wait_for_http

    token, port = "wheel-lab-token", _free_port()
    root = tmp_path / "root"
    root.mkdir()
    env = _clean_env() | {
        "JUPYTERLAB_DIR": str(Path(sys.prefix) / "share" / "jupyter" / "lab"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    command = [
        str(venv / "bin" / "python"), "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--allow-root",
    ]  # fmt: skip
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    outside: list[str] = []
    try:
        wait_for_http(f"http://127.0.0.1:{port}/api/status?token={token}", 90)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                keep_local(page, outside)
                page.goto(f"http://127.0.0.1:{port}/lab?token={token}", timeout=90_000)
                card = page.locator(".jp-LauncherCard", has_text="Parallelism Workbench")
                card.first.wait_for(timeout=90_000)
                assert card.first.locator(".jp-LauncherCard-icon svg rect").count() == 4  # icon.svg's blocks
            finally:
                browser.close()
    finally:
        _stop(proc)
        log.close()
    lab_log = (tmp_path / "lab.log").read_text(errors="replace")
    assert "Traceback" not in lab_log, lab_log[-3000:]
    assert outside == [], outside
    # The card came from the wheel's files: this environment's data folder is not where the venv's Lab looks.
    code = "import json; from jupyter_core.paths import jupyter_path; print(json.dumps(jupyter_path('labextensions')))"
    paths = json.loads(_run([venv / "bin" / "python", "-c", code], tmp_path))
    ours = str(Path(sys.prefix).resolve())
    assert not any(str(Path(p).resolve()).startswith(ours) for p in paths), paths
    assert any(str(Path(p).resolve()).startswith(str(venv.resolve())) for p in paths), paths
