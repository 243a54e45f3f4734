"""Regenerate the pictures of the documentation site (docs/images/) from the real tools.

- ``report.png``: the top of the report of the README's quick-start command (``workbench plan`` for Llama 3.1
  70B on 8 DGX H100 nodes), at 1,440 px wide in headless Chromium.

Needs the project installed (``pip install -e .``), Playwright and ``/usr/bin/chromium`` (Debian's).
Run: ``python scripts/docs_screenshots.py`` from the repository root; it overwrites docs/images/*.png.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
QUICK_START = [
    "plan", "--model", "llama-3.1-70b", "--cluster", "dgx-h100", "--nodes", "8",
    "--seq-len", "8192", "--global-batch", "256",
]  # fmt: skip
CHROMIUM = "/usr/bin/chromium"


def _report(folder: Path) -> Path:
    out = folder / "plan.html"
    workbench = Path(sys.executable).with_name("workbench")
    subprocess.run([str(workbench), *QUICK_START, "--report", str(out)], check=True, capture_output=True)
    return out


def _shoot(url: str, png: Path, height: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": height})
            page.goto(url)
            page.wait_for_function("() => window.Bokeh !== undefined", timeout=30_000)
            page.screenshot(path=str(png))
        finally:
            browser.close()


def main() -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        report = _report(Path(tmp))
        _shoot(report.as_uri(), IMAGES / "report.png", 900)
    print(f"wrote {IMAGES / 'report.png'}")


if __name__ == "__main__":
    main()
