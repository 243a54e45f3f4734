"""What a real run prints, read back as measurements (SI units): ``read_run_output(text, name)``.

Formats, each from the line of the stack's source that prints it:

- Megatron-LM / NeMo ``training_log`` (Megatron-LM core_v0.19.0 megatron/training/training.py lines 2844-2856:
  ``' iteration {:8d}/{:8d} |'``, ``' elapsed time per iteration (ms): {:.1f} |'``, with ``--log-throughput``
  ``' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |'``) and ``report_memory``
  (megatron/training/utils/common_utils.py lines 321-323: ``'... memory (MB) | allocated: X | max allocated: Y'``,
  MB = 2^20 bytes);
- torchtitan's metric line (torchtitan v0.2.2 torchtitan/components/metrics.py lines 461-470: ``step: N  loss: L
  grad_norm: G  memory: M GiB(P%)  tps: T  tflops: F  mfu: U%``, with ANSI colours; memory is max reserved);
- the result JSON of vLLM's serving benchmark (``vllm bench serve --save-result``; vllm-project/vllm
  vllm/benchmarks/serve.py at 009e6d4a: the ``BenchmarkMetrics`` fields ``completed``, ``request_throughput``,
  ``output_throughput``, ``mean_ttft_ms``, ``mean_tpot_ms`` written under the same names, ``total_input_tokens``
  and ``total_output_tokens`` over the completed requests, ``failed`` where the release writes it, and
  ``model_id``) and
  of SGLang's ``python -m sglang.bench_serving`` (sgl-project/sglang python/sglang/bench_serving.py: the same key
  names, ``backend`` ``sglang*``, one JSON object per line appended per run);
- our own ``workbench run --json`` record (its ``measured`` summary: ``step_time_s``, ``tokens_per_s``,
  ``tflops_per_device``, ``mfu``, ``peak_memory_bytes``, with ``"measured": true``).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MEGATRON_ITER = re.compile(
    r"iteration\s+(\d+)/\s*(\d+) \|.*?elapsed time per iteration \(ms\): ([0-9.]+) \|"
    r"(?:.*?throughput per GPU \(TFLOP/s/GPU\): ([0-9.]+) \|)?"
)
_MEGATRON_MEM = re.compile(r"memory \(MB\) \| allocated: ([0-9.]+) \| max allocated: ([0-9.]+)")
_TITAN = re.compile(
    r"step:\s*(\d+)\s+loss:\s*([-0-9.naif]+)\s+grad_norm:\s*([-0-9.naif]+)\s+memory:\s*([0-9.]+)GiB\([0-9.]+%\)\s+"
    r"tps:\s*([0-9,]+)(?:\s+tflops:\s*([0-9,.]+))?(?:\s+mfu:\s*([0-9.]+)%)?"
)
_SERVING_KEYS = ("mean_ttft_ms", "mean_tpot_ms", "output_throughput")

MEGATRON_SETUP = {
    "num_layers": "model.num_layers",
    "hidden_size": "model.hidden_size",
    "num_attention_heads": "model.num_attention_heads",
    "seq_length": "workload.seq_len",
    "global_batch_size": "workload.global_batch_size",
    "micro_batch_size": "plan.micro_batch_size",
    "tensor_model_parallel_size": "plan.tp",
    "pipeline_model_parallel_size": "plan.pp",
    "context_parallel_size": "plan.cp",
    "data_parallel_size": "plan.dp",
}
"""Megatron-LM's argument dump (``_print_args``, megatron/training/arguments.py lines 1909-1920 at core_v0.19.0:
``'  {} {} {}'.format(arg, dots, value)``) -> the prediction's field."""
_MEGATRON_ARG = re.compile(r"^\s+([a-z_0-9]+) \.+ (\d+)\s*$")

TORCHTITAN_SETUP = {"n_layers": "model.num_layers", "dim": "model.hidden_size"}
"""torchtitan's ``Building NAME FLAVORwith {model args as JSON}`` (torchtitan/train.py lines 143-146 at v0.2.2)."""
_TITAN_ARG = re.compile(r'^\s*"(n_layers|dim)": (\d+),?\s*$')

WARMUP_STEPS = 2
"""Steps left out of the means: the first iterations include compilation, allocator growth and NCCL set-up."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    """Measurements of one run, SI units; None where the output does not report it."""

    source: str
    """Which format was read: megatron, torchtitan, vllm-bench, sglang-bench, workbench-run."""
    kind: str
    """training or serving."""
    num_steps: int = 0
    """Training steps (or serving requests completed) the means are over."""
    step_time_s: float | None = None
    tflops_per_device: float | None = None
    tokens_per_s_per_device: float | None = None
    mfu: float | None = None
    peak_memory_bytes: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    mean_input_tokens: float | None = None
    """Serving: prompt tokens per completed request (``total_input_tokens / completed``)."""
    mean_output_tokens: float | None = None
    """Serving: output tokens per completed request (``total_output_tokens / completed``)."""
    model: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    setup: dict[str, tuple[int, int]] = field(default_factory=dict)
    """What the run printed of its set-up, as the prediction names it (``model.num_layers``, ``plan.tp``,
    ``workload.seq_len``, ...) -> (value, line number): checked against the prediction by ``compare_run``."""


def read_run_output(text: str, name: str) -> Measured:
    """Measurements from the text a run printed (a log) or saved (a JSON result); ``name`` is the file's name for
    messages. Raises ValueError naming the file, the line and what was expected, for a text of no known format,
    a truncated one (fewer than ``WARMUP_STEPS`` + 1 steps, an unfinished JSON) or a value that is not a number."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _read_json(stripped, name)
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    if any("elapsed time per iteration (ms)" in line for line in lines):
        return _read_megatron(lines, name)
    if any(_TITAN.search(line) for line in lines):
        return _read_torchtitan(lines, name)
    raise ValueError(
        f"{name}: no known run output: expected Megatron-LM 'iteration N/M | ... elapsed time per iteration (ms): "
        "...' lines, torchtitan 'step: N  loss: ... tps: ...' lines, or a JSON result of vllm/sglang bench serving "
        "or `workbench run --json`"
    )


def _steady(values: list[float], name: str, what: str) -> tuple[float, int]:
    """Mean of ``values`` after the warm-up steps (ValueError when too few: a truncated log)."""
    if len(values) <= WARMUP_STEPS:
        raise ValueError(
            f"{name}: {len(values)} {what} line(s); expected more than {WARMUP_STEPS} (the first are warm-up): "
            "is the log truncated?"
        )
    kept = values[WARMUP_STEPS:]
    return statistics.fmean(kept), len(kept)


def _read_megatron(lines: list[str], name: str) -> Measured:
    times, tflops, peaks = [], [], []
    for number, line in enumerate(lines, 1):
        if "elapsed time per iteration (ms)" in line:
            m = _MEGATRON_ITER.search(line)
            if m is None:
                raise ValueError(
                    f"{name}:{number}: expected ' iteration N/M | ... elapsed time per iteration (ms): "
                    f"X |', got {line.strip()[:120]!r}"
                )
            times.append(float(m.group(3)) / 1e3)
            if m.group(4):
                tflops.append(float(m.group(4)))
        mem = _MEGATRON_MEM.search(line)
        if mem:
            peaks.append(float(mem.group(2)) * 2**20)
    step_s, n = _steady(times, name, "iteration")
    return Measured(
        setup=_setup(lines, _MEGATRON_ARG, MEGATRON_SETUP),
        source="megatron",
        kind="training",
        num_steps=n,
        step_time_s=step_s,
        tflops_per_device=statistics.fmean(tflops[WARMUP_STEPS:]) if len(tflops) > WARMUP_STEPS else None,
        peak_memory_bytes=max(peaks) if peaks else None,
        notes=("memory: max allocated (torch.cuda.max_memory_allocated) of the reporting ranks",)
        if peaks
        else (),
    )


def _read_torchtitan(lines: list[str], name: str) -> Measured:
    tps, mfu, tflops, mem = [], [], [], []
    for number, line in enumerate(lines, 1):
        if "tps:" not in line or "step:" not in line:
            continue
        m = _TITAN.search(line)
        if m is None:
            raise ValueError(
                f"{name}:{number}: expected torchtitan's 'step: N  loss: L  grad_norm: G  memory: "
                f"M GiB(P%)  tps: T ...', got {line.strip()[:120]!r}"
            )
        tps.append(float(m.group(5).replace(",", "")))
        mem.append(float(m.group(4)) * 2**30)
        if m.group(6):
            tflops.append(float(m.group(6).replace(",", "")))
        if m.group(7):
            mfu.append(float(m.group(7)) / 100)
    tokens, n = _steady(tps, name, "step")
    return Measured(
        setup=_setup(lines, _TITAN_ARG, TORCHTITAN_SETUP),
        source="torchtitan",
        kind="training",
        num_steps=n,
        tokens_per_s_per_device=tokens,
        tflops_per_device=statistics.fmean(tflops[WARMUP_STEPS:]) if len(tflops) > WARMUP_STEPS else None,
        mfu=statistics.fmean(mfu[WARMUP_STEPS:]) if len(mfu) > WARMUP_STEPS else None,
        peak_memory_bytes=max(mem),
        notes=("memory: max reserved (torchtitan's DeviceMemoryMonitor)",),
    )


def _setup(lines: list[str], pattern: re.Pattern[str], names: dict[str, str]) -> dict[str, tuple[int, int]]:
    """The first value of each set-up field the log prints, with its line number."""
    found: dict[str, tuple[int, int]] = {}
    for number, line in enumerate(lines, 1):
        m = pattern.match(line)
        if m and m.group(1) in names and names[m.group(1)] not in found:
            found[names[m.group(1)]] = (int(m.group(2)), number)
    return found


def _read_json(text: str, name: str) -> Measured:
    first = text.splitlines()[0] if text.count("\n{") else text  # SGLang appends one object per line
    try:
        data = json.loads(first)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name}:{exc.lineno}: not JSON ({exc.msg}): is the file truncated?") from None
    if not isinstance(data, dict):
        raise ValueError(f"{name}: expected a JSON object")
    record = data.get("measured") if isinstance(data.get("measured"), dict) else data  # `run --json` nests it
    if isinstance(record, dict) and "step_time_s" in record and record.get("measured") is True:
        return _read_workbench_run(record, name)
    missing = [k for k in _SERVING_KEYS if k not in data]
    if missing:
        raise ValueError(
            f"{name}: a serving benchmark result needs {', '.join(_SERVING_KEYS)}; missing "
            f"{', '.join(missing)} (or a `workbench run --json` record with step_time_s)"
        )
    completed = int(data.get("completed", 0))
    failed = int(data.get("failed", 0) or 0)
    notes = (f"{failed} request(s) failed: the means are over the {completed} completed",) if failed else ()

    def per_request(key: str) -> float | None:
        value = data.get(key)
        return float(value) / completed if isinstance(value, int | float) and completed > 0 else None

    return Measured(
        source="sglang-bench" if data.get("backend", "").startswith("sglang") else "vllm-bench",
        kind="serving",
        num_steps=completed,
        mean_input_tokens=per_request("total_input_tokens"),
        mean_output_tokens=per_request("total_output_tokens"),
        notes=notes,
        ttft_s=_number(data, "mean_ttft_ms", name) / 1e3,
        tpot_s=_number(data, "mean_tpot_ms", name) / 1e3,
        output_tokens_per_s=_number(data, "output_throughput", name),
        requests_per_s=data.get("request_throughput"),
        model=data.get("model_id") or data.get("model"),
    )


def _read_workbench_run(record: dict[str, object], name: str) -> Measured:
    """A measured ``Estimate.summary()`` (``workbench run --json``'s ``measured``, or ``estimate --json`` of the
    real-run backend)."""

    def optional(key: str) -> float | None:
        return _number(record, key, name) if key in record else None

    tokens = optional("tokens_per_s")
    return Measured(
        source="workbench-run",
        kind="training",
        num_steps=1,
        step_time_s=_number(record, "step_time_s", name),
        tokens_per_s_per_device=None if tokens is None else tokens / (optional("num_devices") or 1.0),
        tflops_per_device=optional("tflops_per_device"),
        mfu=optional("mfu"),
        peak_memory_bytes=optional("peak_memory_bytes"),
        model=str(record["model"]) if record.get("model") else None,
    )


def _number(data: dict[str, object], key: str, name: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        raise ValueError(f"{name}: {key} must be a number >= 0, got {value!r}")
    return float(value)
