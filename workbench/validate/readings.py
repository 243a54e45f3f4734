"""Rows read as their authors meant: what a published row's own arithmetic says about its blanks.

A row that gives TFLOP/s per device beside tokens/s per device (or a step time with its global batch) implies
the FLOPs per token its authors counted: ``implied = TFLOP/s / tokens/s``. Compared with the model's FLOPs per
token (PaLM's 6N + attention, :meth:`ModelSpec.model_flop_per_token`) and with Megatron's hardware FLOPs that
count full recompute (Narayanan et al. SC21 eq. 3: one more forward, :func:`hardware_flop_per_token`), it tells
whether the authors counted recompute; model TFLOP/s above the device's BF16 dense peak cannot come from a BF16
run, so the run used FP8. Each inference is a sentence in the row's ``assumed``; :func:`read_arithmetic` also
returns the blanks it settles (``dtype``, ``recompute``, ``flops_definition``) for :func:`workbench.validate.training.row_case`.
When the arithmetic leaves two readings (a blank recompute the FLOP count cannot settle),
:func:`workbench.validate.band.alternative_readings` prices both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from workbench.estimate.metrics import hardware_flop_per_token
from workbench.specs.hardware import DType

if TYPE_CHECKING:
    from workbench.specs.framework import FrameworkProfile
    from workbench.specs.hardware import DeviceSpec
    from workbench.specs.model import ModelSpec

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
