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


def test_memory_rows(bench_dir: Path) -> None:
    """memory.csv: every op with its nominal bytes, time and bandwidth; the table's HBM fraction is the copy's."""
    rows = pl.read_csv(bench_dir / "memory.csv")
    assert {"copy", "add", "silu", "softmax", "layer_norm", "rms_norm", "adamw_step"} <= set(rows["op"])
    numel = rows["numel"][0]
    nominal = {"copy": 8 * numel, "add": 6 * numel, "silu": 4 * numel, "adamw_step": 28 * (numel // 4)}
    for op, nbytes in nominal.items():
        assert rows.filter(pl.col("op") == op)["bytes"][0] == nbytes, op
    assert ((rows["bytes_per_s"] - rows["bytes"] / rows["time_s"]).abs() < 1e-6 * rows["bytes_per_s"]).all()
    table = load_kernel_table(bench_dir)
    copy_frac = rows.filter(pl.col("op") == "copy")["hbm_frac"][0]
    assert table.hbm_frac == pytest.approx(min(1.0, copy_frac))


def test_layer_gemms_are_the_three_passes_of_each_linear() -> None:
    """A linear layer of fan-in i and fan-out o on T tokens: forward (T, o, i), input gradient (T, i, o), weight
    gradient (o, i, T): the same 2*T*i*o FLOPs; QKV out = (heads + 2 kv_heads) * head_dim / tp (GQA)."""
    from dataclasses import replace as dc_replace

    from workbench_backends.microbench import default_sweep, layer_gemms

    sweep = dc_replace(
        default_sweep("cpu", quick=True),
        layer_models=(("m", 512, 1536, 8, 2),),
        layer_tp=(2,),
        layer_tokens=(64,),
    )
    gemms = layer_gemms(sweep)
    assert len(gemms) == 4 * 3
    by_what = {g.what: g for g in gemms}
    qkv = by_what["m tp2 qkv fwd"]
    assert (qkv.m, qkv.n, qkv.k, qkv.layout) == (64, (8 + 2 * 2) * 64 // 2, 512, "nt")
    for linear in ("qkv", "proj", "fc1", "fc2"):
        fwd, dgrad, wgrad = (by_what[f"m tp2 {linear} {p}"] for p in ("fwd", "dgrad", "wgrad"))
        assert (dgrad.m, dgrad.n, dgrad.k, dgrad.layout) == (fwd.m, fwd.k, fwd.n, "nn")
        assert (wgrad.m, wgrad.n, wgrad.k, wgrad.layout) == (fwd.n, fwd.k, fwd.m, "tn")
    assert (by_what["m tp2 fc2 fwd"].n, by_what["m tp2 fc2 fwd"].k) == (512, 1536 // 2)


def test_attention_tables_leave_the_grouped_query_rows_in_the_csv() -> None:
    from workbench_backends.microbench import attention_tables

    rows = pl.DataFrame(
        {
            "family": ["fa2", "fa2", "fa2", "cudnn"],
            "dtype": ["bf16"] * 4,
            "head_dim": [128] * 4,
            "seq_len": [1024, 2048, 1024, 1024],
            "heads": [16] * 4,
            "kv_heads": [16, 16, 2, 16],
            "fwd_flop_per_s": [2e14, 3e14, 9e14, 4e14],
            "bwd_flop_per_s": [1e14, 2e14, 9e14, 3e14],
            "kernel": ["k"] * 4,
        }
    )
    tables = {t.family: t for t in attention_tables(rows, 1e15, source="s")}
    assert tables["fa2"].seq_len == (1024.0, 2048.0) and tables["fa2"].fwd_frac == (0.2, 0.3)
    assert tables["cudnn"].bwd_frac == (0.3,)
