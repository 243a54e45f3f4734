"""The answer at the top of the HTML report: the best plan's headline numbers and why it wins.

A person deciding reads: which plan, its tokens/s, MFU and memory against what a device may use, and (with a
search) how long the token budget takes on the cluster and for how many device-hours; then why it beats the
best plan of each *distinct* layout (``workbench.search.planner.layout_key``: variants that differ only in
virtual stages, micro-batch, ZeRO stage, recompute or rank order are folded under their layout, as the CLI
does), each line saying whether the two are within the tie band (``TIE_FRAC``: the model's worst
plan-ranking miss on published runs), where the ranking cannot tell them apart; and, where the stack publishes
a recipe for the model on the device (``workbench.validate.recipes``), that recipe's layout priced on the same
cluster and workload beside #1.

Rows of display strings only; the template escapes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from workbench_widgets.plots._style import GIB, MS_PER_S
from workbench_widgets.plots.memory import usable_memory_bytes

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.search.result import SearchResult
    from workbench.specs.estimate import Estimate

MAX_LAYOUTS = 5
"""Distinct layouts the summary compares #1 with (the best plan of each, in rank order)."""
SECONDS_PER_DAY = 86_400.0


def headroom_frac(search: SearchResult | None) -> float | None:
    """The memory headroom the search judged plans with (``Constraints.memory_headroom_frac``), None without
    a search."""
    return None if search is None else float(search.constraints.memory_headroom_frac)


def report_summary(
    estimates: Sequence[Estimate], search: SearchResult | None = None, calibration: Calibration | None = None
) -> dict[str, Any]:
    """``{"plan", "rows", "why", "tie_band", "reference"}`` for the report's summary.

    ``plan``: #1's ``describe()``; ``rows``: (measure, value) pairs with units; ``why``: one sentence per
    distinct layout compared (empty without a search of two or more layouts); ``tie_band``: the sentence
    that explains the ``=`` marks ('' without a search); ``reference``: #1 beside the stack's published recipe
    (:func:`reference_line`; '' without a search or a recipe). ``calibration``: the one the search priced
    with (default: the default calibration of the search's stack, as the app prices).
    """
    best = estimates[0]
    usable = usable_memory_bytes(best, headroom_frac(search))
    verdict = "fits" if best.peak_memory_bytes <= usable else "does not fit"
    rows = [
        ("step time", f"{best.step_time_s * MS_PER_S:,.1f} ms"),
        ("throughput", f"{best.tokens_per_s:,.0f} tokens/s on {best.plan.num_devices:,} devices"),
        ("MFU", f"{best.mfu * 100:.1f} %"),
        (
            "peak memory per device",
            f"{best.peak_memory_bytes / GIB:,.1f} GiB of {usable / GIB:,.1f} GiB usable "
            f"({best.memory_capacity_bytes / GIB:,.1f} GiB HBM; {verdict})",
        ),
        ("bubble", f"{best.bubble_fraction * 100:.1f} % of the step (critical rank)"),
    ]
    why: list[str] = []
    tie_band = reference = ""
    if search is not None and search.plans.height:
        reference = reference_line(best, search.framework, calibration, usable)
        top = search.plans.row(0, named=True)
        rows += _budget_rows(top, search.token_budget)
        why = _why_lines(search)
        from workbench.search.frontier import TIE_FRAC

        tie_band = (
            f"= tied with #1: within {TIE_FRAC:.1%} of its {_objective_column(search)}, the model's worst "
            "plan-ranking miss on published runs: the ranking cannot tell such plans apart, so pick among "
            "them by what the model does not price (your stack's support, the recipe you know works)."
        )
    return {
        "plan": best.plan.describe(),
        "backend": best.backend,
        "rows": rows,
        "why": why,
        "tie_band": tie_band,
        "reference": reference,
    }


def reference_line(
    best: Estimate,
    framework_id: str,
    calibration: Calibration | None = None,
    usable_bytes: float | None = None,
) -> str:
    """#1 beside the published recipe of the stack ``framework_id`` for its model on its device, both priced
    with ``calibration`` (default: the stack's default calibration) on #1's cluster and workload
    (``workbench.validate.recipes.ReferenceComparison.sentence``, the tie band ``TIE_FRAC``); '' when the stack
    publishes no recipe of the model."""
    from workbench.presets.calibration import load_calibration
    from workbench.search.frontier import TIE_FRAC
    from workbench.validate.recipes import reference_comparison

    if not framework_id:
        return ""
    cal = calibration if calibration is not None else load_calibration(framework=framework_id)
    ref = reference_comparison(best, framework_id, cal, usable_bytes=usable_bytes)
    return "" if ref is None else ref.sentence(TIE_FRAC)


def _objective_column(search: SearchResult) -> str:
    from workbench.search.rank import OBJECTIVES

    return OBJECTIVES[search.objective][0]


def _budget_rows(top: dict[str, Any], token_budget: float) -> list[tuple[str, str]]:
    """Days on the cluster and device-hours for the token budget (the search's ``time_to_train_s`` and
    ``device_hours`` of #1)."""
    time_s, hours = top.get("time_to_train_s"), top.get("device_hours")
    if time_s is None or hours is None:
        return []
    return [
        (
            f"token budget ({_tokens(token_budget)} tokens)",
            f"{time_s / SECONDS_PER_DAY:,.1f} days on {int(top['num_devices']):,} devices, "
            f"{hours:,.0f} device-hours",
        )
    ]


def _tokens(count: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if count >= scale:
            return f"{count / scale:,.3g} {unit}"
    return f"{count:,.0f}"


def _why_lines(search: SearchResult) -> list[str]:
    """Why #1 beats the best plan of each of the next ``MAX_LAYOUTS`` distinct layouts that fit."""
    from workbench.search.refine import explain_win

    rows = search.plans.to_dicts()
    col = _objective_column(search)
    top = rows[0]
    lines = []
    seen = {top.get("layout")}
    for i, row in enumerate(rows[1:], start=2):
        if row.get("layout") in seen or not row.get("fits"):
            continue
        seen.add(row.get("layout"))
        text = explain_win(top, row, col, runner_label=f"#{i} ({row['plan']})")
        tier = "" if row.get("refined") else f" (#{i} screened only)"
        lines.append(text + tier + (" Tied: within the band." if row.get("tied") else ""))
        if len(lines) == MAX_LAYOUTS:
            break
    return lines


def fold_marks(estimates: Sequence[Estimate], search: SearchResult | None) -> list[tuple[bool, bool]]:
    """(tied, variant) of each estimate from the search's ranked rows (matched by plan text); (False, False)
    without a search or a match."""
    if search is None or not search.plans.height:
        return [(False, False)] * len(estimates)
    marks = {
        r["plan"]: (bool(r.get("tied")), bool(r.get("variant")))
        for r in search.plans.select(
            [c for c in ("plan", "tied", "variant") if c in search.plans.columns]
        ).to_dicts()
    }
    return [marks.get(e.plan.describe(), (False, False)) for e in estimates]
