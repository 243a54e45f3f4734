"""torchtitan (job TOML) and DeepSpeed (``ds_config.json``) launch files.

torchtitan: the TOML schema of release v0.2.2 (torchtitan/config/job_config.py, the last release that reads
``--job.config_file``; its ``ConfigManager`` parses the exported file in the tests). DeepSpeed: the config keys
of ``deepspeed.runtime.config.DeepSpeedConfig`` (the tests build one from the exported file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.launch.megatron import decoder_stage_layers
from workbench.launch.stacks import ExportRefused

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate
    from workbench.specs.framework import FrameworkProfile

TORCHTITAN_RELEASE = "v0.2.2"

TORCHTITAN_SCHEDULES = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved-1f1b": "Interleaved1F1B",
    "looped-bfs": "LoopedBFS",
    "zbv": "ZBVZeroBubble",
    "dualpipev": "DualPipeV",
}
"""Our schedule names -> ``torch.distributed.pipelining.get_schedule_class`` names torchtitan takes."""

TORCHTITAN_MODELS = {
    "llama-3.1-8b": ("llama3", "8B"),
    "llama-3.1-70b": ("llama3", "70B"),
    "llama-3.1-405b": ("llama3", "405B"),
    "deepseek-v3": ("deepseek_v3", "671B"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
    "qwen3-235b-a22b": ("qwen3", "235B-A22B"),
}
"""Our model presets -> torchtitan v0.2.2's (model.name, model.flavor) (torchtitan/models/*/__init__.py)."""

TORCHTITAN_FP8 = {"current": "tensorwise", "tensorwise": "tensorwise", "rowwise": "rowwise"}
"""Our FP8 recipe -> torchao's Float8Linear recipe_name (tensorwise = per-tensor current scaling; rowwise =
one scale per row, torchao ``Float8LinearRecipeName.ROWWISE``)."""


def torchtitan_job(est: Estimate, framework: FrameworkProfile | None, hf_assets: str) -> dict[str, Any]:
    """The job TOML of the estimate's plan as nested tables (section -> key -> value).

    Raises ``ExportRefused`` for what torchtitan cannot run: ZeRO-1, Ulysses/USP context parallelism, tp
    without sequence parallelism, another rank order, schedules it lacks, chunked loss, vocabulary parallelism,
    offload, fp16, an FP8 recipe other than current scaling, and models outside its registry."""
    plan, work, model = est.plan, est.workload, est.model
    stack = "torchtitan"
    _refusals(est, framework, stack)
    name, flavor = TORCHTITAN_MODELS[model.name]
    parallelism: dict[str, Any] = {
        "tensor_parallel_degree": plan.tp,
        "pipeline_parallel_degree": plan.pp,
        "context_parallel_degree": plan.cp,
        "expert_parallel_degree": plan.ep,
        "expert_tensor_parallel_degree": plan.expert_tp if plan.ep > 1 else 1,
    }
    parallelism.update(_data_parallel(est, stack))
    if plan.tp > 1 and framework is not None and framework.tp_comm_overlap:
        if not framework.fused_elementwise:  # torchtitan's maybe_enable_async_tp raises without compile
            why = "its async TP needs torch.compile of the model (maybe_enable_async_tp), which this profile runs without"
            raise ExportRefused(stack, "tp_comm_overlap", "on", why)
        parallelism["enable_async_tensor_parallel"] = True
    if plan.pp > 1:
        parallelism["pipeline_parallel_schedule"] = TORCHTITAN_SCHEDULES[plan.schedule]
        parallelism["pipeline_parallel_microbatch_size"] = plan.micro_batch_size
        parallelism["module_fqns_per_model_part"] = _model_parts(est)
    local = work.global_batch_size // plan.dp if plan.pp > 1 else plan.micro_batch_size
    job: dict[str, Any] = {
        "job": {"dump_folder": "./outputs", "description": f"workbench export: {plan.describe()}"},
        "model": {"name": name, "flavor": flavor, "hf_assets_path": hf_assets},
        "training": {
            "local_batch_size": local,
            "global_batch_size": work.global_batch_size,
            "seq_len": work.seq_len,
            "steps": 50,
            "mixed_precision_param": "float32" if work.dtype == "fp32" else "bfloat16",
        },
        "parallelism": parallelism,
        "activation_checkpoint": {"mode": str(plan.recompute)},
        "compile": {"enable": framework.fused_elementwise if framework is not None else True},
        "metrics": {"log_freq": 1},
    }
    if plan.recompute == "selective":
        job["activation_checkpoint"]["selective_ac_option"] = "op"
    if work.dtype == "fp8":
        job["model"]["converters"] = ["quantize.linear.float8"]
        recipe = framework.fp8_recipe if framework is not None else "current"
        job["quantize"] = {"linear": {"float8": {"recipe_name": TORCHTITAN_FP8.get(recipe, "tensorwise")}}}
    return job


def _refusals(est: Estimate, framework: FrameworkProfile | None, stack: str) -> None:
    plan, work = est.plan, est.workload
    checks: list[tuple[bool, str, object, str]] = [
        (
            est.model.name not in TORCHTITAN_MODELS,
            "model",
            est.model.name,
            f"it builds models from its registry: {', '.join(TORCHTITAN_MODELS)}",
        ),
        (
            plan.zero_stage == 1,
            "zero_stage",
            1,
            "it replicates (zero 0) or shards with FSDP2 (zero 2: never reshard, zero 3)",
        ),
        (
            plan.cp > 1 and plan.cp_kind != "ring",
            "cp_kind",
            plan.cp_kind,
            "its context parallelism is ring attention",
        ),
        (
            plan.tp > 1 and not plan.sequence_parallel,
            "sequence_parallel",
            False,
            "its tensor parallelism always shards the norms over the sequence (sequence_parallel=true)",
        ),
        (
            plan.rank_order[3] != "dp",
            "rank_order",
            "-".join(plan.rank_order),
            "its device mesh is pp, dp, cp, tp from outside in (tp-cp-ep-dp-pp)",
        ),
        (
            plan.pp > 1 and plan.schedule not in TORCHTITAN_SCHEDULES,
            "schedule",
            plan.schedule,
            f"it runs {', '.join(TORCHTITAN_SCHEDULES)}",
        ),
        (
            plan.loss_chunks > 1,
            "loss_chunks",
            plan.loss_chunks,
            "it computes the loss in one piece (loss_chunks=1)",
        ),
        (plan.vocab_parallel and plan.pp > 1, "vocab_parallel", True, "the head stays on the last stage"),
        (
            plan.offload_optimizer,
            "offload_optimizer",
            True,
            "its CPU offload (training.enable_cpu_offload) moves parameters and gradients too",
        ),
        (plan.offload_activations, "offload_activations", True, "it has no activation offload"),
        (
            plan.recompute_num_layers is not None,
            "recompute_num_layers",
            plan.recompute_num_layers,
            "its layer-level AC checkpoints every k-th layer, not the first N",
        ),
        (work.dtype == "fp16", "dtype", "fp16", "it trains in bf16 or fp32"),
        (work.capacity_factor is not None, "capacity_factor", work.capacity_factor, "its MoE is dropless"),
    ]
    if work.dtype == "fp8":
        recipe = framework.fp8_recipe if framework is not None else "current"
        checks.append(
            (
                recipe not in TORCHTITAN_FP8,
                "fp8_recipe",
                recipe,
                "torchao float8 tensorwise (current scaling)",
            )
        )
    for bad, field_name, value, instead in checks:
        if bad:
            raise ExportRefused(stack, field_name, value, instead)


def _data_parallel(est: Estimate, stack: str) -> dict[str, Any]:
    """torchtitan's replicate/shard degrees: zero 0 replicates dp ways; zero 2/3 shard over zero_shard ranks of
    dp*cp (torchtitan folds cp into the FSDP mesh) and replicate over the rest (HSDP)."""
    plan = est.plan
    if plan.zero_stage == 0:
        return {"data_parallel_replicate_degree": plan.dp, "data_parallel_shard_degree": 1}
    shard = plan.shard_group
    if shard % plan.cp:
        raise ExportRefused(
            stack, "zero_shard", shard, f"its shard groups span all {plan.cp} cp ranks; use a multiple of cp"
        )
    out: dict[str, Any] = {
        "data_parallel_replicate_degree": plan.dp * plan.cp // shard,
        "data_parallel_shard_degree": shard // plan.cp,
    }
    if plan.zero_stage == 2:
        out["fsdp_reshard_after_forward"] = "never"
    return out


def _model_parts(est: Estimate) -> list[list[str]]:
    """The module names of each of the pp*vpp model chunks, in model order, with the layer split of the cost
    model (torchtitan's ``module_fqns_per_model_part``; llama3/qwen3/deepseek_v3 name them alike)."""
    counts = decoder_stage_layers(est.model, est.plan)
    parts, start = [], 0
    for i, n in enumerate(counts):
        part = ["tok_embeddings"] if i == 0 else []
        part += [f"layers.{k}" for k in range(start, start + n)]
        if i == len(counts) - 1:
            part += ["norm", "output"]
        parts.append(part)
        start += n
    return parts


def deepspeed_config(est: Estimate) -> dict[str, Any]:
    """``ds_config.json`` of the estimate's plan: ZeRO stage, optimizer offload, micro/global batch, precision.

    DeepSpeed's engine is data parallel (ZeRO); tensor, pipeline, context and expert parallelism need model
    code (Megatron-DeepSpeed, PipelineModule, Ulysses, DeepSpeed-MoE), so such plans are refused."""
    plan, work = est.plan, est.workload
    stack = "deepspeed"
    for degree in ("tp", "pp", "cp", "ep"):
        if getattr(plan, degree) > 1:
            raise ExportRefused(
                stack,
                degree,
                getattr(plan, degree),
                "ds_config runs ZeRO data parallelism; export --to megatron-core for tp/pp/cp/ep",
            )
    if plan.recompute == "selective" or plan.loss_chunks > 1 or plan.offload_activations:
        field_name = (
            "recompute"
            if plan.recompute == "selective"
            else "loss_chunks"
            if plan.loss_chunks > 1
            else "offload_activations"
        )
        raise ExportRefused(
            stack,
            field_name,
            getattr(plan, field_name),
            "its config has full checkpointing of the user's blocks only",
        )
    if plan.zero_shard is not None and plan.zero_shard != plan.dp and plan.zero_stage != 3:
        raise ExportRefused(
            stack, "zero_shard", plan.zero_shard, "hybrid sharding (MiCS) is offered for ZeRO-3"
        )
    zero: dict[str, Any] = {"stage": plan.zero_stage, "overlap_comm": True, "contiguous_gradients": True}
    if plan.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.zero_stage == 3 and plan.zero_shard is not None and plan.zero_shard != plan.dp:
        zero["mics_shard_size"] = plan.zero_shard
    config: dict[str, Any] = {
        "train_batch_size": work.global_batch_size,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": work.global_batch_size // (plan.dp * plan.micro_batch_size),
        "zero_optimization": zero,
        "gradient_clipping": 1.0,
        "steps_per_print": 1,
        "wall_clock_breakdown": True,
    }
    if work.dtype in ("bf16", "fp8"):
        if work.dtype == "fp8":
            raise ExportRefused(
                stack, "dtype", "fp8", "ds_config has no FP8 GEMMs (use Transformer Engine in the model)"
            )
        config["bf16"] = {"enabled": True}
    elif work.dtype == "fp16":
        config["fp16"] = {"enabled": True}
    if plan.recompute == "full":
        config["activation_checkpointing"] = {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
        }
    return config
