"""The error band of an estimate: read from the leave-one-source-out residuals of the plan's regime.

A residual is one published run of the validation set scored with the constants fitted *without its source*
(``workbench validate --cv source``): ``log_ratio = ln(measured throughput / predicted throughput)`` (a
step-time row: ln(predicted / measured)). The committed table (``profiles/calibration/error_band.toml``,
written by ``workbench validate --cv source --write-band``) holds every residual with its regime.

The band of a plan is read from the residuals of its regime (:class:`Regime`: the stack's fit group, the
number of devices, and the features ZeRO-3, MoE, FP8, long context). The pool is the first of ``LEVELS``
that holds at least ``MIN_POOL`` residuals: same stack and features within
``SCALE_FACTOR`` x the plan's device count, then any stack, then any scale, and so on. Its 10th and 90th
percentiles, stretched about the median by the calibrated ``inflation`` (so that 80 % of out-of-sample
residuals fall inside, :func:`coverage`), give the band. When no run of the stack, or none within
``SCALE_FACTOR`` x of the scale with the plan's features, was validated, the band is widened: at least the
10-90 % spread of every residual stretched by its own calibrated ``widening`` (never narrower than the
validated formula), and it says why.

Pure Python (numpy): no I/O but :func:`load_band_table` (read once, cached).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.specs.band import ErrorBand

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import ParallelPlan, Workload

LONG_CONTEXT_TOKENS = 32768
"""Sequences of at least this many tokens count as long context (where attention dominates; issue 48)."""
SCALE_FACTOR = 4.0
"""Runs within this factor of the plan's device count count as the same scale."""
MIN_POOL = 8
"""Fewest residuals a pool needs (fewer: fall to the next, wider level)."""
COVERAGE_FRAC = 0.8
"""The band's stated coverage."""
QUANTILES = (0.1, 0.9)
FEATURES = ("zero3", "moe", "fp8", "long_context")
FEATURE_NAMES = {"zero3": "ZeRO-3", "moe": "MoE", "fp8": "FP8", "long_context": "long context (>= 32K)"}
BAND_FILE = "error_band.toml"


@dataclass(frozen=True, kw_only=True, slots=True)
class Regime:
    """What a plan shares with published runs for the purpose of its error."""

    stack: str
    """Fit group of the framework profile (e.g. ``megatron-core-2024``)."""
    num_devices: int
    zero3: bool = False
    moe: bool = False
    fp8: bool = False
    long_context: bool = False

    @property
    def flags(self) -> tuple[bool, ...]:
        return tuple(bool(getattr(self, f)) for f in FEATURES)

    def describe(self) -> str:
        feats = [FEATURE_NAMES[f] for f in FEATURES if getattr(self, f)]
        return ", ".join([self.stack, *feats]) if feats else f"{self.stack}, no ZeRO-3/MoE/FP8/long context"

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "num_devices": self.num_devices,
            **{f: getattr(self, f) for f in FEATURES},
        }


def regime_of(model: ModelSpec, workload: Workload, plan: ParallelPlan, *, stack: str) -> Regime:
    """The regime of a plan run by the stack of fit group ``stack``."""
    return Regime(
        stack=stack,
        num_devices=int(plan.num_devices),
        zero3=plan.zero_stage == 3,
        moe=bool(model.is_moe),
        fp8=str(workload.dtype) == "fp8",
        long_context=workload.seq_len >= LONG_CONTEXT_TOKENS,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Residual:
    """One published run scored out of sample."""

    id: str
    source_key: str
    regime: Regime
    log_ratio: float
    """ln(measured throughput / predicted throughput)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BandTable:
    """The committed residuals and the two calibrated stretch factors."""

    residuals: tuple[Residual, ...]
    inflation: float = 1.0
    """Stretch of the pool's 10-90 % spread about its median so that ``COVERAGE_FRAC`` of out-of-sample
    residuals of validated regimes fall inside (:func:`calibrate`)."""
    widening: float = 1.0
    """Stretch of a widened band (plans outside anything validated: the pool's spread joined with every
    residual's) about the pool's median, calibrated the same way on the residuals read so."""
    generated: str = ""
    """Date and commit of the ``workbench validate --cv source`` run that wrote the table."""
    source: str = ""


def _near(a: int, b: int) -> bool:
    return max(a, b) <= SCALE_FACTOR * min(a, b)


LEVELS: tuple[tuple[str, Callable[[Regime, Regime], bool]], ...] = (
    ("same stack and features, within 4x scale", lambda r, p: r.stack == p.stack and r.flags == p.flags
     and _near(r.num_devices, p.num_devices)),
    ("same features, within 4x scale", lambda r, p: r.flags == p.flags and _near(r.num_devices, p.num_devices)),
    ("same stack and features", lambda r, p: r.stack == p.stack and r.flags == p.flags),
    ("same features", lambda r, p: r.flags == p.flags),
    ("same stack, within 4x scale", lambda r, p: r.stack == p.stack and _near(r.num_devices, p.num_devices)),
    ("within 4x scale", lambda r, p: _near(r.num_devices, p.num_devices)),
    ("same stack", lambda r, p: r.stack == p.stack),
    ("every run", lambda r, p: True),
)  # fmt: skip
"""Pools from the closest regime to the widest; the first with ``MIN_POOL`` residuals wins."""


def unvalidated(regime: Regime, residuals: Iterable[Residual]) -> tuple[str, ...]:
    """Sentences naming what no residual covers: the stack, the scale, or a feature at this scale."""
    pool = list(residuals)
    notes = []
    if not any(r.regime.stack == regime.stack for r in pool):
        notes.append(f"no published run of {regime.stack} is in the validation set")
    near = [r for r in pool if _near(r.regime.num_devices, regime.num_devices)]
    scale = f"within {SCALE_FACTOR:g}x of this scale ({regime.num_devices} devices)"
    if not near:
        notes.append(f"no published run {scale}")
    else:
        for f in FEATURES:
            if getattr(regime, f) and not any(getattr(r.regime, f) for r in near):
                notes.append(f"no published run {scale} uses {FEATURE_NAMES[f]}")
    return tuple(notes)


def _pool(regime: Regime, residuals: tuple[Residual, ...]) -> tuple[str, list[Residual]]:
    for name, match in LEVELS:
        members = [r for r in residuals if match(r.regime, regime)]
        if len(members) >= MIN_POOL:
            return name, members
    return LEVELS[-1][0], list(residuals)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Spread:
    """A pool's median and 10/90 % percentiles of ln(measured / predicted), before any stretch; widened: the
    percentiles joined with every residual's (``wide_lo``, ``wide_hi``)."""

    mid: float
    q_lo: float
    q_hi: float
    wide_lo: float
    wide_hi: float
    num: int
    level: str
    notes: tuple[str, ...]

    def bounds(self, inflation: float, widening: float) -> tuple[float, float]:
        """ln bounds: the pool's spread stretched by ``inflation`` about its median; widened, also at least
        the joined spread stretched by ``widening``."""
        lo, hi = self.mid + inflation * (self.q_lo - self.mid), self.mid + inflation * (self.q_hi - self.mid)
        if not self.notes:
            return lo, hi
        wide_lo = self.mid + widening * (self.wide_lo - self.mid)
        wide_hi = self.mid + widening * (self.wide_hi - self.mid)
        return min(lo, wide_lo), max(hi, wide_hi)


def _spread(regime: Regime, residuals: tuple[Residual, ...]) -> _Spread:
    if not residuals:
        raise ValueError(
            "the error-band table has no residuals (regenerate it: workbench validate --cv source)"
        )
    level, members = _pool(regime, residuals)
    x = np.array([r.log_ratio for r in members])
    q_lo, q_hi = (float(q) for q in np.quantile(x, QUANTILES))
    every_lo, every_hi = (float(q) for q in np.quantile([r.log_ratio for r in residuals], QUANTILES))
    return _Spread(
        mid=float(np.median(x)),
        q_lo=q_lo,
        q_hi=q_hi,
        wide_lo=min(q_lo, every_lo),
        wide_hi=max(q_hi, every_hi),
        num=len(members),
        level=level,
        notes=unvalidated(regime, residuals),
    )


def band_for(regime: Regime, table: BandTable, *, exclude_source: str | None = None) -> ErrorBand:
    """The ``COVERAGE_FRAC`` band of ``regime`` from ``table`` (without the residuals of ``exclude_source``:
    how coverage is scored out of sample). ValueError when no residual is left."""
    s = _spread(regime, tuple(r for r in table.residuals if r.source_key != exclude_source))
    lo, hi = s.bounds(table.inflation, table.widening)
    return ErrorBand(
        low_frac=math.exp(lo),
        high_frac=math.exp(hi),
        coverage_frac=COVERAGE_FRAC,
        num_residuals=s.num,
        pool=f"{s.level} ({regime.describe()}, {regime.num_devices} devices)",
        widened=bool(s.notes),
        notes=s.notes,
    )


def _loso_spreads(table: BandTable) -> list[tuple[Residual, _Spread]]:
    """Each residual with the spread of its regime read without its own source (independent of the stretch)."""
    return [
        (r, _spread(r.regime, tuple(o for o in table.residuals if o.source_key != r.source_key)))
        for r in table.residuals
    ]


def _coverage(spreads: list[tuple[Residual, _Spread]], inflation: float, widening: float) -> dict[str, Any]:
    inside: list[tuple[Residual, bool, bool]] = []
    for r, s in spreads:
        lo, hi = s.bounds(inflation, widening)
        inside.append((r, lo <= r.log_ratio <= hi, bool(s.notes)))

    def share(items: list[tuple[Residual, bool, bool]]) -> float | None:
        return sum(h for _, h, _ in items) / len(items) if items else None

    sources = sorted({r.source_key for r, _ in spreads})
    return {
        "overall": share(inside),
        "validated": share([i for i in inside if not i[2]]),
        "widened": share([i for i in inside if i[2]]),
        "num_residuals": len(inside),
        "num_widened": sum(1 for i in inside if i[2]),
        "by_source": {s: share([i for i in inside if i[0].source_key == s]) for s in sources},
    }


def coverage(table: BandTable) -> dict[str, Any]:
    """Out-of-sample coverage: the share of residuals inside the band read *without their own source*.
    Returns ``overall``, ``validated`` and ``widened`` (shares, None when empty), ``num_residuals``,
    ``num_widened`` and ``by_source``."""
    return _coverage(_loso_spreads(table), table.inflation, table.widening)


STRETCH_GRID = tuple(round(0.5 + 0.05 * i, 2) for i in range(71))
"""Stretch factors tried by :func:`calibrate` (0.5 to 4.0)."""


def calibrate(table: BandTable, target: float = COVERAGE_FRAC) -> BandTable:
    """``table`` with ``inflation`` and ``widening`` (>= 1: a widened band spans at least every run's 10-90 %
    spread) set so that the out-of-sample coverage of neither the validated residuals nor the widened ones strays
    further from ``target`` than it must (the pair of ``STRETCH_GRID`` minimising the larger of the two misses;
    ties: the narrower band). With fewer than ``MIN_POOL`` widened residuals, ``inflation`` alone, nearest
    ``target`` on the validated ones, and ``widening`` = ``inflation``. Calibrating each pool apart let the
    widened pool's floor (its band is never narrower than the validated formula) carry the overall coverage
    past 85 % once the validated one sat at 80 %. A calibration of the band's width to its residuals, never
    of the model."""
    spreads = _loso_spreads(table)
    validated = [(k, c) for k in STRETCH_GRID if (c := _coverage(spreads, k, k)["validated"]) is not None]
    inflation = min(validated, key=lambda kc: (abs(kc[1] - target), kc[0]))[0] if validated else 1.0
    if _coverage(spreads, inflation, inflation)["num_widened"] < MIN_POOL:
        return replace(table, inflation=inflation, widening=inflation)

    def miss(k: float, w: float) -> float:
        cov = _coverage(spreads, k, w)
        gaps = [abs(cov[pool] - target) for pool in ("validated", "widened") if cov[pool] is not None]
        return max(gaps) if gaps else math.inf

    pairs = [(k, w) for k in STRETCH_GRID for w in STRETCH_GRID if w >= 1.0]
    inflation, widening = min(pairs, key=lambda kw: (miss(*kw), kw[0], kw[1]))
    return replace(table, inflation=inflation, widening=widening)


def read_band_table(path: str | Path) -> BandTable:
    """The band table at ``path`` (format: see :func:`band_table_toml`). ValueError naming the file and field."""
    where = Path(path)
    data = tomllib.loads(where.read_text(encoding="utf-8"))
    try:
        residuals = tuple(
            Residual(
                id=str(e["id"]),
                source_key=str(e["source_key"]),
                regime=Regime(
                    stack=str(e["stack"]),
                    num_devices=int(e["num_devices"]),
                    **{f: bool(e.get(f, False)) for f in FEATURES},
                ),
                log_ratio=float(e["log_ratio"]),
            )
            for e in data.get("residual", [])
        )
        return BandTable(
            residuals=residuals,
            inflation=float(data["inflation"]),
            widening=float(data["widening"]),
            generated=str(data.get("generated", "")),
            source=str(data.get("source", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: not an error-band table ({type(exc).__name__}: {exc})") from None


def band_table_toml(table: BandTable) -> dict[str, Any]:
    """The table as the TOML document :func:`read_band_table` reads."""
    return {
        "source": table.source,
        "generated": table.generated,
        "coverage_frac": COVERAGE_FRAC,
        "inflation": table.inflation,
        "widening": table.widening,
        "residual": [
            {"id": r.id, "source_key": r.source_key, **r.regime.as_dict(), "log_ratio": round(r.log_ratio, 6)}
            for r in table.residuals
        ],
    }


@lru_cache(maxsize=4)
def load_band_table(path: str | None = None) -> BandTable | None:
    """The committed table (``profiles/calibration/error_band.toml``), or None when it is absent."""
    from workbench.presets.catalog import profiles_dir

    where = Path(path) if path else profiles_dir() / "calibration" / BAND_FILE
    return read_band_table(where) if where.is_file() else None


@lru_cache(maxsize=4096)
def cached_band(regime: Regime) -> ErrorBand | None:
    """The committed table's band of ``regime`` (None without a table): read once per regime."""
    table = load_band_table()
    return band_for(regime, table) if table is not None and table.residuals else None
