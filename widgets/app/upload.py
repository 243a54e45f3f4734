"""``ConfigUpload``: a file control that reads one small file in the browser and refuses a big one there.

Panel's ``FileInput`` (Panel 1.9) has no size limit: the browser reads the whole file and sends it base64-encoded
in one websocket message, and a message over the server's ``websocket_max_message_size`` (bokeh's default is
20 MB, so a 15 MB file) makes tornado close the session's websocket (code 1009): the page goes dead without a
word. This control checks ``File.size`` against ``max_bytes`` before reading anything; a bigger file is
reported by name and size only (``file["data"]`` is None) and never leaves the browser. The Store checks the
size again on the bytes it receives (a page can be edited).

It is a ``ReactiveHTML`` component: its script ships with Panel's bundle and needs nothing from a CDN.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import param
from panel.reactive import ReactiveHTML


class ConfigUpload(ReactiveHTML):
    """One file at a time; ``file`` is ``{"name", "size", "data"}`` (``data``: base64, None when refused)."""

    accept = param.String(default=".json", doc="File types offered by the browser's file dialog.")
    max_bytes = param.Integer(
        default=2**20, bounds=(0, None), doc="Largest file read; bigger ones are refused."
    )
    file = param.Dict(
        default=None,
        allow_None=True,
        doc="The last file chosen: name, size in bytes, and its content as base64 (None if over max_bytes).",
    )

    _template = """<input type="file" id="picker" accept="${accept}" onchange="${script('read')}"></input>"""

    # ``n`` makes choosing the same file twice a change; clearing the input lets the same file fire again.
    _scripts = {
        "read": """
const f = picker.files && picker.files[0];
if (!f) { return }
picker.value = '';
if (f.size > data.max_bytes) {
  data.file = {name: f.name, size: f.size, data: null, n: Date.now()};
  return;
}
const reader = new FileReader();
reader.onload = () => {
  const url = String(reader.result);
  const comma = url.indexOf(',');
  data.file = {name: f.name, size: f.size, data: comma < 0 ? '' : url.slice(comma + 1), n: Date.now()};
};
reader.readAsDataURL(f);
"""
    }

    @staticmethod
    def content(file: dict[str, Any]) -> bytes | None:
        """The bytes of ``file`` (None when the browser refused it for its size; ValueError if not base64)."""
        data = file.get("data")
        if data is None:
            return None
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"the upload did not arrive as base64 ({exc})") from exc
