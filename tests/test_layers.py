"""The import-linter contracts of pyproject.toml ([tool.importlinter]): floors, rooms of the core, what the
core must not import, no cycles in the core. Each contract is its own test; a broken one fails with
import-linter's report (the offending imports with their lines)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = {
    c["id"]: c
    for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}

# Temporary: known violations waiting for their fix (module -> module in the reason).
_KNOWN_BROKEN: dict[str, str] = {}


def _lint_imports() -> str:
    beside = Path(sys.executable).with_name("lint-imports")
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    if not found:
        pytest.fail("lint-imports not found: install the dev extra (pip install -e '.[dev]')")
    return found


@pytest.mark.parametrize(
    "contract",
    [
        pytest.param(cid, marks=pytest.mark.xfail(strict=False, reason=_KNOWN_BROKEN[cid]))
        if cid in _KNOWN_BROKEN
        else cid
        for cid in CONTRACTS
    ],
)
def test_import_contract_is_kept(contract: str) -> None:
    proc = subprocess.run(
        [_lint_imports(), "--no-cache", "--no-logo", "--contract", contract],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"contract {CONTRACTS[contract]['name']!r} broken:\n{proc.stdout}\n{proc.stderr}"
    )
