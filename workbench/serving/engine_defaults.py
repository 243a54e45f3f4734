"""What the serving engines do when a run leaves a setting blank: batching budgets, sequence caps and engine
profiles per engine (``workbench.validate.serving_specs`` reads the validation rows with them), and the batch sizing
``trtllm-bench`` computes for itself."""

from __future__ import annotations

import math
import re

from workbench.specs.hardware import ClusterSpec, DeviceSpec
from workbench.specs.model import ModelSpec
from workbench.specs.serving import Scheduler, ServingDType, ServingPlan

ENGINE_BATCHING: dict[str, tuple[Scheduler, int, str]] = {
    "vllm-v0": (Scheduler.SARATHI, 512, "vLLM 0.5-0.7 turns chunked prefill on by default for models with a context "
                "over 32k tokens (Llama 3.1: 131k), with a 512-token budget (EngineArgs of those releases)"),
    "vllm": (Scheduler.SARATHI, 8192, "vLLM V1 always chunks prefills; the budget by device: vllm_v1_batch_defaults"),
    "vllm-async": (Scheduler.SARATHI, 8192, "as vllm: vllm_v1_batch_defaults"),
    "sglang": (Scheduler.SARATHI, 8192, "SGLang --chunked-prefill-size default 8192"),
    "trtllm": (Scheduler.SARATHI, 8192, "TRT-LLM PyTorch backend: in-flight batching of whole contexts with the "
               "generation requests (enable_chunked_prefill off), max_num_tokens 8192"),
    "generic": (Scheduler.SARATHI, 8192, "an engine without a profile: chunked prefill at 8192 tokens a step, the "
                "default budget of vLLM V1 and SGLang (--chunked-prefill-size)"),
}  # fmt: skip
"""Engine -> (scheduler, max_num_batched_tokens, why) for rows that leave the budget blank."""

VLLM_V0_LONG_CONTEXT_TOKENS = 32768
"""vLLM 0.5-0.7 (V0) turns chunked prefill on by default only when max_model_len exceeds this ("use_long_context =
max_model_len > 32768" in EngineArgs.create_engine_config; the server logs "Chunked prefill is enabled by default
for models with max_model_len > 32K")."""

VLLM_V0_MIN_BATCHED_TOKENS = 2048
"""vLLM V0 SchedulerConfig without chunked prefill: max_num_batched_tokens = max(max_model_len, 2048) when unset."""

_VLLM_EP = (1, "vLLM without --enable-expert-parallel runs the MoE layers tensor-parallel")

ENGINE_DEFAULT_EP: dict[str, tuple[int, str]] = {
    "vllm-v0": _VLLM_EP,
    "vllm": _VLLM_EP,
    "vllm-async": _VLLM_EP,
    "sglang": (1, "SGLang --ep-size default 1 (server_args.py): the MoE layers tensor-parallel"),
    "trtllm": (1, "TensorRT-LLM's Mapping with moe_expert_parallel_size and moe_tensor_parallel_size unset: "
               "moe_ep_size 1, moe_tp_size = tp (tensorrt_llm/mapping.py); trtllm-bench's --ep sets "
               "moe_expert_parallel_size and defaults to unset"),
}  # fmt: skip
"""Engine key -> (the expert-parallel degree the engine runs when a launch gives none, why): the reading a row with
a blank ``ep`` is scored at, its other readings priced beside it (``workbench.validate.serving_specs.ep_readings``)."""

ENGINE_PROFILES = {
    "vllm-v0": "vllm-v0",
    "vllm": "vllm-v1",
    "vllm-async": "vllm-v1-async",
    "sglang": "sglang",
    "trtllm": "trtllm",
    "generic": "generic",
}
"""Engine key (``workbench.validate.serving_specs._engine_key``) -> serving engine profile id (``profiles/engines/``)."""

FRONTEND_IN_PROCESS_REPOS = {
    "microsoft/apex_plus": "microsoft/apex_plus@8769096 vllm/8TP.sh, 2DP4TP.sh, 4DP2TP.sh, scale_2TP_llama.sh, "
    "scale_2TP_mistral.sh, scale_4TP.sh and their _fp8 variants start vllm/vllm-openai:v0.6.0 with "
    "--disable-frontend-multiprocessing",
}
"""Repositories whose vLLM V0 serving runs started the OpenAI server in the engine's process -> the launch line that
says so; a vLLM V0 row that names one in ``locator`` or ``source`` is priced with ``vllm-v0-inproc``
(``EngineProfile.frontend_host_per_request_s``; ``frontend_in_process``)."""


def frontend_in_process(row: dict[str, str]) -> str | None:
    """The launch line (``FRONTEND_IN_PROCESS_REPOS``) of a row whose ``locator`` or ``source`` names a repository
    listed there, whatever its source key; None otherwise."""
    return next((line for repo, line in FRONTEND_IN_PROCESS_REPOS.items() if _names(row, repo)), None)


CUSTOM_ALL_REDUCE_OFF: dict[tuple[str, int], str] = {
    (
        "microsoft/apex_plus",
        2,
    ): "microsoft/apex_plus@8769096 vllm/scale_2TP_llama.sh, scale_2TP_mistral.sh and 4DP2TP.sh "
    "start every tp-2 server with --disable-custom-all-reduce; 8TP.sh, scale_4TP.sh and 2DP4TP.sh do not",
}
"""(repository, tp) whose vLLM servers ran with ``--disable-custom-all-reduce`` -> the launch lines that say so; a row
that names the repository in ``locator`` or ``source`` is priced with ``vllm-v0-inproc-nccl``
(``EngineProfile.tp_all_reduce`` = ``nccl``; ``custom_all_reduce_off``)."""


def custom_all_reduce_off(row: dict[str, str], tp: int) -> str | None:
    """The launch lines (``CUSTOM_ALL_REDUCE_OFF``) of a row at ``tp`` whose ``locator`` or ``source`` names a
    repository listed there with that tp, whatever its source key; None otherwise."""
    return next(
        (line for (repo, at), line in CUSTOM_ALL_REDUCE_OFF.items() if at == tp and _names(row, repo)), None
    )


def _cited(row: dict[str, str]) -> str:
    """What a validation row cites: its ``locator`` and ``source`` cells."""
    return f"{row.get('locator', '')} {row.get('source', '')}"


def _names(row: dict[str, str], repo: str) -> bool:
    """Whether the row's ``locator`` or ``source`` cites ``repo`` at a commit (``owner/name@``)."""
    return f"{repo}@" in _cited(row)


KNOWN_ENGINES = ("vllm", "sglang", "trtllm")
"""Engine codes of the serving validation schema the workbench has profiles for (``shared/validation/README.md``,
column ``engine``: "``vllm``, ``sglang``, ``trtllm``; another engine gets a short lowercase code explained in
``notes``")."""

ENGINE_CODE = re.compile(r"[a-z][a-z0-9._+-]{0,31}")
"""A short lowercase engine code (the README's form for an engine outside ``KNOWN_ENGINES``)."""

ENGINE_ALIASES = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm", "trtllm-serve": "trtllm",
                  "trtllm-bench": "trtllm", "sglang-router": "sglang", "vllm-openai": "vllm"}  # fmt: skip
"""Other spellings of the known engines' names and of their own front ends (``trtllm-serve``, ``trtllm-bench``,
``sglang_router``, the ``vllm/vllm-openai`` image) -> the engine's code."""

_ENGINE_NAMES = {
    "vllm": re.compile(r"\bvllm\b", re.IGNORECASE),
    "sglang": re.compile(r"\bsglang\b", re.IGNORECASE),
    "trtllm": re.compile(r"\b(tensorrt[-_ ]llm|trt[-_]llm|trtllm)\b", re.IGNORECASE),
}
"""How a row's ``notes`` name each known engine."""

GENERIC_ENGINE = "generic"
"""The engine a row of an engine without a profile is priced as (``profiles/engines/generic.toml``)."""


def priced_engine(row: dict[str, str], assumed: list[str]) -> str:
    """The engine code a serving validation row is priced as: its ``engine`` when it is one of ``KNOWN_ENGINES``;
    the engine of an ``ENGINE_ALIASES`` spelling; for another engine's code (the README lets a source's engine
    outside the three take "a short lowercase code explained in ``notes``") the one known engine the row's
    ``notes`` name, as a serving layer over that engine (NVIDIA Dynamo or NIM over TensorRT-LLM, vLLM or SGLang)
    would say; else ``GENERIC_ENGINE`` (no engine-specific batching, graphs or host time: the generic profile). A
    blank engine is priced as generic too. Every reading but the first is noted in ``assumed``."""
    code = row.get("engine", "").strip().lower()
    if code in KNOWN_ENGINES:
        return code
    if code in ENGINE_ALIASES:
        assumed.append(f"engine {code!r} read as {ENGINE_ALIASES[code]!r} (another name of the same engine)")
        return ENGINE_ALIASES[code]
    named = [key for key, pattern in _ENGINE_NAMES.items() if pattern.search(row.get("notes", ""))]
    shown = repr(code) if code else "blank"
    if len(named) == 1:
        assumed.append(f"engine {shown} has no profile here; priced as {named[0]!r}, the one engine its notes name "
                       "(a serving layer over that engine)")  # fmt: skip
        return named[0]
    why = "its notes name none of vllm, sglang, trtllm" if not named else "its notes name several engines"
    assumed.append(f"engine {shown} has no profile here and {why}: priced with the generic engine profile "
                   "(continuous batching, CUDA graphs, 1 ms host time a step; profiles/engines/generic.toml)")  # fmt: skip
    return GENERIC_ENGINE


HARNESS_ENGINES: dict[str, tuple[str, int, str]] = {
    "inference_results_v4.0": (
        "trtllm-mlperf-v4",
        16384,
        "NVIDIA's MLPerf Inference v4.0 harness (mlcommons/inference_results_v4.0@3c4a1cf closed/NVIDIA: "
        "harness_llm on TensorRT-LLM's C++ runtime; partners' TensorRT-LLM submissions run copies of it, e.g. "
        "closed/HPE); max_num_tokens 16384: code/llama2-70b/tensorrt/builder.py builds the engine with "
        "--max_num_tokens=16384 (its default; configs/llama2-70b/Offline and Server set none, their parent config "
        "unread)",
    ),
}
"""MLPerf results repositories whose TensorRT-LLM rows ran in the submitter's harness -> (engine profile id, tokens
per iteration where the row leaves ``max_num_batched_tokens`` blank, the source that says so); a row names its
repository in ``locator`` or ``source`` (``harness_engine``). Later rounds are not listed: their harness settings were
not read, so their rows keep the plain ``trtllm`` profile."""


def harness_engine(row: dict[str, str]) -> tuple[str, int, str] | None:
    """The harness entry (``HARNESS_ENGINES``) of a TensorRT-LLM validation row whose ``locator`` or ``source`` names
    an MLPerf results repository listed there (``mlcommons/inference_results_v4.0``), whatever its source key; None
    otherwise (other engines, other rounds, other sources)."""
    if row.get("engine", "").strip() != "trtllm":
        return None
    for repo in re.findall(r"mlcommons/(inference_results_v[0-9.]+[0-9])", _cited(row)):
        if repo in HARNESS_ENGINES:
            return HARNESS_ENGINES[repo]
    return None


TRTLLM_BENCH_KV_FRAC = 0.9
"""``trtllm-bench --kv_cache_free_gpu_mem_fraction`` default (the TRT-LLM perf-overview page's fallback)."""

TRTLLM_BENCH_WEIGHT_BYTES = {ServingDType.FP8: 1.0, ServingDType.FP4: 0.5}
"""Bytes per parameter trtllm-bench assumes per checkpoint quantisation (tensorrt_llm/bench/build/tuning.py
``BYTES_PER_ELEM``: FP8 1.0, NVFP4 0.5, anything else 2.0)."""

DEFAULT_MAX_NUM_SEQS = {"vllm": 256, "sglang": 256, "trtllm": 2048, "generic": 256}
"""Sequences in flight when ``max_batch_size`` is blank: vLLM V0 ``--max-num-seqs`` 256 (V1: by device,
``vllm_v1_batch_defaults``); TRT-LLM ``max_batch_size`` default 2048 (trtllm-bench sizes it itself); SGLang's own
cap is memory-driven (256 taken); an engine without a profile: 256, vLLM V0's and SGLang's."""

VLLM_V1_LARGE_DEVICE_BYTES = 70 * 2**30
"""vLLM V1 gives devices with at least this much memory (A100s excepted) the larger batch defaults."""


def vllm_v1_batch_defaults(device: DeviceSpec) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) a vLLM V1 server (``vllm serve``, usage context OPENAI_API_SERVER)
    takes when neither is set: (1024, 8192) on a device of at least 70 GiB that is not an A100, else (256, 2048)
    (vllm/engine/arg_utils.py ``EngineArgs.get_batch_defaults``; the offline ``LLM`` class takes 16384 and 8192
    tokens instead)."""
    large = device.hbm_bytes >= VLLM_V1_LARGE_DEVICE_BYTES and "a100" not in device.id.lower()
    return (1024, 8192) if large else (256, 2048)


def trtllm_bench_settings(
    model: ModelSpec,
    cluster: ClusterSpec,
    *,
    tp: int,
    pp: int,
    input_tokens: int,
    output_tokens: int,
    weight_dtype: ServingDType,
    kv_cache_dtype: ServingDType,
    kv_free_frac: float = TRTLLM_BENCH_KV_FRAC,
) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) that ``trtllm-bench throughput`` picks when neither is given, for a data set
    of ``input_tokens``/``output_tokens`` requests (TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py``
    ``calc_engine_setting`` and ``finetune_setting``, and ``bench/benchmark/utils/general.py`` ``get_settings``):
    the requests that fit the KV memory left beside the weights, r = f (G tp pp - P w) / (2 L max(tp, kv) d k (I+O))
    in GiB; batch min(r, 4096) / pp rounded up (to 32 with a floor of 64 under 256, to 128 under 1024, else to
    256); tokens min(batch (1 + I/O), 32768) rounded up (to 256 with a floor of 2048 under 4096, to 512 under 8192,
    else to 1024), then at least I + batch without chunked prefill. Raises ValueError when no request fits."""
    gib = 2.0**30
    kv_bytes = 1.0 if kv_cache_dtype in (ServingDType.FP8, ServingDType.FP4) else 2.0
    per_token = 2 * model.num_layers * max(tp, model.num_key_value_heads) * model.head_dim * kv_bytes / gib
    weights = model.total_parameters() * TRTLLM_BENCH_WEIGHT_BYTES.get(weight_dtype, 2.0) / gib
    free = cluster.device.hbm_bytes / gib * tp * pp - weights
    requests = free * kv_free_frac / (per_token * (input_tokens + output_tokens))
    if requests < 1:
        raise ValueError("trtllm-bench finds no room for one request's KV cache")
    raw_bs = min(requests, 4096) / pp
    raw_tokens = min(raw_bs * (1 + input_tokens / output_tokens), 32768)
    if raw_bs < 256:
        batch = max(64, 32 * math.ceil(raw_bs / 32))
    else:
        batch = (128 if raw_bs < 1024 else 256) * math.ceil(raw_bs / (128 if raw_bs < 1024 else 256))
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    else:
        step = 512 if raw_tokens < 8192 else 1024
        tokens = step * math.ceil(raw_tokens / step)
    return batch, max(tokens, input_tokens + batch)


def engine_memory_share(plan: ServingPlan) -> tuple[float, int]:
    """(share, GPUs of one engine): ``plan``'s engine profile's own default memory flag
    (``EngineProfile.default_memory_share``) at the GPUs of one engine, the decode pool's for a disaggregated
    plan; what the engine runs with when its launch line sets none (SGLang's ``--mem-fraction-static`` falls with
    ``--tp-size``; vLLM's and TensorRT-LLM's are 0.9). ValueError for an unknown engine profile."""
    from workbench.presets.engines import load_engine

    role = plan if plan.disaggregation is None else plan.role_plan("decode")
    gpus = role.devices_per_engine
    return load_engine(plan.engine).default_memory_share(gpus), gpus


def with_engine_memory_share(plan: ServingPlan) -> ServingPlan:
    """``plan`` with its engine's own default memory flag (:func:`engine_memory_share`)."""
    from dataclasses import replace

    return replace(plan, gpu_memory_utilization_frac=engine_memory_share(plan)[0])
