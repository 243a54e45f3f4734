"""Schedules by name: the rules each one puts on (pp, vpp, micro-batches) and ``build_schedule``."""

from __future__ import annotations

from collections.abc import Callable

from workbench.pipeline.schedules import classic, greedy, vshape
from workbench.pipeline.schedules.actions import Action, Schedule

SCHEDULE_NAMES: tuple[str, ...] = (
    "gpipe",
    "1f1b",
    "interleaved-1f1b",
    "looped-bfs",
    "zb-h1",
    "zb-h2",
    "zbv",
    "v-half",
    "v-min",
    "dualpipev",
)
"""Every built-in schedule, in the order of the literature."""

_V_NAMES = frozenset({"zbv", "v-half", "v-min", "dualpipev"})
_SPLIT_NAMES = frozenset({"zb-h1", "zb-h2", "zbv", "v-half", "v-min", "dualpipev"})


def _check_name(name: str) -> None:
    if name not in SCHEDULE_NAMES:
        raise ValueError(f"unknown schedule {name!r}; valid names: {', '.join(SCHEDULE_NAMES)}")


def required_vpp(name: str) -> int | None:
    """Stages per rank the schedule needs exactly (1 or 2), or None if it takes any allowed value."""
    _check_name(name)
    if name in _V_NAMES:
        return 2
    if name in ("gpipe", "1f1b", "zb-h2"):
        return 1
    return None


def default_vpp(name: str) -> int:
    """Stages per rank to use when the caller gives none: 2 for V schedules and interleaved-1f1b, else 1."""
    fixed = required_vpp(name)
    if fixed is not None:
        return fixed
    return 2 if name == "interleaved-1f1b" else 1


def uses_split_backward(name: str) -> bool:
    """True if the schedule splits backward into I (inputs) and W (weights) passes (DualPipeV mixes
    full B passes with I/W ones; it counts as split)."""
    _check_name(name)
    return name in _SPLIT_NAMES


def uses_v_placement(name: str) -> bool:
    """True if rank r holds stages r and 2p-1-r (V shape) instead of r, r+p, ... (looping)."""
    _check_name(name)
    return name in _V_NAMES


def schedule_rule_violations(name: str, *, pp: int, vpp: int, num_microbatches: int) -> list[str]:
    """Sentences naming every rule of schedule ``name`` that (pp, vpp, num_microbatches) breaks; [] if fine.

    Rules: GPipe, 1F1B and ZB-H2 take vpp=1; 1F1B needs m >= pp (warm-up of pp-1 forwards);
    interleaved-1f1b needs vpp >= 2 and, like interleaved zb-h1, m divisible by the number of rounds
    max(1, m // pp) (torch's relaxation of Megatron's m % pp == 0); V schedules take vpp=2;
    DualPipeV needs m >= 2*pp.
    """
    if name not in SCHEDULE_NAMES:
        return [f"unknown schedule {name!r}; valid names: {', '.join(SCHEDULE_NAMES)}."]
    out = []
    for field, value in (("pp", pp), ("vpp", vpp), ("num_microbatches", num_microbatches)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            out.append(f"{field} must be an integer >= 1, got {value!r}.")
    if out:
        return out
    fixed = required_vpp(name)
    if fixed is not None and vpp != fixed:
        why = "V placement: stages r and 2p-1-r" if fixed == 2 else "one stage per rank"
        out.append(f"{name} needs vpp={fixed} ({why}), got vpp={vpp}.")
    if name == "1f1b" and num_microbatches < pp:
        out.append(
            f"1f1b needs at least pp={pp} micro-batches, got {num_microbatches} (use gpipe or more micro-batches)."
        )
    if name == "interleaved-1f1b" and vpp < 2:
        out.append(f"interleaved-1f1b needs vpp >= 2 stages per rank, got vpp={vpp} (use 1f1b for vpp=1).")
    if name in ("interleaved-1f1b", "zb-h1") and vpp >= 2:
        rounds = max(1, num_microbatches // pp)
        if num_microbatches % rounds:
            out.append(
                f"{name} with vpp={vpp} needs micro-batches divisible by the number of rounds "
                f"max(1, m // pp) = {rounds}, got m={num_microbatches} (a multiple of pp={pp} always works)."
            )
    if name == "dualpipev" and num_microbatches < 2 * pp:
        out.append(f"dualpipev needs at least 2*pp = {2 * pp} micro-batches, got {num_microbatches}.")
    return out


def _v_cap(pp: int, full_stage_units: int) -> list[int]:
    return [2 * full_stage_units] * pp


_Builder = Callable[[int, int, int], list[list[Action]]]
_BUILDERS: dict[str, _Builder] = {
    "gpipe": lambda p, v, m: classic.gpipe(p, m),
    "1f1b": lambda p, v, m: classic.one_f_one_b(p, m),
    "interleaved-1f1b": classic.interleaved_1f1b,
    "looped-bfs": classic.looped_bfs,
    "zb-h1": classic.zb_h1,
    "zb-h2": lambda p, v, m: greedy.greedy_zero_bubble(
        stage_to_rank=classic.looping_placement(p, 1), num_microbatches=m, cap_chunks=[2 * p - 1] * p
    ),
    "zbv": lambda p, v, m: vshape.zbv(p, m),
    "v-half": lambda p, v, m: greedy.greedy_zero_bubble(
        stage_to_rank=vshape.v_placement(p), num_microbatches=m, cap_chunks=_v_cap(p, (p + 2) // 2)
    ),
    "v-min": lambda p, v, m: greedy.greedy_zero_bubble(
        stage_to_rank=vshape.v_placement(p), num_microbatches=m, cap_chunks=_v_cap(p, (p + 4) // 3)
    ),
    "dualpipev": lambda p, v, m: vshape.dualpipev(p, m),
}


def build_schedule(name: str, *, pp: int, num_microbatches: int, vpp: int | None = None) -> Schedule:
    """Build the named schedule for ``pp`` ranks, ``num_microbatches`` micro-batches and ``vpp``
    stages per rank (None: ``default_vpp(name)``).

    Raises ValueError listing the valid names for an unknown name, or the broken rules
    (``schedule_rule_violations``). See each generator in ``classic``, ``vshape`` and ``greedy``
    for its source paper.
    """
    _check_name(name)
    vpp = default_vpp(name) if vpp is None else vpp
    problems = schedule_rule_violations(name, pp=pp, vpp=vpp, num_microbatches=num_microbatches)
    if problems:
        raise ValueError(
            f"schedule {name!r} with pp={pp}, vpp={vpp}, m={num_microbatches}: " + " ".join(problems)
        )
    rows = _BUILDERS[name](pp, vpp, num_microbatches)
    placement = vshape.v_placement(pp) if name in _V_NAMES else classic.looping_placement(pp, vpp)
    return Schedule(
        name=name,
        pp=pp,
        vpp=vpp,
        num_microbatches=num_microbatches,
        num_stages=pp * vpp,
        stage_to_rank=placement,
        actions=tuple(tuple(row) for row in rows),
    )
