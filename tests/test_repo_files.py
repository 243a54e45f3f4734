"""Files of the repository that a clone must be able to use as they are: no path outside the repo, an
install script that installs every extra, a README quick start of two commands."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from tests.conftest import ROOT


def _tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.split("\0") if p]


def test_no_tracked_file_outside_tests_points_at_the_team_shared_folder() -> None:
    """``../shared/`` is the team's folder beside the checkout; a clone has none. The published measurements
    ship in ``profiles/validation/``."""
    hits = []
    for rel in _tracked():
        if rel.startswith("tests/"):
            continue
        path = ROOT / rel
        if not path.is_file():
            continue  # tracked but deleted in the work tree
        text = path.read_bytes().decode("utf-8", errors="replace")
        hits += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1) if "../shared" in line]
    assert not hits, f"files pointing at ../shared (not in a clone): {hits}"
    assert (ROOT / "profiles" / "validation" / "training_public.csv").is_file()


def test_the_test_script_installs_every_extra() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    script = (ROOT / "scripts" / "test.sh").read_text()
    installs = re.findall(r"pip install [^\n]*-c constraints/ci\.txt -e '\.\[([^\]]+)\]'", script)
    assert len(installs) == 1, installs
    assert set(installs[0].split(",")) == extras >= {"torch", "dev", "app", "jupyter"}


def test_core_dependencies_leave_out_the_app_notebooks_and_torch() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~\[ ;]", d)[0].lower() for d in project["dependencies"]}
    assert names == {"polars", "numpy", "click", "rich", "bokeh", "jinja2", "tomli-w"}
    extras = project["optional-dependencies"]
    assert any(d.startswith("panel") for d in extras["app"])
    assert {"jupyterlab", "jupyter-server-proxy", "ipywidgets"} <= {
        re.split(r"[<>=!~\[ ;]", d)[0] for d in extras["jupyter"]
    }


def test_readme_quick_start_is_two_commands() -> None:
    """One installs the core and runs the main job (a real model on a cluster preset, writing the report); the
    other is the test script."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(commands) == 2, commands
    main_job, tests = commands
    assert "pip install" in main_job and "-e ." in main_job and "workbench plan" in main_job
    assert "--report" in main_job and "--model llama-3.1-70b" in main_job and "--cluster dgx-h100" in main_job
    assert tests.strip() == "bash scripts/test.sh"
