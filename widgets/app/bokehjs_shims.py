"""Two shims of BokehJS 3.9 for the served app's page, each removing work a control change does twice
(issue 51 item 10; measured with ``benchmarks/bench_app_latency.py``).

On every paint BokehJS 3.9 (a) writes each annotation's position stylesheet again (an axis, a title, a legend:
``InlineStyleSheet._update`` sets the ``<style>`` element's text even when it is the same), which marks the
page's style dirty, and (b) reads every visual property (colour, width, font, ...) of every text, line and fill
from the CSS cascade (``VisualProperties._get_css_value``: ``getComputedStyle(el).getPropertyValue("--bk-...")``),
about 1,750 reads per change of the Plan tab at 64 devices, each after (a) a forced style recalculation. In
headless Chromium those reads took 28 ms of the page's time per change; with both shims 3-9 ms.

- ``skip_same_css``: ``InlineStyleSheet._update`` leaves a stylesheet whose text is already the new text alone
  (nothing on the page changes; the style stays clean).
- ``css_cache``: a visual's CSS reads are cached until the current task ends (a microtask clears the cache),
  as BokehJS itself does from bokeh/bokeh pull request 15205 ("Bokehjs tab load performance", merged 2026-07,
  not in a release as of bokeh 3.9.2, which Panel 1.9 requires: ``bokeh<3.10``). Within one synchronous paint
  no stylesheet changes a ``--bk-*`` variable, so a repeated read gives the same value.

Both patch the prototypes reached through ``Bokeh.require`` (module names of BokehJS 3.x) once per page and do
nothing where a method is missing, so a later BokehJS without them runs unpatched. They run from a
``CustomJS`` (JavaScript evaluated from a string: the served app serves its own pages, as for
``fixed_width_tick_labels``; JupyterLab's Content-Security-Policy would refuse it, and notebooks do not use it).
"""

from __future__ import annotations

from typing import Any

SHIMS_JS = """
const bk = window.Bokeh;
if (bk == null || typeof bk.require !== "function" || window.__wb_bokehjs_shims != null) return;
const installed = [];
const method = (module, cls, name) => {
  try {
    const proto = bk.require(module)[cls]?.prototype;
    return proto != null && typeof proto[name] === "function" ? proto : null;
  } catch (e) {
    return null;
  }
};
const sheet = method("core/dom", "InlineStyleSheet", "_update");
if (sheet != null) {
  const update = sheet._update;
  sheet._update = function (css) {
    if (this.el != null && this.el.textContent === css) return;
    return update.call(this, css);
  };
  installed.push("skip_same_css");
}
const visual = method("core/visuals/visual", "VisualProperties", "_get_css_value");
if (visual != null) {
  const read = visual._get_css_value;
  visual._get_css_value = function (name) {
    let cache = this.__wb_css_cache;
    if (cache == null) {
      cache = this.__wb_css_cache = new Map();
      queueMicrotask(() => { this.__wb_css_cache = null; });
    }
    let value = cache.get(name);
    if (value === undefined) {
      value = read.call(this, name);
      cache.set(name, value);
    }
    return value;
  };
  installed.push("css_cache");
}
window.__wb_bokehjs_shims = installed;
"""
"""The shims' JavaScript (the body of a ``CustomJS``); ``window.__wb_bokehjs_shims`` lists those installed."""


def install_bokehjs_shims(document: Any) -> None:
    """Run ``SHIMS_JS`` in the page of ``document`` (a served session's bokeh Document) once it is ready."""
    from bokeh.models import CustomJS

    document.js_on_event("document_ready", CustomJS(code=SHIMS_JS))
