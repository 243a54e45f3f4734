"""No script from an uploaded file runs in the app (issue 52): configs whose ``_name_or_path`` or
``architectures`` hold HTML (a ``<script>``, an ``<img onerror>``, an element) and Markdown are uploaded in
headless Debian Chromium; the page opens no dialog, runs no handler and holds no injected element, and shows the
name as typed. ``page_text`` itself is checked without a browser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CHROMIUM, CHROMIUM_FLAGS, collect_errors, keep_local, needs_chromium

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = (
    '<script>alert(document.domain)</script><img src=x onerror="window.__pwned=1" data-pwned=1>'
    "<b data-pwned=2>x</b>[link](javascript:alert(3))"
)

DEEP_QUERY_JS = """(selector) => {
  // Elements matching selector in the document and in every shadow root (Panel renders panes there).
  const found = [];
  const walk = (root) => {
    root.querySelectorAll(selector).forEach((el) => found.push(el.outerHTML));
    root.querySelectorAll("*").forEach((el) => { if (el.shadowRoot) walk(el.shadowRoot); });
  };
  walk(document);
  return found;
}"""

DEEP_TEXT_JS = """(cls) => {
  const texts = [];
  const walk = (root) => {
    root.querySelectorAll("." + cls).forEach((el) => texts.push(el.innerText || ""));
    root.querySelectorAll("*").forEach((el) => {
      if (el.shadowRoot) { walk(el.shadowRoot); if (el.classList && el.classList.contains(cls)) texts.push(el.shadowRoot.textContent || ""); }
    });
  };
  walk(document);
  return texts.join("\\n");
}"""


def _config(**changes: object) -> bytes:
    config = json.loads((ROOT / "profiles/models/llama-3.1-8b.json").read_text())
    config.update(changes)
    return json.dumps(config).encode()


def test_page_text_carries_no_markup() -> None:
    pytest.importorskip("panel")
    from workbench_widgets.app.page_text import page_text

    text = page_text(HOSTILE + "\n# heading")
    assert "<" not in text and ">" not in text and "\n" not in text
    assert "\\[link\\]" in text and "&lt;script&gt;" in text


@pytest.mark.browser
@needs_chromium
def test_hostile_configs_run_no_script_in_the_page() -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    from workbench_widgets.app.server import ThreadedApp

    outside: list[str] = []
    errors: list[str] = []
    dialogs: list[str] = []
    with ThreadedApp(address="127.0.0.1", timeout_s=120) as app, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        try:
            context = browser.new_context()
            keep_local(context, outside)
            page = context.new_page()
            collect_errors(page, errors, console=False)
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(app.url, wait_until="load", timeout=120_000)
            picker = page.locator(".wb-upload input[type=file]").first
            picker.wait_for(state="attached", timeout=120_000)
            # a name the summary shows, then an architecture the refusal quotes
            picker.set_input_files(
                files=[
                    {
                        "name": "config.json",
                        "mimeType": "application/json",
                        "buffer": _config(_name_or_path=HOSTILE),
                    }
                ]
            )
            page.wait_for_function(
                f"() => ({DEEP_TEXT_JS})('wb-summary').includes('<script>alert(document.domain)</script>')",
                timeout=120_000,
                polling=500,  # by time, not animation frames (a busy page paints rarely)
            )
            picker.set_input_files(
                files=[
                    {
                        "name": "evil.json",
                        "mimeType": "application/json",
                        # an architecture and model type no reader and no transformers knows: refused, quoted
                        "buffer": _config(architectures=[HOSTILE], model_type=HOSTILE),
                    }
                ]
            )
            page.wait_for_function(
                f"() => ({DEEP_TEXT_JS})('wb-refused').includes('<script>alert(document.domain)')",
                timeout=120_000,
                polling=500,  # by time, not animation frames (a busy page paints rarely)
            )
            page.wait_for_timeout(1500)  # give any injected handler the time to fire
            injected = page.evaluate(DEEP_QUERY_JS, "[data-pwned], img[src='x']")
            pwned = page.evaluate("() => window.__pwned === 1")
        finally:
            browser.close()
    assert dialogs == [], f"a script ran: {dialogs}"
    assert injected == [], f"elements from the file reached the page: {injected}"
    assert not pwned
    assert outside == [], f"requests left the machine: {outside}"
