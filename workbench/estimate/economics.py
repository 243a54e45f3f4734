"""Dollars and energy of one estimated plan: ``economics(est, ...) -> Economics``.

The pure pieces are :mod:`workbench.cost.dollars` and :mod:`workbench.cost.energy`; this module feeds them an
``Estimate`` (its step time, tokens per step, the critical rank's compute and optimizer seconds) and says in its
notes where every input came from. Names follow the unit rule: ``usd_per_step``, ``usd_per_million_tokens``,
``energy_j_per_step``, ``tokens_per_joule``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.cost import dollars, energy

if TYPE_CHECKING:
    from workbench.specs.estimate import Estimate
    from workbench.specs.power import DevicePower, EnergyOptions
    from workbench.specs.price import PriceSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class Economics:
    """Money and energy of one plan; None where an input was not given (no price, no token budget, no grid)."""

    usd_per_device_hour: float | None
    usd_per_step: float | None
    usd_per_million_tokens: float | None
    usd_per_run: float | None
    """A run of ``token_budget`` tokens at the failure-free step time."""
    goodput_usd_per_run: float | None
    """The same run priced at wall time: divided by the goodput, the spares paid too (``--failures``)."""
    energy_j_per_step: float | None
    """Facility energy of one step (devices + node overhead, times the PUE), J; None for a device without a row
    in the power table."""
    tokens_per_joule: float | None
    device_avg_w: float | None
    """Mean power of one device over a step, W."""
    node_avg_w: float | None
    """Mean IT power of one node (its devices and its overhead), W."""
    energy_kwh_per_run: float | None
    co2e_kg_per_run: float | None
    token_budget: float | None
    power_cap_w: float | None
    pue: float
    notes: tuple[str, ...]

    def lines(self) -> list[str]:
        """Two or three lines for a report or an app tab: dollars, energy, and what they rest on."""
        out = []
        if self.usd_per_step is not None:
            run = (
                f", ${self.usd_per_run:,.0f} per run of {self.token_budget:,.3g} tokens"
                if self.usd_per_run
                else ""
            )
            out.append(
                f"dollars: ${self.usd_per_step:,.4f} per step, ${self.usd_per_million_tokens:,.4f} per million "
                f"tokens{run} (at ${self.usd_per_device_hour:,.3f} per device-hour)"
            )
        kwh = f", {self.energy_kwh_per_run / 1e3:,.1f} MWh per run" if self.energy_kwh_per_run else ""
        co2 = f", {self.co2e_kg_per_run / 1e3:,.1f} t CO2e" if self.co2e_kg_per_run is not None else ""
        if self.energy_j_per_step is None or self.tokens_per_joule is None or self.device_avg_w is None:
            return out + list(self.notes)
        out.append(
            f"energy: {self.energy_j_per_step / 1e6:,.3f} MJ per step, {self.tokens_per_joule:,.3f} tokens per "
            f"joule, {self.device_avg_w:,.0f} W per device on average{kwh}{co2} (PUE {self.pue:g})"
        )
        return out + list(self.notes)

    def summary(self) -> dict[str, Any]:
        """Plain JSON (merged into ``workbench estimate --json``)."""
        return {k: (list(v) if k == "notes" else v) for k in self.__slots__ for v in (getattr(self, k),)}


def economics(
    est: Estimate,
    *,
    power: DevicePower | None,
    options: EnergyOptions,
    node_overhead_w: float,
    price: PriceSpec | None = None,
    token_budget: float | None = None,
    goodput_frac: float = 1.0,
    spare_devices: int = 0,
) -> Economics:
    """Dollars and energy of ``est`` (see the module docstring). ``power_cap_w`` of ``options`` must already be
    checked against ``power`` (``DevicePower.check_cap``) and applied to the estimate's device
    (``workbench.cost.energy.capped_device``). ``power`` None (a device without a row in the power table): no
    energy figures, dollars only, said in the notes. ValueError for a token budget <= 0."""
    if token_budget is not None and not token_budget > 0:
        raise ValueError(f"token_budget must be > 0 tokens, got {token_budget!r}")
    step = est.step_time_s
    tokens = est.tokens_per_s * step
    usd = _dollars(est, price, token_budget, goodput_frac, spare_devices)
    price_note = [f"price: {price.describe()}"] if price is not None else []
    common: dict[str, Any] = {
        **usd,
        "usd_per_device_hour": None if price is None else price.usd_per_device_hour,
        "token_budget": token_budget,
        "power_cap_w": options.power_cap_w,
        "pue": options.pue,
    }
    if power is None:
        note = f"energy: device {est.cluster.device.id!r} has no row in profiles/power/devices.toml: no energy figures"
        return Economics(
            energy_j_per_step=None,
            tokens_per_joule=None,
            device_avg_w=None,
            node_avg_w=None,
            energy_kwh_per_run=None,
            co2e_kg_per_run=None,
            notes=(note, *price_note),
            **common,
        )
    parts = est.breakdown.as_dict()
    e = energy.step_energy_j(
        step_time_s=step,
        compute_s=parts["compute_s"],
        memory_s=parts["optimizer_s"],
        num_devices=est.cluster.num_devices,
        num_nodes=est.cluster.num_nodes,
        phase_w=energy.phase_power_w(power, options.power_cap_w),
        node_overhead_w=node_overhead_w,
        pue=options.pue,
    )
    joules = float(e["facility_j"])
    run = energy.run_energy(joules, tokens, token_budget or 1.0, options.grid_kg_per_kwh)
    notes = [
        f"energy: {power.device} {power.tdp_w:g} W TDP ({power.source}); tensor-core/HBM/wait power "
        f"{power.compute_frac:g}/{power.memory_frac:g}/{power.wait_frac:g} x TDP (profiles/power/devices.toml, "
        f"ASSUMED fractions); node overhead {node_overhead_w:g} W; PUE {options.pue:g}"
        + (f"; power cap {options.power_cap_w:g} W" if options.power_cap_w else ""),
        *price_note,
    ]
    return Economics(
        energy_j_per_step=joules,
        tokens_per_joule=float(run["tokens_per_joule"]),
        device_avg_w=float(e["device_avg_w"]),
        node_avg_w=float(
            (e["devices_j"] / est.cluster.num_nodes + e["nodes_j"] / est.cluster.num_nodes) / step
        ),
        energy_kwh_per_run=None if token_budget is None else float(run["energy_kwh"]) / goodput_frac,
        co2e_kg_per_run=None
        if token_budget is None or "co2e_kg" not in run
        else float(run["co2e_kg"]) / goodput_frac,
        notes=tuple(notes),
        **common,
    )


def _dollars(
    est: Estimate,
    price: PriceSpec | None,
    token_budget: float | None,
    goodput_frac: float,
    spare_devices: int,
) -> dict[str, float | None]:
    """``usd_per_step``, ``usd_per_million_tokens``, ``usd_per_run`` (a run of ``token_budget`` tokens at the
    failure-free step time) and ``goodput_usd_per_run`` (divided by the goodput, the spares paid too), US dollars;
    None where the price or the budget is not given."""
    out: dict[str, float | None] = dict.fromkeys(
        ("usd_per_step", "usd_per_million_tokens", "usd_per_run", "goodput_usd_per_run")
    )
    if price is None:
        return out
    n = est.cluster.num_devices
    out["usd_per_step"] = step_usd = float(
        dollars.usd_per_step(price.usd_per_device_hour, n, est.step_time_s)
    )
    out["usd_per_million_tokens"] = float(
        dollars.usd_per_million_tokens(step_usd, est.tokens_per_s * est.step_time_s)
    )
    if token_budget is not None:
        ttt = token_budget / est.tokens_per_s
        out["usd_per_run"] = float(dollars.run_usd(price.usd_per_device_hour, n, ttt))
        out["goodput_usd_per_run"] = float(
            dollars.run_usd(price.usd_per_device_hour, n, ttt, goodput_frac, spare_devices)
        )
    return out


def resolve_price(
    cluster: Any, override_usd: float | None = None, kind: str = "on_demand", table: str = "cloud"
) -> tuple[PriceSpec | None, str]:
    """The price an estimate on ``cluster`` uses, and why: ``--price-per-device-hour`` first, then the cluster
    file's ``[price]``, then the price table's default row for the device and ``kind``. (None, reason) when the
    table has none (a device with no public price). ValueError for a price <= 0."""
    from workbench.presets.prices import load_price_table
    from workbench.specs.price import PriceSpec as _Price

    if override_usd is not None:
        return _Price(device=cluster.device.id, usd_per_device_hour=override_usd, kind="override"), "override"
    if cluster.price is not None:
        return cluster.price, "cluster file [price]"
    try:
        return load_price_table(table).price(cluster.device.id, kind), f"price table {table!r}"
    except ValueError as exc:
        if "no " in str(exc) and "price for device" in str(exc):
            return None, str(exc)
        raise


def power_inputs(cluster: Any, options: EnergyOptions) -> tuple[DevicePower | None, float, float]:
    """(device power row, node overhead W, compute clock fraction under the cap) for ``cluster``; the row is
    None for a device the power table does not list (a custom or CPU device: no energy figures). ValueError for
    a power cap on such a device or a cap outside [its minimum power limit, its TDP]."""
    from workbench.presets.power import load_power_table

    table = load_power_table()
    if cluster.device.id not in table.devices and options.power_cap_w is None:
        return None, 0.0, 1.0
    power = table.device(cluster.device.id)
    if options.power_cap_w is not None:
        power.check_cap(options.power_cap_w)
    overhead = options.node_overhead_w
    if overhead is None:
        overhead = table.node_overhead(cluster.id, cluster.devices_per_node)
    return power, overhead, energy.compute_clock_frac(power, options.power_cap_w)


def default_economics(est: Estimate, token_budget: float | None = None) -> tuple[Economics, str]:
    """``economics`` of ``est`` with the defaults the CLI uses without options: the cluster's or the price
    table's on-demand price, the power table, PUE 1, no cap. Returns (economics, why the price is what it is)."""
    from workbench.specs.power import EnergyOptions as _Options

    options = _Options()
    price, why = resolve_price(est.cluster)
    power, overhead, _ = power_inputs(est.cluster, options)
    econ = economics(
        est, power=power, options=options, node_overhead_w=overhead, price=price, token_budget=token_budget
    )
    return econ, why


def serving_usd_per_million_output_tokens(
    usd_per_device_hour: float, num_devices: int, tokens_per_s: float
) -> float:
    """Dollars per 10^6 output tokens of a deployment of ``num_devices`` devices making ``tokens_per_s``."""
    return float(dollars.usd_per_million_tokens(usd_per_device_hour * num_devices / 3600.0, tokens_per_s))


def serving_energy(est: Any) -> dict[str, float]:
    """``energy_j_per_output_token`` and ``output_tokens_per_joule`` of a ``ServingEstimate`` at the power table's
    defaults (PUE 1, no cap): ``workbench.cost.energy.serving_energy_j`` over its iteration table, each engine
    holding ``devices / engines`` devices, the node overhead prorated to the devices the plan uses."""
    import math

    from workbench.specs.power import EnergyOptions as _Options

    power, overhead, _ = power_inputs(est.cluster, _Options())
    it = est.sim.iterations
    if not it.height or power is None:  # no iterations, or a device without a power row
        return {"energy_j_per_output_token": math.nan, "output_tokens_per_joule": math.nan}
    per_engine = est.plan.num_devices / max(int(it["engine"].n_unique()), 1)
    seconds = (it["end_s"] - it["start_s"]).to_numpy()
    prefill = (it["num_prefill_tokens"] > 0).to_numpy()
    nodes = (
        est.plan.num_devices / est.cluster.devices_per_node
    )  # the node overhead prorated to the devices used
    joules = float(
        energy.serving_energy_j(
            prefill_device_s=float(seconds[prefill].sum()) * per_engine,
            decode_device_s=float(seconds[~prefill].sum()) * per_engine,
            duration_s=est.sim.duration_s,
            num_devices=est.plan.num_devices,
            num_nodes=nodes,
            power=power,
            node_overhead_w=overhead,
        )
    )
    tokens = float(est.sim.requests["output_tokens"].sum())
    return {"energy_j_per_output_token": joules / tokens, "output_tokens_per_joule": tokens / joules}
