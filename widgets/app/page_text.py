"""Text of files, presets and errors as it enters a pane of the page: shown as typed, never as markup.

A model's ``_name_or_path``, a cluster's ``name``, a note or an error message quoting a file name may hold
``<script>``, ``<img onerror=...>`` or Markdown (``[x](javascript:...)``); Panel renders Markdown and HTML
panes with ``set_html``, which runs a ``<script>`` it is given (issue 52). Every such text goes through
``page_text`` where it is put into a pane's markup.
"""

from __future__ import annotations

import html
import re

_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]|~])")
"""Markdown punctuation that opens inline markup anywhere in a line: code, emphasis, links and images (``[``,
``]``), table cells, strike-through (CommonMark 0.31, section 2.4: ASCII punctuation may be backslash-escaped);
``<``, ``>`` and ``&`` are left to the HTML escape. Punctuation that means something only at the start of a line
(``#``, ``-``, ``1.``) is left: ``page_text`` puts no line break into the text."""


def page_text(value: object) -> str:
    """``value`` as plain text for a Markdown or HTML pane: Markdown punctuation backslash-escaped, then
    ``<``, ``>`` and ``&`` as HTML entities, line breaks as spaces. The page shows the characters typed."""
    text = " ".join(str(value).splitlines())
    return html.escape(_MARKDOWN_PUNCTUATION.sub(r"\\\1", text), quote=False)
