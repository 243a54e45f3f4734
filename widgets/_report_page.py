"""The one page builder of every HTML report: sections in, one self-contained HTML page out.

A report (``workbench_widgets.report``: training, serving, mixed cluster, predicted vs measured) is a title, an
introduction and a list of ``Section`` (a heading, its blocks of text, tables and figures, and the bokeh figures
it draws), rendered by the one template (``_report_template.REPORT_TEMPLATE``, block kinds listed there).

One file that opens offline anywhere: bokeh's JavaScript and CSS are inlined (``bokeh.resources.INLINE``) and only
the bundles the figures need are included. The template is rendered with autoescape on, so user strings (model
names from a config file, notes, the command) appear as text; a block's text may be a ``markupsafe.Markup``
built with ``Markup.format`` (which escapes its arguments) where the text has markup of its own.

Exporting bokeh after ``import panel`` makes bokeh's bundle list a relative ``static/extensions/panel/...`` script
that does not exist next to the file; only the inlined code is written here (``Bundle.scripts`` renders raw code,
never file links), and ``render_page`` refuses to return a page that still links any script or stylesheet.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from bokeh.embed import components
from bokeh.embed.bundle import bundle_for_objs_and_resources
from bokeh.resources import INLINE
from workbench_widgets._report_template import REPORT_TEMPLATE

if TYPE_CHECKING:
    from bokeh.model import Model

Block = dict[str, Any]
"""One block of a section: ``{"kind": ..., ...}`` (kinds and their keys: ``_report_template``)."""

LINKED_RESOURCE = re.compile(
    r"<script[^>]*\ssrc=|<link[^>]*rel=\"?stylesheet|static/extensions/", re.IGNORECASE
)


@dataclass(kw_only=True)
class Section:
    """One section of a report: ``heading`` (an ``<h2>``; None: the blocks follow the section before), its
    ``blocks`` in order, the bokeh ``figures`` its ``figures`` blocks name (names unique in the page), an anchor
    ``id`` and a css class (``answer``: the boxed summary)."""

    heading: str | None
    blocks: list[Block] = field(default_factory=list)
    figures: dict[str, Model] = field(default_factory=dict)
    id: str | None = None
    css: str = ""


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[bool]) -> dict[str, Any]:
    """A table block's table (cells shown with ``str``), ``numeric`` columns right-aligned, no row class."""
    return {
        "header": list(header),
        "rows": [[str(c) for c in r] for r in rows],
        "numeric": list(numeric),
        "classes": [""] * len(rows),
    }


def reproduce_section(command: str, app_url: str | None = None) -> Section:
    """ "Reproduce": the link back to the app view (only an ``http(s)`` URL is linked) and the command."""
    blocks: list[Block] = []
    if app_url and app_url.startswith(("http://", "https://")):
        blocks.append(
            {"kind": "link", "before": "Open this view in the app (while it runs): ", "url": app_url}
        )
    blocks += [
        {"kind": "p", "text": "Run this command to write this report again:"},
        {"kind": "pre", "text": command},
    ]
    return Section(heading="Reproduce", blocks=blocks)


def render_page(
    *, title: str, intro: Sequence[Block], sections: Sequence[Section], page_title: str | None = None
) -> str:
    """The page's HTML: ``title`` as its heading (and the browser's title unless ``page_title``), the ``intro``
    blocks, then the sections in order. RuntimeError if the page would link an external resource; ValueError if
    two sections draw a figure of the same name."""
    figures: dict[str, Model] = {}
    for s in sections:
        clash = set(figures) & set(s.figures)
        if clash:
            raise ValueError(f"report: figure name(s) {', '.join(sorted(clash))} drawn by two sections")
        figures.update(s.figures)
    script, divs, js, css = "", {}, "", ""
    if figures:  # a page without figures carries no bokeh code
        script, divs = components(figures)
        bundle = bundle_for_objs_and_resources(list(figures.values()), INLINE)
        js, css = bundle.scripts(), "\n".join(f"<style>{raw}</style>" for raw in bundle.css_raw)
    context = {
        "title": title,
        "page_title": page_title or title,
        "intro": list(intro),
        "sections": list(sections),
        "divs": divs,
        "bokeh_js": js,
        "bokeh_css": css,
        "bokeh_script": script,
    }
    env = jinja2.Environment(
        autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined
    )
    html = env.from_string(REPORT_TEMPLATE).render(**context)
    linked = LINKED_RESOURCE.search(html)
    if linked:
        raise RuntimeError(
            f"report would link an external resource ({linked.group(0)!r}); refusing to write it"
        )
    return html


def check_path(path: str | Path, force: bool) -> Path:
    """``path`` as a Path; FileExistsError if it exists and not ``force``, FileNotFoundError if its folder is
    missing."""
    out = Path(path)
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass --force (force=True) to overwrite it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out.parent}: no such folder for the report")
    return out


def workbench_version() -> str:
    """The installed package's version ('' when not installed)."""
    try:
        return version("parallelism-workbench")
    except PackageNotFoundError:
        return ""
