"""Objectives and best-k selection (the Pareto frontier is :func:`workbench.search.frontier.pareto_mask`).

Objectives (all computed from the screened step time):

- ``throughput``: tokens per second over the cluster (higher is better);
- ``time``: seconds to train a token budget, ``budget / tokens_per_s`` (lower is better);
- ``cost``: device-hours to train the budget, ``time * num_devices / 3600`` (lower is better): on one
  cluster size it ranks like throughput, across node counts it favours the most efficient size; with a price
  (``search(..., price=...)``) its dollars, ``usd_to_train`` (``PRICED_OBJECTIVES``);
- ``goodput-time`` and ``goodput-cost``: the same once failures count (:mod:`workbench.goodput`): wall time
  ``time / goodput_frac`` and its device-hours, hot spares included. Larger clusters fail more often, so the
  size that minimises these can be smaller than the one that minimises ``time``/``cost``. They need a failure
  model (``search(..., failures=...)``); within one cluster size they rank like ``time``/``cost`` (the goodput
  of a size depends on its devices, nodes and checkpoint bytes, not on the plan, up to the rounding of the
  interval to whole steps and, with elastic dp, the replicas a failed node takes out).
"""

from __future__ import annotations

import numpy as np

OBJECTIVES: dict[str, tuple[str, bool]] = {
    "throughput": ("tokens_per_s", True),
    "time": ("time_to_train_s", False),
    "cost": ("device_hours", False),
    "goodput-time": ("goodput_time_to_train_s", False),
    "goodput-cost": ("goodput_device_hours", False),
}
"""Objective name -> (result column, higher is better)."""

GOODPUT_OBJECTIVES: dict[str, str] = {"goodput-time": "time", "goodput-cost": "cost"}
"""Goodput objective -> the failure-free objective the screen ranks each cluster size by."""

GOODPUT_COLUMNS = (
    "mtbf_s",
    "checkpoint_bytes",
    "checkpoint_write_s",
    "checkpoint_stall_s",
    "checkpoint_interval_s",
    "restart_s",
    "goodput_frac",
    "goodput_time_to_train_s",
    "goodput_device_hours",
)
"""Result columns added when the search has a failure model (seconds, bytes, 0..1, hours)."""

PRICE_COLUMNS = ("usd_to_train",)
"""Result column added when the search has a price: ``device_hours x usd_per_device_hour`` (and, with a failure
model, ``goodput_usd_to_train``: the wall time's device-hours, spares in, priced: the lost time has a price)."""

PRICED_OBJECTIVES: dict[str, str] = {"cost": "usd_to_train", "goodput-cost": "goodput_usd_to_train"}
"""With a price, ``cost`` and ``goodput-cost`` rank by dollars. One device kind at one price per device-hour,
so the order is the device-hours' order (the screen ranks by device-hours); the dollars are what is shown."""

DEFAULT_TOKEN_BUDGET = 1e12
"""Tokens of the training run the ``time`` and ``cost`` objectives price (1 T tokens; Llama 2 trained on 2 T,
Llama 3 on 15 T)."""


def check_objective(objective: str) -> None:
    """Raise ValueError for an unknown objective name, listing the valid ones."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")


def objective_columns(
    tokens_per_s: np.ndarray, num_devices: np.ndarray | int, token_budget: float
) -> dict[str, np.ndarray]:
    """time_to_train_s and device_hours of a run of ``token_budget`` tokens at ``tokens_per_s``."""
    time_s = token_budget / tokens_per_s
    return {"time_to_train_s": time_s, "device_hours": time_s * num_devices / 3600.0}


def score(columns: dict[str, np.ndarray], objective: str) -> np.ndarray:
    """Higher-is-better score of every row for ``objective`` (negated where lower is better)."""
    check_objective(objective)
    name, higher = OBJECTIVES[objective]
    values = np.asarray(columns[name], dtype=np.float64)
    return values if higher else -values


def best_indices(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest ``values``, largest first (ties: lower index first)."""
    if k <= 0 or len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-values, k - 1)[:k] if len(values) > k else np.arange(len(values))
    order = np.lexsort((part, -values[part]))
    return part[order]
