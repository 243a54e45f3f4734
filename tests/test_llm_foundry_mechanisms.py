"""Mechanisms of the llm-foundry / Composer stack from its code (issue 48), each against a closed form:

- the bytes of the data-parallel gradient reduction follow the stack's FSDP ``reduce_dtype``: Composer's
  ``mixed_precision: DEFAULT`` reduce-scatters in fp32 with bf16 parameters, ``PURE`` in bf16
  (composer/trainer/mosaic_fsdp_utils.py ``get_mixed_precision``). The benchmark README of llm-foundry
  (scripts/train/benchmarking/README.md @4952183) publishes each run's MP Mode; the validation rows carry it in
  ``fsdp_mixed_precision``;
- the optimizer step moves the bytes of Composer's unfused DecoupledAdamW and FSDP's gradient clipping.

Expected values are closed forms over ``workbench.cost.comm``'s collectives and the HBM bandwidth."""

from __future__ import annotations

import csv
import dataclasses
import re

import numpy as np
import pytest

from tests.test_grad_buckets import MODEL, WORKLOAD
from tests.test_grad_buckets import _cal as grad_buckets_cal
from workbench.cost import step
from workbench.cost.comm import all_gather_s, reduce_scatter_s
from workbench.estimate.analytic import analytic_costs
from workbench.presets.catalog import load_cluster
from workbench.presets.frameworks import load_framework
from workbench.specs.plan import ParallelPlan
from workbench.validate.readings import apply_recipe_columns
from workbench.validate.training_csv import DEFAULT_DATA


def _cal(**fields):
    """test_grad_buckets' calibration (generic stack, nothing overlapped) with one bucket."""
    return grad_buckets_cal(grad_bucket_params=1e13, **fields)


def test_reduce_bytes_default_to_the_held_gradient() -> None:
    fw = load_framework("generic")
    assert fw.grad_reduce_bytes_per_param == 0.0
    assert fw.reduce_bytes_per_param == fw.grad_bytes_per_param
    assert dataclasses.replace(fw, grad_reduce_bytes_per_param=4.0).reduce_bytes_per_param == 4.0


def test_zero1_reduce_scatter_moves_fp32_gradients() -> None:
    """ZeRO-1 over 16 ranks in one bucket: reduce-scatter of P x 4 bytes (fp32 reduce_dtype) and all-gather of
    the bf16 weights, against P x 2 bytes with a bf16 reduction."""
    cluster = load_cluster("dgx-h100", num_nodes=2)
    params, plan = MODEL.total_parameters(), ParallelPlan(dp=16, zero_stage=1)
    fp32 = analytic_costs(
        MODEL, cluster, WORKLOAD, plan, _cal(grad_bytes_per_param=2.0, grad_reduce_bytes_per_param=4.0)
    )
    bf16 = analytic_costs(MODEL, cluster, WORKLOAD, plan, _cal(grad_bytes_per_param=2.0))
    gather = float(all_gather_s(cluster, params * 2.0, 16, 1))
    assert fp32.dp_comm_s == pytest.approx(
        float(reduce_scatter_s(cluster, params * 4.0, 16, 1)) + gather, rel=1e-9
    )
    assert bf16.dp_comm_s == pytest.approx(
        float(reduce_scatter_s(cluster, params * 2.0, 16, 1)) + gather, rel=1e-9
    )


def test_zero3_layer_reduce_scatter_moves_fp32_gradients() -> None:
    """ZeRO-3 without prefetch: the backward waits for the layer's all-gather and its reduce-scatter; the fp32
    reduction adds exactly the difference of the two reduce-scatters of the layer's gradient."""
    cluster = load_cluster("dgx-h100", num_nodes=4)
    plan = ParallelPlan(dp=32, zero_stage=3)
    layer = MODEL.layer_parameters(MODEL.num_layers - 1)
    out = []
    for reduce_bytes in (0.0, 4.0):
        cal = _cal(grad_bytes_per_param=2.0, grad_reduce_bytes_per_param=reduce_bytes, fsdp_prefetch=False)
        ctx = step.StepContext.build(MODEL, cluster, WORKLOAD, cal)
        cols = step.plan_columns(plan, WORKLOAD)
        out.append(step.fsdp_layer_s(ctx, cols, (np.asarray(1e-3), np.asarray(2e-3))))
    rs4 = float(reduce_scatter_s(cluster, layer * 4.0, 32, 1))
    rs2 = float(reduce_scatter_s(cluster, layer * 2.0, 32, 1))
    ag = float(all_gather_s(cluster, layer * 2.0, 32, 1))
    assert float(out[0].b) == pytest.approx(ag + rs2, rel=1e-9)
    assert float(out[1].b) == pytest.approx(ag + rs4, rel=1e-9)
    assert float(out[1].f) == pytest.approx(float(out[0].f), rel=1e-12)  # the forward gathers bf16 weights


def test_fsdp_mixed_precision_column() -> None:
    fw = load_framework("llm-foundry-2023")
    assert fw.reduce_bytes_per_param == 4.0  # submit_benchmarks.py's default, Composer's DEFAULT
    assert apply_recipe_columns({"fsdp_mixed_precision": "PURE"}, fw).reduce_bytes_per_param == 2.0
    assert apply_recipe_columns({"fsdp_mixed_precision": "default"}, fw).reduce_bytes_per_param == 4.0
    assert apply_recipe_columns({"fsdp_mixed_precision": ""}, fw) is fw
    with pytest.raises(ValueError, match="fsdp_mixed_precision: 'amp'.*default, pure, full"):
        apply_recipe_columns({"fsdp_mixed_precision": "amp"}, fw)


def test_llm_foundry_rows_carry_the_readme_mp_mode() -> None:
    """The README's MP Mode column: PURE for every run of its 'A100 40GB' section and for the two 70b runs on A100
    80GB (precision bf16), DEFAULT for every other run (amp_bf16 and amp_fp8)."""
    with open(DEFAULT_DATA, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["source_key"] == "MOSAIC_LLMFOUNDRY"]
    assert len(rows) == 149
    for r in rows:
        section = re.search(r"section '([^']+)'", r["source"]).group(1)  # type: ignore[union-attr]
        pure = section.startswith("A100 40GB") or (
            section.startswith("A100 80GB") and r["model_name"] == "MPT-70b"
        )
        assert r["fsdp_mixed_precision"] == ("pure" if pure else "default"), r["id"]


# Composer's DecoupledAdamW (composer/optim/decoupled_weight_decay.py, v0.16.4) with weight_decay 0, one eager op
# at a time on fp32 tensors: (tensors read, tensors written) per op, 4 bytes each.
DECOUPLED_ADAMW_OPS = {
    "exp_avg.mul_(beta1)": (1, 1),
    "exp_avg.add_(grad)": (2, 1),
    "exp_avg_sq.mul_(beta2)": (1, 1),
    "exp_avg_sq.addcmul_(grad, grad)": (2, 1),
    "exp_avg_sq.sqrt()": (1, 1),
    "/ sqrt(bias_correction2)": (1, 1),
    ".add_(eps)": (1, 1),
    "param.addcdiv_(exp_avg, denom)": (3, 1),
}
# FSDP.clip_grad_norm_: the norm reads each gradient, the scaling reads and writes it.
CLIP_GRAD_NORM_OPS = {"vector_norm(grad)": (1, 0), "grad.mul_(clip_coef)": (1, 1)}


def test_composer_optimizer_step_moves_its_eager_ops_bytes() -> None:
    """llm-foundry's optimizer step moves the bytes of Composer's unfused AdamW and FSDP's gradient clipping:
    92 bytes per locally owned parameter over the HBM bandwidth, against 30 for a fused Adam."""
    counted = sum(4.0 * (r + w) for r, w in (*DECOUPLED_ADAMW_OPS.values(), *CLIP_GRAD_NORM_OPS.values()))
    assert counted == 92.0
    fw = load_framework("llm-foundry-2023")
    assert fw.optimizer_bytes_per_param == counted
    cluster = load_cluster("dgx-h100", num_nodes=1)
    plan = ParallelPlan(dp=8, zero_stage=3)
    base = _cal()
    ours = dataclasses.replace(
        base, framework=dataclasses.replace(base.framework, optimizer_bytes_per_param=counted)
    )
    ctx = step.StepContext.build(MODEL, cluster, WORKLOAD, ours)
    local = MODEL.total_parameters() / 8
    got = analytic_costs(MODEL, cluster, WORKLOAD, plan, ours).optimizer_s
    assert float(np.asarray(got)) == pytest.approx(local * counted / ctx.hbm_bytes_per_s, rel=1e-9)
    fused = analytic_costs(MODEL, cluster, WORKLOAD, plan, base).optimizer_s
    assert float(np.asarray(fused)) == pytest.approx(local * 30.0 / ctx.hbm_bytes_per_s, rel=1e-9)
