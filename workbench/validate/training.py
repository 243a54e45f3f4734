"""Predicted vs published: run the analytic model on every row of a training validation CSV and measure the error.

The file follows the schema of ``shared/validation/training_public.csv`` (its README defines every column;
:mod:`workbench.validate.training_csv` reads it). Per row: the model, cluster and plan are rebuilt from the
columns (fields the schema lacks, such as a head size other than hidden/heads, from the model preset of the same
architecture: :func:`workbench.validate.training_model.matching_preset`); the
row's ``framework`` text picks a framework profile by alias or keyword, in the era of the year its ``source``
cites (:func:`workbench.presets.frameworks.profile_for_text`; none matching: the default profile of the
source's year, :func:`workbench.presets.frameworks.default_framework`, listed under ``assumed``; a published
plan outside the profile's feature list, such as a ZeRO stage or schedule the profile does not name, is
priced by the profile widened to run it, :meth:`FrameworkProfile.admitting`, and listed under ``assumed``,
never skipped); blanks that the README gives a fixed reading (cp, ep, MHA
key/value heads) take it; other blanks default through the profile or ``PLAN_DEFAULTS`` (tuned as a tuned run
would: :mod:`workbench.validate.tuning`) and are listed in
the row's ``assumed`` field; rows that cannot be expressed (no parallel plan, blank architecture fields,
unknown device or cluster, infeasible plan) go to ``skipped`` with the reason. A cluster that is not a
preset may be described by ``clusters/<name>.toml`` (the cluster preset format) beside the CSV.

Throughput metric per row, the first the row has: step time, tokens/s per device, TFLOP/s per device (in
the row's FLOP definition: ``model`` = PaLM 6N + full-s^2 attention as MosaicML and Megatron count;
``hardware`` adds recompute as Megatron eq. 3), MFU (BF16 peak, or FP8 with ``+fp8-peak``).
APE = |predicted - measured| / measured; MAPE = mean APE (overall, per source_key). Peak memory is
predicted as the profile's ``memory_report`` counts it (allocated: tensors; reserved: plus the allocator's
fragmentation; required: plus the CUDA context) and scored over rows with ``measured_peak_memory_GiB``.
The constants are fitted and cross-validated in :mod:`workbench.validate.fit`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.pipeline.schedules.registry import REGISTRY, default_vpp
from workbench.presets.calibration import Calibration
from workbench.presets.frameworks import default_framework, load_framework, profile_for_text, source_year
from workbench.specs import limits
from workbench.specs.framework import FrameworkProfile
from workbench.specs.hardware import ClusterSpec, DType
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Recompute, Workload, data_parallel_degree
from workbench.validate.readings import (
    apply_recipe_columns,
    choose_layout,
    priced_readings,
    read_arithmetic,
    recipe_layout,
    recipe_plan,
)
from workbench.validate.rows import (
    GIB,
    Unexpressible,
    ape,
    build_cases,
    cell_count,
    cell_number,
    fit_verdict,
    mape_by,
    mean,
    row_model,
    skipped_row,
)
from workbench.validate.training_codes import read_codes, row_device
from workbench.validate.training_model import complete_model, row_cluster
from workbench.validate.tuning import (
    default_micro_batch_size,
    largest_fitting_micro_batch,
    memory_fit,
    microbatches_per_rank,
    tuned_recompute,
    whole_micro_batches,
)

PLAN_DEFAULTS: dict[str, str] = {
    "micro_batch_size": (
        "pp > 1: the stack's default_microbatches rule; pp = 1 with the global batch given: the largest divisor"
        " of the data-parallel rank's batch whose step fits the device memory; else 1"
    ),
    "recompute": (
        "full when flops_definition is 'hardware' (Megatron eq. 3 counts recompute), else none; with no"
        " micro-batch either and pp = 1: full if its largest fitting micro-batch runs faster"
    ),
    "zero_stage": "0",
    "schedule": "interleaved-1f1b when vpp > 1, else 1f1b",
    "vpp": "1 (2 for an interleaved schedule)",
    "sequence_parallel": "tp > 1 when the framework profile's default_sequence_parallel is on",
    "framework": "the reference stack of the source's year when the framework text names no profile"
    " (megatron-lm-2021 for 2019-2022, else generic)",
    "dtype": "the arithmetic of the row's FLOP figures, else the framework profile's launch_dtype (the "
    "zero-bubble fork's scripts: fp16), else bf16",
    "vocab_size": "51200 (Megatron's padded GPT-2 vocabulary)",
    "ffn_hidden_size": "4 * hidden_size",
    "global_batch_size": (
        "dp * micro_batch_size * 2 * pp; a published one that dp x micro-batch does not divide: the nearest"
        " multiple (rows measured by step time keep it)"
    ),
    "cluster": "the device's DGX/HGX node (dgx-h100 for H100, dgx-a100 for A100)",
}


METRICS = (
    "measured_step_time_s",
    "measured_tokens_per_s_per_device",
    "measured_tflops_per_device",
    "measured_mfu",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class RowCase:
    """One row turned into specs, with the defaults it needed."""

    id: str
    source_key: str
    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    plan: ParallelPlan
    framework: FrameworkProfile
    assumed: tuple[str, ...]
    readings: tuple[tuple[str, ParallelPlan], ...] = ()
    """A row whose published table and its stack's recipe disagree (``recipe_layout``): both layouts,
    ``("table", plan)`` and ``("recipe", plan)``, ``plan`` being one of them
    (:func:`workbench.validate.readings.choose_layout`); () for a row with one layout."""
    row: dict[str, str] = field(repr=False)


ARCHITECTURE = ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "device", "num_devices")
"""Columns without which a row cannot be priced (no default is sensible)."""


def row_framework(
    row: dict[str, str], assumed: list[str], override: FrameworkProfile | None = None
) -> FrameworkProfile:
    """``override``, else the profile the row's framework text names in its source's year (alias or keyword), else
    the default profile of that year (:func:`workbench.presets.frameworks.default_framework`)."""
    if override is not None:
        return override
    year = source_year(row.get("source", ""))
    prof = profile_for_text(row.get("framework", ""), year=year)
    if prof is None:
        fallback = default_framework(year)
        text = limits.shown(row.get("framework", "").strip()) if row.get("framework", "").strip() else "blank"
        era = f"its source's year {year}" if year is not None else "no year in its source"
        assumed.append(
            f"framework:{text} names no profile (no alias or keyword of profiles/frameworks/*.toml); priced as"
            f" {fallback.id}, the stack of a run that names none ({era})"
        )
        return fallback
    return prof


def row_degrees(
    row: dict[str, str], n: int, per_node: int, heads: int, assumed: list[str]
) -> tuple[int, int, int, int]:
    """(dp, tp, pp, cp) of a row on ``n`` devices, filling blank degrees so that dp*tp*pp*cp = n:

    - dp blank: the devices the other degrees leave (blank tp and pp are 1, blank cp is 1);
    - dp given and one of tp, pp blank: the devices the given degrees leave;
    - dp given and both blank: tensor parallelism fills a node (up to ``per_node`` and dividing the ``heads``)
      and pipeline stages take the rest, the layout Narayanan et al. (SC 2021, section 3.3, takeaway 1)
      prescribe: tensor parallelism up to the GPUs of a server, pipeline parallelism across servers.

    A blank cp is 1 (the schema's fixed reading: no context parallelism). Each other filled degree is listed in
    ``assumed``. Raises Unexpressible when the given degrees do not divide ``n``."""
    keys = ("dp", "tp", "pp", "cp")
    given = {k: cell_count(row, k) if cell_number(row, k) is not None else None for k in keys}
    known = math.prod(v for v in given.values() if v is not None)
    if n % known:
        named = ", ".join(f"{k}={v}" for k, v in given.items() if v is not None)
        raise Unexpressible(f"num_devices {n} is not a multiple of the given degrees ({named})")
    left = n // known
    dp, tp, pp, cp = given.values()
    if dp is None:
        tp, pp, cp = tp or 1, pp or 1, cp or 1
        dp = data_parallel_degree(n, tp=tp, pp=pp, cp=cp)
    elif tp is None and pp is None:
        tp = max(t for t in range(1, min(per_node, left) + 1) if left % t == 0 and heads % t == 0)
        pp, cp = left // tp, cp or 1
    elif tp is None or pp is None:
        tp, pp, cp = tp or left, pp or left, cp or 1
    assumed.extend(k for k, v in given.items() if v is None and k != "cp")
    return dp, tp, pp, cp or 1


def _count(row: dict[str, str], key: str, default: int, assumed: list[str], *, minimum: int = 1) -> int:
    """``cell_count`` with the training schema's note: a blank column's name alone in ``assumed``."""
    return cell_count(row, key, default, assumed, minimum=minimum, note="{key}")


def _devices_from_degrees(row: dict[str, str], assumed: list[str]) -> dict[str, str]:
    """The row with a blank ``num_devices`` filled where ``tp``, ``pp`` and ``dp`` are given: tp x pp x dp x (cp or
    1), the README's identity for rows that fill all four ("Checks that hold on this file"), noted in ``assumed``;
    the row unchanged otherwise."""
    degrees = [row.get(k, "").strip() for k in ("tp", "pp", "dp")]
    if row.get("num_devices", "").strip() or not all(d.isdigit() for d in degrees):
        return row
    cp = row.get("cp", "").strip()
    total = math.prod(int(d) for d in degrees) * (int(cp) if cp.isdigit() else 1)
    assumed.append(f"num_devices={total} = tp x pp x dp x cp (blank)")
    return {**row, "num_devices": str(total)}


def _check_row(row: dict[str, str]) -> None:
    """Unexpressible for a row without its architecture columns or any parallel degree, or with 4-bit GEMMs."""
    blank = [k for k in ARCHITECTURE if not row.get(k, "").strip()]
    if blank:
        raise Unexpressible(f"blank required column(s): {', '.join(blank)}")
    if not row["tp"] and not row["dp"] and not row["pp"]:
        raise Unexpressible("the source gives no parallel plan (tp, pp, dp blank)")
    if row["dtype"] == "fp4":
        raise Unexpressible("dtype: 4- and 6-bit training GEMMs are not priced (bf16, fp16, fp8 are)")


def row_case(
    row: dict[str, str], *, framework: FrameworkProfile | None = None, data_dir: Path | None = None
) -> RowCase:
    """Specs for one row; raises Unexpressible with the reason. ``framework`` overrides the row's own. The row's
    codes are read as their authors write them first (:func:`workbench.validate.training_codes.read_codes`,
    ``row_device``), each reading noted in ``assumed``."""
    row, assumed = read_codes(row)
    row = row_device(row, assumed)
    row = _devices_from_degrees(row, assumed)
    _check_row(row)
    fw = apply_recipe_columns(row, row_framework(row, assumed, framework))
    model = row_model(row, assumed, complete_model)
    cluster = row_cluster(row, assumed, data_dir)
    plan, workload = _row_plan(row, model, cluster, fw, assumed)
    if not row["micro_batch_size"] and plan.pp == 1 and cell_number(row, "global_batch_size") is not None:
        untuned = plan.recompute
        plan = largest_fitting_micro_batch(model, cluster, workload, plan, fw)
        if not row["recompute"] and untuned == "none":
            plan = tuned_recompute(model, cluster, workload, plan, fw, assumed)
    readings: tuple[tuple[str, ParallelPlan], ...] = ()
    layout = recipe_layout(row)
    recipe = recipe_plan(plan, layout, plan.num_devices) if layout else plan
    if recipe != plan:  # the published table and the stack's recipe disagree: score one by the memory rule
        table = plan
        _, plan, note = choose_layout(table, recipe, lambda p: memory_fit(model, cluster, workload, p, fw))
        assumed.append(note)
        readings = (("table", table), ("recipe", recipe))
    dtype = str(workload.dtype)
    outside = fw.unsupported(plan, dtype=dtype)
    if outside:
        # The run happened: a profile's feature list (what the planner offers) never refuses it.
        assumed.append(f"framework:{fw.id} widened to run " + "; ".join(outside))
        fw = fw.admitting(plan, dtype=dtype)
    return RowCase(
        id=row["id"],
        source_key=row["source_key"],
        model=model,
        cluster=cluster,
        workload=workload,
        plan=plan,
        framework=fw,
        assumed=tuple(assumed),
        readings=readings,
        row=row,
    )


def _row_plan(
    row: dict[str, str], model: ModelSpec, cluster: ClusterSpec, fw: FrameworkProfile, assumed: list[str]
) -> tuple[ParallelPlan, Workload]:
    """The plan and workload of a row, blanks filled as ``PLAN_DEFAULTS`` says (each noted in ``assumed``)."""
    n = cell_count(row, "num_devices")
    dp, tp, pp, cp = row_degrees(row, n, cluster.devices_per_node, model.num_attention_heads, assumed)
    schedule = row["schedule"]
    stages = default_vpp(schedule) if schedule in REGISTRY else 1  # V schedules hold 2 stages per rank
    vpp = _count(row, "vpp", stages, assumed) if pp > 1 else 1
    if not schedule:
        schedule = "interleaved-1f1b" if vpp > 1 else "1f1b"
        if pp > 1:
            assumed.append("schedule")
    mbs = _count(row, "micro_batch_size", default_micro_batch_size(row, fw, dp=dp, pp=pp, vpp=vpp), assumed)
    # this copy's column (profiles/validation/README.md): the micro-batch the run used where the table's is a typo
    run_mbs = cell_count(row, "run_micro_batch_size") if cell_number(row, "run_micro_batch_size") else None
    if run_mbs is not None and run_mbs != mbs:
        assumed.append(f"micro_batch_size:{run_mbs} from run_micro_batch_size (the table says {mbs})")
        mbs = run_mbs
    seq_len = cell_count(row, "seq_len")
    reading = read_arithmetic(row, model, cluster.device, seq_len=seq_len, num_devices=n)
    assumed.extend(reading.notes)
    recompute = (
        row["recompute"] or reading.recompute or ("full" if row["flops_definition"] == "hardware" else "none")
    )
    if not row["recompute"]:
        assumed.append("recompute")
    if row["sequence_parallel"]:
        sp = row["sequence_parallel"] == "true"
    else:
        sp = tp > 1 and fw.default_sequence_parallel
        assumed.append("sequence_parallel")
    per_rank = microbatches_per_rank(fw, pp=pp, vpp=vpp)
    gbs = _count(row, "global_batch_size", dp * mbs * per_rank, assumed)
    gbs = whole_micro_batches(row, gbs, dp * mbs, assumed)
    dtype = row["dtype"] or reading.dtype or fw.launch_dtype or "bf16"
    if not row["dtype"]:
        assumed.append(
            f"dtype:{fw.id} launches {fw.launch_dtype}" if fw.launch_dtype and not reading.dtype else "dtype"
        )
    if model.num_layers % (pp * vpp):
        assumed.append("uneven_layers")
    # this copy's column (profiles/validation/README.md): the layers whose activations the recipe offloads
    column = "offload_activation_layers"
    offloaded = cell_count(row, column) if cell_number(row, column) is not None else None
    plan = ParallelPlan(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=_expert_parallel(row, model, assumed),
        vpp=vpp,
        micro_batch_size=mbs,
        zero_stage=_count(row, "zero_stage", 0, assumed, minimum=0),
        sequence_parallel=sp,
        recompute=Recompute(recompute),
        schedule=schedule,
        offload_activations=offloaded is not None,
        offload_activation_layers=offloaded,
    )
    return plan, Workload(seq_len=seq_len, global_batch_size=gbs, dtype=DType(dtype))


def _expert_parallel(row: dict[str, str], model: ModelSpec, assumed: list[str]) -> int:
    """The row's ep; blank is 1, the README's reading ("the source reports no expert parallelism"), noted when
    the model has experts (the README says such rows are dense, so an MoE row with a blank ep is read so)."""
    ep = cell_number(row, "ep")
    if ep is None and model.num_experts:
        assumed.append("ep:1 (blank on an MoE row: the README reads a blank ep as no expert parallelism)")
    return int(ep or 1)


def predicted_metric(case: RowCase, est: Any, metric: str) -> float:
    """The estimate expressed in the row's metric (see the module docstring)."""
    n = case.plan.num_devices
    definition = case.row.get("flops_definition", "")
    if metric == "measured_step_time_s":
        return float(est.step_time_s)
    if metric == "measured_tokens_per_s_per_device":
        return float(est.tokens_per_s / n)
    flop_per_s = (
        est.model_flop_per_s_per_device
        if definition.startswith("model")
        else (est.hfu * case.cluster.device.peak(case.workload.dtype))
    )
    if metric == "measured_tflops_per_device":
        return float(flop_per_s / 1e12)
    peak_dtype = DType.FP8 if "fp8-peak" in definition else DType.BF16
    return float(est.model_flop_per_s_per_device / case.cluster.device.peak(peak_dtype))


def reported_memory_framework(fw: FrameworkProfile) -> FrameworkProfile:
    """``fw`` with the memory allowances its report does not count (see ``MEMORY_REPORTS``)."""
    if fw.memory_report == "allocated":
        return dataclasses.replace(fw, fragmentation_frac=0.0, context_bytes=0.0)
    if fw.memory_report == "reserved":
        return dataclasses.replace(fw, context_bytes=0.0)
    return fw


@dataclass
class Prepared:
    """Rows turned into cases once (fitting re-prices them many times)."""

    cases: list[RowCase]
    skipped: list[dict[str, Any]]


def prepare(
    rows: list[dict[str, str]],
    *,
    framework: FrameworkProfile | str | None = None,
    data_dir: Path | None = None,
) -> Prepared:
    """Every row as a RowCase, or a skipped entry (id, source_key, reason)."""
    override = load_framework(framework) if framework is not None else None
    cases, skipped = build_cases(rows, lambda row: row_case(row, framework=override, data_dir=data_dir))
    return Prepared(cases, [s.as_dict() for s in skipped])


def score_case(case: RowCase, cal: Calibration) -> dict[str, Any]:
    """Predicted vs measured for one case under ``cal`` (its framework replaced by the case's, with the
    group's fitted constants). Raises ValueError for an infeasible plan."""
    from workbench.estimate.analytic import estimate_plan

    row = case.row
    run_cal = cal.with_framework(case.framework)
    run_cal = dataclasses.replace(run_cal, framework=reported_memory_framework(run_cal.framework))
    est = estimate_plan(
        case.model, case.cluster, case.workload, case.plan, calibration=run_cal, allow_uneven_layers=True
    )
    metric = next((m for m in METRICS if cell_number(row, m) is not None), None)
    item: dict[str, Any] = {
        "id": case.id,
        "source_key": case.source_key,
        "framework": case.framework.id,
        "metric": metric,
        "predicted": None,
        "measured": None,
        "ape": None,
        "assumed": list(case.assumed),
        "plan": case.plan.describe(),
    }
    if metric is not None:
        measured = float(cell_number(row, metric))  # type: ignore[arg-type]
        predicted = predicted_metric(case, est, metric)
        item.update(predicted=predicted, measured=measured, ape=ape(predicted, measured))
    item.update(fit_verdict(est, cal.with_framework(case.framework).framework, run_cal.framework))
    mem = cell_number(row, "measured_peak_memory_GiB")
    # a memory figure above the device's capacity was computed, never run (Korthikanti's Fig. 1 baselines)
    item["ran"] = mem is None or mem * GIB <= est.memory_capacity_bytes
    if mem is not None:
        pred_mem = est.peak_memory_bytes / GIB
        item.update(predicted_memory_GiB=pred_mem, measured_memory_GiB=mem, memory_ape=ape(pred_mem, mem))
    return item


def score(prepared: Prepared, cal: Calibration) -> dict[str, Any]:
    """Score every prepared case; infeasible plans join ``skipped``. The summary of :func:`summarise`."""
    out, skipped = [], list(prepared.skipped)
    for case in prepared.cases:
        try:
            out.append(score_case(case, cal))
        except (ValueError, LookupError) as exc:
            skipped.append(skipped_row(case.id, case.source_key, exc).as_dict())
    return summarise(out, skipped)


def validate_rows(
    rows: list[dict[str, str]],
    *,
    calibration: Calibration,
    framework: FrameworkProfile | str | None = None,
    data_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the analytic model on every row. Returns the JSON object ``workbench validate --json`` prints:
    rows (id, source_key, framework, metric, predicted, measured, ape, assumed, plus memory fields), skipped
    (id, reason), mape, mape_by_source, memory_mape, memory_mape_by_source, defaults, constants and readings
    (each row's open questions priced every way, :func:`workbench.validate.readings.priced_readings`)."""
    prepared = prepare(rows, framework=framework, data_dir=data_dir)
    result = score(prepared, calibration)
    result["constants"] = constants_table(calibration, prepared)
    scored = {r["id"]: r for r in result["rows"]}
    result["readings"] = [
        entry
        for case in prepared.cases
        if case.id in scored
        for entry in priced_readings(case, scored[case.id], pricer(case, calibration))
    ]
    return result


def pricer(case: RowCase, cal: Calibration) -> Callable[[ParallelPlan], dict[str, Any]]:
    """``case`` scored at another plan under ``cal`` (:func:`score_case`): what
    :func:`workbench.validate.readings.priced_readings` prices each reading with."""
    return lambda plan: score_case(dataclasses.replace(case, plan=plan), cal)


def constants_table(calibration: Calibration, prepared: Prepared) -> list[dict[str, Any]]:
    """The fitted constants in use: one entry per (framework profile of the rows, fitted field)."""
    seen = {c.framework.id: c.framework for c in prepared.cases}
    out = []
    for fid, prof in sorted(seen.items()):
        applied = calibration.with_framework(prof).framework
        for name in prof.fitted:
            fitted = name in calibration.fits.get(prof.group, {})
            out.append(
                {
                    "framework": fid,
                    "group": prof.group,
                    "constant": name,
                    "value": getattr(applied, name),
                    "prior": getattr(prof, name),
                    "fitted": fitted,
                }
            )
    return out


def summarise(rows: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> dict[str, Any]:
    """The result of scored ``rows``: them, ``skipped``, the throughput MAPE overall and per source, the peak
    memory MAPE overall and per source (rows with a measured peak), the published plans called non-fitting
    that ran (``not_fitting``) and ``PLAN_DEFAULTS``."""
    return {
        "rows": rows,
        "skipped": skipped,
        "mape": mean([r["ape"] for r in rows if r["ape"] is not None]),
        "mape_by_source": mape_by(rows, "source_key"),
        "memory_mape": mean([r["memory_ape"] for r in rows if "memory_ape" in r]),
        "memory_mape_by_source": mape_by(rows, "source_key", "memory_ape"),
        "not_fitting": [
            {k: r[k] for k in ("id", "plan", "predicted_need_GiB", "usable_GiB")}
            for r in rows
            if not r.get("fits", True) and r.get("ran", True)
        ],
        "defaults": PLAN_DEFAULTS,
    }
