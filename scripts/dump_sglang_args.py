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
import sys

from parser_dump import print_options, stub_packages  # scripts/parser_dump.py

STUBBED = ("triton",)


def main() -> None:
    import torch.distributed
    import torch.utils.flop_counter  # noqa: F401  (before the triton stub: torch probes for triton)

    stub_packages(STUBBED)
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    print_options(parser, sort_choices=True)


if __name__ == "__main__":
    main()
