"""The mixed-cluster sections of the HTML report (``workbench plan --cluster A:N+B:M --report``): the ranked plans
over the pools, each pool's best plan alone, the notes, and for the chosen plan which pool runs which stages
(:func:`workbench_widgets.plots.mixed.mixed_placement_figure`), the stages' time per micro-batch and the simulated
pipeline timeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from markupsafe import Markup
from workbench_widgets._report_page import Block, Section, table
from workbench_widgets.plots.mixed import mixed_placement_figure, mixed_stage_time_figure
from workbench_widgets.plots.timeline import timeline_figure

if TYPE_CHECKING:
    from workbench.search.mixed.planner import MixedSearchResult


def mixed_intro(result: MixedSearchResult, command: str) -> list[Block]:
    """The cluster, the workload and the command."""
    w = result.workload
    text = Markup("{}; sequence {}, global batch {}, {}. Command: <code>{}</code>").format(
        result.cluster.describe(), w.seq_len, w.global_batch_size, str(w.dtype), command
    )
    return [{"kind": "p", "text": text}]


def mixed_sections(result: MixedSearchResult, plan_index: int) -> list[Section]:
    """The plans, each pool alone, the notes and the figures of ``result.plans[plan_index]``."""
    plans = [
        [str(i + 1), e.kind, e.description, f"{e.tokens_per_s:,.0f}", f"{e.mfu:.1%}", f"{e.step_time_s:.3f}",
         "yes" if e.fits else "no"]
        for i, e in enumerate(result.plans)
    ]  # fmt: skip
    alone = [
        [lab, "-" if a is None else a.plan.describe(), "-" if a is None else f"{a.tokens_per_s:,.0f}"]
        for lab, a in zip(result.cluster.labels, result.alone, strict=True)
    ]
    header = ["#", "kind", "plan", "tokens/s", "MFU", "step s", "fits"]
    alone_blocks: list[Block] = [
        {"kind": "table", "table": table(["pool", "plan", "tokens/s"], alone, [False, False, True])}
    ]
    if result.notes:
        alone_blocks.append({"kind": "list", "items": list(result.notes)})
    est = result.plans[plan_index]
    title = "Pipeline timeline" if est.kind == "pipeline" else "Straggler pool's pipeline timeline"
    figures = {
        "mixed_placement": mixed_placement_figure(est, num_layers=result.model.num_layers),
        "mixed_stage_time": mixed_stage_time_figure(est),
        "mixed_timeline": timeline_figure(
            est.timeline,
            makespan_s=est.parts["pipeline_s"],
            bubble_fraction=est.bubble_fraction,
            title_prefix=title,
        ),
    }
    numeric = [True, False, False, True, True, True, False]
    return [
        Section(
            heading="Ranked plans over the pools",
            blocks=[{"kind": "table", "table": table(header, plans, numeric)}],
        ),
        Section(
            heading="Each pool alone on the whole batch (the homogeneous planner's #1)", blocks=alone_blocks
        ),
        Section(
            heading=f"Plan #{plan_index + 1}",
            blocks=[{"kind": "figures", "names": list(figures)}],
            figures=figures,
        ),
    ]
