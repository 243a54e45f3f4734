"""Hard edges of the command line (issue 52): names from files and arguments reach the terminal escaped (no
title set, no rich markup); undefined figures are null and "n/a"; a failed command leaves no output; the bad
inputs of the fuzz round get the clear one-line error the rest of the CLI gives."""

from __future__ import annotations

import csv
import json
import os
import warnings
from pathlib import Path

import pytest
from workbench_cli import main

from workbench.validate import DEFAULT_DATA

ROOT = Path(__file__).resolve().parents[1]
EVIL = "dgx\x1b]0;PWNED\x07x"
"""An OSC 0 sequence: a terminal that receives it sets its window title to PWNED."""


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``workbench ARGS`` in this process: (exit code, stdout, stderr)."""
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_no_control(text: str) -> None:
    """No ESC, BEL or other C0/C1 control character except newline (rich's own colours are off: not a tty)."""
    bad = [c for c in text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) < 0xA0]
    assert not bad, f"control characters reach the terminal: {bad!r}"


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKBENCH_DEBUG", raising=False)


@pytest.fixture
def evil_cluster(tmp_path: Path) -> Path:
    text = (ROOT / "profiles/clusters/dgx-h100.toml").read_text()
    text = text.replace('id = "dgx-h100"', f"id = {json.dumps(EVIL)}").replace(
        'name = "NVIDIA DGX H100"', 'name = "[bold red]rich[/] markup"'
    )
    path = tmp_path / "evil.toml"
    path.write_text(text)
    return path


@pytest.fixture
def evil_model(tmp_path: Path) -> Path:
    config = json.loads((ROOT / "profiles/models/llama-3.1-8b.json").read_text())
    path = tmp_path / f"{EVIL}[bold]b[reverse]c.json"  # the model is named after its file
    path.write_text(json.dumps(config))
    return path


def test_estimate_and_plan_escape_a_cluster_id(
    evil_cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = [
        "--model",
        "llama-3.1-8b",
        "--cluster",
        str(evil_cluster),
        "--seq-len",
        "4096",
        "--global-batch",
        "16",
    ]
    code, out, err = run(["estimate", *common], capsys)
    assert code == 0, err
    assert_no_control(out + err)
    assert "\\x1b]0;PWNED\\x07" in out  # the name is shown, escaped
    code, out, err = run(["plan", *common, "--top", "2"], capsys)
    assert code == 0, err
    assert_no_control(out + err)
    assert "\\x1b]0;PWNED\\x07" in out


def test_show_model_and_plan_escape_a_model_name_and_rich_markup(
    evil_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["show", "model", str(evil_model)], capsys)
    assert code == 0, err
    assert_no_control(out + err)
    assert "\\x1b]0;PWNED\\x07" in out
    # rich markup in a name is printed as typed, not applied (a [link] would be gone from the text)
    assert "[bold]b[reverse]c" in out
    code, out, err = run(
        [
            "plan",
            "--model",
            str(evil_model),
            "--cluster",
            "dgx-h100",
            "--seq-len",
            "4096",
            "--global-batch",
            "16",
            "--top",
            "1",
        ],
        capsys,
    )
    assert code == 0, err
    assert_no_control(out + err)


def test_validate_escapes_a_row_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with DEFAULT_DATA.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    row = next(r for r in rows if r["id"].startswith("NARAYANAN21"))
    row["id"] = EVIL
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)
    code, out, err = run(["validate", "--data", str(path)], capsys)
    assert code == 0, err
    assert_no_control(out + err)
    assert "PWNED" in out


def test_rich_tables_take_names_as_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    from workbench_cli._common import print_table

    print_table("[red]t[/red]", ["[b]c[/b]"], [["[link=https://x.example]y[/link]\x1b[2J"]])
    out = capsys.readouterr().out
    assert "[red]t[/red]" in out and "[b]c[/b]" in out and "[link=https://x.example]y[/link]\\x1b[2J" in out
    assert_no_control(out)


# ---- undefined figures and failed commands -----------------------------------------------------------
SERVE_ONE_TOKEN = [
    "serve",
    "estimate",
    "--model",
    "llama-3.1-8b",
    "--cluster",
    "dgx-h100",
    "--input-tokens",
    "128",
    "--output-tokens",
    "1",
    "--num-requests",
    "16",
]


def test_serve_estimate_one_output_token_gives_null_and_na(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.html"
    code, out, err = run([*SERVE_ONE_TOKEN, "--json", "--report", str(report)], capsys)
    assert code == 0, err
    summary = json.loads(out)
    # TPOT is the time per output token after the first: undefined with one output token
    assert summary["tpot_s_mean"] is None and summary["tpot_s_p99"] is None
    assert summary["ttft_s_mean"] > 0
    assert report.is_file()
    code, out, err = run(SERVE_ONE_TOKEN, capsys)
    assert code == 0, err
    tpot = next(line for line in out.splitlines() if "TPOT" in line)
    assert tpot.count("n/a") == 4 and "nan" not in out


def test_a_failed_serve_estimate_leaves_no_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench_cli import serve_cmd

    def broken(_obj: object) -> str:
        raise ValueError("printing failed")

    monkeypatch.setattr(serve_cmd, "json_text", broken)
    report = tmp_path / "r.html"
    code, _out, err = run([*SERVE_ONE_TOKEN, "--json", "--report", str(report)], capsys)
    assert code == 1 and "printing failed" in err
    assert not report.exists()


def test_json_safe_turns_undefined_figures_into_null() -> None:
    from workbench_cli._common import json_text

    doc = json.loads(json_text({"a": float("nan"), "b": [1.5, float("inf")], "c": (float("-inf"),), "d": 2}))
    assert doc == {"a": None, "b": [1.5, None], "c": [None], "d": 2}


# ---- bad input gets a clear error --------------------------------------------------------------------
def _validation_header_and_row() -> tuple[list[str], dict[str, str]]:
    with DEFAULT_DATA.open(newline="") as fh:
        reader = csv.DictReader(fh)
        row = next(r for r in reader if r["id"].startswith("NARAYANAN21"))
        return list(reader.fieldnames or ()), row


def test_validate_refuses_a_duplicated_header_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, row = _validation_header_and_row()
    path = tmp_path / "dup.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*header, "tp"])
        writer.writerow([*(row[c] for c in header), "64"])
    code, _out, err = run(["validate", "--data", str(path)], capsys)
    assert code == 1
    assert "more than once" in err and "'tp'" in err and str(path) in err


def test_validate_reads_a_csv_with_a_byte_order_mark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, row = _validation_header_and_row()
    plain, bom = tmp_path / "plain.csv", tmp_path / "bom.csv"
    for path, encoding in ((plain, "utf-8"), (bom, "utf-8-sig")):  # utf-8-sig writes the mark
        with path.open("w", newline="", encoding=encoding) as fh:
            writer = csv.DictWriter(fh, fieldnames=header)
            writer.writeheader()
            writer.writerow(row)
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf")
    code_plain, out_plain, err = run(["validate", "--data", str(plain), "--json"], capsys)
    assert code_plain == 0, err
    code_bom, out_bom, err = run(["validate", "--data", str(bom), "--json"], capsys)
    assert code_bom == 0, err
    assert json.loads(out_bom) == json.loads(out_plain)


DILOCO = [
    "diloco",
    "--model",
    "llama-3.1-8b",
    "--cluster",
    "dgx-h100",
    "--seq-len",
    "4096",
    "--global-batch",
    "64",
    "--workers",
    "4",
    "--inner-steps",
    "100",
    "--link-GBps",
    "1",
]


def test_diloco_refuses_an_overlap_longer_than_the_inner_loop(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run([*DILOCO, "--overlap", "streaming", "--overlap-steps", "1000"], capsys)
    assert code == 1
    assert "overlap_steps (tau = 1000) must be <= inner_steps (H = 100)" in err
    code, _out, err = run([*DILOCO, "--overlap", "streaming", "--overlap-steps", "100", "--json"], capsys)
    assert code == 0, err


def test_mixed_plan_refuses_top_0_with_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.html"
    code, _out, err = run(
        [
            "plan",
            "--model",
            "llama-3.1-8b",
            "--cluster",
            "dgx-h100:1+dgx-a100:1",
            "--seq-len",
            "4096",
            "--global-batch",
            "64",
            "--top",
            "0",
            "--report",
            str(report),
        ],
        capsys,
    )
    assert code == 2 and "--report needs at least one refined plan" in err
    assert not report.exists()


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_a_dangling_symlink_at_an_output_path_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "r.html"
    link.symlink_to(tmp_path / "missing" / "x.html")
    code, _out, err = run(
        [
            "estimate",
            "--model",
            "llama-3.1-8b",
            "--cluster",
            "dgx-h100",
            "--seq-len",
            "4096",
            "--global-batch",
            "16",
            "--report",
            str(link),
        ],
        capsys,
    )
    assert code == 1
    assert "is a symbolic link to" in err and "which does not exist" in err and "appeared" not in err
    assert link.is_symlink()


def test_show_model_refuses_a_huge_seq_len(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(["show", "model", "llama-3.1-8b", "--seq-len", "99999999999999999999"], capsys)
    assert code == 2 and "--seq-len" in err and "16777216" in err


def test_collective_over_one_rank_moves_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["collective", "--cluster", "dgx-h100", "--group", "1", "--bytes", "1GiB"]
    code, out, err = run(args, capsys)
    assert code == 0, err
    assert "inf" not in out and "one rank" in out
    code, out, err = run([*args, "--json"], capsys)
    doc = json.loads(out)
    assert doc["time_s"] == 0.0 and doc["algbw_bytes_per_s"] is None and doc["busbw_bytes_per_s"] is None


def test_swarm_prints_no_numpy_warning(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "swarm",
        "--model",
        "llama-3.1-8b",
        "--stages",
        "8",
        "--peers",
        "rtx4090-24gb:24+a100-sxm4-80gb:8",
        "--link-Mbps",
        "1e-9",
        "--failure-rate-per-hour",
        "1",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would become an internal error here
        code, _out, err = run(args, capsys)
    assert "RuntimeWarning" not in err and "internal error" not in err
    assert code == 1 and len(err.strip().splitlines()) == 1


def test_useful_frac_overflow_is_its_limit() -> None:
    import numpy as np

    from workbench.hetero.swarm_model import useful_frac

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = useful_frac(np.array([0.0, 1.0, 1e6]), np.array([1.0, 1.0, 1.0]))
    assert got[0] == 1.0 and got[1] == pytest.approx(1 / (np.e - 1)) and got[2] == 0.0
