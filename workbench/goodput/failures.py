"""Interruption rates by cause, and the job-level MTBF of a cluster size.

A failure preset (``profiles/failures/<id>.toml``) lists causes with the rate at which each interrupts a
synchronous training job: per device-hour (GPU, HBM: one event per failing device) or per node-hour (host,
NIC, network, software: one event per failing node). A cause gives either a published ``count`` over the
preset's ``[observed]`` window (the loader divides by device-hours or node-hours of that window) or its rate
(``per_device_hour`` / ``per_node_hour``). Failures of the causes are independent Poisson processes, so
the job's rate is the sum (Young 1974; Daly 2006 assume the same exponential inter-failure times):

    rate_per_s = (sum_c device_rate_c * num_devices + node_rate_c * num_nodes) / 3600,  mtbf_s = 1 / rate_per_s.

``[recovery]`` holds what a restart costs that the plan does not decide: ``restart_s`` (detection, scheduler,
process start, NCCL init, data loader; the checkpoint read is priced from the storage path) and ``repair_s``
(time to repair or replace a node when no spare is free). Each preset cites every number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.goodput.practice import GoodputOptions
from workbench.presets.catalog import _Table, profiles_dir, read_toml
from workbench.specs.files import check_input_file
from workbench.specs.limits import MAX_DEVICES, check_count, check_real, shown

SCOPES = ("device", "node")
"""What one event of a cause takes down: a device (rate per device-hour) or a node (rate per node-hour)."""

KINDS = ("gpu", "hbm", "network", "host", "software", "maintenance", "other")
"""Cause kinds (the Llama 3 Table 5 categories folded into these)."""

MAX_RATE_PER_HOUR = 1.0
"""Largest rate per device- or node-hour a preset may state (one interruption per hour per device is far beyond
any published fleet; a bigger number is a unit mistake)."""

MAX_RECOVERY_S = 30 * 86400.0
"""Largest restart or repair time a preset may state (30 days)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureCause:
    """One cause of job interruptions."""

    name: str
    kind: str
    """One of ``KINDS``."""
    scope: str
    """``device`` or ``node`` (``SCOPES``)."""
    rate_per_hour: float
    """Interruptions per device-hour (scope device) or per node-hour (scope node). >= 0."""
    replace_node: bool = True
    """True: the failed node must be repaired or swapped before the job runs at full size again (hardware);
    False: the job restarts in place (software bugs, watchdog timeouts)."""

    def __post_init__(self) -> None:
        where = f"FailureCause {shown(self.name)}"
        if self.kind not in KINDS:
            raise ValueError(f"{where}: kind must be one of {', '.join(KINDS)}, got {shown(self.kind)}")
        if self.scope not in SCOPES:
            raise ValueError(f"{where}: scope must be one of {', '.join(SCOPES)}, got {shown(self.scope)}")
        check_real(where, "rate_per_hour", self.rate_per_hour, min_open=False, maximum=MAX_RATE_PER_HOUR)


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureModel:
    """Interruption rates by cause and the recovery times of one published run (or a user's file)."""

    id: str
    name: str
    causes: tuple[FailureCause, ...]
    restart_s: float
    """Detection + reschedule + process start + NCCL init + data loader, seconds (no checkpoint read). >= 0."""
    repair_s: float
    """Time to repair or replace a node when no spare is free, seconds. >= 0."""
    source: str = ""
    practice: GoodputOptions = field(default_factory=GoodputOptions)
    """How the run checkpointed and recovered (the preset's ``[practice]``; defaults without one: async
    checkpoints, no spares, wait for the repair)."""

    def __post_init__(self) -> None:
        where = f"FailureModel {shown(self.id)}"
        if not self.causes:
            raise ValueError(f"{where}: needs at least one cause")
        object.__setattr__(self, "causes", tuple(self.causes))
        for name in ("restart_s", "repair_s"):
            check_real(where, name, getattr(self, name), min_open=False, maximum=MAX_RECOVERY_S, unit="s")

    def rate_per_s(self, num_devices: Any, num_nodes: Any, *, replace_only: bool = False) -> Any:
        """Job interruption rate, 1/s, for ``num_devices`` devices on ``num_nodes`` nodes (ints or numpy
        arrays of equal shape); ``replace_only``: only the causes that need a node replaced."""
        per_hour = 0.0 * num_devices
        for c in self.causes:
            if replace_only and not c.replace_node:
                continue
            per_hour = per_hour + c.rate_per_hour * (num_devices if c.scope == "device" else num_nodes)
        return per_hour / 3600.0

    def mtbf_s(self, num_devices: Any, num_nodes: Any) -> Any:
        """Mean time between interruptions of the whole job, seconds (1 / ``rate_per_s``)."""
        return 1.0 / self.rate_per_s(num_devices, num_nodes)

    def by_kind(self, num_devices: int, num_nodes: int) -> dict[str, float]:
        """Interruptions per hour of the job, summed per cause kind."""
        out: dict[str, float] = {}
        for c in self.causes:
            out[c.kind] = out.get(c.kind, 0.0) + c.rate_per_hour * (
                num_devices if c.scope == "device" else num_nodes
            )
        return out


def failure_preset_names() -> list[str]:
    """Sorted ids of ``profiles/failures/*.toml``."""
    return sorted(p.stem for p in (profiles_dir() / "failures").glob("*.toml"))


def _resolve(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidate = profiles_dir() / "failures" / f"{name_or_path}.toml"
    if candidate.is_file():
        return candidate
    if path.suffix == ".toml" or len(path.parts) > 1 or path.exists():
        check_input_file(path, "failure file")
    names = ", ".join(failure_preset_names())
    raise ValueError(f"unknown failure preset {str(name_or_path)!r} (known: {names}; or a TOML path)")


def _observed_hours(top: _Table, origin: str) -> tuple[float, float] | None:
    """(device-hours, node-hours) of the ``[observed]`` window, or None without one."""
    if "observed" not in top.data:
        return None
    obs = _Table(top.get("observed", dict), f"{origin} [observed]", {"num_devices", "num_nodes", "days"})
    where = f"{origin} [observed]"
    devices = check_count(where, "num_devices", obs.get("num_devices", int), maximum=MAX_DEVICES)
    nodes = check_count(where, "num_nodes", obs.get("num_nodes", int), maximum=MAX_DEVICES)
    days = check_real(where, "days", obs.number("days"), maximum=36500.0, unit="days")
    return devices * days * 24.0, nodes * days * 24.0


def _cause(data: Any, origin: str, window: tuple[float, float] | None) -> FailureCause:
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: each [[causes]] entry must be a table, got {shown(data)}")
    keys = {"name", "kind", "scope", "count", "per_device_hour", "per_node_hour", "replace_node", "source"}
    t = _Table(data, origin, keys)
    given = [k for k in ("count", "per_device_hour", "per_node_hour") if k in t.data]
    if len(given) != 1:
        raise ValueError(
            f"{origin}: give exactly one of count, per_device_hour or per_node_hour, got {given}"
        )
    key = given[0]
    value = check_real(origin, f"key {key!r}", t.number(key), min_open=False, maximum=1e9)
    if key == "count":
        if window is None:
            raise ValueError(
                f"{origin}: key 'count' needs an [observed] table (num_devices, num_nodes, days)"
            )
        scope = t.get("scope", str, "device")
        if scope not in SCOPES:
            raise ValueError(f"{origin}: key 'scope' must be one of {', '.join(SCOPES)}, got {shown(scope)}")
        rate = value / (window[0] if scope == "device" else window[1])
    else:
        scope, rate = ("device" if key == "per_device_hour" else "node"), value
    try:
        return FailureCause(
            name=t.get("name", str),
            kind=t.get("kind", str),
            scope=scope,
            rate_per_hour=rate,
            replace_node=t.get("replace_node", bool, True),
        )
    except ValueError as exc:
        raise ValueError(f"{origin}: {exc}") from None


def _practice(top: _Table, origin: str) -> GoodputOptions:
    """The ``[practice]`` table (``checkpoint``, ``spare_nodes``, ``spare_frac``, ``on_failure``, ``source``), or
    the defaults."""
    if "practice" not in top.data:
        return GoodputOptions()
    where = f"{origin} [practice]"
    t = _Table(
        top.get("practice", dict), where, {"checkpoint", "spare_nodes", "spare_frac", "on_failure", "source"}
    )
    default = GoodputOptions()
    try:
        return GoodputOptions(
            checkpoint=t.get("checkpoint", str, default.checkpoint),
            spare_nodes=t.get("spare_nodes", int, default.spare_nodes),
            spare_frac=float(t.number("spare_frac", default.spare_frac)),
            on_failure=t.get("on_failure", str, default.on_failure),
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {str(exc).removeprefix('GoodputOptions: ')}") from None


def load_failures(name_or_path: str | Path) -> FailureModel:
    """A failure preset id (``llama3``) or the path of a TOML file with the same schema (see the module
    docstring and ``profiles/failures/llama3.toml``). ValueError naming the file, the key and the value."""
    path = _resolve(name_or_path)
    origin = str(path)
    top = _Table(
        read_toml(path, "failure file"),
        origin,
        {"id", "name", "source", "observed", "recovery", "practice", "causes"},
    )
    window = _observed_hours(top, origin)
    causes = top.get("causes", list)
    if not causes:
        raise ValueError(f"{origin}: [[causes]] needs at least one entry")
    rec = _Table(top.get("recovery", dict), f"{origin} [recovery]", {"restart_s", "repair_s", "source"})
    practice = _practice(top, origin)
    try:
        return FailureModel(
            id=top.get("id", str),
            name=top.get("name", str),
            source=top.get("source", str, ""),
            causes=tuple(_cause(c, f"{origin} causes[{i}]", window) for i, c in enumerate(causes)),
            restart_s=float(rec.number("restart_s")),
            repair_s=float(rec.number("repair_s")),
            practice=practice,
        )
    except ValueError as exc:
        text = str(exc)
        raise ValueError(text if text.startswith(origin) else f"{origin}: {text}") from None
