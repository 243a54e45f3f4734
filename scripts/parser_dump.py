"""Shared by scripts/dump_megatron_args.py and scripts/dump_sglang_args.py: stub GPU-only packages so a stack's
argument parser builds on a CPU machine, and print a parser's long options as fixture lines."""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterable
from unittest import mock


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self, name: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> object:
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__, module.__version__ = [], spec, spec.name, "99.0.0"
        return module

    def exec_module(self, module: object) -> None:
        return None


def stub_packages(names: Iterable[str]) -> None:
    """Make ``import NAME`` (and its submodules) give a mock for each top-level name (import torch first: it
    probes for triton)."""
    sys.meta_path.insert(0, _Stubs(names))


def print_options(parser: argparse.ArgumentParser, *, sort_choices: bool = False) -> None:
    """One ``NAME<TAB>flag|value|list<TAB>choices`` line per long option (``sort_choices``: for parsers whose
    choices are sets)."""
    for action in parser._actions:
        many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
        kind = "flag" if action.nargs == 0 else "list" if many else "value"
        values = [str(c) for c in action.choices] if action.choices else []
        choices = ",".join(sorted(values) if sort_choices else values)
        for name in action.option_strings:
            if name.startswith("--"):
                print(f"{name}\t{kind}\t{choices}")
