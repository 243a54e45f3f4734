"""Attention-DP ranks that schedule their own requests (``EngineProfile.dp_rank_batches``: vLLM V1's one engine
core per data-parallel rank, SGLang's scheduler per DP-attention rank): a prompt's chunks stay on its rank, within that rank's token budget, and on an MoE
model the ranks run each forward in lockstep, padded to the rank with the most tokens. Checked against the same
plan priced with the batch split evenly, given the heaviest rank's chunks on every rank (the padding), and the
chunk cap against the ceiling division of a prompt by one rank's budget."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.engines import load_engine
from workbench.serving.cost import ReplicaCost, heaviest_rank_chunks
from workbench.serving.simulate import Requests, simulate
from workbench.specs.serving import ServingPlan

CAL = load_calibration("default")
CLUSTER = load_cluster("dgx-h100")
MOE = load_model("qwen3-30b-a3b")
DENSE = load_model("llama-3.1-8b")
V1 = load_engine("vllm-v1-async")
EVEN = dataclasses.replace(V1, dp_rank_batches=False)
PLAN = ServingPlan(
    tp=1, ep=2, attention_dp=2, max_num_seqs=256, max_num_batched_tokens=4096, engine="vllm-v1-async"
)
EMPTY = np.array([], dtype=int)


def _pair(model=MOE, plan=PLAN) -> tuple[ReplicaCost, ReplicaCost]:  # type: ignore[no-untyped-def]
    """(the plan on vLLM V1's own-rank batches, the same engine splitting every batch evenly)."""
    return (ReplicaCost(model, CLUSTER, plan, CAL, engine=V1),
            ReplicaCost(model, CLUSTER, plan, CAL, engine=EVEN))  # fmt: skip


def test_heaviest_rank_by_hand() -> None:
    # largest first to the least-loaded rank: 300 -> rank 0, 200 -> rank 1, 100 -> rank 1 (200 < 300): 300 | 300
    new, ctx = heaviest_rank_chunks(np.array([200, 300, 100]), np.array([7, 8, 9]), 2)
    assert new.tolist() == [300, 300] and ctx.tolist() == [8, 8]  # the first of the tied ranks: rank 0
    # 900 alone on rank 0; 500 + 400 on rank 1 ties it; one chunk of 1000 outweighs every other split
    new, ctx = heaviest_rank_chunks(np.array([500, 1000, 400]), np.array([0, 1, 2]), 2)
    assert new.tolist() == [1000, 1000] and ctx.tolist() == [1, 1]
    new, _ = heaviest_rank_chunks(np.array([400, 400, 400]), np.zeros(3, int), 3)
    assert new.tolist() == [400, 400, 400]  # one chunk a rank: already balanced
    new, _ = heaviest_rank_chunks(np.array([100, 60, 50]), np.zeros(3, int), 2)
    assert new.tolist() == [60, 50, 60, 50]  # 100 | 60 + 50 = 110: rank 1 is the heavier
    same = heaviest_rank_chunks(np.array([5, 6]), np.array([1, 2]), 1)
    assert same[0].tolist() == [5, 6] and same[1].tolist() == [1, 2]
    with pytest.raises(ValueError, match="one entry per chunk"):
        heaviest_rank_chunks(np.array([1, 2]), np.array([0]), 2)
    with pytest.raises(ValueError, match="ranks must be an integer >= 1"):
        heaviest_rank_chunks(np.array([1]), np.array([0]), 0)


def test_vllm_v1_and_sglang_profiles_schedule_per_rank_and_others_do_not() -> None:
    for name in ("vllm-v1-async", "vllm-v1", "sglang"):
        engine = load_engine(name)
        assert engine.dp_rank_batches and "dp_rank_batches" in engine.sources
    for name in ("vllm-v0", "trtllm", "generic"):
        assert not load_engine(name).dp_rank_batches


def test_one_prompt_chunk_occupies_one_rank_and_paces_both() -> None:
    lock, even = _pair()
    dec = np.full(40, 900)
    for n, c in ((2048, 0), (700, 1500)):
        # the chunk's rank does all of it, the other rank is padded to the same tokens: even split of two copies
        assert lock.iteration_s(np.array([n]), np.array([c]), dec) == pytest.approx(
            even.iteration_s(np.array([n, n]), np.array([c, c]), dec)
        )
        assert lock.iteration_s(np.array([n]), np.array([c]), dec) > even.iteration_s(
            np.array([n]), np.array([c]), dec
        )
    chunks, ctx = np.array([200, 300, 100]), np.array([7, 8, 9])
    assert lock.iteration_s(chunks, ctx, dec) == pytest.approx(
        even.iteration_s(np.array([300, 300]), np.array([8, 8]), dec)
    )
    # decode-only iterations are split evenly either way (the front end balances the running requests)
    assert lock.iteration_s(EMPTY, EMPTY, dec) == even.iteration_s(EMPTY, EMPTY, dec)


def test_a_rank_prefills_within_its_own_budget() -> None:
    lock, even = _pair()
    assert lock.max_chunk_tokens == 4096 // 2 and even.max_chunk_tokens == 4096
    # a lone 5000-token prompt: chunks of one rank's 2048 tokens, each on one rank with the other padded
    chunks = [(2048, 0), (2048, 2048), (904, 4096)]
    expected = sum(even.iteration_s(np.array([n, n]), np.array([c, c]), EMPTY) for n, c in chunks)
    assert lock.prefill_s(5000) == pytest.approx(expected)


def test_dense_models_keep_the_even_split() -> None:
    # without expert layers the ranks need not run in lockstep: vLLM's DP ranks of a dense model are replicas
    plan = ServingPlan(
        tp=1, attention_dp=2, max_num_seqs=256, max_num_batched_tokens=4096, engine="vllm-v1-async"
    )
    lock, even = _pair(DENSE, plan)
    args = (np.array([1500]), np.array([0]), np.full(10, 300))
    assert lock.iteration_s(*args) == even.iteration_s(*args)
    assert lock.max_chunk_tokens == 4096


def test_the_simulator_caps_each_chunk() -> None:
    class Flat:
        kv_capacity_tokens, kv_block_tokens = 1 << 20, 16

        def iteration_s(self, new: np.ndarray, context: np.ndarray, decode: np.ndarray) -> float:
            return 0.01 if len(new) or len(decode) else 0.0

    p, cap = 1000, 256
    one = Requests(arrival_s=np.array([0.0]), input_tokens=np.array([p]), output_tokens=np.array([2]))
    r = simulate(
        one, Flat(), policy="sarathi", max_num_seqs=8, max_num_batched_tokens=1024, max_chunk_tokens=cap
    )
    prefill = [t for t in r.iterations["num_prefill_tokens"].to_list() if t]
    assert prefill == [256, 256, 256, 232] and len(prefill) == math.ceil(p / cap)
    # two prompts share the 1024-token budget, each within its own 256
    two = Requests(arrival_s=np.zeros(2), input_tokens=np.array([600, 600]), output_tokens=np.array([2, 2]))
    r = simulate(
        two, Flat(), policy="sarathi", max_num_seqs=8, max_num_batched_tokens=1024, max_chunk_tokens=cap
    )
    assert r.iterations["num_prefill_tokens"].to_list()[:3] == [512, 512, 176]
    for bad in (0, 1025):
        with pytest.raises(ValueError, match="max_chunk_tokens must be an integer in 1..1024"):
            simulate(one, Flat(), policy="sarathi", max_num_seqs=8, max_num_batched_tokens=1024,
                     max_chunk_tokens=bad)  # fmt: skip
