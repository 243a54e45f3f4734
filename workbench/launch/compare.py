"""Measured beside predicted: ``compare_run`` (rows with the relative error) and ``validation_row`` (the run as a
row of the training validation schema, profiles/validation/README.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.launch.export import PREDICTION_FORMAT
from workbench.launch.runlogs import Measured


@dataclass(frozen=True, kw_only=True, slots=True)
class CompareRow:
    metric: str
    """Name with its SI unit (``step_time_s``, ``peak_memory_bytes``, ...)."""
    measured: float
    predicted: float

    @property
    def error_frac(self) -> float:
        """(predicted - measured) / measured: positive when the prediction is high."""
        return (self.predicted - self.measured) / self.measured if self.measured else float("nan")


def check_prediction(record: Any, name: str) -> dict[str, Any]:
    """``record`` if it is a ``prediction.json`` object, else ValueError naming the file and what was expected."""
    if not isinstance(record, dict) or record.get("format") != PREDICTION_FORMAT or "summary" not in record:
        raise ValueError(
            f"{name}: not a prediction.json written by `workbench export` (format {PREDICTION_FORMAT})"
        )
    return record


LENGTH_TOLERANCE_FRAC = 0.10
"""How far a serving benchmark's mean prompt or output length may lie from the prediction's before the run counts
as another workload (a fraction). vLLM's random dataset at its default range ratio 0 and SGLang's ``random`` with
``--random-range-ratio 1`` produce the requested lengths exactly; a run with ``ignore_eos`` off or a sampled
dataset (ShareGPT) drifts, and latencies then answer another question than the one predicted."""


def _check_lengths(measured: Measured, workload: dict[str, Any], name: str) -> None:
    """ValueError when the benchmark's mean prompt or output length is more than ``LENGTH_TOLERANCE_FRAC`` from the
    prediction's ``input_tokens``/``output_tokens`` (what the run reports and the prediction names only)."""
    for what, got, key in (
        ("prompt", measured.mean_input_tokens, "input_tokens"),
        ("output", measured.mean_output_tokens, "output_tokens"),
    ):
        expected = workload.get(key)
        if got is None or not isinstance(expected, int | float) or expected <= 0:
            continue
        if abs(got - expected) > LENGTH_TOLERANCE_FRAC * expected:
            raise ValueError(
                f"{name}: the benchmark's requests average {got:,.0f} {what} tokens; the prediction is for "
                f"{expected:,.0f} ({key}); allowed: within {LENGTH_TOLERANCE_FRAC:.0%} (a run of another workload: "
                "benchmark with the lengths of the prediction, e.g. vllm bench serve --random-input-len and "
                "--random-output-len with --ignore-eos)"
            )


def compare_run(measured: Measured, prediction: dict[str, Any], name: str = "run output") -> list[CompareRow]:
    """Rows of every figure both sides have. Raises ValueError when the run is of another kind (training vs
    serving) or names another model than the prediction."""
    if measured.kind != prediction.get("kind"):
        raise ValueError(
            f"{name}: a {measured.kind} run ({measured.source}) cannot be compared with a "
            f"{prediction.get('kind')} prediction"
        )
    ref = prediction.get("model_ref", {})
    known = {
        str(v).lower() for v in (ref.get("name"), ref.get("hf_id"), prediction["summary"].get("model")) if v
    }
    if (
        measured.model
        and measured.model.lower() not in known
        and measured.model.split("/")[-1].lower() not in {k.split("/")[-1] for k in known}
    ):
        raise ValueError(
            f"{name}: the run is of model {measured.model!r}; the prediction is of {', '.join(sorted(known))}"
        )
    for key, (value, line) in measured.setup.items():
        section, field_name = key.split(".")
        expected = prediction.get(section, {}).get(field_name)
        if expected is not None and int(expected) != value:
            raise ValueError(
                f"{name}:{line}: the run has {field_name} = {value}; the prediction is for {field_name} = {expected} "
                "(a run of another model or plan)"
            )
    if measured.kind == "serving":
        _check_lengths(measured, prediction.get("workload", {}), name)
    s = prediction["summary"]
    pairs: list[tuple[str, float | None, float | None]]
    if measured.kind == "training":
        devices = s.get("num_devices") or 1
        pairs = [
            ("step_time_s", measured.step_time_s, s.get("step_time_s")),
            ("tflops_per_device", measured.tflops_per_device, s.get("tflops_per_device")),
            ("tokens_per_s_per_device", measured.tokens_per_s_per_device, s.get("tokens_per_s", 0) / devices),
            ("mfu", measured.mfu, s.get("mfu")),
            ("peak_memory_bytes", measured.peak_memory_bytes, s.get("peak_memory_bytes")),
        ]
    else:
        pairs = [
            ("ttft_s", measured.ttft_s, s.get("ttft_s")),
            ("tpot_s", measured.tpot_s, s.get("tpot_s")),
            ("output_tokens_per_s", measured.output_tokens_per_s, s.get("output_tokens_per_s")),
        ]
    return [
        CompareRow(metric=m, measured=float(a), predicted=float(b))
        for m, a, b in pairs
        if a is not None and b is not None
    ]


def validation_row(
    measured: Measured, prediction: dict[str, Any], *, row_id: str, source: str
) -> dict[str, str]:
    """The run as a row of ``training_public.csv``'s schema (values as text; blank where not measured)."""
    if measured.kind != "training":
        raise ValueError("--append-row writes training rows (the training validation schema)")
    model, plan, work, cluster = (
        prediction["model"],
        prediction["plan"],
        prediction["workload"],
        prediction["cluster"],
    )
    devices = cluster["num_devices"]
    tokens = measured.tokens_per_s_per_device
    if tokens is None and measured.step_time_s:
        tokens = work["seq_len"] * work["global_batch_size"] / measured.step_time_s / devices

    def num(value: float | None, digits: int = 6) -> str:
        return "" if value is None else f"{value:.{digits}g}"

    row = {
        "id": row_id,
        "source_key": row_id.rsplit("-", 1)[0],
        "source": source,
        "confidence": "high",
        "notes": f"own run read by workbench compare from {measured.source} output over {measured.num_steps} steps",
        "model_name": prediction.get("model_ref", {}).get("name", model["name"]),
        "num_layers": model["num_layers"],
        "hidden_size": model["hidden_size"],
        "num_attention_heads": model["num_attention_heads"],
        "num_key_value_heads": model["num_key_value_heads"],
        "ffn_hidden_size": model["ffn_hidden_size"],
        "vocab_size": model["vocab_size"],
        "seq_len": work["seq_len"],
        "gated_mlp": str(model["gated_mlp"]).lower(),
        "num_experts": model["num_experts"] or "",
        "experts_per_token": model["experts_per_token"] or "",
        "moe_ffn_hidden_size": model["moe_ffn_hidden_size"] or "",
        "num_shared_experts": model["num_shared_experts"] or "",
        "attention": model["attention"],
        "device": cluster["device"],
        "num_devices": devices,
        "devices_per_node": cluster["devices_per_node"],
        "cluster": cluster["id"],
        "tp": plan["tp"],
        "pp": plan["pp"],
        "dp": plan["dp"],
        "cp": plan["cp"],
        "ep": plan["ep"],
        "vpp": plan["vpp"],
        "sequence_parallel": str(plan["sequence_parallel"]).lower(),
        "micro_batch_size": plan["micro_batch_size"],
        "global_batch_size": work["global_batch_size"],
        "recompute": plan["recompute"],
        "zero_stage": plan["zero_stage"],
        "schedule": plan["schedule"] if plan["pp"] > 1 else "",
        "dtype": work["dtype"],
        "framework": prediction.get("framework") or prediction.get("stack", ""),
        "measured_tflops_per_device": num(measured.tflops_per_device),
        "measured_mfu": num(measured.mfu),
        "measured_hfu": "",
        "measured_tokens_per_s_per_device": num(tokens),
        "measured_step_time_s": num(measured.step_time_s),
        "measured_peak_memory_GiB": num(
            measured.peak_memory_bytes / 2**30 if measured.peak_memory_bytes else None
        ),
        "flops_definition": "hardware"
        if measured.source == "megatron" and measured.tflops_per_device
        else ("model" if measured.mfu is not None else ""),
    }
    return {k: str(v) for k, v in row.items()}
