"""Write the ConfigContainer override keys of Megatron-Bridge (``section.field``, and ``mixed_precision=NAME`` for
each registered precision recipe) as the fixture ``tests/fixtures/launch/megatron_bridge_<VERSION>_fields.txt``.

The fields are read from the source with ``ast`` (no import): put these files of the pinned releases under ROOT
(paths as in their repositories) and run ``python scripts/dump_bridge_fields.py ROOT``:
NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/{config,mixed_precision}.py and
src/megatron/bridge/models/gpt_provider.py; NVIDIA/Megatron-LM megatron/core/{model_parallel_config.py,
transformer/transformer_config.py, distributed/distributed_data_parallel_config.py, optimizer/optimizer_config.py,
datasets/blended_megatron_dataset_config.py, datasets/gpt_dataset.py} and megatron/training/config/.
A dataclass's fields include those of its bases found in these files (import aliases followed).
"""

import ast
import glob
import sys
from pathlib import Path

ROOT = sys.argv[1]
classes = {}
alias = {}
for path in glob.glob(f"{ROOT}/**/*.py", recursive=True):
    tree = ast.parse(Path(path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.asname:
                    alias[a.asname] = a.name
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fields = [
                n.target.id
                for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            ]
            bases = [
                b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else None
                for b in node.bases
            ]
            classes.setdefault(node.name, []).append((fields, bases))


def all_fields(name, seen=()):
    out = set()
    for fields, bases in classes.get(name, []):
        out |= set(fields)
        for b in bases:
            b = alias.get(b, b)
            if b and b not in seen:
                out |= all_fields(b, seen + (name,))
    return out


sections = {
    "model": ["GPTModelProvider"],
    "train": ["TrainingConfig"],
    "ddp": ["DistributedDataParallelConfig"],
    "optimizer": ["OptimizerConfig"],
    "dist": ["DistributedInitConfig"],
    "dataset": ["GPTDatasetConfig"],
}
for sec, names in sections.items():
    f = set().union(*(all_fields(n) for n in names))
    for x in sorted(f):
        if not x.startswith("_"):
            print(f"{sec}.{x}")
tree = ast.parse(Path(f"{ROOT}/src/megatron/bridge/training/mixed_precision.py").read_text())
for node in tree.body:
    if isinstance(node, ast.FunctionDef) and any(
        isinstance(d, ast.Name) and d.id == "register" for d in node.decorator_list
    ):
        print(f"mixed_precision={node.name}")
