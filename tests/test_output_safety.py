"""Output files: written at the end and only on success, never over a file without --force (not even one that
appeared while the command ran), two outputs on one path refused up front, folders refilled only when empty
or from an earlier run. Commands run in-process through ``workbench_cli.main`` (fast, and steps can be
patched); the profile folder check also runs through the console script."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from workbench_cli import _common, main
from workbench_cli import estimate_cmd as estimate_mod
from workbench_cli import schedule_cmd as schedule_mod
from workbench_cli._common import (
    atomic_write_text,
    check_output_folder,
    write_folder,
    write_outputs,
)

ESTIMATE = [
    "estimate",
    "--model",
    "llama-3.1-8b",
    "--cluster",
    "dgx-h100",
    "--nodes",
    "1",
    "--seq-len",
    "4096",
    "--global-batch",
    "16",
    "--tp",
    "2",
    "--pp",
    "2",
]
PLAN = [
    "plan",
    "--model",
    "llama-3.1-8b",
    "--cluster",
    "dgx-h100",
    "--nodes",
    "1",
    "--seq-len",
    "4096",
    "--global-batch",
    "32",
    "--top",
    "2",
]
SCHEDULE = ["schedule", "1f1b", "--pp", "4", "--microbatches", "8"]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``workbench ARGS`` in this process: (exit code, stdout, stderr)."""
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_DEBUG", raising=False)


# Two outputs on one path: refused before any work, one line naming both options, nothing written.


@pytest.mark.parametrize(
    ("args", "options"),
    [
        ([*ESTIMATE, "--report", "x", "--trace", "x"], ("--trace", "--report")),
        ([*PLAN, "--csv", "x", "--report", "x"], ("--csv", "--report")),
        ([*SCHEDULE, "--trace", "x", "--csv", "./x"], ("--trace", "--csv")),  # same file, spelled twice
        ([*ESTIMATE, "--report", "tables/plans.csv", "--csv", "tables"], ("--report", "--csv")),
        ([*ESTIMATE, "--report", "tables", "--csv", "tables"], ("--report", "--csv")),
    ],
)
def test_two_outputs_on_one_path_are_refused(
    args: list[str], options: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(args, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and all(o in err for o in options), err
    assert "both name" in err
    assert listing(tmp_path) == []


def test_clash_is_found_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("the schedule was built before the outputs were checked")

    monkeypatch.setattr(schedule_mod, "build_schedule", never)
    code, _, err = run([*SCHEDULE, "--trace", "same", "--csv", "same"], capsys)
    assert code == 2 and "both name" in err


# A failing command leaves no file and no temporary file.


@pytest.mark.parametrize(
    "args",
    [
        [*ESTIMATE, "--tp", "3", "--dp", "2", "--report", "r.html", "--trace", "t.json", "--csv", "tables"],
        [*PLAN, "--top", "0", "--csv", "p.csv", "--report", "r.html"],
        ["plan", "--model", "llama-3.1-405b", "--cluster", "dgx-a100", "--nodes", "1"]
        + ["--seq-len", "4096", "--global-batch", "64", "--top", "2", "--csv", "p.csv"],  # nothing fits
        ["schedule", "1f1b", "--pp", "4", "--microbatches", "2", "--trace", "t.json", "--csv", "s.csv"],
    ],
    ids=["estimate-infeasible", "plan-top-0-report", "plan-no-feasible", "schedule-rule"],
)
def test_a_failing_command_leaves_nothing(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(args, capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert listing(tmp_path) == []


def test_a_failing_report_writes_no_trace_either(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outputs are rendered first and written together: the trace is not left behind by a failed report."""
    import workbench_widgets.report as report

    def broken(**_: Any) -> str:
        raise RuntimeError("report would link an external resource")

    monkeypatch.setattr(report, "render_report", broken)
    code, _, err = run([*ESTIMATE, "--trace", "t.json", "--report", "r.html", "--csv", "tables"], capsys)
    assert code == 1 and "external resource" in err
    assert listing(tmp_path) == []


def test_estimate_writes_every_output_on_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([*ESTIMATE, "--trace", "t.json", "--report", "r.html", "--csv", "a/tables"], capsys)
    assert code == 0, err
    assert listing(tmp_path) == [
        "a",
        "a/tables",
        "a/tables/activation.csv",
        "a/tables/memory.csv",
        "a/tables/plans.csv",
        "a/tables/timeline.csv",
        "r.html",
        "t.json",
    ]
    assert oct((tmp_path / "t.json").stat().st_mode & 0o777) == oct(0o666 & ~_common._umask())


# A file that appears at an output path while the command runs is left alone.


def _appear(path: Path, real: Callable[..., Any]) -> Callable[..., Any]:
    def step(*args: Any, **kwargs: Any) -> Any:
        path.write_text("user data")
        return real(*args, **kwargs)

    return step


def test_schedule_leaves_a_file_that_appeared_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(schedule_mod, "simulate", _appear(tmp_path / "s.csv", schedule_mod.simulate))
    code, _, err = run([*SCHEDULE, "--trace", "t.json", "--csv", "s.csv"], capsys)
    assert code == 1 and "s.csv appeared while the command ran" in err and "--force" in err
    assert (tmp_path / "s.csv").read_text() == "user data"
    assert listing(tmp_path) == ["s.csv"]  # the trace written before it was taken back; no temporary files


def test_estimate_leaves_a_report_that_appeared_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(estimate_mod, "build_inputs", _appear(tmp_path / "r.html", estimate_mod.build_inputs))
    code, _, err = run([*ESTIMATE, "--report", "r.html"], capsys)
    assert code == 1 and "appeared while the command ran" in err
    assert (tmp_path / "r.html").read_text() == "user data" and listing(tmp_path) == ["r.html"]


def test_force_replaces_a_file_that_appeared(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(schedule_mod, "simulate", _appear(tmp_path / "s.csv", schedule_mod.simulate))
    code, _, err = run([*SCHEDULE, "--csv", "s.csv", "--force"], capsys)
    assert code == 0, err
    assert (tmp_path / "s.csv").read_text().startswith("0F0") and listing(tmp_path) == ["s.csv"]


def test_existing_output_is_refused_before_the_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.json").write_text("mine")
    monkeypatch.setattr(schedule_mod, "simulate", None)  # would fail if reached
    code, _, err = run([*SCHEDULE, "--trace", "t.json"], capsys)
    assert code == 1 and "t.json exists; pass --force" in err
    assert (tmp_path / "t.json").read_text() == "mine"


# The writing functions themselves (what run_cmd and any later command share).


def test_write_outputs_never_replaces_without_force(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"

    def writer(tmp: Path) -> None:  # the target appears between the start check and the final move
        target.write_text("theirs")
        tmp.write_text("ours")

    with pytest.raises(click.ClickException, match="appeared while the command ran"):
        write_outputs({target: writer}, force=False)
    assert target.read_text() == "theirs" and listing(tmp_path) == ["out.txt"]
    atomic_write_text(target, "ours", force=True)
    assert target.read_text() == "ours" and listing(tmp_path) == ["out.txt"]


def test_write_outputs_takes_back_what_it_wrote_on_failure(tmp_path: Path) -> None:
    def broken(tmp: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_outputs(
            {tmp_path / "a.txt": lambda p: p.write_text("a"), tmp_path / "new" / "b.txt": broken}, force=False
        )
    assert listing(tmp_path) == []  # no file, no temporary file, no folder made on the way


def test_write_outputs_without_hard_links_still_refuses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a file system without hard links the name is claimed with O_EXCL instead."""

    def no_link(*_: Any) -> None:
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(os, "link", no_link)
    atomic_write_text(tmp_path / "a.txt", "first", force=False)
    assert (tmp_path / "a.txt").read_text() == "first"
    with pytest.raises(click.ClickException, match="appeared"):
        atomic_write_text(tmp_path / "a.txt", "second", force=False)
    assert (tmp_path / "a.txt").read_text() == "first" and listing(tmp_path) == ["a.txt"]


def test_output_folder_rules(tmp_path: Path) -> None:
    check_output_folder(tmp_path / "new", marker="manifest.json", force=False)
    (tmp_path / "empty").mkdir()
    check_output_folder(tmp_path / "empty", marker="manifest.json", force=False)
    user = tmp_path / "user"
    user.mkdir()
    (user / "ops.parquet").write_text("mine")
    for force in (False, True):
        with pytest.raises(click.ClickException, match="holds no manifest.json"):
            check_output_folder(user, marker="manifest.json", force=force)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "manifest.json").write_text("{}")
    with pytest.raises(click.ClickException, match="--force"):
        check_output_folder(earlier, marker="manifest.json", force=False)
    check_output_folder(earlier, marker="manifest.json", force=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(click.ClickException, match="not a folder"):
        check_output_folder(tmp_path / "file", marker="manifest.json", force=True)


def _fill(names: dict[str, str]) -> Callable[[Path], None]:
    def fill(folder: Path) -> None:
        for name, text in names.items():
            (folder / name).write_text(text)

    return fill


def test_write_folder_moves_in_at_the_end(tmp_path: Path) -> None:
    out = tmp_path / "a" / "prof"
    written = write_folder(
        out, _fill({"ops.parquet": "1", "manifest.json": "{}"}), force=False, marker="manifest.json"
    )
    assert sorted(p.name for p in written) == ["manifest.json", "ops.parquet"]
    assert listing(tmp_path) == ["a", "a/prof", "a/prof/manifest.json", "a/prof/ops.parquet"]
    # refill an earlier run with --force: stale files of that run go, other files stay
    (out / "collectives.parquet").write_text("old")
    (out / "kernels.toml").write_text("from calibrate")
    write_folder(
        out,
        _fill({"ops.parquet": "2", "manifest.json": "{}"}),
        force=True,
        marker="manifest.json",
        owned=("manifest.json", "ops.parquet", "collectives.parquet"),
    )
    assert listing(out) == ["kernels.toml", "manifest.json", "ops.parquet"]
    assert (out / "ops.parquet").read_text() == "2"


def test_write_folder_failure_leaves_nothing(tmp_path: Path) -> None:
    def broken(folder: Path) -> None:
        (folder / "ops.parquet").write_text("half")
        raise RuntimeError("measuring failed")

    with pytest.raises(RuntimeError):
        write_folder(tmp_path / "prof", broken, force=False, marker="manifest.json")
    assert listing(tmp_path) == []


def test_write_folder_refuses_files_that_appeared(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    out.mkdir()

    def fill(folder: Path) -> None:
        (out / "notes.txt").write_text("mine")  # someone writes into the empty folder meanwhile
        (folder / "manifest.json").write_text("{}")

    with pytest.raises(click.ClickException, match="holds no manifest.json"):
        write_folder(out, fill, force=True, marker="manifest.json")
    assert listing(tmp_path) == ["prof", "prof/notes.txt"]


# Folder commands through the console script: refused before any measuring, files untouched.


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_profile_refuses_a_folder_of_user_files(workbench_cli, tmp_path: Path, force: list[str]) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    files = {"ops.parquet": "my table", "device.toml": "my device", "cluster.toml": "my cluster"}
    for name, text in files.items():
        (folder / name).write_text(text)
    proc = workbench_cli("profile", "--model", "llama-3.1-8b", "--quiet", "--out", str(folder), *force)
    assert proc.returncode == 1 and "holds no manifest.json" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert {p.name: p.read_text() for p in folder.iterdir()} == files
    assert listing(tmp_path) == ["mine", *(f"mine/{n}" for n in sorted(files))]


def test_microbench_refuses_a_folder_of_user_files(workbench_cli, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    proc = workbench_cli("microbench", "--device", "cpu", "--quick", "--out", str(tmp_path), "--force")
    assert proc.returncode == 1 and "holds no kernels.toml" in proc.stderr, proc.stderr
    assert listing(tmp_path) == ["notes.txt"]


def test_calibrate_refuses_an_existing_table_before_reading(workbench_cli, tmp_path: Path) -> None:
    (tmp_path / "k.toml").write_text("mine")
    proc = workbench_cli(
        "calibrate",
        "--profile",
        str(tmp_path / "none"),
        "--device",
        "host-cpu",
        "--out",
        str(tmp_path / "k.toml"),
    )
    assert proc.returncode == 1 and "k.toml exists; pass --force" in proc.stderr
    assert (tmp_path / "k.toml").read_text() == "mine"
