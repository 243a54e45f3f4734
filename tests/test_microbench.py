"""``workbench microbench --device cpu`` through the real console script: the kernel table and raw CSVs."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import torch
from workbench_backends.microbench import gemm_points
from workbench_backends.profile_record import guess_device_id

from workbench.presets.kernels import TABLE_FILE, load_kernel_table

pytestmark = pytest.mark.slow  # one quick CPU microbench (~5 s with the torch import)


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory, workbench_cli) -> Path:
    out = tmp_path_factory.mktemp("mb") / "cpu"
    workbench_cli("microbench", "--device", "cpu", "--quick", "--repeats", "3", "--out", str(out), check=True)
    return out


def test_table_loads_for_the_host_cpu(bench_dir: Path) -> None:
    table = load_kernel_table(bench_dir)
    assert table.device == guess_device_id(
        torch.device("cpu")
    )  # the id workbench profile files CPU runs under
    assert table.measured
    assert {"torch", "date", "command", "host_cpu", "num_threads"} <= set(table.provenance)
    assert table.provenance["command"].startswith("workbench microbench --device cpu")


def test_gemm_curves_are_sorted_fractions_rising_with_size(bench_dir: Path) -> None:
    table = load_kernel_table(bench_dir)
    assert "fp32" in table.gemm
    for dtype, points in table.gemm.items():
        flops = [x for x, _ in points]
        assert flops == sorted(flops) and len(set(flops)) == len(flops), dtype
        assert all(0 < f <= 1 for _, f in points), dtype
        # small GEMMs are dominated by call overhead and cache misses: the largest is more efficient
        assert points[-1][1] > points[0][1], (dtype, points)


def test_attention_table_has_sdpa_forward_and_backward(bench_dir: Path) -> None:
    table = load_kernel_table(bench_dir)
    sdpa = [t for t in table.attention if t.family == "sdpa"]
    assert {t.head_dim for t in sdpa} == {64, 128}
    for t in sdpa:
        assert t.causal and len(t.fwd_frac) == len(t.bwd_frac) == len(t.seq_len) >= 2
        assert all(0 < f <= 1 for f in (*t.fwd_frac, *t.bwd_frac))
    assert table.families("fp32") == ["sdpa"]


def test_hbm_fraction(bench_dir: Path) -> None:
    assert 0 < load_kernel_table(bench_dir).hbm_frac <= 1


def test_raw_csvs(bench_dir: Path) -> None:
    gemm = pl.read_csv(bench_dir / "gemm.csv")
    assert (gemm["flop"] == 2 * gemm["m"] * gemm["n"] * gemm["k"]).all()
    assert (gemm["achieved_flop_per_s"] - gemm["flop"] / gemm["time_s"]).abs().max() < 1e-6 * gemm[
        "achieved_flop_per_s"
    ].max()
    assert (gemm["m"] != gemm["k"]).any()  # the rectangular tokens x width shapes are there too
    attn = pl.read_csv(bench_dir / "attention.csv")
    expected_fwd = 4 * attn["seq_len"] ** 2 * attn["head_dim"] * attn["heads"] * attn["batch"] / 2
    assert (attn["fwd_flop"] == expected_fwd).all() and (attn["bwd_flop"] == 2.5 * attn["fwd_flop"]).all()
    table = load_kernel_table(bench_dir)
    fp32 = gemm.filter(pl.col("dtype") == "fp32")
    assert gemm_points(fp32) == table.gemm["fp32"]  # the table is the documented reduction of the raw rows


def test_second_run_refuses_to_overwrite(bench_dir: Path, workbench_cli) -> None:
    res = workbench_cli("microbench", "--device", "cpu", "--quick", "--out", str(bench_dir))
    assert res.returncode == 1
    assert str(bench_dir / TABLE_FILE) in res.stderr and "--force" in res.stderr
    assert "Traceback" not in res.stderr


def test_cuda_without_gpu_is_a_clear_error(tmp_path: Path, workbench_cli) -> None:
    if torch.cuda.is_available():
        return  # nothing to refuse on a GPU host
    res = workbench_cli("microbench", "--device", "cuda", "--out", str(tmp_path / "gpu"))
    assert res.returncode == 1 and "no CUDA device" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "gpu").exists()


def test_gemm_points_keep_the_best_shape_per_size_bin() -> None:
    rows = pl.DataFrame(
        {"flop": [1e6, 1.1e6, 1e9, 2.0e9], "peak_frac": [0.2, 0.3, 1.4, 0.5]}
    )  # 1.1e6 shares 1e6's bin; 1e9 and 2e9 are a factor 2 apart: separate bins; 1.4 is clipped to 1
    assert gemm_points(rows) == ((1.1e6, 0.3), (1e9, 1.0), (2.0e9, 0.5))
