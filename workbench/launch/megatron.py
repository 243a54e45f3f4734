"""Megatron-Core (``pretrain_gpt.py`` arguments) and Megatron-Bridge (a ConfigContainer override) launch files.

The argument names are those of Megatron-LM's parser at tag ``core_v0.19.0`` (megatron/training/arguments.py;
the tests check every emitted flag, its kind and its choice against the parser's own option list,
``tests/fixtures/launch/megatron_lm_core_r0.19.0_args.txt``); the Bridge keys are the ConfigContainer fields of
Megatron-Bridge v0.6.0 (``tests/fixtures/launch/megatron_bridge_v0.6.0_fields.txt``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.cost.step import stage_holdings
from workbench.launch.stacks import ExportRefused, ModelRef

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate
    from workbench.specs.framework import FrameworkProfile
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan

MEGATRON_RELEASE = "core_v0.19.0"
"""The Megatron-LM tag whose ``pretrain_gpt.py`` parser the arguments follow."""

BRIDGE_RELEASE = "v0.6.0"
"""The Megatron-Bridge tag whose ConfigContainer the override follows."""

FP8_RECIPE_FLAG = {"delayed": "delayed", "current": "tensorwise", "mxfp8": "mxfp8", "blockwise": "blockwise"}
"""Our ``FrameworkProfile.fp8_recipe`` -> Megatron's ``--fp8-recipe`` (per-tensor current scaling is
``tensorwise`` there: Transformer Engine's Float8CurrentScaling)."""

BRIDGE_PRECISION = {
    "bf16": "bf16_mixed",
    "fp16": "fp16_mixed",
    "delayed": "bf16_with_fp8_delayed_scaling_mixed",
    "current": "bf16_with_fp8_current_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
    "blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
}
"""Megatron-Bridge's registered ``mixed_precision`` recipes (src/megatron/bridge/training/mixed_precision.py)."""

CP_COMM_TYPE = {"ring": "p2p", "ulysses": "a2a", "usp": "a2a+p2p"}
"""``ParallelPlan.cp_kind`` -> Megatron's ``--cp-comm-type`` (Transformer Engine's names)."""

ZERO_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
"""ZeRO stage -> Megatron-FSDP's ``--data-parallel-sharding-strategy``."""


def check_megatron(plan: ParallelPlan, stack: str = "megatron-core") -> None:
    """Raise ``ExportRefused`` for what Megatron-Core's pretrain_gpt.py cannot run."""
    if plan.pp > 1:
        wanted = "interleaved-1f1b" if plan.vpp > 1 else "1f1b"
        if plan.schedule != wanted:
            raise ExportRefused(
                stack,
                "schedule",
                plan.schedule,
                f"it runs {wanted} at vpp={plan.vpp} (1f1b, or interleaved-1f1b with vpp > 1)",
            )
    if plan.loss_chunks > 1:
        raise ExportRefused(
            stack,
            "loss_chunks",
            plan.loss_chunks,
            "it computes the LM head and loss in one piece (loss_chunks=1)",
        )
    if plan.vocab_parallel and plan.pp > 1:
        raise ExportRefused(
            stack,
            "vocab_parallel",
            True,
            "it keeps the embedding on the first and the head on the last stage",
        )
    if plan.offload_activations:
        # TransformerConfig.__post_init__ (core_v0.19.0): cpu_offloading needs 0 <= cpu_offloading_num_layers <
        # num_layers, pipeline_model_parallel_size 1 and no recompute_granularity
        why = (
            "it offloads fewer layers than the model has (--cpu-offloading-num-layers N < num_layers): set "
            "offload_activation_layers"
            if plan.offload_activation_layers is None
            else "its CPU offloading runs without pipeline parallelism (pp=1)"
            if plan.pp > 1
            else "its CPU offloading runs without activation recompute (recompute none)"
            if plan.recompute != "none"
            else None
        )
        if why is not None:
            raise ExportRefused(stack, "offload_activations", True, why)
    if plan.offload_optimizer and plan.zero_stage == 0:
        raise ExportRefused(
            stack,
            "offload_optimizer",
            True,
            "its optimizer offload needs the distributed optimizer (zero_stage >= 1)",
        )
    if plan.zero_shard is not None and plan.zero_shard != plan.dp * plan.cp and plan.zero_stage > 1:
        raise ExportRefused(
            stack,
            "zero_shard",
            plan.zero_shard,
            "hybrid sharding is offered for the distributed optimizer (zero_stage 1)",
        )


def decoder_stage_layers(model: ModelSpec, plan: ParallelPlan) -> list[int]:
    """Decoder layers of each of the pp*vpp (virtual) pipeline stages, in model order, as the cost model lays
    them (``workbench.cost.step.stage_holdings``: remainder layers on the middle stages)."""
    n = plan.pp * plan.vpp
    held = stage_holdings(model, np.full(n, n), np.arange(n))
    return [int(v) for v in np.asarray(held["dense"] + held["moe"] - held["mtp"]).reshape(-1)]


def uneven_edges(model: ModelSpec, plan: ParallelPlan, stack: str) -> tuple[int, int] | None:
    """(first, last) stage layers when the stages are uneven, None when even. Megatron splits what the first and
    last (virtual) stages leave evenly over the others; another split is refused."""
    layers = decoder_stage_layers(model, plan)
    if len(set(layers)) <= 1:
        return None
    middle = layers[1:-1]
    if len(set(middle)) > 1:
        raise ExportRefused(
            stack,
            "pipeline stages",
            "/".join(map(str, layers)),
            "it sets the first and last stage's layers and splits the rest evenly; pick pp*vpp that divides "
            f"{model.num_layers - layers[0] - layers[-1]} middle layers",
        )
    return layers[0], layers[-1]


def model_args(model: ModelSpec, seq_len: int) -> list[str]:
    """The architecture arguments of ``model`` (a check list for the README: Megatron's model is built from them)."""
    a = ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size)]
    a += [
        "--ffn-hidden-size",
        str(model.ffn_hidden_size),
        "--num-attention-heads",
        str(model.num_attention_heads),
    ]
    if model.head_dim * model.num_attention_heads != model.hidden_size:
        a += ["--kv-channels", str(model.head_dim)]
    if model.num_key_value_heads != model.num_attention_heads:
        a += ["--group-query-attention", "--num-query-groups", str(model.num_key_value_heads)]
    a += [
        "--seq-length",
        str(seq_len),
        "--max-position-embeddings",
        str(max(seq_len, model.num_learned_positions)),
    ]
    a += ["--position-embedding-type", "learned_absolute" if model.num_learned_positions else "rope"]
    a += ["--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"]
    a += [
        flag
        for flag, on in (
            ("--swiglu", model.gated_mlp),
            ("--untie-embeddings-and-output-weights", not model.tied_embeddings),
            ("--disable-bias-linear", not model.linear_bias),
            ("--add-qkv-bias", model.qkv_bias),
            ("--qk-layernorm", model.qk_norm),
        )
        if on
    ]
    if model.kv_lora_rank:
        a += ["--multi-latent-attention", "--kv-lora-rank", str(model.kv_lora_rank)]
        a += ["--q-lora-rank", str(model.q_lora_rank)] if model.q_lora_rank else []
        a += [
            "--qk-head-dim",
            str(model.qk_nope_head_dim),
            "--qk-pos-emb-head-dim",
            str(model.qk_rope_head_dim),
        ]
        a += ["--v-head-dim", str(model.v_head_dim)]
    if model.num_experts:
        a += ["--num-experts", str(model.num_experts), "--moe-router-topk", str(model.experts_per_token)]
        a += ["--moe-ffn-hidden-size", str(model.moe_ffn_hidden_size)]
        if model.num_shared_experts:
            a += [
                "--moe-shared-expert-intermediate-size",
                str(model.num_shared_experts * model.moe_ffn_hidden_size),
            ]
        dense = model.num_dense_layers
        if dense:
            a += ["--moe-layer-freq", f"([0]*{dense}+[1]*{model.num_layers - dense})"]
        if model.num_expert_groups:
            a += ["--moe-router-num-groups", str(model.num_expert_groups)]
            a += ["--moe-router-group-topk", str(model.routed_groups_per_token)]
        if model.router_bias:  # DeepSeek-V3's router: sigmoid scores with a per-expert bias
            a += ["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias"]
    if model.num_mtp_layers:
        a += ["--mtp-num-layers", str(model.num_mtp_layers)]
    return a


def plan_args(est: Estimate, framework: FrameworkProfile | None, stack: str = "megatron-core") -> list[str]:
    """The parallelism, batch, memory and precision arguments of the estimate's plan for ``pretrain_gpt.py``.
    Raises ``ExportRefused`` for a plan Megatron-Core cannot run."""
    plan, work = est.plan, est.workload
    check_megatron(plan, stack)
    a = ["--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp)]
    if plan.vpp > 1:
        a += ["--num-virtual-stages-per-pipeline-rank", str(plan.vpp)]
    layers = plan.offload_activation_layers
    if plan.offload_activations and layers is not None and layers >= est.model.num_layers:
        raise ExportRefused(
            stack,
            "offload_activation_layers",
            layers,
            f"--cpu-offloading-num-layers must be below num_layers ({est.model.num_layers})",
        )
    edges = uneven_edges(est.model, plan, stack) if plan.pp > 1 else None
    if edges is not None:
        a += [
            "--decoder-first-pipeline-num-layers",
            str(edges[0]),
            "--decoder-last-pipeline-num-layers",
            str(edges[1]),
        ]
    if plan.cp > 1:
        a += ["--context-parallel-size", str(plan.cp), "--cp-comm-type", CP_COMM_TYPE[plan.cp_kind]]
        if plan.cp_kind == "usp":
            a += ["--hierarchical-context-parallel-sizes", str(plan.ulysses), str(plan.cp // plan.ulysses)]
    if plan.ep > 1 or est.model.num_experts:
        a += [
            "--expert-model-parallel-size",
            str(plan.ep),
            "--expert-tensor-parallel-size",
            str(plan.expert_tp),
        ]
    if plan.sequence_parallel and plan.tp > 1:
        a.append("--sequence-parallel")
    if plan.rank_order[3] == "pp":  # tp-cp-ep-pp-dp
        a.append("--use-tp-pp-dp-mapping")
    a += [
        "--micro-batch-size",
        str(plan.micro_batch_size),
        "--global-batch-size",
        str(work.global_batch_size),
    ]
    a += _memory_args(plan)
    a += _precision_args(work.dtype, framework)
    a += _overlap_args(plan, framework)
    if est.model.num_experts:
        if work.capacity_factor is not None:
            a += [
                "--moe-expert-capacity-factor",
                str(work.capacity_factor),
                "--moe-pad-expert-input-to-capacity",
            ]
        dispatcher = framework.moe_dispatcher if framework is not None else "alltoall"
        a += ["--moe-token-dispatcher-type", "alltoall" if dispatcher == "alltoall" else "flex"]
        if framework is None or framework.moe_grouped_gemm:
            a.append("--moe-grouped-gemm")
    return a


def _memory_args(plan: ParallelPlan) -> list[str]:
    a: list[str] = []
    if plan.zero_stage >= 1:
        a.append("--use-distributed-optimizer")
    if plan.zero_stage >= 2:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", ZERO_SHARDING[plan.zero_stage]]
    if plan.zero_shard is not None and plan.zero_shard != plan.dp * plan.cp:
        a += ["--num-distributed-optimizer-instances", str(plan.dp * plan.cp // plan.zero_shard)]
    if plan.offload_optimizer:
        a += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"]
    if plan.offload_activations:  # N > 0 switches cpu_offloading on (arguments.py validate_args)
        a += ["--cpu-offloading-num-layers", str(plan.offload_activation_layers)]
    if plan.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
    elif plan.recompute == "full":
        method, layers = ("block", plan.recompute_num_layers) if plan.recompute_num_layers else ("uniform", 1)
        a += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            method,
            "--recompute-num-layers",
            str(layers),
        ]
    return a


def _precision_args(dtype: str, framework: FrameworkProfile | None) -> list[str]:
    if dtype == "fp32":
        return []
    if dtype == "fp16":
        return ["--fp16"]
    a = ["--bf16"]
    if dtype == "fp8":
        recipe = framework.fp8_recipe if framework is not None else "delayed"
        a += ["--fp8-format", "hybrid", "--fp8-recipe", FP8_RECIPE_FLAG[recipe]]
    return a


def _overlap_args(plan: ParallelPlan, framework: FrameworkProfile | None) -> list[str]:
    """The communication overlap the framework profile prices, as Megatron's flags."""
    if framework is None:
        return []
    a: list[str] = []
    if framework.overlap_grad_reduce and plan.dp * plan.cp > 1:
        a.append("--overlap-grad-reduce")
        if framework.overlap_param_gather and plan.zero_stage >= 1:
            a.append("--overlap-param-gather")
    if framework.tp_comm_overlap and plan.tp > 1 and plan.sequence_parallel:
        a.append("--tp-comm-overlap")
    return a


def bridge_override(est: Estimate, framework: FrameworkProfile | None) -> dict[str, Any]:
    """The plan as a Megatron-Bridge ConfigContainer override (section -> field -> value), from the same
    arguments as ``plan_args`` (so both exports refuse the same plans)."""
    args = plan_args(est, framework, "megatron-bridge")
    plan, work = est.plan, est.workload
    model: dict[str, Any] = {
        "tensor_model_parallel_size": plan.tp,
        "pipeline_model_parallel_size": plan.pp,
        "virtual_pipeline_model_parallel_size": plan.vpp if plan.vpp > 1 else None,
        "context_parallel_size": plan.cp,
        "expert_model_parallel_size": plan.ep,
        "expert_tensor_parallel_size": plan.expert_tp,
        "sequence_parallel": "--sequence-parallel" in args,
        "seq_length": work.seq_len,
    }
    values = _values(args)
    if plan.cp > 1:
        model["cp_comm_type"] = CP_COMM_TYPE[plan.cp_kind]
        if plan.cp_kind == "usp":
            model["hierarchical_context_parallel_sizes"] = [plan.ulysses, plan.cp // plan.ulysses]
    for flag, key in (
        ("--decoder-first-pipeline-num-layers", "num_layers_in_first_pipeline_stage"),
        ("--decoder-last-pipeline-num-layers", "num_layers_in_last_pipeline_stage"),
        ("--recompute-num-layers", "recompute_num_layers"),
        ("--cpu-offloading-num-layers", "cpu_offloading_num_layers"),
    ):
        if flag in values:
            model[key] = int(values[flag])
    if "cpu_offloading_num_layers" in model:  # as Bridge's perf overrides set it (_set_recompute_overrides)
        model.update(cpu_offloading=True, cpu_offloading_weights=False)
    for flag, key in (
        ("--recompute-granularity", "recompute_granularity"),
        ("--recompute-method", "recompute_method"),
    ):
        if flag in values:
            model[key] = values[flag]
    model["tp_comm_overlap"] = "--tp-comm-overlap" in args
    if work.capacity_factor is not None:
        model["moe_expert_capacity_factor"] = work.capacity_factor
    ddp: dict[str, Any] = {
        "use_distributed_optimizer": plan.zero_stage >= 1,
        "overlap_grad_reduce": "--overlap-grad-reduce" in args,
        "overlap_param_gather": "--overlap-param-gather" in args,
    }
    if plan.zero_stage >= 2:
        ddp.update(use_megatron_fsdp=True, data_parallel_sharding_strategy=ZERO_SHARDING[plan.zero_stage])
    if "--num-distributed-optimizer-instances" in values:
        ddp["num_distributed_optimizer_instances"] = int(values["--num-distributed-optimizer-instances"])
    optimizer: dict[str, Any] = {"use_distributed_optimizer": plan.zero_stage >= 1}
    if plan.offload_optimizer:
        optimizer.update(optimizer_cpu_offload=True, optimizer_offload_fraction=1.0)
    recipe = values.get("--fp8-recipe")
    precision_key = {"tensorwise": "current"}.get(recipe, recipe) if recipe else work.dtype
    override: dict[str, Any] = {
        "model": model,
        "train": {"micro_batch_size": plan.micro_batch_size, "global_batch_size": work.global_batch_size},
        "ddp": ddp,
        "optimizer": optimizer,
        "dist": {"use_tp_pp_dp_mapping": "--use-tp-pp-dp-mapping" in args},
        "dataset": {"seq_length": work.seq_len},
    }
    if work.dtype != "fp32":  # fp32 trains without a mixed-precision recipe
        override["mixed_precision"] = BRIDGE_PRECISION[str(precision_key)]
    return override


def _values(args: list[str]) -> dict[str, str]:
    """Flag -> its first value (flags without a value are left out)."""
    return {
        a: b for a, b in zip(args, args[1:], strict=False) if a.startswith("--") and not b.startswith("--")
    }


def describe_model(ref: ModelRef) -> str:
    """One line naming where the model's weights and tokenizer come from."""
    return f"{ref.name} ({ref.hf_id or ref.config_path or 'no Hugging Face id known'})"
