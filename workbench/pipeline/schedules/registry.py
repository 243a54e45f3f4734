"""The schedule registry: one ``ScheduleSpec`` record per built-in schedule, and what derives from them.

Adding a schedule means adding its traits (placement, vpp and micro-batch rules) to
``workbench.specs.schedule_traits.SCHEDULE_TRAITS``, its generator (in ``classic``, ``vshape``, ``greedy`` or
``bidirectional``) and one record to ``SCHEDULES``; the names, vpp defaults, the rules
(``workbench.specs.schedule_traits.SCHEDULE_RULES``), the closed-form families of ``workbench.pipeline.bubble``
and ``workbench.pipeline.peak`` and the torch class of the real-run backend all read the record.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from workbench.pipeline.schedules import arrays, bidirectional, classic, greedy, vshape
from workbench.pipeline.schedules.actions import Action, ActionRows, Schedule, flatten_cells
from workbench.pipeline.schedules.spec import ScheduleSpec, index_schedules
from workbench.specs.limits import shown, simulated_size_problem
from workbench.specs.rules import RuleContext
from workbench.specs.schedule_traits import TRAITS, Placement, schedule_rules

Rows = list[list[Action]]

MEGATRON = "Megatron-LM"
TORCH = "torch.distributed.pipelining"
ZERO_BUBBLE = "sail-sg/zero-bubble-pipeline-parallelism"
DUALPIPE = "deepseek-ai/DualPipe"
ZB_PAPER = "Qi et al., Zero Bubble Pipeline Parallelism, arXiv:2401.10241"
CM_PAPER = "Qi et al., Pipeline Parallelism with Controllable Memory, arXiv:2405.15362 (NeurIPS 2024)"
DSV3_PAPER = "DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437"


def _gpipe(p: int, v: int, m: int) -> Rows:
    return classic.gpipe(p, m)


def _one_f_one_b(p: int, v: int, m: int) -> Rows:
    return classic.one_f_one_b(p, m)


def _zb_h2(p: int, v: int, m: int) -> Rows:
    """ZB-H2: greedy zero-bubble order with a cap of 2p-1 micro-batches per rank."""
    return greedy.greedy_zero_bubble(
        stage_to_rank=classic.looping_placement(p, 1), num_microbatches=m, cap_chunks=[2 * p - 1] * p
    )


def _zb_h2_arrays(p: int, v: int, m: int) -> arrays.PackedRows:
    """``_zb_h2`` as packed arrays."""
    return greedy.greedy_zero_bubble_arrays(
        stage_to_rank=classic.looping_placement(p, 1), num_microbatches=m, cap_chunks=[2 * p - 1] * p
    )


def _zbv(p: int, v: int, m: int) -> Rows:
    return vshape.zbv(p, m)


def _v_capped(full_stage_units: int, p: int, m: int) -> Rows:
    return greedy.greedy_zero_bubble(
        stage_to_rank=vshape.v_placement(p), num_microbatches=m, cap_chunks=[2 * full_stage_units] * p
    )


def _v_capped_arrays(full_stage_units: int, p: int, m: int) -> arrays.PackedRows:
    return greedy.greedy_zero_bubble_arrays(
        stage_to_rank=vshape.v_placement(p), num_microbatches=m, cap_chunks=[2 * full_stage_units] * p
    )


def _v_half(p: int, v: int, m: int) -> Rows:
    """V-Half: V placement capped at (p+2)//2 micro-batches' activations per rank."""
    return _v_capped((p + 2) // 2, p, m)


def _v_half_arrays(p: int, v: int, m: int) -> arrays.PackedRows:
    """``_v_half`` as packed arrays."""
    return _v_capped_arrays((p + 2) // 2, p, m)


def _v_min(p: int, v: int, m: int) -> Rows:
    """V-Min: V placement capped at (p+4)//3 micro-batches' activations per rank."""
    return _v_capped((p + 4) // 3, p, m)


def _v_min_arrays(p: int, v: int, m: int) -> arrays.PackedRows:
    """``_v_min`` as packed arrays."""
    return _v_capped_arrays((p + 4) // 3, p, m)


def _dualpipev(p: int, v: int, m: int) -> Rows:
    return vshape.dualpipev(p, m)


def _dualpipe(p: int, v: int, m: int) -> bidirectional.Cells:
    return bidirectional.dualpipe(p, m)


SCHEDULES: tuple[ScheduleSpec, ...] = (
    ScheduleSpec(
        traits=TRAITS["gpipe"],
        generator=_gpipe,
        split_backward=False,
        bubble_family="1f1b",
        peak_family="gpipe",
        source="Huang et al., GPipe, arXiv:1811.06965",
        torch_class="ScheduleGPipe",
        frameworks=(TORCH,),
        array_generator=arrays.gpipe,
    ),
    ScheduleSpec(
        traits=TRAITS["1f1b"],
        generator=_one_f_one_b,
        split_backward=False,
        bubble_family="1f1b",
        peak_family="1f1b",
        source="Narayanan et al., PipeDream-2BW, arXiv:2006.09503; Megatron-LM SC21, arXiv:2104.04473 Sec. 2.2.1",
        torch_class="Schedule1F1B",
        frameworks=(MEGATRON, TORCH),
        array_generator=arrays.one_f_one_b,
    ),
    ScheduleSpec(
        traits=TRAITS["interleaved-1f1b"],
        generator=classic.interleaved_1f1b,
        split_backward=False,
        bubble_family="interleaved",
        peak_family="interleaved-1f1b",
        source="Narayanan et al., Megatron-LM SC21, arXiv:2104.04473 Sec. 2.2",
        torch_class="ScheduleInterleaved1F1B",
        frameworks=(MEGATRON, TORCH),
        array_generator=arrays.interleaved_1f1b,
    ),
    ScheduleSpec(
        traits=TRAITS["looped-bfs"],
        generator=classic.looped_bfs,
        split_backward=False,
        bubble_family="interleaved",
        peak_family="looped-bfs",
        source="Lamy-Poirier, Breadth-First Pipeline Parallelism, arXiv:2211.05953",
        torch_class="ScheduleLoopedBFS",
        frameworks=(TORCH,),
        array_generator=arrays.looped_bfs,
    ),
    ScheduleSpec(
        traits=TRAITS["zb-h1"],
        generator=classic.zb_h1,
        split_backward=True,
        bubble_family="zb-h1",
        tiles_across_steps=True,
        peak_family="zb-h1",
        source=f"{ZB_PAPER}, handcrafted ZB-H1 (Sec. 3.1, Fig. 3)",
        torch_class="ScheduleInterleavedZeroBubble",
        frameworks=(ZERO_BUBBLE, TORCH),
        array_generator=arrays.zb_h1,
    ),
    ScheduleSpec(
        traits=TRAITS["zb-h2"],
        generator=_zb_h2,
        split_backward=True,
        bubble_family="zb-h2",
        tiles_across_steps=True,
        peak_family="zb-h2",
        source=f"{ZB_PAPER}, handcrafted ZB-H2 (up to 2p-1 micro-batches in flight)",
        frameworks=(ZERO_BUBBLE,),
        array_generator=_zb_h2_arrays,
    ),
    ScheduleSpec(
        traits=TRAITS["zbv"],
        generator=_zbv,
        split_backward=True,
        bubble_family="v",
        tiles_across_steps=True,
        peak_family="zbv",
        source=f"{ZB_PAPER}, ZB-V (Sec. 6, Fig. 8)",
        torch_class="ScheduleZBVZeroBubble",
        frameworks=(ZERO_BUBBLE, TORCH),
        array_generator=vshape.zbv_arrays,
    ),
    ScheduleSpec(
        traits=TRAITS["v-half"],
        generator=_v_half,
        split_backward=True,
        bubble_family="capped",
        peak_family="v-half",
        source=CM_PAPER,
        frameworks=(ZERO_BUBBLE,),
        array_generator=_v_half_arrays,
    ),
    ScheduleSpec(
        traits=TRAITS["v-min"],
        generator=_v_min,
        split_backward=True,
        bubble_family="capped",
        peak_family="v-min",
        source=CM_PAPER,
        frameworks=(ZERO_BUBBLE,),
        array_generator=_v_min_arrays,
    ),
    ScheduleSpec(
        traits=TRAITS["dualpipev"],
        generator=_dualpipev,
        split_backward=True,
        bubble_family="v",
        peak_family="dualpipev",
        source=f"{DSV3_PAPER} Sec. 3.2.1",
        torch_class="ScheduleDualPipeV",
        frameworks=(DUALPIPE, TORCH),
        array_generator=vshape.dualpipev_arrays,
    ),
    ScheduleSpec(
        traits=TRAITS["dualpipe"],
        generator=_dualpipe,
        split_backward=True,
        bubble_family="dualpipe",
        peak_family="dualpipe",
        source=f"{DSV3_PAPER} Sec. 3.2.1, Fig. 5 and Table 2 (bidirectional, two copies of the weights)",
        torch_class=None,  # torch 2.13 ships ScheduleDualPipeV only; its stages form one chain, not two
        frameworks=(DUALPIPE,),
        array_generator=bidirectional.dualpipe_arrays,
    ),
)
"""Every built-in schedule, in the order of the literature."""

REGISTRY: Mapping[str, ScheduleSpec] = index_schedules(SCHEDULES)
"""Name -> record (read-only; built once, refusing duplicate names)."""
if list(REGISTRY) != list(TRAITS):  # every schedule the rules know has a generator, in the same order
    raise ValueError(
        f"schedule records {list(REGISTRY)} and traits {list(TRAITS)} (workbench.specs.schedule_traits) differ"
    )

SCHEDULE_NAMES: tuple[str, ...] = tuple(REGISTRY)

_ANY_PP_RULES = schedule_rules(TRAITS, plans_only=False)
"""The schedule rules for any pp (building a schedule on its own); a plan's are ``SCHEDULE_RULES``."""


def get_schedule(name: str) -> ScheduleSpec:
    """The record of schedule ``name``. Raises ValueError listing the valid names."""
    if name not in REGISTRY:
        raise ValueError(f"unknown schedule {name!r}; valid names: {', '.join(SCHEDULE_NAMES)}")
    return REGISTRY[name]


def required_vpp(name: str) -> int | None:
    """Stages per rank the schedule needs exactly (1 or 2), or None if it takes any allowed value."""
    return get_schedule(name).traits.required_vpp


def default_vpp(name: str) -> int:
    """Stages per rank to use when the caller gives none: 2 for V schedules and interleaved-1f1b, else 1."""
    return get_schedule(name).traits.default_vpp


def uses_split_backward(name: str) -> bool:
    """True if the schedule splits backward into I (inputs) and W (weights) passes."""
    return get_schedule(name).split_backward


def uses_v_placement(name: str) -> bool:
    """True if rank r holds stages r and 2p-1-r (V shape) instead of r, r+p, ... (looping)."""
    return get_schedule(name).traits.placement is Placement.V


def num_directions(name: str) -> int:
    """Copies of the model the pipeline holds, one per direction it is fed from: 2 for DualPipe (every rank
    holds two copies' stages: 2x parameters, DeepSeek-V3 Table 2), else 1."""
    return get_schedule(name).traits.num_directions


def schedule_rule_violations(name: str, *, pp: int, vpp: int, num_microbatches: int) -> list[str]:
    """Sentences naming every rule of schedule ``name`` that (pp, vpp, num_microbatches) breaks; [] if fine.

    The rules are ``workbench.specs.schedule_traits.schedule_rules``, read off the record's traits: its required
    or minimum vpp and its micro-batch rules (m >= k * pp; m divisible by max(1, m // pp) rounds with vpp >= 2; m divisible by the number of
    directions). An unknown name is a violation,
    and so is a schedule too large to build and simulate (``workbench.specs.limits.simulated_size_problem``),
    which is checked first so that nothing of its size is ever allocated.
    """
    out = []
    for field, value in (("pp", pp), ("vpp", vpp), ("num_microbatches", num_microbatches)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            out.append(f"{field} must be an integer >= 1, got {shown(value)}.")
    if out:
        return out
    too_large = simulated_size_problem(pp=pp, vpp=vpp, num_microbatches=num_microbatches)
    if too_large:
        return [f"{too_large}."]
    row = {"pp": pp, "vpp": vpp, "schedule_code": 0, "num_microbatches": num_microbatches}
    cols = {k: np.array([v]) for k, v in row.items()}
    ctx = RuleContext(schedule_names=(name,))
    return [r.sentence(row, ctx) for r in _ANY_PP_RULES if r.violated(cols, ctx)[0]]


def build_schedule(name: str, *, pp: int, num_microbatches: int, vpp: int | None = None) -> Schedule:
    """Build the named schedule for ``pp`` ranks, ``num_microbatches`` micro-batches and ``vpp``
    stages per rank (None: the record's ``default_vpp``).

    Raises ValueError listing the valid names for an unknown name, or the broken rules
    (``schedule_rule_violations``). Each record's ``source`` and generator docstring cite its paper.
    """
    spec = get_schedule(name)
    vpp = spec.traits.default_vpp if vpp is None else vpp
    _refuse_broken_rules(name, pp, vpp, num_microbatches)
    with _gc_paused():  # 10^5-10^6 new tuples: the collector's passes over them would be wasted work
        return _built(spec, name, pp, vpp, num_microbatches)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (the schedule's tuples hold no cycles; the collector would walk the
    growing heap again and again while they are made: 25% of a build here, more in a big process)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _built(
    spec: Any, name: str, pp: int, vpp: int, num_microbatches: int, *, from_rows: bool = False
) -> Schedule:
    if spec.array_generator is not None and not from_rows:
        packed, offsets, overlap = spec.array_generator(pp, vpp, num_microbatches)
        actions: Any = ActionRows(packed, offsets)
        pairs: Sequence[tuple[int, ...]] = overlap
    else:
        rows, pairs = flatten_cells(spec.generator(pp, vpp, num_microbatches))
        actions = tuple(tuple(row) for row in rows)
    return Schedule(
        name=name,
        pp=pp,
        vpp=vpp,
        num_microbatches=num_microbatches,
        num_stages=pp * vpp,
        stage_to_rank=spec.stage_to_rank(pp, vpp),
        actions=actions,
        num_directions=spec.traits.num_directions,
        overlap_pairs=tuple(pairs) if any(pairs) else (),
    )


def reference_schedule(name: str, *, pp: int, num_microbatches: int, vpp: int) -> Schedule:
    """The schedule as the record's readable ``generator`` makes it, one ``Action`` at a time: the reference
    ``build_schedule``'s array build must equal action for action (tests/test_schedule_arrays.py). Same errors."""
    spec = get_schedule(name)
    _refuse_broken_rules(name, pp, vpp, num_microbatches)
    with _gc_paused():
        return _built(spec, name, pp, vpp, num_microbatches, from_rows=True)


def _refuse_broken_rules(name: str, pp: int, vpp: int, num_microbatches: int) -> None:
    problems = schedule_rule_violations(name, pp=pp, vpp=vpp, num_microbatches=num_microbatches)
    if problems:
        raise ValueError(
            f"schedule {name!r} with pp={pp}, vpp={vpp}, m={num_microbatches}: " + " ".join(problems)
        )
