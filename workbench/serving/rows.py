"""Published serving runs as specs: read ``serving_public.csv`` and turn each row into (model, cluster, plan,
workload, measured values), or a reason why the specs cannot express it.

The schema is ``shared/validation/README.md`` ("Serving validation set"); the shipped copy is
``profiles/validation/serving_public.csv``. The parts: reading and checking the file and its cells
(:mod:`workbench.serving.rows_csv`), the model, cluster and plan of a row with the engines' documented defaults
for blank columns (:mod:`workbench.serving.rows_specs`) and its request process, replayed from a trace file where
one ships (:mod:`workbench.serving.rows_workload`); their public names are re-exported here. Rows the specs cannot
express come back as ``SkippedRow`` with the reason; nothing is raised for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.presets.calibration import Calibration
from workbench.serving.cost import ReplicaCost
from workbench.serving.engine_defaults import trtllm_bench_settings
from workbench.serving.phases import PhaseBatch
from workbench.serving.rows_csv import (
    DEFAULT_SERVING_DATA,
    MEASURED,
    SERVING_COLUMNS,
    TEXT_COLUMNS,
    Unexpressible,
    read_serving_rows,
    row_measured,
)
from workbench.serving.rows_phase import row_phases
from workbench.serving.rows_specs import DEFAULT_CLUSTER, VLLM_ASYNC_FROM, row_cluster, row_model, row_plan
from workbench.serving.rows_workload import row_workload
from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.serving import Arrival, ServingPlan, ServingWorkload

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_SERVING_DATA",
    "MEASURED",
    "SERVING_COLUMNS",
    "TEXT_COLUMNS",
    "VLLM_ASYNC_FROM",
    "ServingCase",
    "SkippedRow",
    "read_serving_rows",
    "row_case",
    "row_cases",
    "row_cluster",
    "row_measured",
    "row_model",
    "row_plan",
    "row_workload",
    "trtllm_bench_settings",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingCase:
    """One expressible row as specs, with its measured values (SI units) and the defaults it needed."""

    id: str
    source_key: str
    model: ModelSpec
    cluster: ClusterSpec
    plan: ServingPlan
    workload: ServingWorkload | None
    """The request process of a whole-request (``e2e``) row; None for a phase-only row."""
    phases: tuple[PhaseBatch, ...] = ()
    """A phase-only row's phases at their batch (:mod:`workbench.serving.rows_phase`); empty for ``e2e``."""
    steady_concurrency: int | None = None
    """A closed loop whose run length is not given: its clients, and the row is scored in steady state
    (``workbench.serving.steady.steady_window``)."""
    measured: dict[str, float]
    """Keys of ``MEASURED`` (``ttft_mean_s``, ``output_tokens_per_s``, ...): only those the row fills."""
    scope: str
    """``system`` (whole deployment) or ``one_replica`` (latencies of one replica's requests only)."""
    assumed: tuple[str, ...]
    """One line per default taken for a blank column, with its reason."""
    row: dict[str, str] = field(repr=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class SkippedRow:
    """A row the specs cannot express, and why."""

    id: str
    source_key: str
    reason: str


def row_case(row: dict[str, str]) -> ServingCase | SkippedRow:
    """Specs for one row, or a ``SkippedRow`` with the reason (a ValueError from a spec or the cost model, such
    as weights that do not fit, is a reason too)."""
    assumed: list[str] = []
    phases: tuple[PhaseBatch, ...] = ()
    workload = None
    try:
        if not row["phase"].strip():
            raise Unexpressible("phase is blank")
        model = row_model(row, assumed)
        cluster = row_cluster(row, assumed)
        plan = row_plan(row, model, cluster, assumed)
        measured = row_measured(row)
        if not measured:
            raise Unexpressible("no measured value")
        roles = ("both",) if plan.disaggregation is None else ("prefill", "decode")
        cost_of = {
            r: ReplicaCost.of(model, cluster, plan, Calibration(), role=r) for r in roles
        }  # layout, memory
        if row["phase"].strip() == "e2e":
            workload = row_workload(row, assumed)
        else:
            phases = row_phases(row, cost_of, assumed)
    except ValueError as exc:
        return SkippedRow(id=row["id"], source_key=row["source_key"], reason=str(exc))
    steady = workload is not None and workload.arrival is Arrival.CLOSED and not row["num_requests"].strip()
    return ServingCase(
        id=row["id"], source_key=row["source_key"], model=model, cluster=cluster, plan=plan, workload=workload,
        phases=phases, steady_concurrency=workload.concurrency if steady and workload is not None else None,
        measured=measured, scope=row["measured_scope"].strip() or "system", assumed=tuple(assumed), row=row,
    )  # fmt: skip


def row_cases(rows: list[dict[str, str]]) -> tuple[list[ServingCase], list[SkippedRow]]:
    """``row_case`` of every row, split into the expressible cases and the skipped rows (file order kept)."""
    cases: list[ServingCase] = []
    skipped: list[SkippedRow] = []
    for row in rows:
        result = row_case(row)
        (cases if isinstance(result, ServingCase) else skipped).append(result)  # type: ignore[arg-type]
    return cases, skipped
