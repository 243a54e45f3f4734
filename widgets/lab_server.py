"""Jupyter server extension: the HTML report of a ``*.workbench.json`` file, for the JupyterLab viewer.

``GET {base_url}parallelism-workbench-api/report?path=PATH`` reads ``PATH`` (relative to the contents root)
through the server's contents manager, so the server's root, hidden-file and authorization rules apply,
and answers ``workbench_widgets.workbench_file.report_html`` of it: the self-contained report (inline bokeh,
no request leaves the page). A file that is not a ``.workbench.json`` estimate file gets a short page that
says why (status 422), shown in the viewer's tab.

The page runs sandboxed: the ``Content-Security-Policy`` header gives it an opaque origin (``sandbox
allow-scripts``: no access to the Lab's cookies or API) and forbids every fetch (``default-src 'none'``),
also when it is opened outside Lab.

Enabled by ``etc/jupyter/jupyter_server_config.d/parallelism-workbench.json`` (a data file of the wheel):
``{"ServerApp": {"jpserver_extensions": {"workbench_widgets.lab_server": true}}}``. Importing this module
is light: the report builder (bokeh) is imported on the first request.
"""

from __future__ import annotations

import asyncio
import html
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import ensure_async, url_path_join
from tornado import web

REPORT_ROUTE = "parallelism-workbench-api/report"
"""Below the server's base URL; the lab extension's ``REPORT_PATH``."""
SUFFIX = ".workbench.json"
MAX_FILE_BYTES = 64 * 2**20
"""Larger files are refused (413) before they are read: a report of that much would not open anyway."""
REPORT_CSP = (
    "sandbox allow-scripts",
    "default-src 'none'",
    "script-src 'unsafe-inline'",
    "style-src 'unsafe-inline'",
    "img-src data: blob:",
    "font-src data:",
)
"""What the report page may do: run its inline scripts and styles, in an opaque origin, fetching nothing."""


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "workbench_widgets.lab_server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Add the report route to the running server."""
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], REPORT_ROUTE)
    web_app.add_handlers(".*$", [(route, ReportHandler)])


class ReportHandler(JupyterHandler):
    """The report of one ``.workbench.json`` file (needs the ``contents`` read permission)."""

    auth_resource = "contents"

    @property
    def content_security_policy(self) -> str:
        return "; ".join([super().content_security_policy, *REPORT_CSP])

    @web.authenticated
    @authorized
    async def get(self) -> None:
        path = self.get_query_argument("path").strip("/")
        if not path.endswith(SUFFIX):
            raise web.HTTPError(400, f"not a {SUFFIX} file: {path!r}")
        contents = self.contents_manager
        info = await ensure_async(contents.get(path, content=False, type="file"))
        if (info.get("size") or 0) > MAX_FILE_BYTES:
            raise web.HTTPError(413, f"{path!r} is larger than {MAX_FILE_BYTES // 2**20} MiB")
        model = await ensure_async(contents.get(path, content=True, type="file", format="text"))
        from workbench_widgets.workbench_file import report_html

        name = path.rsplit("/", 1)[-1]
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        try:
            page = await asyncio.to_thread(report_html, model["content"], name=name)
        except ValueError as exc:
            self.set_status(422)
            page = _problem_page(name, str(exc))
        self.finish(page)


def _problem_page(name: str, problem: str) -> str:
    return (
        "<!doctype html><meta charset='utf-8'><title>Not a workbench file</title>"
        f"<h2>{html.escape(name)} cannot be shown as a report</h2><p>{html.escape(problem)}</p>"
        "<p>Files of saved estimates are written by "
        "<code>workbench_widgets.workbench_file.write_workbench_file</code>.</p>"
    )
