"""Framework profiles, kernel tables and their use by the cost model, the planner and validate."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.conftest import write_rows_csv as _write
from workbench.cost.flops import matmul_efficiency_frac
from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import Calibration, load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import all_frameworks, framework_names, load_framework, profile_for_text
from workbench.presets.kernels import kernel_table_names, load_kernel_table
from workbench.search import Constraints, search
from workbench.search.space import framework_constraints
from workbench.specs.plan import ParallelPlan, Workload
from workbench.validate import cross_validate, prepare, read_rows, validate_rows

VALIDATION = Path(__file__).resolve().parents[1] / "profiles" / "validation" / "training_public.csv"
KERNELS = Path(__file__).resolve().parents[1] / "profiles" / "kernels"


def test_every_profile_loads_names_sources_and_fits_only_fittable_fields() -> None:
    names = framework_names()
    assert {
        "megatron-lm-2021",
        "megatron-core-2024",
        "deepspeed-2021",
        "torchtitan-2024",
        "llm-foundry-2023",
    } <= set(names)
    for prof in all_frameworks():
        assert prof.sources, f"{prof.id} cites no source"
        assert prof.fitted, f"{prof.id} names no fitted constant"


def test_every_validation_framework_text_maps_to_a_profile() -> None:
    texts = {r["framework"] for r in read_rows(VALIDATION)}
    assert all(profile_for_text(t) is not None for t in texts), texts


@pytest.mark.parametrize(
    ("text", "year", "expected"),
    [
        ("NeMo 24.07", None, "megatron-core-2024"),  # a version after the name
        ("Megatron-DeepSpeed", None, "deepspeed-2021"),  # the longer keyword is the more specific
        ("DeepSpeed ZeRO-3", 2022, "deepspeed-2021"),
        ("PyTorch FSDP", None, "llm-foundry-2023"),  # FSDP1
        ("PyTorch (FSDP)", None, "llm-foundry-2023"),  # whole words, whatever the punctuation
        ("TorchTitan (FSDP2)", None, "torchtitan-2024"),
        ("Megatron-LM", 2021, "megatron-lm-2021"),  # the exact alias in its era
        ("Megatron-LM", 2024, "megatron-core-2024"),  # Megatron-LM after 2022 runs Megatron-Core
        ("megatron_lm (v0.4)", 2020, "megatron-lm-2021"),
        ("Megatron-LM fork (zero-bubble)", 2024, "zero-bubble-2024"),
        ("Zero Bubble (Megatron-LM fork)", None, "zero-bubble-2024"),  # equal keywords: the fork
        ("GPT-NeoX", 2022, "deepspeed-2021"),  # DeepSpeed's pipeline engine under Megatron layers
        ("MaxText", 2024, None),
        ("Megatron-LM (2023)", None, "megatron-core-2024"),  # the text's own year
        ("Megatron-LM (2021)", 2024, "megatron-lm-2021"),  # wins over the source's
        ("", None, None),
    ],
)
def test_framework_text_matches_by_keyword_and_year(
    text: str, year: int | None, expected: str | None
) -> None:
    prof = profile_for_text(text, year=year)
    assert (prof.id if prof else None) == expected


def test_source_year_skips_the_locator() -> None:
    from workbench.presets.frameworks import source_year

    assert source_year("Narayanan et al. 2021 'Efficient ...' (SC21) [NVIDIA/Megatron-LM @2023]") == 2021
    assert source_year("Zero Bubble (ICLR'24), Tables 3-4 [a copy from 2025]") == 2024  # the venue's year
    assert source_year("Zero Bubble, Tables 3-4 [a copy from 2025]") is None
    assert source_year("torchtitan benchmarks (PyTorch team, Dec 2024) [llama3_h100_202412.md]") == 2024


def test_bad_years_are_refused() -> None:
    from workbench.presets.frameworks import profile_from_dict

    with pytest.raises(ValueError, match="years must be"):
        profile_from_dict({"id": "x", "name": "x", "years": [2024, 2020]}, where="x.toml")


def test_bad_profile_file_names_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "x.toml"
    bad.write_text('id = "x"\nname = "x"\nwarp_speed = 9\n')
    with pytest.raises(ValueError, match=r"x\.toml.*warp_speed"):
        load_framework(bad)
    bad.write_text('id = "x"\nname = "x"\ncomm_interference_frac = 1.5\n')
    with pytest.raises(ValueError, match="comm_interference_frac"):
        load_framework(bad)
    bad.write_text('id = "x"\nname = "x"\nzero_stages = [0, 1]\npipeline_zero_stages = [3]\n')
    with pytest.raises(ValueError, match=r"x\.toml.*pipeline_zero_stages must be among zero_stages"):
        load_framework(bad)


def test_published_kernel_tables_cover_the_validation_devices_and_cite_sources() -> None:
    devices = {r["device"] for r in read_rows(VALIDATION)}
    assert devices <= set(kernel_table_names())
    for name in kernel_table_names():
        table = load_kernel_table(name)
        assert table.device == name and not table.measured and table.source
        assert "bf16" in table.gemm


@pytest.mark.parametrize(
    ("cluster", "table_file"),
    [
        ("dgx-a100", KERNELS / "a100-sxm4-80gb.toml"),  # published only
        (
            "dgx-h100",
            KERNELS.parent / "measured" / "kernels-h100-sxm5-80gb" / "kernels.toml",
        ),  # measured on it
    ],
)
def test_gemm_curve_of_the_kernel_table_is_what_the_cost_model_reads(cluster: str, table_file: Path) -> None:
    """At each point of the device's table the cost model's GEMM efficiency is the fraction written in the
    file (read here with tomllib, not through the loader); a committed measurement's curve wins over the
    published one of its device."""
    import tomllib

    cal = load_calibration(framework="megatron-core-2024")
    for dtype, table in tomllib.loads(table_file.read_text())["gemm"].items():
        curve = cal.gemm_curve(load_cluster(cluster).device, dtype)
        for flop, frac in table["points"]:
            assert float(matmul_efficiency_frac(flop, curve)) == pytest.approx(frac)


def test_eager_elementwise_and_unfused_attention_cost_more_time() -> None:
    """Mechanisms, not fudge: eager element-wise ops and unfused attention add HBM passes, so the same plan
    is slower under a profile that has them (all else equal)."""
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-a100")
    work = Workload(seq_len=4096, global_batch_size=16)
    plan = ParallelPlan(dp=8, micro_batch_size=1, zero_stage=1)
    base = Calibration().with_framework(load_framework("megatron-core-2024"))
    fw = base.framework
    times = {}
    for name, change in (
        ("fused", {}),
        ("eager", {"fused_elementwise": False}),
        ("unfused", {"attention_kernels": ()}),
    ):
        cal = dataclasses.replace(base, framework=dataclasses.replace(fw, **change))
        times[name] = estimate_plan(model, cluster, work, plan, calibration=cal).step_time_s
    assert times["eager"] > times["fused"] and times["unfused"] > times["fused"]


def test_planner_offers_only_what_the_framework_runs() -> None:
    c = framework_constraints(Constraints(), load_framework("megatron-core-2024"))
    assert set(c.schedules) == {"1f1b", "interleaved-1f1b"} and 2 not in c.zero_stages
    foundry = framework_constraints(Constraints(), load_framework("llm-foundry-2023"))
    assert foundry.fixed["pp"] == 1 and foundry.fixed["cp"] == 1 and foundry.sequence_parallel == (False,)
    with pytest.raises(ValueError, match="ZeRO"):
        framework_constraints(Constraints(zero_stages=(1,)), load_framework("llm-foundry-2023"))


def test_estimate_refuses_a_schedule_the_framework_does_not_run() -> None:
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    plan = ParallelPlan(dp=2, pp=4, micro_batch_size=1, schedule="zb-h1")
    cal = load_calibration(framework="megatron-core-2024")
    with pytest.raises(ValueError, match="megatron-core-2024 does not run: schedule zb-h1"):
        estimate_plan(model, cluster, Workload(seq_len=2048, global_batch_size=64), plan, calibration=cal)


def test_blank_architecture_is_skipped_with_a_reason_and_custom_cluster_sidecar(tmp_path: Path) -> None:
    rows = read_rows(VALIDATION)
    zb = next(r for r in rows if r["source_key"] == "ZB_ICLR24")
    blank = {**zb, "id": "X-001", "hidden_size": ""}
    custom = {**zb, "id": "X-002", "cluster": "other-mine"}
    (tmp_path / "clusters").mkdir()
    src = load_cluster("other-a100-roce")
    text = (
        Path(__file__).resolve().parents[1] / "profiles" / "clusters" / "other-a100-roce.toml"
    ).read_text()
    (tmp_path / "clusters" / "other-mine.toml").write_text(text.replace(f'"{src.id}"', '"other-mine"', 1))
    path = _write(tmp_path / "v.csv", [blank, custom, {**zb, "id": "X-003", "cluster": "nowhere"}])
    result = validate_rows(read_rows(path), calibration=load_calibration(), data_dir=tmp_path)
    reasons = {s["id"]: s["reason"] for s in result["skipped"]}
    assert "hidden_size" in reasons["X-001"] and "nowhere" in reasons["X-003"]
    assert [r["id"] for r in result["rows"]] == ["X-002"]


def test_leave_one_source_out_scores_each_source_with_constants_fitted_without_it(tmp_path: Path) -> None:
    """Two small sources of two stacks: the held-out source's stack has no rows in its fold, so its
    constants are the pooled fit of the other source; in-sample it gets its own fit."""
    rows = read_rows(VALIDATION)
    zb = [r for r in rows if r["source_key"] == "ZB_ICLR24"][:3]
    mosaic = [r for r in rows if r["source_key"] == "MOSAIC_LLMFOUNDRY"][:3]
    prepared = prepare(zb + mosaic)
    result = cross_validate(prepared, load_calibration())
    assert set(result["mape_by_source"]) == {"ZB_ICLR24", "MOSAIC_LLMFOUNDRY"}
    fold = result["folds"]["ZB_ICLR24"]
    assert "megatron-lm-2021" not in fold and "llm-foundry-2023" in fold and "pooled" in fold
    assert "megatron-lm-2021" in result["fits"]
    assert set(result["in_sample"]) == {"mape", "mape_by_source", "memory_mape", "memory_mape_by_source"}
    oos = [r["ape"] for r in result["rows"] if r["ape"] is not None]
    assert result["mape"] == pytest.approx(sum(oos) / len(oos))


def test_the_fit_leaves_a_valley_where_one_constant_at_a_time_is_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coupled objective over two grids (a narrow valley along kernel efficiency index - host overhead index
    = 2, falling towards higher values): from (0.9, 4e-4), on the valley, every move of one constant alone
    climbs out of it, so sweeps stay put; diagonal steps walk the valley to its low end (1.0, 8e-4)."""
    import workbench.validate.fit as V

    ke, host = V.FIT_GRID["kernel_efficiency_frac"], V.FIT_GRID["host_overhead_per_layer_s"]

    def objective(cases: list, values: dict[str, float]) -> float:
        i, j = ke.index(values["kernel_efficiency_frac"]), host.index(values["host_overhead_per_layer_s"])
        return 5.0 * abs(i - j - 2) - 0.1 * (i + j) + 10.0

    monkeypatch.setattr(V, "_throughput_mape", objective)
    names = ["host_overhead_per_layer_s", "kernel_efficiency_frac"]
    start = {"kernel_efficiency_frac": 0.9, "host_overhead_per_layer_s": 4e-4}
    assert objective([], start) == pytest.approx(8.4)
    found = V._coordinate_search([], names, start, lambda values: values)
    assert found == {"kernel_efficiency_frac": 1.0, "host_overhead_per_layer_s": 8e-4}
    monkeypatch.setattr(V, "_DIAGONAL_ROUNDS", 0)
    assert V._coordinate_search([], names, start, lambda values: values) == start


def test_fsdp_under_a_pipeline_keeps_the_stage_gathered_on_torchtitan() -> None:
    """torchtitan keeps a pipeline stage's weights gathered (bf16) and its gradients unsharded (fp32) across
    micro-batches: per rank that is the stage's parameters / tp times 2 and 4 bytes (closed form), instead of
    the ZeRO-3 share / (dp*cp); a stack that reshards keeps the ZeRO-3 share."""
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", num_nodes=8)
    work = Workload(seq_len=4096, global_batch_size=64)
    plan = ParallelPlan(dp=4, tp=4, pp=4, micro_batch_size=1, zero_stage=3, sequence_parallel=True)
    titan = load_calibration(framework="torchtitan-2024")
    resharding = dataclasses.replace(
        titan, framework=dataclasses.replace(titan.framework, fsdp_reshard_with_pp=True)
    )
    kept = estimate_plan(model, cluster, work, plan, calibration=titan).memory.row(1, named=True)
    sharded = estimate_plan(model, cluster, work, plan, calibration=resharding).memory.row(1, named=True)
    stage_params = 20 * model.layer_parameters(0) / 4  # rank 1 holds 20 of the 80 layers, split over tp=4
    assert kept["parameters_bytes"] == pytest.approx(2 * stage_params, rel=1e-9)
    assert kept["gradients_bytes"] == pytest.approx(4 * stage_params, rel=1e-9)
    assert sharded["parameters_bytes"] == pytest.approx(2 * stage_params / 4, rel=1e-9)
    assert sharded["gradients_bytes"] == pytest.approx(4 * stage_params / 4, rel=1e-9)


def test_ring_attention_uses_the_kernels_its_implementation_wraps() -> None:
    """torchtitan's ring attention wraps FlashAttention-2 only: with cp > 1 the step costs what it costs under a
    profile that names only fa2; with cp = 1 what it costs under its cuDNN preference (torchtitan 2025 on B200,
    where torchtitan asks SDPA for cuDNN first)."""
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-b200")
    work = Workload(seq_len=32768, global_batch_size=8, dtype="bf16")
    titan = load_calibration(framework="torchtitan-2025")
    fw = titan.framework
    only = {
        k: dataclasses.replace(
            titan, framework=dataclasses.replace(fw, attention_kernels=(k,), cp_attention_kernels=None)
        )
        for k in ("fa2", "cudnn")
    }

    def step(plan: ParallelPlan, cal: Calibration) -> float:
        return estimate_plan(model, cluster, work, plan, calibration=cal).step_time_s

    ring = ParallelPlan(dp=4, cp=2, micro_batch_size=1, zero_stage=3)
    flat = ParallelPlan(dp=8, micro_batch_size=1, zero_stage=3)
    assert step(ring, titan) == pytest.approx(step(ring, only["fa2"]), rel=1e-12)
    assert step(ring, titan) != pytest.approx(step(ring, only["cudnn"]), rel=1e-3)
    assert step(flat, titan) == pytest.approx(step(flat, only["cudnn"]), rel=1e-12)


def test_torchtitan_2024_attention_is_the_flash_attention_2_of_its_torch() -> None:
    """torchtitan @9dec370 calls F.scaled_dot_product_attention on torch main of 2024-12-23, where cuDNN SDPA
    was opt-in (pytorch/pytorch#138522; #142132 measures default SDPA on H100 at 329 TFLOP/s beside cuDNN's
    631): the causal attention of a Llama head (128) at 8K runs at the FlashAttention-2 rate of the FA3 paper
    (Shah et al. 2024, Fig. 5: FA2 on H100 SXM5, head dim 128, causal, 8K: 333 TFLOP/s forward, 299
    backward, over the 989.4 TFLOP/s dense BF16 peak), as the Grand Teton H100 table of the benchmark's rows
    reads them; Megatron-Core on the same GPU runs cuDNN, faster."""
    device = load_cluster("meta-grand-teton-h100").device
    titan = load_calibration(framework="torchtitan-2024").attention(
        device, dtype="bf16", seq_len=8192, head_dim=128
    )
    assert float(titan[0]) == pytest.approx(333 / 989.4, abs=1e-3)
    assert float(titan[1]) == pytest.approx(299 / 989.4, abs=1e-3)
    mcore = load_calibration(framework="megatron-core-2024").attention(
        device, dtype="bf16", seq_len=8192, head_dim=128
    )
    assert float(mcore[0]) > 1.5 * float(titan[0])


@pytest.mark.parametrize("name", ["megatron-core-2024", "torchtitan-2024", "generic"])
def test_fp8_gemms_run_at_the_tables_scaled_gemm_rate_and_the_casts_are_priced_once(name: str) -> None:
    """The H100 FP8 GEMM curve is a GEMM measured with its scales applied: its plateau (0.721 of 1978.9 TFLOP/s)
    is within 2% of the MAMF table's cuBLAS FP8 GEMM with per-tensor scales, 1402.6 TFLOP/s (stas00/
    ml-engineering compute/accelerator/README.md). So an FP8 weight GEMM takes flop / (peak x table fraction)
    (over the kernel efficiency), with no further FP8 derate, and the amax and cast of its input are one memory
    op of FP8_CAST_BYTES per value: quantising the 4096 + 4096 + 4096 + 14336 = 26,624 values per token that a
    Llama-3.1-8B layer's GEMMs read (tp 1) under current/tensorwise scaling: 6 bytes each."""
    from workbench.cost.elementwise_ops import FP8_CAST_BYTES
    from workbench.cost.flops import layer_ops
    from workbench.cost.layer import device_rates
    from workbench.cost.op_time import Op, op_times

    cal = load_calibration(framework=name)
    device = load_cluster("meta-grand-teton-h100").device  # the published H100 fractions (no measured table)
    rates = device_rates(device, "fp8", cal)
    flop = 2.0 * 8192 * 4096 * 14336
    plateau = float(matmul_efficiency_frac(flop, rates.mm_curve))
    assert plateau * 1978.9 == pytest.approx(1402.6, rel=0.02)
    gemm = op_times(
        [Op("mlp_up", "matmul", flop, 0.0)],
        peak_flop_per_s=rates.mm_peak,
        gemm_curve=rates.mm_curve,
        hbm_bytes_per_s=rates.hbm_bytes_per_s,
        attention=None,
        matmul_scale=rates.mm_scale,
    )
    assert gemm.fwd_s == pytest.approx(flop / (rates.mm_peak * plateau), rel=1e-9)
    recipe = cal.framework.fp8_recipe
    casts = [
        op
        for op in layer_ops(
            load_model("llama-3.1-8b"),
            tokens=1,
            seq_len=8192,
            tp=1,
            ep=1,
            sequence_parallel=False,
            act_bytes=2.0,
            fp8_recipe=recipe,
        )
        if op.name == "fp8_casts"
    ]
    assert len(casts) == 1 and recipe in ("current", "tensorwise")
    assert (
        float(casts[0].bytes) == pytest.approx(6.0 * 26624) == pytest.approx(FP8_CAST_BYTES[recipe] * 26624)
    )


def test_blank_micro_batch_of_a_row_follows_the_stacks_default() -> None:
    """torchtitan of 2024-12 splits a data-parallel rank's batch into pp micro-batches when none is set
    (@9dec370 build_pipeline_schedule: n_microbatches = pipeline_parallel_degree), interleaved or not; the
    rule of 2025-01 to 2025-04 split it into pp x vpp (``stages``); torchtitan since 2025-04 and Megatron rows
    default to one sample per micro-batch."""
    from workbench.validate import row_case

    row = next(r for r in read_rows(VALIDATION) if r["id"] == "TORCHTITAN_2412-013")
    assert not row["micro_batch_size"] and row["global_batch_size"] == "256"
    case = row_case(row)
    assert case.plan.micro_batch_size == 256 // 8 // 8  # local batch 32 over 8 pipeline ranks
    interleaved = row_case({**row, "schedule": "interleaved-1f1b", "vpp": "2"})
    assert interleaved.plan.micro_batch_size == 256 // 8 // 8  # still 8 micro-batches, not 16 stages
    stages = dataclasses.replace(case.framework, default_microbatches="stages")
    by_stages = row_case({**row, "schedule": "interleaved-1f1b", "vpp": "2"}, framework=stages)
    assert by_stages.plan.micro_batch_size == 256 // 8 // 16
    no_batch = row_case({**row, "global_batch_size": ""})
    assert no_batch.workload.global_batch_size == 8 * 8  # dp x pp micro-batches of one sample
    assert row_case(row, framework=load_framework("torchtitan-2025")).plan.micro_batch_size == 1
    megatron = row_case(row, framework=load_framework("megatron-core-2024"))
    assert megatron.plan.micro_batch_size == 1


# DeepGEMM README tables on H800 SXM5, FP8 with 1x128/128x128 scaling, M = 4096 tokens (normal) or 4 groups of
# 8192 (grouped contiguous): TFLOP/s by (N, K) at the first public release (a6d97a1, 2025-02-26) and at the
# release the H800/H100 FP8 kernel table reads (55ab91f, 2025-03-25).
DEEPGEMM_FIRST = {(2112, 7168): 1058, (24576, 1536): 990, (32768, 512): 590, (7168, 16384): 1358,
                  (4096, 7168): 1304, (7168, 2048): 1025}  # fmt: skip
DEEPGEMM_TABLE = {(2112, 7168): 1009, (24576, 1536): 1125, (32768, 512): 751, (7168, 16384): 1426,
                  (4096, 7168): 1265, (7168, 2048): 1168}  # fmt: skip
DEEPGEMM_GROUPED_FIRST = {(4096, 7168): 1297, (7168, 2048): 1099}
DEEPGEMM_GROUPED_TABLE = {(4096, 7168): 1346, (7168, 2048): 1214}


def test_deepseek_fp8_gemm_scale_is_the_first_deepgemm_release_over_the_table() -> None:
    """The DeepSeek-V3 profile's FP8 GEMM scale is the FLOP-weighted time ratio of the two DeepGEMM releases over
    the GEMMs of one DeepSeek-V3 MoE layer, shapes read off the model preset."""
    m = load_model("deepseek-v3")
    h, f = m.hidden_size, m.moe_ffn_hidden_size
    q_heads = m.num_attention_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
    normal = {
        (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim, h): 1,  # fused q / kv down-projection
        (q_heads, m.q_lora_rank): 1,  # q up-projection
        (m.num_attention_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank): 1,  # kv up-projection
        (h, m.num_attention_heads * m.v_head_dim): 1,  # output projection
        (2 * f * m.num_shared_experts, h): 1,  # shared expert gate+up
        (h, f * m.num_shared_experts): 1,  # shared expert down
    }
    grouped = {(2 * f, h): m.experts_per_token, (h, f): m.experts_per_token}
    assert set(normal) == set(DEEPGEMM_TABLE) and set(grouped) == set(DEEPGEMM_GROUPED_TABLE)

    def time(rates: dict, shapes: dict) -> float:
        return sum(n * k * count / rates[(n, k)] for (n, k), count in shapes.items())

    first = time(DEEPGEMM_FIRST, normal) + time(DEEPGEMM_GROUPED_FIRST, grouped)
    table = time(DEEPGEMM_TABLE, normal) + time(DEEPGEMM_GROUPED_TABLE, grouped)
    assert load_framework("deepseek-v3-2024").fp8_matmul_scale == pytest.approx(table / first, abs=5e-4)


def test_deepspeed_pipeline_runs_only_zero_0_and_1() -> None:
    """DeepSpeed's PipelineEngine refuses ZeRO-2/3: the planner counts those plans under ``stack`` (exactly
    the plans a copy of the profile without the restriction screens on), the estimate refuses one, and a
    fixed pp > 1 narrows the ZeRO stages up front."""
    prof = load_framework("deepspeed-2021")
    assert prof.zero_stages == (0, 1, 2, 3) and prof.zero_stages_with_pipeline == (0, 1)
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-a100", num_nodes=2)
    workload = Workload(seq_len=2048, global_batch_size=64)
    cal = load_calibration(framework="deepspeed-2021")
    free = dataclasses.replace(cal, framework=dataclasses.replace(cal.framework, pipeline_zero_stages=None))
    res = search(model, cluster, workload, calibration=cal, top_k=0, keep=5000)
    loose = search(model, cluster, workload, calibration=free, top_k=0, keep=5000)
    assert res.num_plans == loose.num_plans and loose.rejections["stack"] == 0
    assert res.rejections["stack"] > 0
    assert res.rejections["stack"] == (loose.num_feasible + loose.rejections["memory"]) - (
        res.num_feasible + res.rejections["memory"]
    )
    assert sum(res.rejections.values()) == res.num_plans - res.num_feasible
    kept = res.plans.to_dicts() + res.pareto.to_dicts()
    assert kept and all(r["pp"] == 1 or r["zero_stage"] <= 1 for r in kept)
    assert any(r["pp"] > 1 and r["zero_stage"] >= 2 for r in loose.plans.to_dicts())
    plan = ParallelPlan(dp=4, pp=4, micro_batch_size=1, zero_stage=3, schedule="1f1b")
    with pytest.raises(ValueError, match="zero_stage 3 with pp > 1"):
        estimate_plan(model, cluster, workload, plan, calibration=cal)
    assert framework_constraints(Constraints(fixed={"pp": 4}), prof).zero_stages == (0, 1)
    with pytest.raises(ValueError, match="with pp > 1"):
        framework_constraints(Constraints(fixed={"pp": 4}, zero_stages=(3,)), prof)
