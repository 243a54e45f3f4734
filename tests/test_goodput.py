"""Goodput: closed forms against Young/Daly and a Monte-Carlo simulation, presets, bad input, the planner."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.goodput import (
    GoodputOptions,
    checkpoint_bytes,
    daly_interval_s,
    estimate_goodput,
    failure_preset_names,
    goodput_frac,
    load_failures,
    optimal_interval_s,
    simulate_run,
    young_interval_s,
)
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.plan import ParallelPlan, Workload


def test_intervals_match_young_and_daly_closed_forms() -> None:
    for delta, mtbf in ((1.0, 1e4), (30.0, 1e4), (120.0, 3.6e4), (0.5, 2e5)):
        young = math.sqrt(2 * delta * mtbf)  # Young 1974
        x = delta / (2 * mtbf)
        daly = math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - delta  # Daly 2006 eq. 37
        assert young_interval_s(delta, mtbf) == pytest.approx(young, rel=1e-12)
        assert daly_interval_s(delta, mtbf) == pytest.approx(daly, rel=1e-12)
        best = float(optimal_interval_s(delta, mtbf))
        # the exact optimum solves exp((tau+delta)/M)(1 - tau/M) = 1 and sits within 1% of Daly's estimate
        assert math.exp((best + delta) / mtbf) * (1 - best / mtbf) == pytest.approx(1.0, abs=1e-12)
        assert best == pytest.approx(daly, rel=0.01)
        g = [float(goodput_frac(t, delta, mtbf, 600.0)) for t in (young, daly, best, 0.8 * best, 1.2 * best)]
        assert g[2] == pytest.approx(max(g), rel=1e-12)
    assert daly_interval_s(3e4, 1e4) == 1e4  # delta >= 2M: checkpoint every M


@pytest.mark.parametrize(
    ("interval", "stall", "restart", "downtime", "lag"),
    [(800.0, 30.0, 600.0, 0.0, 0.0), (300.0, 2.0, 900.0, 300.0, 250.0), (2500.0, 120.0, 300.0, 0.0, 0.0)],
)
def test_goodput_matches_monte_carlo_within_2_percent(interval, stall, restart, downtime, lag) -> None:
    mtbf = 1e4
    sim = simulate_run(
        work_s=2000 * mtbf,
        interval_s=interval,
        stall_s=stall,
        mtbf_s=mtbf,
        restart_s=restart,
        downtime_s=downtime,
        lag_s=lag,
        seed=7,
    )
    closed = float(goodput_frac(interval, stall, mtbf, restart + lag, downtime))
    assert sim.num_failures > 1000
    assert sim.goodput_frac == pytest.approx(closed, rel=0.02)


def test_simulation_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="mtbf_s"):
        simulate_run(work_s=1.0, interval_s=1.0, stall_s=0.0, mtbf_s=float("nan"), restart_s=0.0)
    with pytest.raises(ValueError, match="lag_s must be <= interval_s"):
        simulate_run(work_s=1.0, interval_s=1.0, stall_s=0.0, mtbf_s=1.0, restart_s=0.0, lag_s=2.0)


def test_llama3_preset_reproduces_table_5() -> None:
    f = load_failures("llama3")
    assert {"llama3", "opt-175b"} <= set(failure_preset_names())
    # 419 unexpected interruptions in 54 days on 16,384 GPUs / 2,048 hosts (arXiv:2407.21783 Table 5)
    assert f.mtbf_s(16384, 2048) == pytest.approx(54 * 86400 / 419, rel=1e-12)
    kinds = f.by_kind(16384, 2048)
    assert kinds["gpu"] * 54 * 24 == pytest.approx(148 + 19 + 17 + 6 + 6)
    assert kinds["hbm"] * 54 * 24 == pytest.approx(72)
    assert f.mtbf_s(8192, 1024) == pytest.approx(2 * f.mtbf_s(16384, 2048))  # rates scale with size


def _write(tmp_path, text: str):
    path = tmp_path / "f.toml"
    path.write_text(text)
    return path


BASE = 'id = "x"\nname = "x"\n[recovery]\nrestart_s = 60\nrepair_s = 0\n'


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('[[causes]]\nname = "g"\nkind = "gpu"\ncount = 3\n', "needs an [observed] table"),
        ('[[causes]]\nname = "g"\nkind = "gpu"\nper_device_hour = -1\n', "key 'per_device_hour'"),
        ('[[causes]]\nname = "g"\nkind = "cosmic"\nper_node_hour = 1e-5\n', "kind must be one of"),
        ('[[causes]]\nname = "g"\nkind = "gpu"\nper_node_hour = 1e-5\ncolour = 1\n', "unknown key(s) colour"),
        (
            '[[causes]]\nname = "g"\nkind = "gpu"\nper_node_hour = 1e-5\nper_device_hour = 1e-5\n',
            "exactly one",
        ),
        ('[[causes]]\nname = "g"\nkind = "gpu"\nper_node_hour = 5.0\n', "rate_per_hour"),
    ],
)
def test_bad_failure_files_name_file_field_and_value(tmp_path, body: str, words: str) -> None:
    path = _write(tmp_path, BASE + body)
    with pytest.raises(ValueError) as err:
        load_failures(path)
    assert str(path) in str(err.value) and words in str(err.value)


def test_bad_failure_names_and_recovery(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown failure preset 'llama4'.*llama3"):
        load_failures("llama4")
    text = (
        BASE.replace("restart_s = 60", "restart_s = -1")
        + '[[causes]]\nname = "g"\nkind = "gpu"\nper_device_hour = 1e-6\n'
    )
    with pytest.raises(ValueError, match=r"restart_s must be a finite number in \[0"):
        load_failures(_write(tmp_path, text))
    with pytest.raises(ValueError, match="not valid TOML"):
        load_failures(_write(tmp_path, "id = "))
    with pytest.raises(ValueError, match="spare_nodes"):
        GoodputOptions(spare_nodes=-1)
    with pytest.raises(ValueError, match="checkpoint must be one of sync, async, got .lazy."):
        GoodputOptions(checkpoint="lazy")


def test_user_override_with_rates(tmp_path) -> None:
    text = BASE + '[[causes]]\nname = "any"\nkind = "host"\nper_node_hour = 1e-4\n'
    f = load_failures(_write(tmp_path, text))
    assert f.mtbf_s(80, 10) == pytest.approx(3600 / 1e-3)


def test_storage_table_is_read_and_checked(tmp_path) -> None:
    from workbench.presets.catalog import profiles_dir

    assert load_cluster("meta-grand-teton-h100").storage.filesystem_bytes_per_s == 2e12  # Tectonic 2 TB/s
    assert load_cluster("dgx-a100").storage is None  # the stated defaults apply
    body = (profiles_dir() / "clusters" / "dgx-h100.toml").read_text()
    bad = tmp_path / "c.toml"
    bad.write_text(body.replace("node_write_GBps = 20", "node_write_GBps = 0"))
    with pytest.raises(ValueError) as err:
        load_cluster(bad)
    assert str(bad) in str(err.value) and "node_write_GBps" in str(err.value) and "got 0" in str(err.value)
    bad.write_text(body.replace("node_read_GBps = 40\n", ""))
    with pytest.raises(ValueError, match="missing key 'node_read_GBps'"):
        load_cluster(bad)


def _estimate(plan: ParallelPlan, nodes: int = 4):
    from workbench.estimate.analytic import estimate_plan

    model = load_model("llama-3.1-8b")
    cluster = load_cluster("dgx-h100", num_nodes=nodes)
    return estimate_plan(model, cluster, Workload(seq_len=4096, global_batch_size=64), plan)


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_checkpoint_is_the_model_state_once(zero: int) -> None:
    est = _estimate(ParallelPlan(dp=8, tp=2, pp=2, zero_stage=zero))
    size = checkpoint_bytes(est)
    n = est.model.total_parameters()
    assert size.weights_bytes == pytest.approx(2 * n, rel=1e-6)  # bf16 weights
    assert size.optimizer_bytes == pytest.approx(12 * n, rel=1e-6)  # fp32 master + Adam m, v
    assert size.rng_bytes < 1e-4 * size.total_bytes


def test_estimate_goodput_spares_and_async() -> None:
    est = _estimate(ParallelPlan(dp=8, tp=2, pp=2, zero_stage=1))
    f = load_failures("llama3")
    sync = estimate_goodput(est, f, GoodputOptions(checkpoint="sync"))
    asyn = estimate_goodput(est, f, GoodputOptions(checkpoint="async"))
    spare = estimate_goodput(est, f, GoodputOptions(checkpoint="async", spare_nodes=2))
    shrink = estimate_goodput(est, f, GoodputOptions(on_failure="shrink"))
    assert asyn.checkpoint_stall_s < sync.checkpoint_stall_s == sync.checkpoint_write_s
    assert sync.goodput_frac < asyn.goodput_frac < spare.goodput_frac < 1
    assert asyn.goodput_frac < shrink.goodput_frac
    assert spare.downtime_s < 0.01 * asyn.downtime_s and spare.spare_devices == 16
    assert sync.checkpoint_interval_steps * est.step_time_s == pytest.approx(sync.checkpoint_interval_s)


def test_goodput_columns_are_vectorised() -> None:
    from workbench.goodput import goodput_columns

    f = load_failures("llama3")
    nodes = np.array([16, 256, 2048])
    cols = goodput_columns(
        num_devices=8 * nodes,
        num_nodes=nodes,
        devices_per_node=8,
        checkpoint_bytes=1e12,
        step_time_s=np.array([10.0, 2.0, 1.0]),
        lost_frac=np.ones(3),
        failures=f,
        storage=None,
        options=GoodputOptions(spare_nodes=4),
    )
    assert cols["goodput_frac"].shape == (3,)
    assert np.all(np.diff(cols["mtbf_s"]) < 0) and np.all(np.diff(cols["goodput_frac"]) < 0)


def test_planner_goodput_cost_prefers_a_smaller_cluster() -> None:
    from workbench.search import Constraints, search

    model = load_model("llama-3.1-8b")
    cluster = load_cluster("dgx-h100")
    work = Workload(seq_len=4096, global_batch_size=256)
    cons = Constraints(fixed={"tp": 8, "pp": 1, "cp": 1}, zero_stages=(1,), recompute=("none",))
    f = load_failures("opt-175b")
    kw = dict(nodes=[4, 64], top_k=0, keep=20, token_budget=1e12, constraints=cons)
    cost = search(model, cluster, work, objective="cost", **kw)
    with pytest.raises(ValueError, match="needs a failure model"):
        search(model, cluster, work, objective="goodput-cost", **kw)
    good = search(model, cluster, work, objective="goodput-cost", failures=f, **kw)
    fast = search(model, cluster, work, objective="goodput-time", failures=f, **kw)
    top = good.plans.row(0, named=True)
    assert top["num_nodes"] == 4 and good.goodput is not None and good.goodput["failures"] == "opt-175b"
    by_nodes = {r["num_nodes"]: r for r in reversed(good.plans.to_dicts())}
    assert by_nodes[64]["goodput_frac"] < by_nodes[4]["goodput_frac"]
    assert by_nodes[4]["goodput_device_hours"] < by_nodes[64]["goodput_device_hours"]
    assert fast.plans.row(0, named=True)["num_nodes"] == 64  # more nodes still finish sooner here
    assert set(cost.plans["num_nodes"].to_list()) <= {4, 64} and "goodput_frac" not in cost.plans.columns
