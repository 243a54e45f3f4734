"""What ``serve_search`` returns: ``ServingSearchResult`` and the schema of its frames (``TABLE_COLUMNS``,
``SCREEN_COLUMNS``), and the records of one simulated plan (``GoodputPoint``, ``KeptPlan``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from workbench.search.frontier import pareto_mask
from workbench.search.serving.screen import Screened
from workbench.serving.estimate import ServingEstimate, serve_estimate
from workbench.specs.serving import SLO, ServingPlan, ServingWorkload

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.search.serving.space import ServingSearchConstraints
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec


TABLE_COLUMNS: tuple[str, ...] = (
    "rank", "plan", "disaggregated", "num_devices", "replicas", "tp", "pp", "ep", "attention_dp",
    "prefill_workers", "prefill_tp", "decode_workers", "decode_tp", "weight_dtype", "activation_dtype",
    "kv_cache_dtype", "gemm_precision", "scheduler", "max_num_seqs", "max_num_batched_tokens",
    "goodput_requests_per_s", "goodput_output_tokens_per_s", "goodput_requests_per_s_per_device",
    "goodput_output_tokens_per_s_per_device", "slo_attainment_frac", "ttft_s_at_goodput", "tpot_s_at_goodput",
    "ttft_s_alone", "tpot_s_alone", "kv_cache_capacity_tokens", "estimate_requests_per_s",
    "bound_requests_per_s", "num_simulations", "num_simulated_requests", "pareto_ttft", "pareto_tpot", "pareto",
)  # fmt: skip
"""Columns of ``ServingSearchResult.table``: one row per simulated plan, best first, SI units.

- ``rank`` (1 = best), ``plan`` (``ServingPlan.describe()``), ``disaggregated`` (bool), ``num_devices``; the
  plan's ``replicas tp pp ep attention_dp`` (aggregated; ``ep`` null when unset) or ``prefill_workers prefill_tp
  decode_workers decode_tp`` (disaggregated), the three dtypes, ``gemm_precision`` (how the (decode) engine's
  GEMMs run: ``as-is`` or ``weight-only``, :func:`workbench.serving.precision.gemm_precision`), ``scheduler``, ``max_num_seqs``,
  ``max_num_batched_tokens``;
- ``goodput_requests_per_s`` and ``goodput_output_tokens_per_s`` of the deployment (Poisson: the rate found, at
  most ``bound_requests_per_s``, and that rate times the mean output length), and both ``_per_device``;
- at the goodput point: ``slo_attainment_frac`` (0..1, judged requests meeting both targets),
  ``ttft_s_at_goodput`` and ``tpot_s_at_goodput`` (the SLO's percentile; null without such requests);
- the screen's closed forms: ``ttft_s_alone`` (the percentile's prompt prefilled alone), ``tpot_s_alone`` (one
  decode at batch 1), ``kv_cache_capacity_tokens`` (one engine; the decode engine when disaggregated),
  ``estimate_requests_per_s`` (steady-state model) and ``bound_requests_per_s`` (throughput bound);
- ``num_simulations`` and ``num_simulated_requests`` (per run at the goodput point, warm-up included);
- ``pareto_ttft`` / ``pareto_tpot``: no other row has a higher goodput output tokens/s per device and a lower
  TTFT / TPOT at its goodput point; ``pareto``: either.
"""

SCREEN_COLUMNS: tuple[str, ...] = (
    "plan", "num_devices", "estimate_requests_per_s", "estimate_requests_per_s_per_device",
    "bound_requests_per_s", "ttft_s_alone", "tpot_s_alone", "kv_cache_capacity_tokens", "simulated",
)  # fmt: skip
"""Columns of ``ServingSearchResult.screened``: every plan that passed the screen, highest estimate per device
first; ``simulated`` tells whether it reached the simulator."""


@dataclass(frozen=True, kw_only=True)
class ServingSearchResult:
    """What ``serve_search`` found. ``table`` (``TABLE_COLUMNS``) and ``plans`` are aligned, best first;
    ``screened`` (``SCREEN_COLUMNS``) lists every plan that passed the screen; ``rejections`` has one row per
    reason of ``REASONS`` (``reason``, ``description``, ``num_plans``)."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: ServingWorkload
    slo: SLO
    calibration: Calibration
    constraints: ServingSearchConstraints
    table: pl.DataFrame
    plans: tuple[ServingPlan, ...]
    screened: pl.DataFrame
    rejections: pl.DataFrame
    num_candidates: int
    """Plans enumerated; each is in ``table`` or counted under one reason."""
    num_simulations: int
    """Simulator runs in all."""
    goodput_workloads: tuple[ServingWorkload, ...] = ()
    """The workload of each row's goodput point (Poisson at the goodput rate, warm-up requests included; the
    search's workload for other arrivals), aligned with ``plans``."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Caveats of this search in words (e.g. why there is no per-dollar figure)."""

    @property
    def pareto(self) -> pl.DataFrame:
        """The rows of ``table`` on either frontier, highest goodput per device first."""
        return self.table.filter(pl.col("pareto"))

    @property
    def best(self) -> ServingPlan | None:
        """The plan with the highest goodput per device; None when no plan was kept."""
        return self.plans[0] if self.plans else None

    def best_estimate(self) -> ServingEstimate | None:
        """``serve_estimate`` of the best plan on its goodput workload (one more simulation; its latencies are
        over every request, warm-up included), or None."""
        if self.best is None:
            return None
        return serve_estimate(
            self.model, self.cluster, self.best, self.goodput_workloads[0], self.calibration
        )

    def rejection_counts(self) -> dict[str, int]:
        """Plans per reason key, in ``REASONS`` order."""
        return dict(zip(self.rejections["reason"], self.rejections["num_plans"], strict=True))

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """JSON-ready summary: the best row, the ``top`` rows (all when None), the frontier, the rejection
        counts, the counts of plans and simulations, and the notes; non-finite numbers become None."""
        return {
            "model": self.model.name,
            "cluster": self.cluster.id,
            "device": self.cluster.device.id,
            "num_devices": self.constraints.num_devices or self.cluster.num_devices,
            "arrival": self.workload.arrival.value,
            "target_request_rate_per_s": self.workload.request_rate_per_s,
            "slo": {
                "ttft_s": self.slo.ttft_s,
                "tpot_s": self.slo.tpot_s,
                "percentile": self.slo.percentile.value,
            },
            "best": json_rows(self.table.head(1))[0] if self.plans else None,
            "plans": json_rows(self.table if top is None else self.table.head(top)),
            "pareto": json_rows(self.pareto),
            "rejections": self.rejection_counts(),
            "num_candidates": self.num_candidates,
            "num_screened": self.screened.height,
            "num_simulations": self.num_simulations,
            "notes": list(self.notes),
        }


def json_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    def clean(v: Any) -> Any:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return [{k: clean(v) for k, v in row.items()} for row in frame.to_dicts()]


@dataclass(frozen=True, slots=True)
class GoodputPoint:
    """One simulation of a plan: the rate (nan unless Poisson), whether the SLO held, the judged numbers."""

    rate_per_s: float
    meets: bool
    workload: ServingWorkload
    ttft_q_s: float
    tpot_q_s: float
    attainment_frac: float
    """Judged requests meeting both targets over the judged requests."""
    goodput_per_s: float
    tokens_per_s: float


@dataclass(frozen=True, slots=True)
class KeptPlan:
    screened: Screened
    point: GoodputPoint
    num_simulations: int

    @property
    def per_device(self) -> float:
        return self.point.goodput_per_s / self.screened.plan.num_devices

    def order(self) -> tuple[float, int, str]:
        return (-self.per_device, self.screened.plan.num_devices, self.screened.plan.describe())


# ---- tables ------------------------------------------------------------------------------------------------
def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _row(rank: int, k: KeptPlan) -> dict[str, Any]:
    s, pt = k.screened, k.point
    p, d = s.plan, s.plan.disaggregation
    agg = d is None
    return {
        "rank": rank, "plan": p.describe(), "disaggregated": not agg, "num_devices": p.num_devices,
        "replicas": p.replicas if agg else None, "tp": p.tp if agg else None, "pp": p.pp if agg else None,
        "ep": p.ep, "attention_dp": p.attention_dp if agg else None,
        "prefill_workers": d.prefill_workers if d else None, "prefill_tp": d.prefill_tp if d else None,
        "decode_workers": d.decode_workers if d else None, "decode_tp": d.decode_tp if d else None,
        "weight_dtype": p.weight_dtype.value, "activation_dtype": p.activation_dtype.value,
        "kv_cache_dtype": p.kv_cache_dtype.value, "gemm_precision": s.decode.precision.reading,
        "scheduler": p.scheduler.value,
        "max_num_seqs": p.max_num_seqs, "max_num_batched_tokens": p.max_num_batched_tokens,
        "goodput_requests_per_s": pt.goodput_per_s, "goodput_output_tokens_per_s": pt.tokens_per_s,
        "goodput_requests_per_s_per_device": k.per_device,
        "goodput_output_tokens_per_s_per_device": pt.tokens_per_s / p.num_devices,
        "slo_attainment_frac": pt.attainment_frac, "ttft_s_at_goodput": _finite(pt.ttft_q_s),
        "tpot_s_at_goodput": _finite(pt.tpot_q_s), "ttft_s_alone": s.ttft_alone_s,
        "tpot_s_alone": _finite(s.tpot_alone_s), "kv_cache_capacity_tokens": s.decode.kv_capacity_tokens,
        "estimate_requests_per_s": s.estimate_per_s, "bound_requests_per_s": s.bound_per_s,
        "num_simulations": k.num_simulations, "num_simulated_requests": pt.workload.request_count,
        "pareto_ttft": False, "pareto_tpot": False, "pareto": False,
    }  # fmt: skip


def results_table(kept: list[KeptPlan]) -> pl.DataFrame:
    """The ``TABLE_COLUMNS`` frame of the kept plans (in rank order), frontiers marked."""
    rows = [_row(rank, k) for rank, k in enumerate(kept, start=1)]
    frame = pl.DataFrame(
        {name: [r[name] for r in rows] for name in TABLE_COLUMNS}, schema=_schema(TABLE_COLUMNS)
    )
    per_device = frame["goodput_output_tokens_per_s_per_device"].to_numpy()
    ttft = frame["ttft_s_at_goodput"].fill_null(math.nan).to_numpy()
    tpot = frame["tpot_s_at_goodput"].fill_null(math.nan).to_numpy()
    p_ttft = pareto_mask((per_device, ttft), (True, False))  # a null latency is never on a frontier
    p_tpot = pareto_mask((per_device, tpot), (True, False))
    return frame.with_columns(pl.Series("pareto_ttft", p_ttft), pl.Series("pareto_tpot", p_tpot),
                              pl.Series("pareto", p_ttft | p_tpot))  # fmt: skip


def screened_table(passed: list[Screened], simulated: set[int]) -> pl.DataFrame:
    """The ``SCREEN_COLUMNS`` frame of the plans that passed the screen (already in estimate order)."""
    cols: dict[str, list[Any]] = {
        "plan": [s.plan.describe() for s in passed],
        "num_devices": [s.plan.num_devices for s in passed],
        "estimate_requests_per_s": [s.estimate_per_s for s in passed],
        "estimate_requests_per_s_per_device": [s.estimate_per_device for s in passed],
        "bound_requests_per_s": [s.bound_per_s for s in passed],
        "ttft_s_alone": [s.ttft_alone_s for s in passed],
        "tpot_s_alone": [_finite(s.tpot_alone_s) for s in passed],
        "kv_cache_capacity_tokens": [s.decode.kv_capacity_tokens for s in passed],
        "simulated": [id(s) in simulated for s in passed],
    }
    return pl.DataFrame(cols, schema=_schema(SCREEN_COLUMNS))


_STRINGS = frozenset(
    {"plan", "weight_dtype", "activation_dtype", "kv_cache_dtype", "gemm_precision", "scheduler"}
)
_BOOLS = frozenset({"disaggregated", "pareto_ttft", "pareto_tpot", "pareto", "simulated"})
_INTS = frozenset({
    "rank", "num_devices", "replicas", "tp", "pp", "ep", "attention_dp", "prefill_workers", "prefill_tp",
    "decode_workers", "decode_tp", "max_num_seqs", "max_num_batched_tokens", "kv_cache_capacity_tokens",
    "num_simulations", "num_simulated_requests",
})  # fmt: skip


def _schema(columns: tuple[str, ...]) -> dict[str, Any]:
    def dtype(name: str) -> Any:
        if name in _STRINGS:
            return pl.String
        if name in _BOOLS:
            return pl.Boolean
        return pl.Int64 if name in _INTS else pl.Float64

    return {name: dtype(name) for name in columns}
