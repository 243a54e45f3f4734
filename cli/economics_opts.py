"""Price and energy options shared by ``estimate``, ``plan`` and ``serve`` (``--price-per-device-hour``,
``--price-kind``, ``--pue``, ``--grid-intensity``, ``--power-cap``) and their text output."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click
from workbench_cli._common import print_table


def economics_options(f: Any) -> Any:
    """The price and energy options (docs/cost.md)."""
    opts = [
        click.option(
            "--price-per-device-hour",
            type=float,
            default=None,
            help="US dollars per device-hour (default: the cluster file's [price], else the price table's "
            "on-demand row for the device; see docs/cost.md).",
        ),
        click.option(
            "--price-kind",
            type=click.Choice(["on-demand", "reserved"]),
            default="on-demand",
            show_default=True,
            help="Which price-table row to use.",
        ),
        click.option("--pue", type=float, default=1.0, show_default=True, help="Facility PUE (>= 1)."),
        click.option(
            "--grid-intensity",
            type=float,
            default=None,
            help="Grid carbon intensity, kg CO2e per kWh (adds CO2e per run).",
        ),
        click.option(
            "--power-cap",
            type=float,
            default=None,
            help="Board power limit per device, W (between the device's minimum limit and its TDP): clocks "
            "fall, compute-bound kernels slow down.",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def load_economics(kw: dict[str, Any], cluster: Any) -> tuple[Any, dict[str, Any]]:
    """(cluster with the power cap applied to its device, inputs for ``workbench.estimate.economics``).
    Pops the options from ``kw``; ValueError (as a one-line CLI error) for a bad value."""
    from workbench.cost.energy import capped_device
    from workbench.estimate.economics import power_inputs, resolve_price
    from workbench.specs.power import EnergyOptions

    override = kw.pop("price_per_device_hour")
    if override is not None and not override > 0:
        raise click.BadParameter(
            f"must be > 0 (US dollars per device-hour), got {override!r}",
            param_hint="--price-per-device-hour",
        )
    values = {
        "pue": kw.pop("pue"),
        "grid_kg_per_kwh": kw.pop("grid_intensity"),
        "power_cap_w": kw.pop("power_cap"),
    }
    flags = {"pue": "--pue", "grid_kg_per_kwh": "--grid-intensity", "power_cap_w": "--power-cap"}
    try:
        options = EnergyOptions(**values)
    except ValueError as exc:
        field = next((k for k in flags if f" {k} " in str(exc)), "pue")
        text = str(exc).removeprefix("EnergyOptions: ").replace(field, flags[field], 1)
        raise click.BadParameter(text, param_hint=flags[field]) from None
    price, why = resolve_price(cluster, override, kw.pop("price_kind").replace("-", "_"))
    power, overhead, clock = power_inputs(cluster, options)
    if clock < 1.0:
        cluster = replace(cluster, device=capped_device(cluster.device, clock))
    return cluster, {
        "price": price,
        "price_why": why,
        "power": power,
        "options": options,
        "node_overhead_w": overhead,
        "clock_frac": clock,
    }


def print_economics(econ: Any, econ_in: dict[str, Any]) -> None:
    """The dollars and energy block of the text output (``econ_in``: from ``load_economics``)."""
    rows = []
    why, clock_frac = econ_in["price_why"], econ_in["clock_frac"]
    if econ.usd_per_step is not None:
        rows += [
            ["price", f"{econ_in['price'].describe()} [{why}]"],
            ["dollars per step", f"${econ.usd_per_step:,.4f}"],
            ["dollars per million tokens", f"${econ.usd_per_million_tokens:,.4f}"],
        ]
        if econ.usd_per_run is not None:
            rows.append(["dollars per run", f"${econ.usd_per_run:,.0f} ({econ.token_budget:,.3g} tokens)"])
        if econ.goodput_usd_per_run is not None and econ.goodput_usd_per_run != econ.usd_per_run:
            rows.append(["dollars per run with failures", f"${econ.goodput_usd_per_run:,.0f}"])
    else:
        rows.append(["price", f"none: {why}"])
    if econ.energy_j_per_step is None or econ.tokens_per_joule is None:
        rows.append(["energy", "none: the device has no row in profiles/power/devices.toml"])
    else:
        rows += [
            ["energy per step", f"{econ.energy_j_per_step / 1e6:,.3f} MJ (PUE {econ.pue:g})"],
            ["tokens per joule", f"{econ.tokens_per_joule:,.3f}"],
            [
                "mean power",
                f"{econ.device_avg_w:,.0f} W per device, {(econ.node_avg_w or 0.0) / 1e3:,.2f} kW per node (IT)",
            ],
        ]
    if econ.power_cap_w is not None:
        rows.append(["power cap", f"{econ.power_cap_w:g} W: compute clocks x {clock_frac:.3f}"])
    if econ.energy_kwh_per_run is not None:
        rows.append(["energy per run", f"{econ.energy_kwh_per_run / 1e3:,.1f} MWh"])
    if econ.co2e_kg_per_run is not None:
        rows.append(["CO2e per run", f"{econ.co2e_kg_per_run / 1e3:,.1f} t"])
    print_table("Dollars and energy (docs/cost.md)", ["figure", "value"], rows)


def price_options(f: Any) -> Any:
    """``--price-per-device-hour`` and ``--price-kind`` alone (``plan``, ``serve``)."""
    f = click.option(
        "--price-kind", type=click.Choice(["on-demand", "reserved"]), default="on-demand", show_default=True,
        help="Which price-table row to use.",
    )(f)  # fmt: skip
    return click.option(
        "--price-per-device-hour",
        type=float,
        default=None,
        help="US dollars per device-hour (default: the cluster file's [price], else the price table's row for "
        "the device; docs/cost.md).",
    )(f)


def cli_price(kw: dict[str, Any], cluster: Any) -> tuple[Any, str]:
    """(PriceSpec or None, why) from ``--price-per-device-hour``/``--price-kind`` (popped from ``kw``)."""
    from workbench.estimate.economics import resolve_price

    override = kw.pop("price_per_device_hour", None)
    if override is not None and not override > 0:
        raise click.BadParameter(
            f"must be > 0 (US dollars per device-hour), got {override!r}",
            param_hint="--price-per-device-hour",
        )
    return resolve_price(cluster, override, kw.pop("price_kind", "on-demand").replace("-", "_"))
