"""SWARM parallelism (issue 18 item 3): closed forms of a stage's rate, its link, failures and rebalancing; the one
cost path with the step model; the square-cube law; the synchronous baseline; ``workbench swarm``."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from workbench_cli import cli

from workbench.estimate.analytic import estimate_plan
from workbench.hetero.swarm import CONVERGENCE_CAVEAT, PeerGroup, SwarmSettings, swarm_estimate
from workbench.hetero.swarm_model import (
    available_frac,
    initial_counts,
    lost_call_frac,
    rebalance_counts,
    stage_traffic_bytes,
    useful_frac,
)
from workbench.hetero.swarm_prices import peer_cluster
from workbench.presets.calibration import Calibration, load_calibration
from workbench.presets.catalog import load_cluster, load_device, load_model
from workbench.presets.hf_config import model_from_hf_config
from workbench.specs.hardware import NetworkLevel
from workbench.specs.plan import ParallelPlan, Recompute, Workload

MODEL = load_model("llama-3.1-8b")
H100 = load_device("h100-sxm5-80gb")
CAL = load_calibration("default", framework="generic")  # non-blocking sends: the one cost path
FABRIC = load_cluster("dgx-a100").levels[-1]
WORKLOAD = Workload(seq_len=2048, global_batch_size=16)
TOKENS = 2048
PAYLOAD = TOKENS * MODEL.hidden_size * 2.0  # one 16-bit tokens x hidden tensor


def _link(mbps: float, latency_s: float = 0.05) -> NetworkLevel:
    return NetworkLevel(name="internet", bytes_per_s=mbps * 1e6 / 8, latency_s=latency_s)


def _run(count: int, link: NetworkLevel, **settings: object) -> object:
    groups = (PeerGroup(device=H100, count=count, link=link),)
    return swarm_estimate(
        MODEL, groups, WORKLOAD, SwarmSettings(num_stages=4, **settings), fabric=FABRIC, calibration=CAL
    )


def _stage_compute_s(recompute: str) -> list[float]:
    """F + B of micro-batch 0 per stage from the homogeneous estimate of pp = 4 on four one-device nodes."""
    plan = ParallelPlan(pp=4, recompute=Recompute(recompute))
    est = estimate_plan(MODEL, peer_cluster(H100, _link(1000), 4), WORKLOAD, plan, calibration=CAL)
    tl = est.timeline.filter((pl.col("microbatch") == 0) & pl.col("op").is_in(["F", "B"]))
    return [
        float((g["end_s"] - g["start_s"]).sum())
        for _, g in tl.sort("stage").group_by("stage", maintain_order=True)
    ]


# ---- one cost path, stage rates --------------------------------------------------------------------------------


def test_peer_compute_is_the_step_model_stage_with_full_recompute() -> None:
    """A SWARM peer re-runs its forward in the backward (reference ExpertBackend.backward): its compute per
    micro-batch is the homogeneous estimate's F + B of that stage with full recomputation."""
    est = _run(4, _link(1e7))  # a link so fast every stage is compute-bound
    compute = _stage_compute_s("full")
    assert est.stages["bound"].to_list() == ["compute"] * 4
    assert est.stages["compute_rate_per_s"].to_list() == pytest.approx([1 / c for c in compute], rel=1e-9)


def test_a_stage_of_k_identical_peers_has_k_times_one_peers_rate() -> None:
    one, five = _run(4, _link(300)), _run(20, _link(300))
    assert five.stages["rate_per_s"].to_numpy() == pytest.approx(
        5 * one.stages["rate_per_s"].to_numpy(), rel=1e-12
    )
    assert five.microbatches_per_s == pytest.approx(5 * one.microbatches_per_s, rel=1e-12)


def test_a_link_slower_than_compute_makes_the_stage_link_bound_at_bytes_over_bandwidth() -> None:
    link = _link(100)  # 12.5 MB/s: a 16 MiB tensor takes > 1 s, the stage computes in < 0.1 s
    est = _run(8, link)
    middle = est.stages.row(1, named=True)
    # a middle peer receives inputs (forward), inputs and output gradients (backward): 3 tensors; sends 2
    assert middle["link_bytes"] == pytest.approx(3 * PAYLOAD)
    assert middle["bound"] == "link"
    assert middle["rate_per_s"] == pytest.approx(2 * link.bytes_per_s / (3 * PAYLOAD), rel=1e-12)
    first = est.stages.row(0, named=True)  # receives token ids twice and one output gradient
    assert first["link_bytes"] == pytest.approx(PAYLOAD + 2 * TOKENS * 8)


def test_stage_traffic_closed_forms() -> None:
    assert stage_traffic_bytes(10.0, 1.0, first=False, last=False) == (30.0, 20.0)
    assert stage_traffic_bytes(10.0, 1.0, first=True, last=False) == (12.0, 10.0)
    assert stage_traffic_bytes(10.0, 1.0, first=False, last=True) == (22.0, 10.0)  # inputs + labels, twice
    assert stage_traffic_bytes(10.0, 1.0, first=True, last=True) == (4.0, 0.0)


def test_int8_compression_carries_a_byte_per_value_and_the_block_scales() -> None:
    est = _run(8, _link(100), compression="int8")
    assert est.stages["link_bytes"][1] == pytest.approx(3 * TOKENS * MODEL.hidden_size * (1 + 4 / 4096))


# ---- failures ------------------------------------------------------------------------------------------------


def test_failure_closed_forms() -> None:
    lam = 2.0 / 3600  # two failures per peer-hour
    assert lost_call_frac(lam, 900.0) == pytest.approx(1 - math.exp(-0.5))
    assert useful_frac(lam, 900.0) == pytest.approx(0.5 / (math.exp(0.5) - 1))
    assert useful_frac(0.0, 900.0) == 1.0
    assert available_frac(lam, 1800.0) == pytest.approx(0.5)


def test_restart_and_rejoin_forms_match_a_simulation() -> None:
    """Monte Carlo of the two renewal arguments: a task of length t restarted on every Exp(lambda) failure takes
    (e^{lambda t} - 1) / lambda on average; a slot that serves Exp(lambda) then loads d serves 1 / (1 + lambda d)."""
    rng = np.random.default_rng(7)
    lam, t, d = 1.0, 0.8, 0.5
    fails = rng.exponential(1 / lam, size=(200_000, 40))
    done = fails >= t
    first = done.argmax(axis=1)
    assert done.any(axis=1).all()
    lost = np.where(np.arange(40) < first[:, None], fails, 0.0).sum(axis=1)
    assert (lost + t).mean() == pytest.approx(t / useful_frac(lam, t), rel=0.01)
    serve = rng.exponential(1 / lam, size=400_000)
    assert serve.sum() / (serve.sum() + d * serve.size) == pytest.approx(available_frac(lam, d), rel=0.01)


def test_failures_lose_the_expected_share_of_calls_and_work() -> None:
    link, rate_per_hour = _link(300), 3.0
    calm, stormy = _run(8, link), _run(8, link, failure_rate_per_hour=rate_per_hour)
    lam = rate_per_hour / 3600
    middle = calm.stages.row(1, named=True)
    compute = 2 / middle["compute_rate_per_s"]  # two peers per stage
    exposure = compute + 5 * PAYLOAD / link.bytes_per_s + 4 * link.latency_s  # 3 tensors in, 2 out, 2 calls
    assert stormy.stages["lost_call_frac"][1] == pytest.approx(1 - math.exp(-lam * exposure), rel=1e-9)
    rejoin = 8 * MODEL.layer_parameters(1) * 14.0 / link.bytes_per_s  # bf16 weights + fp32 master and moments
    expected = middle["rate_per_s"] * lam * exposure / math.expm1(lam * exposure) / (1 + lam * rejoin)
    assert stormy.stages["goodput_rate_per_s"][1] == pytest.approx(expected, rel=1e-9)
    assert calm.redone_calls_per_microbatch == 0.0 and stormy.redone_calls_per_microbatch > 0
    assert stormy.microbatches_per_s < calm.microbatches_per_s == calm.microbatches_per_s_no_failures


# ---- rebalancing ---------------------------------------------------------------------------------------------


def test_rebalancing_equalises_interchangeable_peers() -> None:
    rates = np.ones((1, 4))
    assert rebalance_counts(rates, np.array([[6, 2, 2, 2]])).tolist() == [[3, 3, 3, 3]]
    assert initial_counts((5, 3), 4).tolist() == [[2, 1, 1, 1], [0, 1, 1, 1]]


@pytest.mark.parametrize("seed", range(5))
def test_rebalancing_one_kind_reaches_the_max_min_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.5, 3.0, size=(1, 3))
    start = initial_counts((9,), 3)
    got = (rates * rebalance_counts(rates, start)).sum(axis=0).min()
    best = max(
        min(a * rates[0, 0], b * rates[0, 1], (9 - a - b) * rates[0, 2])
        for a, b in itertools.product(range(1, 8), repeat=2)
        if a + b <= 8
    )
    assert got == pytest.approx(best)


def test_rebalancing_moves_the_spare_peer_to_the_slowest_stage() -> None:
    """Nine peers dealt in turn give stage 0 three; the last stage (it holds the LM head) is the slowest, so
    rebalancing moves the spare peer there."""
    link = _link(1e7)
    plain, moved = _run(9, link), _run(9, link, rebalance=True)
    assert plain.counts.tolist() == [[3, 2, 2, 2]] and plain.bottleneck_stage == 3
    assert moved.counts.tolist() == [[2, 2, 2, 3]]
    assert moved.microbatches_per_s == pytest.approx(min(moved.stages["goodput_rate_per_s"]))
    assert moved.microbatches_per_s > plain.microbatches_per_s


# ---- the square-cube law ---------------------------------------------------------------------------------------


def _wide(h: int, seq: int) -> object:
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": h, "intermediate_size": 4 * h,
              "num_hidden_layers": 4, "num_attention_heads": h // 128, "num_key_value_heads": h // 128,
              "vocab_size": 32000, "tie_word_embeddings": False, "max_position_embeddings": 8192}  # fmt: skip
    return model_from_hf_config(config, name=f"wide-{h}")


def _comm_ratio(h: int, device: object, cal: object, seq: int = 2048) -> tuple[float, float, object]:
    model = _wide(h, seq)
    groups = (PeerGroup(device=device, count=4, link=_link(1000)),)
    est = swarm_estimate(
        model, groups, Workload(seq_len=seq, global_batch_size=8), SwarmSettings(num_stages=4),
        fabric=FABRIC, calibration=cal,
    )  # fmt: skip
    share = est.stages["comm_frac"][1]
    return share, share / (1 - share), model


def test_square_cube_law_against_its_closed_form() -> None:
    """link / compute ~ h / (6 N_layer(h) + attention FLOPs per token and layer) at a fixed FLOP rate (the
    paper's square-cube law, here with PaLM's FLOP count): on a device with a flat GEMM efficiency the step
    model's ratio follows it within 12 % over an 8x range of h (the rest is bandwidth-bound norms and
    activations, which grow as h like the traffic)."""
    flat = dataclasses.replace(H100, matmul_efficiency=((1.0, 0.5), (1e18, 0.5)))
    seq, rows = 2048, []
    for h in (1024, 2048, 4096, 8192):
        share, ratio, model = _comm_ratio(h, flat, Calibration(), seq)
        flop = 6 * model.layer_parameters(0) + model.attention_flop_per_token(seq) / model.num_layers
        rows.append((share, ratio, h / flop))
    shares = [r[0] for r in rows]
    assert shares == sorted(shares, reverse=True)
    for _, ratio, closed in rows[1:]:
        assert ratio / rows[0][1] == pytest.approx(closed / rows[0][2], rel=0.12)


def test_communication_share_falls_with_width_on_the_shipped_calibration() -> None:
    shares = [_comm_ratio(h, H100, CAL)[0] for h in (4096, 8192, 12288)]
    assert shares == sorted(shares, reverse=True) and shares[0] - shares[-1] > 0.015


# ---- the synchronous baseline -------------------------------------------------------------------------------


def test_synchronous_baseline_is_the_1f1b_closed_form() -> None:
    """One peer per stage, no recomputation (it fits): sum(t) + (M - 1) max(t) + 2 (S - 1) hops on the fabric."""
    est = _run(4, _link(500))
    t = _stage_compute_s("none")
    m = WORKLOAD.global_batch_size
    hop = FABRIC.latency_s + PAYLOAD / (FABRIC.bytes_per_s * CAL.framework.collective_efficiency_frac)
    assert est.sync_step_time_s == pytest.approx(sum(t) + (m - 1) * max(t) + 6 * hop, rel=1e-9)
    assert est.sync_fits and est.sync_tokens_per_s > est.tokens_per_s and est.speedup_vs_sync < 1


def test_tokens_per_second_and_the_caveat() -> None:
    est = _run(8, _link(1000), delayed_updates=False)
    m = WORKLOAD.global_batch_size
    assert est.step_time_s == pytest.approx(m / est.microbatches_per_s + est.exposed_average_s)
    assert est.tokens_per_s == pytest.approx(m * TOKENS / est.step_time_s)
    assert est.bottleneck_stage == int(np.argmin(est.stages["goodput_rate_per_s"].to_numpy()))
    assert est.caveat == CONVERGENCE_CAVEAT and "not modelled for loss" in est.caveat


# ---- refusals and the command line ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_stages": 0}, "num_stages"),
        ({"compression": "fp4"}, "compression must be one of none, int8"),
        ({"failure_rate_per_hour": -1.0}, "failure_rate_per_hour"),
    ],
)
def test_settings_refuse_bad_values(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SwarmSettings(**{"num_stages": 4, **kwargs})


def test_estimate_refuses_what_it_cannot_price() -> None:
    with pytest.raises(ValueError, match="3 peers cannot serve 4 stages"):
        _run(3, _link(100))
    with pytest.raises(ValueError, match="MoE model"):
        groups = (PeerGroup(device=H100, count=4, link=_link(100)),)
        swarm_estimate(
            load_model("mixtral-8x7b"), groups, WORKLOAD, SwarmSettings(num_stages=4), fabric=FABRIC
        )
    with pytest.raises(ValueError, match="count must be an integer"):
        PeerGroup(device=H100, count=0, link=_link(100))


SWARM_ARGS = ("swarm", "--model", "llama-3.1-8b", "--stages", "8", "--peers", "rtx4090-24gb:24+a100-sxm4-80gb:8",
              "--link-Mbps", "500", "--failure-rate-per-hour", "0.5", "--compress", "int8", "--global-batch", "64")  # fmt: skip


def test_swarm_command_prints_stages_bottleneck_baseline_and_caveat() -> None:
    result = CliRunner().invoke(cli, [*SWARM_ARGS, "--rebalance", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["stages"]) == 8 and sum(map(sum, data["peers_per_stage"])) == 32
    assert data["tokens_per_s"] > 0 and data["sync_tokens_per_s"] > data["tokens_per_s"]
    assert "not modelled for loss" in data["convergence_caveat"]
    assert data["notes"] == []  # rebalancing moved the RTX 4090s off the stages they cannot hold
    result = CliRunner().invoke(cli, list(SWARM_ARGS))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Stages" in out and "synchronous pipeline" in out and "caveat:" in out and "cannot hold it" in out


@pytest.mark.parametrize(
    ("peers", "match"),
    [
        ("rtx4090-24gb", "each part is DEVICE:COUNT"),
        ("rtx4090-24gb:0", "COUNT >= 1"),
        ("nope:4", "unknown device"),
    ],
)
def test_swarm_command_refuses_bad_peers(peers: str, match: str) -> None:
    args = list(SWARM_ARGS)
    args[args.index("--peers") + 1] = peers
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and match in result.stderr and len(result.stderr.strip().splitlines()) == 1
