"""Predicted vs measured in the Compare tab: a real run's output and the ``prediction.json`` it was exported with,
uploaded in the page, laid side by side as ``workbench compare`` does (``workbench.launch.compare.compare_run``),
with the compare report (``workbench_widgets.report.render_compare_report``) to download.

In the app's State/Store/View style (``workbench_widgets.app.tabs``):

- ``RunCompareState``: the two files (name and text), parameters only;
- ``RunCompareStore``: reads them (``workbench.launch.runlogs.read_run_output``, ``check_prediction``) and
  compares on every change of the State, holds the rows or the reason there are none; no widgets;
- ``RunCompareView``: the two upload controls, the table (the report's, in display units) and the download.

A file is read in the browser only up to ``MAX_RUN_BYTES`` (the app's upload limit, ``store.MAX_UPLOAD_BYTES``:
the server's websocket limit is a few times that); a longer log is compared on the command line.
"""

from __future__ import annotations

import io
import json
import shlex
from typing import Any

import panel as pn
import param
from workbench_widgets._report_compare import run_compare_table
from workbench_widgets.app.page_text import page_text
from workbench_widgets.app.store import MAX_UPLOAD_BYTES
from workbench_widgets.app.upload import ConfigUpload

MAX_RUN_BYTES = MAX_UPLOAD_BYTES
RUN_TYPES = ".log,.txt,.json,.jsonl"
"""What the run file's dialog offers: Megatron-LM/NeMo and torchtitan logs, vLLM/SGLang benchmark JSON(L),
``workbench run --json`` records."""


class RunCompareState(param.Parameterized):
    """The two files of a comparison, as uploaded."""

    run_name = param.String(default="", doc="File name of the run's output ('' before one is chosen).")
    run_text = param.String(default="", doc="The run's output as text.")
    prediction_name = param.String(default="", doc="File name of the prediction.json.")
    prediction_text = param.String(default="", doc="The prediction.json as text.")


class RunCompareStore(param.Parameterized):
    """``compare_run``'s rows for a ``RunCompareState`` (recomputed on every change), or why there are none."""

    state = param.ClassSelector(class_=RunCompareState)
    rows = param.List(default=[], doc="CompareRow of every figure both sides have; [] without a comparison.")
    source = param.String(default="", doc="What was read: the stack's output, the file, the steady steps.")
    prediction = param.Dict(default=None, allow_None=True, doc="The prediction.json object compared with.")
    error = param.String(default="", doc="Why the files give no comparison ('' when they do or are missing).")

    def __init__(self, state: RunCompareState | None = None, **params: Any) -> None:
        super().__init__(state=state or RunCompareState(), **params)
        self.state.param.watch(lambda *_: self.refresh(), [n for n in self.state.param if n != "name"])

    def refresh(self) -> None:
        """Compare the two files when both are there; a refusal (another model, kind or plan, a truncated log,
        not a prediction.json) is kept in ``error``, naming the file."""
        from workbench.launch.compare import check_prediction, compare_run
        from workbench.launch.runlogs import read_run_output

        s = self.state
        if not (s.run_text and s.prediction_text):
            self.param.update(rows=[], source="", prediction=None, error="")
            return
        try:
            measured = read_run_output(s.run_text, s.run_name)
            try:
                record = json.loads(s.prediction_text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{s.prediction_name}:{exc.lineno}: not JSON ({exc.msg})") from None
            prediction = check_prediction(record, s.prediction_name)
            rows = compare_run(measured, prediction, s.run_name)
        except ValueError as exc:
            self.param.update(rows=[], source="", prediction=None, error=str(exc))
            return
        source = f"{measured.source} output {s.run_name}, the mean of {measured.num_steps} steady steps"
        self.param.update(rows=rows, source=source, prediction=prediction, error="")

    def cli_command(self) -> str:
        """The ``workbench compare`` command that writes the same report."""
        s = self.state
        return shlex.join(["workbench", "compare", s.run_name or "RUN_OUTPUT", "--prediction",
                           s.prediction_name or "prediction.json", "--report", "compare.html"])  # fmt: skip

    def report_html(self) -> str:
        """The compare report of the rows; ValueError without a comparison."""
        from workbench_widgets.report import render_compare_report

        if not self.rows or self.prediction is None:
            raise ValueError("no comparison to report: upload a run's output and its prediction.json first")
        return render_compare_report(
            self.rows,
            self.prediction,
            run=self.source,
            prediction_name=self.state.prediction_name,
            command=self.cli_command(),
        )


def rows_markdown(store: RunCompareStore) -> str:
    """The comparison as a Markdown table (the report's columns and units), or why there is none."""
    if store.error:
        return f"**No comparison:** {page_text(store.error)}"
    if not store.rows:
        return "Upload a real run's output and the `prediction.json` of its export to lay them side by side."
    t = run_compare_table(store.rows)
    head = "| " + " | ".join(t["header"]) + " |\n|---|" + "---:|" * (len(t["header"]) - 1) + "\n"
    body = "\n".join("| " + " | ".join(page_text(c) for c in row) + " |" for row in t["rows"])
    return f"Measured: {page_text(store.source)}.\n\n" + head + body


class RunCompareView(param.Parameterized):
    """Two uploads (the run's output, its prediction.json), the table and the report download."""

    store = param.ClassSelector(class_=RunCompareStore)

    def __init__(self, store: RunCompareStore, **params: Any) -> None:
        super().__init__(store=store, **params)
        self.run_upload = ConfigUpload(
            accept=RUN_TYPES, max_bytes=MAX_RUN_BYTES, css_classes=["wb-run-upload"]
        )
        self.prediction_upload = ConfigUpload(
            accept=".json", max_bytes=MAX_RUN_BYTES, css_classes=["wb-prediction-upload"]
        )
        self.run_upload.param.watch(lambda e: self._on_upload(e, "run"), "file")
        self.prediction_upload.param.watch(lambda e: self._on_upload(e, "prediction"), "file")
        self.table = pn.pane.Markdown(rows_markdown(self.store), css_classes=["wb-run-compare"])
        self.download = pn.widgets.FileDownload(
            callback=self._report_file,
            filename="compare-report.html",
            label="Download compare report",
            embed=False,
            disabled=True,
            css_classes=["wb-run-compare-download"],
        )
        self.store.param.watch(self._show, ["rows", "error"])

    def _on_upload(self, event: Any, which: str) -> None:
        """A file from an upload control into the State; one refused for its size, or not text, is said."""
        file = event.new or {}
        name = str(file.get("name") or which)
        try:
            data = ConfigUpload.content(file)
            if data is None:
                raise ValueError(
                    f"{file.get('size', 0):,} bytes; the page reads files up to {MAX_RUN_BYTES // 2**20} MiB "
                    "(compare a longer log with `workbench compare` on the command line)"
                )
            text = data.decode("utf-8", errors="replace")
        except ValueError as exc:
            self.store.param.update(rows=[], error=f"{name}: {exc}")
            return
        self.store.state.param.update({f"{which}_name": name, f"{which}_text": text})

    def _show(self, *_: Any) -> None:
        self.table.object = rows_markdown(self.store)
        self.download.disabled = not self.store.rows

    def _report_file(self) -> io.BytesIO:
        return io.BytesIO(self.store.report_html().encode("utf-8"))

    def panel(self) -> pn.Column:
        return pn.Column(
            pn.pane.Markdown(
                "#### Predicted vs measured: a real run\n"
                "The output of a run (Megatron-LM/NeMo or torchtitan log, vLLM/SGLang benchmark JSON, "
                "`workbench run --json`) beside the `prediction.json` of its `workbench export`, "
                f"each up to {MAX_RUN_BYTES // 2**20} MiB."
            ),
            pn.Row(
                pn.pane.Markdown("Run output:"),
                self.run_upload,
                pn.pane.Markdown("prediction.json:"),
                self.prediction_upload,
            ),  # fmt: skip
            self.table,
            self.download,
            sizing_mode="stretch_width",
        )
