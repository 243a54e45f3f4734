"""A training estimate -> the folder that launches its plan on one stack (``export_training``).

Every folder holds ``prediction.json`` (what the workbench predicted, read back by ``workbench compare``),
``README.md`` (what to check before the first run), ``launch.sh`` (torchrun on one node; run it on every node)
and ``launch.sbatch`` (Slurm), plus the stack's own files.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

import tomli_w

from workbench.launch import megatron, titan
from workbench.launch.stacks import TRAINING_STACKS, LaunchFolder, ModelRef, sbatch_script, torchrun_script

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate
    from workbench.specs.framework import FrameworkProfile

PREDICTION_FILE = "prediction.json"
"""The file that marks an export folder (``--force`` may refill a folder holding it)."""

PREDICTION_FORMAT = "parallelism-workbench.prediction"

EXPORT_FILES = (
    "README.md",
    PREDICTION_FILE,
    "launch.sh",
    "launch.sbatch",
    "pretrain_gpt.args",
    "overrides.txt",
    "job.toml",
    "ds_config.json",
    "serve.sh",
    "llm_api_options.yaml",
    "dynamo.yaml",
)
"""Every file an export may write: ``--force`` removes those an earlier export left and this one does not write."""

PRELUDE = {
    "megatron-core": 'mapfile -t ARGS < "$HERE/pretrain_gpt.args"\n'
    'DATA_ARGS=(--mock-data)\nif [[ -n "${DATA_PATH:-}" ]]; then DATA_ARGS=(--data-path "$DATA_PATH"); fi\n',
    "megatron-bridge": 'mapfile -t OVERRIDES < "$HERE/overrides.txt"\n',
}
"""Lines the launch script runs before torchrun (reading the argument files into bash arrays)."""


def prediction_record(
    kind: str, summary: dict[str, Any], *, stack: str, model: ModelRef, specs: dict[str, Any], command: str
) -> dict[str, Any]:
    """The ``prediction.json`` object: ``summary`` (SI units, as ``--json`` prints it) and the specs it came from."""
    return {
        "format": PREDICTION_FORMAT,
        "version": 1,
        "kind": kind,
        "stack": stack,
        "model_ref": dataclasses.asdict(model),
        "command": command,
        "summary": summary,
        **specs,
    }


def training_specs(est: Estimate, framework: FrameworkProfile | None) -> dict[str, Any]:
    """The model, cluster, workload and plan of ``est`` as plain JSON values (for the validation row)."""
    plain = json.loads(
        json.dumps(
            {
                "model": dataclasses.asdict(est.model),
                "workload": dataclasses.asdict(est.workload),
                "plan": dataclasses.asdict(est.plan),
            },
            default=str,
        )
    )
    plain["plan"]["describe"] = est.plan.describe()
    plain["cluster"] = {
        "id": est.cluster.id,
        "device": est.cluster.device.id,
        "num_nodes": est.cluster.num_nodes,
        "devices_per_node": est.cluster.devices_per_node,
        "num_devices": est.cluster.num_devices,
    }
    plain["framework"] = framework.id if framework is not None else None
    return plain


def export_training(
    est: Estimate,
    stack: str,
    model: ModelRef,
    *,
    framework: FrameworkProfile | None = None,
    command: str = "",
) -> LaunchFolder:
    """The launch folder of ``est``'s plan on ``stack`` (one of ``TRAINING_STACKS``).

    Raises ``ExportRefused`` (a ValueError naming the stack, the field and what it runs instead) for a plan the
    stack cannot run, ValueError for an unknown stack or a plan on fewer devices than the cluster holds."""
    if stack not in TRAINING_STACKS:
        raise ValueError(f"unknown stack {stack!r}; allowed: {', '.join(TRAINING_STACKS)}")
    cluster = est.cluster
    if est.plan.num_devices != cluster.num_devices:
        raise ValueError(
            f"the plan uses {est.plan.num_devices} devices, the cluster has {cluster.num_devices}; a launch runs on "
            "whole nodes: give a plan for every device"
        )
    if framework is not None:  # the plan's choices among the stack's offers (the FP8 recipe)
        framework = framework.running(est.plan)
    files, program, env, notes = _stack_files(est, stack, model, framework)
    prelude = PRELUDE.get(stack, "")
    nodes, per_node = cluster.num_nodes, cluster.devices_per_node
    files["launch.sh"] = torchrun_script(
        title=f"{stack}: {est.plan.describe()} on {nodes} x {per_node} {cluster.device.id}",
        num_nodes=nodes,
        devices_per_node=per_node,
        program=program,
        env=env,
        prelude=prelude,
    )
    files["launch.sbatch"] = sbatch_script(num_nodes=nodes, devices_per_node=per_node, script="launch.sh")
    record = prediction_record(
        "training",
        est.summary(),
        stack=stack,
        model=model,
        specs=training_specs(est, framework),
        command=command,
    )
    files[PREDICTION_FILE] = json.dumps(record, indent=1, allow_nan=False, default=str) + "\n"
    files["README.md"] = _readme(est, stack, model, framework, env, notes, sorted(files))
    return LaunchFolder(stack=stack, files=files, executable=("launch.sh", "launch.sbatch"))


def _stack_files(
    est: Estimate, stack: str, model: ModelRef, framework: FrameworkProfile | None
) -> tuple[dict[str, str], list[str], dict[str, str], list[str]]:
    """(files, the program torchrun starts, required environment variables with their meaning, README notes)."""
    if stack == "megatron-core":
        args = megatron.model_args(est.model, est.workload.seq_len) + megatron.plan_args(est, framework)
        program = [
            "$MEGATRON_LM/pretrain_gpt.py",
            "${ARGS[@]}",
            "${DATA_ARGS[@]}",
            "--tokenizer-type",
            "HuggingFaceTokenizer",
            "--tokenizer-model",
            "${TOKENIZER:-" + model.reference + "}",
            "--lr",
            "${LR:-1.0e-4}",
            "--train-iters",
            "${TRAIN_ITERS:-50}",
            "--log-interval",
            "1",
            "--log-throughput",
            "--log-memory-to-tensorboard",
            "--eval-iters",
            "0",
        ]
        env = {"MEGATRON_LM": f"a Megatron-LM checkout at tag {megatron.MEGATRON_RELEASE}"}
        notes = [
            "The model is built from the architecture arguments in pretrain_gpt.args: compare them with "
            "the model's config.json (rope scaling, sliding windows and norms beyond these are not exported).",
            "Without DATA_PATH the run uses --mock-data (same step time; set DATA_PATH to an indexed dataset "
            "prefix for real data).",
        ]
        return {"pretrain_gpt.args": "\n".join(args) + "\n"}, program, env, notes
    if stack == "megatron-bridge":
        override = megatron.bridge_override(est, framework)
        lines = [f"{key}={_dot_value(v)}" for key, v in _dotted(override)]
        program = [
            "$MEGATRON_BRIDGE/scripts/training/run_recipe.py",
            "--model",
            "$BRIDGE_MODEL",
            "--mode",
            "pretrain",
            "--dataset",
            "${DATASET:-mock}",
            "${OVERRIDES[@]}",
        ]
        env = {
            "MEGATRON_BRIDGE": f"a Megatron-Bridge checkout at tag {megatron.BRIDGE_RELEASE}",
            "BRIDGE_MODEL": f"the Bridge recipe model for {model.reference} (run_recipe.py --model)",
        }
        notes = [
            "overrides.txt holds ConfigContainer KEY=VALUE overrides, applied after the recipe's defaults."
        ]
        return {"overrides.txt": "\n".join(lines) + "\n"}, program, env, notes
    if stack == "torchtitan":
        job = titan.torchtitan_job(est, framework, f"./assets/hf/{model.reference.rsplit('/', 1)[-1]}")
        program = ["-m", "torchtitan.train", "--job.config_file", "$HERE/job.toml"]
        env = {}
        notes = [
            f"Download the model's tokenizer (and weights for a warm start) into {job['model']['hf_assets_path']} "
            f"(torchtitan's scripts/download_hf_assets.py --repo_id {model.reference}); run from the torchtitan "
            f"{titan.TORCHTITAN_RELEASE} checkout (pip install torchtitan=={titan.TORCHTITAN_RELEASE[1:]})."
        ]
        return {"job.toml": tomli_w.dumps(job)}, program, env, notes
    config = titan.deepspeed_config(est)
    program = ["$TRAIN_SCRIPT", "--deepspeed", "--deepspeed_config", "$HERE/ds_config.json"]
    env = {
        "TRAIN_SCRIPT": f"your training script (it builds {model.reference} and calls deepspeed.initialize)"
    }
    notes = [
        "DeepSpeed builds no model: TRAIN_SCRIPT loads it and passes ds_config.json to deepspeed.initialize."
    ]
    if est.plan.recompute == "full":
        notes.append(
            "Full recompute: the script must checkpoint every layer (e.g. model.gradient_checkpointing_enable())."
        )
    return {"ds_config.json": json.dumps(config, indent=1) + "\n"}, program, env, notes


def _dotted(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out += _dotted(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _dot_value(value: Any) -> str:
    """A value as OmegaConf's dotlist reads it: true/false, null, [a,b], numbers and bare strings."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_dot_value(v) for v in value) + "]"
    return str(value)


def _readme(
    est: Estimate,
    stack: str,
    model: ModelRef,
    framework: FrameworkProfile | None,
    env: dict[str, str],
    notes: list[str],
    names: list[str],
) -> str:
    s = est.summary()
    lines = [
        f"# Launch files: {model.name} on {stack}",
        "",
        f"Plan `{est.plan.describe()}` on {est.cluster.num_nodes} node(s) x {est.cluster.devices_per_node} "
        f"{est.cluster.device.id} ({est.cluster.id}), sequence {est.workload.seq_len}, global batch "
        f"{est.workload.global_batch_size}, {est.workload.dtype}.",
        "",
        f"Predicted by the workbench ({s['backend']} backend, framework profile "
        f"{framework.id if framework is not None else 'generic'}): step time {s['step_time_s']:.3f} s, "
        f"{s['tokens_per_s']:,.0f} tokens/s, MFU {s['mfu']:.1%}, peak memory {s['peak_memory_bytes'] / 2**30:.1f} GiB "
        "per device. `prediction.json` holds the whole prediction.",
        "",
        "## Before the first run, check",
        f"- the model: {megatron.describe_model(model)};",
        "- the data path and the tokenizer (they are not part of the plan);",
        *(f"- `{k}`: {v};" for k, v in env.items()),
        *(f"- {n}" for n in notes),
        "",
        "## Run",
        "- one node at a time: `MASTER_ADDR=<first node> NODE_RANK=<k> bash launch.sh` on every node;",
        "- Slurm: `sbatch launch.sbatch`.",
        "",
        "## Then compare",
        "`workbench compare RUN_LOG --prediction prediction.json` lays the measured step time, throughput and memory",
        "beside this prediction (`--append-row FILE` adds the run to a validation CSV).",
        "",
        "Files: " + ", ".join(f"`{n}`" for n in [*names, "README.md"]) + ".",
        "",
    ]
    return "\n".join(lines)
