"""How much power a device and its node draw: ``DevicePower`` (per device, from ``profiles/power/``) and
``EnergyOptions`` (the site: PUE, grid intensity, a power cap).

Watts inside (``_w``), joules (``_j``), kilograms of CO2-equivalent (``_kg``). The model that uses them is
:mod:`workbench.cost.energy`.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.specs.limits import check_real, shown

MAX_POWER_W = 20_000.0
"""Largest power of one device or one node's overhead accepted (20 kW): a GB300 module is 1.4 kW, a DGX B200
node 14.3 kW in all; more is a unit mistake (kW typed as W)."""

MAX_PUE = 3.0
"""Largest PUE accepted: the Uptime Institute's surveys put the industry average at 1.5-1.6 (2019-2024) and old
enterprise rooms near 2-2.5; hyperscale AI halls report 1.1-1.2."""

MAX_GRID_KG_PER_KWH = 2.0
"""Largest grid intensity accepted, kg CO2e per kWh (coal-fired generation is ~1.0)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DevicePower:
    """Power of one device by what it does. Fractions are of ``tdp_w``."""

    device: str
    tdp_w: float
    """Board power limit from the datasheet (TDP / max TGP), W."""
    idle_w: float
    """Power with nothing running, W. In [0, tdp_w]."""
    min_cap_w: float
    """Lowest power limit the board accepts (``nvidia-smi -pl`` minimum), W. In (0, tdp_w]."""
    compute_frac: float
    """Power while tensor-core bound (GEMMs, attention) over the TDP. In (0, 1]."""
    memory_frac: float
    """Power while HBM bound (optimizer step, elementwise, decode) over the TDP. In (0, 1]."""
    wait_frac: float
    """Power while waiting on communication or in the pipeline bubble over the TDP. In (0, 1]."""
    source: str = ""

    def __post_init__(self) -> None:
        where = f"power of {shown(self.device)}"
        check_real(where, "tdp_w", self.tdp_w, maximum=MAX_POWER_W, unit="W")
        check_real(where, "idle_w", self.idle_w, min_open=False, maximum=self.tdp_w, unit="W")
        check_real(where, "min_cap_w", self.min_cap_w, maximum=self.tdp_w, unit="W")
        for name in ("compute_frac", "memory_frac", "wait_frac"):
            check_real(where, name, getattr(self, name), maximum=1.0)
        if self.wait_frac * self.tdp_w < self.idle_w:
            raise ValueError(f"{where}: wait_frac x tdp_w must be at least idle_w ({self.idle_w:g} W)")

    def check_cap(self, power_cap_w: float, where: str = "--power-cap") -> float:
        """``power_cap_w`` if it lies in [min_cap_w, tdp_w], else ValueError naming the allowed range."""
        ok = isinstance(power_cap_w, int | float) and not isinstance(power_cap_w, bool)
        if not ok or not self.min_cap_w <= float(power_cap_w) <= self.tdp_w:
            raise ValueError(
                f"{where}: the power cap of {self.device} must be in [{self.min_cap_w:g}, {self.tdp_w:g}] W "
                f"(its minimum power limit and its TDP), got {shown(power_cap_w)}"
            )
        return float(power_cap_w)


@dataclass(frozen=True, kw_only=True, slots=True)
class EnergyOptions:
    """The site's side of the energy bill."""

    pue: float = 1.0
    """Power usage effectiveness: facility power over IT power. >= 1 (1: IT power only)."""
    grid_kg_per_kwh: float | None = None
    """Grid carbon intensity, kg CO2e per kWh; None: no CO2e figure."""
    power_cap_w: float | None = None
    """Board power limit per device, W (None: the TDP). Checked against the device's range by the model."""
    node_overhead_w: float | None = None
    """Power of a node besides its devices (CPUs, memory, NICs, switches, fans), W; None: the power table's."""

    def __post_init__(self) -> None:
        check_real("EnergyOptions", "pue", self.pue, minimum=1.0, min_open=False, maximum=MAX_PUE)
        if self.grid_kg_per_kwh is not None:
            check_real(
                "EnergyOptions",
                "grid_kg_per_kwh",
                self.grid_kg_per_kwh,
                min_open=False,
                maximum=MAX_GRID_KG_PER_KWH,
            )
        if self.power_cap_w is not None:
            check_real("EnergyOptions", "power_cap_w", self.power_cap_w, maximum=MAX_POWER_W, unit="W")
        if self.node_overhead_w is not None:
            check_real(
                "EnergyOptions", "node_overhead_w", self.node_overhead_w, min_open=False, maximum=MAX_POWER_W
            )
