"""Rows read as their authors meant: what a published row's own arithmetic says about its blanks.

A row that gives TFLOP/s per device beside tokens/s per device (or a step time with its global batch) implies
the FLOPs per token its authors counted: ``implied = TFLOP/s / tokens/s``. Compared with the model's FLOPs per
token (PaLM's 6N + attention, :meth:`ModelSpec.model_flop_per_token`) and with Megatron's hardware FLOPs that
count full recompute (Narayanan et al. SC21 eq. 3: one more forward, :func:`hardware_flop_per_token`), it tells
whether the authors counted recompute; model TFLOP/s above the device's BF16 dense peak cannot come from a BF16
run, so the run used FP8. Each inference is a sentence in the row's ``assumed``; :func:`read_arithmetic` also
returns the blanks it settles (``dtype``, ``recompute``, ``flops_definition``) for :func:`workbench.validate.training.row_case`.
When the arithmetic leaves two readings (a blank recompute the FLOP count cannot settle),
:func:`priced_readings` prices both (in sample in :func:`workbench.validate.training.validate_rows`, out of
sample in :func:`workbench.validate.band.alternative_readings`).

A row that is not blank but self-inconsistent, whose published table gives a layout its stack's recipe of the
same commit contradicts, carries the recipe's degrees in this copy's ``recipe_layout`` column
(:func:`recipe_layout`, :func:`recipe_plan`); both layouts are priced, and :func:`choose_layout` scores one by
a rule that never looks at the measured throughput: the table's when it fits the device memory, the recipe's
when the table's does not and the recipe's does (the published plan could not have run as tabulated).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from workbench.estimate.metrics import hardware_flop_per_token
from workbench.specs.hardware import DType

if TYPE_CHECKING:
    from workbench.specs.framework import FrameworkProfile
    from workbench.specs.hardware import DeviceSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan

MATCH_FRAC = 0.08
"""An implied FLOP count within this share of a convention's count matches it (the causal-attention and
norm/softmax conventions stacks differ in move the count by a few per cent; full recompute adds ~33 %)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Reading:
    """What a row's arithmetic settles; None where it settles nothing."""

    implied_flop_per_token: float | None = None
    flops_definition: str | None = None
    """``model`` or ``hardware`` (recompute counted), when the implied count matches one."""
    recompute: str | None = None
    """``full`` when the implied count is the hardware one with full recompute."""
    dtype: str | None = None
    """``fp8`` when the model TFLOP/s per device exceed the BF16 peak."""
    notes: tuple[str, ...] = ()


def _tokens_per_s_per_device(row: dict[str, str], num_devices: int, seq_len: int) -> float | None:
    def num(key: str) -> float | None:
        text = row.get(key, "").strip()
        return float(text) if text else None

    tps = num("measured_tokens_per_s_per_device")
    if tps is not None:
        return tps
    step, gbs = num("measured_step_time_s"), num("global_batch_size")
    if step is not None and gbs is not None:
        return gbs * seq_len / step / num_devices
    return None


def read_arithmetic(
    row: dict[str, str], model: ModelSpec, device: DeviceSpec, *, seq_len: int, num_devices: int
) -> Reading:
    """What ``row``'s TFLOP/s and tokens/s (or step time) imply about its FLOP convention, recompute and dtype
    (see the module docstring). A row without both metrics reads nothing."""
    tflops_text = row.get("measured_tflops_per_device", "").strip()
    tps = _tokens_per_s_per_device(row, num_devices, seq_len)
    if not tflops_text or tps is None:
        return Reading()
    implied = float(tflops_text) * 1e12 / tps
    model_fpt = model.model_flop_per_token(seq_len)
    half_attention = model.attention_flop_per_token(seq_len) / 2
    full_fpt = float(hardware_flop_per_token(model, seq_len, np.asarray(2)))
    conventions = {
        "model FLOPs, no recompute counted": ("model", None, model_fpt),
        "model FLOPs with causal attention (half the s^2 products), no recompute counted": (
            "model",
            None,
            model_fpt - half_attention,
        ),
        "hardware FLOPs with full recompute counted": ("hardware", "full", full_fpt),
        "hardware FLOPs with full recompute and causal attention counted": (
            "hardware",
            "full",
            full_fpt - half_attention * 4 / 3,
        ),
    }
    ratio = implied / model_fpt
    matches = sorted(
        (abs(implied / count - 1), name, definition, recompute)
        for name, (definition, recompute, count) in conventions.items()
        if abs(implied / count - 1) <= MATCH_FRAC
    )
    notes = []
    definition = recompute = None
    if not matches:
        notes.append(f"flops:implied {ratio:.2f}x the model FLOPs per token matches no convention")
    elif len({m[3] for m in matches}) > 1:
        names = " or ".join(m[1] for m in matches)
        notes.append(f"flops:implied {ratio:.2f}x the model FLOPs per token reads two ways: {names}")
    else:
        _, name, definition, recompute = matches[0]
        notes.append(f"flops:implied {ratio:.2f}x the model FLOPs per token: {name}")
    model_flop_per_s = tps * model_fpt
    bf16_peak = device.peak(DType.BF16) if DType.BF16 in device.peak_flop_per_s else None
    dtype = None
    if bf16_peak is not None and model_flop_per_s > bf16_peak:
        dtype = "fp8"
        given = row.get("dtype", "").strip().lower()
        notes.append(
            f"dtype:fp8 implied (model {model_flop_per_s / 1e12:,.0f} TFLOP/s per device above the BF16 peak"
            f" {bf16_peak / 1e12:,.0f})" + (f"; the row says {given}" if given and given != "fp8" else "")
        )
    return Reading(
        implied_flop_per_token=implied,
        flops_definition=definition,
        recompute=recompute,
        dtype=dtype,
        notes=tuple(notes),
    )


RECIPE_COLUMNS = ("fp8_recipe", "async_tp", "torch_compile", "expandable_segments")
"""Optional columns of the project's validation schema (profiles/validation/README.md): how an FP8 run scaled
its tensors, whether tensor parallelism ran asynchronously (its collectives overlapped with its GEMMs) and
whether a PyTorch-native stack compiled its model (fused element-wise kernels), and whether the run's launcher
set ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``."""

EXPANDABLE_SEGMENTS_FRAGMENTATION_FRAC = 0.0
"""Fragmentation share of a run whose caching allocator uses expandable segments: none beyond the counted
tensors. With ``expandable_segments:True`` PyTorch's CUDA caching allocator maps physical pages into one
growing virtual range per stream instead of fixed ``cudaMalloc`` segments, and when no free range fits a
request it unmaps the cached free pages and maps them where the request fits (c10/cuda/CUDACachingAllocator.cpp,
``ExpandableSegment``: ``map`` / ``unmap`` of 2 MiB pages), so memory free between live blocks is not lost to a
large request, which is the fragmentation ``FrameworkProfile.fragmentation_frac`` prices (PyTorch CUDA notes,
"Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"; Megatron-Bridge's memory-tuning guide calls it the fix
for fragmentation-induced OOM). What is left is each block's rounding up to a page."""


FSDP_REDUCE_BYTES_PER_PARAM = {"default": 4.0, "pure": 2.0, "full": 4.0}
"""Bytes per gradient element of the FSDP reduce-scatter under Composer's ``fsdp_config.mixed_precision``
(composer/trainer/mosaic_fsdp_utils.py ``get_mixed_precision``, v0.16.4 to @4e0068a08): ``DEFAULT`` keeps
``param_dtype`` 16-bit and sets ``reduce_dtype=torch.float32`` (4), ``PURE`` reduces in the 16-bit precision
(2), ``FULL`` leaves every dtype fp32 (4). PyTorch FSDP1 casts the unsharded gradient to ``reduce_dtype``
before the reduce-scatter (torch/distributed/fsdp/_runtime_utils.py ``_reduce_grad``)."""


def apply_recipe_columns(row: dict[str, str], fw: FrameworkProfile) -> FrameworkProfile:
    """``fw`` as the row ran it: ``fp8_recipe`` replaces the profile's recipe (``rowwise`` also gathers 16-bit
    weights and activations: torchao's float8 all-gathers are tensorwise only); ``async_tp`` true or false sets
    ``tp_comm_overlap`` (torchtitan ``enable_async_tensor_parallel``: torch's symmetric-memory
    ``fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter`` split each TP collective into per-rank chunks
    overlapped with the partial GEMMs, as Transformer Engine's userbuffers overlap does); ``torch_compile`` true
    or false sets ``fused_elementwise`` (torch.compile's Inductor fuses the norms, rotary embedding and SwiGLU
    into few kernels; eager PyTorch runs each op as its own kernel, torchtitan ``compile.enable``);
    ``expandable_segments`` true sets ``fragmentation_frac`` to ``EXPANDABLE_SEGMENTS_FRAGMENTATION_FRAC``;
    ``fsdp_mixed_precision`` (Composer's ``fsdp_config.mixed_precision``) sets the bytes of the gradient
    reduction, ``FSDP_REDUCE_BYTES_PER_PARAM``. Blank: the profile's. ValueError naming the column and the
    allowed values."""
    from workbench.specs.framework import FP8_RECIPES

    recipe = row.get("fp8_recipe", "").strip().lower()
    if recipe:
        if recipe not in FP8_RECIPES:
            raise ValueError(f"column fp8_recipe: {recipe!r} is not one of {', '.join(FP8_RECIPES)}")
        changes: dict[str, object] = {"fp8_recipe": recipe}
        if recipe == "rowwise":
            changes.update(fp8_tp_all_gather=False, fp8_param_gather=False)
        fw = replace(fw, **changes)  # type: ignore[arg-type]
    flags = {"async_tp": "tp_comm_overlap", "torch_compile": "fused_elementwise"}
    for column, field in flags.items():
        value = row.get(column, "").strip().lower()
        if value not in ("", "true", "false"):
            raise ValueError(f"column {column}: {value!r} is not true or false")
        if value:
            fw = replace(fw, **{field: value == "true"})  # type: ignore[arg-type]
    value = row.get("expandable_segments", "").strip().lower()
    if value not in ("", "true", "false"):
        raise ValueError(f"column expandable_segments: {value!r} is not true or false")
    if value == "true":
        fw = replace(fw, fragmentation_frac=EXPANDABLE_SEGMENTS_FRAGMENTATION_FRAC)
    mode = row.get("fsdp_mixed_precision", "").strip().lower()
    if mode:
        if mode not in FSDP_REDUCE_BYTES_PER_PARAM:
            raise ValueError(
                f"column fsdp_mixed_precision: {mode!r} is not one of {', '.join(FSDP_REDUCE_BYTES_PER_PARAM)}"
            )
        fw = replace(fw, grad_reduce_bytes_per_param=FSDP_REDUCE_BYTES_PER_PARAM[mode])
    return fw


LAYOUT_COLUMN = "recipe_layout"
"""This copy's column (profiles/validation/README.md): the stack's published recipe for the row's model and GPU
where its layout disagrees with the published table's, as ``key=value`` pairs joined by ``;``."""

LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size")
"""What ``recipe_layout`` may set: the plan's degrees and its micro-batch (``ParallelPlan`` fields)."""


def recipe_layout(row: dict[str, str]) -> dict[str, int]:
    """The ``recipe_layout`` cell of ``row`` as {plan field: value} (``ep=64;micro_batch_size=4`` ->
    ``{"ep": 64, "micro_batch_size": 4}``); blank or absent: {}. ValueError naming the column, the bad part and
    what is allowed: a part that is not ``key=value``, a key outside ``LAYOUT_KEYS``, a key given twice, a value
    that is not a whole number >= 1."""
    text = row.get(LAYOUT_COLUMN, "").strip()
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or key not in LAYOUT_KEYS:
            raise ValueError(
                f"column {LAYOUT_COLUMN}: {part!r} is not key=value with a key among {', '.join(LAYOUT_KEYS)}"
            )
        if key in out:
            raise ValueError(f"column {LAYOUT_COLUMN}: {key} given twice in {text!r}")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"column {LAYOUT_COLUMN}: {key}={value!r} is not a whole number >= 1")
        out[key] = int(value)
    return out


def recipe_plan(table: ParallelPlan, layout: dict[str, int], num_devices: int) -> ParallelPlan:
    """The published table's plan ``table`` with the recipe's ``layout`` (:func:`recipe_layout`): a dp the
    layout does not give is what its tp, pp and cp leave of ``num_devices``; the schedule follows vpp
    (interleaved 1F1B when vpp > 1, else 1F1B where the table's was interleaved). ValueError naming the column
    when the degrees do not divide the devices, multiply to another device count, or fail the plan's own
    check."""
    from workbench.specs.plan import data_parallel_degree

    changes: dict[str, object] = dict(layout)
    if "dp" not in layout and {"tp", "pp", "cp"} & set(layout):
        tp, pp, cp = (layout.get(k, getattr(table, k)) for k in ("tp", "pp", "cp"))
        if num_devices % (tp * pp * cp):
            raise ValueError(
                f"column {LAYOUT_COLUMN}: tp {tp} x pp {pp} x cp {cp} does not divide {num_devices} devices"
            )
        changes["dp"] = data_parallel_degree(num_devices, tp=tp, pp=pp, cp=cp)
    vpp = int(layout.get("vpp", table.vpp))
    if vpp > 1:
        changes["schedule"] = "interleaved-1f1b"
    elif table.schedule == "interleaved-1f1b":
        changes["schedule"] = "1f1b"
    try:
        plan = replace(table, **changes)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"column {LAYOUT_COLUMN}: {exc}") from None
    if plan.num_devices != num_devices:
        raise ValueError(
            f"column {LAYOUT_COLUMN}: dp {plan.dp} x tp {plan.tp} x pp {plan.pp} x cp {plan.cp} is"
            f" {plan.num_devices} devices, the row has {num_devices}"
        )
    return plan


def _layout_text(plan: ParallelPlan, keys: Iterable[str]) -> str:
    return ";".join(f"{k}={getattr(plan, k)}" for k in keys)


def choose_layout(
    table: ParallelPlan,
    recipe: ParallelPlan,
    fits: Callable[[ParallelPlan], tuple[bool, str]],
) -> tuple[str, ParallelPlan, str]:
    """Which of a row's two layouts to score, by a rule that never looks at the measured throughput: the
    published table's when it fits the device memory, the recipe's when the table's does not and the recipe's
    does (the published plan could not have run as tabulated), else the table's. ``fits(plan)`` gives
    (fits, what it needs: ``"197.9 of 171.0 GiB usable"``). Returns (``table`` or ``recipe``, that plan, the
    sentence for the row's ``assumed``: ``layout:<reading> ...``, naming both layouts and why)."""
    keys = [k for k in LAYOUT_KEYS if getattr(table, k) != getattr(recipe, k)]
    table_text, recipe_text = _layout_text(table, keys), _layout_text(recipe, keys)
    table_fits, table_need = fits(table)
    recipe_fits, recipe_need = fits(recipe)
    if table_fits:
        why = f"the table's layout fits ({table_need}); the recipe's {recipe_text} priced beside it"
        return "table", table, f"layout:table {table_text} ({why})"
    if recipe_fits:
        why = (
            f"the table's {table_text} needs {table_need}, so the published plan could not have run as "
            f"tabulated; the recipe's fits ({recipe_need})"
        )
        return "recipe", recipe, f"layout:recipe {recipe_text} ({why})"
    why = f"neither fits: the table's needs {table_need}, the recipe's {recipe_text} {recipe_need}"
    return "table", table, f"layout:table {table_text} ({why})"


class ReadCase(Protocol):
    """What :func:`priced_readings` reads of a row's case (:class:`workbench.validate.training.RowCase`)."""

    @property
    def id(self) -> str: ...
    @property
    def source_key(self) -> str: ...
    @property
    def plan(self) -> ParallelPlan: ...
    @property
    def assumed(self) -> tuple[str, ...]: ...
    @property
    def readings(self) -> tuple[tuple[str, ParallelPlan], ...]: ...


def priced_readings(
    case: ReadCase, scored: dict[str, Any], price: Callable[[ParallelPlan], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every open question of ``case`` with each reading priced beside the scored one (``scored``: the case's
    :func:`workbench.validate.training.score_case` result; ``price(plan)``: that of the case at another plan,
    under the calibration the caller scores with). Questions: ``recompute``
    when the row leaves it blank and its arithmetic does not settle it (:func:`read_arithmetic`: the plan as
    priced and the other reading, no recompute <-> full), ``layout`` when its table and its stack's recipe
    disagree (``RowCase.readings``: ``table`` and ``recipe``, the one :func:`choose_layout` scored among them).
    Per question: ``id``, ``source_key``, ``question``, ``metric``, ``measured``, ``readings`` (reading ->
    predicted), ``need_GiB`` (reading -> the peak rank's predicted need, the fit verdict's), ``usable_GiB``,
    ``range`` (lowest, highest predicted), ``scored`` (the reading in the row's score), ``supported`` (the
    reading whose prediction is nearer the measured value: what the row's own numbers support) and
    ``arithmetic`` (what the row's FLOP count says, or None when it gives one metric only). A reading the model
    refuses (an infeasible plan) drops its question. [] for a row without a measured throughput."""
    from workbench.specs.plan import Recompute

    if scored.get("predicted") is None:
        return []
    questions: list[tuple[str, str, dict[str, ParallelPlan]]] = []
    if "recompute" in case.assumed:
        current = str(case.plan.recompute)
        other = "full" if current == "none" else "none"
        plans = {current: case.plan, other: replace(case.plan, recompute=Recompute(other))}
        questions.append(("recompute", current, plans))
    if case.readings:
        name = next(n for n, p in case.readings if p == case.plan)
        questions.append(("layout", name, dict(case.readings)))
    flops = [a for a in case.assumed if a.startswith("flops:")]
    out = []
    for question, current, plans in questions:
        priced = {current: scored}
        try:
            for name, plan in plans.items():
                if name != current:
                    priced[name] = price(plan)
        except (ValueError, LookupError):
            continue
        readings = {name: priced[name]["predicted"] for name in plans}
        out.append(
            {
                "id": case.id,
                "source_key": case.source_key,
                "question": question,
                "metric": scored["metric"],
                "measured": scored["measured"],
                "readings": readings,
                "need_GiB": {name: priced[name]["predicted_need_GiB"] for name in plans},
                "usable_GiB": scored["usable_GiB"],
                "range": (min(readings.values()), max(readings.values())),
                "scored": current,
                "supported": min(readings, key=lambda k: abs(readings[k] - scored["measured"])),
                "arithmetic": flops[0] if flops else None,
            }
        )
    return out
