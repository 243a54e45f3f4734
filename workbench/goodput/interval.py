"""The checkpoint interval and the expected wall time of a run that fails, checkpoints and restarts.

Symbols (seconds): ``M`` the job's mean time between failures, ``tau`` useful compute between checkpoints,
``delta`` the training stall per checkpoint, ``R`` the failure-prone restart (process start, NCCL init,
checkpoint read, plus the durability lag of an asynchronous save, see below), ``D`` downtime a failure adds
while no job runs (waiting for a node: no failure can strike the job then).

**Expected wall time of one segment** (``tau`` of work then ``delta`` of checkpoint), failures exponential with
mean ``M``, a failure during the segment or the restart loses the segment and restarts (Daly 2006, "A higher
order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3), eq. 13, with ``D`` added):

    T_seg = M * exp(R / M) * (1 + D / M) * (exp((tau + delta) / M) - 1)

Derivation: the segment needs ``s = tau + delta`` failure-free seconds; the expected number of attempts is
``exp(s/M)``, a failed attempt costs ``E[X | X < s]``, and each failure costs a restart phase of expected length
``exp(R/M) * D + (exp(R/M) - 1) * M`` (geometric retries of ``D`` plus a failure-prone ``R``); the sum
simplifies to the line above. Goodput is ``tau / T_seg``: useful training time over wall time.

**Asynchronous save.** The stall ``delta`` is only the copy to host memory; the checkpoint becomes durable
``W`` (the write time) after it. A failure in that window rolls back one more segment; for exponential failures
this is exactly Daly's expression with ``R + W`` in place of ``R`` (the first durable point after a restart
lies ``W`` further away; the rest is periodic), given ``tau >= W`` (one write in flight at a time).

**Optimal interval.** ``T_seg / tau`` is minimal where ``exp((tau+delta)/M) * (1 - tau/M) = 1``, independent of
``R`` and ``D``: ``tau* = M * (1 + W0(-exp(-(1 + delta/M))))`` with ``W0`` the principal branch of Lambert's W.
Young (1974, CACM 17(9)) gives the first-order ``sqrt(2 * delta * M)``; Daly (2006, eq. 37) the higher-order
``sqrt(2 delta M) * (1 + sqrt(delta/(2M))/3 + delta/(18 M)) - delta`` for ``delta < 2M``, else ``M``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def young_interval_s(stall_s: Any, mtbf_s: Any) -> Any:
    """Young (1974): ``sqrt(2 * delta * M)`` seconds of compute between checkpoints."""
    return np.sqrt(2.0 * np.asarray(stall_s, dtype=np.float64) * mtbf_s)


def daly_interval_s(stall_s: Any, mtbf_s: Any) -> Any:
    """Daly (2006, eq. 37) higher-order optimum: ``sqrt(2 delta M) (1 + sqrt(delta/2M)/3 + delta/(18M)) -
    delta`` where ``delta < 2M``, else ``M``."""
    d, m = np.asarray(stall_s, dtype=np.float64), np.asarray(mtbf_s, dtype=np.float64)
    x = d / (2.0 * m)
    est = np.sqrt(2.0 * d * m) * (1.0 + np.sqrt(x) / 3.0 + x / 9.0) - d
    return np.where(d < 2.0 * m, est, m)


def lambert_w0(z: Any) -> Any:
    """Principal branch of Lambert's W for ``z`` in [-1/e, 0] (numpy, vectorised): a branch-point series start
    (Corless et al. 1996, eq. 4.22) refined by Halley's iteration to machine precision."""
    z = np.asarray(z, dtype=np.float64)
    p = np.sqrt(np.maximum(2.0 * (np.e * z + 1.0), 0.0))
    w = -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p**3
    w = np.where(z > -0.25, z * (1.0 - z), w)  # small |z|: W(z) ~ z - z^2
    for _ in range(30):
        ew = np.exp(w)
        f = w * ew - z
        denom = ew * (w + 1.0) - (w + 2.0) * f / np.where(np.abs(w + 1.0) < 1e-300, 1e-300, 2.0 * (w + 1.0))
        step = np.where(np.abs(denom) > 0, f / np.where(denom == 0, 1.0, denom), 0.0)
        w = np.maximum(w - step, -1.0)
    return w


def optimal_interval_s(stall_s: Any, mtbf_s: Any) -> Any:
    """The ``tau`` that maximises goodput under the module's expression: ``M (1 + W0(-exp(-(1 + delta/M))))``
    (exact for exponential failures; ``R`` and ``D`` do not move it)."""
    d, m = np.asarray(stall_s, dtype=np.float64), np.asarray(mtbf_s, dtype=np.float64)
    return m * (1.0 + lambert_w0(-np.exp(-(1.0 + d / m))))


def segment_wall_s(interval_s: Any, stall_s: Any, mtbf_s: Any, restart_s: Any, downtime_s: Any = 0.0) -> Any:
    """Expected wall time of one checkpoint segment (module docstring), seconds; arrays broadcast."""
    m = np.asarray(mtbf_s, dtype=np.float64)
    return (
        m
        * np.exp(np.asarray(restart_s) / m)
        * (1.0 + np.asarray(downtime_s) / m)
        * np.expm1((np.asarray(interval_s) + stall_s) / m)
    )


def goodput_frac(interval_s: Any, stall_s: Any, mtbf_s: Any, restart_s: Any, downtime_s: Any = 0.0) -> Any:
    """Useful training time over wall time: ``tau / T_seg`` (module docstring). In (0, 1]."""
    return np.asarray(interval_s) / segment_wall_s(interval_s, stall_s, mtbf_s, restart_s, downtime_s)
