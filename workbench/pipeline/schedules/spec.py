"""``ScheduleSpec``: everything the workbench knows about one pipeline schedule, as one record.

The records themselves are in ``workbench.pipeline.schedules.registry``. What the plan's rules read of a
schedule (placement, vpp and micro-batch rules) is its ``traits``, a ``workbench.specs.schedule_traits`` record:
the rules are built there, below the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from workbench.pipeline.schedules.actions import Cell
from workbench.pipeline.schedules.arrays import PackedRows
from workbench.pipeline.schedules.classic import looping_placement
from workbench.pipeline.schedules.vshape import v_placement
from workbench.specs.errors import unique_index
from workbench.specs.schedule_traits import Placement, ScheduleTraits

Generator = Callable[[int, int, int], Sequence[Sequence[Cell]]]
"""(pp, vpp, num_microbatches) -> per pipeline rank, its compute actions in order (an ``Overlap`` for an
overlapped F&B pair)."""

ArrayGenerator = Callable[[int, int, int], PackedRows]
"""(pp, vpp, num_microbatches) -> the same orders as packed arrays (``workbench.pipeline.schedules.arrays``)."""


def stage_to_rank(placement: Placement, pp: int, vpp: int) -> tuple[int, ...]:
    """Rank of every stage 0..pp*vpp-1 of a placement. Raises ValueError for V placement with vpp != 2."""
    if placement is Placement.LOOPING:
        return looping_placement(pp, vpp)
    if vpp != 2:
        raise ValueError(f"V placement holds exactly 2 stages per rank, got vpp={vpp}")
    return v_placement(pp)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleSpec:
    """One pipeline schedule: its generator, its shape, its rules, its closed forms and where it comes from."""

    traits: ScheduleTraits
    """Its placement and rules (``workbench.specs.schedule_traits.TRAITS``)."""
    generator: Generator
    """Pure function (pp, vpp, m) -> per-rank action rows; it cites its paper in its docstring."""
    split_backward: bool
    """Backward split into I (input gradient) and W (weight gradient) passes; DualPipeV mixes full B
    passes with I/W ones and counts as split."""
    bubble_family: str
    """Its closed-form bubble in ``workbench.pipeline.bubble.FAMILIES``."""
    tiles_across_steps: bool = False
    """Its ranks' spans are shorter than the step (a parallelogram: the last rank starts late and the first
    finishes early), so a stack that steps the optimizer without a global sync (``FrameworkProfile.
    optimizer_post_validation``) starts the next step's warm-up inside this step's cool-down: the period is
    the longest rank span (``workbench.pipeline.bubble.tile_s``). Qi et al. 2024 (arXiv:2401.10241) sec. 3 and
    4: ZB-H1 (when W > I), ZB-H2 and ZB-V."""
    peak_family: str
    """Its closed-form activation peak in ``workbench.pipeline.peak.PEAK_FAMILIES``."""
    source: str
    """Paper (and section) the generator follows."""
    torch_class: str | None = None
    """Class of ``torch.distributed.pipelining.schedules`` that runs it; None: run from its CSV form."""
    frameworks: tuple[str, ...] = ()
    """Training stacks that ship it (besides this workbench)."""
    array_generator: ArrayGenerator | None = None
    """The generator's orders built as arrays, what ``build_schedule`` runs when given (no ``Action`` object
    per action: 10^5-10^6 of them in a large plan's schedule); None: build from ``generator``."""

    @property
    def name(self) -> str:
        """The schedule's name (its traits')."""
        return self.traits.name

    def stage_to_rank(self, pp: int, vpp: int) -> tuple[int, ...]:
        """Rank of every stage for ``pp`` ranks of ``vpp`` stages each."""
        return stage_to_rank(self.traits.placement, pp, vpp)


def index_schedules(specs: Iterable[ScheduleSpec]) -> Mapping[str, ScheduleSpec]:
    """Read-only name -> record, in the given order. Raises ValueError on a duplicate name."""
    return unique_index(specs, lambda s: s.name, "schedule {} is registered twice")
