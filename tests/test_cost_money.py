"""Prices and energy: the tables cover every device preset, closed forms for dollars and joules, the power cap,
the estimate's JSON keys, and bad input refused with the file, the field and what is allowed."""

from __future__ import annotations

import json
import math

import pytest

from workbench.cost import dollars, energy
from workbench.presets.catalog import load_cluster, load_model, preset_names
from workbench.presets.power import load_power_table
from workbench.presets.prices import load_price_table
from workbench.specs.plan import ParallelPlan, Workload
from workbench.specs.power import DevicePower, EnergyOptions
from workbench.specs.price import PriceSpec

H100 = DevicePower(
    device="x", tdp_w=700, idle_w=70, min_cap_w=200, compute_frac=1.0, memory_frac=0.6, wait_frac=0.3
)


def test_every_device_preset_is_priced_or_says_why_not() -> None:
    table = load_price_table()
    power = load_power_table()
    for device in preset_names("device"):
        assert device in power.devices
        rows = table.for_device(device)
        assert rows or device in table.unpriced, device
        for row in rows:
            assert row.date_read and row.source and row.usd_per_device_hour > 0
    assert set(table.unpriced).isdisjoint({r.device for r in table.rows})


def test_price_rows_are_checked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    good = 'device = "h100-sxm5-80gb"\nusd_per_device_hour = 2.0\nsource = "u"\ndate_read = 2026-01-02\n'
    cases = [
        (good.replace("date_read = 2026-01-02\n", ""), "missing key 'date_read'"),
        (good.replace("2.0", "0"), "'usd_per_device_hour' must be > 0"),
        (good.replace("2.0", "-3"), "'usd_per_device_hour' must be > 0"),
        (good + 'kind = "spot"\n', "'kind' must be one of on_demand, reserved"),
        (good.replace("2026-01-02", '"yesterday"'), "must be a date YYYY-MM-DD"),
        (good.replace('source = "u"\n', ""), "missing key 'source'"),
    ]
    for body, words in cases:
        path = tmp_path / "p.toml"
        path.write_text('id = "p"\n[[prices]]\n' + body)
        with pytest.raises(ValueError) as err:
            load_price_table(path)
        assert str(path) in str(err.value) and words in str(err.value), str(err.value)


def test_unpriced_device_says_so() -> None:
    with pytest.raises(
        ValueError, match="no on_demand price for device 'h800-sxm5-80gb'.*--price-per-device-hour"
    ):
        load_price_table().price("h800-sxm5-80gb")
    with pytest.raises(ValueError, match="usd_per_device_hour"):
        PriceSpec(device="d", usd_per_device_hour=0.0, kind="override")


def test_dollars_closed_forms() -> None:
    # 16 devices at $3/device-hour for a 4.5 s step: 16 x 3 x 4.5 / 3600 = $0.06
    assert dollars.usd_per_step(3.0, 16, 4.5) == pytest.approx(0.06)
    assert dollars.usd_per_million_tokens(0.06, 120_000) == pytest.approx(0.5)
    # 10 days failure-free at 90% goodput with 8 spares on 64 devices
    usd = dollars.run_usd(2.0, 64, 10 * 86400, goodput_frac=0.9, spare_devices=8)
    assert usd == pytest.approx(2.0 * 72 * 10 * 24 / 0.9)


def test_step_energy_closed_form() -> None:
    e = energy.step_energy_j(
        step_time_s=10.0,
        compute_s=6.0,
        memory_s=1.0,
        num_devices=16,
        num_nodes=2,
        phase_w=energy.phase_power_w(H100),
        node_overhead_w=2000.0,
        pue=1.25,
    )
    per_device = 700 * 6 + 420 * 1 + 210 * 3
    assert e["devices_j"] == pytest.approx(16 * per_device)
    assert e["nodes_j"] == pytest.approx(2 * 2000 * 10)
    assert e["facility_j"] == pytest.approx(1.25 * (16 * per_device + 40_000))
    run = energy.run_energy(e["facility_j"], 1e6, 1e9, grid_kg_per_kwh=0.4)
    assert run["energy_kwh"] == pytest.approx(1e9 / 1e6 * e["facility_j"] / 3.6e6)
    assert run["co2e_kg"] == pytest.approx(0.4 * run["energy_kwh"])


def test_power_cap_lowers_power_and_clocks() -> None:
    assert energy.phase_power_w(H100, 500.0) == (500.0, 420.0, 210.0)
    frac = energy.compute_clock_frac(H100, 500.0)
    assert frac == pytest.approx(((500 - 70) / (700 - 70)) ** (1 / 3))  # P - P_idle ~ f^3
    assert energy.compute_clock_frac(H100, 700.0) == 1.0 and energy.compute_clock_frac(H100, None) == 1.0
    for bad in (150.0, 701.0):
        with pytest.raises(ValueError, match=r"must be in \[200, 700\] W"):
            H100.check_cap(bad)
    with pytest.raises(ValueError, match=r"pue must be a finite number in \[1, 3\]"):
        EnergyOptions(pue=0.95)
    device = load_cluster("dgx-h100").device
    capped = energy.capped_device(device, frac)
    assert capped.peak("bf16") == pytest.approx(device.peak("bf16") * frac)
    assert capped.hbm_bytes_per_s == device.hbm_bytes_per_s


def test_economics_of_an_estimate_adds_up() -> None:
    from workbench.estimate.analytic import estimate_plan
    from workbench.estimate.economics import economics, power_inputs

    cluster = load_cluster("dgx-h100")
    est = estimate_plan(
        load_model("llama-3.1-8b"),
        cluster,
        Workload(seq_len=4096, global_batch_size=64),
        ParallelPlan(dp=8, zero_stage=1),
    )
    options = EnergyOptions(pue=1.1, grid_kg_per_kwh=0.3)
    power, overhead, _ = power_inputs(cluster, options)
    price = PriceSpec(device=cluster.device.id, usd_per_device_hour=2.0, kind="override")
    e = economics(est, power=power, options=options, node_overhead_w=overhead, price=price, token_budget=1e11)
    tokens = 64 * 4096
    assert e.usd_per_step == pytest.approx(2.0 * 8 * est.step_time_s / 3600)
    assert e.usd_per_million_tokens == pytest.approx(e.usd_per_step / tokens * 1e6)
    assert e.tokens_per_joule == pytest.approx(tokens / e.energy_j_per_step)
    assert e.energy_kwh_per_run == pytest.approx(1e11 / e.tokens_per_joule / 3.6e6)
    assert power.idle_w < e.device_avg_w <= power.tdp_w
    assert math.isclose(e.co2e_kg_per_run, 0.3 * e.energy_kwh_per_run)


def test_estimate_json_carries_dollars_and_energy(workbench_cli) -> None:  # type: ignore[no-untyped-def]
    from tests.test_cli_estimate import ARGS

    out = json.loads(workbench_cli(*ARGS, "--json", "--token-budget", "1e9", check=True).stdout)
    for key in ("usd_per_step", "usd_per_million_tokens", "energy_j_per_step", "tokens_per_joule"):
        assert out[key] > 0, key
    assert any(n.startswith("price: $") and "read 20" in n for n in out["notes"])
    assert any(n.startswith("energy: ") and "TDP" in n for n in out["notes"])
    capped = json.loads(workbench_cli(*ARGS, "--json", "--power-cap", "400", check=True).stdout)
    assert capped["step_time_s"] > out["step_time_s"] and capped["power_cap_w"] == 400
    bad = workbench_cli(*ARGS, "--power-cap", "900")
    assert bad.returncode != 0 and "[200, 700] W" in bad.stderr


def test_plan_cost_ranks_by_dollars_with_the_price_named() -> None:
    from workbench.search import Constraints, search

    cons = Constraints(fixed={"tp": 8, "pp": 1, "cp": 1}, zero_stages=(1,), recompute=("none",))
    price = PriceSpec(device="h100-sxm5-80gb", usd_per_device_hour=3.0, kind="override")
    kw = dict(nodes=[1, 2], top_k=0, keep=10, token_budget=1e10, constraints=cons)
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100")
    work = Workload(seq_len=4096, global_batch_size=64)
    priced = search(model, cluster, work, objective="cost", price=price, **kw)
    plain = search(model, cluster, work, objective="cost", **kw)
    rows = priced.plans.to_dicts()
    assert all(r["usd_to_train"] == pytest.approx(3.0 * r["device_hours"]) for r in rows)
    assert [r["plan"] for r in rows] == plain.plans["plan"].to_list()  # one price: the device-hours' order
    assert (
        priced.summary()["price"]["usd_per_device_hour"] == 3.0 and "usd_to_train" not in plain.plans.columns
    )


def test_serving_dollars_per_million_output_tokens() -> None:
    import polars as pl

    from workbench.search.serving import with_dollars

    table = pl.DataFrame({"num_devices": [2, 8], "goodput_output_tokens_per_s": [1000.0, 2000.0]})
    out = with_dollars(table, 3.6)["usd_per_million_output_tokens"].to_list()
    assert out == pytest.approx([3.6 * 2 / 3600 / 1000 * 1e6, 3.6 * 8 / 3600 / 2000 * 1e6])


def test_app_plan_and_serving_tabs_show_dollars_and_energy() -> None:
    from types import SimpleNamespace

    from workbench_widgets.app.serving_view import _dollars_line
    from workbench_widgets.app.views import summary_markdown

    from workbench.estimate.analytic import estimate_plan

    cluster = load_cluster("dgx-h100")
    est = estimate_plan(
        load_model("llama-3.1-8b"),
        cluster,
        Workload(seq_len=4096, global_batch_size=64),
        ParallelPlan(dp=8, zero_stage=1),
    )
    text = summary_markdown(est)
    assert "| Cost | $" in text and "per million tokens" in text and "| Energy |" in text
    fake = SimpleNamespace(cluster=cluster, plan=SimpleNamespace(num_devices=2))
    price = load_price_table().price("h100-sxm5-80gb").usd_per_device_hour
    line = _dollars_line(fake, 1000.0)
    assert f"${price * 2 / 3600 / 1000 * 1e6:,.3f} per million output tokens" in line
    unpriced = SimpleNamespace(cluster=load_cluster("hgx-h800"), plan=SimpleNamespace(num_devices=2))
    assert "no public price" in _dollars_line(unpriced, 1000.0)


def test_serving_energy_closed_form() -> None:
    # 2 devices for 10 s: 4 device-seconds of prefill at 700 W, 10 of decode at 420 W, 6 idle at 70 W,
    # a quarter of a 2 kW node overhead, PUE 1.1
    j = energy.serving_energy_j(
        prefill_device_s=4.0,
        decode_device_s=10.0,
        duration_s=10.0,
        num_devices=2,
        num_nodes=0.25,
        power=H100,
        node_overhead_w=2000.0,
        pue=1.1,
    )
    assert j == pytest.approx(1.1 * (4 * 700 + 10 * 420 + 6 * 70 + 0.25 * 2000 * 10))
