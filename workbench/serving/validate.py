"""Published serving runs against the simulator: predicted vs measured TTFT, TPOT and throughput per row, the
MAPE per metric group and per source (``workbench validate --data serving_public.csv``).

Every expressible row of the file (:func:`workbench.serving.rows.row_cases`) is simulated with
:func:`workbench.serving.estimate.serve_estimate`; each measured column the row fills is compared with the
same statistic of the simulation. Nothing is fitted to these rows: the serving cost uses the kernel tables, the
device presets and the serving engine profiles (``profiles/engines/``, each value cited there) only; every row
names the engine profile that priced it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from workbench.serving.cost import ReplicaCost
from workbench.serving.estimate import ServingEstimate, serve_estimate
from workbench.serving.phases import phase_predictions
from workbench.serving.rows import DEFAULT_SERVING_DATA, ServingCase, read_serving_rows, row_cases
from workbench.serving.steady import steady_window

METRIC_GROUPS: dict[str, str] = {
    "ttft_mean_s": "ttft",
    "ttft_median_s": "ttft",
    "ttft_p99_s": "ttft",
    "tpot_mean_s": "tpot",
    "tpot_p99_s": "tpot",
    "output_tokens_per_s": "throughput",
    "total_tokens_per_s": "throughput",
    "output_tokens_per_s_per_device": "throughput",
    "input_tokens_per_s_per_device": "throughput",
    "requests_per_s": "throughput",
    "kv_cache_capacity_tokens": "kv_capacity",
}
"""Measured statistic (``workbench.serving.rows_csv.MEASURED``) -> the group its error is averaged in."""


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
                "ape": abs(pred - measured) / measured,
            }
        )
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def validate_serving(
    path: str | Path = DEFAULT_SERVING_DATA, *, calibration: str | Path = "default"
) -> dict[str, Any]:
    """Score every row of a serving validation file. Returns ``rows`` (one per row and measured statistic),
    ``skipped`` (id, source_key, reason: rows the specs cannot express or the simulation refuses),
    ``mape_by_metric`` (keys ``ttft``, ``tpot``, ``throughput``, and ``kv_capacity`` when a row gives it) and
    ``mape_by_source`` and ``mape_by_source_metric`` (source -> metric group -> MAPE). Raises ValueError/FileNotFoundError for a bad file (``read_serving_rows``)."""
    from workbench.presets.calibration import load_calibration

    cal = load_calibration(calibration)
    cases, skipped_rows = row_cases(read_serving_rows(path))
    skipped = [{"id": s.id, "source_key": s.source_key, "reason": s.reason} for s in skipped_rows]
    rows: list[dict[str, Any]] = []
    for case in cases:
        try:
            rows.extend(score_serving_case(case, cal))
        except ValueError as exc:
            skipped.append(
                {"id": case.id, "source_key": case.source_key, "reason": " ".join(str(exc).split())}
            )
    by_metric: dict[str, list[float]] = defaultdict(list)
    by_source: dict[str, list[float]] = defaultdict(list)
    by_source_metric: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_metric[r["group"]].append(r["ape"])
        by_source[r["source_key"]].append(r["ape"])
        by_source_metric[r["source_key"]][r["group"]].append(r["ape"])
    return {
        "data": str(path),
        "rows": rows,
        "skipped": skipped,
        "mape_by_metric": {k: _mean(v) for k, v in sorted(by_metric.items())},
        "mape_by_source": {k: _mean(v) for k, v in sorted(by_source.items())},
        "mape_by_source_metric": {
            src: {k: _mean(v) for k, v in sorted(groups.items())}
            for src, groups in sorted(by_source_metric.items())
        },
    }


def is_serving_file(path: str | Path) -> bool:
    """True when the CSV's header is the serving schema (it names ``measured_ttft_ms_mean``)."""
    with open(path, encoding="utf-8", newline="") as fh:
        return "measured_ttft_ms_mean" in fh.readline()
