"""``ScheduleSpec``: everything the workbench knows about one pipeline schedule, as one record.

The records themselves are in ``workbench.pipeline.schedules.registry``; the rules they imply (vpp and
micro-batch counts) are built from their fields by ``workbench.pipeline.schedules.rules``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from workbench.pipeline.schedules.actions import Cell
from workbench.pipeline.schedules.classic import looping_placement
from workbench.pipeline.schedules.vshape import v_placement

Generator = Callable[[int, int, int], Sequence[Sequence[Cell]]]
"""(pp, vpp, num_microbatches) -> per pipeline rank, its compute actions in order (an ``Overlap`` for an
overlapped F&B pair)."""


class Placement(StrEnum):
    """Which stages a pipeline rank holds."""

    LOOPING = "looping"
    """Rank r holds stages r, r + p, r + 2p, ... (Megatron-LM interleaving, arXiv:2104.04473 Sec. 2.2)."""
    V = "v"
    """Rank r holds stages r and 2p-1-r: two chunks, first and last stage on rank 0 (arXiv:2401.10241 Sec. 6).
    With two directions (DualPipe) the same placement holds stage r of the first copy and stage p-1-r of the
    second."""

    def stage_to_rank(self, pp: int, vpp: int) -> tuple[int, ...]:
        """Rank of every stage 0..pp*vpp-1. Raises ValueError for V placement with vpp != 2."""
        if self is Placement.LOOPING:
            return looping_placement(pp, vpp)
        if vpp != 2:
            raise ValueError(f"V placement holds exactly 2 stages per rank, got vpp={vpp}")
        return v_placement(pp)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleSpec:
    """One pipeline schedule: its generator, its shape, its rules, its closed forms and where it comes from."""

    name: str
    """Name used by plans, the CLI and the app, e.g. ``"zb-h1"``."""
    generator: Generator
    """Pure function (pp, vpp, m) -> per-rank action rows; it cites its paper in its docstring."""
    placement: Placement
    split_backward: bool
    """Backward split into I (input gradient) and W (weight gradient) passes; DualPipeV mixes full B
    passes with I/W ones and counts as split."""
    required_vpp: int | None
    """Stages per rank the schedule needs exactly; None: any vpp >= ``min_vpp``."""
    default_vpp: int
    """Stages per rank when the caller gives none (``required_vpp`` when that is set)."""
    min_vpp: int = 1
    """Fewest stages per rank when ``required_vpp`` is None (interleaved 1F1B: 2)."""
    min_microbatches_per_rank: int = 0
    """Micro-batch rule: m >= this * pp (1F1B's warm-up of pp-1 forwards: 1; DualPipeV: 2); 0: any m."""
    num_directions: int = 1
    """Copies of the model fed from opposite ends (DualPipe: 2, one per direction, so every rank holds two
    copies' stages: 2x parameters, DeepSeek-V3 Table 2); it must divide pp and the micro-batches (rule
    ``schedule_directions``: ranks pair up as r and p-1-r). 1: one pipeline."""
    microbatches_in_rounds: bool = False
    """Micro-batch rule with vpp >= 2: m divisible by the number of rounds max(1, m // pp) (torch's
    relaxation of Megatron's m % pp == 0 for interleaved schedules)."""
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

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower():
            raise ValueError(f"ScheduleSpec: name must be lower-case and non-empty, got {self.name!r}")
        if self.required_vpp is not None and self.default_vpp != self.required_vpp:
            raise ValueError(
                f"ScheduleSpec {self.name!r}: default_vpp must equal required_vpp={self.required_vpp}, "
                f"got {self.default_vpp}"
            )
        if self.default_vpp < self.min_vpp:
            raise ValueError(
                f"ScheduleSpec {self.name!r}: default_vpp={self.default_vpp} is below min_vpp={self.min_vpp}"
            )
        if self.placement is Placement.V and self.required_vpp != 2:
            raise ValueError(f"ScheduleSpec {self.name!r}: V placement needs required_vpp=2")
        if self.num_directions not in (1, 2) or (
            self.num_directions == 2 and self.placement is not Placement.V
        ):
            raise ValueError(
                f"ScheduleSpec {self.name!r}: num_directions must be 1, or 2 with V placement, got "
                f"{self.num_directions!r}"
            )
        if self.min_microbatches_per_rank < 0:
            raise ValueError(f"ScheduleSpec {self.name!r}: min_microbatches_per_rank must be >= 0")

    def stage_to_rank(self, pp: int, vpp: int) -> tuple[int, ...]:
        """Rank of every stage for ``pp`` ranks of ``vpp`` stages each."""
        return self.placement.stage_to_rank(pp, vpp)


def index_schedules(specs: Iterable[ScheduleSpec]) -> Mapping[str, ScheduleSpec]:
    """Read-only name -> record, in the given order. Raises ValueError on a duplicate name."""
    out: dict[str, ScheduleSpec] = {}
    for spec in specs:
        if spec.name in out:
            raise ValueError(f"schedule {spec.name!r} is registered twice")
        out[spec.name] = spec
    return MappingProxyType(out)
