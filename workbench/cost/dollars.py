"""Dollars of a step, a million tokens and a run from a price per device-hour (pure, arrays broadcast).

A device is paid for every second of wall time, busy or not: ``usd_per_step = price x devices x step / 3600``.
Spares idle beside the job are paid too (``spare_devices``); lost time (failures, restarts) enters through
``goodput_frac``: a run of failure-free time ``T`` takes ``T / goodput`` of wall time (workbench.goodput).
"""

from __future__ import annotations

from typing import Any

import numpy as np

S_PER_HOUR = 3600.0


def usd_per_step(usd_per_device_hour: float, num_devices: Any, step_time_s: Any) -> Any:
    """US dollars of one step on ``num_devices`` devices."""
    return usd_per_device_hour * np.asarray(num_devices, dtype=np.float64) * step_time_s / S_PER_HOUR


def usd_per_million_tokens(usd_per_step_: Any, tokens_per_step: Any) -> Any:
    """US dollars per 10^6 tokens processed (trained, or generated when serving)."""
    return np.asarray(usd_per_step_, dtype=np.float64) / tokens_per_step * 1e6


def run_usd(
    usd_per_device_hour: float,
    num_devices: Any,
    time_to_train_s: Any,
    goodput_frac: Any = 1.0,
    spare_devices: Any = 0,
) -> Any:
    """US dollars of a run whose failure-free time is ``time_to_train_s``: wall time ``time / goodput`` on the
    job's devices and its spares."""
    wall = np.asarray(time_to_train_s, dtype=np.float64) / goodput_frac
    return (
        usd_per_device_hour * (np.asarray(num_devices, dtype=np.float64) + spare_devices) * wall / S_PER_HOUR
    )
