"""A serving validation row as model, cluster and plan specs (``complete_model`` for
:func:`workbench.validate.rows.row_model`, ``row_cluster``, ``row_plan``), for :mod:`workbench.validate.serving`.

The model is the ``model_preset`` when that preset exists and matches the architecture columns, else it is built
from those columns; the cluster is the row's (or the device's node); the layout, dtypes and engine caps come from
their columns, and blanks take the engine's documented default (``workbench.serving.engine_defaults``, listed in
the case's ``assumed``): the engine profile by engine and version (vLLM 0.5-0.7 -> ``vllm-v0``, 0.8 to ~0.13 ->
``vllm-v1``, later -> ``vllm-v1-async``), vLLM V1's batch defaults by device, trtllm-bench's own batch sizing and
its FP8 KV cache for FP8/NVFP4 checkpoints, one scheduler per vLLM data-parallel rank. A row the specs cannot
express raises ``Unexpressible`` with the reason.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_cluster, load_device, preset_names
from workbench.presets.engines import load_engine
from workbench.presets.frameworks import source_year
from workbench.serving.cost import ReplicaCost
from workbench.serving.engine_defaults import (
    DEFAULT_MAX_NUM_SEQS,
    ENGINE_BATCHING,
    ENGINE_DEFAULT_EP,
    ENGINE_PROFILES,
    TRTLLM_BENCH_KV_FRAC,
    VLLM_V0_LONG_CONTEXT_TOKENS,
    VLLM_V0_MIN_BATCHED_TOKENS,
    custom_all_reduce_off,
    engine_memory_share,
    frontend_in_process,
    harness_engine,
    trtllm_bench_settings,
    vllm_v1_batch_defaults,
)
from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.serving import Disaggregation, Scheduler, ServingDType, ServingPlan
from workbench.specs.speculative import SpecMethod, SpeculativeDecoding
from workbench.validate.rows import DEFAULT_CLUSTER, Unexpressible, cell_count, cell_number

MLA_COLUMNS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
"""MLA's ranks and head sizes: required on an ``mla`` row (DeepSeek-V2/V3 ``config.json`` names)."""


def complete_model(row: dict[str, str], arch: dict[str, Any], assumed: list[str]) -> dict[str, Any]:
    """The serving schema's rule for a row's model (:func:`workbench.validate.rows.row_model`) on the fields
    ``arch`` read: every other field from its own column (the head size, the vocabulary, tied embeddings, MLA's
    ranks, the MoE's top-k and expert size: required where the architecture has them; blank key/value heads: the
    heads, noted); Qwen3 models get their q/k norms."""
    heads, experts = arch["num_attention_heads"], arch["num_experts"]
    mla = arch["attention"] == "mla"
    dims: dict[str, int] = {k: cell_count(row, k) for k in MLA_COLUMNS} if mla else {}
    moe_keys = ("experts_per_token", "moe_ffn_hidden_size")
    moe: dict[str, int] = {k: cell_count(row, k) for k in moe_keys} if experts else {}
    return {
        **arch,
        "num_key_value_heads": heads if mla else cell_count(row, "num_key_value_heads", heads, assumed),
        "head_dim": dims["v_head_dim"] if mla else cell_count(row, "head_dim"),
        "vocab_size": cell_count(row, "vocab_size"),
        "tied_embeddings": row["tie_word_embeddings"].strip() == "true",
        "qk_norm": "qwen3" in row["model_name"].lower(),
        "q_lora_rank": int(cell_number(row, "q_lora_rank") or 0) if mla else 0,
        **{k: dims.get(k, 0) for k in MLA_COLUMNS},
        **{k: moe.get(k, 0) for k in moe_keys},
        "num_shared_experts": int(cell_number(row, "num_shared_experts") or 0) if experts else 0,
        "num_dense_layers": int(cell_number(row, "num_dense_layers") or 0) if experts else 0,
    }


def row_cluster(row: dict[str, str], assumed: list[str]) -> ClusterSpec:
    """The row's cluster preset (or its device's default node) with the row's device, sized to hold
    ``num_devices_total`` devices in whole nodes."""
    device_id = row["device"].strip()
    if device_id not in preset_names("device"):
        raise Unexpressible(f"device {device_id!r} has no hardware preset (profiles/hardware/)")
    name = row["cluster"].strip() or DEFAULT_CLUSTER.get(device_id)
    if name is not None and name.startswith("other-") and name not in preset_names("cluster"):
        # the schema leaves other-* nodes to the row's notes: price them on the device's own node
        name = DEFAULT_CLUSTER.get(device_id)
        if name is not None:
            assumed.append(f"cluster={name} (the device's node, for {row['cluster'].strip()})")
    elif not row["cluster"].strip():
        assumed.append(f"cluster={name} (the device's node)")
    if name is None or name not in preset_names("cluster"):
        raise Unexpressible(f"no cluster preset for device {device_id!r} (cluster column {row['cluster']!r})")
    cluster = load_cluster(name)
    total = row_devices(row, assumed)
    nodes = math.ceil(total / cluster.devices_per_node)
    return replace(cluster.with_nodes(nodes), device=load_device(device_id))


def row_role(row: dict[str, str]) -> str:
    """Which engines the row's layout and measurements describe: ``both`` (aggregated, or one instance measured
    a phase at a time: ``disaggregated`` not true), ``prefill`` or ``decode`` (that phase measured on its role of a
    P/D deployment, whose other role may be unstated), or ``pd`` (a whole P/D deployment)."""
    if row["disaggregated"].strip() != "true":
        return "both"
    phase = row["phase"].strip()
    return phase if phase in ("prefill", "decode") else "pd"


def _role_layout(row: dict[str, str], role: str, assumed: list[str]) -> tuple[int, int, int | None, int]:
    """(workers, tp, ep, attention_dp) of one role's columns (``prefill_*`` or ``decode_*``); a blank attention_dp
    is 1 and a blank ep None. Raises ``Unexpressible`` naming a blank worker count or tp."""
    return (
        cell_count(row, f"{role}_workers"),
        cell_count(row, f"{role}_tp"),
        int(cell_number(row, f"{role}_ep") or 0) or None,
        cell_count(row, f"{role}_attention_dp", 1, assumed),
    )


def row_devices(row: dict[str, str], assumed: list[str]) -> int:
    """``num_devices_total``, or where it is blank: on an aggregated row whose ``replicas`` and ``tp`` are given,
    replicas x tp x pp x attention_dp (the README's sum, blank pp and attention_dp 1); on a row measuring one role
    of a P/D deployment, that role's devices (workers x tp x attention_dp); each noted in ``assumed``."""
    role = row_role(row)
    given = cell_number(row, "num_devices_total") is not None
    if not given and role == "both" and all(cell_number(row, k) is not None for k in ("replicas", "tp")):
        degrees = [cell_count(row, k, 1) for k in ("replicas", "tp", "pp", "attention_dp")]
        total = math.prod(degrees)
        assumed.append(f"devices={total} = replicas x tp x pp x attention_dp (num_devices_total blank)")
        return total
    if given or role in ("both", "pd"):
        return cell_count(row, "num_devices_total")
    workers, tp, _, adp = _role_layout(row, role, [])
    assumed.append(f"devices={workers * tp * adp}: the {role} role's (num_devices_total blank)")
    return workers * tp * adp


VLLM_ASYNC_FROM = (0, 14)
"""First vLLM release taken to schedule asynchronously by default (approximate: the release after vllm-project/vllm
PR #27614; ``profiles/engines/vllm-v1-async.toml`` gives the evidence)."""


def _version(text: str) -> tuple[int, ...] | None:
    """The first dotted release number in an ``engine_version`` as sources write it: ``0.19.0`` -> (0, 19, 0),
    and likewise ``~0.6.0``, ``v0.6.3.post1``, ``vLLM 0.6.0``, ``vllm/vllm-openai:v0.6.0`` or ``0.10.1rc2``; None
    when the text holds none (``main``, ``nightly``)."""
    found = re.search(r"(?<![\d.])(\d{1,6}(?:\.\d{1,6}){1,3})", text)
    return tuple(int(p) for p in found.group(1).split(".")) if found else None


VLLM_V1_DEFAULT_MONTH = (2025, 3)
"""The month vLLM 0.8.0 made the V1 engine the default (vllm-project/vllm PR #13726; the release was posted on
2025-03-18/19, verl-project/verl PR #650): a run published before it ran V0."""

_ISO_MONTH = re.compile(r"(?<!\d)(20\d\d)-(0[1-9]|1[0-2])(?!\d)")
_ARXIV_MONTH = re.compile(r"\barXiv:?\s?(\d\d)(0[1-9]|1[0-2])\.\d{4,5}")


def source_month(source: str) -> tuple[int, int] | None:
    """(year, month) a citation dates itself to, outside its ``[...]`` locator (a copy of any later date): an ISO
    date (``LMSYS blog 2025-07-17``), else an arXiv id (``arXiv 2411.17651``: 2024-11), else a bare year as its
    last month (``2024``: (2024, 12), so only a year before a cut-off decides anything); None if none."""
    outside = re.sub(r"\[[^\]]*\]", " ", source)
    iso = _ISO_MONTH.search(outside)
    if iso:
        return int(iso.group(1)), int(iso.group(2))
    arxiv = _ARXIV_MONTH.search(outside)
    if arxiv:
        return 2000 + int(arxiv.group(1)), int(arxiv.group(2))
    year = source_year(outside)
    return (year, 12) if year is not None else None


def _engine_key(row: dict[str, str], assumed: list[str] | None = None) -> str:
    """The engine's key in ``ENGINE_PROFILES``: vLLM 0.5-0.7 -> ``vllm-v0`` (V1 became the default in 0.8.0),
    0.8 to the release before ``VLLM_ASYNC_FROM`` -> ``vllm``, later -> ``vllm-async``; a vLLM row without a
    version whose source dates itself before ``VLLM_V1_DEFAULT_MONTH`` -> ``vllm-v0`` (noted in ``assumed``);
    other engines by name."""
    engine = row["engine"].strip()
    version = _version(row["engine_version"])
    if engine == "vllm" and version is None:
        month = source_month(row.get("source", ""))
        if month is not None and month < VLLM_V1_DEFAULT_MONTH:
            if assumed is not None:
                assumed.append(f"engine_version blank: the source dates itself {month[0]}-{month[1]:02d}, before "
                               "vLLM 0.8.0 made V1 the default (2025-03), so vLLM V0 (vllm-v0)")  # fmt: skip
            return "vllm-v0"
    if engine != "vllm" or version is None:
        return engine
    if version < (0, 8):
        return "vllm-v0"
    return "vllm-async" if version >= VLLM_ASYNC_FROM else "vllm"


def _trtllm_kv_dtype(row: dict[str, str], assumed: list[str]) -> str | None:
    """FP8 for a TensorRT-LLM row with fp8/fp4 GEMMs and no KV dtype: trtllm-bench sets an FP8 KV cache for FP8
    and NVFP4 checkpoints that name no KV quantisation (TensorRT-LLM docs/source/performance/perf-benchmarking.md,
    'Quantization in the PyTorch Flow' mapping table). None otherwise."""
    if row["engine"].strip() != "trtllm" or row["kv_cache_dtype"].strip():
        return None
    if row["activation_dtype"].strip() not in ("fp8", "fp4"):
        return None
    assumed.append(
        "kv_cache_dtype=fp8 (trtllm-bench maps FP8/NVFP4 checkpoints without KV quantisation to FP8 KV)"
    )
    return "fp8"


def _row_layout(row: dict[str, str], assumed: list[str]) -> tuple[int, int, int, int]:
    """(tp, replicas, pp, attention_dp) of a row: blank pp and attention_dp are 1; a blank ``replicas`` or a
    blank ``tp`` (not both) is what the other degrees leave of ``num_devices_total`` (replicas x tp x pp x
    attention_dp = devices), noted in ``assumed``. Raises ``Unexpressible`` when both are blank or the given
    degrees do not divide the devices."""
    pp, adp = cell_count(row, "pp", 1, assumed), cell_count(row, "attention_dp", 1)
    blank = [k for k in ("tp", "replicas") if cell_number(row, k) is None]
    if len(blank) != 1:
        return cell_count(row, "tp"), cell_count(row, "replicas"), pp, adp
    (key,) = blank
    other = "replicas" if key == "tp" else "tp"
    total, known = cell_count(row, "num_devices_total"), cell_count(row, other) * pp * adp
    if total % known:
        raise Unexpressible(f"{key} is blank and num_devices_total={total} is not a multiple of {other} x pp x "
                            f"attention_dp = {known}")  # fmt: skip
    value = total // known
    assumed.append(f"{key}={value} (the devices {other} x pp x attention_dp leave)")
    tp = value if key == "tp" else cell_count(row, "tp")
    return tp, total // (tp * pp * adp), pp, adp


def row_plan(row: dict[str, str], model: ModelSpec, cluster: ClusterSpec, assumed: list[str]) -> ServingPlan:
    """An aggregated ServingPlan from the layout, dtype and engine columns (blanks: ``ENGINE_BATCHING``,
    ``DEFAULT_MAX_NUM_SEQS``, bf16 KV for a blank ``kv_cache_dtype``, a blank replica count or tp from the
    device count, ``_row_layout``). The memory flag is the engine's own (``_with_memory_share``): TRT-LLM's
    ``kv_cache_free_mem_frac`` as it is (blank: 0.9, the page's fallback), else the row's share, the quoted flag or
    the engine's default."""
    engine = _engine_key(row, assumed)
    if engine not in ENGINE_BATCHING:
        raise Unexpressible(f"engine {row['engine']!r} has no batching defaults")
    role = row_role(row)
    replicas, tp, pp, ep, adp, disaggregation = _plan_layout(row, role, model, assumed)
    scheduler, budget, why = _batching(row, engine)
    harness = harness_engine(row) if engine == "trtllm" else None
    if harness is not None:
        budget, why = harness[1], f"in-flight batching of whole contexts; {harness[2]}"
    whole = scheduler is Scheduler.VLLM or load_engine(ENGINE_PROFILES[engine]).chunked_prefill is False
    prompt = cell_number(row, "input_tokens_mean")
    if whole and prompt is not None and prompt > budget:  # whole prompts must fit a step
        budget = int(-(-prompt // 1))
        why += f"; raised to the {budget}-token prompt (whole prompts must fit one iteration)"
    kv = _trtllm_kv_dtype(row, assumed) or row["kv_cache_dtype"].strip() or "bf16"
    if not row["kv_cache_dtype"].strip() and kv == "bf16":
        assumed.append("kv_cache_dtype=bf16 (engine default 'auto' = the model's 16-bit dtype)")
    default_seqs = DEFAULT_MAX_NUM_SEQS[row["engine"].strip()]
    if engine in ("vllm", "vllm-async"):
        default_seqs, budget = vllm_v1_batch_defaults(cluster.device)
    seqs = cell_count(row, "max_batch_size", default_seqs, None)
    budget = cell_count(row, "max_num_batched_tokens", budget)
    bench = _trtllm_bench(row, model, cluster, tp=tp, pp=pp, kv=kv, assumed=assumed)
    if bench is not None:
        seqs, budget = bench
    else:
        if not row["max_num_batched_tokens"].strip():
            assumed.append(f"max_num_batched_tokens={budget}, scheduler={scheduler.value}: {why}")
        if not row["max_batch_size"].strip():
            assumed.append(f"max_batch_size={seqs}")
    if row["engine"].strip() == "vllm" and adp > 1 and disaggregation is None:  # one scheduler per DP rank
        seqs, budget = seqs * adp, budget * adp
        assumed.append(
            f"max_num_seqs and max_num_batched_tokens x attention_dp={adp}: each vLLM data-parallel rank runs its "
            "own scheduler with the engine's caps (vLLM docs 'Data Parallel Deployment')"
        )
    plan = ServingPlan(
        replicas=replicas, tp=tp, pp=pp, ep=ep, attention_dp=adp, disaggregation=disaggregation, speculative=row_speculative(row),
        num_redundant_experts=_redundant_experts(row, assumed),
        weight_dtype=ServingDType(row["weight_dtype"].strip() or "bf16"),
        activation_dtype=ServingDType(row["activation_dtype"].strip() or "bf16"),
        kv_cache_dtype=ServingDType(kv),
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        scheduler=scheduler,
        gpu_memory_utilization_frac=1.0,
        engine=_engine_profile(row, engine, tp, assumed),
    )  # fmt: skip
    return _with_memory_share(row, plan, model, cluster, assumed)


def quoted_flag(row: dict[str, str], flag: str) -> int | None:
    """The integer value of a launch flag (``--name N`` or ``--name=N``) where the row's ``notes`` quote the
    launch line, else None (the reference file has no column for launch flags)."""
    found = re.search(rf"{re.escape(flag)}[ =](\d+)(?![.\d])", row["notes"])
    return int(found.group(1)) if found else None


def quoted_fraction(row: dict[str, str], flag: str) -> float | None:
    """The value in (0, 1] of a launch flag (``--name 0.8`` or ``--name=0.8``) where the row's ``notes`` quote it,
    else None (a value outside (0, 1] is not read)."""
    found = re.search(rf"{re.escape(flag)}[ =]((?:0|1)?\.\d+|1)(?![.\d])", row["notes"])
    value = float(found.group(1)) if found else None
    return value if value is not None and 0.0 < value <= 1.0 else None


def _default_memory_share(row: dict[str, str], plan: ServingPlan, assumed: list[str]) -> float:
    """The memory flag of a row that leaves ``gpu_memory_utilization_frac`` blank: SGLang's
    ``--mem-fraction-static`` or vLLM's ``--gpu-memory-utilization`` where the notes quote it, else the engine
    profile's default for the engine's GPUs (``EngineProfile.default_memory_share``: SGLang's falls with its
    ``--tp-size``, vLLM's is 0.9)."""
    for flag in ("--mem-fraction-static", "--gpu-memory-utilization"):
        quoted = quoted_fraction(row, flag)
        if quoted is not None:
            assumed.append(f"gpu_memory_utilization_frac={quoted:g}: the launch flag {flag} the notes quote")
            return quoted
    share, gpus = engine_memory_share(plan)
    assumed.append(f"gpu_memory_utilization_frac={share:g}: engine profile {plan.engine}'s default at {gpus} GPU(s) "
                   "per engine (memory_share_by_gpus)")  # fmt: skip
    return share


def _redundant_experts(row: dict[str, str], assumed: list[str]) -> int:
    """Redundant expert copies of a row (EPLB): the ``num_redundant_experts`` column, or where it is blank the
    SGLang launch flag ``--ep-num-redundant-experts N`` as the row's ``notes`` quote it (SGLang ServerArgs: N
    extra physical expert slots spread over the expert-parallel ranks, default 0), noted in ``assumed``; else 0."""
    value = cell_number(row, "num_redundant_experts")
    if value is not None:
        return int(value)
    flag = quoted_flag(row, "--ep-num-redundant-experts")
    if flag is None:
        return 0
    assumed.append(
        f"num_redundant_experts={flag}: the launch flag --ep-num-redundant-experts the notes quote"
    )
    return flag


def _batching(row: dict[str, str], engine: str) -> tuple[Scheduler, int, str]:
    """``ENGINE_BATCHING`` of the row's engine, except a vLLM V0 server whose ``--max-model-len`` (the launch flag
    as the row's ``notes`` quote it) is at most ``VLLM_V0_LONG_CONTEXT_TOKENS``: V0 turns chunked prefill on by
    default only above that, so it prefills whole prompts with max(max_model_len, 2048) tokens per iteration."""
    batching = ENGINE_BATCHING[engine]
    max_model_len = quoted_flag(row, "--max-model-len")
    if engine != "vllm-v0" or max_model_len is None or max_model_len > VLLM_V0_LONG_CONTEXT_TOKENS:
        return batching
    return (Scheduler.VLLM, max(max_model_len, VLLM_V0_MIN_BATCHED_TOKENS),
            f"vLLM 0.5-0.7 enables chunked prefill by default only for max_model_len > {VLLM_V0_LONG_CONTEXT_TOKENS} "
            f"(EngineArgs.create_engine_config), and the server ran with --max-model-len {max_model_len}: whole "
            f"prompts, max(max_model_len, {VLLM_V0_MIN_BATCHED_TOKENS}) tokens per iteration (SchedulerConfig)")  # fmt: skip


def _engine_profile(row: dict[str, str], engine: str, tp: int, assumed: list[str]) -> str:
    """The engine profile id of a row: ``ENGINE_PROFILES``, except a TensorRT-LLM row that ran in a harness of its
    own (``harness_engine``: a row of MLPerf v4.0's results -> ``trtllm-mlperf-v4``) and a vLLM V0 row whose server
    ran the OpenAI server in the engine's process (``frontend_in_process``, by the repository the row names):
    ``vllm-v0-inproc``, or ``vllm-v0-inproc-nccl`` where those servers also ran with ``--disable-custom-all-reduce``
    at this tp (``custom_all_reduce_off``); each noted in ``assumed``."""
    harness = harness_engine(row)
    if engine == "trtllm" and harness is not None:
        assumed.append(f"engine profile {harness[0]}: {harness[2]}")
        return harness[0]
    launch = frontend_in_process(row)
    if engine != "vllm-v0" or launch is None:
        return ENGINE_PROFILES[engine]
    assumed.append(f"engine profile vllm-v0-inproc: the API server shares the engine's process ({launch})")
    off = custom_all_reduce_off(row, tp)
    if off is None:
        return "vllm-v0-inproc"
    assumed.append(f"engine profile vllm-v0-inproc-nccl: NCCL's all-reduce, not vLLM's custom one ({off})")
    return "vllm-v0-inproc-nccl"


def _plan_layout(
    row: dict[str, str], role: str, model: ModelSpec, assumed: list[str]
) -> tuple[int, int, int, int | None, int, Disaggregation | None]:
    """The ServingPlan layout (replicas, tp, pp, ep, attention_dp) of a row and, for a whole P/D
    deployment, its Disaggregation (the layout fields then stay at their defaults). A role measured alone is laid
    out as that role's engines. A blank ep of an MoE row
    is read as the engine's default (``ENGINE_DEFAULT_EP``, its other readings: ``ep_readings``); a P/D row needs its
    roles' ep. Raises ``Unexpressible``
    naming what is blank or inconsistent."""
    devices = row_devices(row, [])

    def needs_ep(ep: int | None, column: str) -> None:
        if model.is_moe and ep is None:
            raise Unexpressible(
                f"the source does not state the expert-parallel degree ({column} blank on an MoE row)"
            )

    if role == "both":
        tp, replicas, pp, adp = _row_layout(row, assumed)
        ep = int(cell_number(row, "ep") or 0) or None
        if ep is None and model.is_moe:  # several readings: the stack's default scored, the others beside it
            ep, why = ENGINE_DEFAULT_EP[_engine_key(row)]
            others = ", ".join(f"ep={d}" for d in _ep_choices(model, tp * adp) if d != ep)
            assumed.append(
                f"ep:{ep}, the stack's default (ep blank: {why}); the other readings ({others}) are priced beside "
                "it (readings)"
            )
        if replicas * tp * pp * adp != devices:
            raise Unexpressible("replicas * tp * pp * attention_dp differs from num_devices_total")
        return replicas, tp, pp, ep, adp, None
    if role in ("prefill", "decode"):
        workers, tp, ep, adp = _role_layout(row, role, assumed)
        needs_ep(ep, f"{role}_ep")
        assumed.append(f"the {role} role laid out as {workers} engine(s) of tp{tp} x attention_dp {adp}")
        return workers, tp, 1, ep, adp, None
    p, d = _role_layout(row, "prefill", assumed), _role_layout(row, "decode", assumed)
    needs_ep(p[2], "prefill_ep")
    needs_ep(d[2], "decode_ep")
    split = Disaggregation(prefill_workers=p[0], prefill_tp=p[1], prefill_ep=p[2], prefill_attention_dp=p[3],
                           decode_workers=d[0], decode_tp=d[1], decode_ep=d[2], decode_attention_dp=d[3])  # fmt: skip
    if split.num_devices != devices:
        raise Unexpressible(
            f"the roles' devices ({split.num_devices}) differ from num_devices_total={devices}"
        )
    return 1, 1, 1, None, 1, split


def _ep_choices(model: ModelSpec, ranks: int) -> list[int]:
    """The expert-parallel degrees an engine of ``ranks`` attention ranks can run ``model`` at: divisors of the
    ranks that divide the experts."""
    return [d for d in range(1, ranks + 1) if ranks % d == 0 and model.num_experts % d == 0]


def ep_readings(
    model: ModelSpec, plan: ServingPlan, assumed: list[str] | tuple[str, ...]
) -> tuple[tuple[str, ServingPlan], ...]:
    """The other readings of a row whose blank ``ep`` ``row_plan`` read as the stack's default (its ``ep:`` line in
    ``assumed``, ``ENGINE_DEFAULT_EP``): ``("ep=d", plan at ep d)`` for every other degree the layout allows; ()
    for any other row."""
    if not any(a.startswith("ep:") for a in assumed):
        return ()
    ranks = plan.tp * plan.attention_dp
    return tuple(
        (f"ep={d}", replace(plan, ep=d)) for d in _ep_choices(model, ranks) if d != plan.expert_parallel
    )


def row_speculative(row: dict[str, str]) -> SpeculativeDecoding | None:
    """The row's speculative decoding (``spec_method``, ``spec_num_tokens``, ``spec_accept_len``), or None when
    ``spec_method`` is blank. Raises ``Unexpressible`` naming a blank count or accepted length (the acceptance is
    never guessed), or a draft model the row cannot name."""
    method = row.get("spec_method", "").strip()
    if not method:
        return None
    if method == "draft":
        raise Unexpressible("spec_method=draft: the row names no draft model")
    k = cell_count(row, "spec_num_tokens")
    length = cell_number(row, "spec_accept_len")
    if length is None:
        raise Unexpressible("spec_accept_len is blank (the acceptance of a speculative run is not guessed)")
    return SpeculativeDecoding(method=SpecMethod(method), num_speculative_tokens=k, accepted_length=length)


def _trtllm_bench(
    row: dict[str, str],
    model: ModelSpec,
    cluster: ClusterSpec,
    *,
    tp: int,
    pp: int,
    kv: str,
    assumed: list[str],
) -> tuple[int, int] | None:
    """trtllm-bench's own (max_batch_size, max_num_tokens) for an offline TensorRT-LLM row that leaves both
    blank (``trtllm_bench_settings``), or None."""
    blank = not row["max_batch_size"].strip() and not row["max_num_batched_tokens"].strip()
    if row["engine"].strip() != "trtllm" or row["workload_kind"].strip() != "offline" or not blank:
        return None
    lengths = [cell_number(row, f"{side}_tokens_mean") for side in ("input", "output")]
    if None in lengths:
        return None
    n_in, n_out = (max(1, round(v or 1)) for v in lengths)
    free = cell_number(row, "kv_cache_free_mem_frac") or TRTLLM_BENCH_KV_FRAC
    weight = ServingDType(row["weight_dtype"].strip() or "bf16")
    batch, tokens = trtllm_bench_settings(
        model, cluster, tp=tp, pp=pp, input_tokens=n_in, output_tokens=n_out, weight_dtype=weight,
        kv_cache_dtype=ServingDType(kv), kv_free_frac=free,
    )  # fmt: skip
    assumed.append(
        f"max_batch_size={batch}, max_num_batched_tokens={tokens}: trtllm-bench's own settings "
        "(tensorrt_llm/bench/build/tuning.py calc_engine_setting; max_num_tokens >= ISL + batch without chunking)"
    )
    return batch, tokens


def _with_memory_share(
    row: dict[str, str], plan: ServingPlan, model: ModelSpec, cluster: ClusterSpec, assumed: list[str]
) -> ServingPlan:
    """``plan`` with the engine's memory flag as the row gives or implies it (``gpu_memory_utilization_frac`` holds
    the flag of the row's engine, which ``EngineProfile.kv_memory_share`` reads): TensorRT-LLM's
    ``kv_cache_free_mem_frac`` (``_trtllm_free_share``); a filled ``gpu_memory_utilization_frac`` as it is for the
    other engines; else the quoted flag or the engine's default (``_default_memory_share``)."""
    util = cell_number(row, "gpu_memory_utilization_frac")
    engine = row["engine"].strip()
    if engine == "trtllm":
        return replace(
            plan, gpu_memory_utilization_frac=_trtllm_free_share(row, plan, model, cluster, util, assumed)
        )
    if util is not None:
        return replace(plan, gpu_memory_utilization_frac=util)
    return replace(plan, gpu_memory_utilization_frac=_default_memory_share(row, plan, assumed))


def _trtllm_free_share(
    row: dict[str, str], plan: ServingPlan, model: ModelSpec, cluster: ClusterSpec, util: float | None,
    assumed: list[str],
) -> float:  # fmt: skip
    """TensorRT-LLM's ``--kv_cache_free_gpu_memory_fraction`` of a row: its ``kv_cache_free_mem_frac``; else a
    ``gpu_memory_utilization_frac`` (the README's share of the whole device) turned into the share of the memory left
    free that gives the same pool, (HBM x u - weights - activations - reserve) / (HBM - weights - activations -
    reserve); else 0.9, the perf-overview page's fallback. Each reading but the first is noted in ``assumed``."""
    free = cell_number(row, "kv_cache_free_mem_frac")
    if free is not None:
        return free
    if util is None:
        assumed.append("kv_cache_free_mem_frac=0.9 (the TRT-LLM page's fallback; 0.95 'in many cases')")
        return TRTLLM_BENCH_KV_FRAC
    role = "both" if plan.disaggregation is None else "decode"
    cost = ReplicaCost.of(model, cluster, plan, Calibration(), role=role)
    used = cost.weight_bytes_per_device() + cost.activation_peak_bytes() + cost.reserve_bytes()
    hbm = cluster.device.hbm_bytes
    share = (hbm * util - used) / (hbm - used)
    if not 0.0 < share <= 1.0:
        raise Unexpressible(
            f"gpu_memory_utilization_frac {util:g} leaves no KV memory beside the weights, activations and reserve "
            f"({used / 2**30:.1f} GiB of {hbm / 2**30:.1f} GiB per device)"
        )
    assumed.append(f"kv_cache_free_mem_frac={share:.4g}: the share of the free memory that gives the pool of "
                   f"gpu_memory_utilization_frac {util:g} (TensorRT-LLM sizes its pool from the free memory)")  # fmt: skip
    return share
