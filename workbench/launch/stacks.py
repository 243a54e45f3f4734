"""The launch targets, how a framework profile maps to one, and the record of an exported folder."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

TRAINING_STACKS = ("megatron-core", "megatron-bridge", "torchtitan", "deepspeed")
"""Training stacks ``workbench export --to`` writes launch files for."""

SERVING_ENGINES = ("vllm", "sglang", "trtllm", "dynamo")
"""Serving engines ``workbench serve export --engine`` writes launch files for (dynamo: disaggregated plans)."""

_STACK_OF_PROFILE = (
    ("megatron", "megatron-core"),
    ("nemo", "megatron-bridge"),
    ("mcore", "megatron-core"),
    ("torchtitan", "torchtitan"),
    ("deepspeed", "deepspeed"),
)
"""Framework-profile id prefixes and the stack each runs on, first match wins (``stack_for_framework``)."""


class ExportRefused(ValueError):
    """A plan the stack cannot run: names the stack, the plan field and what the stack runs instead."""

    def __init__(self, stack: str, field_name: str, value: object, instead: str) -> None:
        self.stack, self.field, self.value, self.instead = stack, field_name, value, instead
        super().__init__(f"{stack} cannot run {field_name}={value}: {instead}")


def stack_for_framework(framework_id: str) -> str:
    """The training stack (one of ``TRAINING_STACKS``) a framework profile id belongs to, by its prefix:
    ``megatron-*`` -> megatron-core (``--to megatron-bridge`` exports the same plan as a Bridge recipe),
    ``torchtitan-*`` -> torchtitan, ``deepspeed-*`` -> deepspeed.

    Raises ValueError for a profile of no stack (``generic``, llm-foundry, ...), naming the stacks to pick."""
    key = framework_id.lower()
    for prefix, stack in _STACK_OF_PROFILE:
        if key.startswith(prefix):
            return stack
    raise ValueError(
        f"framework profile {framework_id!r} belongs to no stack that export writes; name one with --to "
        f"({', '.join(TRAINING_STACKS)})"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRef:
    """How the launch files name the model: a Hugging Face id and/or a local config.json path."""

    name: str
    """The workbench's model name (preset id or the config's name)."""
    hf_id: str | None = None
    """``org/name`` on the Hugging Face hub, when known (from the preset's ``_source``)."""
    config_path: str | None = None
    """A local config.json the user gave instead of a preset."""

    @property
    def reference(self) -> str:
        """What a stack's ``--model``/tokenizer option gets: the HF id, else the config's folder, else the name."""
        if self.hf_id:
            return self.hf_id
        if self.config_path:
            return self.config_path.rsplit("/", 1)[0] if "/" in self.config_path else "."
        return self.name


def hf_id_from_source(source: str) -> str | None:
    """``org/name`` from a ``https://huggingface.co/org/name/...`` URL in a preset's ``_source``, else None."""
    marker = "huggingface.co/"
    at = source.find(marker)
    if at < 0:
        return None
    parts = source[at + len(marker) :].split("/")
    if len(parts) < 2 or not parts[0] or not parts[1] or parts[0] in ("docs", "blog", "spaces", "datasets"):
        return None
    return f"{parts[0]}/{parts[1].split()[0]}"


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchFolder:
    """What an export writes: file name -> text (UTF-8), and which files are scripts (mode 0755)."""

    stack: str
    files: dict[str, str] = field(default_factory=dict)
    executable: tuple[str, ...] = ()


def shell_words(words: list[str], indent: str = "  ") -> str:
    """``words`` quoted for bash, one option (with its values) per line, joined by backslash-newlines."""
    lines: list[list[str]] = []
    for word in words:
        if word.startswith("--") or not lines:
            lines.append([word])
        else:
            lines[-1].append(word)
    return (" \\\n" + indent).join(" ".join(_quoted(w) for w in line) for line in lines)


def _quoted(word: str) -> str:
    """A word for bash: a ``${VAR...}`` reference in double quotes (expanded), anything else quoted as is."""
    return f'"{word}"' if word.startswith("$") else shlex.quote(word)


def torchrun_script(
    *,
    title: str,
    num_nodes: int,
    devices_per_node: int,
    program: list[str],
    env: dict[str, str],
    prelude: str = "",
) -> str:
    """A bash script that starts ``program`` under torchrun on this node (run it on every node, with
    ``NODE_RANK``/``MASTER_ADDR`` set, or through the sbatch file, which sets them from Slurm).

    The c10d rendezvous and ``--rdzv-id`` follow torchrun's documented multi-node usage (PyTorch docs,
    "torchrun (Elastic Launch)")."""
    checks = "".join(f': "${{{k}:?{v}}}"\n' for k, v in env.items())
    body = shell_words(
        [
            "torchrun",
            "--nnodes",
            str(num_nodes),
            "--nproc-per-node",
            str(devices_per_node),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "${MASTER_ADDR:-127.0.0.1}:${MASTER_PORT:-29500}",
            "--rdzv-id",
            "${RDZV_ID:-workbench-export}",
            *program,
        ]
    )
    return (
        f"#!/usr/bin/env bash\n# {title}\n# Written by `workbench export`; check README.md before the first run.\n"
        f'set -euo pipefail\nHERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)\n{checks}{prelude}{body}\n'
    )


def sbatch_script(*, num_nodes: int, devices_per_node: int, script: str) -> str:
    """A Slurm batch file: one task per node, each running ``script`` (a ``torchrun_script``) with the first
    node as the rendezvous host."""
    return (
        "#!/usr/bin/env bash\n"
        f"#SBATCH --nodes={num_nodes}\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node={devices_per_node}\n"
        "#SBATCH --exclusive\n"
        "# Written by `workbench export`: `sbatch launch.sbatch` from this folder.\nset -euo pipefail\n"
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        "export MASTER_PORT=${MASTER_PORT:-29500} RDZV_ID=${SLURM_JOB_ID:-workbench-export}\n"
        f'srun --kill-on-bad-exit=1 bash "$SLURM_SUBMIT_DIR/{script}"\n'
    )
