"""A serving plan -> the command that starts one engine of it (vLLM, SGLang, TensorRT-LLM).

Argument names: vLLM ``vllm serve`` (vllm/engine/arg_utils.py EngineArgs), SGLang ``python -m
sglang.launch_server`` (python/sglang/srt/server_args.py ServerArgs), TensorRT-LLM ``trtllm-serve`` with
``--extra_llm_api_options`` (tensorrt_llm/commands/serve.py; the YAML keys are LlmArgs fields); a disaggregated
plan becomes a Dynamo DynamoGraphDeployment of ``dynamo.vllm`` prefill and decode workers. The tests check the
``vllm serve`` arguments against vLLM 0.33.0's own parser options, the Dynamo workers' arguments against those of
ai-dynamo 1.6.1's ``dynamo.vllm`` parser (with the vLLM 0.31.0 it pins), the SGLang arguments against SGLang
0.5.23's parser options (each built from the PyPI wheel on CPU), the ``trtllm-serve`` options against those of
its source at a pinned commit; see docs/launch.md.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from workbench.launch.stacks import SERVING_ENGINES, LaunchFolder, ModelRef, shell_words

if TYPE_CHECKING:
    from workbench.specs.serving import ServingPlan
    from workbench.specs.speculative import SpeculativeDecoding

from workbench.launch.stacks import ExportRefused

_QUANT = {"fp8": "fp8", "int4": "awq", "fp4": "modelopt_fp4"}
"""Weight dtype -> the engines' ``--quantization`` name (pre-quantised checkpoints: check README)."""

_KV = {
    "vllm": {"fp8": "fp8", "fp4": "nvfp4"},
    "sglang": {"fp8": "fp8_e4m3", "fp4": "nvfp4"},
    "trtllm": {"fp8": "fp8"},
}
"""KV-cache dtype -> each engine's name for it (16-bit caches follow the model: ``auto``): vLLM 0.33.0's
``CacheDType`` (vllm/config/cache.py), SGLang 0.5.23's ``--kv-cache-dtype`` choices, TensorRT-LLM's
``kv_cache_config.dtype``. A dtype an engine has no name for here (an int4 cache; fp4 on TensorRT-LLM) is refused,
not written as a 16-bit cache the prediction did not price."""


_VLLM_SPEC_METHOD = {
    "mtp": "mtp",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "draft": "draft_model",
    "ngram": "ngram",
}
"""SpecMethod -> vLLM ``SpeculativeConfig.method`` (vllm/config/speculative.py ``SpeculativeMethod``, vLLM 0.33.0)."""

_SGLANG_SPEC_ALGORITHM = {"mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft": "STANDALONE"}
"""SpecMethod -> SGLang ``--speculative-algorithm`` (sglang/srt/speculative/spec_info.py ``SpeculativeAlgorithm``
and the ``NEXTN`` alias of spec_registry.py, SGLang 0.5.23). Its NGRAM drafts a token tree whose width
(``--speculative-num-draft-tokens``) the plan does not give, so ngram is left to the README."""

EAGLE_HEAD = "CHANGE-TO-THE-EAGLE-HEAD"
"""Stands for the EAGLE/EAGLE-3 draft head checkpoint (trained for the target model; the plan does not name it)."""


def serve_command(
    plan: ServingPlan, engine: str, model: ModelRef, draft: ModelRef | None = None
) -> list[str]:
    """The words of the command that starts one engine (one replica) of ``plan``; ``draft`` names the draft model
    of ``--speculative draft`` (default: its preset id). Raises ``ExportRefused`` for a disaggregated plan (that
    is a Dynamo deployment), an ep the engine cannot set or a KV-cache dtype it has no name for (``_KV``)."""
    if plan.disaggregation is not None:
        raise ExportRefused(
            engine,
            "disaggregation",
            "prefill/decode",
            "a disaggregated plan is a Dynamo deployment (export_serving writes dynamo.yaml)",
        )
    world = plan.tp * plan.attention_dp
    ep = plan.ep or 1
    if ep not in (1, world):
        raise ExportRefused(
            engine, "ep", ep, f"its expert parallelism spans the engine's tp*attention_dp = {world} ranks"
        )
    if engine not in _KV:
        raise ValueError(f"unknown engine {engine!r}; allowed: {', '.join(SERVING_ENGINES[:3])}")
    kv = _KV[engine].get(str(plan.kv_cache_dtype), "auto")
    if kv == "auto" and str(plan.kv_cache_dtype) not in ("bf16", "fp16"):
        raise ExportRefused(
            engine,
            "kv_cache_dtype",
            plan.kv_cache_dtype,
            f"this export writes its KV cache as 16-bit (auto) or {', '.join(_KV[engine])}",
        )
    quant = _QUANT.get(str(plan.weight_dtype))
    if engine == "vllm":
        return _vllm_command(plan, model, ep, kv, quant) + _vllm_speculative(plan, draft)
    if engine == "sglang":
        return _sglang_command(plan, model, ep, kv, quant) + _sglang_speculative(plan, draft)
    return _trtllm_command(plan, model, ep)  # engine is trtllm: the others were checked against _KV


def _vllm_command(plan: ServingPlan, model: ModelRef, ep: int, kv: str, quant: str | None) -> list[str]:
    """``vllm serve`` for one replica: tp, pp and attention dp as vLLM's sizes, expert parallelism on over the
    engine's ranks when ep > 1, the scheduler's budgets, the KV cache dtype and block, chunked prefill for
    ``sarathi``, the weight quantisation."""
    words = [
        "vllm",
        "serve",
        model.reference,
        "--tensor-parallel-size",
        str(plan.tp),
        "--pipeline-parallel-size",
        str(plan.pp),
        "--data-parallel-size",
        str(plan.attention_dp),
    ]
    words += ["--enable-expert-parallel"] if ep > 1 else []
    words += [
        "--max-num-seqs",
        str(plan.max_num_seqs),
        "--max-num-batched-tokens",
        str(plan.max_num_batched_tokens),
        "--gpu-memory-utilization",
        str(plan.gpu_memory_utilization_frac),
        "--kv-cache-dtype",
        kv,
        "--block-size",
        str(plan.kv_block_tokens),
    ]
    words += ["--enable-chunked-prefill"] if plan.scheduler == "sarathi" else ["--no-enable-chunked-prefill"]
    return words + (["--quantization", quant] if quant else [])


def _draft_reference(spec: SpeculativeDecoding, draft: ModelRef | None) -> str:
    """The draft ``model`` of an EAGLE head (``EAGLE_HEAD``: the plan does not name it) or a draft model."""
    if spec.method in ("eagle", "eagle3"):
        return EAGLE_HEAD
    return draft.reference if draft is not None else str(spec.draft_model)


def _vllm_speculative(plan: ServingPlan, draft: ModelRef | None) -> list[str]:
    """``--speculative-config`` JSON (vLLM ``SpeculativeConfig`` fields): the method, k proposed tokens and, for
    EAGLE heads and draft models, the draft ``model``; nothing without speculative decoding."""
    spec = plan.speculative
    if spec is None:
        return []
    config: dict[str, Any] = {
        "method": _VLLM_SPEC_METHOD[str(spec.method)],
        "num_speculative_tokens": spec.num_speculative_tokens,
    }
    if spec.method in ("eagle", "eagle3", "draft"):
        config["model"] = _draft_reference(spec, draft)
    return ["--speculative-config", json.dumps(config, separators=(",", ":"))]


def _sglang_speculative(plan: ServingPlan, draft: ModelRef | None) -> list[str]:
    """SGLang's chain speculation: k draft steps of top-1 (``--speculative-eagle-topk 1``), k + 1 tokens verified
    (the draft's k and the target's own; SGLang's MTP hook requires steps + 1), the draft model path for EAGLE
    heads and draft models; nothing for ngram (see ``_SGLANG_SPEC_ALGORITHM``) or without speculative decoding."""
    spec = plan.speculative
    if spec is None or str(spec.method) not in _SGLANG_SPEC_ALGORITHM:
        return []
    k = spec.num_speculative_tokens
    words = ["--speculative-algorithm", _SGLANG_SPEC_ALGORITHM[str(spec.method)]]
    words += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
    words += ["--speculative-num-draft-tokens", str(k + 1)]
    if spec.method in ("eagle", "eagle3", "draft"):
        words += ["--speculative-draft-model-path", _draft_reference(spec, draft)]
    return words


def _speculative_notes(plan: ServingPlan, engine: str) -> list[str]:
    """README lines for what the export could not write of the plan's speculative decoding."""
    spec = plan.speculative
    if spec is None:
        return []
    what = f"speculative decoding ({spec.method}, k={spec.num_speculative_tokens})"
    if engine == "trtllm" or (engine == "sglang" and str(spec.method) not in _SGLANG_SPEC_ALGORITHM):
        return [
            f"- {what} is in the prediction but not in these files: add it to the engine's options by hand;"
        ]
    if spec.method in ("eagle", "eagle3"):
        return [f"- {what}: replace {EAGLE_HEAD} with the EAGLE head checkpoint trained for the model;"]
    return []


def _sglang_command(plan: ServingPlan, model: ModelRef, ep: int, kv: str, quant: str | None) -> list[str]:
    """``sglang.launch_server`` for one replica: tp over the engine's tp*attention_dp ranks (DP attention on
    when attention_dp > 1), pp, ep, the scheduler's budgets, the KV cache dtype and page, the quantisation."""
    words = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model.reference,
        "--tp-size",
        str(plan.tp * plan.attention_dp),
        "--pp-size",
        str(plan.pp),
    ]
    if plan.attention_dp > 1:
        words += ["--dp-size", str(plan.attention_dp), "--enable-dp-attention"]
    words += ["--ep-size", str(ep)] if ep > 1 else []
    words += [
        "--max-running-requests",
        str(plan.max_num_seqs),
        "--chunked-prefill-size",
        str(plan.max_num_batched_tokens),
        "--mem-fraction-static",
        str(plan.gpu_memory_utilization_frac),
        "--kv-cache-dtype",
        kv,
        "--page-size",
        str(plan.kv_block_tokens),
    ]
    return words + (["--quantization", quant] if quant else [])


def _trtllm_command(plan: ServingPlan, model: ModelRef, ep: int) -> list[str]:
    """``trtllm-serve`` for one replica: tp over the engine's tp*attention_dp ranks, pp, ep, the scheduler's
    budgets and KV memory share; its other options go in ``llm_api_options.yaml`` beside it."""
    return [
        "trtllm-serve",
        model.reference,
        "--tp_size",
        str(plan.tp * plan.attention_dp),
        "--pp_size",
        str(plan.pp),
        "--ep_size",
        str(ep),
        "--max_batch_size",
        str(plan.max_num_seqs),
        "--max_num_tokens",
        str(plan.max_num_batched_tokens),
        "--kv_cache_free_gpu_memory_fraction",
        str(plan.gpu_memory_utilization_frac),
        "--extra_llm_api_options",
        "$HERE/llm_api_options.yaml",
    ]


DYNAMO_RELEASE = "ai-dynamo 1.6.1 (examples/backends/vllm/deploy/disagg.yaml at ai-dynamo/dynamo 7893f268)"
"""The DynamoGraphDeployment the export follows: a Frontend, and prefill and decode ``dynamo.vllm`` workers
(``componentType: worker``, ``subComponentType``, ``--disaggregation-mode prefill|decode``), GPUs per pod in
``resources.limits.gpu``."""

DYNAMO_KV_TRANSFER = {
    "prefill": {"kv_connector": "NixlConnector", "kv_role": "kv_producer"},
    "decode": {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"},
}
"""vLLM ``--kv-transfer-config`` of each role: ai-dynamo 1.6.1 refuses a prefill worker without one
(dynamo/vllm/args.py: "When using --disaggregation-mode prefill, you must explicitly provide
--kv-transfer-config"); these are the NIXL settings its profiler writes into the deployments it generates
(dynamo/profiler/utils/config_modifiers/vllm.py DEFAULT_VLLM_KV_TRANSFER_CONFIG)."""


def dynamo_deployment(
    plan: ServingPlan, engine: str, model: ModelRef, image: str, draft: ModelRef | None = None
) -> dict[str, Any]:
    """A Dynamo ``DynamoGraphDeployment`` (nvidia.com/v1alpha1) of a disaggregated plan: one service per role with
    ``replicas`` = its engines and each worker's vLLM arguments from the role's layout. Raises ``ExportRefused``
    for an aggregated plan or an engine other than vLLM (the workers are ``dynamo.vllm``)."""
    d = plan.disaggregation
    if d is None:
        raise ExportRefused(
            "dynamo", "disaggregation", None, "it deploys separate prefill and decode workers"
        )
    if engine != "vllm":
        raise ExportRefused(
            "dynamo", "engine", engine, "this export writes vLLM workers (python3 -m dynamo.vllm)"
        )
    services: dict[str, Any] = {
        "Frontend": {
            "componentType": "frontend",
            "replicas": 1,
            "extraPodSpec": {"mainContainer": {"image": image}},
        }
    }
    for role in ("prefill", "decode"):
        one = plan.role_plan(role)  # the role's layout and dtypes, replicas = its workers
        args = serve_command(one, "vllm", model, draft)[3:]  # less `vllm serve MODEL`
        kv_transfer = json.dumps(DYNAMO_KV_TRANSFER[role], separators=(",", ":"))
        services[f"Vllm{role.capitalize()}Worker"] = {
            "componentType": "worker",
            "subComponentType": role,
            "replicas": one.replicas,
            "resources": {"limits": {"gpu": str(one.tp * one.attention_dp * one.pp)}},
            "extraPodSpec": {
                "mainContainer": {
                    "image": image,
                    "command": ["python3", "-m", "dynamo.vllm"],
                    "args": [
                        "--model",
                        model.reference,
                        *args,
                        "--disaggregation-mode",
                        role,
                        "--kv-transfer-config",
                        kv_transfer,
                    ],
                }
            },
        }
    name = "".join(c if c.isalnum() else "-" for c in f"wb-{model.name}".lower())[:63].strip("-")
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name},
        "spec": {"services": services},
    }


def trtllm_options(plan: ServingPlan) -> dict[str, Any]:
    """TensorRT-LLM's extra LLM-API options (LlmArgs fields) for ``plan``."""
    options: dict[str, Any] = {
        "enable_attention_dp": plan.attention_dp > 1,
        "enable_chunked_prefill": plan.scheduler == "sarathi",
        "kv_cache_config": {
            "free_gpu_memory_fraction": plan.gpu_memory_utilization_frac,
            "tokens_per_block": plan.kv_block_tokens,
        },
    }
    if str(plan.kv_cache_dtype) == "fp8":
        options["kv_cache_config"]["dtype"] = "fp8"
    return options


def export_serving(
    plan: ServingPlan,
    engine: str,
    model: ModelRef,
    prediction: dict[str, Any],
    draft: ModelRef | None = None,
) -> LaunchFolder:
    """The launch folder of a serving plan: ``serve.sh`` (one engine; start ``replicas`` of them behind a
    router), TensorRT-LLM's ``llm_api_options.yaml``, ``prediction.json`` and a README; ``draft``: the draft
    model of ``--speculative draft``."""
    if plan.disaggregation is not None:
        return _dynamo_folder(plan, engine, model, prediction, draft)
    words = serve_command(plan, engine, model, draft)
    script = (
        "#!/usr/bin/env bash\n# Written by `workbench serve export`: one engine of the plan "
        f'{plan.describe()}.\nset -euo pipefail\nHERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)\n'
        + shell_words(words)
        + ' "$@"\n'
    )
    files = {
        "serve.sh": script,
        "prediction.json": json.dumps(prediction, indent=1, allow_nan=False, default=str) + "\n",
    }
    if engine == "trtllm":  # YAML is a superset of JSON: the block form keeps it readable
        files["llm_api_options.yaml"] = _yaml(trtllm_options(plan))
    s = prediction["summary"]
    files["README.md"] = "\n".join(
        [
            f"# Serving launch files: {model.name} on {engine}",
            "",
            f"Plan `{plan.describe()}`: {plan.replicas} engine(s) of {plan.num_devices // plan.replicas} device(s). "
            f"Predicted TTFT {s['ttft_s'] * 1e3:.1f} ms, TPOT {s['tpot_s'] * 1e3:.2f} ms, "
            f"{s['output_tokens_per_s']:,.0f} output tokens/s (`prediction.json`).",
            "",
            "## Before the first run, check",
            f"- the model: {model.reference} (a pre-quantised checkpoint when the weights are not 16-bit);",
            *_speculative_notes(plan, engine),
            f"- start `serve.sh` on each of the {plan.replicas} engine(s) and put a router in front when more than one;",
            "- the engine version: flags follow the releases named in workbench/launch/serving.py.",
            "",
            "## Then compare",
            "Run the engine's serving benchmark with the same request lengths and rate, save its result JSON, and",
            "`workbench compare RESULT.json --prediction prediction.json`.",
            "",
        ]
    )
    return LaunchFolder(stack=engine, files=files, executable=("serve.sh",))


def _dynamo_folder(
    plan: ServingPlan, engine: str, model: ModelRef, prediction: dict[str, Any], draft: ModelRef | None
) -> LaunchFolder:
    image = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:CHANGE-TO-YOUR-TAG"
    deployment = dynamo_deployment(plan, engine, model, image, draft)
    s = prediction["summary"]
    readme = "\n".join(
        [
            f"# Dynamo deployment: {model.name}, {plan.describe()}",
            "",
            f"Prefill and decode workers as a DynamoGraphDeployment ({DYNAMO_RELEASE}). Predicted TTFT "
            f"{s['ttft_s'] * 1e3:.1f} ms, TPOT {s['tpot_s'] * 1e3:.2f} ms (`prediction.json`).",
            "",
            "## Before the first run, check",
            "- the container image tag in every service (`image:`), and the Hugging Face token secret your cluster needs;",
            *_speculative_notes(plan.role_plan("decode"), "vllm"),
            "- then `kubectl apply -f dynamo.yaml` in a namespace with the Dynamo operator.",
            "",
        ]
    )
    files = {
        "dynamo.yaml": _yaml(deployment),
        "README.md": readme,
        "prediction.json": json.dumps(prediction, indent=1, allow_nan=False, default=str) + "\n",
    }
    return LaunchFolder(stack="dynamo", files=files)


def _yaml(tree: dict[str, Any], indent: str = "") -> str:
    """Block-style YAML of nested dicts; lists and scalars as JSON flow values (YAML 1.2 reads JSON)."""
    out = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.append(f"{indent}{key}:\n{_yaml(value, indent + '  ')}")
        else:
            out.append(f"{indent}{key}: {json.dumps(value)}\n")
    return "".join(out)
