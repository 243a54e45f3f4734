"""The documentation site (mkdocs.yml, docs/) builds with no warning, and holds what it promises.

- ``mkdocs build --strict`` passes (a broken link, a missing page or a bad API reference fails it);
- the CLI reference lists every ``workbench`` command, generated from click; the API page renders the specs
  from their docstrings;
- every page of docs/ is in the navigation, and a page added to docs/ is picked up with no edit of the
  configuration (helpers add pages on their own branches);
- the pictures the pages show exist (``scripts/docs_screenshots.py`` regenerates them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytest.importorskip("mkdocs")
pytestmark = pytest.mark.slow

DOCS = ROOT / "docs"


def _build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=config_dir,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = _build(ROOT, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_cli_reference_lists_every_command(site: Path) -> None:
    import workbench_cli

    page = (site / "cli" / "index.html").read_text()
    for name in workbench_cli.COMMAND_HELP:
        assert f'id="workbench-{name}"' in page, name
    assert "--global-batch" in page and "--report" in page  # options of `workbench plan`, from click


def test_api_page_renders_the_docstrings(site: Path) -> None:
    page = (site / "api" / "index.html").read_text()
    for name in (
        "workbench.specs.plan.ParallelPlan",
        "workbench.search.planner.search",
        "workbench_widgets.report.write_report",
    ):
        assert f'id="{name}"' in page, name
    assert "Tensor-parallel" in page or "tensor-parallel" in page.lower()


def test_every_page_is_built_and_in_the_navigation(site: Path) -> None:
    home = (site / "index.html").read_text()
    for page in DOCS.glob("*.md"):
        slug = "" if page.stem == "index" else f"{page.stem}/"
        assert (site / slug / "index.html").is_file(), page.name
        assert f'href="{slug}"' in home or f'href="./{slug}"' in home or page.stem == "index", page.name


def test_a_new_page_is_picked_up_without_editing_the_config(tmp_path: Path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copytree(DOCS, work / "docs")
    shutil.copy(ROOT / "mkdocs.yml", work / "mkdocs.yml")
    shutil.copy(ROOT / "CONTRIBUTING.md", work / "CONTRIBUTING.md")
    (work / "docs" / "zz-new-topic.md").write_text("# A new topic\n\nWritten on another branch.\n")
    proc = _build(work, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    home = (tmp_path / "site" / "index.html").read_text()
    assert re.search(r'href="(\./)?zz-new-topic/"', home) and "A new topic" in home


def test_pictures_exist_and_the_script_that_makes_them_is_there() -> None:
    for image in re.findall(r"\]\((images/[^)]+)\)", "".join(p.read_text() for p in DOCS.glob("*.md"))):
        assert (DOCS / image).is_file(), image
    assert "docs/images" in (ROOT / "scripts" / "docs_screenshots.py").read_text()


def test_readme_is_a_front_page() -> None:
    """What a newcomer needs (what it is, the two commands, a picture, the main commands, where to read more) in
    at most 250 lines; the rest lives on the site."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for heading in ("## Quick start", "## Commands", "## Where to read more"):
        assert heading in text, heading
    assert "](docs/images/report.png)" in text and (DOCS / "images" / "report.png").is_file()
    for page in ("commands", "model", "accuracy", "serving-model", "goodput", "mixed-clusters", "cli", "api"):
        assert f"](docs/{page}.md)" in text and (DOCS / f"{page}.md").is_file(), page
