"""``workbench --help`` lists every command without importing any command's module (issue 51 item 10).

The table ``COMMAND_HELP`` that the listing reads must say what the commands themselves say: every command
the modules register is in it, under the module that registers it, and click shortens the table's sentence
to the same text it gets from the command's own help, at every width. The time is benchmarks/bench_cli_help.py's.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click
from click.testing import CliRunner

HEAVY = ("polars", "numpy", "workbench", "bokeh", "rich")


def _registered() -> dict[str, tuple[str, click.Command]]:
    """Every command the modules of ``COMMAND_MODULES`` register, by name: (module, command)."""
    import workbench_cli

    found: dict[str, tuple[str, click.Command]] = {}
    for module in workbench_cli.COMMAND_MODULES:
        group = click.Group()
        importlib.import_module(module).register(group)
        found.update({name: (module, cmd) for name, cmd in group.commands.items()})
    return found


def test_help_imports_no_command_module_nor_the_core() -> None:
    code = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "import workbench_cli\n"
        "result = CliRunner().invoke(workbench_cli.cli, ['--help'])\n"
        f"print(json.dumps([result.exit_code, result.output, [m for m in {HEAVY!r} if m in sys.modules],"
        " sorted(m for m in sys.modules if m.startswith('workbench_cli.'))]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    exit_code, text, heavy, loaded = json.loads(out.stdout)
    assert exit_code == 0 and "Commands:" in text
    assert heavy == [] and loaded == []
    import workbench_cli

    for name in workbench_cli.COMMAND_HELP:
        assert f"\n  {name} " in text, name


def test_table_matches_the_registered_commands() -> None:
    import workbench_cli

    registered = _registered()
    assert set(workbench_cli.COMMAND_HELP) == set(registered)
    for name, (module, cmd) in registered.items():
        listed_module, sentence = workbench_cli.COMMAND_HELP[name]
        assert listed_module == module, name
        stand_in = click.Command(name, help=sentence)
        for width in range(12, 160, 7):
            assert stand_in.get_short_help_str(width) == cmd.get_short_help_str(width), (name, width)


def test_listing_equals_clicks_own_with_every_module_loaded() -> None:
    """The lazy listing is the text click writes for a group holding the real commands."""
    import workbench_cli

    eager = click.Group(
        "workbench", help=workbench_cli.cli.help, context_settings=workbench_cli.cli.context_settings
    )
    eager.params = list(workbench_cli.cli.params)
    for _, (_, cmd) in sorted(_registered().items()):
        eager.add_command(cmd)
    lazy_help = CliRunner().invoke(workbench_cli.cli, ["--help"], terminal_width=100).output
    eager_help = CliRunner().invoke(eager, ["--help"], terminal_width=100).output
    assert lazy_help == eager_help


def test_a_command_runs_and_an_unknown_one_is_one_line() -> None:
    import workbench_cli

    ok = CliRunner().invoke(workbench_cli.cli, ["models", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output)
    bad = CliRunner().invoke(workbench_cli.cli, ["nosuch"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        "workbench: error: No such command 'nosuch'. (see 'workbench -h')"
    ]
