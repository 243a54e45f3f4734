"""Energy of a training step or a serving iteration: device power by activity, node overhead, PUE, a power cap.

Every function is pure and broadcasts over numpy arrays (one plan = a batch of one). Watts, joules, seconds.

**Device power by activity** (``DevicePower``, ``profiles/power/devices.toml``): a device draws
``compute_frac x TDP`` while tensor-core bound, ``memory_frac x TDP`` while HBM bound and ``wait_frac x TDP``
while it waits on communication or sits in the pipeline bubble. The energy of one device over a step is
``P_c t_compute + P_m t_memory + P_w t_wait``, with ``t_wait = step - t_compute - t_memory`` (the critical rank's
breakdown stands for every rank: ranks off the critical path wait longer at ``P_w``, a few percent at most).

**Node and facility**: each node adds ``node_overhead_w`` (CPUs, memory, NICs, switches, fans) for the whole
step; the facility multiplies the IT energy by the PUE (The Green Grid, "PUE: a comprehensive examination of the
metric", White Paper 49, 2012: PUE = total facility energy / IT equipment energy).

**Power cap** (``nvidia-smi -pl``): a phase's power is ``min(P_phase, cap)``; when the cap is below the
tensor-core phase's power the clocks fall until the board holds the cap. Dynamic power goes as ``C V^2 f`` and in
the DVFS range the voltage scales with the frequency, so ``P - P_idle ~ f^3`` (Mittal & Vetter, "A survey of methods
for analyzing and improving GPU energy efficiency", ACM CSUR 47(2), 2014, sec. 2): compute-bound throughput
scales by ``((cap - P_idle) / (P_c - P_idle))^(1/3)``; HBM-bound work keeps its speed while its power fits under
the cap. Known error: Meta's H100 at 500 W reaches 780 of ~1,000 TFLOP/s (MTIA 300 paper, Table III: ratio 0.78);
this law gives 0.88 (+13%): at the TDP the H100 is already power-limited, so part of the clock headroom the cube
law assumes is not there.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from workbench.specs.hardware import DeviceSpec
from workbench.specs.power import DevicePower

J_PER_KWH = 3.6e6


def phase_power_w(power: DevicePower, power_cap_w: float | None = None) -> tuple[float, float, float]:
    """(tensor-core bound, HBM bound, waiting) power of one device, W, each at most the cap."""
    cap = power.tdp_w if power_cap_w is None else power_cap_w
    return tuple(min(f * power.tdp_w, cap) for f in (power.compute_frac, power.memory_frac, power.wait_frac))  # type: ignore[return-value]


def compute_clock_frac(power: DevicePower, power_cap_w: float | None) -> float:
    """Compute-bound clock (and throughput) under ``power_cap_w`` over the uncapped one, in (0, 1]: the cube law
    of the module docstring. 1 without a cap or when the cap is above the tensor-core phase's power."""
    full = power.compute_frac * power.tdp_w
    if power_cap_w is None or power_cap_w >= full:
        return 1.0
    return float(((power_cap_w - power.idle_w) / (full - power.idle_w)) ** (1.0 / 3.0))


def capped_device(device: DeviceSpec, clock_frac: float) -> DeviceSpec:
    """``device`` with its dense peaks scaled by ``clock_frac``: the kernel tables are fractions of these peaks,
    so every compute-bound kernel slows by the same factor; HBM bandwidth is unchanged."""
    if clock_frac == 1.0:
        return device
    peaks = {k: v * clock_frac for k, v in device.peak_flop_per_s.items()}
    return replace(
        device, peak_flop_per_s=peaks, source=f"{device.source}; peaks x {clock_frac:.3f} (power cap)"
    )


def step_energy_j(
    *,
    step_time_s: Any,
    compute_s: Any,
    memory_s: Any,
    num_devices: Any,
    num_nodes: Any,
    phase_w: tuple[float, float, float],
    node_overhead_w: float,
    pue: float = 1.0,
) -> dict[str, Any]:
    """Energy of one step, J (arrays broadcast): ``devices_j`` (all devices), ``nodes_j`` (node overhead),
    ``facility_j`` (``(devices + nodes) x PUE``, the total) and ``device_avg_w`` (mean power of one device).
    ``compute_s`` / ``memory_s``: tensor-core / HBM bound seconds of a step; the rest of ``step_time_s`` waits."""
    step = np.asarray(step_time_s, dtype=np.float64)
    comp = np.minimum(np.asarray(compute_s, dtype=np.float64), step)
    mem = np.minimum(np.asarray(memory_s, dtype=np.float64), step - comp)
    wait = step - comp - mem
    p_c, p_m, p_w = phase_w
    per_device = p_c * comp + p_m * mem + p_w * wait
    devices = per_device * num_devices
    nodes = node_overhead_w * step * num_nodes
    return {
        "devices_j": devices,
        "nodes_j": nodes,
        "facility_j": (devices + nodes) * pue,
        "device_avg_w": per_device / np.where(step > 0, step, 1.0),
    }


def run_energy(
    energy_j_per_step: Any, tokens_per_step: Any, token_budget: float, grid_kg_per_kwh: float | None = None
) -> dict[str, Any]:
    """A run of ``token_budget`` tokens: ``tokens_per_joule``, ``energy_kwh`` and (with a grid intensity,
    kg CO2e per kWh) ``co2e_kg``."""
    per_j = np.asarray(tokens_per_step, dtype=np.float64) / energy_j_per_step
    kwh = token_budget / per_j / J_PER_KWH
    out = {"tokens_per_joule": per_j, "energy_kwh": kwh}
    if grid_kg_per_kwh is not None:
        out["co2e_kg"] = kwh * grid_kg_per_kwh
    return out


def serving_energy_j(
    *,
    prefill_device_s: Any,
    decode_device_s: Any,
    duration_s: Any,
    num_devices: Any,
    num_nodes: Any,
    power: DevicePower,
    node_overhead_w: float,
    pue: float = 1.0,
) -> Any:
    """Facility energy of a serving run, J: device-seconds of iterations that compute prompt tokens at the
    tensor-core power (prefill is compute bound), of decode-only iterations at the HBM-bound power (Splitwise,
    arXiv:2311.18677: the token phase is memory bound), the rest of every device's ``duration_s`` idle; node
    overhead for the whole run; times the PUE. ``*_device_s``: iteration seconds times the devices of the engine
    that ran them."""
    p_c, p_m, _ = phase_power_w(power)
    busy = np.asarray(prefill_device_s, dtype=np.float64) + decode_device_s
    idle = np.maximum(np.asarray(num_devices, dtype=np.float64) * duration_s - busy, 0.0)
    devices = p_c * np.asarray(prefill_device_s) + p_m * np.asarray(decode_device_s) + power.idle_w * idle
    return (devices + node_overhead_w * np.asarray(num_nodes) * duration_s) * pue
