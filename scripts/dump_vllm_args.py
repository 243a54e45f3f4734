"""Write the long options of vLLM's ``vllm serve`` parser (or of Dynamo's ``python3 -m dynamo.vllm`` worker parser)
as a fixture ``tests/fixtures/launch/vllm_<VERSION>_serve_args.txt`` (one ``NAME<TAB>flag|value|list<TAB>choices
<TAB>type`` a line), or parse an exported command with that real parser (``--check``).

vLLM's wheel needs a CUDA build to run, but its parser builds on CPU from the wheel's Python files: unpack the wheel
(``pip download --no-deps vllm==VERSION``, ``unzip -x '*.so'`` into WHEEL), install the pure packages its CLI
imports into DEPS (``pip install --no-deps --target DEPS`` cbor2 openai-harmony openai sniffio msgspec cloudpickle
pybase64 cachetools uvloop fastapi starlette opentelemetry-api opentelemetry-sdk opentelemetry-semantic-conventions
partial-json-parser xgrammar apache-tvm-ffi llguidance uvicorn watchfiles orjson), then, with torch and
transformers installed, ``VLLM_TARGET_DEVICE=cpu python scripts/dump_vllm_args.py WHEEL DEPS > args.txt`` (the CPU
target only lets ``DeviceConfig`` resolve a device while the parser computes its defaults; nothing is stubbed) and
put the provenance header on top. ``... WHEEL DEPS --dynamo DYNAMO`` (the unpacked ai-dynamo wheel) dumps the
``dynamo.vllm`` worker's parser: Dynamo's own groups plus vLLM's engine arguments, as its ``_parse_cli_args``
builds them.

Options are read from the parser's table of option strings, so the aliases vLLM registers but hides from
``--help`` (``--no-enable-X`` beside ``--disable-X``) are there. Types: the name of the argparse ``type`` callable
(``int``, ``float``, ``human_readable_int``, ``str``; ``optional:NAME`` for vLLM's ``optional_type(NAME)``, which
also takes ``None``). Two options take any string in the parser and are checked when vLLM builds its config, so
their choices are those lists: ``--kv-cache-dtype`` (the ``vllm.config.cache.CacheDType`` literal) and ``--quantization``
(``vllm.model_executor.layers.quantization.QUANTIZATION_METHODS``).

``... WHEEL DEPS --speculative`` writes ``vllm_<VERSION>_speculative_config.txt``: the fields of vLLM's
``SpeculativeConfig`` (the JSON object ``--speculative-config`` takes) with the choices of their Literal types.

``... WHEEL DEPS --check FILE`` parses FILE's command (a ``serve.sh``: the words after ``vllm serve``; a
``dynamo.yaml``: each worker's args) with the real parser and prints the parsed values.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any


def _type_name(action: argparse.Action) -> str:
    kind = action.type
    if kind is None:
        return ""
    name = getattr(kind, "__name__", type(kind).__name__)
    if name == "_optional_type" and kind.__closure__:  # vllm.engine.arg_utils.optional_type(return_type)
        inner = kind.__closure__[0].cell_contents
        return f"optional:{getattr(inner, '__name__', type(inner).__name__)}"
    return name


def _config_choices() -> dict[str, list[str]]:
    from typing import get_args

    from vllm.config.cache import CacheDType  # KV_CACHE_DTYPES, its mutable mirror, from vLLM 0.33
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    return {"--kv-cache-dtype": list(get_args(CacheDType)), "--quantization": list(QUANTIZATION_METHODS)}


def serve_parser() -> argparse.ArgumentParser:
    """The ``vllm serve`` subparser as ``vllm``'s main() builds it (vllm/entrypoints/cli/main.py)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    return ServeSubcommand().subparser_init(top.add_subparsers(dest="subparser"))


def dynamo_parser() -> tuple[argparse.ArgumentParser, Any]:
    """Dynamo's worker parser (dynamo/vllm/args.py ``_parse_cli_args``): its own groups and vLLM's engine args."""
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.vllm.backend_args import DynamoVllmArgGroup
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = argparse.ArgumentParser(allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(parser)
    DynamoVllmArgGroup().add_arguments(parser)
    engine = FlexibleArgumentParser(add_help=False)
    AsyncEngineArgs.add_cli_args(engine, async_args_only=False)
    for action in engine._actions:
        if action.option_strings:
            parser._add_action(action)
    return parser, engine


def _literal_values(annotation: Any) -> list[str]:
    """The string values of the ``Literal``s in an annotation (through unions; nested Literals flatten)."""
    from typing import Literal, get_args, get_origin

    if get_origin(annotation) is Literal:
        return [str(v) for v in get_args(annotation)]
    return [v for arg in get_args(annotation) for v in _literal_values(arg)]


def print_speculative_fields() -> None:
    """One ``FIELD<TAB>choices`` line per field of vLLM's ``SpeculativeConfig`` (the JSON ``--speculative-config``
    takes; vllm/config/speculative.py), choices from the field's Literal type."""
    import dataclasses
    import typing

    from vllm.config.speculative import SpeculativeConfig

    hints = typing.get_type_hints(SpeculativeConfig)
    for field in dataclasses.fields(SpeculativeConfig):
        if field.init:
            print(f"{field.name}\t{','.join(_literal_values(hints[field.name]))}")


def print_table(parser: argparse.ArgumentParser) -> None:
    config = _config_choices()
    for name, action in parser._option_string_actions.items():
        if not name.startswith("--"):
            continue
        many = action.nargs in ("+", "*") or isinstance(action.nargs, int) and action.nargs > 0
        kind = "flag" if action.nargs == 0 else "list" if many else "value"
        choices = [str(c) for c in action.choices] if action.choices else config.get(name, [])
        print(f"{name}\t{kind}\t{','.join(choices)}\t{_type_name(action)}")


def check(path: str, dynamo: bool) -> None:
    from pathlib import Path

    text = Path(path).read_text()
    if dynamo:
        import yaml
        from dynamo.vllm.args import parse_args

        for name, service in yaml.safe_load(text)["spec"]["services"].items():
            container = service["extraPodSpec"]["mainContainer"]
            if "args" in container:
                config = parse_args(container["args"])
                print(name, config.disaggregation_mode, vars(config.engine_args))
        return
    line = text[text.index("\n", text.index("HERE=")) :].replace("\\\n", " ")
    words = shlex.split(line)
    assert words[:2] == ["vllm", "serve"], words[:2]
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args

    args = serve_parser().parse_args(words[2:-1])  # less the trailing "$@"
    validate_parsed_serve_args(args)
    print(vars(args))


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("wheel")
    cli.add_argument("deps")
    cli.add_argument(
        "--dynamo", help="the unpacked ai-dynamo wheel: dump or check dynamo.vllm's worker parser"
    )
    cli.add_argument("--check", help="parse this serve.sh or dynamo.yaml with the real parser")
    cli.add_argument("--speculative", action="store_true", help="dump SpeculativeConfig's fields instead")
    opts = cli.parse_args()
    sys.path[:0] = [opts.wheel, opts.deps] + ([opts.dynamo] if opts.dynamo else [])
    if opts.check:
        check(opts.check, bool(opts.dynamo))
    elif opts.speculative:
        print_speculative_fields()
    else:
        print_table(dynamo_parser()[0] if opts.dynamo else serve_parser())


if __name__ == "__main__":
    main()
