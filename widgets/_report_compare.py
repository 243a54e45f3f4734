"""The compare section of the HTML report: predicted beside measured, with the error.

Two sources, one section ("Predicted vs measured", anchor ``predicted-vs-measured``):

- a real run read back by ``workbench compare`` (``workbench.launch.compare.compare_run``'s rows: one metric in SI
  units each, measured and predicted), shown in display units (ms, GiB, %);
- a plan run for real by ``workbench run`` beside the same plan priced by a backend (two ``Estimate``,
  ``workbench.estimate.compare.compare``), with both timelines on the same axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from workbench_widgets._report_page import Block, Section, table
from workbench_widgets.plots import comparison_timeline_figure
from workbench_widgets.plots._style import GIB, MS_PER_S

if TYPE_CHECKING:
    from workbench.launch.compare import CompareRow
    from workbench.specs.estimate import Estimate

HEADING, ANCHOR = "Predicted vs measured", "predicted-vs-measured"
METRIC_DISPLAY: dict[str, tuple[str, float, str]] = {
    "step_time_s": ("step time (ms)", MS_PER_S, ",.1f"),
    "tflops_per_device": ("throughput per device (TFLOP/s)", 1.0, ",.1f"),
    "tokens_per_s_per_device": ("tokens/s per device", 1.0, ",.0f"),
    "mfu": ("MFU (%)", 100.0, ".1f"),
    "peak_memory_bytes": ("peak memory per device (GiB)", 1 / GIB, ",.2f"),
    "ttft_s": ("mean TTFT (ms)", MS_PER_S, ",.1f"),
    "tpot_s": ("mean TPOT (ms)", MS_PER_S, ",.2f"),
    "output_tokens_per_s": ("output tokens/s", 1.0, ",.1f"),
}
"""``CompareRow.metric`` -> (label with the display unit, factor from SI, format)."""


def run_compare_table(rows: Sequence[CompareRow]) -> dict[str, Any]:
    """``compare_run``'s rows in display units: quantity, measured, predicted, error ((predicted - measured) /
    measured, as ``workbench compare`` prints it). A metric not in ``METRIC_DISPLAY`` is shown in SI units."""
    body = []
    for r in rows:
        label, factor, fmt = METRIC_DISPLAY.get(r.metric, (r.metric, 1.0, ".4g"))
        err = r.error_frac
        body.append(
            [
                label,
                format(r.measured * factor, fmt),
                format(r.predicted * factor, fmt),
                "-" if err != err else f"{err:+.1%}",
            ]
        )
    header = ["quantity", "measured", "predicted", "error ((predicted - measured) / measured)"]
    return table(header, body, [False, True, True, True])


def run_compare_section(rows: Sequence[CompareRow], *, run: str, prediction: str) -> Section:
    """The section of a real run read back: ``run`` says what was read (the stack's output, the file, the steady
    steps averaged), ``prediction`` the prediction it is laid beside."""
    blocks: list[Block] = [
        {"kind": "note", "text": f"Measured: {run}. Predicted: {prediction}."},
        {"kind": "table", "table": run_compare_table(rows)},
    ]
    return Section(heading=HEADING, id=ANCHOR, blocks=blocks)


def estimate_compare_table(predicted: Estimate, measured: Estimate) -> dict[str, Any]:
    """Predicted vs measured (:func:`workbench.estimate.compare.compare`): step time, bubble fraction,
    tokens/s, peak memory, and the relative error predicted / measured - 1 ("-" where the measured value is 0)."""
    from workbench.estimate.compare import compare

    cmp = compare(predicted, measured)
    display = {  # key -> (label, scale to the display unit, format)
        "step_time_s": ("step time (ms)", MS_PER_S, ",.2f"),
        "bubble_fraction": ("bubble fraction (%)", 100.0, ".1f"),
        "tokens_per_s": ("tokens/s", 1.0, ",.0f"),
        "peak_memory_bytes": ("peak memory per rank (GiB)", 1 / GIB, ",.3f"),
    }
    rows = []
    for key, (label, scale, fmt) in display.items():
        fig = cmp[key]
        err = fig["error_frac"]
        rows.append(
            [
                label,
                format(fig["predicted"] * scale, fmt),
                format(fig["measured"] * scale, fmt),
                "-" if err is None else f"{err * 100:+.1f} %",
            ]
        )
    header = [
        "quantity",
        f"predicted ({predicted.backend})",
        f"measured ({measured.backend})",
        "error (predicted / measured - 1)",
    ]
    return table(header, rows, [False, True, True, True])


def estimate_compare_section(predicted: Estimate, measured: Estimate) -> Section:
    """The same plan priced by a backend and run for real: the table and both timelines on the same axes."""
    note = (
        "The same plan priced by a backend (predicted) and run for real (measured). Error = predicted / measured"
        " - 1.\nIn the timeline each lane has two rows: predicted (light, outlined) above measured (solid); the "
        "dashed line is the\npredicted makespan, the solid one the measured makespan."
    )
    return Section(
        heading=HEADING,
        id=ANCHOR,
        blocks=[
            {"kind": "note", "text": note},
            {"kind": "table", "table": estimate_compare_table(predicted, measured)},
            {"kind": "figures", "names": ["comparison"]},
        ],
        figures={"comparison": comparison_timeline_figure(predicted, measured)},
    )
