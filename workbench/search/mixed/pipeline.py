"""Pipelines across pools: stages sized by each pool's speed and memory, screened in closed form, the best simulated.

For a layout (pool order, dp, each pool's tp and so its stage count, micro-batch, ZeRO stage, recompute,
schedule) every pool's stages are priced by :mod:`workbench.hetero.pricing` (the step model, on the pool's own
device and links). The layers are then split over the stages:

- a stage of pool k with n layers takes ``edge + n x c_k`` seconds per micro-batch (F + I + W of
  ``share_s``: c_k of one layer, ``edge`` the embedding or LM head it holds);
- it may hold at most the n whose peak memory (``static_memory`` + its peak in-flight micro-batches x
  ``stored_activation_bytes``, through ``memory_columns``) fits the pool's usable memory; the in-flight counts
  per rank come from the pipeline simulator run on the schedule with one byte per stage;
- the split minimises the slowest stage (greedy: each next layer goes to the stage that would finish it
  first, which is optimal for a min-max of increasing separable costs; Zorse, HexiScale and Metis balance stages
  the same way, by compute, under memory caps).

The screen prices a split with the 1F1B closed form for uneven stages, sum(t) + (m - 1) max(t) + the hops there
and back (the fill and drain pass every stage once, the steady state runs at the slowest), plus the largest
data-parallel reduction and optimizer step of any stage. The best layouts are then simulated by
:func:`workbench.pipeline.simulate.simulate` with the per-stage times and the hop table (hops inside a pool on the
pool's levels, ``step.pp_hop_table_s``; between pools on the shared level, ``comm.p2p_s``). The framework
profile's pipeline mechanisms apply as in the analytic backend: blocking sends (``blocking_p2p_schedules``) put
the slowest hop into every F and I and nothing on the dependencies, and overlapped steps
(``optimizer_post_validation``) make the step the longest rank span.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from workbench.cost import step
from workbench.cost.comm import p2p_s
from workbench.cost.layer import ACT_BYTES
from workbench.estimate.assemble import COMM_KINDS, PlanCosts
from workbench.estimate.mixed import MixedEstimate, PipelinePlan, PoolStages, pipeline_estimate
from workbench.hetero.pricing import PoolGrid, pool_plan, position_index, price_grid
from workbench.pipeline.bubble import tiles
from workbench.pipeline.schedules import build_schedule
from workbench.pipeline.simulate import StageCosts
from workbench.search.mixed.layouts import Layout, inflight_per_rank, split_layers
from workbench.specs.hardware import ClusterSpec
from workbench.specs.plan import ParallelPlan

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload
    from workbench.specs.pools import MixedCluster


@dataclass(frozen=True, kw_only=True)
class Split:
    """A layout with its layers split: per stage its pool, grid cell and layers, the hop table."""

    layout: Layout
    pools: tuple[int, ...]
    """Per stage, the pool index."""
    cells: tuple[tuple[int, int], ...]
    """Per stage, (position, layout index) in its pool's ``PoolGrid``."""
    layers: tuple[int, ...]
    hop_table_s: np.ndarray
    """pp x pp seconds of a send from rank i to rank j."""
    screen_step_s: float
    dp_comm_s: float
    optimizer_s: float


class PipelinePricer:
    """Prices the layouts of one (model, mixed cluster, workload, calibration): ``prepare`` builds one
    ``PoolGrid`` per pool for all of them, ``split`` sizes the stages of one, ``estimate`` simulates it."""

    def __init__(
        self, model: ModelSpec, mixed: MixedCluster, workload: Workload, cal: Calibration, headroom: float
    ) -> None:
        self.model, self.mixed, self.workload, self.cal, self.headroom = model, mixed, workload, cal, headroom
        self.grids: dict[int, PoolGrid] = {}
        self._index: dict[tuple, int] = {}
        self._ctx = {k: step.StepContext.build(model, p, workload, cal) for k, p in enumerate(mixed.pools)}
        self._hops: dict[tuple, np.ndarray] = {}
        link = mixed.link
        self.bridge = ClusterSpec(
            id="shared", name=link.name, device=mixed.pools[0].device, devices_per_node=1, num_nodes=2,
            levels=(link,),
        )  # fmt: skip

    @staticmethod
    def _key(tp: int, layout: Layout) -> tuple:
        return (tp, layout.dp, layout.pp, layout.micro_batch_size, layout.zero_stage, layout.recompute)

    def _plan(self, key: tuple) -> ParallelPlan:
        tp, dp, pp, mbs, zero, rc = key
        return pool_plan(
            tp=tp, dp=dp, pp=pp, micro_batch_size=mbs, zero_stage=zero, recompute=rc, schedule="1f1b"
        )

    def prepare(self, candidates: list[Layout]) -> None:
        """Price every pool for the layouts it takes part in (one ``PoolGrid`` per pool)."""
        keys: dict[int, dict[tuple, None]] = {k: {} for k in range(self.mixed.num_pools)}
        for lay in candidates:
            for k, tp in zip(lay.order, lay.tps, strict=True):
                keys[k][self._key(tp, lay)] = None
        for k, wanted in keys.items():
            if not wanted:
                continue
            plans = [self._plan(key) for key in wanted]
            self.grids[k] = price_grid(
                self.model, self.mixed.pools[k], self.workload, self.cal, plans, headroom_frac=self.headroom
            )
            self._index.update({(k, *key): i for i, key in enumerate(wanted)})

    def split(self, layout: Layout, layers: tuple[int, ...] | None = None) -> Split | None:
        """Split the layers of ``layout`` (module docstring), or take the given ``layers`` per stage; None when
        the stages cannot hold them. ``prepare`` must have seen ``layout``."""
        pp, m = layout.pp, self.workload.global_batch_size // (layout.dp * layout.micro_batch_size)
        inflight = inflight_per_rank(layout.schedule, pp, m)
        pools = tuple(k for k, n in zip(layout.order, layout.stages, strict=True) for _ in range(n))
        tps = tuple(t for t, n in zip(layout.tps, layout.stages, strict=True) for _ in range(n))
        cells = tuple(
            (position_index(s, pp), self._index[(k, *self._key(t, layout))])
            for s, (k, t) in enumerate(zip(pools, tps, strict=True))
        )
        per_layer, edges, caps = [], [], []
        for s, (k, (pos, i)) in enumerate(zip(pools, cells, strict=True)):
            grid = self.grids[k]
            total = grid.total_s[pos, i]
            per_layer.append(float(total[1] - total[0]))
            edges.append(float(total[0]))
            fits = (
                grid.empty_bytes[pos, i] + inflight[s] * grid.per_microbatch_bytes[pos, i]
                <= grid.usable_bytes
            )
            caps.append(int(np.nonzero(fits)[0][-1]) if fits.any() else 0)
        if layers is None:
            layers = split_layers(self.model.num_layers, per_layer, edges, caps)
        elif len(layers) != pp or sum(layers) != self.model.num_layers or min(layers) < 1:
            raise ValueError(
                f"layers {layers} must give each of the {pp} stages at least one of the {self.model.num_layers} layers"
            )
        if layers is None:
            return None
        stage_s = [self._cell(k, c, "total_s", n) for k, c, n in zip(pools, cells, layers, strict=True)]
        hops = self._hop_table(layout, pools, tps)
        sends = sum(hops[s, s + 1] + hops[s + 1, s] for s in range(pp - 1))
        if self._blocking(layout):  # each F and B waits on its send (step.pp_blocking_s), no latency after it
            stage_s = [t + 2 * float(hops.max()) for t in stage_s]
            sends = 0.0
        dp = max(self._cell(k, c, "dp_comm_s", n) for k, c, n in zip(pools, cells, layers, strict=True))
        opt = max(self._cell(k, c, "optimizer_s", n) for k, c, n in zip(pools, cells, layers, strict=True))
        screen = sum(stage_s) + (m - 1) * max(stage_s) + sends + dp + opt
        return Split(
            layout=layout, pools=pools, cells=cells, layers=layers, hop_table_s=hops, screen_step_s=screen,
            dp_comm_s=dp, optimizer_s=opt,
        )  # fmt: skip

    def _blocking(self, layout: Layout) -> bool:
        """The layout's pipeline sends block compute (``FrameworkProfile.blocking_p2p_schedules``)."""
        return layout.pp > 1 and layout.schedule in self.cal.framework.blocking_p2p_schedules

    def _cell(self, pool: int, cell: tuple[int, int], name: str, layers: int) -> float:
        return float(getattr(self.grids[pool], name)[cell[0], cell[1], layers])

    def _hop_table(self, layout: Layout, pools: tuple[int, ...], tps: tuple[int, ...]) -> np.ndarray:
        """pp x pp send times: inside a pool the pool's own hop table (``step.pp_hop_table_s``) at the stages'
        local indices; between pools a send of one micro-batch's activations split over the smaller tp, on the
        shared level (``comm.p2p_s``)."""
        pp = len(pools)
        local = [sum(1 for q in pools[:s] if q == pools[s]) for s in range(pp)]
        tables = {k: self._pool_hops(k, t, layout) for k, t in zip(pools, tps, strict=True)}
        eff = self.cal.framework.collective_efficiency_frac
        tokens = layout.micro_batch_size * self.workload.seq_len
        cross = {
            tp: float(p2p_s(self.bridge, tokens * self.model.hidden_size * ACT_BYTES / tp, 1, eff))
            for tp in set(tps)
        }
        out = np.zeros((pp, pp))
        for i, j in itertools.permutations(range(pp), 2):
            same = pools[i] == pools[j]
            out[i, j] = tables[pools[i]][local[i], local[j]] if same else cross[min(tps[i], tps[j])]
        return out

    def _pool_hops(self, pool: int, tp: int, layout: Layout) -> np.ndarray:
        key = (pool, tp, layout.dp, layout.pp, layout.micro_batch_size)
        if key not in self._hops:
            plan = self._plan(self._key(tp, layout))
            self._hops[key] = step.pp_hop_table_s(self._ctx[pool], step.plan_columns(plan, self.workload))
        return self._hops[key]

    def estimate(self, split: Split) -> MixedEstimate:
        """Simulate ``split`` with its schedule: its ``PlanCosts`` through ``estimate.mixed.pipeline_estimate``."""
        layout, pp = split.layout, split.layout.pp
        m = self.workload.global_batch_size // (layout.dp * layout.micro_batch_size)
        f, i, w = (
            self._per_stage(split, "forward_s"),
            self._per_stage(split, "backward_input_s"),
            self._per_stage(split, "backward_weight_s"),
        )
        blocking, hop = self._blocking(layout), float(split.hop_table_s.max()) if pp > 1 else 0.0
        if blocking:  # as the analytic backend: every F and I waits on one (the slowest) hop
            f, i = f + hop, i + hop
        stages = StageCosts(
            forward_s=tuple(f.tolist()),
            backward_s=tuple((i + w).tolist()),
            backward_input_s=tuple(i.tolist()),
            backward_weight_s=tuple(w.tolist()),
            p2p_s=0.0 if blocking else hop,
            p2p_rank_s=tuple(map(tuple, split.hop_table_s)) if pp > 1 and not blocking else None,
            activation_bytes=tuple(self._per_stage(split, "stored_bytes").tolist()),
            released_at_input_grad_frac=self._released_frac(layout),
        )
        share = {k: self._per_stage(split, "share_s", k) for k in COMM_KINDS}
        if blocking:
            share["pp"] = share["pp"] + 2 * hop
        fw = self.cal.framework
        costs = PlanCosts(
            schedule=build_schedule(layout.schedule, pp=pp, num_microbatches=m, vpp=1),
            stages=stages,
            rank_compute_s=self._per_stage(split, "share_s", "compute"),
            rank_comm_s=share,
            rank_hidden_s={k: self._per_stage(split, "share_s", f"hidden_{k}") for k in COMM_KINDS},
            dp_comm_s=split.dp_comm_s,
            optimizer_s=split.optimizer_s,
            rank_memory={
                k: self._per_stage(split, "static_bytes", k) for k in self.grids[split.pools[0]].static_bytes
            },
            overhead_bytes=fw.context_bytes,
            fragmentation_frac=fw.fragmentation_frac,
            tiled=bool(tiles((layout.schedule,), post_validation=fw.optimizer_post_validation)[0]),
        )
        cross = [
            split.hop_table_s[s, s + 1] for s in range(layout.pp - 1) if split.pools[s] != split.pools[s + 1]
        ]
        return pipeline_estimate(
            self.model, self.mixed, self.workload, _plan(layout, split.layers), costs,
            stages=self._stage_frame(split, (f, i + w)), cross_pool_s=float(sum(cross)),
        )  # fmt: skip

    def _per_stage(self, split: Split, name: str, part: str | None = None) -> np.ndarray:
        """``PoolGrid`` field ``name`` (its ``part`` for a dict field) of every stage of ``split``, shape (pp,)."""
        out = []
        for k, (pos, idx), n in zip(split.pools, split.cells, split.layers, strict=True):
            table = getattr(self.grids[k], name)
            out.append(float((table if part is None else table[part])[pos, idx, n]))
        return np.asarray(out)

    def _released_frac(self, layout: Layout) -> float:
        """Share of a stage's activations freed when its I ends (one figure for the simulator: the smallest of
        the pools', ``step.activation_sizes``)."""
        fracs = []
        for k, tp in zip(layout.order, layout.tps, strict=True):
            cols = step.plan_columns(self._plan(self._key(tp, layout)), self.workload)
            fracs.append(float(step.activation_sizes(self._ctx[k], cols).freed_at_input_grad_frac))
        return min(fracs)

    def _stage_frame(self, split: Split, times: tuple[np.ndarray, np.ndarray]) -> pl.DataFrame:
        """The ``STAGE_COLUMNS`` but memory_bytes (the assembly's): which pool runs which layers, F and B."""
        num = len(split.layers)
        first = np.concatenate([[0], np.cumsum(split.layers)[:-1]])
        tps = [t for t, n in zip(split.layout.tps, split.layout.stages, strict=True) for _ in range(n)]
        rows = {
            "stage": list(range(num)),
            "pool": [self.mixed.labels[k] for k in split.pools],
            "device": [self.mixed.pools[k].device.id for k in split.pools],
            "tp": tps,
            "first_layer": [int(v) for v in first],
            "layers": list(split.layers),
            "embedding": [s == 0 for s in range(num)],
            "head": [s == num - 1 for s in range(num)],
            "forward_s": times[0].tolist(),
            "backward_s": times[1].tolist(),
            "memory_bytes": [0.0] * num,
            "usable_bytes": [self.grids[k].usable_bytes for k in split.pools],
        }
        return pl.DataFrame(rows)


def _plan(layout: Layout, layers: tuple[int, ...]) -> PipelinePlan:
    segments, start = [], 0
    for k, tp, n in zip(layout.order, layout.tps, layout.stages, strict=True):
        segments.append(PoolStages(pool=k, tp=tp, layers=layers[start : start + n]))
        start += n
    return PipelinePlan(
        segments=tuple(segments),
        dp=layout.dp,
        micro_batch_size=layout.micro_batch_size,
        zero_stage=layout.zero_stage,
        recompute=layout.recompute,
        schedule=layout.schedule,
    )
