"""How a serving engine runs a plan's main GEMMs and stores its KV cache on a device. ``kv_precision`` is the one
rule for the KV cache (fp8 / fp4 per engine, release and compute capability; its docstring and ``_kv_refusal``).
``gemm_precision`` is the one rule that
``workbench serve estimate`` (``ReplicaCost``), ``workbench serve plan`` (``candidate_plans``) and the app's
Serving tab apply to a (engine, engine version, device, weight dtype, activation dtype) choice.

Three readings:

- ``as-is``: the GEMMs take ``activation_dtype`` inputs at that dtype's peak (bf16/fp16 at their own, fp8, fp4
  and int4 inputs at the fp8 peak; ``gemm_compute_dtype``);
- ``weight-only``: the device has no fp8 tensor-core peak, the weights are fp8 and the engine runs FP8
  checkpoints there as W8A16 through a Marlin kernel (weights read at 1 byte, unpacked to 16 bits inside the
  GEMM, GEMMs at the 16-bit peak, no activation quantisation): ``WEIGHT_ONLY_PATHS``;
- refused: a ValueError naming the field, its value and what is allowed (on such a device: fp8 or fp4 GEMM inputs
  beside non-fp8 weights, fp4 or int4 inputs beside fp8 weights, fp8 weights under an engine with no weight-only
  path there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workbench.specs.engine import EngineProfile
from workbench.specs.hardware import DeviceSpec, DType
from workbench.specs.serving import ServingDType

AS_IS = "as-is"
WEIGHT_ONLY = "weight-only"


@dataclass(frozen=True, kw_only=True, slots=True)
class WeightOnlyPath:
    """An engine's weight-only FP8 path on a GPU without FP8 tensor cores (one row of ``WEIGHT_ONLY_PATHS``)."""

    kernel: str
    """The kernel family, as the engine names it."""
    dense_from: tuple[int, ...] | None
    """First engine release whose dense (and attention) GEMMs take it; None: none does."""
    moe_from: tuple[int, ...] | None
    """First engine release whose fused MoE layers take it; None: none does (an MoE model is refused)."""
    min_compute_capability: tuple[int, int]
    """Oldest NVIDIA compute capability the kernel is built for."""
    dequant_kernels: int
    """Extra kernels per GEMM that unpack the weights outside it (0: inside the GEMM's main loop)."""
    source: str


WEIGHT_ONLY_PATHS: dict[str, WeightOnlyPath | None] = {
    "vllm": WeightOnlyPath(
        kernel="FP8 Marlin",
        dense_from=(0, 5, 1),
        moe_from=(0, 9),
        min_compute_capability=(8, 0),
        dequant_kernels=0,
        source="vLLM docs, quantization/fp8 (v0.5.2 on): 'FP8 models will run on compute capability > 8.0 "
        "(Ampere) as weight-only W8A16, utilizing FP8 Marlin'; vllm/model_executor/layers/quantization/fp8.py "
        "use_marlin = not cutlass_fp8_supported (utils/marlin_utils_fp8.py is_fp8_marlin_supported: capability "
        ">= 80). Dense: PR #5975 (merged 2024-07-03, first in 0.5.1), a fused 4xFP8 -> 4xFP16/BF16 unpack in "
        "the GEMM. MoE: PR #16850 (fp8.py MoE layers on fused Marlin MoE) and its scale fix PR #18026 "
        "(2025-05-12); ASSUMPTION: from the 0.9 line (release notes not checked). Before them vLLM's Triton "
        "fused MoE refused FP8 MoE models on Ampere (vllm issue #7322)",
    ),  # fmt: skip
    "sglang": WeightOnlyPath(
        kernel="FP8 Marlin",
        dense_from=(0, 5),
        moe_from=None,
        min_compute_capability=(8, 0),
        dequant_kernels=0,
        source="sgl-project/sglang PR #8990 (merged 2025-08, 'enable marlin fp8 blockwise', resolves issue "
        "#7715): python/sglang/srt/layers/quantization/fp8.py Fp8LinearMethod use_marlin = "
        "SGLANG_FORCE_FP8_MARLIN or can_auto_enable_marlin_fp8() (80 <= sm < 89), linear layers only; "
        "ASSUMPTION: from the 0.5 line. MoE: PR #9754 closed unmerged, PR #30681 open (2026-07), issue #12887 "
        "closed inactive: FP8 MoE layers go to the Triton fused MoE, which has no fp8e4nv on sm80",
    ),  # fmt: skip
    "trtllm": None,
    # TensorRT-LLM support matrix (docs/source/reference/support-matrix.md, 0.13-0.18): 'Ampere (SM80, SM86) -
    # FP32, FP16, BF16, INT8, INT4'; FP8 on Ada and Hopper on; no weight-only FP8 kernel for Ampere.
}
"""Engine code (``EngineProfile.engine``) -> its weight-only FP8 path on a GPU without FP8 tensor cores, or None
(FP8 refused there). The ``generic`` engine takes vLLM's row (the path the field has published)."""

GENERIC_ENGINE_PATH = "vllm"


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmPrecision:
    """How the main GEMMs of a plan run (the module docstring's readings)."""

    reading: str
    """``AS_IS`` or ``WEIGHT_ONLY``."""
    compute_dtype: DType
    """The device peak the GEMMs run at."""
    activation_dtype: ServingDType
    """The GEMM input dtype as priced: the plan's, or bf16/fp16 under ``WEIGHT_ONLY`` (fp8 inputs are not
    quantised: Marlin takes 16-bit activations)."""
    dequant_kernels: int = 0
    """Extra kernels per GEMM input unpacking the weights (``WeightOnlyPath.dequant_kernels``)."""
    note: str = ""
    """The reading in words ('' for ``AS_IS``): what ``serve estimate`` lists under ``assumed``."""


def gemm_compute_dtype(device_peaks: dict[DType, float], dtype: ServingDType) -> DType:
    """The device precision a GEMM with ``dtype`` inputs runs at: bf16/fp16 as named; fp8, fp4 and int4 at fp8
    (``DType`` has no 4-bit peak: ``LayerCost`` scales the fp8 peak by ``FP4_OVER_FP8_PEAK`` for fp4 inputs on
    devices with FP4 tensor cores), or at bf16 on a device without an fp8 peak."""
    if dtype in (ServingDType.BF16, ServingDType.FP16):
        return DType(dtype.value)
    return DType.FP8 if DType.FP8 in device_peaks else DType.BF16


def newest_release(versions: str) -> tuple[int, ...] | None:
    """The newest release an ``EngineProfile.versions`` text describes, as integers: the largest dotted number
    in it (``0.5-0.7`` -> (0, 7), ``0.8 to ~0.13`` -> (0, 13)); None for an open range (``>= 0.4``: every later
    release) or a text with no dotted number (a commit)."""
    numbers = _releases(versions)
    if ">" in versions or not numbers:
        return None
    return max(numbers)


def _releases(versions: str) -> list[tuple[int, ...]]:
    """Every dotted release number in an ``EngineProfile.versions`` text, as integers, in order of appearance."""
    return [tuple(int(p) for p in m.split(".")) for m in re.findall(r"\d+(?:\.\d+)+", versions)]


def _engine_code(engine: EngineProfile) -> str:
    """The engine whose paths ``engine`` takes: its own code, vLLM's for the generic engine."""
    return GENERIC_ENGINE_PATH if engine.engine == "generic" else engine.engine


def _label(engine: EngineProfile) -> str:
    """``engine 'id' (code versions)``, as the refusals and notes name an engine profile."""
    return f"engine {engine.id!r}" + (f" ({engine.engine} {engine.versions})" if engine.versions else "")


def _release(engine: EngineProfile, since: tuple[int, ...] | None) -> str | None:
    """None when some release of ``engine``'s profile has a path arriving in ``since``; else why not."""
    if since is None:
        return "none of its releases has one"
    newest = newest_release(engine.versions)
    if newest is not None and newest < since:
        return f"it arrives in {'.'.join(map(str, since))}, after the profile's releases ({engine.versions})"
    return None


def gemm_precision(
    engine: EngineProfile,
    device: DeviceSpec,
    weight_dtype: ServingDType | str,
    activation_dtype: ServingDType | str,
    *,
    moe: bool,
) -> GemmPrecision:
    """How ``engine`` runs GEMMs with ``weight_dtype`` weights and ``activation_dtype`` inputs (``ServingDType``
    values) on ``device`` (the module docstring); ``moe``: the model has MoE layers (their fused kernels have paths of their own).

    Raises ValueError naming the field (``weight_dtype`` or ``activation_dtype``), its value and what is
    allowed, for a refused choice. Sources: ``WEIGHT_ONLY_PATHS``."""
    w, a = ServingDType(weight_dtype), ServingDType(activation_dtype)
    compute = gemm_compute_dtype(device.peak_flop_per_s, a)
    narrow_in = a in (ServingDType.FP8, ServingDType.FP4)
    if DType.FP8 in device.peak_flop_per_s or (w is not ServingDType.FP8 and not narrow_in):
        return GemmPrecision(reading=AS_IS, compute_dtype=compute, activation_dtype=a)
    where = f"device {device.id!r} has no fp8 tensor-core peak"
    if w is not ServingDType.FP8 or a not in (ServingDType.FP8, ServingDType.BF16, ServingDType.FP16):
        raise ValueError(
            f"activation_dtype={a.value!r}: {where}, where narrow GEMM inputs run only beside fp8 weights, as 16-bit "
            f"inputs (weight-only W8A16); choose activation_dtype bf16 or fp16, or fp8 with weight_dtype fp8"
        )
    path = WEIGHT_ONLY_PATHS.get(_engine_code(engine))
    label = _label(engine)
    why = None if path is not None else "it has no weight-only FP8 kernel (TensorRT-LLM support matrix)"
    if path is not None:
        why = _release(engine, path.moe_from if moe else path.dense_from)
        cc = device.compute_capability
        if why is None and (cc is None or cc < path.min_compute_capability):
            need = ".".join(map(str, path.min_compute_capability))
            why = f"its {path.kernel} kernel needs an NVIDIA GPU of compute capability >= {need}"
    if why is not None or path is None:
        layers = "an MoE model's " if moe else ""
        raise ValueError(
            f"weight_dtype='fp8': {where} and {label} runs no weight-only FP8 path for {layers}GEMMs on it "
            f"({why}); choose weight_dtype bf16, fp16 or int4, another engine, or a device with an fp8 peak"
        )
    act = ServingDType.BF16 if a is ServingDType.FP8 else a
    return GemmPrecision(
        reading=WEIGHT_ONLY, compute_dtype=DType(act.value), activation_dtype=act,
        dequant_kernels=path.dequant_kernels,
        note=f"fp8 weights on {device.id} (no fp8 peak) priced as weight-only W8A16 ({path.kernel}, {label}): "
        f"weights read at 1 byte, GEMMs at the {act.value} peak, {act.value} GEMM inputs",
    )  # fmt: skip


def gemm_runs(
    engine: EngineProfile,
    device: DeviceSpec,
    weight_dtype: ServingDType | str,
    activation_dtype: ServingDType | str,
    *,
    moe: bool,
) -> bool:
    """Whether ``gemm_precision`` accepts the choice (as-is or weight-only) rather than refusing it: what
    ``workbench serve plan`` searches and the Serving tab offers."""
    try:
        gemm_precision(engine, device, weight_dtype, activation_dtype, moe=moe)
    except ValueError:
        return False
    return True


# ---- the KV cache -----------------------------------------------------------------------------------------------
KERNEL_PATH = "kernel-path"

HOPPER, BLACKWELL_DC = (9, 0), (10, 0)
"""Compute capabilities bounding vLLM's FlashAttention FP8-KV support (``flash_attn_supports_fp8``: FA version 3
and capability major == 9) and the NVFP4 KV kernels (trtllm-gen, SM100 family: major == 10)."""

FP4_KV_FROM: dict[str, tuple[int, ...]] = {"vllm": (0, 20), "sglang": (0, 5), "trtllm": (1, 1)}
"""First engine release storing an NVFP4 KV cache (on datacenter Blackwell only). vLLM: PR #40177 ('Add nvfp4 kv
cache support', merged 2026-04-17: FlashInfer trtllm-gen prefill and decode, gated on the SM100 family; SM120 is
not wired, issue #49011 open); ASSUMPTION: first in 0.20 (release notes not checked; every shipped vLLM profile
answers the same for any release after 0.13). SGLang: docs advanced_features/quantized_kv_cache ('fp4_e2m1', E2M1
in blocks of 16) and attention_backend (FP4 KV cache on the Triton, Torch-native, FA4 and TRTLLM MHA backends;
sm120 in PR #21601, open); ASSUMPTION: from the 0.5 line. TensorRT-LLM: PR #6244 ('Support NVFP4 KV Cache',
merged 2025-08-28), trtllm-gen kernels for SM10X only (issue #10241); ASSUMPTION: first in 1.1 (the 1.0 branch
was cut before it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KvPrecision:
    """How an engine stores and reads a plan's KV cache on a device (``kv_precision``)."""

    reading: str
    """``AS_IS`` (the engine's usual attention kernels read the cache at its width) or ``KERNEL_PATH`` (an fp8
    cache sends the engine to another attention backend: ``backend``)."""
    kv_dtype: ServingDType
    """The cache dtype, stored at ``BYTES_PER_VALUE`` bytes per element (an up-converting kernel still reads 1
    byte per fp8 element)."""
    backend: str = ""
    """The attention backend under ``KERNEL_PATH`` ('' otherwise)."""
    varlen_decodes: bool = True
    """False: decodes run in the backend's own decode kernel, never inside one FlashAttention-2 varlen call with
    the prefills (``EngineProfile.varlen_attention`` does not apply; ``AttentionCost._varlen_tile_frac``)."""
    note: str = ""
    """The reading in words ('' for ``AS_IS``): what ``serve estimate`` lists under ``assumed``."""


def _kv_refusal(engine: EngineProfile, device: DeviceSpec, kv: ServingDType) -> str | None:
    """Why ``engine`` stores no ``kv`` cache on ``device`` (None: it does). Sources in each branch."""
    code, cc = _engine_code(engine), device.compute_capability
    if kv in (ServingDType.BF16, ServingDType.FP16):
        return None
    if kv is ServingDType.INT4:
        # vLLM CacheDType (vllm/config/cache.py: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla,
        # later nvfp4), SGLang --kv-cache-dtype (auto, fp8_e5m2, fp8_e4m3, fp4_e2m1), TensorRT-LLM
        # kv_cache_config.dtype (auto, fp8, nvfp4; INT8 KV in the TensorRT backend): none stores int4
        return "no engine modelled here stores an int4 KV cache (vLLM CacheDType, SGLang --kv-cache-dtype, " \
               "TensorRT-LLM kv_cache_config.dtype)"  # fmt: skip
    if kv is ServingDType.FP8:
        if cc is None:  # vLLM _is_v1_supported_oracle: 'if current_platform.is_rocm(): supported = True'
            return None if DType.FP8 in device.peak_flop_per_s else "the device has no fp8 peak"
        if code == "trtllm" and cc < (8, 9):
            # TensorRT-LLM support matrix (docs/source/reference/support-matrix.md): FP8 from Ada (SM89) and
            # Hopper on; Ampere (SM80, SM86) 'FP32, FP16, BF16, INT8, INT4' (INT8 KV, not a ServingDType)
            return "TensorRT-LLM stores FP8 KV from Ada (sm89) on; Ampere takes INT8 KV, not modelled here"
        if cc < (8, 0):  # vLLM PR #2279 (fp8_e5m2 KV, tested on A100-40GB); FlashInfer fp8 KV from sm80
            return "its FP8 KV kernels need compute capability >= 8.0"
        return None
    if cc is None or not BLACKWELL_DC <= cc < (11, 0):  # FP4_KV_FROM's sources: SM100 family only
        return "NVFP4 KV kernels run only on datacenter Blackwell (compute capability 10.x)"
    if engine.versions.strip() and not re.search(r"\d+\.\d+", engine.versions):
        # a profile pinned to a commit: every NVFP4 KV path above arrived from 2025-08 on (ASSUMPTION: the
        # commit is older, as the one shipped profile's, trtllm-mlperf-v4 at 2024-02-06, is)
        return f"the profile is pinned to a commit ({engine.versions}), before NVFP4 KV caches (2025-08 on)"
    return _release(engine, FP4_KV_FROM.get(code))


def kv_dtypes(engine: EngineProfile, device: DeviceSpec) -> tuple[ServingDType, ...]:
    """The KV-cache dtypes ``engine`` stores on ``device`` (those ``kv_precision`` does not refuse), in
    ``ServingDType`` order: what ``workbench serve plan`` searches and the Serving tab offers."""
    return tuple(d for d in ServingDType if _kv_refusal(engine, device, d) is None)


def kv_precision(engine: EngineProfile, device: DeviceSpec, kv_dtype: ServingDType | str) -> KvPrecision:
    """How ``engine`` stores and reads a ``kv_dtype`` (``ServingDType`` value) KV cache on ``device``: the one
    rule ``serve estimate`` (``ReplicaCost``), ``serve plan`` (``candidate_plans``) and the Serving tab apply.

    16-bit caches and an accepted fp4 cache read ``AS_IS``. An fp8 cache reads ``KERNEL_PATH`` where the engine
    leaves its usual attention kernel for it (vLLM: V0 on every CUDA device; V1 off Hopper and datacenter
    Blackwell), with ``backend`` and ``varlen_decodes`` set; the bytes stay 1 per element (the kernels up-convert
    fp8 to 16 bits in registers). Raises ValueError naming ``kv_cache_dtype``, its value and the engine's dtypes on
    the device for a refused cache (``_kv_refusal``). The generic engine takes vLLM's rule."""
    kv = ServingDType(kv_dtype)
    label = _label(engine)
    why = _kv_refusal(engine, device, kv)
    if why is not None:
        allowed = ", ".join(d.value for d in kv_dtypes(engine, device))
        raise ValueError(
            f"kv_cache_dtype={kv.value!r}: {label} stores no {kv.value} KV cache on device {device.id!r} ({why}); "
            f"choose kv_cache_dtype {allowed}"
        )
    cc = device.compute_capability
    if kv is not ServingDType.FP8 or _engine_code(engine) != "vllm" or cc is None:
        return KvPrecision(
            reading=AS_IS, kv_dtype=kv
        )  # SGLang: fa3 / trtllm_mha / flashinfer all read fp8 KV
    newest = newest_release(engine.versions)
    v0 = newest is not None and newest < (0, 8)
    if not v0 and (
        HOPPER <= cc < (10, 0) or (BLACKWELL_DC <= cc < (11, 0) and (newest or (0, 99)) >= (0, 11))
    ):
        return KvPrecision(
            reading=AS_IS, kv_dtype=kv
        )  # V1: FA3 fp8 KV on Hopper; FlashInfer default on SM100
    if v0:
        # vllm/attention/selector.py (0.5-0.7) which_attn_to_use: 'Cannot use FlashAttention-2 backend for FP8
        # KV cache.' -> XFORMERS: xformers memory_efficient_attention for prefills, the PagedAttention kernel
        # (csrc/attention/attention_kernels.cu, Fp8KVCacheDataType) for decodes
        backend = "XFormers (V0 selector: FlashAttention-2 takes no FP8 KV)"
    elif newest is not None and newest < (0, 11):
        # vllm/engine/arg_utils.py _is_v1_supported_oracle (0.8-0.10): fp8 KV without flash_attn_supports_fp8()
        # -> _raise_or_fallback('--kv-cache-dtype') -> the V0 engine and its XFormers backend
        backend = "XFormers (V1 falls back to V0: FlashAttention takes FP8 KV only as FA3 on Hopper)"
    else:
        # vllm/platforms/cuda.py _get_backend_priorities (V0 removed, 0.11 on): FLASH_ATTN, FLASHINFER,
        # TRITON_ATTN, FLEX_ATTENTION off SM100; the selector skips FLASH_ATTN (FlashAttentionImpl: 'FlashAttention
        # does not support fp8 kv-cache on this device' off Hopper) -> FLASHINFER
        backend = "FlashInfer (V1 selector: FlashAttention takes FP8 KV only as FA3 on Hopper)"
    numbers = _releases(engine.versions)
    spans = not v0 and (newest is None or newest >= (0, 11)) and (not numbers or min(numbers) < (0, 11))
    between = " (its releases before 0.11 fall back to V0's XFormers)" if spans else ""
    return KvPrecision(
        reading=KERNEL_PATH, kv_dtype=kv, backend=backend, varlen_decodes=False,
        note=f"fp8 KV cache on {device.id} under {label}: attention backend {backend}{between}; KV read at 1 byte "
        f"per element (up-converted in the kernel), decodes priced in their own kernel, prefills on the kernel "
        f"table's fused-attention fractions (ASSUMPTION: no table for that backend)",
    )  # fmt: skip
