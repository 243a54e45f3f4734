"""Data parallelism across pools: whole replicas on every pool, the batch split by speed, the straggler priced.

Each pool runs its own homogeneous plan, found by the homogeneous planner (:func:`workbench.search.search` on the
pool's ``ClusterSpec``) for its share of the global batch, and costed by the same backend (its ``Estimate``).
The shares start in proportion to each pool's best tokens/s on the whole batch (Cephalo's compute balancing)
and are rounded to a few granularities so that every pool can split its share into micro-batches; each
candidate split is searched pool by pool.

A step ends when the slowest pool has finished its share and the gradients are averaged across pools: each
pool has already reduced inside itself (its ``Estimate``); across pools one replica per pool exchanges the whole
gradient (parameters x the framework's ``reduce_bytes_per_param``) over the shared level. That exchange is priced
as S concurrent all-reduces of 1/S of it over the pools (``comm.all_reduce_s`` on the shared level), S being the
fewest model shards of one replica (tp x pp x cp) among the pools, each shard on its own device and NIC; it is
counted exposed (a conservative assumption: no overlap with the last backward). Re-sharding between pools whose
replicas cut the model differently is not priced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from workbench.cost import step
from workbench.cost.comm import all_reduce_s
from workbench.estimate.mixed import STAGE_COLUMNS, MixedEstimate, PoolShare, SplitPlan, split_estimate
from workbench.pipeline.schedules import num_directions, uses_v_placement
from workbench.search import Constraints, search
from workbench.specs.hardware import ClusterSpec
from workbench.specs.plan import Workload

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.search import SearchResult
    from workbench.specs.estimate import Estimate
    from workbench.specs.model import ModelSpec
    from workbench.specs.pools import MixedCluster

GRANULES: tuple[int, ...] = (1, 8, 32)
"""Batch shares are tried rounded to multiples of these (sequences): 1 is the exact proportion, larger ones let
the pools pick more dp x micro-batch splits."""


def proportional_shares(global_batch: int, speeds: list[float], granule: int) -> tuple[int, ...] | None:
    """``global_batch`` split in proportion to ``speeds`` in multiples of ``granule`` (largest remainders first),
    every share at least one granule; None when that is impossible."""
    if global_batch % granule or global_batch // granule < len(speeds):
        return None
    units = global_batch // granule
    ideal = np.asarray(speeds, dtype=float) / float(np.sum(speeds)) * units
    shares = np.maximum(np.floor(ideal).astype(int), 1)
    while shares.sum() > units:
        shares[int(np.argmax(shares - ideal))] -= 1
    for k in np.argsort(-(ideal - shares), kind="stable")[: units - int(shares.sum())]:
        shares[k] += 1
    return tuple(int(s) * granule for s in shares)


def best_estimate(result: SearchResult) -> Estimate | None:
    """The planner's #1 if it was refined and fits, else None."""
    plans = result.plans
    if plans.height == 0 or not result.estimates or not plans["refined"][0] or not plans["fits"][0]:
        return None
    return result.estimates[0]


class SplitPlanner:
    """Searches each pool on its own (cached by pool and batch share) and prices splits of the batch."""

    def __init__(
        self,
        model: ModelSpec,
        mixed: MixedCluster,
        workload: Workload,
        cal: Calibration,
        constraints: Constraints,
        top_k: int = 3,
    ) -> None:
        self.model, self.mixed, self.workload, self.cal = model, mixed, workload, cal
        self.constraints, self.top_k = constraints, top_k
        self.searched: dict[tuple[int, int], SearchResult] = {}

    def alone(self, pool: int, global_batch: int | None = None) -> SearchResult:
        """The homogeneous planner's result for ``pool`` alone on ``global_batch`` sequences (default: all)."""
        batch = global_batch or self.workload.global_batch_size
        key = (pool, batch)
        if key not in self.searched:
            work = Workload(
                seq_len=self.workload.seq_len,
                global_batch_size=batch,
                dtype=self.workload.dtype,
                optimizer=self.workload.optimizer,
                capacity_factor=self.workload.capacity_factor,
            )
            self.searched[key] = search(
                self.model,
                self.mixed.pools[pool],
                work,
                self.constraints,
                top_k=self.top_k,
                calibration=self.cal,
            )
        return self.searched[key]

    def plans(self) -> list[MixedEstimate]:
        """Every candidate split that each pool can run, priced (module docstring); [] when a pool cannot hold
        a replica of the model."""
        alone = [best_estimate(self.alone(k)) for k in range(self.mixed.num_pools)]
        if any(a is None for a in alone) or self.mixed.num_pools < 2:
            return []
        speeds = [a.tokens_per_s for a in alone if a is not None]
        batch = self.workload.global_batch_size
        splits = {s for g in GRANULES if (s := proportional_shares(batch, speeds, g)) is not None}
        out = []
        for shares in sorted(splits):
            ests = [best_estimate(self.alone(k, b)) for k, b in enumerate(shares)]
            if all(e is not None for e in ests):
                out.append(self.price(shares, [e for e in ests if e is not None]))
        return out

    def cross_pool_s(self, estimates: list[Estimate]) -> float:
        """The gradient exchange across pools, exposed (module docstring), s."""
        shards = min(e.plan.tp * e.plan.pp * e.plan.cp for e in estimates)
        payload = self.model.total_parameters() * self.cal.framework.reduce_bytes_per_param / shards
        link = self.mixed.link
        bridge = ClusterSpec(
            id="shared", name=link.name, device=self.mixed.pools[0].device, devices_per_node=1,
            num_nodes=len(estimates), levels=(link,),
        )  # fmt: skip
        eff = self.cal.framework.collective_efficiency_frac
        return float(all_reduce_s(bridge, payload, len(estimates), 1, eff))

    def price(self, shares: tuple[int, ...], estimates: list[Estimate]) -> MixedEstimate:
        """The step of ``estimates`` (one per pool, on its share) run side by side (``split_estimate``)."""
        plan = SplitPlan(
            shares=tuple(
                PoolShare(pool=k, plan=e.plan, global_batch_size=b)
                for k, (b, e) in enumerate(zip(shares, estimates, strict=True))
            )
        )
        return split_estimate(
            self.model,
            self.mixed,
            self.workload,
            plan,
            estimates,
            stages=pl.concat([self._stages(k, e) for k, e in enumerate(estimates)]),
            cross_pool_s=self.cross_pool_s(estimates) if len(estimates) > 1 else 0.0,
        )

    def _stages(self, pool: int, est: Estimate) -> pl.DataFrame:
        """One row per pipeline rank of ``est`` (its layers, its busiest F and B, its memory)."""
        plan, model = est.plan, self.model
        ranks = np.arange(plan.pp)
        held = step.rank_holdings(
            model, pp=plan.pp, vpp=plan.vpp, v_shape=plan.pp > 1 and uses_v_placement(plan.schedule),
            rank=ranks, copies=num_directions(plan.schedule) if plan.pp > 1 else 1,
        )  # fmt: skip
        layers = np.broadcast_to(np.asarray(held["dense"]) + np.asarray(held["moe"]), ranks.shape)
        first, _ = step.stage_layer_span(model.num_layers, plan.pp * plan.vpp, ranks)
        tl = est.timeline.with_columns(dur=pl.col("end_s") - pl.col("start_s"))
        mem = est.memory.sort("rank")["total_bytes"].to_list()

        def mean_op(rank: int, ops: tuple[str, ...]) -> float:
            rows = tl.filter((pl.col("rank") == rank) & pl.col("op").is_in(ops))
            per_mb = rows.group_by("microbatch").agg(pl.col("dur").sum())["dur"]
            return float(per_mb.cast(pl.Float64).sum()) / per_mb.len() if per_mb.len() else 0.0

        return pl.DataFrame(
            {
                "stage": ranks.tolist(),
                "pool": [self.mixed.labels[pool]] * plan.pp,
                "device": [self.mixed.pools[pool].device.id] * plan.pp,
                "tp": [plan.tp] * plan.pp,
                "first_layer": [int(v) for v in np.broadcast_to(first, ranks.shape)],
                "layers": [int(v) for v in layers],
                "embedding": [bool(v) for v in np.broadcast_to(held["embedding"], ranks.shape)],
                "head": [bool(v) for v in np.broadcast_to(held["head"], ranks.shape)],
                "forward_s": [mean_op(int(r), ("F",)) for r in ranks],
                "backward_s": [mean_op(int(r), ("B", "I", "W")) for r in ranks],
                "memory_bytes": [float(v) for v in mem],
                "usable_bytes": [(1 - self.constraints.memory_headroom_frac) * est.memory_capacity_bytes]
                * plan.pp,
            }
        ).select(STAGE_COLUMNS)
