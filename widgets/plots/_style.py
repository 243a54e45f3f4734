"""Shared look of the figures: a colour-blind-safe palette, display units and small helpers.

Colours are the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"; also Wong, Nature Methods
8:441, 2011), distinguishable under the common colour-vision deficiencies. Display-unit conversions live
here and only here: the core speaks seconds and bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

OKABE_ITO: dict[str, str] = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}
GREY = "#999999"
"""Neutral grey for idle, infeasible and unused things."""

OP_COLORS: dict[str, str] = {
    "F": OKABE_ITO["blue"],
    "B": OKABE_ITO["vermillion"],
    "I": OKABE_ITO["orange"],
    "W": OKABE_ITO["bluish_green"],
}
"""Compute ops of the timeline: forward, full backward, input-gradient backward, weight-gradient backward."""
COMM_COLOR = OKABE_ITO["reddish_purple"]
"""Any timeline op that is not F/B/I/W (communication and waits) is drawn on the rank's comm lane."""
OP_NAMES: dict[str, str] = {
    "F": "forward",
    "B": "backward",
    "I": "backward (inputs)",
    "W": "backward (weights)",
}

MEMORY_COLORS: dict[str, str] = {
    "parameters_bytes": OKABE_ITO["blue"],
    "gradients_bytes": OKABE_ITO["sky_blue"],
    "optimizer_states_bytes": OKABE_ITO["bluish_green"],
    "activations_bytes": OKABE_ITO["vermillion"],
    "buffers_bytes": OKABE_ITO["orange"],
    "other_bytes": OKABE_ITO["reddish_purple"],
}

CATEGORY_PALETTE: tuple[str, ...] = tuple(
    OKABE_ITO[k]
    for k in ("blue", "orange", "bluish_green", "vermillion", "sky_blue", "reddish_purple", "yellow", "black")
)
"""Up to eight categories (pp degree, tp degree, pipeline stage) in the Okabe-Ito order."""

GIB = 2**30
"""Bytes per GiB (1024^3)."""
MS_PER_S = 1e3

PLOT_WIDTH_PX = 1200
"""Default figure width: fits a 1366 px wide screen with margins."""


def category_colors(num: int) -> list[str]:
    """``num`` distinct colours: Okabe-Ito up to 8, else the colour-blind-safe Cividis ramp."""
    if num <= len(CATEGORY_PALETTE):
        return list(CATEGORY_PALETTE[:num])
    from bokeh.palettes import cividis

    return list(cividis(num))


def op_color(op: str) -> str:
    return OP_COLORS.get(op, COMM_COLOR)


def is_compute_op(op: str) -> bool:
    return op in OP_COLORS


def label_ticks(
    values: Sequence[int], labels: Sequence[str], max_ticks: int = 32
) -> tuple[list[int], dict[int, str]]:
    """Tick positions (every k-th value so at most ``max_ticks`` show) and their label overrides."""
    step = max(1, -(-len(values) // max_ticks))
    ticks = list(values)[::step]
    return ticks, {int(v): lab for v, lab in zip(values, labels, strict=True)}


PLAIN_NUMBER_FORMAT = "0,0.[00]"
"""Numeral.js format of linear axes: ``200,000`` and ``12.5``, never bokeh's default ``2.000e+5``."""


def plain_axes(fig: Any) -> Any:
    """Give every linear axis of ``fig`` (x, y, and extra ones such as a right-hand axis) ``PLAIN_NUMBER_FORMAT``
    instead of bokeh's ``BasicTickFormatter``, which switches to scientific notation above 10^5 (a 200-second
    step in ms, a cluster's tokens/s). Categorical and log axes keep theirs. Returns ``fig``."""
    from bokeh.models import LinearAxis, NumeralTickFormatter

    for axis in (*fig.left, *fig.right, *fig.above, *fig.below):
        if isinstance(axis, LinearAxis) and type(axis.formatter).__name__ == "BasicTickFormatter":
            axis.formatter = NumeralTickFormatter(format=PLAIN_NUMBER_FORMAT)
    return fig


FIGURE_SPACE = "\u2007"
"""Unicode FIGURE SPACE: as wide as a digit in fonts with tabular figures (DejaVu Sans, Liberation Sans,
Helvetica, Arial), invisible."""


def fixed_width_tick_labels(axis: Any, num_chars: int = 5) -> None:
    """Left-pad the tick labels of ``axis`` (a vertical axis: labels right-aligned at the frame, so the padding
    is not seen) with ``FIGURE_SPACE`` to ``num_chars`` characters, its formatter kept for the text: the axis
    is then as wide for ``80`` as for ``100`` (labels up to ``num_chars`` digits, a label without a decimal
    point or separator present, in a font with tabular figures). BokehJS lays a figure out again, with the
    whole page around it, whenever an axis changes width (issue 51 item 10)."""
    from bokeh.models import CustomJSTickFormatter

    axis.formatter = CustomJSTickFormatter(
        args={"base": axis.formatter},
        code=f"return base.doFormat(ticks, {{loc: 0}})[index].padStart({num_chars}, {FIGURE_SPACE!r})",
    )


SHORT_COLUMN_ROWS = 256
"""Columns up to this many rows go to the page as JSON lists (``short_columns_as_lists``)."""


def short_columns_as_lists(data: dict[str, Any], max_rows: int = SHORT_COLUMN_ROWS) -> dict[str, Any]:
    """``data`` (a ColumnDataSource's columns) with its numpy columns of at most ``max_rows`` rows as lists.

    Bokeh sends every numpy column of a change as a binary buffer: two websocket frames (a header, then the
    bytes) which the server writes and the page takes as two messages apiece; a short column costs less inside
    the patch's one JSON message. Long columns (a timeline's blocks) stay binary (issue 51 item 10)."""
    return {
        k: v.tolist() if hasattr(v, "tolist") and getattr(v, "ndim", 0) == 1 and len(v) <= max_rows else v
        for k, v in data.items()
    }


def legend_above(fig: Any, entries: Sequence[tuple[str, Any, int]], **props: Any) -> Any:
    """A horizontal legend above ``fig`` of ``entries`` (label, renderer, row index of the renderer's source
    whose colours the entry's glyph takes), returned.

    The renderers given should be legend-only ones (``legend_glyphs``): BokehJS rebuilds a legend's entries,
    and lays its figure out again, whenever anything reachable from its items changes, a data source
    included; a legend that references only constant sources costs nothing when the data renderers change
    (issue 51 item 10)."""
    from bokeh.core.property.vectorization import value
    from bokeh.models import Legend, LegendItem

    items = [LegendItem(label=value(label), renderers=[r], index=i) for label, r, i in entries]
    legend = Legend(items=items, orientation="horizontal", **props)
    fig.add_layout(legend, "above")
    return legend


def nan_rows(num: int, *columns: str, **constant: Sequence[Any]) -> dict[str, list[Any]]:
    """The source of a legend-only renderer: ``num`` rows of NaN in ``columns`` (nothing is drawn) and the
    given per-row ``constant`` columns (its colours)."""
    return {**{c: [float("nan")] * num for c in columns}, **{k: list(v) for k, v in constant.items()}}
