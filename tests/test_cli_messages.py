"""Error messages: one line on stderr, ``workbench COMMAND: error: ...`` for usage errors, bad values and our
own bugs alike; control characters of a file name escaped; a directory or a FIFO given as an input file named
as such (and a FIFO never opened, so nothing hangs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from workbench_cli import main
from workbench_cli import schedule_cmd as schedule_mod
from workbench_cli._common import shown

ESTIMATE = [
    "estimate",
    "--model",
    "llama-3.1-8b",
    "--cluster",
    "dgx-h100",
    "--seq-len",
    "4096",
    "--global-batch",
    "16",
]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``workbench ARGS`` in this process: (exit code, stderr)."""
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKBENCH_DEBUG", raising=False)


@pytest.mark.parametrize(
    ("args", "prefix", "needle"),
    [
        ([*ESTIMATE, "--tp", "x"], "workbench estimate: error: Invalid value for '--tp'", "'x'"),
        (ESTIMATE[:5], "workbench estimate: error: Missing option", "--seq-len"),
        ([*ESTIMATE, "--bogus"], "workbench estimate: error: No such option", "--bogus"),
        (["nosuchcommand"], "workbench: error: No such command", "nosuchcommand"),
        (["show", "model", "llama-3.1-8b", "--seq-len", "0"], "workbench show model: error:", "--seq-len"),
        (
            ["schedule", "warp", "--pp", "2"],
            "workbench schedule: error: Invalid value for",
            "'warp' is not one",
        ),
    ],
)
def test_usage_error_is_one_line(
    args: list[str], prefix: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(args, capsys)
    line = one_line(err)
    assert code == 2 and line.startswith(prefix) and needle in line, line
    assert line.endswith(f"(see '{prefix.split(': error')[0]} -h')")
    assert "Usage:" not in err and "Try " not in err


def test_a_bare_group_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["show"], capsys)
    assert code == 2 and err.startswith("Usage: workbench show") and "error:" not in err


def test_usage_error_through_the_console_script(workbench_cli) -> None:
    proc = workbench_cli(*ESTIMATE, "--tp", "x")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "workbench estimate: error: Invalid value for '--tp': 'x' is not a valid integer. "
        "(see 'workbench estimate -h')\n"
    )


def test_every_error_has_the_same_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a bad value found by the core (ValueError)
    code, err = run(["show", "model", "llama-3.1-7b"], capsys)
    assert code == 1 and one_line(err).startswith("workbench show model: error: unknown model")
    # a refusal of the command itself (click.ClickException, printed by click as "Error: ..." before)
    code, err = run([*ESTIMATE, "--tp", "3", "--dp", "2"], capsys)
    assert code == 1 and one_line(err).startswith("workbench estimate: error: infeasible plan: ")
    # no feasible plan
    code, err = run(
        ["plan", "--model", "llama-3.1-405b", "--cluster", "dgx-a100", "--nodes", "1"]
        + ["--seq-len", "4096", "--global-batch", "64", "--top", "1"],
        capsys,
    )
    assert code == 1 and err == "workbench plan: error: no feasible plan under these constraints\n"
    # a bug of ours

    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(schedule_mod, "simulate", boom)
    code, err = run(["schedule", "1f1b", "--pp", "2", "--microbatches", "4"], capsys)
    assert code == 1
    assert one_line(err) == (
        "workbench schedule: error: internal error (RuntimeError): boom (set WORKBENCH_DEBUG=1 for the traceback)"
    )


def test_escape_characters_of_a_file_name_are_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = tmp_path / "a\x1b[31mred\nb.json"
    code, err = run(["show", "model", str(name)], capsys)
    line = one_line(err)
    assert code == 1 and "\x1b" not in err
    assert line.endswith("a\\x1b[31mred\\nb.json: no such model file"), line
    # the same in a message of the output checks
    (tmp_path / "t\x1b]0;x\x07.json").write_text("mine")
    code, err = run(
        [
            "schedule",
            "1f1b",
            "--pp",
            "2",
            "--microbatches",
            "4",
            "--trace",
            str(tmp_path / "t\x1b]0;x\x07.json"),
        ],
        capsys,
    )
    assert code == 1 and "\x1b" not in err and "\x07" not in err
    assert "t\\x1b]0;x\\x07.json exists; pass --force" in one_line(err)


def test_shown_escapes_only_what_a_terminal_would_act_on() -> None:
    assert shown("plain name/ü.json") == "plain name/ü.json"
    assert shown("a\tb\rc\x00d\x7fe\x9bf\u202eg") == "a\\tb\\rc\\x00d\\x7fe\\x9bf\\u202eg"


@pytest.fixture
def specials(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "folder.json"
    folder.mkdir()
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    return folder, fifo


CASES = [
    (["show", "model", "{}"], "model file"),
    ([*ESTIMATE[:4], "{}", *ESTIMATE[5:]], "cluster file"),
    (["schedule", "custom", "--from-csv", "{}"], "schedule CSV file"),
    (["validate", "--data", "{}"], "file"),
    ([*ESTIMATE, "--framework", "{}"], "framework file"),
    ([*ESTIMATE, "--kernels", "{}"], "kernel table file"),
    (["plan", *ESTIMATE[1:], "--calibration", "{}"], "calibration file"),
]


@pytest.mark.parametrize(("args", "what"), CASES, ids=[c[0][0] + "-" + c[1] for c in CASES])
def test_directory_and_fifo_are_named_and_never_opened(
    workbench_cli,
    specials: tuple[Path, Path],
    args: list[str],
    what: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder, fifo = specials
    # the FIFO through the console script, with a timeout: opening it would block forever
    proc = workbench_cli(*(a.replace("{}", str(fifo)) for a in args), timeout=60)
    assert proc.returncode == 1
    assert one_line(proc.stderr).endswith(
        f"{fifo}: is not a regular file (a FIFO, socket or device); a {what} must be one"
    ), proc.stderr
    code, err = run([a.replace("{}", str(folder)) for a in args], capsys)
    assert code != 0
    line = one_line(err)
    if "--from-csv" in args:  # click.Path(dir_okay=False) says so first
        assert line.endswith(
            f"Invalid value for '--from-csv': File '{folder}' is a directory. (see 'workbench schedule -h')"
        )
    elif "--kernels" in args:  # a folder is a microbench output: its kernels.toml is missing
        assert f"no such file {folder / 'kernels.toml'}" in line
    else:
        assert line.endswith(f"{folder}: is a directory, not a {what}"), line


@pytest.mark.parametrize(
    ("args", "code", "start"),
    [
        (["nosuchcommand"], 2, "workbench: error: No such command"),
        ([*ESTIMATE, "--tp", "x"], 2, "workbench estimate: error: Invalid value for '--tp'"),
        (
            [*ESTIMATE, "--micro-batch", "3"],
            1,
            "workbench estimate: error: infeasible plan: dp*micro_batch_size",
        ),
        ([*ESTIMATE, "--tp", "3"], 1, "workbench estimate: error: tp*pp*cp = 3 does not divide"),
        (["schedule", "1f1b", "--pp", "4", "--microbatches", "2"], 1, "workbench schedule: error: "),
    ],
)
def test_one_prefix_through_click_runner_and_console_script(
    args: list[str], code: int, start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Called through click (``CliRunner``, standalone mode) errors read as from the console script: one
    line, ``workbench COMMAND: error:``, never click's own ``Error:`` (a refusal such as an infeasible plan
    printed "Error: infeasible plan: ..." that way) nor a traceback."""
    from click.testing import CliRunner
    from workbench_cli import cli

    result = CliRunner().invoke(cli, args)
    assert result.exit_code == code, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no exception escaped
    line = one_line(result.stderr)
    assert line.startswith(start) and "Error:" not in result.stderr and "Traceback" not in result.stderr
    assert run(args, capsys) == (code, result.stderr)
