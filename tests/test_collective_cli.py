"""``workbench collective`` through the real console script."""

from __future__ import annotations

import json

import pytest

BASE = ["collective", "--cluster", "dgx-h100", "--nodes", "16"]


def test_prints_time_algorithm_and_bandwidths(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    proc = workbench_cli(*BASE, "--op", "all_reduce", "--group", "8x16", "--bytes", "1GiB", check=True)
    assert "algorithm nvls_tree" in proc.stdout and "protocol Simple" in proc.stdout
    assert "time " in proc.stdout and "busbw" in proc.stdout


def test_json_keys_and_group_forms(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    proc = workbench_cli(
        *BASE, "--op", "all_to_all", "--group", "1x16", "--bytes", "64MiB", "--json", check=True
    )
    out = json.loads(proc.stdout)
    assert set(out) == {
        "cluster", "op", "bytes", "ranks", "stride", "time_s", "algorithm", "protocol",
        "algbw_bytes_per_s", "busbw_bytes_per_s",
    }  # fmt: skip
    assert (out["ranks"], out["stride"], out["bytes"]) == (16, 8, 64 * 2**20)
    assert out["busbw_bytes_per_s"] == pytest.approx(out["algbw_bytes_per_s"] * 15 / 16)
    plain = json.loads(
        workbench_cli(*BASE, "--group", "16", "--stride", "8", "--bytes", "1GB", "--json").stdout
    )
    assert (plain["ranks"], plain["stride"], plain["bytes"]) == (16, 8, 10**9)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--bytes", "1QB"], ["--bytes", "'1QB'", "GiB"]),
        (["--bytes", "1GiB", "--group", "3x16"], ["--group", "3x16"]),
        (["--bytes", "1GiB", "--group", "8x32"], ["--group", "need 256 devices", "has 128"]),
    ],
)
def test_bad_input_is_one_line(workbench_cli, args: list[str], words: list[str]) -> None:  # type: ignore[no-untyped-def]
    proc = workbench_cli(*BASE, *args)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert all(w in proc.stderr for w in words), proc.stderr
