"""FP8 recipes as the stacks run them (issue 48 item 5): torchao tensorwise vs rowwise, async TP, schema columns."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.cost.flops import FP8_CAST_BYTES, matmul_efficiency_frac
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_device, load_model
from workbench.presets.frameworks import load_framework
from workbench.specs.plan import ParallelPlan, Workload
from workbench.validate.readings import apply_recipe_columns


def _float8_linear_speedup(m: int, k: int, n: int, recipe: str) -> float:
    """bf16 time over FP8 time of one linear's forward and backward (three GEMMs of 2MKN FLOPs) on an H100
    from its kernel table, the FP8 side paying ``FP8_CAST_BYTES[recipe]`` per input, weight and output-gradient
    value (a single-GPU Float8Linear casts its weight on every use)."""
    cal, device = load_calibration(), load_device("h100-sxm5-80gb")
    hbm = cal.device(device).hbm_bytes_per_s * cal.device(device).hbm_efficiency_frac
    flop = 2.0 * m * k * n

    def gemms_s(dtype: str) -> float:
        return 3 * flop / (device.peak(dtype) * matmul_efficiency_frac(flop, cal.gemm_curve(device, dtype)))

    casts_s = FP8_CAST_BYTES[recipe] * (m * k + k * n + m * n) / hbm
    return gemms_s("bf16") / (gemms_s("fp8") + casts_s)


@pytest.mark.parametrize(("mkn", "published"), [((1024, 2048, 1024), 0.80), ((4096, 8192, 16384), 1.39)])
def test_tensorwise_linear_speedup_matches_torchaos_h100_microbenchmark(
    mkn: tuple[int, int, int], published: float
) -> None:
    """torchao/float8/README.md (Dec 2024), "Performance": Float8Linear (dynamic tensorwise, torch.compile)
    over bf16 on an H100, forward + backward: 0.80 at M,K,N = 1024,2048,1024 and 1.39 at 4096,8192,16384.
    The roofline leaves out launch gaps, so it errs fast, most at the small shape."""
    assert _float8_linear_speedup(*mkn, "tensorwise") == pytest.approx(published, rel=0.12)


def test_rowwise_is_slower_than_tensorwise_and_than_bf16_at_small_shapes() -> None:
    small, large = (1024, 2048, 1024), (4096, 8192, 16384)
    assert _float8_linear_speedup(*small, "rowwise") < 1.0 < _float8_linear_speedup(*large, "rowwise")
    assert _float8_linear_speedup(*large, "rowwise") < _float8_linear_speedup(*large, "tensorwise")


def test_llama3_8b_on_8_h100_orders_the_recipes_as_torchao_measured() -> None:
    """torchao README "e2e training benchmarks" (torchtitan, 8 H100, Llama3-8B, batch 1 x 8192, FSDP2, per-op
    SAC, compile): bf16 6150 tokens/s, rowwise with bf16 all-gather 6768, tensorwise with float8 all-gather
    7689.5. Nothing here is fitted to those numbers: the recipes differ in cast bytes and gathers only."""
    from workbench.estimate.analytic import estimate_plan

    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=1)
    plan = ParallelPlan(dp=8, micro_batch_size=1, zero_stage=3, recompute="selective")
    fw = load_framework("torchtitan-2024")

    def tokens_per_s(dtype: str, recipe: str = "") -> float:
        row = {"fp8_recipe": recipe}
        cal = load_calibration().with_framework(apply_recipe_columns(row, fw))
        wl = Workload(seq_len=8192, global_batch_size=8, dtype=dtype)
        return estimate_plan(model, cluster, wl, plan, calibration=cal).tokens_per_s

    bf16, rowwise, tensorwise = (
        tokens_per_s("bf16"),
        tokens_per_s("fp8", "rowwise"),
        tokens_per_s("fp8", "tensorwise"),
    )
    assert bf16 < rowwise < tensorwise


def test_recipe_columns_set_the_profile_as_the_row_ran() -> None:
    fw = load_framework("torchtitan-2024")
    assert fw.fp8_tp_all_gather and not fw.tp_comm_overlap
    row = apply_recipe_columns({"fp8_recipe": "Rowwise", "async_tp": "true"}, fw)
    assert row.fp8_recipe == "rowwise" and not row.fp8_tp_all_gather and row.tp_comm_overlap
    assert apply_recipe_columns({}, fw) == fw
    assert not apply_recipe_columns(
        {"async_tp": "false"}, dataclasses.replace(fw, tp_comm_overlap=True)
    ).tp_comm_overlap
    with pytest.raises(ValueError, match="column fp8_recipe: 'e5m2' is not one of"):
        apply_recipe_columns({"fp8_recipe": "e5m2"}, fw)
    with pytest.raises(ValueError, match="column async_tp: 'yes' is not true or false"):
        apply_recipe_columns({"async_tp": "yes"}, fw)


def _torchtitan_pair(first: str, second: str) -> tuple[float, float]:
    """Predicted tokens/s per device of two torchtitan rows under the committed default fit."""
    from workbench.validate import DEFAULT_DATA, prepare, read_rows, score_case

    rows = [r for r in read_rows(DEFAULT_DATA) if r["id"] in (first, second)]
    cases = {c.id: c for c in prepare(rows).cases}
    cal = load_calibration()
    return score_case(cases[first], cal)["predicted"], score_case(cases[second], cal)["predicted"]


def test_async_tp_gain_is_near_torchtitans_published_pair() -> None:
    """torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 4 (Llama 3.1 70B, 256 H100, FSDP 32 x TP 8,
    compile + Float8): 829 tokens/s per GPU, 876 with async TP (+5.7%). The model prices async TP as TP
    communication hidden behind the GEMMs (``tp_comm_overlap``), nothing fitted to this pair."""
    sync, async_tp = _torchtitan_pair("TORCHTITAN_2412-011", "TORCHTITAN_2412-012")
    assert async_tp / sync == pytest.approx(876 / 829, abs=0.04)


def test_torch_compile_gain_is_near_torchtitans_published_pair() -> None:
    """Same source, Table 1 (Llama 3.1 8B, 8 H100, FSDP): 5,762 tokens/s eager, 6,667 with torch.compile
    (+15.7%). The model's part of it is the element-wise fusion (``fused_elementwise``): the residual adds, the
    SwiGLU, the attention layout copies and, from torchtitan's own eager model code, the fp32 RMSNorm chain and
    the complex rotary embedding (``unfused_model_ops`` rmsnorm_fp32, rope_complex, their passes counted at the
    ATen level in tests/test_unfused_ops.py), each re-run by the selective recompute. Priced without the last
    two the gain was +4.5% (10% under the pair); with them it is about 5% over it: a gain within 6% of the
    published ratio, nothing fitted to this pair."""
    eager, compiled = _torchtitan_pair("TORCHTITAN_2412-001", "TORCHTITAN_2412-002")
    assert compiled / eager > 1.02
    assert compiled / eager == pytest.approx(6667 / 5762, rel=0.06)
