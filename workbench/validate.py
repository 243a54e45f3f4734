"""Predicted vs published: run a backend on every row of a validation CSV and measure the error.

The file follows the schema of ``shared/validation/training_public.csv`` (its README defines every column).
Per row: the model, cluster and plan are rebuilt from the columns; blanks that the README gives a fixed
reading (cp, ep, MHA key/value heads) take it; other blanks take a documented default from
``PLAN_DEFAULTS`` and are listed in the row's ``assumed`` field; rows that cannot be expressed (no parallel
plan, unknown device or cluster, infeasible plan) go to ``skipped`` with the reason.

Throughput metric per row, the first the row has: step time, tokens/s per device, TFLOP/s per device (in
the row's FLOP definition: ``model`` = PaLM 6N + full-s^2 attention as MosaicML and Megatron count;
``hardware`` adds recompute as Megatron eq. 3), MFU (BF16 peak, or FP8 with ``+fp8-peak``).
APE = |predicted - measured| / measured; MAPE = mean APE (overall, per source_key); memory MAPE over rows
with ``measured_peak_memory_GiB`` (predicted: peak over pipeline ranks).

Execution assumptions per source (``SOURCE_EXECUTION``): the Megatron-LM 2021-2022 papers ran attention
unfused with dropout (Korthikanti et al. 2022 section 4.1 counts those tensors) and their Fig. 1 memory is a
computed requirement (no allocator or framework allowance, README of the data set); Zero Bubble builds on
Megatron-LM, whose memory report is the allocator's max allocated (again no allowance), while torchtitan
reports max reserved (the default allowance applies); MosaicML reduces bf16
gradients (FSDP precision PURE); torchtitan's selective recompute is per-op SAC (its default
``selective_ac_option = "op"``).
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_cluster, load_device, load_model, profiles_dir
from workbench.specs.hardware import ClusterSpec, DType
from workbench.specs.model import AttentionKind, ModelSpec, NormKind
from workbench.specs.plan import ParallelPlan, Recompute, Workload

GIB = 2**30
DEFAULT_DATA = profiles_dir() / "validation" / "training_public.csv"
"""A copy of the team's public validation set (shared/validation), kept in the repo so validate works anywhere."""

PLAN_DEFAULTS: dict[str, str] = {
    "micro_batch_size": "1",
    "recompute": "full when flops_definition is 'hardware' (Megatron eq. 3 counts recompute), else none",
    "zero_stage": "0",
    "schedule": "interleaved-1f1b when vpp > 1, else 1f1b",
    "vpp": "1 (2 for an interleaved schedule)",
    "sequence_parallel": "tp > 1, except Megatron-LM 2021 (before sequence parallelism existed)",
    "dtype": "bf16",
    "vocab_size": "51200 (Megatron's padded GPT-2 vocabulary)",
    "ffn_hidden_size": "4 * hidden_size",
    "global_batch_size": "dp * micro_batch_size * 2 * pp",
    "cluster": "the device's DGX/HGX node (dgx-h100 for H100, dgx-a100 for A100)",
}

SOURCE_EXECUTION: dict[str, dict[str, Any]] = {
    "NARAYANAN21_T1": {"flash_attention": False, "dropout": True},
    "KORTHIKANTI22_T5": {
        "flash_attention": False,
        "dropout": True,
        "fragmentation_frac": 0.0,
        "framework_overhead_bytes": 0.0,
    },
    "KORTHIKANTI22_F1": {
        "flash_attention": False,
        "dropout": True,
        "fragmentation_frac": 0.0,
        "framework_overhead_bytes": 0.0,
    },
    "KORTHIKANTI22_ABS": {"flash_attention": False, "dropout": True},
    "ZB_ICLR24": {
        "flash_attention": False,
        "dropout": True,
        "fragmentation_frac": 0.0,
        "framework_overhead_bytes": 0.0,
    },
    "MOSAIC_LLMFOUNDRY": {"grad_bytes_per_param": 2.0},
    "TORCHTITAN_2412": {"selective_recompute": "op"},
}

DEFAULT_CLUSTER = {
    "h100-sxm5-80gb": "dgx-h100",
    "a100-sxm4-80gb": "dgx-a100",
    "a100-sxm4-40gb": "dgx-a100",
    "h200-sxm-141gb": "dgx-h200",
    "b200-sxm-180gb": "dgx-b200",
    "h100-sxm5-96gb": "dgx-h100",
}

METRICS = (
    "measured_step_time_s",
    "measured_tokens_per_s_per_device",
    "measured_tflops_per_device",
    "measured_mfu",
)


class Unexpressible(ValueError):
    """A row the model cannot express; the message is the reason."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RowCase:
    """One row turned into specs, with the defaults it needed."""

    id: str
    source_key: str
    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    plan: ParallelPlan
    execution: dict[str, Any]
    assumed: tuple[str, ...]
    row: dict[str, str] = field(repr=False)


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The CSV rows as dicts (ValueError for a missing id or source_key column, or a duplicate id)."""
    with Path(path).open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if rows and not {"id", "source_key"} <= set(rows[0]):
        raise ValueError(f"{path}: not a validation file (needs id and source_key columns)")
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate row ids")
    return rows


def _num(row: dict[str, str], key: str) -> float | None:
    v = row.get(key, "").strip()
    return float(v) if v else None


def _int(row: dict[str, str], key: str, default: int | None, assumed: list[str]) -> int:
    v = _num(row, key)
    if v is None:
        if default is None:
            raise Unexpressible(f"{key} is blank and has no default")
        assumed.append(key)
        return default
    return int(v)


def row_model(row: dict[str, str], assumed: list[str]) -> ModelSpec:
    """A ModelSpec from the architecture columns (MLA dims from the deepseek-v3 preset)."""
    h, a = int(row["hidden_size"]), int(row["num_attention_heads"])
    attention = row["attention"] or "mha"
    kv = int(_num(row, "num_key_value_heads") or a)
    gated = row["gated_mlp"] == "true"
    experts = int(_num(row, "num_experts") or 0)
    ffn = _num(row, "ffn_hidden_size")
    if ffn is None and not experts:
        ffn = 4 * h
        assumed.append("ffn_hidden_size")
    extra: dict[str, Any] = {}
    if attention == "mla":
        ds = load_model("deepseek-v3")
        extra = {
            k: getattr(ds, k)
            for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        }
        assumed.append("mla_dims")
    if experts:
        extra.update(
            num_experts=experts,
            experts_per_token=int(row["experts_per_token"]),
            moe_ffn_hidden_size=int(row["moe_ffn_hidden_size"]),
            num_shared_experts=int(_num(row, "num_shared_experts") or 0),
            num_dense_layers=3 if attention == "mla" and ffn else 0,
        )
    return ModelSpec(
        name=row["model_name"] or row["id"],
        num_layers=int(row["num_layers"]),
        hidden_size=h,
        num_attention_heads=a,
        num_key_value_heads=kv if attention != "mla" else a,
        head_dim=h // a,
        ffn_hidden_size=int(ffn or 0),
        vocab_size=_int(row, "vocab_size", 51200, assumed),
        gated_mlp=gated,
        tied_embeddings=not gated,
        attention=AttentionKind(attention),
        norm=NormKind.RMSNORM if gated else NormKind.LAYERNORM,
        linear_bias=not gated,
        **extra,
    )


def row_cluster(row: dict[str, str], assumed: list[str]) -> ClusterSpec:
    """The row's cluster preset with the row's device and node count."""
    device = load_device(row["device"])
    name = row["cluster"] or DEFAULT_CLUSTER.get(row["device"])
    if not row["cluster"]:
        assumed.append("cluster")
    if name is None:
        raise Unexpressible(f"no cluster given and no default for device {row['device']}")
    cluster = load_cluster(name)
    n = int(row["num_devices"])
    per_node = cluster.devices_per_node
    if n % per_node and n >= per_node:
        raise Unexpressible(f"{n} devices are not whole nodes of {per_node}")
    return dataclasses.replace(
        cluster, device=device, num_nodes=max(n // per_node, 1), devices_per_node=min(per_node, n)
    )


def row_case(row: dict[str, str]) -> RowCase:
    """Specs for one row; raises Unexpressible with the reason."""
    assumed: list[str] = []
    if not row["tp"] and not row["dp"] and not row["pp"]:
        raise Unexpressible("the source gives no parallel plan (tp, pp, dp blank)")
    model = row_model(row, assumed)
    cluster = row_cluster(row, assumed)
    n = int(row["num_devices"])
    tp, pp = _int(row, "tp", 1, assumed), _int(row, "pp", 1, assumed)
    cp = int(_num(row, "cp") or 1)
    dp = _int(row, "dp", n // (tp * pp * cp), assumed)
    mbs = _int(row, "micro_batch_size", 1, assumed)
    schedule = row["schedule"] or ""
    vpp = _int(row, "vpp", 2 if schedule == "interleaved-1f1b" else 1, assumed) if pp > 1 else 1
    if not schedule:
        schedule = "interleaved-1f1b" if vpp > 1 else "1f1b"
        if pp > 1:
            assumed.append("schedule")
    recompute = row["recompute"] or ("full" if row["flops_definition"] == "hardware" else "none")
    if not row["recompute"]:
        assumed.append("recompute")
    if row["sequence_parallel"]:
        sp = row["sequence_parallel"] == "true"
    else:
        sp = tp > 1 and row["source_key"] != "NARAYANAN21_T1"
        assumed.append("sequence_parallel")
    gbs = _int(row, "global_batch_size", dp * mbs * 2 * pp if pp > 1 else dp * mbs, assumed)
    dtype = row["dtype"] or "bf16"
    if not row["dtype"]:
        assumed.append("dtype")
    if model.num_layers % (pp * vpp):
        assumed.append("uneven_layers")
    plan = ParallelPlan(
        dp=dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=int(_num(row, "ep") or 1),
        vpp=vpp,
        micro_batch_size=mbs,
        zero_stage=_int(row, "zero_stage", 0, assumed),
        sequence_parallel=sp,
        recompute=Recompute(recompute),
        schedule=schedule,
    )
    workload = Workload(seq_len=int(row["seq_len"]), global_batch_size=gbs, dtype=DType(dtype))
    return RowCase(
        id=row["id"],
        source_key=row["source_key"],
        model=model,
        cluster=cluster,
        workload=workload,
        plan=plan,
        execution=SOURCE_EXECUTION.get(row["source_key"], {}),
        assumed=tuple(assumed),
        row=row,
    )


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


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def validate_rows(rows: list[dict[str, str]], *, calibration: Calibration) -> dict[str, Any]:
    """Run the analytic model on every row. Returns the JSON object ``workbench validate --json`` prints:
    rows (id, source_key, metric, predicted, measured, ape, assumed, plus memory fields), skipped (id,
    reason), mape, mape_by_source, memory_mape, memory_mape_by_source."""
    from workbench.estimate.analytic import estimate_plan

    out_rows, skipped = [], []
    for row in rows:
        try:
            case = row_case(row)
            cal = dataclasses.replace(calibration, **case.execution)
            est = estimate_plan(
                case.model, case.cluster, case.workload, case.plan, calibration=cal, allow_uneven_layers=True
            )
        except (ValueError, LookupError) as exc:
            skipped.append(
                {"id": row["id"], "source_key": row["source_key"], "reason": " ".join(str(exc).split())}
            )
            continue
        metric = next((m for m in METRICS if _num(row, m) is not None), None)
        item: dict[str, Any] = {
            "id": case.id,
            "source_key": case.source_key,
            "metric": metric,
            "predicted": None,
            "measured": None,
            "ape": None,
            "assumed": list(case.assumed),
            "plan": case.plan.describe(),
        }
        if metric is not None:
            measured = float(_num(row, metric))  # type: ignore[arg-type]
            predicted = predicted_metric(case, est, metric)
            item.update(predicted=predicted, measured=measured, ape=abs(predicted - measured) / measured)
        mem = _num(row, "measured_peak_memory_GiB")
        if mem is not None:
            pred_mem = est.peak_memory_bytes / GIB
            item.update(
                predicted_memory_GiB=pred_mem, measured_memory_GiB=mem, memory_ape=abs(pred_mem - mem) / mem
            )
        out_rows.append(item)
    return _summarise(out_rows, skipped)


def _summarise(rows: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> dict[str, Any]:
    sources = sorted({r["source_key"] for r in rows})
    by_source = {
        s: _mean([r["ape"] for r in rows if r["source_key"] == s and r["ape"] is not None]) for s in sources
    }
    mem_by_source = {
        s: _mean([r["memory_ape"] for r in rows if r["source_key"] == s and "memory_ape" in r])
        for s in sources
    }
    return {
        "rows": rows,
        "skipped": skipped,
        "mape": _mean([r["ape"] for r in rows if r["ape"] is not None]),
        "mape_by_source": {k: v for k, v in by_source.items() if v is not None},
        "memory_mape": _mean([r["memory_ape"] for r in rows if "memory_ape" in r]),
        "memory_mape_by_source": {k: v for k, v in mem_by_source.items() if v is not None},
        "defaults": PLAN_DEFAULTS,
    }


def run_validation(
    path: str | Path = DEFAULT_DATA, *, calibration: Calibration | str = "default"
) -> dict[str, Any]:
    """``validate_rows`` on the CSV at ``path`` with a Calibration or calibration file name."""
    from workbench.presets.calibration import load_calibration

    cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
    return validate_rows(read_rows(path), calibration=cal)
