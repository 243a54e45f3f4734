"""``ParallelPlan.validate`` reports every violated rule at once, each as an actionable sentence."""

from __future__ import annotations

from workbench.presets import catalog
from workbench.specs.plan import ParallelPlan, Workload

LLAMA70 = catalog.load_model("llama-3.1-70b")
DGX8 = catalog.load_cluster("dgx-h100", num_nodes=8)  # 64 devices
WL = Workload(seq_len=8192, global_batch_size=256)


def test_valid_plan_has_no_violation() -> None:
    plan = ParallelPlan(dp=4, tp=8, pp=2, micro_batch_size=1, schedule="1f1b")
    assert plan.validate(LLAMA70, DGX8, WL) == []
    assert plan.num_microbatches(WL) == 64


def test_all_violations_at_once() -> None:
    plan = ParallelPlan(dp=3, tp=6, pp=3, ep=2, micro_batch_size=5, sequence_parallel=False)
    problems = plan.validate(LLAMA70, DGX8, WL)
    text = " ".join(problems)
    assert "must equal the cluster's 64 devices" in text
    assert "tp=6 must divide the 64 attention heads" in text
    assert "the 8 key/value heads must divide one another" in text
    assert "must divide the 80 layers" in text
    assert "must divide the global batch of 256" in text
    assert "needs a mixture-of-experts model" in text
    assert len(problems) >= 5


def test_kv_heads_and_experts() -> None:
    mixtral = catalog.load_model("mixtral-8x7b")
    plan = ParallelPlan(dp=16, tp=4, pp=1, ep=3)
    text = " ".join(plan.validate(mixtral, DGX8, WL))
    assert "ep=3 must divide the 8 routed experts" in text


def test_sequence_parallel_needs_tp() -> None:
    plan = ParallelPlan(dp=64, tp=1, sequence_parallel=True)
    assert any("sequence_parallel needs tp > 1" in p for p in plan.validate(LLAMA70, DGX8, WL))
