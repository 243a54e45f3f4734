"""Write the long options of Megatron-LM's ``pretrain_gpt.py`` parser as the fixture
``tests/fixtures/launch/megatron_lm_core_r<VERSION>_args.txt`` (one ``NAME<TAB>flag|value|list<TAB>choices`` a line).

Megatron-LM's training arguments are not in the megatron-core wheel, and half of them are generated from config
dataclasses (``ArgumentGroupFactory``), so they are read from the real parser: check out a tag of
NVIDIA/Megatron-LM, then run (torch installed; GPU-only packages are stubbed, they only matter at run time)::

    python scripts/dump_megatron_args.py /path/to/Megatron-LM > args.txt

and put the provenance header (repo, tag, commit, path, date) on top.
"""

from __future__ import annotations

import argparse
import sys
import typing

from parser_dump import print_options, stub_packages  # scripts/parser_dump.py

STUBBED = (
    "triton",
    "transformer_engine",
    "apex",
    "einops",
    "flash_attn",
    "nvidia_resiliency_ext",
    "tensorstore",
    "zarr",
    "wandb",
    "onelogger",
)


def main() -> None:
    import torch
    import torch.distributed
    import torch.utils.flop_counter  # noqa: F401  (before the triton stub: torch probes for triton)

    torch.compile = lambda f=None, *a, **k: f if callable(f) else (lambda g: g)  # type: ignore[assignment]
    typing.override = lambda f: f  # type: ignore[attr-defined]  (Python 3.12 name used by Megatron-LM)
    stub_packages(STUBBED)
    sys.path.insert(0, sys.argv[1])
    sys.argv = ["pretrain_gpt.py"]
    from megatron.training.arguments import add_megatron_arguments

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    print_options(parser)


if __name__ == "__main__":
    main()
