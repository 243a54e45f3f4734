"""Mixed clusters: which pool runs which pipeline stage, and how long and how full each stage is.

``mixed_placement_figure`` draws one bar per pipeline stage (per pipeline rank of each pool for a batch split)
over the model's layers, coloured by pool, labelled with its layer count and tensor-parallel degree; the hover
gives its forward and backward time per micro-batch and its memory against the usable memory.
``mixed_stage_time_figure`` shows the stages' time per micro-batch (F + B) beside their memory share: balanced
stages have bars of equal length. Both are pure functions of a ``MixedEstimate`` (``workbench.estimate.mixed``).
"""

from __future__ import annotations

from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d
from bokeh.models.annotations import LabelSet
from bokeh.plotting import figure
from workbench_widgets.plots._style import GIB, MS_PER_S, category_colors

from workbench.estimate.mixed import MixedEstimate


def _rows(est: MixedEstimate) -> dict[str, list]:
    st = est.stages
    pools = list(dict.fromkeys(st["pool"].to_list()))
    colors = dict(zip(pools, category_colors(len(pools)), strict=True))
    labels = [
        f"{pool} stage {s}" if est.kind == "pipeline" else f"{pool} rank {s}"
        for pool, s in zip(st["pool"].to_list(), st["stage"].to_list(), strict=True)
    ]
    first, layers = st["first_layer"].to_list(), st["layers"].to_list()
    f_ms = [v * MS_PER_S for v in st["forward_s"].to_list()]
    b_ms = [v * MS_PER_S for v in st["backward_s"].to_list()]
    return {
        "row": labels,
        "pool": st["pool"].to_list(),
        "device": st["device"].to_list(),
        "left": first,
        "right": [a + n for a, n in zip(first, layers, strict=True)],
        "layers": layers,
        "tp": st["tp"].to_list(),
        "text": [f"{n} layers, tp{t}" for n, t in zip(layers, st["tp"].to_list(), strict=True)],
        "color": [colors[p] for p in st["pool"].to_list()],
        "f_ms": f_ms,
        "b_ms": b_ms,
        "stage_ms": [a + b for a, b in zip(f_ms, b_ms, strict=True)],
        "memory_gib": [v / GIB for v in st["memory_bytes"].to_list()],
        "usable_gib": [v / GIB for v in st["usable_bytes"].to_list()],
    }


def mixed_placement_figure(est: MixedEstimate, *, num_layers: int, width: int = 900) -> figure:
    """Stages over the layers 0..``num_layers``, one row each, coloured by pool (module docstring)."""
    data = _rows(est)
    rows = list(reversed(data["row"]))
    fig = figure(
        y_range=FactorRange(*rows),
        x_range=Range1d(start=0, end=num_layers),
        width=width,
        height=60 + 26 * len(rows),
        title=f"Which pool runs which layers ({est.kind}: {est.description})",
        x_axis_label="decoder layer",
        toolbar_location=None,
        name="mixed_placement",
    )
    source = ColumnDataSource(data)
    bars = fig.hbar(
        y="row", left="left", right="right", height=0.8, color="color", legend_field="pool", source=source
    )
    fig.add_layout(
        LabelSet(x="left", y="row", text="text", x_offset=4, y_offset=-6, text_font_size="9pt",
                 text_color="white", source=source)
    )  # fmt: skip
    fig.add_tools(
        HoverTool(
            renderers=[bars],
            tooltips=[
                ("stage", "@row (@device)"),
                ("layers", "@left to @right (@layers), tp @tp"),
                ("forward / backward", "@f_ms{0.0} / @b_ms{0.0} ms per micro-batch"),
                ("memory", "@memory_gib{0.0} of @usable_gib{0.0} GiB usable"),
            ],
        )
    )
    fig.legend.location = "top_right"
    fig.legend.title = "pool"
    return fig


def mixed_stage_time_figure(est: MixedEstimate, *, width: int = 900) -> figure:
    """Per stage, F + B of one micro-batch (ms), coloured by pool: the slowest bar sets the pipeline's pace."""
    data = _rows(est)
    rows = list(reversed(data["row"]))
    fig = figure(
        y_range=FactorRange(*rows),
        x_range=Range1d(start=0, end=1.05 * max(data["stage_ms"], default=1.0)),
        width=width,
        height=60 + 26 * len(rows),
        title="Time per micro-batch of each stage (forward + backward, communication folded in)",
        x_axis_label="ms",
        toolbar_location=None,
        name="mixed_stage_time",
    )
    source = ColumnDataSource(data)
    bars = fig.hbar(y="row", left=0, right="stage_ms", height=0.8, color="color", source=source)
    fig.add_tools(
        HoverTool(
            renderers=[bars],
            tooltips=[("stage", "@row"), ("F + B", "@f_ms{0.0} + @b_ms{0.0} ms"), ("layers", "@layers")],
        )
    )
    return fig
