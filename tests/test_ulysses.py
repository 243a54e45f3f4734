"""Context parallelism beyond the ring: DeepSpeed-Ulysses and the hybrid USP (issue 15, item 4).

Independent values: the all-to-all volume of DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv:2309.14509,
section 3.1: Q, K, V and the output, each ``N*h/P`` per device of which ``(P-1)/P`` leaves it) priced at the
NVLink bandwidth of one DGX H100 node; the head-divisibility rule of Transformer Engine's a2a path; and the
kinds each framework profile offers.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from workbench.cost.comm import NVLINK_LINK_FRAC
from workbench.cost.layer_comm import ulysses_all_to_all_s
from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.search.space import Constraints, build_space, framework_constraints
from workbench.specs.plan import ParallelPlan, Workload


def _nvlink_bytes_per_s(cluster) -> float:
    """What NCCL moves per device over NVLink: the level's bandwidth times the share NCCL's channels reach
    (``workbench.cost.comm.NVLINK_LINK_FRAC``, from NCCL's tuning model)."""
    inner = cluster.levels[0]
    return inner.bytes_per_s * NVLINK_LINK_FRAC[inner.nvlink_generation]


def test_ulysses_volume_is_the_papers_four_all_to_alls():
    """MHA (GPT-3 175B: 96 heads of 128): four all-to-alls of N*h/P values, (P-1)/P of them sent, at NVLink
    speed. The start-up latency of each all-to-all is the only other term (bounded here from both sides)."""
    model, cluster = load_model("gpt3-175b"), load_cluster("dgx-h100", 1)
    n_seq, p = 32768, 8
    tokens = n_seq / p  # each rank's share of the sequence
    sent = 4 * tokens * model.hidden_size * 2.0 * (p - 1) / p  # bytes per device, bf16
    nvlink = _nvlink_bytes_per_s(cluster)
    t = float(ulysses_all_to_all_s(model, cluster, tokens=tokens, tp=1, ulysses=p, stride=1))
    assert sent / nvlink < t < sent / nvlink + 4 * 50e-6  # four start-ups of at most 50 us each


def test_gqa_moves_fewer_key_value_bytes():
    """GQA (Llama-3.1-8B: 32 query heads, 8 key/value heads of 128): K and V carry 8 heads each instead of 32,
    so against MHA the four all-to-alls move 2 x 24 heads fewer; the start-ups are the same and cancel."""
    model = load_model("llama-3.1-8b")
    mha = dataclasses.replace(model, num_key_value_heads=model.num_attention_heads)
    cluster = load_cluster("dgx-h100", 1)
    kw = {"tokens": 4096.0, "tp": 1, "ulysses": 8, "stride": 1}
    saved = float(ulysses_all_to_all_s(mha, cluster, **kw)) - float(
        ulysses_all_to_all_s(model, cluster, **kw)
    )
    fewer = 4096 * 2 * 24 * 128 * 2.0 * 7 / 8  # bytes not sent: 2 tensors x 24 heads x 128 x bf16, 7/8 leave
    assert saved == pytest.approx(fewer / _nvlink_bytes_per_s(cluster), rel=1e-9)
    assert float(ulysses_all_to_all_s(model, cluster, **{**kw, "ulysses": 1})) == 0.0


def test_ulysses_needs_whole_heads_per_rank():
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", 2)
    work = Workload(seq_len=65536, global_batch_size=4)
    ok = ParallelPlan(dp=1, tp=2, cp=8, ulysses=4, micro_batch_size=1)  # 2*4 divides 32 and 8 heads
    assert ok.validate(model, cluster, work) == []
    bad = ParallelPlan(dp=1, tp=2, cp=8, ulysses=8, micro_batch_size=1)  # 2*8 = 16 does not divide 8 kv heads
    keys = [v.key for v in bad.violations(model, cluster, work)]
    assert keys == ["ulysses_heads"]
    assert "8 key/value heads" in bad.validate(model, cluster, work)[0]
    odd = ParallelPlan(dp=1, tp=1, cp=8, ulysses=3, micro_batch_size=1)
    assert "ulysses_divides_cp" in [v.key for v in odd.violations(model, cluster, work)]


def test_kinds_and_descriptions():
    plans = {u: ParallelPlan(cp=8, ulysses=u) for u in (1, 2, 8)}
    assert [plans[u].cp_kind for u in (1, 2, 8)] == ["ring", "usp", "ulysses"]
    assert ParallelPlan().cp_kind == "none"
    assert "usp2" in plans[2].describe() and "ulysses" in plans[8].describe()
    with pytest.raises(ValueError, match="ulysses"):
        ParallelPlan(cp=2, ulysses=0)


def test_framework_offers_only_its_kinds():
    """torchtitan's context parallelism is ring attention only; Megatron-Core runs a2a and a2a+p2p too."""
    titan, mcore = load_framework("torchtitan-2024"), load_framework("megatron-core-2024")
    assert titan.cp_kinds == ("ring",) and set(mcore.cp_kinds) == {"ring", "ulysses", "usp"}
    plan = ParallelPlan(dp=1, tp=1, cp=8, ulysses=8, micro_batch_size=1)
    assert any("ulysses" in r for r in titan.unsupported(plan))
    assert mcore.unsupported(plan) == []
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", 1)
    for fw, kinds in ((titan, {1}), (mcore, {1, 2, 4, 8})):
        space = build_space(model, cluster, framework_constraints(Constraints(fixed={"cp": 8}), fw))
        assert set(np.unique(space.layout["ulysses"]).tolist()) == kinds


def test_ring_hides_what_ulysses_exposes():
    """At 128k tokens on one NVLink node the ring's KV passes hide behind the attention blocks (Megatron-Core
    overlaps them), while the Ulysses all-to-alls are all exposed; the hybrid lies between. The exposed cp
    time of pure Ulysses is its all-to-alls: 4 forward, 4 backward, and 4 more in the full recompute."""
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", 1)
    work = Workload(seq_len=131072, global_batch_size=8)
    cal = load_calibration("default", framework="megatron-core-2024")
    exposed, hidden = {}, {}
    for u in (1, 2, 8):
        plan = ParallelPlan(dp=1, tp=1, cp=8, ulysses=u, micro_batch_size=1, zero_stage=1, recompute="full")
        est = estimate_plan(model, cluster, work, plan, calibration=cal)
        exposed[u], hidden[u] = est.breakdown.exposed_cp_comm_s, est.breakdown.overlapped()["cp"]
    assert hidden[8] == 0.0 and hidden[1] > hidden[2] > 0.0
    assert exposed[8] > exposed[2] > exposed[1]
    one = float(ulysses_all_to_all_s(model, cluster, tokens=131072 / 8, tp=1, ulysses=8, stride=1))
    m = 8  # micro-batches per step (global batch 8, dp 1, micro-batch 1)
    assert exposed[8] == pytest.approx(m * model.num_layers * 3 * one, rel=1e-9)
