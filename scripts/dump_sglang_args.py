"""Write the long options of SGLang's server parser as ``tests/fixtures/launch/sglang_<VERSION>_server_args.txt``
(one ``NAME<TAB>flag|value|list<TAB>choices`` a line).

SGLang needs a GPU build to run, but its parser builds on CPU: unpack the wheel
(``pip download --no-deps sglang==VERSION`` and unzip it into DIR), install its small pure dependencies the parser
imports into DEPS (``pip install --target DEPS msgspec orjson pybase64 starlette``), then, with torch installed,
``python scripts/dump_sglang_args.py DIR DEPS > args.txt`` (Triton, GPU-only, is stubbed) and put the provenance
header on top.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import sys
from unittest import mock


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, name: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        return (
            importlib.machinery.ModuleSpec(name, self, is_package=True)
            if name.split(".")[0] == "triton"
            else None
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> object:
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__, module.__version__ = [], spec, spec.name, "99.0.0"
        return module

    def exec_module(self, module: object) -> None:
        return None


def main() -> None:
    import torch.distributed
    import torch.utils.flop_counter  # noqa: F401  (before the triton stub: torch probes for triton)

    sys.meta_path.insert(0, _Stubs())
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    for action in parser._actions:
        many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
        kind = "flag" if action.nargs == 0 else "list" if many else "value"
        choices = ",".join(sorted(map(str, action.choices))) if action.choices else ""  # some are sets
        for name in action.option_strings:
            if name.startswith("--"):
                print(f"{name}\t{kind}\t{choices}")


if __name__ == "__main__":
    main()
