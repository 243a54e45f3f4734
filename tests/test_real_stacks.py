"""Plans for a named stack: the default stack, what each stack saves for backward, one fit rule, fit verdicts.

Independent values: the per-token bytes of a Megatron-Core/Transformer Engine layer are written out here tensor by
tensor from the stacks' code (TE ``module/linear.py`` and ``module/layernorm_linear.py`` keep the quantised FP8
input; Megatron-Core ``fusions/fused_bias_swiglu.py`` keeps only the SwiGLU input), the in-flight micro-batches of
interleaved 1F1B from Megatron's warm-up count (``schedules.py``:
``(pp - rank - 1) * 2 + (vpp - 1) * pp`` warm-up chunks, one more before the first backward), and torchtitan's
op-level SAC from its policy (``activation_checkpoint.py``: every second mm recomputed).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest

from workbench.cost.memory import activation_parts, op_sac_saved_matmul_widths
from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import (
    DEFAULT_FRAMEWORK,
    all_frameworks,
    load_framework,
    profile_for_text,
)
from workbench.specs.estimate import DEFAULT_HEADROOM_FRAC
from workbench.specs.plan import ParallelPlan, Workload

GIB = 2**30
VALIDATION = Path(__file__).resolve().parents[1] / "profiles" / "validation" / "training_public.csv"


def test_the_default_is_a_named_stack_with_its_version() -> None:
    fw = load_framework(DEFAULT_FRAMEWORK)
    assert fw.id != "generic" and fw.id.startswith("megatron-core")
    assert "25.11" in fw.version
    for prof in all_frameworks():  # every stack says which release it describes and when it was checked
        assert prof.version and len(prof.as_of) == 7, prof.id


def test_new_stacks_run_what_their_code_runs() -> None:
    tt, ds = load_framework("torchtitan-2025"), load_framework("deepspeed-2025")
    assert tt.schedules is not None and {"zbv", "dualpipev"} <= set(tt.schedules) and tt.expert_parallel
    assert ds.cp_kinds == ("ulysses",) and ds.context_parallel and 2 not in ds.zero_stages_with_pipeline
    # a later release of a stack shares its constants but is told apart by year, not taken for a fork
    assert tt.group == "torchtitan-2024" and ds.group == "deepspeed-2021"
    assert profile_for_text("torchtitan (FSDP2/DTensor)", year=2024).id == "torchtitan-2024"  # type: ignore[union-attr]
    assert profile_for_text("torchtitan", year=2025).id == "torchtitan-2025"  # type: ignore[union-attr]
    assert profile_for_text("DeepSpeed", year=2021).id == "deepspeed-2021"  # type: ignore[union-attr]
    assert profile_for_text("DeepSpeed", year=2025).id == "deepspeed-2025"  # type: ignore[union-attr]


def _te_fp8_layer_bytes_per_token(h: int, q: int, kv: int, f: int, heads: int) -> float:
    """One Llama layer under Megatron-Core + TE FP8 with fused SwiGLU, tensor by tensor (tp 1):
    the two norm inputs (16-bit residual stream) and the two quantised norm outputs LayerNormLinear keeps
    (1 byte), q, k and v and the attention output kept by the fused attention (16-bit) with its fp32 log-sum-exp
    per head, the output projection's own FP8 copy of its input, the SwiGLU input (gate and up, 16-bit) and the
    down projection's FP8 input."""
    norms = 2 * 2 * h + 2 * 1 * h
    attention = 2 * (q + 2 * kv) + 2 * q + 4 * heads + 1 * q
    mlp = 2 * 2 * f + 1 * f
    return norms + attention + mlp


def test_te_fp8_and_fused_swiglu_keep_what_the_stack_keeps() -> None:
    model = load_model("llama-3.1-70b")
    kw = {"flash": True, "dropout": False}
    te = activation_parts(model, fp8_saved_inputs=True, fused_glu=True, **kw)
    want = _te_fp8_layer_bytes_per_token(8192, 8192, 1024, 28672, 64)
    assert te.outside_tp + te.inside_tp == pytest.approx(want)
    bf16 = activation_parts(model, fused_glu=True, **kw)  # 16-bit: no FP8 copies, the norm outputs in 16 bits
    assert bf16.outside_tp + bf16.inside_tp == pytest.approx(
        8 * 8192 + 2 * (8192 + 2048) + 2 * 8192 + 4 * 64 + 2 * 3 * 28672
    )
    eager = activation_parts(model, **kw)  # eager SwiGLU keeps more than the fused one
    assert eager.inside_tp > bf16.inside_tp


def test_megatron_bridge_70b_fp8_recipe_fits_with_its_real_memory() -> None:
    """MBRIDGE_2511-022: Llama 3 70B, 64 H100, FP8, tp4 pp8 vpp5 mbs1 gbs128, distributed optimizer; it ran
    (1,602 tokens/s per GPU) and was called 103 GiB, "does not fit"."""
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", num_nodes=8)
    workload = Workload(seq_len=8192, global_batch_size=128, dtype="fp8")
    plan = ParallelPlan(
        dp=2, tp=4, pp=8, vpp=5, micro_batch_size=1, zero_stage=1, sequence_parallel=True,
        schedule="interleaved-1f1b",
    )  # fmt: skip
    est = estimate_plan(model, cluster, workload, plan, calibration=load_calibration())
    assert est.framework == DEFAULT_FRAMEWORK and est.fits
    # rank 0 holds Megatron's warm-up chunks plus one, each of 80 / (8 * 5) = 2 layers
    in_flight_layers = ((8 - 1) * 2 + (5 - 1) * 8 + 1) * 2
    per_layer = _te_fp8_layer_bytes_per_token(8192, 8192, 1024, 28672, 64) / 4 * 8192  # SP splits all by tp
    rank0 = est.memory.row(0, named=True)
    assert rank0["activations_bytes"] == pytest.approx(in_flight_layers * per_layer, rel=0.02)


def test_torchtitan_op_sac_saves_the_odd_matmuls() -> None:
    """torchtitan's block runs wq, wk, wv, wo, w1, w3, w2: its policy keeps matmuls 1, 3, 5 and 7."""
    m = load_model("llama-3.1-8b")
    assert op_sac_saved_matmul_widths(m) == (4096, 1024, 14336, 4096)
    parts = activation_parts(m, flash=True, dropout=False)
    assert parts.op_sac_inside == pytest.approx(2 * (4096 + 1024 + 14336 + 4096) + 2 * 4096 + 4 * 32)


def _search(framework: str):  # type: ignore[no-untyped-def]
    from workbench.search import Constraints, search

    return search(
        load_model("llama-3.1-8b"),
        load_cluster("dgx-h100", num_nodes=2),
        Workload(seq_len=4096, global_batch_size=64),
        Constraints(),
        calibration=load_calibration(framework=framework),
        top_k=3,
    )


def test_a_stack_that_does_not_run_zero2_never_ranks_a_zero2_plan() -> None:
    result = _search(DEFAULT_FRAMEWORK)
    fw = load_framework(DEFAULT_FRAMEWORK)
    assert result.framework == fw.id and result.framework_version == fw.version
    plans = result.plans
    assert plans.height and set(plans["zero_stage"].to_list()) <= set(fw.zero_stages)
    assert 2 not in plans["zero_stage"].to_list()
    assert set(plans["schedule"].to_list()) <= {*fw.schedules, "1f1b"}  # type: ignore[misc]
    assert set(_search("generic").plans["zero_stage"].to_list()) & {2}  # the any-feature choice does offer it


def test_one_fit_rule_everywhere(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    args = ["--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1", "--seq-len", "4096"]
    est = json.loads(workbench_cli("estimate", *args, "--global-batch", "16", "--json", check=True).stdout)
    plan = json.loads(
        workbench_cli("plan", *args, "--global-batch", "16", "--top", "1", "--json", check=True).stdout
    )
    capacity = est["memory_capacity_bytes"]
    assert est["memory_headroom_frac"] == plan["memory_headroom_frac"] == DEFAULT_HEADROOM_FRAC
    assert est["memory_usable_bytes"] == plan["memory_usable_bytes"] == pytest.approx(capacity * 0.95)
    assert est["framework"] == plan["framework"] == DEFAULT_FRAMEWORK
    # a plan between the usable line and the capacity does not fit
    e = estimate_plan(
        load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=1), Workload(seq_len=4096, global_batch_size=16),
        ParallelPlan(dp=8), calibration=load_calibration(),
    )  # fmt: skip
    between = dataclasses.replace(e, memory_capacity_bytes=e.peak_memory_bytes / 0.97)
    assert not between.fits and dataclasses.replace(between, memory_headroom_frac=0.0).fits


def test_estimate_infers_interleaving_from_virtual_stages(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    proc = workbench_cli(
        "estimate", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1", "--seq-len", "4096",
        "--global-batch", "16", "--pp", "2", "--vpp", "2", "--json", check=True,
    )  # fmt: skip
    out = json.loads(proc.stdout)
    assert "interleaved-1f1b" in out["plan"]
    assert any("as Megatron infers it" in n for n in out["notes"])


def _rows(*ids: str) -> list[dict[str, str]]:
    with VALIDATION.open(newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["id"] in ids]


def _write(rows: list[dict[str, str]], path: Path) -> Path:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buf.getvalue())
    return path


def test_validate_gives_a_fit_verdict_per_row(tmp_path: Path) -> None:
    from workbench.validate import run_validation

    recipe = _rows("MBRIDGE_2511-022")[0]
    too_big = {
        **recipe,
        "id": "MBRIDGE_2511-022X",
        "tp": "1",
        "pp": "1",
        "vpp": "",
        "dp": "64",
        "zero_stage": "1",
    }
    never_ran = _rows("KORTHIKANTI22_F1-001")[0]  # Fig. 1's no-recompute baseline: 104.8 GiB, computed
    path = _write([recipe, too_big], tmp_path / "rows.csv")
    result = run_validation(path)
    by_id = {r["id"]: r for r in result["rows"]}
    assert by_id["MBRIDGE_2511-022"]["fits"] is True
    assert by_id["MBRIDGE_2511-022"]["predicted_need_GiB"] < by_id["MBRIDGE_2511-022"]["usable_GiB"]
    assert by_id["MBRIDGE_2511-022X"]["fits"] is False
    assert [r["id"] for r in result["not_fitting"]] == ["MBRIDGE_2511-022X"]
    other = run_validation(_write([never_ran], tmp_path / "never.csv"))
    assert other["rows"][0]["fits"] is False and other["not_fitting"] == []  # it never ran: not listed


def test_megatron_bridge_offloading_recipe_fits_with_its_offloaded_layers(tmp_path: Path) -> None:
    """MBRIDGE_2511-002: Llama 3 70B on 64 GB300, FP8, Megatron-FSDP, mbs 2; its recipe offloads the activations
    of 20 of the 80 layers (llama3_workload_base_configs.py @5776a6d90, cpu_offloading_num_layers=20), read from
    the row's offload_activation_layers column. The device then holds 80 - 20 + 1 layers while the last layer
    runs forward (Transformer Engine 2.9 frees an offloaded group only when its window's last forward ends, and
    the last group's window is the last layer), then 80 - 20 layers and the loss's 16-bit logits alone
    (Transformer Engine's fused cross-entropy writes its gradient into them; Megatron-Core commits the last
    layer's group before the final norm and the output layer): the peak is the larger of the two. It fits;
    without the column it does not."""
    from workbench.validate import run_validation

    row = _rows("MBRIDGE_2511-002")[0]
    assert row["offload_activation_layers"] == "20"
    blank = {**row, "id": "MBRIDGE_2511-002X", "offload_activation_layers": ""}
    result = run_validation(_write([row, blank], tmp_path / "rows.csv"))
    by_id = {r["id"]: r for r in result["rows"]}
    assert "offload-act20" in by_id["MBRIDGE_2511-002"]["plan"]
    assert by_id["MBRIDGE_2511-002"]["fits"] is True
    assert [r["id"] for r in result["not_fitting"]] == ["MBRIDGE_2511-002X"]
    model, cluster = load_model("llama-3.1-70b"), load_cluster("gb300-nvl72", num_nodes=16)
    workload = Workload(seq_len=8192, global_batch_size=256, dtype="fp8")
    plan = ParallelPlan(
        dp=64, micro_batch_size=2, zero_stage=3, offload_activations=True, offload_activation_layers=20
    )
    est = estimate_plan(model, cluster, workload, plan, calibration=load_calibration())
    tokens = 2 * 8192
    layer = _te_fp8_layer_bytes_per_token(8192, 8192, 1024, 28672, 64) * tokens
    logits = tokens * 128256 * 2
    peak = (80 - 20) * layer + max(layer, logits)
    assert est.memory.row(0, named=True)["activations_bytes"] == pytest.approx(peak, rel=0.02)


def test_megatron_bridge_gb200_published_plans_fit(tmp_path: Path) -> None:
    """The three Megatron-Bridge 25.11 plans the memory model called non-fitting, each with its mechanism:
    MBRIDGE_2511-009 (Llama 3 70B, 64 GB200, FP8-CS, Megatron-FSDP, 40 of 80 layers offloaded): Blackwell keeps
    one FP8 copy of a per-tensor-scaled weight (no transpose) and the last offloaded group is freed before the
    logits; MBRIDGE_2511-010 (405B, tp4 pp16 vpp4): the same FP8 copy, and its launcher sets
    expandable_segments (scripts/performance/perf_plugins.py @5776a6d90, 405B on GB200 with fp8_cs); and
    MBRIDGE_2511-024 (GPT-OSS 120B on H100) runs its recipe's micro-batch of 1 (run_micro_batch_size). Each
    row without the column that carries its run's setting is still called non-fitting where it matters."""
    from workbench.validate import run_validation

    rows = _rows("MBRIDGE_2511-009", "MBRIDGE_2511-010", "MBRIDGE_2511-024")
    assert rows[1]["expandable_segments"] == "true" and rows[2]["run_micro_batch_size"] == "1"
    result = run_validation(_write(rows, tmp_path / "rows.csv"))
    assert result["not_fitting"] == []
    by_id = {r["id"]: r for r in result["rows"]}
    assert "mbs1" in by_id["MBRIDGE_2511-024"]["plan"]
    assert any("run_micro_batch_size" in a for a in by_id["MBRIDGE_2511-024"]["assumed"])
    blank = [
        {**rows[1], "id": "MBRIDGE_2511-010X", "expandable_segments": ""},
        {**rows[2], "id": "MBRIDGE_2511-024X", "run_micro_batch_size": ""},
    ]
    other = run_validation(_write(blank, tmp_path / "blank.csv"))
    assert [r["id"] for r in other["not_fitting"]] == ["MBRIDGE_2511-010X", "MBRIDGE_2511-024X"]
    # the need is the counted tensors plus the profile's fragmentation share and context; with expandable
    # segments no fragmentation share: the two needs differ by exactly that share of the counted tensors
    fw = load_framework("megatron-core-2024")
    need, need_x = by_id["MBRIDGE_2511-010"]["predicted_need_GiB"], other["rows"][0]["predicted_need_GiB"]
    counted = need - fw.context_bytes / GIB
    assert need_x == pytest.approx(counted * (1 + fw.fragmentation_frac) + fw.context_bytes / GIB, rel=1e-9)


@pytest.mark.parametrize(
    ("device", "recipe", "param_gather", "want"),
    [
        ("gb200", "current", True, 0.0),  # Blackwell: the FP8 weight is the only copy
        ("gb200", "current", False, 1.0),
        ("gb300", "delayed", False, 1.0),
        ("h100-sxm5-80gb", "current", True, 1.0),  # Hopper: the transposed copy stays
        ("h100-sxm5-80gb", "current", False, 2.0),
        ("gb200", "mxfp8", False, 2.0),  # MXFP8 keeps row-wise and column-wise scales and data
    ],
)
def test_fp8_weight_copies_follow_transformer_engines_layout_rule(
    device: str, recipe: str, param_gather: bool, want: float
) -> None:
    """Transformer Engine 2.9 ``is_non_tn_fp8_gemm_supported``: compute capability (10, 0) <= cc < (12, 0) or
    cc >= (13, 0) (B200/GB200 10.0, GB300 10.3; H100 9.0 runs TN only): a per-tensor FP8 weight keeps its data
    and no transpose there; Megatron-Core's profile counts 2 copies (row-wise and transposed) elsewhere."""
    from workbench.cost.context import fp8_weight_copy_bytes
    from workbench.presets.catalog import load_device

    fw = dataclasses.replace(
        load_framework("megatron-core-2024"), fp8_recipe=recipe, fp8_param_gather=param_gather
    )
    dev = load_device(device)
    cc = dev.compute_capability
    assert cc is not None and dev.fp8_gemm_any_layout == ((10, 0) <= cc < (12, 0) or cc >= (13, 0))
    assert fp8_weight_copy_bytes(fw, dev) == want
