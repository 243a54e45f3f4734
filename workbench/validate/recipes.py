"""A stack's published reference recipe for a model on a device, priced on the user's cluster and workload.

A stack's published layouts are rows of the validation data (``profiles/validation/training_public.csv``; for
Megatron-Core the Megatron-Bridge 25.11 performance recipes, rows ``MBRIDGE_2511-*``: model, GPU, tp/pp/cp/ep/vpp,
micro-batch, global batch, sequence length). A row is one stack's when its framework text names that profile
(:func:`workbench.validate.training.row_framework`, the reading validation uses), and one model's when the
row's architecture (:func:`workbench.validate.training.row_case`) is the model's, the name aside.

- :func:`published_recipe`: the row of a (stack, model, device), as validation reads it (blanks filled as
  ``PLAN_DEFAULTS`` says), or None;
- :func:`reference_comparison`: that recipe's layout on the user's cluster and workload (its data-parallel
  degree refilled from the devices), priced by ``estimate_plan`` with the user's calibration, beside the best
  plan; or why it cannot be (another device, degrees that do not divide the devices, a batch or rule it breaks).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.specs.plan import ParallelPlan, data_parallel_degree
from workbench.validate.rows import Unexpressible
from workbench.validate.training import RowCase, row_case, row_framework
from workbench.validate.training_csv import DEFAULT_DATA, read_rows

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.estimate import Estimate
    from workbench.specs.model import ModelSpec

GIB = 2**30
_CONFIDENCE = {"high": 0, "medium": 1, "low": 2}
"""A row's ``confidence`` column, best first: among rows of one (stack, model, device) the surest is chosen."""


@lru_cache(maxsize=4)
def _stack_cases(data: Path, framework_id: str) -> tuple[RowCase, ...]:
    """Every row of ``data`` whose framework text names the profile ``framework_id``, as specs (rows validation
    cannot express are left out), read once per file and stack."""
    cases = []
    for row in read_rows(data):
        if row_framework(row, []).id != framework_id:
            continue
        try:
            cases.append(row_case(row))
        except (Unexpressible, ValueError):
            continue
    return tuple(cases)


def _same_model(a: ModelSpec, b: ModelSpec) -> bool:
    return dataclasses.replace(a, name=b.name) == b


def model_recipes(framework_id: str, model: ModelSpec, data: Path = DEFAULT_DATA) -> tuple[RowCase, ...]:
    """The stack's published rows of ``model`` (any device), in file order."""
    return tuple(c for c in _stack_cases(Path(data), framework_id) if _same_model(c.model, model))


def published_recipe(
    framework_id: str, model: ModelSpec, device_id: str, dtype: str | None = None, data: Path = DEFAULT_DATA
) -> RowCase | None:
    """The published recipe of the stack ``framework_id`` for ``model`` on the device preset ``device_id``: the
    row with the same ``dtype`` first (when given), then the surest (``confidence``), then the first in the file.
    None when the stack publishes none for that model and device."""
    found = [c for c in model_recipes(framework_id, model, data) if c.cluster.device.id == device_id]
    if not found:
        return None
    return min(
        found,
        key=lambda c: (
            dtype is not None and str(c.workload.dtype) != dtype,
            _CONFIDENCE.get(c.row["confidence"], 3),
        ),
    )


@dataclass(frozen=True, slots=True)
class ReferenceComparison:
    """The best plan beside the stack's published recipe on the same cluster and workload.

    ``row_id``/``source``: the recipe's validation row (its source key when the stack publishes the model only
    on other devices) and its source text; ``published``: its layout as published (degrees, devices, batch,
    dtype; '' for another device's); ``plan``: the layout on the user's cluster (None when it cannot
    be laid there); ``estimate``: its estimate (None with a ``reason``); ``best``: the best plan's estimate;
    ``usable_bytes``: the device memory a plan may fill."""

    row_id: str
    source: str
    published: str
    best: Estimate
    usable_bytes: float
    plan: ParallelPlan | None = None
    estimate: Estimate | None = None
    reason: str = ""

    @property
    def faster_frac(self) -> float | None:
        """The best plan's tokens/s over the recipe's, less 1 (0.07: 7 % faster); None without an estimate."""
        if self.estimate is None:
            return None
        return self.best.tokens_per_s / self.estimate.tokens_per_s - 1.0

    @property
    def fits(self) -> bool:
        return self.estimate is not None and self.estimate.peak_memory_bytes <= self.usable_bytes

    def sentence(self, tie_frac: float) -> str:
        """One line: the recipe's plan, its tokens/s and memory, and how the best plan compares (faster by
        X %, or within ``tie_frac``: the tie band) or why the recipe is not comparable."""
        head = (
            f"published recipe {self.row_id} ({self.source}{': ' if self.published else ''}{self.published})"
        )
        if self.estimate is None or self.plan is None:
            return f"{head}: not comparable here: {self.reason}"
        est = self.estimate
        memory = f"{est.peak_memory_bytes / GIB:,.1f} GiB of {self.usable_bytes / GIB:,.1f} GiB usable"
        numbers = f"{self.plan.describe()}: {est.tokens_per_s:,.0f} tokens/s, {memory}"
        if not self.fits:
            return f"{head} as {numbers}: does not fit, so #1 is the plan that runs"
        if self.plan == self.best.plan:
            return f"{head} as {numbers}: #1 is the published recipe"
        frac = self.faster_frac or 0.0
        if abs(frac) <= tie_frac:
            verdict = f"#1 at {frac:+.1%}: the published recipe is within the tie band ({tie_frac:.1%})"
        elif frac > 0:
            verdict = f"#1 is faster by {frac:.1%}"
        else:
            verdict = f"the published recipe is faster by {1.0 / (1.0 + frac) - 1.0:.1%}"
        return f"{head} as {numbers}; {verdict}"


def reference_comparison(
    best: Estimate,
    framework_id: str,
    calibration: Calibration,
    *,
    usable_bytes: float | None = None,
    data: Path = DEFAULT_DATA,
) -> ReferenceComparison | None:
    """``best`` (an estimate on the user's cluster and workload) beside the published recipe of the stack
    ``framework_id`` for its model on its device, priced with ``calibration`` (the one ``best`` was priced
    with) by ``workbench.estimate.analytic.estimate_plan``. None when the stack publishes no recipe of that
    model; a comparison with a ``reason`` when it publishes one only on other devices or the layout cannot be
    laid on this cluster and batch. ``usable_bytes``: the memory a plan may fill (default: the HBM less the
    estimate's headroom)."""
    from workbench.estimate.analytic import estimate_plan

    model, cluster, workload = best.model, best.cluster, best.workload
    usable = (
        usable_bytes
        if usable_bytes is not None
        else best.memory_capacity_bytes * (1.0 - best.memory_headroom_frac)
    )
    case = published_recipe(framework_id, model, cluster.device.id, str(workload.dtype), data)
    if case is None:
        elsewhere = model_recipes(framework_id, model, data)
        if not elsewhere:
            return None
        devices = ", ".join(sorted({c.cluster.device.id for c in elsewhere}))
        return ReferenceComparison(
            row_id=", ".join(sorted({c.source_key for c in elsewhere})),
            source=elsewhere[0].row.get("source", "").split(" [")[0],
            published="",
            best=best,
            usable_bytes=usable,
            reason=f"published for {devices}, not {cluster.device.id}",
        )
    p = case.plan
    try:
        dp = data_parallel_degree(cluster.num_devices, tp=p.tp, pp=p.pp, cp=p.cp)
    except ValueError as exc:
        return _comparison(case, best, usable, reason=str(exc))
    plan = dataclasses.replace(p, dp=dp)
    fw = case.framework
    if str(workload.dtype) == "fp8" and fw.fp8_recipe != calibration.framework.fp8_recipe:
        plan = dataclasses.replace(plan, fp8_recipe=fw.fp8_recipe)
    try:
        est = estimate_plan(model, cluster, workload, plan, calibration=calibration)
    except ValueError as exc:
        return _comparison(case, best, usable, plan=plan, reason=str(exc))
    return _comparison(case, best, usable, plan=plan, estimate=est)


def _comparison(
    case: RowCase,
    best: Estimate,
    usable: float,
    *,
    plan: ParallelPlan | None = None,
    estimate: Estimate | None = None,
    reason: str = "",
) -> ReferenceComparison:
    p, w = case.plan, case.workload
    layout = (
        " ".join(f"{k}{getattr(p, k)}" for k in ("tp", "pp", "cp", "ep", "vpp") if getattr(p, k) > 1)
        or "dp only"
    )
    published = (
        f"{layout} mbs{p.micro_batch_size} on {p.num_devices:,} {case.cluster.device.id}, "
        f"seq {w.seq_len}, global batch {w.global_batch_size}, {w.dtype}"
    )
    if w.dtype != best.workload.dtype:  # the layout is priced in the user's precision
        published += f"; priced here in {best.workload.dtype}"
    return ReferenceComparison(
        row_id=case.id,
        source=case.row.get("source", "").split(" [")[0],
        published=published,
        best=best,
        usable_bytes=usable,
        plan=plan,
        estimate=estimate,
        reason=reason,
    )
