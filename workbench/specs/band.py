"""``ErrorBand``: how far a published run of the same regime landed from the model's estimate.

The band is read from the leave-one-source-out residuals of the public validation set
(:mod:`workbench.estimate.band`); it is stated as the range of *measured over predicted throughput*
(tokens/s, TFLOP/s, MFU: all proportional), so the step time's range is its inverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorBand:
    """A central ``coverage_frac`` interval of measured / predicted throughput for plans of one regime."""

    low_frac: float
    """Measured throughput over predicted at the band's low end (e.g. 0.85: a run may reach 85 % of the
    estimate). > 0."""
    high_frac: float
    """Measured throughput over predicted at the band's high end. >= ``low_frac``."""
    coverage_frac: float = 0.8
    """Share of out-of-sample residuals the band is calibrated to contain (0..1)."""
    num_residuals: int = 0
    """Residuals (published runs, each scored with constants fitted without its source) the band was read from."""
    pool: str = ""
    """Which residuals: the regime they share with the plan (stack, features, scale)."""
    widened: bool = False
    """True when no validated run is close to the plan (see ``notes``): the band is widened."""
    notes: tuple[str, ...] = ()
    """Why the band is widened, one sentence each (e.g. 'no published run within 4x of this scale (2048
    devices) uses ZeRO-3')."""

    def __post_init__(self) -> None:
        if not (self.low_frac > 0 and self.high_frac >= self.low_frac):
            raise ValueError(
                f"ErrorBand needs 0 < low_frac <= high_frac, got low_frac={self.low_frac}, "
                f"high_frac={self.high_frac}"
            )

    def throughput_range(self, value: float) -> tuple[float, float]:
        """(low, high) of a throughput-like estimate (tokens/s, FLOP/s, MFU): ``value`` x the band."""
        return value * self.low_frac, value * self.high_frac

    def time_range(self, step_time_s: float) -> tuple[float, float]:
        """(low, high) of a time estimate, seconds: a run faster than estimated takes less time."""
        return step_time_s / self.high_frac, step_time_s / self.low_frac

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "coverage_frac": self.coverage_frac,
            "low_frac": self.low_frac,
            "high_frac": self.high_frac,
            "num_residuals": self.num_residuals,
            "pool": self.pool,
            "widened": self.widened,
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        """One line, e.g. '80% band: 0.86-1.07x of the estimate (42 runs: megatron-core-2024, ...)'."""
        text = (
            f"{self.coverage_frac:.0%} band: {self.low_frac:.2f}-{self.high_frac:.2f}x the estimated throughput"
            f" ({self.num_residuals} published runs: {self.pool})"
        )
        if self.notes:
            text += "; widened: " + "; ".join(self.notes)
        return text
