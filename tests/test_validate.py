"""``workbench.validate`` (training) on a small file of the public schema."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from workbench.presets.calibration import load_calibration
from workbench.validate import row_case, validate_rows

BASE = {
    "id": "X-001",
    "source_key": "X",
    "source": "",
    "confidence": "high",
    "notes": "",
    "model_name": "gpt",
    "num_layers": "24",
    "hidden_size": "2048",
    "num_attention_heads": "16",
    "num_key_value_heads": "",
    "ffn_hidden_size": "",
    "vocab_size": "",
    "seq_len": "2048",
    "gated_mlp": "false",
    "num_experts": "",
    "experts_per_token": "",
    "moe_ffn_hidden_size": "",
    "num_shared_experts": "",
    "attention": "mha",
    "device": "a100-sxm4-80gb",
    "num_devices": "8",
    "devices_per_node": "8",
    "cluster": "dgx-a100",
    "tp": "2",
    "pp": "2",
    "dp": "2",
    "cp": "",
    "ep": "",
    "vpp": "",
    "sequence_parallel": "",
    "micro_batch_size": "1",
    "global_batch_size": "16",
    "recompute": "",
    "zero_stage": "1",
    "schedule": "",
    "dtype": "bf16",
    "framework": "",
    "measured_tflops_per_device": "",
    "measured_mfu": "",
    "measured_hfu": "",
    "measured_tokens_per_s_per_device": "",
    "measured_step_time_s": "1.0",
    "measured_peak_memory_GiB": "20",
    "flops_definition": "",
}


def test_defaults_are_listed() -> None:
    case = row_case(BASE)
    assert {"ffn_hidden_size", "vocab_size", "schedule", "recompute", "sequence_parallel"} <= set(
        case.assumed
    )
    assert case.model.ffn_hidden_size == 4 * 2048 and case.plan.schedule == "1f1b"


def test_rows_skipped_with_reason_and_mape(tmp_path: Path) -> None:
    other = {**BASE, "id": "X-002", "tp": "", "pp": "", "dp": ""}
    path = tmp_path / "v.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(BASE))
        w.writeheader()
        w.writerows([BASE, other])
    from workbench.validate import read_rows

    result = validate_rows(read_rows(path), calibration=load_calibration())
    assert [s["id"] for s in result["skipped"]] == ["X-002"] and "plan" in result["skipped"][0]["reason"]
    row = result["rows"][0]
    assert row["metric"] == "measured_step_time_s" and row["measured"] == 1.0
    assert row["ape"] == pytest.approx(abs(row["predicted"] - 1.0))
    assert result["mape"] == pytest.approx(row["ape"]) and set(result["mape_by_source"]) == {"X"}
    assert result["memory_mape"] == pytest.approx(abs(row["predicted_memory_GiB"] - 20) / 20)


QWEN3_30B = {
    **BASE,
    "model_name": "Qwen3_30B_a3B",
    "num_layers": "48",
    "hidden_size": "2048",
    "num_attention_heads": "32",
    "num_key_value_heads": "4",
    "vocab_size": "151936",
    "gated_mlp": "true",
    "num_experts": "128",
    "experts_per_token": "8",
    "moe_ffn_hidden_size": "768",
    "attention": "gqa",
    "tp": "1",
    "pp": "1",
    "dp": "8",
    "ep": "8",
}


def test_schema_less_fields_come_from_the_preset_of_the_same_architecture() -> None:
    # Qwen3-30B-A3B's config.json sets head_dim 128 (32 x 128 = 4096 != hidden 2048) and q/k norms; the CSV
    # has no column for either, so hidden/heads = 64 would halve the attention projections.
    case = row_case(QWEN3_30B)
    assert "architecture:qwen3-30b-a3b" in case.assumed
    assert case.model.head_dim == 128 and case.model.qk_norm
    # 30.5B total parameters (Qwen/Qwen3-30B-A3B model card), within 1%
    assert case.model.total_parameters() == pytest.approx(30.5e9, rel=0.01)
    other = row_case({**QWEN3_30B, "num_layers": "47"})  # no preset has 47 such layers
    assert not any(a.startswith("architecture:") for a in other.assumed)
    assert other.model.head_dim == 2048 // 32 and not other.model.qk_norm


def test_an_undescribed_other_cluster_falls_back_to_the_devices_default_and_says_so() -> None:
    from workbench.validate import Unexpressible

    case = row_case({**BASE, "cluster": "other-a100-ib-400g"})
    assert "cluster:dgx-a100" in case.assumed and case.cluster.id == row_case(BASE).cluster.id
    # GB200 rows with a blank cluster take the NVL72 rack
    gb = row_case({**BASE, "device": "gb200", "cluster": "", "devices_per_node": "4"})
    assert "cluster" in gb.assumed and gb.cluster.device.id == "gb200"
    with pytest.raises(Unexpressible, match="neither a preset"):
        row_case({**BASE, "cluster": "selene-2"})  # not an other-* id: a typo is not guessed


def test_a_published_plan_outside_the_profiles_feature_list_is_priced_not_skipped() -> None:
    # Megatron-LM 2021's profile runs no ZeRO (its distributed optimizer came later), yet a published row
    # that says zero_stage 1 happened: it is priced by the same profile admitting that stage, and says so.
    from workbench.estimate.analytic import estimate_plan
    from workbench.presets.frameworks import load_framework
    from workbench.validate import score_case

    row = {**BASE, "framework": "Megatron-LM", "source": "a 2021 paper", "schedule": "interleaved-1f1b"}
    case = row_case(row)
    fw = load_framework("megatron-lm-2021")
    assert fw.unsupported(case.plan) == ["zero_stage 1 (runs: 0)"]  # the planner's view is unchanged
    assert case.framework.id == "megatron-lm-2021" and 1 in case.framework.zero_stages
    assert "framework:megatron-lm-2021 widened to run zero_stage 1 (runs: 0)" in case.assumed
    with pytest.raises(ValueError, match="does not run: zero_stage 1"):
        cal = load_calibration().with_framework(fw)
        estimate_plan(case.model, case.cluster, case.workload, case.plan, calibration=cal)
    # The price is the profile's own mechanisms with ZeRO-1 admitted by hand (nothing else changed).
    by_hand = dataclasses.replace(fw, zero_stages=(0, 1))
    item = score_case(case, load_calibration())
    ref = score_case(dataclasses.replace(case, framework=by_hand), load_calibration())
    assert item["predicted"] == pytest.approx(ref["predicted"], rel=1e-12)
    result = validate_rows([row], calibration=load_calibration())
    assert not result["skipped"] and [r["id"] for r in result["rows"]] == ["X-001"]


def test_admitting_widens_only_the_feature_lists() -> None:
    from workbench.presets.frameworks import load_framework
    from workbench.specs.plan import ParallelPlan

    fw = load_framework("deepspeed-2021")
    plan = ParallelPlan(
        dp=2, tp=2, pp=2, vpp=2, micro_batch_size=1, zero_stage=3, schedule="interleaved-1f1b"
    )
    assert fw.admitting(ParallelPlan(dp=8)) is fw
    wide = fw.admitting(plan, dtype="fp8")
    assert wide.unsupported(plan, dtype="fp8") == [] and fw.unsupported(plan, dtype="fp8")
    lists = {"schedules", "zero_stages", "pipeline_zero_stages", "fp8"}
    changed = {f.name for f in dataclasses.fields(fw) if getattr(fw, f.name) != getattr(wide, f.name)}
    assert changed <= lists and {"schedules", "pipeline_zero_stages", "fp8"} <= changed


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("Some et al. 2021, Table 2", "megatron-lm-2021"),  # before fused attention reached the stacks
        ("Some et al. 2024, Table 2", "generic"),
        ("a blog post", "generic"),  # no year: today's default
    ],
)
def test_an_unknown_stack_is_priced_as_its_eras_reference_stack(source: str, expected: str) -> None:
    case = row_case({**BASE, "framework": "metaseq", "source": source, "zero_stage": "0"})
    note = next(a for a in case.assumed if a.startswith("framework:'metaseq' names no profile"))
    assert case.framework.id == expected and f"priced as {expected}" in note
    assert case.framework.flash_attention == (expected == "generic")


def test_a_run_without_stages_and_no_micro_batch_takes_the_largest_that_fits() -> None:
    from workbench.estimate.analytic import estimate_plan
    from workbench.presets.frameworks import load_framework

    row = {**BASE, "tp": "8", "pp": "1", "dp": "1", "micro_batch_size": "", "global_batch_size": "64"}
    row |= {"num_layers": "48", "hidden_size": "6144", "num_attention_heads": "48", "recompute": "none"}
    case = row_case(row)
    mbs = case.plan.micro_batch_size
    cal = load_calibration().with_framework(load_framework("generic"))
    hbm = case.cluster.device.hbm_bytes

    def peak(m: int) -> float:
        plan = dataclasses.replace(case.plan, micro_batch_size=m)
        return estimate_plan(case.model, case.cluster, case.workload, plan, calibration=cal).peak_memory_bytes

    assert 1 < mbs < 64 and 64 % mbs == 0 and "micro_batch_size" in case.assumed
    larger = min(d for d in range(mbs + 1, 65) if 64 % d == 0)
    assert peak(mbs) <= hbm < peak(larger)
    assert row_case({**row, "micro_batch_size": "1"}).plan.micro_batch_size == 1  # a given one stays
    staged = row_case({**row, "pp": "2", "dp": "1", "num_devices": "16"})  # pp > 1: the stack's rule (1 here)
    assert staged.plan.micro_batch_size == 1


@pytest.mark.parametrize(
    ("given", "expected", "filled"),
    [
        # (dp, tp, pp, cp) given on 64 devices of 8-GPU nodes -> (dp, tp, pp, cp) and the filled columns
        (("", "2", "4", ""), (8, 2, 4, 1), {"dp"}),
        (("4", "", "2", ""), (4, 8, 2, 1), {"tp"}),
        (("4", "8", "", ""), (4, 8, 2, 1), {"pp"}),
        (("4", "8", "2", ""), (4, 8, 2, 1), set()),
        # both blank: tensor parallelism fills the node, pipeline stages take the rest
        (("2", "", "", ""), (2, 8, 4, 1), {"tp", "pp"}),
        (("16", "", "", ""), (16, 4, 1, 1), {"tp", "pp"}),  # fewer devices left than a node: all to tp
        (("1", "", "", "2"), (1, 8, 4, 2), {"tp", "pp"}),
    ],
)
def test_blank_degrees_are_what_the_given_ones_leave_of_the_devices(
    given: tuple[str, str, str, str], expected: tuple[int, int, int, int], filled: set[str]
) -> None:
    row = {**BASE, "num_devices": "64", **dict(zip(("dp", "tp", "pp", "cp"), given, strict=True))}
    case = row_case(row)
    p = case.plan
    assert (p.dp, p.tp, p.pp, p.cp) == expected
    assert p.dp * p.tp * p.pp * p.cp == 64
    assert filled == {k for k in ("dp", "tp", "pp", "cp") if k in case.assumed}


def test_a_blank_cp_is_no_context_parallelism_even_when_the_degrees_leave_devices() -> None:
    # the schema's fixed reading of a blank cp: the plan keeps cp = 1 and is refused for not filling the devices
    case = row_case({**BASE, "num_devices": "64", "dp": "4", "tp": "8", "pp": "1", "cp": ""})
    assert case.plan.cp == 1 and case.plan.dp * case.plan.tp * case.plan.pp == 32


@pytest.mark.parametrize(("cp", "devices"), [("", 8), ("2", 16)])
def test_a_blank_device_count_is_the_product_of_the_given_degrees(cp: str, devices: int) -> None:
    # README: where tp, pp, dp and num_devices are filled, tp*pp*dp*(cp or 1) = num_devices
    case = row_case({**BASE, "num_devices": "", "cp": cp})
    assert case.plan.num_devices == devices
    assert f"num_devices={devices} = tp x pp x dp x cp (blank)" in case.assumed
    from workbench.validate import Unexpressible

    with pytest.raises(Unexpressible, match="blank required column\\(s\\): num_devices"):
        row_case({**BASE, "num_devices": "", "dp": ""})


def test_tensor_parallelism_filled_in_divides_the_heads_and_given_degrees_must_divide_the_devices() -> None:
    from workbench.validate import Unexpressible

    case = row_case({**BASE, "num_devices": "64", "num_attention_heads": "12", "dp": "2", "tp": "", "pp": ""})
    assert (case.plan.tp, case.plan.pp) == (4, 8)  # 8 does not divide 12 heads: the largest that does
    with pytest.raises(Unexpressible, match=r"num_devices 64 is not a multiple of the given degrees \(dp=3"):
        row_case({**BASE, "num_devices": "64", "dp": "3", "tp": "", "pp": ""})
    with pytest.raises(Unexpressible, match="no parallel plan"):
        row_case({**BASE, "dp": "", "tp": "", "pp": ""})


LLAMA_70B = {
    "num_layers": "80",
    "hidden_size": "8192",
    "num_attention_heads": "64",
    "num_key_value_heads": "8",
    "ffn_hidden_size": "28672",
    "vocab_size": "128256",
    "attention": "gqa",
    "gated_mlp": "true",
}


def test_the_rows_vocabulary_picks_among_presets_that_share_an_architecture() -> None:
    """Llama 3 8B and Mistral 7B share layers, width, heads and MLP size but not their window or vocabulary: a row
    with Llama 3's vocabulary (128,256, Llama 3 model card) takes Llama 3.1 8B's schema-less fields (no window,
    llama3 RoPE); a row without a vocabulary matches neither (the two disagree on the window)."""
    llama3_8b = {**LLAMA_70B, "num_layers": "32", "hidden_size": "4096", "num_attention_heads": "32"}
    row = {
        **BASE,
        **llama3_8b,
        "ffn_hidden_size": "14336",
        "num_devices": "8",
        "tp": "1",
        "pp": "1",
        "dp": "8",
    }
    case = row_case(row)
    assert "architecture:llama-3.1-8b" in case.assumed
    assert (case.model.sliding_window, case.model.rope_scaling) == (0, "llama3")
    blank = row_case({**row, "vocab_size": ""})
    assert not any(a.startswith("architecture:") for a in blank.assumed) and blank.model.rope_scaling == ""


def test_a_matching_preset_fills_the_architecture_columns_a_row_leaves_blank() -> None:
    from workbench.presets.catalog import load_model

    llama, qwen = load_model("llama-3.1-70b"), load_model("qwen3-30b-a3b")
    dense = {**BASE, **LLAMA_70B, "num_devices": "64", "tp": "8", "pp": "1", "dp": "8"}
    full = row_case(dense)
    assert "architecture:llama-3.1-70b" in full.assumed  # the vocabulary picks Llama 3 over Llama 2
    case = row_case({**dense, "num_key_value_heads": ""})  # GQA without its key/value heads
    assert (
        case.model.num_key_value_heads == llama.num_key_value_heads and "num_key_value_heads" in case.assumed
    )
    assert case.model == full.model
    # without its vocabulary this row is Llama 2 70B or Llama 3 70B: no preset is picked, the default is said
    ambiguous = row_case({**dense, "vocab_size": ""})
    assert ambiguous.model.vocab_size == 51200 and "vocab_size" in ambiguous.assumed
    assert not any(a.startswith("architecture:") for a in ambiguous.assumed)
    unique = row_case({**QWEN3_30B, "vocab_size": ""})
    assert unique.model.vocab_size == qwen.vocab_size and "vocab_size" in unique.assumed
    moe = QWEN3_30B
    case = row_case({**moe, "experts_per_token": "", "moe_ffn_hidden_size": ""})
    assert (case.model.experts_per_token, case.model.moe_ffn_hidden_size) == (
        8,
        768,
    )  # Qwen3-30B-A3B config.json
    assert {"experts_per_token", "moe_ffn_hidden_size", "architecture:qwen3-30b-a3b"} <= set(case.assumed)
    assert case.model == row_case(moe).model


def test_without_a_matching_preset_blank_columns_take_the_schema_defaults_or_skip() -> None:
    from workbench.validate import Unexpressible

    odd = {**BASE, "vocab_size": "", "ffn_hidden_size": ""}  # 24 x 2048 x 16 heads: no preset
    case = row_case(odd)
    assert (case.model.vocab_size, case.model.ffn_hidden_size) == (51200, 4 * 2048)
    assert {"vocab_size", "ffn_hidden_size"} <= set(case.assumed)
    moe = {**QWEN3_30B, "num_layers": "40"}
    with pytest.raises(Unexpressible, match="experts_per_token .*no model preset matches"):
        row_case({**moe, "experts_per_token": ""})


def test_codes_are_read_case_insensitively_and_papers_schedule_names_are_the_schemas(tmp_path: Path) -> None:
    from workbench.validate import read_rows

    shouted = {
        **BASE,
        "dtype": " BF16",
        "recompute": "Full",
        "schedule": "PipeDream-Flush",
        "gated_mlp": "False",
    }
    rows = [shouted, {**BASE, "id": "X-002", "schedule": "interleaved", "pp": "2"}]
    rows.append({**BASE, "id": "X-003", "schedule": "zbv"})  # a V schedule holds 2 stages per rank
    path = tmp_path / "v.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(BASE))
        w.writeheader()
        w.writerows(rows)
    first, interleaved, v_shape = (row_case(r) for r in read_rows(path))
    plain = row_case({**BASE, "recompute": "full", "schedule": "1f1b"})
    assert (first.plan, first.workload, first.model) == (plain.plan, plain.workload, plain.model)
    assert (interleaved.plan.schedule, interleaved.plan.vpp) == ("interleaved-1f1b", 2)
    assert (v_shape.plan.schedule, v_shape.plan.vpp) == ("zbv", 2) and "vpp" in v_shape.assumed


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("zero_stage", "0.5", "zero_stage: 0.5 must be an integer"),
        ("num_layers", "24.5", "num_layers: 24.5 must be an integer"),
        ("sequence_parallel", "maybe", "sequence_parallel: 'maybe' is not true or false"),
        ("gated_mlp", "2", "gated_mlp: '2' is not true or false"),
        ("offload_activation_layers", "0", "offload_activation_layers: 0 must be an integer >= 1"),
        ("offload_activation_layers", "2.5", "offload_activation_layers: 2.5 must be an integer"),
    ],
)
def test_a_cell_that_is_not_its_columns_kind_is_refused_by_name(column: str, value: str, reason: str) -> None:
    from workbench.validate import Unexpressible

    with pytest.raises(Unexpressible, match=reason):
        row_case({**BASE, column: value})


def test_a_published_batch_the_replicas_cannot_split_is_priced_at_the_nearest_whole_one(
    tmp_path: Path,
) -> None:
    """OPT-175B's shape: 124 replicas and a 1,024-sequence batch ("2M tokens"). Priced with 8 x 124 = 992
    sequences and says so; the same plan with a batch they divide keeps it; a row measured by its step time
    keeps the published batch (tokens per second barely moves with the batch, a step time does) and is
    refused as infeasible."""
    row = {**BASE, "num_devices": "992", "tp": "8", "pp": "1", "dp": "124", "global_batch_size": "1024"}
    row |= {"cluster": "", "measured_step_time_s": "", "measured_tokens_per_s_per_device": "1000"}
    case = row_case(row)
    assert case.workload.global_batch_size == 992
    assert any(a.startswith("global_batch_size:992") and "1024" in a for a in case.assumed)
    assert row_case({**row, "global_batch_size": "1240"}).workload.global_batch_size == 1240
    timed = {**row, "measured_step_time_s": "10", "measured_tokens_per_s_per_device": ""}
    assert row_case(timed).workload.global_batch_size == 1024
    path = tmp_path / "t.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(BASE))
        w.writeheader()
        w.writerows([row, {**timed, "id": "X-002"}])
    result = validate_rows(list(csv.DictReader(path.open())), calibration=load_calibration())
    assert [r["id"] for r in result["rows"]] == ["X-001"]
    assert "X-002" in {s["id"] for s in result["skipped"]}


def test_a_run_naming_neither_micro_batch_nor_recompute_is_priced_as_tuned() -> None:
    """pp = 1, no micro-batch and no recompute given: full recompute when its largest fitting micro-batch runs
    faster than no recompute at its own. OPT-175B's shape (124-way ZeRO-3 with tp 8, 992 sequences): one
    sequence per rank is bound by the per-layer gathers, recomputing lets 8 fit and hides them. A 1.3B model on
    8 GPUs fits its whole local batch without recompute, and recomputing only adds work: it stays none."""
    from workbench.estimate.analytic import estimate_plan
    from workbench.presets.frameworks import load_framework

    row = {**BASE, "num_devices": "992", "tp": "8", "pp": "1", "dp": "124", "global_batch_size": "992"}
    row |= {
        "num_layers": "96",
        "hidden_size": "12288",
        "num_attention_heads": "96",
        "cluster": "",
        "zero_stage": "3",
    }
    row |= {"micro_batch_size": "", "measured_step_time_s": "", "measured_tokens_per_s_per_device": "1000"}
    case = row_case(row)
    assert case.plan.recompute == "full" and case.plan.micro_batch_size > 1
    assert any(a.startswith("recompute:full") for a in case.assumed)
    cal = load_calibration().with_framework(load_framework("generic"))
    none1 = dataclasses.replace(case.plan, recompute="none", micro_batch_size=1)
    slow = estimate_plan(case.model, case.cluster, case.workload, none1, calibration=cal)
    fast = estimate_plan(case.model, case.cluster, case.workload, case.plan, calibration=cal)
    assert fast.fits and fast.tokens_per_s > slow.tokens_per_s
    small = {**BASE, "tp": "1", "pp": "1", "dp": "8", "micro_batch_size": "", "global_batch_size": "64"}
    small |= {"measured_step_time_s": "", "measured_tokens_per_s_per_device": "1000"}
    kept = row_case(small)
    assert kept.plan.recompute == "none" and not any(a.startswith("recompute:") for a in kept.assumed)
