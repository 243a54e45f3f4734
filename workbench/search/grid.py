"""The plan grid in chunks: plan columns for a range of flat indices, and the first rule each plan breaks.

A chunk is a dict of equal-length numpy arrays (one entry per plan): tp, cp, pp, dp, ep, vpp,
micro_batch_size, zero_stage, recompute_code, sequence_parallel, schedule_code and num_microbatches
(0 where dp * micro_batch_size does not divide the global batch). ``rule_reasons`` mirrors ``workbench.specs.rules.plan_violations`` and
``workbench.pipeline.schedules.schedule_rule_violations`` elementwise (a test checks the two agree).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from workbench.specs.model import AttentionKind

if TYPE_CHECKING:
    from workbench.search.space import PlanSpace
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload

REASONS: tuple[tuple[str, str], ...] = (
    ("heads", "tp does not split the attention and key/value heads"),
    ("layers", "pp*vpp does not divide the layers"),
    ("batch", "dp*micro_batch_size does not divide the global batch"),
    ("sequence", "cp does not divide the sequence length"),
    ("experts", "ep does not divide dp*cp*tp"),
    ("schedule", "breaks the schedule's micro-batch rules"),
    ("memory", "exceeds the device memory"),
)
"""Rejection reasons in the order they are checked: a plan is counted under the first one it breaks."""

REASON_INDEX = {key: i for i, (key, _) in enumerate(REASONS)}
MEMORY_REASON = REASON_INDEX["memory"]

DEFAULT_CHUNK = 1 << 19


def chunk_bounds(space: PlanSpace, chunk_plans: int = DEFAULT_CHUNK) -> Iterator[tuple[int, int]]:
    """(start, stop) ranges of layout rows, each holding at most ``chunk_plans`` plans (at least one row)."""
    rows = len(space.layout["tp"])
    step = max(1, chunk_plans // max(space.inner_size, 1))
    for start in range(0, rows, step):
        yield start, min(start + step, rows)


def rule_columns(space: PlanSpace, start: int, stop: int, global_batch_size: int) -> dict[str, np.ndarray]:
    """Columns of layout rows ``start..stop`` times every ep and micro_batch_size: everything the rules read.
    Each such row stands for ``len(zero_stage) * len(recompute_code)`` plans (no rule reads those two)."""
    inner = len(space.ep) * len(space.micro_batch_size)
    cols = {k: np.repeat(v[start:stop], inner) for k, v in space.layout.items()}
    cols["layout_index"] = np.repeat(np.arange(start, stop), inner)
    ep, mbs = np.meshgrid(space.ep, space.micro_batch_size, indexing="ij")
    cols["ep"] = np.tile(ep.ravel(), stop - start)
    cols["micro_batch_size"] = np.tile(mbs.ravel(), stop - start)
    per_step = cols["dp"] * cols["micro_batch_size"]
    cols["num_microbatches"] = np.where(global_batch_size % per_step == 0, global_batch_size // per_step, 0)
    return cols


def expand(space: PlanSpace, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every plan of the rule rows ``cols``: each row times every zero_stage and recompute_code."""
    inner = len(space.zero_stage) * len(space.recompute_code)
    out = {k: np.repeat(v, inner) for k, v in cols.items()}
    zero, rc = np.meshgrid(space.zero_stage, space.recompute_code, indexing="ij")
    n = len(next(iter(cols.values()))) if cols else 0
    out["zero_stage"] = np.tile(zero.ravel(), n)
    out["recompute_code"] = np.tile(rc.ravel(), n)
    return out


def plan_columns(space: PlanSpace, start: int, stop: int, global_batch_size: int) -> dict[str, np.ndarray]:
    """Columns of every plan built on layout rows ``start..stop`` (each row times all inner values, in the
    order ep, micro_batch_size, zero_stage, recompute_code)."""
    return expand(space, rule_columns(space, start, stop, global_batch_size))


def schedule_rule_mask(
    names: tuple[str, ...], code: np.ndarray, pp: np.ndarray, vpp: np.ndarray, m: np.ndarray
) -> np.ndarray:
    """True where (schedule, pp, vpp, m) breaks a rule of ``schedule_rule_violations`` (pp > 1 only).

    Same rules, elementwise: gpipe/1f1b/zb-h2 need vpp = 1 and V schedules vpp = 2; 1f1b needs m >= pp;
    interleaved-1f1b needs vpp >= 2; interleaved-1f1b and zb-h1 with vpp >= 2 need m divisible by
    max(1, m // pp); dualpipev needs m >= 2 pp.
    """
    from workbench.pipeline.schedules import required_vpp

    need = np.array([required_vpp(n) or 0 for n in names])[code]
    is_name = {
        n: (code == names.index(n)) if n in names else np.zeros(len(code), dtype=bool)
        for n in ("1f1b", "interleaved-1f1b", "zb-h1", "dualpipev")
    }
    rounds = np.maximum(1, m // np.maximum(pp, 1))
    bad = (need > 0) & (vpp != need)
    bad |= is_name["1f1b"] & (m < pp)
    bad |= is_name["interleaved-1f1b"] & (vpp < 2)
    bad |= (is_name["interleaved-1f1b"] | is_name["zb-h1"]) & (vpp >= 2) & (m % rounds != 0)
    bad |= is_name["dualpipev"] & (m < 2 * pp)
    return bad & (pp > 1)


def rule_reasons(
    cols: dict[str, np.ndarray], model: ModelSpec, workload: Workload, schedule_names: tuple[str, ...]
) -> np.ndarray:
    """Index into ``REASONS`` of the first rule each plan breaks, -1 if none (memory is not checked here)."""
    tp, cp, pp, dp, ep = cols["tp"], cols["cp"], cols["pp"], cols["dp"], cols["ep"]
    kv = model.num_key_value_heads
    kv_ok = (kv % tp == 0) | (tp % kv == 0) | (model.attention is AttentionKind.MLA)
    m = cols["num_microbatches"]
    masks = [
        (model.num_attention_heads % tp != 0) | ~kv_ok,
        model.num_layers % (pp * cols["vpp"]) != 0,
        m == 0,
        workload.seq_len % cp != 0,
        (ep > 1) & ((dp * cp * tp) % ep != 0),
        schedule_rule_mask(schedule_names, cols["schedule_code"], pp, cols["vpp"], np.maximum(m, 1)),
    ]
    reason = np.full(len(tp), -1, dtype=np.int8)
    for i in range(len(masks) - 1, -1, -1):
        reason[masks[i]] = i
    return reason
