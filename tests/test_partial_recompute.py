"""Partial recompute (``ParallelPlan.recompute_num_layers``, Megatron's block method): the share of layers it
recomputes, its step time, activation memory and HFU against closed forms, the torch-profile backend's
measured blocks, the plan's and the framework profiles' refusals, and the CLI flag."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.test_profile_table import SPEC, _write
from tests.test_torch_profile_backend import _cluster
from workbench.cost.memory import RECOMPUTE_CODES, layer_activation_bytes
from workbench.cost.step import StepContext, plan_columns, recompute_share, tokens
from workbench.estimate.analytic import estimate_plan
from workbench.estimate.registry import get_backend
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.specs.plan import ParallelPlan, Workload

MODEL = load_model("llama-3.1-8b")  # 32 layers
CLUSTER = load_cluster("dgx-h100", num_nodes=1)
WORKLOAD = Workload(seq_len=4096, global_batch_size=64)


def _plan(n: int | None, **kw: object) -> ParallelPlan:
    base = {"dp": 8, "micro_batch_size": 1, "zero_stage": 1, "recompute": "full", "recompute_num_layers": n}
    return ParallelPlan(**{**base, **kw})  # type: ignore[arg-type]


def _share(plan: ParallelPlan) -> float:
    return float(recompute_share(MODEL, plan_columns(plan, WORKLOAD)))


def test_share_is_n_over_the_layers_of_a_chunk() -> None:
    assert _share(_plan(8)) == pytest.approx(8 / 32)
    # pp 4 x vpp 2 = 8 chunks of 4 layers: 3 of each chunk is 3/4 of the layers; 4 or more is every layer
    piped = {"dp": 2, "pp": 4, "vpp": 2, "schedule": "interleaved-1f1b"}
    assert _share(_plan(3, **piped)) == pytest.approx(3 / 4)
    assert _share(_plan(4, **piped)) == _share(_plan(9, **piped)) == _share(_plan(None, **piped)) == 1.0
    assert _share(replace(_plan(None), recompute="selective")) == 0.0
    assert _share(replace(_plan(None), recompute="none")) == 0.0


def test_step_time_is_linear_in_the_recomputed_layers() -> None:
    """pp = 1: every layer adds its forward once more when recomputed, so the step is the no-recompute step
    plus N/L of what recomputing every layer adds."""
    none = estimate_plan(MODEL, CLUSTER, WORKLOAD, replace(_plan(None), recompute="none"))
    full = estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(None))
    for n in (1, 8, 16, 31):
        part = estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(n))
        expected = none.breakdown.compute_s + n / 32 * (full.breakdown.compute_s - none.breakdown.compute_s)
        assert part.breakdown.compute_s == pytest.approx(expected, rel=1e-9)
        assert part.plan.describe().endswith(f"rc-full{n}")
    assert estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(32)).step_time_s == pytest.approx(full.step_time_s)


def test_each_kept_layer_stores_its_activations_instead_of_its_input() -> None:
    """Recomputing k fewer layers stores k x (a layer's activations without recompute - its input) more:
    Korthikanti et al. 2022 (arXiv:2205.05198) section 4 for the layer, tokens x hidden x 2 bytes (tp 1, no
    sequence parallelism) for the input full recompute keeps."""
    cols = plan_columns(_plan(8), WORKLOAD)
    ctx = StepContext.build(MODEL, CLUSTER, WORKLOAD, load_calibration("default"))
    kw = {"tokens": tokens(ctx, cols), "seq_len": WORKLOAD.seq_len, "tp": 1, "sequence_parallel": False}
    kept = float(layer_activation_bytes(ctx.dense_parts, recompute=RECOMPUTE_CODES["none"], **kw))
    layer_input = float(layer_activation_bytes(ctx.dense_parts, recompute=RECOMPUTE_CODES["full"], **kw))
    assert layer_input == pytest.approx(1 * 4096 * MODEL.hidden_size * 2)
    act = {
        n: float(estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(n)).memory["activations_bytes"][0])
        for n in (8, 16, 24)
    }
    assert act[8] - act[16] == pytest.approx(8 * (kept - layer_input), rel=1e-9)
    assert act[16] - act[24] == pytest.approx(8 * (kept - layer_input), rel=1e-9)


def test_hfu_counts_only_the_recomputed_layers() -> None:
    """Megatron's hardware FLOPs (Narayanan et al. 2021, eq. 3): each recomputed layer adds its forward, 2 x its
    parameters plus a third of its attention FLOPs per token."""
    part = estimate_plan(MODEL, CLUSTER, WORKLOAD, _plan(8))
    layers = MODEL.non_embedding_active_parameters() - MODEL.lm_head_parameters()
    extra = 8 / 32 * (2 * layers + MODEL.attention_flop_per_token(WORKLOAD.seq_len) / 3)
    hardware = (MODEL.model_flop_per_token(WORKLOAD.seq_len) + extra) * WORKLOAD.tokens_per_step
    peak = CLUSTER.device.peak(WORKLOAD.dtype)
    assert part.hfu == pytest.approx(hardware / part.step_time_s / 8 / peak, rel=1e-9)


def test_torch_profile_recomputes_the_share_of_its_measured_blocks(tmp_path: Path) -> None:
    """The synthetic profile: embedding, 2 blocks and the head, each F = 1.2 ms, B = 2.4 ms and 1000 bytes of
    activations; 4 micro-batches of one rank. Recomputing 1 of the 2 blocks adds one block forward per
    micro-batch and keeps one block's input instead of its 1000 bytes."""
    _write(tmp_path)
    wl = Workload(seq_len=128, global_batch_size=4, dtype="fp32")
    plan = ParallelPlan(recompute="full", recompute_num_layers=1)
    est = get_backend("torch-profile", profile=str(tmp_path)).estimate(SPEC, _cluster(1), wl, plan)
    optimizer_s = SPEC.total_parameters() * 1e-8
    assert est.step_time_s == pytest.approx(4 * (4 * 3.6e-3 + 1.2e-3) + optimizer_s)
    layer_input = 128 * SPEC.hidden_size * 4  # fp32
    assert est.memory["activations_bytes"][0] == pytest.approx(3 * 1000 + layer_input + 1000)


def test_refusals_name_the_field_and_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="recompute_num_layers=4 needs recompute full"):
        ParallelPlan(recompute="selective", recompute_num_layers=4)
    with pytest.raises(ValueError, match="recompute_num_layers"):
        ParallelPlan(recompute="full", recompute_num_layers=0)
    foundry, fsdp = load_framework("llm-foundry-2023"), _plan(4, zero_stage=3)
    assert foundry.unsupported(fsdp) == ["recompute_num_layers=4 (recomputes every layer or none)"]
    assert foundry.admitting(fsdp).partial_recompute
    cal = replace(load_calibration("default"), framework=foundry)
    with pytest.raises(ValueError, match="llm-foundry-2023 does not run: recompute_num_layers=4"):
        estimate_plan(MODEL, CLUSTER, WORKLOAD, fsdp, calibration=cal)
    assert load_framework("megatron-core-2024").partial_recompute


def test_screen_plans_recompute_every_layer() -> None:
    """The planner's columns carry no recompute_layers: full recompute there means every layer."""
    cols = {k: np.atleast_1d(v) for k, v in plan_columns(_plan(None), WORKLOAD).items()}
    del cols["recompute_layers"]
    assert recompute_share(MODEL, cols)[0] == 1.0


def test_cli_flag(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    args = ["estimate", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", "1"]
    args += ["--micro-batch", "1", "--global-batch", "64", "--seq-len", "4096", "--zero", "1"]
    out = workbench_cli(*args, "--recompute", "full", "--recompute-num-layers", "8", check=True)
    assert "rc-full8" in out.stdout
    bad = workbench_cli(*args, "--recompute", "none", "--recompute-num-layers", "8")
    assert bad.returncode != 0 and "needs recompute full" in bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
