"""The measurements committed from a lent H100 (``profiles/measured/*-h100-*``), read on the CPU: the kernel
table laid over the published one, the torch-profile backend on the H100 op profiles, and the raw rows behind
both."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import polars as pl
import pytest
from workbench_backends.microbench import attention_flop, gemm_points

from workbench.cost.flops import matmul_efficiency_frac
from workbench.estimate.registry import get_backend
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_device, load_model
from workbench.presets.kernels import device_kernel_tables, load_kernel_table, overlay
from workbench.specs.kernels import AttentionTable, KernelTable
from workbench.specs.plan import ParallelPlan, Workload

MEASURED = Path(__file__).resolve().parents[1] / "profiles" / "measured"
KERNELS = MEASURED / "kernels-h100-sxm5-80gb"
PROFILE_8B = MEASURED / "llama-3.1-8b-h100-bf16"
H100 = "h100-sxm5-80gb"
H200 = "h200-sxm-141gb"


TABLES = [
    pytest.param(MEASURED / "kernels-h100-sxm5-80gb", H100, "NVIDIA H100 80GB HBM3", id="h100"),
    pytest.param(MEASURED / "kernels-h200-sxm-141gb", H200, "NVIDIA H200", id="h200"),
]
"""Committed microbench folders: (folder, device preset, the GPU name nvidia-smi gave)."""


@pytest.mark.parametrize(("folder", "device", "gpu"), TABLES)
def test_the_table_is_a_measurement_with_its_provenance(folder: Path, device: str, gpu: str) -> None:
    table = load_kernel_table(folder)
    assert table.device == device and table.measured
    prov = table.provenance
    assert prov["gpu"] == gpu and prov["capability"] == "9.0"
    for key in ("torch", "cuda", "driver", "cudnn", "date", "command", "nvidia_smi power.limit [W]"):
        assert prov[key], key


@pytest.mark.parametrize(("folder", "device", "gpu"), TABLES)
def test_gemm_curves_are_the_documented_reduction_of_the_raw_rows(
    folder: Path, device: str, gpu: str
) -> None:
    """The table's points are the best shape per log2-FLOP bin of gemm.csv, as fractions of the datasheet
    dense peak of the device preset (H100 and H200: 989.4 TFLOP/s bf16, 1978.9 fp8)."""
    rows = pl.read_csv(folder / "gemm.csv")
    table = load_kernel_table(folder)
    preset = load_device(device)
    assert (rows["flop"] == 2 * rows["m"] * rows["n"] * rows["k"]).all()
    for dtype in ("bf16", "fp8"):
        part = rows.filter(pl.col("dtype") == dtype)
        peak = preset.peak(dtype)
        assert (part["peak_frac"] - part["achieved_flop_per_s"] / peak).abs().max() < 1e-12
        assert gemm_points(part) == table.gemm[dtype]
    # the layer GEMMs of the three Llama 3.1 sizes, each as forward, input gradient and weight gradient
    passes = rows.filter(pl.col("what").str.contains(" tp")).with_columns(
        pl.col("what").str.split(" ").list.last().alias("pass")
    )
    assert set(passes["pass"]) == {"fwd", "dgrad", "wgrad"}
    assert set(passes["layout"].filter(passes["dtype"] == "bf16")) == {"nt", "nn", "tn"}


@pytest.mark.parametrize(("folder", "device", "gpu"), TABLES)
def test_attention_tables_are_the_mha_rows_per_back_end(folder: Path, device: str, gpu: str) -> None:
    rows = pl.read_csv(folder / "attention.csv")
    table = load_kernel_table(folder)
    peak = load_device(device).peak("bf16")
    expected = [
        attention_flop(seq_len=s, head_dim=d, heads=h, batch=b)
        for s, d, h, b in rows.select("seq_len", "head_dim", "heads", "batch").iter_rows()
    ]
    assert rows["fwd_flop"].to_list() == expected
    assert set(rows["family"]) == {"fa2", "cudnn"}  # torch's flash (FlashAttention-2) and cuDNN back-ends
    assert (rows["kv_heads"] < rows["heads"]).any()  # grouped-query rows are measured beside the tables
    for t in table.attention:
        mha = rows.filter(
            (pl.col("family") == t.family)
            & (pl.col("head_dim") == t.head_dim)
            & (pl.col("kv_heads") == pl.col("heads"))
        ).sort("seq_len")
        assert t.seq_len == tuple(float(s) for s in mha["seq_len"])
        assert t.fwd_frac == pytest.approx([f / peak for f in mha["fwd_flop_per_s"]])
        assert t.bwd_frac == pytest.approx([f / peak for f in mha["bwd_flop_per_s"]])


@pytest.mark.parametrize(("folder", "device", "gpu"), TABLES)
def test_memory_rows_and_the_hbm_fraction(folder: Path, device: str, gpu: str) -> None:
    rows = pl.read_csv(folder / "memory.csv")
    assert {"copy", "add", "silu", "softmax", "layer_norm", "rms_norm", "adamw_step"} <= set(rows["op"])
    assert ((rows["bytes_per_s"] - rows["bytes"] / rows["time_s"]).abs() < 1e-6 * rows["bytes_per_s"]).all()
    copy = rows.filter(pl.col("op") == "copy")
    hbm = load_device(device).hbm_bytes_per_s
    assert load_kernel_table(folder).hbm_frac == pytest.approx(float(copy["bytes_per_s"][0]) / hbm)


def test_h200_and_h100_tables_agree_where_the_datasheets_do() -> None:
    """Two GPUs measured on two machines, three days apart: the H200 has the H100 SXM's GH100 tensor cores and
    clocks (NVIDIA H200 datasheet: 989 TFLOP/s dense BF16, 1,979 FP8, as the H100 SXM), so wherever a GEMM
    fills the GPU (>= 1e10 FLOPs) the curves agree within 3% on average and 10% at worst (the largest shapes
    run into the 700 W power limit, which each part holds differently); its HBM3e is 4.8 TB/s against 3.35, so the
    copy moves 4.8/3.35 = 1.43x the bytes per second, within 5%."""
    h100, h200 = (load_kernel_table(MEASURED / f"kernels-{d}") for d in (H100, H200))
    for dtype in ("bf16", "fp8"):
        gaps = [
            frac / float(matmul_efficiency_frac(flop, h100.gemm[dtype])) - 1
            for flop, frac in h200.gemm[dtype]
            if flop >= 1e10
        ]
        assert len(gaps) >= 10 and max(map(abs, gaps)) < 0.10
        assert sum(map(abs, gaps)) / len(gaps) < 0.03
    copies = [
        pl.read_csv(MEASURED / f"kernels-{d}" / "memory.csv").filter(pl.col("op") == "copy")
        for d in (H100, H200)
    ]
    ratio = float(copies[1]["bytes_per_s"][0]) / float(copies[0]["bytes_per_s"][0])
    assert ratio == pytest.approx(4.8 / 3.35, rel=0.05)


def test_the_cost_model_reads_the_measurement_for_the_h100_and_keeps_published_families() -> None:
    """cuDNN attention at head_dim 128 and 8K comes from attention.csv; FlashAttention-3 (not measured: no
    flash_attn_3 package on the device) stays the published table's."""
    tables = device_kernel_tables()
    h100 = tables[H100]
    published = load_kernel_table(H100)
    rows = pl.read_csv(KERNELS / "attention.csv").filter(
        (pl.col("family") == "cudnn")
        & (pl.col("head_dim") == 128)
        & (pl.col("seq_len") == 8192)
        & (pl.col("kv_heads") == pl.col("heads"))
    )
    peak = load_device(H100).peak("bf16")
    got = h100.attention_fracs(("cudnn",), dtype="bf16", head_dim=128, causal=True, seq_len=8192.0)
    assert got is not None and got[0] == "cudnn"
    assert float(got[1]) == pytest.approx(float(rows["fwd_flop_per_s"][0]) / peak)
    assert float(got[2]) == pytest.approx(float(rows["bwd_flop_per_s"][0]) / peak)
    fa3 = [t for t in h100.attention if t.family == "fa3"]
    assert fa3 and fa3 == [t for t in published.attention if t.family == "fa3"]
    cal = load_calibration()
    curve = cal.gemm_curve(load_cluster("dgx-h100").device, "bf16")
    for flop, frac in h100.gemm["bf16"]:
        assert float(matmul_efficiency_frac(flop, curve)) == pytest.approx(frac)
    assert tables["h800-sxm5-80gb"] == load_kernel_table("h800-sxm5-80gb")  # other devices: published only


def _table(device: str, *, measured: bool, attention: tuple[AttentionTable, ...], frac: float) -> KernelTable:
    return KernelTable(
        device=device,
        gemm={"bf16": ((1e9, frac), (1e12, frac))},
        hbm_frac=frac,
        attention=attention,
        measured=measured,
        source="m" if measured else "p",
    )


def _attn(family: str, causal: bool, frac: float) -> AttentionTable:
    return AttentionTable(
        family=family,
        dtype="bf16",
        head_dim=128,
        causal=causal,
        seq_len=(1024.0,),
        fwd_frac=(frac,),
        bwd_frac=(frac,),
    )


def test_overlay_replaces_what_was_measured_and_keeps_the_rest() -> None:
    published = _table(
        "d",
        measured=False,
        frac=0.5,
        attention=(_attn("fa2", True, 0.3), _attn("fa2", False, 0.35), _attn("fa3", True, 0.5)),
    )
    measured = dataclasses.replace(
        _table("d", measured=True, frac=0.7, attention=(_attn("fa2", True, 0.2),)),
        gemm={"fp8": ((1e9, 0.6),)},
    )
    out = overlay(published, measured)
    assert (
        out.measured
        and out.hbm_frac == 0.7
        and out.gemm == {"bf16": published.gemm["bf16"], "fp8": ((1e9, 0.6),)}
    )
    assert sorted((t.family, t.causal, t.fwd_frac[0]) for t in out.attention) == [
        ("fa2", False, 0.35),
        ("fa2", True, 0.2),
        ("fa3", True, 0.5),
    ]
    with pytest.raises(ValueError, match="different devices"):
        overlay(published, dataclasses.replace(measured, device="other"))


def test_torch_profile_on_the_h100_profile_is_the_sum_of_its_measured_ops() -> None:
    """One GPU, no parallelism: the compute of a step is micro-batches x (embedding + 32 layers + head), forward
    plus backward, read straight from ops.parquet."""
    model = load_model("llama-3.1-8b")
    cluster = dataclasses.replace(load_cluster("dgx-h100"), devices_per_node=1)
    workload = Workload(seq_len=4096, global_batch_size=2, dtype="bf16")
    est = get_backend("torch-profile", profile=str(PROFILE_8B)).estimate(
        model, cluster, workload, ParallelPlan()
    )
    ops = pl.read_parquet(PROFILE_8B / "ops.parquet").filter(
        (pl.col("tp") == 1) & (pl.col("micro_batch_size") == 1) & (pl.col("seq_len") == 4096)
    )
    cost = {op: f + b for op, f, b in ops.select("op", "forward_s", "backward_s").iter_rows()}
    assert est.breakdown.compute_s == pytest.approx(
        2 * (cost["embedding"] + 32 * cost["layer"] + cost["head"])
    )


@pytest.mark.parametrize(
    ("model", "profile", "args"),
    [
        (
            "llama-3.1-8b",
            "llama-3.1-8b-h100-bf16",
            ["--tp", "8", "--seq-len", "8192", "--global-batch", "16"],
        ),
        (
            "llama-3.1-70b",
            "llama-3.1-70b-h100-bf16",
            ["--nodes", "4", "--tp", "8", "--pp", "4", "--seq-len", "4096", "--global-batch", "32"],
        ),
    ],
)
def test_estimate_with_the_committed_h100_profiles_runs_on_the_cpu(
    model: str, profile: str, args: list[str], workbench_cli
) -> None:
    res = workbench_cli(
        "estimate",
        "--backend",
        "torch-profile",
        "--profile",
        str(MEASURED / profile),
        "--model",
        model,
        "--cluster",
        "dgx-h100",
        "--dtype",
        "bf16",
        *args,
        "--json",
        check=True,
    )
    est = json.loads(res.stdout)
    assert est["backend"] == "torch-profile" and est["step_time_s"] > 0
    assert est["breakdown"]["compute_s"] > 0 and est["peak_memory_bytes"] > 0


def test_committed_real_run_is_the_measurement_beside_both_predictions() -> None:
    """The one-GPU real run (Llama 3.1 8B cut to 4 layers, bf16 autocast, seq 4096, 8 micro-batches): its file
    holds the measured step, the spread over steps and each backend's prediction of the same plan."""
    for backend in ("analytic", "torch-profile"):
        data = json.loads(
            (MEASURED / "real-runs" / f"llama-3.1-8b-L4-h100-bf16-vs-{backend}.json").read_text()
        )
        steps = data["step_times_s"]
        assert min(steps) <= data["measured"]["step_time_s"] <= max(steps)
        assert max(steps) / min(steps) - 1 < 0.02  # the spread over the 6 timed steps
        cmp = data["comparison"]["step_time_s"]
        assert cmp["error_frac"] == pytest.approx(cmp["predicted"] / cmp["measured"] - 1)
        assert (
            data["predicted"]["backend"] == backend and data["measured"]["plan"] == "dp1 tp1 pp1 mbs1 zero0"
        )


def test_published_tables_stay_unmeasured() -> None:
    table = tomllib.loads((MEASURED.parent / "kernels" / f"{H100}.toml").read_text())
    assert table["measured"] is False


@pytest.mark.parametrize(
    "profile", ["llama-3.1-8b-h100-bf16", "llama-3.1-70b-h100-bf16", "mixtral-8x7b-h100-bf16"]
)
def test_committed_calibration_of_each_h100_profile_loads_and_fits_better(profile: str) -> None:
    """``workbench calibrate`` of each profile, started from the measured table: a kernel table of the H100 that
    fits the profile's op times better than its start. It sits in the profile folder under its own name, so
    it is never laid over the device's table by itself (``--kernels`` hands it over)."""
    table = load_kernel_table(MEASURED / profile / "calibrated-kernels.toml")
    assert table.device == H100
    assert float(table.provenance["error_after_frac"]) < float(table.provenance["error_before_frac"])
    assert device_kernel_tables()[H100].source.startswith("workbench microbench")


def test_h200_expert_gemm_probe_against_the_curve() -> None:
    """The H200's expert GEMMs (benchmarks/probe_expert_gemms.py): one expert's six GEMMs (up and down
    projection, three passes) of five MoE models take longer than the measured table's curve says when read
    at each GEMM's own FLOPs, by little from 1,024 tokens per expert up (the curve keeps each FLOP bin's best
    shape) and by more the fewer the tokens; four streams gain nothing over one at 2,048 tokens per expert."""
    table = load_kernel_table(MEASURED / "kernels-h200-sxm-141gb")
    peak = load_device(H200).peak
    rows = pl.read_csv(MEASURED / "real-runs" / "expert-gemms-h200.csv")
    experts = rows.filter(pl.col("kind") == "expert").with_columns(
        tokens=pl.col("what").str.extract(r" t(\d+) ").cast(pl.Int64),
        model=pl.col("what").str.split(" ").list.first(),
    )
    short: dict[int, list[float]] = {}
    for (dtype, _, tokens), part in experts.group_by("dtype", "model", "tokens"):
        curve = table.gemm[str(dtype)]
        predicted = sum(
            f / (float(matmul_efficiency_frac(f, curve)) * peak(str(dtype))) for f in part["flop"]
        )
        short.setdefault(int(tokens), []).append(1 - predicted / float(part["time_s"].sum()))
    assert len(short[2048]) == 10  # 5 models x 2 dtypes
    mean = {t: sum(v) / len(v) for t, v in short.items()}
    assert all(0.0 < mean[t] < 0.10 for t in (1024, 2048, 4096, 8192))
    assert mean[128] > mean[256] > mean[512] > 0.10
    group = rows.filter(pl.col("kind") == "group").with_columns(
        streams=pl.col("what").str.extract(r"streams(\d+)").cast(pl.Int64)
    )
    at = {(m, s): t for m, s, t in group.select("m", "streams", "time_s").iter_rows()}
    assert at[(2048, 4)] == pytest.approx(at[(2048, 1)], rel=0.05)
    assert at[(256, 1)] / at[(256, 4)] > 1.2
