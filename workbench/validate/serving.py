"""Published serving runs against the simulator: predicted vs measured TTFT, TPOT and throughput per row, the
MAPE per metric group and per source (``workbench validate --data serving_public.csv``).

Each row becomes (model, cluster, plan, workload, measured values) (:func:`row_case`), or a reason why the specs
cannot express it: reading and checking the file (:mod:`workbench.validate.serving_csv`), the model, cluster and
plan of a row with the engines' documented defaults for blank columns (:mod:`workbench.validate.serving_specs`),
its request process, replayed from a trace file where one ships (:mod:`workbench.validate.serving_workload`), or
the batch of a phase-only row (:mod:`workbench.validate.serving_phase`).
Every expressible row of the file (:func:`row_cases`) is simulated with
:func:`workbench.serving.estimate.serve_estimate`; each measured column the row fills is compared with the
same statistic of the simulation. Nothing is fitted to these rows: the serving cost uses the kernel tables, the
device presets and the serving engine profiles (``profiles/engines/``, each value cited there) only; every row
names the engine profile that priced it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workbench.presets.calibration import Calibration
from workbench.presets.engines import load_engine
from workbench.serving.cost import ReplicaCost
from workbench.serving.engine_defaults import priced_engine
from workbench.serving.estimate import ServingEstimate, serve_estimate
from workbench.serving.memory import kv_capacity_tokens
from workbench.serving.offload import host_offload_bytes_per_device, offloaded_layers
from workbench.serving.phases import PhaseBatch, phase_predictions
from workbench.serving.results import token_weighted_tpot_s
from workbench.serving.steady import steady_window
from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.serving import ServingPlan, ServingWorkload
from workbench.validate.rows import (
    SkippedRow,
    Unexpressible,
    ape,
    build_cases,
    cell_count,
    cell_number,
    mape_by,
    row_model,
    skipped_row,
)
from workbench.validate.serving_codes import read_serving_codes
from workbench.validate.serving_csv import DEFAULT_SERVING_DATA, read_serving_rows, row_measured
from workbench.validate.serving_phase import prefill_batch_tokens, row_phases
from workbench.validate.serving_specs import complete_model, ep_readings, row_cluster, row_plan
from workbench.validate.serving_workload import read_workload_kind, row_workload, steady_warmup_requests
from workbench.validate.training_codes import row_device

METRIC_GROUPS: dict[str, str] = {
    "ttft_mean_s": "ttft",
    "ttft_median_s": "ttft",
    "ttft_p99_s": "ttft",
    "tpot_mean_s": "tpot",
    "tpot_token_weighted_s": "tpot",
    "tpot_p99_s": "tpot",
    "output_tokens_per_s": "throughput",
    "total_tokens_per_s": "throughput",
    "output_tokens_per_s_per_device": "throughput",
    "input_tokens_per_s_per_device": "throughput",
    "requests_per_s": "throughput",
    "kv_cache_capacity_tokens": "kv_capacity",
}
"""Measured statistic (``workbench.validate.serving_csv.MEASURED``) -> the group its error is averaged in."""


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
    """A phase-only row's phases at their batch (:mod:`workbench.validate.serving_phase`); empty for ``e2e``."""
    steady_concurrency: int | None = None
    """A closed loop or a Poisson run whose run length is not given: the requests left out at each end (a closed
    loop's clients; ``serving_workload.steady_warmup_requests``), and the row is scored in steady state
    (``workbench.serving.steady.steady_window``)."""
    measured: dict[str, float]
    """Keys of ``MEASURED`` (``ttft_mean_s``, ``output_tokens_per_s``, ...): only those the row fills."""
    scope: str
    """``system`` (whole deployment) or ``one_replica`` (latencies of one replica's requests only)."""
    assumed: tuple[str, ...]
    """One line per default taken for a blank column, with its reason."""
    readings: tuple[tuple[str, ServingPlan], ...] = ()
    """The other readings of a blank the row leaves open (``serving_specs.ep_readings``: ``("ep=4", plan)``), each
    priced beside the scored one by :func:`validate_serving` (``readings`` of its result)."""
    row: dict[str, str] = field(repr=False)


def row_case(row: dict[str, str]) -> ServingCase:
    """Specs for one row. Raises Unexpressible with the reason the specs cannot express it, or the ValueError of
    a spec or the cost model (such as weights that do not fit): the same contract as the training
    :func:`workbench.validate.training.row_case`; :func:`row_cases` skips such rows with the reason. The row's
    codes are read as their authors write them first (:func:`workbench.validate.serving_codes.read_serving_codes`,
    the device by ``training_codes.row_device``), each reading noted in ``assumed``."""
    row, assumed = read_serving_codes(row)
    row = row_device(row, assumed)
    phases: tuple[PhaseBatch, ...] = ()
    workload = None
    if not row["phase"].strip():
        raise Unexpressible("phase is blank")
    row = {**row, "engine": priced_engine(row, assumed), "workload_kind": read_workload_kind(row, assumed)}
    model = row_model(row, assumed, complete_model)
    cluster = row_cluster(row, assumed)
    plan = row_plan(row, model, cluster, assumed)
    measured = row_measured(row)
    if not measured:
        raise Unexpressible("no measured value")
    try:
        cost_of = _costs(model, cluster, plan)  # layout, memory
    except ValueError as exc:
        plan = _host_offload_plan(row, model, cluster, plan, exc, assumed)
        cost_of = _costs(model, cluster, plan)
    if row["phase"].strip() == "e2e":
        workload = row_workload(row, assumed, plan.max_num_seqs * plan.replicas)
    else:
        phases = row_phases(row, cost_of, assumed)
    warmup = None if workload is None else steady_warmup_requests(row, workload)
    return ServingCase(
        id=row["id"], source_key=row["source_key"], model=model, cluster=cluster, plan=plan, workload=workload,
        phases=phases, steady_concurrency=warmup,
        measured=measured, scope=row["measured_scope"].strip() or "system", assumed=tuple(assumed), row=row,
        readings=ep_readings(model, plan, assumed),
    )  # fmt: skip


_HOST_OFFLOAD = re.compile(r"offload\w*\b[^.;]*\b(Grace|host|CPU)\b[^.;]*\bmemory", re.IGNORECASE)
"""A row's notes saying the run holds weights in the host's memory (``expert-weight offload to Grace memory``)."""


def _costs(model: ModelSpec, cluster: ClusterSpec, plan: ServingPlan) -> dict[str, ReplicaCost]:
    roles = ("both",) if plan.disaggregation is None else ("prefill", "decode")
    return {r: ReplicaCost.of(model, cluster, plan, Calibration(), role=r) for r in roles}


def _host_offload_plan(
    row: dict[str, str], model: ModelSpec, cluster: ClusterSpec, plan: ServingPlan, exc: ValueError,
    assumed: list[str],
) -> ServingPlan:  # fmt: skip
    """``plan`` with the experts SGLang holds in host memory, for a row whose weights do not fit (``exc``) and
    whose notes say the run offloads weights to host memory (``_HOST_OFFLOAD``); ``exc`` itself otherwise.

    A row that gives no amount is read as the least offload in SGLang's steps (one layer in each group of
    ``offload_group_size``, the largest group size tried first) that leaves the KV cache room for one prefill
    batch (``serving_phase.prefill_batch_tokens``): stated in ``assumed``. Raises ``Unexpressible`` naming the
    figures when no group size fits."""
    if "leave no room" not in str(exc) or not _HOST_OFFLOAD.search(row.get("notes", "")):
        raise exc
    if plan.disaggregation is not None:
        raise Unexpressible(f"host offload of a disaggregated row is not read; without it: {exc}")
    engine = load_engine(plan.engine)
    prompt = cell_count(row, "input_tokens_mean") if cell_number(row, "input_tokens_mean") else 1
    for group in range(model.num_layers, model.num_dense_layers, -1):
        candidate = replace(plan, offload_group_size=group)
        need = prefill_batch_tokens(row, candidate, prompt, []) * candidate.attention_dp
        try:
            room = kv_capacity_tokens(
                model, cluster.device, candidate, engine.profile_sampler_bytes_per_logit,
                share_rule=engine.kv_memory_share,
            )  # fmt: skip
        except ValueError:
            continue
        if room >= need:
            n = len(offloaded_layers(model, group))
            gib = host_offload_bytes_per_device(model, candidate) / 2**30
            assumed.append(
                f"host offload: the routed experts of {n} of {model.num_layers} layers ({gib:.1f} GiB per device) "
                f"in host memory, offload_group_size {group} (SGLang's offloader, one layer per group, fetched one "
                f"offloaded layer ahead): the least offload in SGLang's steps that leaves KV room for one prefill "
                f"batch ({need} tokens); the source gives no amount (notes)"
            )
            return candidate
    raise Unexpressible(
        "the run offloads weights to host memory (notes), but even SGLang's largest offload leaves no room for "
        f"one prefill batch; without it: {str(exc).split('; use ')[0]}"
    )


def row_cases(rows: list[dict[str, str]]) -> tuple[list[ServingCase], list[SkippedRow]]:
    """``row_case`` of every row, split into the expressible cases and the skipped rows with their reason (file
    order kept; :func:`workbench.validate.rows.build_cases`)."""
    return build_cases(rows, row_case)


def predicted(est: ServingEstimate) -> dict[str, float]:
    """The simulation's value of every measured statistic (``METRIC_GROUPS`` keys), SI units."""
    sim, devices = est.sim, est.plan.num_devices
    duration = max(sim.duration_s, 1e-300)
    inputs = float(sim.requests["input_tokens"].sum())
    return {
        "ttft_mean_s": sim.ttft.mean_s,
        "ttft_median_s": sim.ttft.p50_s,
        "ttft_p99_s": sim.ttft.p99_s,
        "tpot_mean_s": sim.tpot.mean_s,
        "tpot_token_weighted_s": token_weighted_tpot_s(sim.requests),
        "tpot_p99_s": sim.tpot.p99_s,
        "output_tokens_per_s": sim.output_tokens_per_s,
        "total_tokens_per_s": sim.output_tokens_per_s + inputs / duration,
        "output_tokens_per_s_per_device": sim.output_tokens_per_s / devices,
        "input_tokens_per_s_per_device": inputs / duration / devices,
        "requests_per_s": sim.requests_per_s,
        "kv_cache_capacity_tokens": float(est.kv_cache_capacity_tokens),
    }


def case_predictions(case: ServingCase, calibration: Any) -> dict[str, float]:
    """The predicted value of every statistic ``case`` can be scored on (``METRIC_GROUPS`` keys, SI units): a
    phase-only row's per-device throughputs (:mod:`workbench.serving.phases`); a whole-request row's simulation
    (``predicted``), read in steady state for a closed loop without a run length (``steady_window``: latencies
    and throughputs; the KV capacity from the estimate)."""
    if case.phases:
        roles = {ph.role for ph in case.phases}
        cost_of = {r: ReplicaCost.of(case.model, case.cluster, case.plan, calibration, role=r) for r in roles}
        return phase_predictions(cost_of, case.phases)
    assert case.workload is not None
    est = serve_estimate(case.model, case.cluster, case.plan, case.workload, calibration)
    values = predicted(est)
    if case.steady_concurrency is not None:
        steady = steady_window(est.sim, case.steady_concurrency)
        devices = est.plan.num_devices
        values |= {k: v for k, v in steady.items() if k in values}
        values["total_tokens_per_s"] = steady["output_tokens_per_s"] + steady["input_tokens_per_s"]
        values["output_tokens_per_s_per_device"] = steady["output_tokens_per_s"] / devices
        values["input_tokens_per_s_per_device"] = steady["input_tokens_per_s"] / devices
    return values


def score_serving_case(case: ServingCase, calibration: Any) -> list[dict[str, Any]]:
    """One row per measured statistic of ``case``: id, source_key, metric, group, predicted, measured, ape.
    A measured statistic the row's shape gives no prediction for (a latency of a phase-only row) raises
    ValueError naming it."""
    values = case_predictions(case, calibration)
    out = []
    unpriced = [k for k in case.measured if k in METRIC_GROUPS and k not in values]
    if unpriced:
        raise ValueError(f"phase {case.row['phase']!r} gives no prediction of {', '.join(unpriced)}")
    for key, measured in case.measured.items():
        if key not in METRIC_GROUPS or measured <= 0:
            continue
        pred = float(values[key])
        out.append(
            {
                "id": case.id,
                "source_key": case.source_key,
                "plan": case.plan.describe(),
                "engine": case.plan.engine,
                "metric": key,
                "group": METRIC_GROUPS[key],
                "predicted": pred,
                "measured": measured,
                "ape": ape(pred, measured),
            }
        )
    return out


def validate_serving(
    path: str | Path = DEFAULT_SERVING_DATA, *, calibration: str | Path = "default"
) -> dict[str, Any]:
    """Score every row of a serving validation file. Returns ``rows`` (one per row and measured statistic),
    ``skipped`` (id, source_key, reason: rows the specs cannot express or the simulation refuses),
    ``mape_by_metric`` (keys ``ttft``, ``tpot``, ``throughput``, and ``kv_capacity`` when a row gives it) and
    ``mape_by_source`` and ``mape_by_source_metric`` (source -> metric group -> MAPE), and
    ``mape_by_engine_metric`` (the engine profile that priced the row, ``vllm-v0`` ... ``trtllm`` -> metric group ->
    MAPE). Raises ValueError/FileNotFoundError for a bad file (``read_serving_rows``)."""
    from workbench.presets.calibration import load_calibration

    cal = load_calibration(calibration)
    cases, skipped_rows = row_cases(read_serving_rows(path))
    skipped = [s.as_dict() for s in skipped_rows]
    rows: list[dict[str, Any]] = []
    for case in cases:
        try:
            rows.extend(score_serving_case(case, cal))
        except ValueError as exc:
            skipped.append(skipped_row(case.id, case.source_key, exc).as_dict())
    readings = [entry for case in cases for entry in alternative_readings(case, rows, cal)]
    by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    by_engine: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_source[r["source_key"]].append(r)
        by_engine[r["engine"]].append(r)
    return {
        "data": str(path),
        "rows": rows,
        "skipped": skipped,
        "mape_by_metric": mape_by(rows, "group"),
        "mape_by_source": mape_by(rows, "source_key"),
        "mape_by_source_metric": {
            src: mape_by(members, "group") for src, members in sorted(by_source.items())
        },
        "mape_by_engine_metric": {
            eng: mape_by(members, "group") for eng, members in sorted(by_engine.items())
        },
        "readings": readings,
    }


def alternative_readings(
    case: ServingCase, scored_rows: list[dict[str, Any]], calibration: Any
) -> list[dict[str, Any]]:
    """A case with other readings of a blank (``ServingCase.readings``), per measured statistic: ``id``,
    ``source_key``, ``metric``, ``measured``, ``readings`` (reading -> predicted: the scored one and each other),
    ``range`` (lowest, highest predicted), ``scored`` (the reading the row is scored at: the stack's default) and
    ``supported`` (the reading whose prediction is nearer the measured value), as
    ``workbench.validate.band.alternative_readings`` reports the training rows'. A reading the model refuses
    (ValueError) is left out."""
    mine = {r["metric"]: r for r in scored_rows if r["id"] == case.id}
    if not case.readings or not mine:
        return []
    scored = f"ep={case.plan.expert_parallel}"
    by_metric: dict[str, dict[str, float]] = {m: {scored: r["predicted"]} for m, r in mine.items()}
    for name, plan in case.readings:
        try:
            values = case_predictions(replace(case, plan=plan, readings=()), calibration)
        except ValueError:
            continue
        for metric in by_metric:
            by_metric[metric][name] = float(values[metric])
    return [
        {
            "id": case.id,
            "source_key": case.source_key,
            "metric": metric,
            "measured": mine[metric]["measured"],
            "readings": preds,
            "range": (min(preds.values()), max(preds.values())),
            "scored": scored,
            "supported": min(preds, key=lambda k: abs(preds[k] - mine[metric]["measured"])),
        }  # fmt: skip
        for metric, preds in by_metric.items()
    ]


def is_serving_file(path: str | Path) -> bool:
    """True when the CSV's header is the serving schema (it names ``measured_ttft_ms_mean``)."""
    with open(path, encoding="utf-8", newline="") as fh:
        return "measured_ttft_ms_mean" in fh.readline()
