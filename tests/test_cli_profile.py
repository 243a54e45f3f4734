"""``workbench profile`` / ``calibrate`` / ``estimate --backend torch-profile`` through the real console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = (
    pytest.mark.slow
)  # records a real profile through the console script (~20 s alone, more on a busy host)

REPO = Path(__file__).resolve().parents[1]
WORKBENCH = Path(sys.executable).parent / "workbench"


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [str(WORKBENCH), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("prof") / "tiny"
    res = _run(
        "profile",
        "--model",
        "llama-3.1-8b",
        "--layers",
        "2",
        "--hidden",
        "128",
        "--micro-batch",
        "1,2",
        "--seq-len",
        "64",
        "--repeats",
        "3",
        "--warmup",
        "1",
        "--threads",
        "1",
        "--quiet",
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    return out


def test_profile_writes_folder(profile_dir: Path) -> None:
    manifest = json.loads((profile_dir / "manifest.json").read_text())
    assert manifest["base_model"] == "llama-3.1-8b" and manifest["overrides"] == {
        "num_layers": 2,
        "hidden_size": 128,
    }
    assert manifest["model"]["name"] == "llama-3.1-8b-L2-H128"
    assert {"device_name", "torch_version", "cuda_version", "host", "created_at", "shapes", "dtype"} <= set(
        manifest
    )
    assert len(manifest["shapes"]) == 2
    for name in ("ops.parquet", "config.json", "device.toml", "cluster.toml"):
        assert (profile_dir / name).is_file()


def test_profile_refuses_overwrite(profile_dir: Path) -> None:
    res = _run("profile", "--model", "llama-3.1-8b", "--out", str(profile_dir), "--quiet")
    assert res.returncode == 1 and "--force" in res.stderr and "Traceback" not in res.stderr


def test_estimate_with_profile(profile_dir: Path) -> None:
    res = _run(
        "estimate",
        "--backend",
        "torch-profile",
        "--profile",
        str(profile_dir),
        "--model",
        str(profile_dir / "config.json"),
        "--cluster",
        str(profile_dir / "cluster.toml"),
        "--dp",
        "1",
        "--seq-len",
        "64",
        "--global-batch",
        "4",
        "--micro-batch",
        "2",
        "--dtype",
        "fp32",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["backend"] == "torch-profile" and summary["step_time_s"] > 0


def test_estimate_without_matching_profile_says_how(profile_dir: Path) -> None:
    res = _run(
        "estimate",
        "--backend",
        "torch-profile",
        "--profile",
        str(profile_dir),
        "--model",
        "llama-3.1-8b",
        "--cluster",
        "dgx-h100",
        "--seq-len",
        "64",
        "--global-batch",
        "8",
        "--tp",
        "8",
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "workbench profile --model llama-3.1-8b --device cuda" in res.stderr


def test_calibrate_writes_loadable_file(profile_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "cal.toml"
    res = _run(
        "calibrate", "--profile", str(profile_dir), "--device", "host-cpu", "--out", str(target), "--json"
    )
    assert res.returncode == 0, res.stderr
    fit = json.loads(res.stdout)
    assert fit["error_after_frac"] >= 0 and fit["error_before_frac"] >= 0
    from workbench.presets.kernels import load_kernel_table

    table = load_kernel_table(target)
    assert table.device == "host-cpu" and table.measured
    assert [list(p) for p in next(iter(table.gemm.values()))] == fit["matmul"]
    bad = _run(
        "calibrate",
        "--profile",
        str(profile_dir),
        "--device",
        "h200-sxm-141gb",
        "--out",
        str(tmp_path / "x.toml"),
    )
    assert bad.returncode == 1 and "measured on 'host-cpu'" in bad.stderr


def test_bad_input_is_one_line() -> None:
    res = _run("profile", "--model", "llama-3.1-8b", "--tp", "a,b", "--out", "/tmp/never")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    res = _run("profile", "--model", "llama-3.1-8b", "--hidden", "100", "--out", "/tmp/never-2")
    assert res.returncode == 1 and "--hidden must be a multiple of 64" in res.stderr
    res = _run("profile", "--model", "llama-3.1-8b", "--device", "cuda", "--out", "/tmp/never-3")
    if not _cuda():
        assert res.returncode == 1 and "no CUDA device" in res.stderr


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def test_calibrate_starts_from_a_microbench_table(profile_dir: Path, tmp_path: Path) -> None:
    """``workbench microbench --device cpu`` writes a table that ``calibrate --kernels`` reads: the error
    before the fit is the error of that table, so it differs from a fit started from the preset's curve."""
    bench = tmp_path / "mb"
    res = _run("microbench", "--device", "cpu", "--quick", "--out", str(bench))
    assert res.returncode == 0, res.stderr
    runs = []
    for name, extra in (("from_table", ["--kernels", str(bench)]), ("from_preset", [])):
        out = _run(
            "calibrate",
            "--profile",
            str(profile_dir),
            "--device",
            "host-cpu",
            "--out",
            str(tmp_path / f"{name}.toml"),
            "--json",
            *extra,
        )
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    assert runs[0]["error_before_frac"] != pytest.approx(runs[1]["error_before_frac"])
