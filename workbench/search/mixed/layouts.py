"""Pipeline layouts over pools and the layer split: what ``workbench.search.mixed.pipeline`` prices.

A layout fixes the pools' order along the pipeline, dp, each pool's tp (and so its stage count: the pool's
devices over dp x tp), micro-batch, ZeRO stage, recompute and schedule; ``split_layers`` then gives each stage its
layers by speed under memory caps (see :mod:`workbench.search.mixed.pipeline`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from workbench.pipeline.schedules import build_schedule, schedule_rule_violations
from workbench.pipeline.simulate import StageCosts, simulate
from workbench.specs.degrees import divisors as _divisors

if TYPE_CHECKING:
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload
    from workbench.specs.pools import MixedCluster

MAX_ORDERED_POOLS = 4
"""Up to this many pools every order of the pools along the pipeline is tried (4! = 24); beyond, only the
fastest-first and slowest-first orders (by dense peak)."""


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A pipeline layout before its layers are split: pools in pipeline order with their tp and stage counts."""

    order: tuple[int, ...]
    tps: tuple[int, ...]
    """tp of each pool, in ``order``."""
    stages: tuple[int, ...]
    """Stages of each pool, in ``order``: devices / (dp x tp)."""
    dp: int
    micro_batch_size: int
    zero_stage: int
    recompute: str
    schedule: str

    @property
    def pp(self) -> int:
        return sum(self.stages)


def tp_choices(model: ModelSpec, pool: ClusterSpec, wanted: tuple[int, ...]) -> list[int]:
    """The ``wanted`` tp degrees that fit inside one node of ``pool`` and split the heads (the rule table's
    heads rule: tp divides the attention heads; tp and the key/value heads divide one another)."""
    kv = model.num_key_value_heads
    return [
        t
        for t in wanted
        if pool.devices_per_node % t == 0
        and model.num_attention_heads % t == 0
        and (kv % t == 0 or t % kv == 0)
    ]


def identical_groups(pools: tuple[ClusterSpec, ...]) -> list[list[int]]:
    """Indices of the pools grouped by equality (same device, nodes and levels: interchangeable in a layout),
    in order of first appearance."""
    groups: list[list[int]] = []
    for k, p in enumerate(pools):
        group = next((g for g in groups if pools[g[0]] == p), None)
        if group is None:
            groups.append([k])
        else:
            group.append(k)
    return groups


def tp_assignments(groups: list[list[int]], tps: list[list[int]]) -> Iterator[tuple[int, ...]]:
    """Each pool's tp, up to the symmetry between identical pools: within a group the tps are non-decreasing
    in pool order (a multiset per group), since swapping the tps of two identical pools gives the same layouts
    once the pools are ordered along the pipeline. ``tps[k]``: pool k's choices."""
    num_pools = sum(len(g) for g in groups)
    per_group = [itertools.combinations_with_replacement(tps[g[0]], len(g)) for g in groups]
    for combo in itertools.product(*per_group):
        out = [0] * num_pools
        for g, values in zip(groups, combo, strict=True):
            for k, t in zip(g, values, strict=True):
                out[k] = t
        yield tuple(out)


def num_tp_assignments(groups: list[list[int]], tps: list[list[int]]) -> int:
    """How many ``tp_assignments`` there are: the product over groups of C(choices + size - 1, size)."""
    return math.prod(math.comb(len(tps[g[0]]) + len(g) - 1, len(g)) for g in groups)


def layout_work(mixed: MixedCluster, model: ModelSpec, workload: Workload, opts: Any) -> int:
    """An upper bound on the layouts ``layouts`` yields (dp divisors x tp assignments x orders x micro-batch,
    ZeRO, recompute and schedule variants), counted without enumerating them."""
    pools = mixed.pools
    groups = identical_groups(pools)
    tps = [tp_choices(model, p, opts.tp) for p in pools]
    num_orders = math.factorial(len(pools)) if len(pools) <= MAX_ORDERED_POOLS else 2
    variants = len(opts.micro_batch_sizes) * len(opts.zero_stages) * len(opts.recompute) * len(opts.schedules)
    num_dp = len(_divisors(math.gcd(*(p.num_devices for p in pools))))
    return num_dp * num_tp_assignments(groups, tps) * num_orders * variants


def layouts(mixed: MixedCluster, model: ModelSpec, workload: Workload, opts: Any) -> Iterator[Layout]:
    """Every layout of ``opts`` (a ``MixedOptions``) on ``mixed`` that uses all devices of every pool and keeps
    at least one layer per stage, up to the symmetry between identical pools (``tp_assignments``; orders that
    only swap identical pools of the same tp are yielded once); schedules that break their micro-batch rules
    are skipped. ``layout_work`` bounds the count (``workbench.specs.limits.MAX_MIXED_LAYOUTS``)."""
    pools = mixed.pools
    groups = identical_groups(pools)
    kind = {k: i for i, g in enumerate(groups) for k in g}
    if len(pools) <= MAX_ORDERED_POOLS:
        orders = list(itertools.permutations(range(len(pools))))
    else:
        fast = sorted(range(len(pools)), key=lambda k: pools[k].device.peak(workload.dtype))
        orders = [tuple(fast), tuple(reversed(fast))]
    tps = [tp_choices(model, p, opts.tp) for p in pools]
    for dp in _divisors(math.gcd(*(p.num_devices for p in pools))):
        for tp_set in tp_assignments(groups, tps):
            stages = [p.num_devices // (dp * t) for p, t in zip(pools, tp_set, strict=True)]
            if any(p.num_devices % (dp * t) for p, t in zip(pools, tp_set, strict=True)):
                continue
            pp = sum(stages)
            if pp > min(model.num_layers, opts.max_pp):
                continue
            seen: set[tuple[tuple[int, int], ...]] = set()
            distinct = []
            for order in orders:  # two orders that only swap identical pools of equal tp are one layout
                key = tuple((kind[k], tp_set[k]) for k in order)
                if key not in seen:
                    seen.add(key)
                    distinct.append(order)
            yield from _variants(distinct, tp_set, stages, dp, pp, workload, opts)


def _variants(
    orders: list[tuple[int, ...]],
    tp_set: tuple[int, ...],
    stages: list[int],
    dp: int,
    pp: int,
    workload: Workload,
    opts: Any,
) -> Iterator[Layout]:
    for mbs, zero, rc, sched in itertools.product(
        opts.micro_batch_sizes, opts.zero_stages, opts.recompute, opts.schedules
    ):
        if workload.global_batch_size % (dp * mbs) or (zero > 0 and dp == 1):
            continue
        m = workload.global_batch_size // (dp * mbs)
        if schedule_rule_violations(sched, pp=pp, vpp=1, num_microbatches=m):
            continue
        for order in orders:
            yield Layout(
                order=order,
                tps=tuple(tp_set[k] for k in order),
                stages=tuple(stages[k] for k in order),
                dp=dp,
                micro_batch_size=mbs,
                zero_stage=zero,
                recompute=rc,
                schedule=sched,
            )


@lru_cache(maxsize=256)
def inflight_per_rank(schedule: str, pp: int, num_microbatches: int) -> tuple[float, ...]:
    """Peak stage activations each rank holds, in micro-batches: the simulator's peak with one byte per stage
    and nothing freed before W (an upper bound for split-backward schedules)."""
    sched = build_schedule(schedule, pp=pp, num_microbatches=num_microbatches, vpp=1)
    unit = StageCosts.uniform(num_stages=pp, forward_s=1.0, backward_s=2.0, activation_bytes=1.0)
    return tuple(float(v) for v in simulate(sched, unit).peak_activation_bytes_per_rank)


def split_layers(
    num_layers: int, per_layer_s: list[float], edge_s: list[float], max_layers: list[int]
) -> tuple[int, ...] | None:
    """Layers per stage minimising the slowest stage, ``edge_s[s] + n_s x per_layer_s[s]``, with
    1 <= n_s <= max_layers[s] and sum n_s = num_layers; None when the caps cannot hold the layers.

    Greedy on a heap: every stage starts with one layer, each further layer goes to the stage whose time with it
    would be the smallest (ties: the earlier stage). For increasing separable costs this is optimal."""
    num = len(per_layer_s)
    if num > num_layers or min(max_layers) < 1 or sum(min(c, num_layers) for c in max_layers) < num_layers:
        return None
    n = [1] * num
    heap = [(edge_s[s] + 2 * per_layer_s[s], s) for s in range(num) if max_layers[s] > 1]
    heapq.heapify(heap)
    for _ in range(num_layers - num):
        _, s = heapq.heappop(heap)
        n[s] += 1
        if n[s] < max_layers[s]:
            heapq.heappush(heap, (edge_s[s] + (n[s] + 1) * per_layer_s[s], s))
    return tuple(n)
