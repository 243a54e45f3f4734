"""Vocabulary parallelism (issue 15, item 1; Yeung et al. 2024, arXiv:2411.05288): the embedding and the LM
head with its loss spread evenly over the pipeline ranks. Checked by conservation (the ranks together hold
exactly the vocabulary layers' parameters and do exactly their compute, each 1/pp of it) and by the relief of
the last stage, computed here from the per-layer costs."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost import step
from workbench.estimate.analytic import analytic_costs, estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.specs.plan import ParallelPlan, Workload

MODEL, CLUSTER = load_model("llama-3.1-70b"), load_cluster("dgx-h100", 8)
WORK = Workload(seq_len=8192, global_batch_size=256)
CAL = load_calibration("default", framework="generic")  # a stack that runs vocabulary parallelism
PLAN = dict(dp=1, tp=8, pp=8, micro_batch_size=1, zero_stage=1, sequence_parallel=True)


def test_every_rank_holds_an_even_share_of_the_vocabulary_layers():
    ctx = step.StepContext.build(MODEL, CLUSTER, WORK, CAL)
    cols = step.plan_columns(ParallelPlan(**PLAN, vocab_parallel=True), WORK)
    held = step.rank_holdings(MODEL, pp=8, vpp=1, v_shape=False, rank=np.arange(8))
    spread = step.spread_vocab(held, cols, 8)
    assert np.allclose(spread["embedding"], 1 / 8) and np.allclose(spread["head"], 1 / 8)
    plain_dense, _ = step.params_held(ctx, cols, held)
    spread_dense, _ = step.params_held(ctx, cols, spread)
    vocab = (MODEL.embedding_parameters() + MODEL.lm_head_parameters()) / 8  # per tp rank
    assert float(np.sum(spread_dense)) == pytest.approx(float(np.sum(plain_dense)), rel=1e-12)  # conserved
    layers_only = (
        plain_dense
        - (held["embedding"] * MODEL.embedding_parameters() + held["head"] * MODEL.lm_head_parameters()) / 8
    )
    assert np.allclose(spread_dense, layers_only + vocab / 8, rtol=1e-12)


def test_the_last_stage_sheds_the_head_and_every_rank_takes_a_share():
    plain = analytic_costs(MODEL, CLUSTER, WORK, ParallelPlan(**PLAN), CAL)
    spread = analytic_costs(MODEL, CLUSTER, WORK, ParallelPlan(**PLAN, vocab_parallel=True), CAL)
    edges = step.layer_pair(
        step.StepContext.build(MODEL, CLUSTER, WORK, CAL), step.plan_columns(ParallelPlan(**PLAN), WORK)
    ).edges
    head = float(edges.head_f_s + edges.head_i_s + edges.head_w_s)
    emb = float(edges.embedding_f_s + edges.embedding_b_s)
    moved = np.asarray(spread.rank_compute_s) - np.asarray(plain.rank_compute_s)
    assert moved[-1] == pytest.approx(
        head / 8 + emb / 8 - head, rel=1e-9
    )  # the last rank gives up 7/8 of the head
    assert moved[0] == pytest.approx(head / 8 + emb / 8 - emb, rel=1e-9)
    assert np.allclose(moved[1:-1], (head + emb) / 8, rtol=1e-9)
    assert float(np.sum(moved)) == pytest.approx(0.0, abs=1e-12)  # the same work, spread
    fast = estimate_plan(MODEL, CLUSTER, WORK, ParallelPlan(**PLAN, vocab_parallel=True), calibration=CAL)
    slow = estimate_plan(MODEL, CLUSTER, WORK, ParallelPlan(**PLAN), calibration=CAL)
    assert fast.step_time_s < slow.step_time_s and fast.breakdown.exposed_pp_comm_s > 0


def test_only_stacks_that_run_it():
    plan = ParallelPlan(**PLAN, vocab_parallel=True)
    assert load_framework("generic").unsupported(plan) == []
    assert "vocabulary parallelism" in " ".join(load_framework("megatron-core-2024").unsupported(plan))
    assert "vocab-par" in plan.describe()
