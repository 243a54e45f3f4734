"""Serving request simulator: closed forms (TTFT, TPOT, throughput, KV admission, preemption, chunked prefill,
M/D/1 queueing, closed loop, disaggregation) with an affine fake cost, and rejection of bad input."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from workbench.serving.simulate import (
    ITERATION_COLUMNS,
    REQUEST_COLUMNS,
    DisaggregatedPools,
    IterationCost,
    Requests,
    RequestSimResult,
    simulate,
)
from workbench.specs.estimate import TIMELINE_COLUMNS


@dataclass(frozen=True)
class AffineCost:
    """iteration_s = fixed + per new prefill token + per prefill context token + per decode seq + per decode KV
    token; kv_transfer_s = per token."""

    fixed_s: float = 0.01
    prefill_token_s: float = 0.0
    prefill_context_s: float = 0.0
    decode_seq_s: float = 0.0
    decode_context_s: float = 0.0
    transfer_token_s: float = 0.0
    kv_capacity_tokens: int = 1 << 24
    kv_block_tokens: int = 16

    def iteration_s(self, new: np.ndarray, context: np.ndarray, decode: np.ndarray) -> float:
        if not len(new) and not len(decode):
            return 0.0
        return (
            self.fixed_s
            + self.prefill_token_s * float(new.sum())
            + self.prefill_context_s * float(context.sum())
            + self.decode_seq_s * len(decode)
            + self.decode_context_s * float(decode.sum())
        )

    def kv_transfer_s(self, tokens: int) -> float:
        return self.transfer_token_s * tokens


def run(requests: Requests, cost: IterationCost, **kw: Any) -> RequestSimResult:
    kw.setdefault("max_num_seqs", 256)
    kw.setdefault("max_num_batched_tokens", 1 << 16)
    return simulate(requests, cost, **kw)


def one(arrival_s: float, prompt: int, output: int) -> Requests:
    return Requests(
        arrival_s=np.array([arrival_s]), input_tokens=np.array([prompt]), output_tokens=np.array([output])
    )


def test_fake_conforms_to_the_protocol() -> None:
    assert isinstance(AffineCost(), IterationCost)


@pytest.mark.parametrize("max_run", [1, 1 << 20])
def test_single_request_ttft_is_the_prefill_and_tpot_one_decode(max_run: int) -> None:
    cost = AffineCost(fixed_s=0.02, prefill_token_s=1e-4, decode_seq_s=3e-3, decode_context_s=2e-6)
    p, o, arrival = 500, 40, 1.5
    r = run(one(arrival, p, o), cost, max_run_iterations=max_run)
    row = r.requests.row(0, named=True)
    assert row["ttft_s"] == pytest.approx(0.02 + 1e-4 * p)
    assert row["first_token_s"] == pytest.approx(arrival + 0.02 + 1e-4 * p)
    # decode m = 1..o-1 reads a KV of p + m tokens: the mean is p + o / 2
    assert row["tpot_s"] == pytest.approx(0.02 + 3e-3 + 2e-6 * (p + o / 2))
    assert r.iterations.height == o
    assert r.iterations["num_decode_seqs"].to_list() == [0] + [1] * (o - 1)
    assert r.iterations["kv_used_tokens"].to_list() == [p] + [p + m for m in range(1, o)]


def test_steady_decode_batch_tpot_is_the_batch_iteration_time() -> None:
    n, p, o = 32, 128, 50
    cost = AffineCost(fixed_s=0.01, prefill_token_s=2e-5, decode_seq_s=4e-4)
    r = run(Requests.offline(n, input_tokens=p, output_tokens=o), cost)
    prefill_s = 0.01 + 2e-5 * n * p
    assert r.requests["ttft_s"].to_numpy() == pytest.approx(np.full(n, prefill_s))
    assert r.requests["tpot_s"].to_numpy() == pytest.approx(np.full(n, 0.01 + 4e-4 * n))
    # offline throughput: n * o tokens over one prefill and o - 1 decode iterations of the full batch
    duration = prefill_s + (o - 1) * (0.01 + 4e-4 * n)
    assert r.duration_s == pytest.approx(duration)
    assert r.output_tokens_per_s == pytest.approx(n * o / duration)
    assert r.requests_per_s == pytest.approx(n / duration)
    assert r.tpot.p99_s == pytest.approx(0.01 + 4e-4 * n)


def test_kv_admission_the_next_request_waits_for_a_finish() -> None:
    k, p, o, block = 5, 60, 4, 16  # peak p + o - 1 = 63 tokens: 4 blocks, as the prompt
    cost = AffineCost(fixed_s=0.01, prefill_token_s=1e-5, decode_seq_s=1e-3, kv_capacity_tokens=4 * k * block)
    r = run(Requests.offline(k + 1, input_tokens=p, output_tokens=o), cost)
    finish_first = 0.01 + 1e-5 * k * p + (o - 1) * (0.01 + 1e-3 * k)
    req = r.requests
    assert req["finish_s"][:k].to_numpy() == pytest.approx(np.full(k, finish_first))
    assert req["first_token_s"][k] == pytest.approx(finish_first + 0.01 + 1e-5 * p)
    assert r.num_preemptions == 0
    assert r.iterations["waiting"][0] == 1
    assert r.iterations["kv_used_tokens"].to_numpy().max() <= 4 * k * block


def test_preemption_recomputes_the_youngest_and_it_still_finishes() -> None:
    # two requests of 32 + 40 tokens; 8 blocks of 16: both fit until the KV reaches 65 tokens each (m = 33)
    cost = AffineCost(fixed_s=1.0, kv_capacity_tokens=8 * 16)
    r = run(Requests.offline(2, input_tokens=32, output_tokens=40), cost)
    req = r.requests
    assert req["preemptions"].to_list() == [0, 1]
    assert req["finish_s"].to_list() == pytest.approx([40.0, 47.0])  # 1 + 39 iterations; then 1 + 6 after it
    assert req["first_token_s"].to_list() == pytest.approx([1.0, 1.0])
    # every output token is emitted once: decodes plus completed prefills (one per request and preemption)
    tokens = int(r.iterations["num_decode_seqs"].sum()) + 2 + r.num_preemptions
    assert tokens == 80
    assert r.iterations["num_prefill_tokens"].to_list()[40] == 32 + 33  # the recompute: prompt + generated


def test_chunked_prefill_splits_a_long_prompt() -> None:
    p, budget = 1000, 256
    cost = AffineCost(fixed_s=0.01, prefill_token_s=1e-5, prefill_context_s=1e-7)
    r = run(one(0.0, p, 3), cost, policy="sarathi", max_num_seqs=8, max_num_batched_tokens=budget)
    chunks = [256, 256, 256, 232]
    assert math.ceil(p / budget) == len(chunks)
    assert r.iterations["num_prefill_tokens"].to_list() == [*chunks, 0, 0]
    contexts = [0, 256, 512, 768]
    assert r.ttft.mean_s == pytest.approx(4 * 0.01 + 1e-5 * p + 1e-7 * sum(contexts))
    assert r.timeline_rows()["op"].to_list() == ["prefill"] * 4 + ["decode"] * 2


def test_chunked_prefill_fills_the_budget_left_by_decodes() -> None:
    cost = AffineCost(fixed_s=0.01)
    reqs = Requests(
        arrival_s=np.array([0.0, 0.015]), input_tokens=np.array([10, 100]), output_tokens=np.array([50, 2])
    )
    r = run(reqs, cost, policy="sarathi", max_num_seqs=8, max_num_batched_tokens=40)
    it = r.iterations
    # iteration 1 (0.01..0.02) decodes request 0 only; the arrival joins from iteration 2 with 40 - 1 tokens
    assert it["num_prefill_tokens"].to_list()[:5] == [10, 0, 39, 39, 22]
    assert it["num_decode_seqs"].to_list()[:6] == [0, 1, 1, 1, 1, 2]
    assert r.requests["ttft_s"][1] == pytest.approx(5 * 0.01 - 0.015)


@pytest.mark.parametrize(
    ("policy", "finish_0", "kind"), [("vllm", 0.21, "prefill"), ("sarathi", 0.20, "mixed")]
)
def test_vllm_prefills_alone_and_sarathi_mixes(policy: str, finish_0: float, kind: str) -> None:
    # request 1 arrives during request 0's 6th iteration: vllm stalls the decode for one prefill-only iteration
    reqs = Requests(
        arrival_s=np.array([0.0, 0.055]), input_tokens=np.array([10, 50]), output_tokens=np.array([20, 3])
    )
    r = run(reqs, AffineCost(fixed_s=0.01), policy=policy, chunked_prefill=False)
    assert r.requests["finish_s"].to_list() == pytest.approx([finish_0, 0.09])
    assert r.requests["ttft_s"][1] == pytest.approx(0.015)
    assert r.requests["tpot_s"][0] == pytest.approx((finish_0 - 0.01) / 19)
    assert r.timeline_rows()["op"].to_list()[:8] == ["prefill", *["decode"] * 5, kind, "decode"]


def test_mdl_queue_matches_pollaczek_khinchine() -> None:
    d, rate, n = 1.0, 0.3, 100_000
    rho = rate * d
    reqs = Requests.poisson(rate, n, input_tokens=8, output_tokens=1, seed=7)
    r = run(reqs, AffineCost(fixed_s=d), max_num_seqs=1, max_num_batched_tokens=8)
    wait = r.requests["ttft_s"].to_numpy() - d
    expected = rho * d / (2 * (1 - rho))  # M/D/1 mean wait (Pollaczek-Khinchine)
    # the mean of these correlated waits scatters by about 1.1 % (std over 20 seeds); allow 5 %
    assert wait.mean() == pytest.approx(expected, rel=0.05)
    assert (wait >= -1e-9).all()
    assert math.isnan(r.tpot.mean_s)  # one output token: no TPOT


def test_closed_loop_keeps_n_in_flight() -> None:
    n_conc, total, p, o, f = 4, 20, 10, 5, 0.02
    r = run(Requests.closed_loop(n_conc, total, input_tokens=p, output_tokens=o), AffineCost(fixed_s=f))
    req = r.requests
    arrival, finish = req["arrival_s"].to_numpy(), req["finish_s"].to_numpy()
    for t in np.unique(arrival):
        in_flight = int(((arrival <= t + 1e-12) & (finish > t + 1e-12)).sum())
        assert in_flight == n_conc
    assert r.output_tokens_per_s == pytest.approx(n_conc / f)  # n requests of o tokens every o iterations
    assert arrival[n_conc:].tolist() == pytest.approx(np.repeat(np.arange(1, 5) * o * f, n_conc).tolist())


POOLS: dict[str, dict[str, Any]] = {
    "3 replicas": {"replicas": 3, "router": "least_loaded"},
    "1P2D": {"disaggregation": DisaggregatedPools(num_prefill_engines=1, num_decode_engines=2)},
    "2P1D": {"disaggregation": DisaggregatedPools(num_prefill_engines=2, num_decode_engines=1)},
}


@pytest.mark.parametrize("pools", POOLS)
@pytest.mark.parametrize("policy", ["vllm", "sarathi"])
@pytest.mark.parametrize("arrivals", ["poisson", "offline", "closed"])
def test_decode_runs_equal_iteration_by_iteration(arrivals: str, policy: str, pools: str) -> None:
    # with an affine cost, pricing a decode run at its two ends is exact: the same batches, the same times
    rng = np.random.default_rng(3)
    n = 300
    lengths = {"input_tokens": rng.integers(1, 900, n), "output_tokens": rng.integers(1, 200, n)}
    reqs = {
        "poisson": lambda: Requests.poisson(40.0, n, seed=5, **lengths),
        "offline": lambda: Requests.offline(n, **lengths),
        "closed": lambda: Requests.closed_loop(20, n, **lengths),
    }[arrivals]()
    cost = AffineCost(
        fixed_s=0.008, prefill_token_s=2e-5, decode_seq_s=2e-4, decode_context_s=1e-7, transfer_token_s=1e-6,
        kv_capacity_tokens=6_000,
    )  # fmt: skip
    kw: dict[str, Any] = {
        "policy": policy,
        "max_num_seqs": 48,
        "max_num_batched_tokens": 1024,
        **POOLS[pools],
    }
    fast, slow = run(reqs, cost, **kw), run(reqs, cost, max_run_iterations=1, **kw)
    assert fast.num_preemptions == slow.num_preemptions
    for col in ("first_token_s", "finish_s", "preemptions", "engine"):
        assert fast.requests[col].to_numpy() == pytest.approx(slow.requests[col].to_numpy(), rel=1e-12)
    # a run records the queue length of its first iteration: compare every other column
    same = fast.iterations.drop("waiting", "start_s", "end_s")
    assert same.equals(slow.iterations.drop("waiting", "start_s", "end_s"))
    assert fast.iterations["end_s"].to_numpy() == pytest.approx(
        slow.iterations["end_s"].to_numpy(), rel=1e-12
    )


def test_tables_schemas_and_timeline_rows() -> None:
    r = run(Requests.offline(3, input_tokens=20, output_tokens=4), AffineCost(), replicas=2)
    assert r.requests.columns == list(REQUEST_COLUMNS)
    assert r.iterations.columns == list(ITERATION_COLUMNS)
    tl = r.timeline_rows()
    assert tl.columns == list(TIMELINE_COLUMNS)
    assert set(tl["op"].to_list()) == {"prefill", "decode"}
    assert r.requests["engine"].to_list() == [0, 1, 0]  # round robin
    assert r.iterations.filter(r.iterations["engine"] == 1)["iteration"].to_list() == [0, 1, 2, 3]
    assert set(r.summary()) >= {
        "ttft_s_p99",
        "tpot_s_p50",
        "e2e_s_mean",
        "output_tokens_per_s",
        "requests_per_s",
    }


def test_least_loaded_router_balances() -> None:
    arrival = np.array([0.0, 0.0, 0.0, 0.5, 0.6])
    reqs = Requests(
        arrival_s=arrival, input_tokens=np.full(5, 10), output_tokens=np.array([100, 2, 100, 100, 2])
    )
    least = run(reqs, AffineCost(fixed_s=0.01), replicas=2, router="least_loaded")
    # request 1 leaves engine 1 at 0.02 s; then engine 1 holds fewer requests than engine 0 (2) twice
    assert least.requests["engine"].to_list() == [0, 1, 0, 1, 1]
    turns = run(reqs, AffineCost(fixed_s=0.01), replicas=2, router="round_robin")
    assert turns.requests["engine"].to_list() == [0, 1, 0, 1, 0]


def test_disaggregated_ttft_ends_with_the_prefill() -> None:
    p, o = 300, 20
    pre = AffineCost(fixed_s=0.03, prefill_token_s=1e-4, transfer_token_s=1e-5)
    dec = AffineCost(fixed_s=0.01, decode_seq_s=1e-3)
    pools = DisaggregatedPools(num_prefill_engines=1, num_decode_engines=2, prefill_cost=pre, decode_cost=dec)
    r = run(Requests.offline(2, input_tokens=p, output_tokens=o), pre, disaggregation=pools)
    prefill_s = 0.03 + 1e-4 * 2 * p
    req = r.requests
    assert req["ttft_s"].to_list() == pytest.approx([prefill_s] * 2)
    assert req["finish_s"].to_list() == pytest.approx([prefill_s + 1e-5 * p + (o - 1) * 0.011] * 2)
    assert req["prefill_engine"].to_list() == [0, 0]
    assert req["engine"].to_list() == [1, 2]
    kinds = r.timeline_rows().group_by("rank").agg(pl.col("op").unique()).sort("rank")
    assert kinds["op"].to_list() == [["prefill"], ["decode"], ["decode"]]


def test_trace_csv(tmp_path: Path) -> None:
    f = tmp_path / "trace.csv"
    f.write_text("\ufeffinput_tokens,arrival_s,output_tokens,note\n10,0.5,3,a\n\n20,0.25,4,b\n", "utf-8")
    reqs = Requests.from_trace_csv(f)  # a byte-order mark, an extra column and a blank line are fine
    assert reqs.arrival_s.tolist() == [0.25, 0.5]  # sorted by arrival
    assert reqs.input_tokens.tolist() == [20, 10]
    assert reqs.output_tokens.tolist() == [4, 3]
    r = run(reqs, AffineCost(fixed_s=0.01))
    assert r.requests["ttft_s"].to_list() == pytest.approx([0.01, 0.01])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("arrival_s,input_tokens\n0,1\n", "header lacks column 'output_tokens'"),
        ("arrival_s,input_tokens,output_tokens\n0,1,1\n0.5,x,2\n", ":3: column input_tokens: must be"),
        ("arrival_s,input_tokens,output_tokens\n-1,1,1\n", ":2: column arrival_s: must be a finite"),
        ("arrival_s,input_tokens,output_tokens\n0,1,0\n", ":2: column output_tokens: must be an integer in"),
        ("arrival_s,input_tokens,output_tokens\n0,1\n", ":2: column output_tokens: missing"),
        ("", ":1: empty file"),
        ("arrival_s,input_tokens,output_tokens\n0,1,\xff\n", ": not UTF-8 text"),
    ],
)
def test_trace_csv_errors_name_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=str(f) + ".*") as err:
        Requests.from_trace_csv(f)
    assert message in str(err.value)


def test_rejections() -> None:
    with pytest.raises(ValueError, match="must not decrease"):
        Requests(arrival_s=np.array([1.0, 0.5]), input_tokens=np.ones(2, int), output_tokens=np.ones(2, int))
    with pytest.raises(ValueError, match=r"output_tokens\[1\] must be in 1"):
        Requests.offline(2, input_tokens=5, output_tokens=[3, 0])
    with pytest.raises(ValueError, match="rate_per_s"):
        Requests.poisson(0.0, 3, input_tokens=1, output_tokens=1)
    reqs = Requests.offline(2, input_tokens=100, output_tokens=2)
    with pytest.raises(ValueError, match="chunked_prefill"):
        run(reqs, AffineCost(), max_num_seqs=4, max_num_batched_tokens=64)
    with pytest.raises(ValueError, match="could never finish"):
        run(reqs, AffineCost(kv_capacity_tokens=64))
    with pytest.raises(ValueError, match="policy must be one of"):
        run(reqs, AffineCost(), policy="orca")
    with pytest.raises(ValueError, match="router must be one of"):
        run(reqs, AffineCost(), router="random")
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        run(reqs, AffineCost(), max_num_seqs=8, max_num_batched_tokens=4)
    with pytest.raises(ValueError, match="kv_block_tokens must be an integer in 1"):
        run(reqs, AffineCost(kv_block_tokens=0))
    with pytest.raises(ValueError, match="iteration_s returned"):
        run(reqs, AffineCost(fixed_s=math.nan))


CONFIGS = [
    {"policy": "vllm"},
    {"policy": "sarathi"},
    {"policy": "sarathi", "chunked_prefill": False},
    {"policy": "vllm", "replicas": 3, "router": "least_loaded"},
    {"policy": "sarathi", "replicas": 2, "max_run_iterations": 1},
    {"policy": "vllm", "disaggregation": DisaggregatedPools(num_prefill_engines=2, num_decode_engines=3)},
    {"policy": "sarathi", "disaggregation": DisaggregatedPools(num_prefill_engines=1, num_decode_engines=2)},
    {"policy": "sarathi", "chunked_prefill": False, "kv_admission": "full"},
    {"policy": "vllm", "kv_admission": "full", "replicas": 2, "router": "least_loaded"},
    {
        "policy": "sarathi",
        "kv_admission": "full",
        "disaggregation": DisaggregatedPools(num_prefill_engines=1, num_decode_engines=2),
    },
    {"policy": "sarathi", "pipeline_depth": 3},
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items())[:60])
@pytest.mark.parametrize("closed", [False, True])
def test_invariants_under_kv_pressure(config: dict, closed: bool) -> None:
    rng = np.random.default_rng(11)
    n = 300
    lengths = {"input_tokens": rng.integers(1, 700, n), "output_tokens": rng.integers(1, 120, n)}
    reqs = Requests.closed_loop(24, n, **lengths) if closed else Requests.poisson(60.0, n, seed=2, **lengths)
    cost = AffineCost(
        fixed_s=0.005, prefill_token_s=1e-5, decode_seq_s=1e-4, decode_context_s=1e-8, transfer_token_s=1e-6,
        kv_capacity_tokens=4_000,
    )  # fmt: skip
    r = run(reqs, cost, max_num_seqs=32, max_num_batched_tokens=1024, **config)
    req, it = r.requests, r.iterations
    assert req["finish_s"].is_finite().all()
    assert (req["first_token_s"] >= req["arrival_s"]).all() and (
        req["finish_s"] >= req["first_token_s"]
    ).all()
    assert (it["kv_used_tokens"] <= it["kv_capacity_tokens"]).all()
    assert (it["num_decode_seqs"] <= 32).all()
    assert (it["num_prefill_tokens"] + it["num_decode_seqs"] <= 1024).all()
    assert int(it["num_prefill_tokens"].sum()) >= int(lengths["input_tokens"].sum())
    for engine in it.partition_by("engine"):  # an engine runs one iteration at a time, in order
        start, end = engine["start_s"].to_numpy(), engine["end_s"].to_numpy()
        assert (end >= start).all() and (start[1:] >= end[:-1] - 1e-9).all()
    decode_tokens = int(it["num_decode_seqs"].sum())
    emitted = decode_tokens + n + r.num_preemptions  # every completed prefill emits one token
    if config.get("kv_admission") == "full":  # whole lengths reserved at admission: nobody is evicted
        assert r.num_preemptions == 0
    else:
        assert r.num_preemptions > 0
    if not config.get("chunked_prefill", config["policy"] == "sarathi"):
        assert emitted == int(lengths["output_tokens"].sum())
    else:  # a partial prefill can be preempted before it emits anything
        assert emitted >= int(lengths["output_tokens"].sum())
    if closed:
        arrival, finish = req["arrival_s"].to_numpy(), req["finish_s"].to_numpy()
        late = arrival[24:]
        assert np.isin(late, finish).all()  # each later request arrives at a finish


def test_full_admission_reserves_whole_lengths() -> None:
    """TensorRT-LLM's GUARANTEED_NO_EVICT: 5 requests of 100 + 50 tokens hold 149 tokens at their last decode, 10
    blocks of 16; a 25-block pool starts two at a time and never preempts, where prompt admission (7 blocks each)
    starts three and must preempt one as they grow."""
    reqs = Requests.offline(5, input_tokens=100, output_tokens=50)
    cost = AffineCost(fixed_s=0.01, kv_capacity_tokens=25 * 16)
    full = run(reqs, cost, policy="sarathi", chunked_prefill=False, kv_admission="full")
    grow = run(reqs, cost, policy="sarathi", chunked_prefill=False)
    assert full.num_preemptions == 0 and grow.num_preemptions > 0
    assert full.iterations["num_decode_seqs"].max() == 2 and grow.iterations["num_decode_seqs"].max() == 3
    # pairs run back to back: a prefill iteration and 49 decodes each, 0.01 s apiece; the fifth runs alone
    finish = full.requests["finish_s"].to_numpy()
    assert finish == pytest.approx([0.5, 0.5, 1.0, 1.0, 1.5])


def test_pipeline_depth_runs_virtual_engines() -> None:
    """An engine of d pipeline stages keeps d batches in flight: d schedulers with 1/d of the KV blocks each, every
    iteration a whole forward pass. One sequence per batch, 4 requests of 11 tokens: 44 iterations in series, 22
    with two in flight."""
    reqs = Requests.offline(4, input_tokens=10, output_tokens=11)
    cost = AffineCost(fixed_s=0.01, kv_capacity_tokens=64 * 16)
    one = run(reqs, cost, max_num_seqs=1)
    two = run(reqs, cost, max_num_seqs=1, pipeline_depth=2, router="least_loaded")
    assert one.duration_s == pytest.approx(0.44) and two.duration_s == pytest.approx(0.22)
    assert sorted(set(two.iterations["engine"].to_list())) == [0, 1]
    assert two.iterations["kv_capacity_tokens"].max() == 32 * 16


def test_emit_delay_shifts_token_times_not_tpot() -> None:
    cost = AffineCost(fixed_s=0.02, decode_seq_s=1e-3)
    base = run(one(1.0, 100, 10), cost)
    late = run(one(1.0, 100, 10), cost, emit_delay_s=0.004)
    assert late.ttft.mean_s == pytest.approx(base.ttft.mean_s + 0.004)
    assert late.tpot.mean_s == pytest.approx(base.tpot.mean_s)
    with pytest.raises(ValueError, match="emit_delay_s"):
        run(one(1.0, 100, 10), cost, emit_delay_s=-1.0)
    with pytest.raises(ValueError, match="kv_admission must be one of"):
        run(one(1.0, 100, 10), cost, kv_admission="lazy")
    pools = DisaggregatedPools(num_prefill_engines=1, num_decode_engines=1)
    with pytest.raises(ValueError, match="pipeline_depth"):
        run(one(1.0, 100, 10), cost, pipeline_depth=2, disaggregation=pools)


def test_eager_emit_delay_holds_tokens_until_the_next_eager_launch() -> None:
    """vLLM 0.6 V0 processes iteration i's outputs in a callback of iteration i+1 that runs after i+1's forward is
    launched (``vllm/worker/model_runner.py`` v0.6.0), so tokens wait for an eager (prefill) launch and not for a
    graph-replayed decode. Every iteration 20 ms, prefill-first: A (t=0, one token) prefills in [0, 20 ms] and B
    (t=10 ms) in [20, 40 ms], then B decodes. A's only token waits for B's eager prefill launch (5 ms): first
    token and finish at 25 ms; B's first token is followed by decodes: 40 ms, TTFT 30 ms; B finishes at
    40 + 9 x 20 = 220 ms with nothing after it."""
    cost = AffineCost(fixed_s=0.02)
    reqs = Requests(arrival_s=np.array([0.0, 0.01]), input_tokens=np.array([100, 100]),
                    output_tokens=np.array([1, 10]))  # fmt: skip
    base = run(reqs, cost, policy="vllm").requests
    late = run(reqs, cost, policy="vllm", eager_emit_delay_s=0.005, emit_delay_s=0.004).requests
    assert base["ttft_s"].to_list() == pytest.approx([0.02, 0.03])
    assert late["ttft_s"].to_list() == pytest.approx([0.02 + 0.005 + 0.004, 0.03 + 0.004])
    assert late["finish_s"].to_list() == pytest.approx([0.029, 0.224])
    with pytest.raises(ValueError, match="eager_emit_delay_s"):
        run(reqs, cost, eager_emit_delay_s=-1.0)


def test_with_the_analytic_replica_cost() -> None:
    # the closed forms with workbench.serving.cost.ReplicaCost: a lone request's TTFT is its prefill time and its
    # TPOT the mean of its decode iterations; the run pricing (two ends, interpolated) stays within 0.1 %
    from workbench.presets.calibration import load_calibration
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.serving.cost import ReplicaCost
    from workbench.specs.serving import ServingPlan

    plan = ServingPlan()
    rc = ReplicaCost.of(
        load_model("llama-3.1-8b"), load_cluster("dgx-h100", 1), plan, load_calibration("default")
    )
    p, o = 3000, 200
    kw = {"policy": plan.scheduler, "max_num_seqs": plan.max_num_seqs}
    exact = run(
        one(0.0, p, o), rc, max_num_batched_tokens=plan.max_num_batched_tokens, max_run_iterations=1, **kw
    )
    fast = run(one(0.0, p, o), rc, max_num_batched_tokens=plan.max_num_batched_tokens, **kw)
    assert exact.ttft.mean_s == pytest.approx(rc.prefill_s(p), rel=1e-12)
    decode = [rc.decode_s(1, p + m) for m in range(1, o)]
    assert exact.tpot.mean_s == pytest.approx(float(np.mean(decode)), rel=1e-12)
    assert fast.tpot.mean_s == pytest.approx(exact.tpot.mean_s, rel=1e-3)
    assert fast.iterations.height == exact.iterations.height == o


def test_vllm_with_chunked_prefill_is_sarathi() -> None:
    rng = np.random.default_rng(4)
    n = 200
    reqs = Requests.poisson(
        30.0, n, input_tokens=rng.integers(1, 3000, n), output_tokens=rng.integers(1, 90, n)
    )
    cost = AffineCost(fixed_s=0.004, prefill_token_s=2e-6, decode_seq_s=1e-4, kv_capacity_tokens=20_000)
    kw: dict[str, Any] = {"max_num_seqs": 16, "max_num_batched_tokens": 512}
    vllm = run(reqs, cost, policy="vllm", chunked_prefill=True, **kw)
    sarathi = run(reqs, cost, policy="sarathi", **kw)
    assert vllm.requests.equals(sarathi.requests) and vllm.iterations.equals(sarathi.iterations)
    assert (vllm.iterations["num_prefill_tokens"] + vllm.iterations["num_decode_seqs"] <= 512).all()


@pytest.mark.parametrize("max_run", [1, 1 << 20])
def test_an_earlier_request_handed_off_later_passes_a_blocked_head(max_run: int) -> None:
    # prefill engine 0 takes requests 0 and 2, engine 1 requests 1 and 3 (3 only slows it: one output token);
    # request 2 (901 KV tokens) reaches the decode engine first and cannot fit beside request 0; request 1 (101)
    # arrives later but is older: it becomes the queue head and joins at the next iteration boundary
    f, a, x = 0.01, 1e-5, 1e-6
    reqs = Requests(
        arrival_s=np.zeros(4),
        input_tokens=np.array([16, 100, 900, 2000]),
        output_tokens=np.array([300, 5, 5, 1]),
    )
    prefill = AffineCost(fixed_s=f, prefill_token_s=a, transfer_token_s=x)
    decode = AffineCost(fixed_s=f, kv_capacity_tokens=58 * 16)
    pools = DisaggregatedPools(num_prefill_engines=2, num_decode_engines=1, decode_cost=decode)
    r = run(reqs, prefill, max_num_batched_tokens=4096, disaggregation=pools, max_run_iterations=max_run)
    handoff_0 = f + a * (16 + 900) + x * 16  # the KV of the 16 prompt tokens moves
    assert r.requests["ttft_s"][1] == pytest.approx(f + a * (100 + 2000))
    assert r.requests["finish_s"][1] == pytest.approx(handoff_0 + 2 * f + 4 * f)
    assert r.requests["finish_s"][0] == pytest.approx(handoff_0 + 299 * f)  # request 2 waits for it
    assert r.requests["first_token_s"][2] < r.requests["finish_s"][0] < r.requests["finish_s"][2]


def test_decode_columns_match_a_plain_list_through_inserts_and_finishes() -> None:
    """``EngineState`` keeps the running decodes sorted by finish (``d``: the columns), with a fast path for one request in
    or one out: against a plain list, over random arrivals (one or several at a time, ties on the finish step
    included) and finishes, the columns, the KV-offset sum and the finished ids agree at every step."""
    from workbench.serving.engine_state import EngineState

    class _Pool:
        kv_block_tokens, kv_capacity_tokens = 16, 1 << 20

    rng = np.random.default_rng(7)
    eng = EngineState(0, _Pool(), prefill_only=False)  # type: ignore[arg-type]
    plain: list[tuple[int, int, int]] = []  # (finish step, id, KV offset)
    next_id = 0
    for _ in range(3000):
        count = int(rng.choice([1, 1, 1, 2, 4]))
        ids = list(range(next_id, next_id + count))
        next_id += count
        ctx = [int(c) for c in rng.integers(1, 500, count)]
        left = [int(x) for x in rng.integers(1, 6, count)]  # few distinct finish steps: many ties
        eng.add_decodes(ids, ctx, left)
        plain = sorted(
            plain + [(x + eng.steps, i, c - eng.steps) for i, c, x in zip(ids, ctx, left, strict=True)],
            key=lambda r: r[0],
        )
        eng.steps += 1
        ended = [r for r in plain if r[0] <= eng.steps]
        if plain and plain[0][0] == eng.steps:
            done = eng.drop_finished()
            assert sorted(done) == sorted(r[1] for r in ended)
            plain = [r for r in plain if r[0] > eng.steps]
        assert eng.n == len(plain) and eng.off_sum == sum(r[2] for r in plain)
        assert eng.d[0].tolist() == [r[0] for r in plain]
        assert sorted(zip(*eng.d.tolist(), strict=True)) == sorted(plain)
