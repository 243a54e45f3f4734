"""Pipeline actions and schedules as plain data, and their text/CSV form.

An action is ``(stage, op, microbatch)`` with op one of ``F`` (forward), ``B`` (full backward),
``I`` (backward for inputs) and ``W`` (backward for weights), split as in Zero Bubble pipeline
parallelism (Qi et al., arXiv:2401.10241). Its text form is ``"{stage}{op}{microbatch}"``
(``0F3``, ``2I0``), the one ``torch.distributed.pipelining`` and torchtitan use in CSV schedules:
one CSV row per rank, one action per cell. A forward and a backward that run as one overlapped unit (DeepSeek-V3's
F&B, arXiv:2412.19437 Sec. 3.2.1) are an ``Overlap``, written as torch writes its ``OVERLAP_F_B`` action:
``(0F1;7B0)OVERLAP_F_B``.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple, cast, overload

import numpy as np

from workbench.specs.files import check_input_file
from workbench.specs.limits import (
    MAX_MICROBATCHES,
    MAX_PIPELINE_STAGES,
    MAX_PP,
    MAX_SIMULATED_STAGE_MICROBATCHES,
    check_simulated_size,
    shown,
)

OPS: tuple[str, ...] = ("F", "B", "I", "W")
"""Compute ops: forward, full backward, backward for inputs, backward for weights."""
_OPCODE = {op: k for k, op in enumerate(OPS)}

_ACTION_RE = re.compile(r"^\s*(\d+)\s*([FBIW])\s*(\d+)\s*$")
_OVERLAP_RE = re.compile(r"^\s*\((.*)\)\s*OVERLAP_F_B\s*$")
_COMM_RE = re.compile(r"^\s*\d+\s*(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\s*\d*\s*$")


class Action(NamedTuple):
    """One compute action of a pipeline schedule: ``str(Action(0, "F", 3)) == "0F3"``."""

    stage: int
    """Global stage index, 0 .. num_stages-1."""
    op: str
    """``F``, ``B``, ``I`` or ``W``."""
    microbatch: int
    """Micro-batch index, 0 .. num_microbatches-1."""

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{self.microbatch}"


class Overlap(NamedTuple):
    """A forward and a backward of two micro-batches run as one unit: torch's ``OVERLAP_F_B`` action, DeepSeek-V3's
    F&B chunk (arXiv:2412.19437 Sec. 3.2.1). It starts once the inputs of both are in; the simulator runs the
    forward, then the backward (the overlap hides communication, which the step model prices)."""

    forward: Action
    """An ``F`` action."""
    backward: Action
    """A ``B`` or ``I`` action on the same rank."""

    def __str__(self) -> str:
        return f"({self.forward};{self.backward})OVERLAP_F_B"


Cell = Action | Overlap
"""One entry of a rank's order as the generators write it: an action or an overlapped F&B pair."""


def flatten_cells(rows: Iterable[Iterable[Cell]]) -> tuple[list[list[Action]], list[tuple[int, ...]]]:
    """Per rank, the actions with every ``Overlap`` replaced by its forward then its backward, and the positions
    (in the flattened row) of the forwards that open an overlapped pair."""
    out: list[list[Action]] = []
    pairs: list[tuple[int, ...]] = []
    for row in rows:
        row = row if isinstance(row, list) else list(row)
        if Overlap not in set(map(type, row)):  # the common case, checked at C speed
            out.append(cast("list[Action]", row))
            pairs.append(())
            continue
        flat: list[Action] = []
        starts: list[int] = []
        for cell in row:
            if isinstance(cell, Overlap):
                starts.append(len(flat))
                flat.extend(cell)
            else:
                flat.append(cell)
        out.append(flat)
        pairs.append(tuple(starts))
    return out, pairs


def parse_action(text: str) -> Action:
    """Parse ``"0F3"`` into ``Action(0, "F", 3)``. Raises ValueError for anything else, and for a stage index
    >= ``limits.MAX_PIPELINE_STAGES`` or a micro-batch index >= ``limits.MAX_MICROBATCHES`` (no schedule the
    simulator can hold has them)."""
    match = _ACTION_RE.match(text)
    if match is None:
        raise ValueError(
            f"action {shown(text)} is not of the form <stage><op><microbatch> with op in F, B, I, W "
            "(e.g. '0F3', '2I0')"
        )
    for group, what, bound, name in (
        (1, "stage", MAX_PIPELINE_STAGES, "MAX_PIPELINE_STAGES"),
        (3, "micro-batch", MAX_MICROBATCHES, "MAX_MICROBATCHES"),
    ):
        digits = match.group(group)
        if len(digits) > 9 or int(digits) >= bound:
            raise ValueError(
                f"action {shown(text.strip())}: {what} index {shown(digits)} must be below {bound:,} "
                f"({name} in workbench/specs/limits.py)"
            )
    return Action(int(match.group(1)), match.group(2), int(match.group(3)))


def parse_cell(text: str) -> list[Action]:
    """Parse one CSV cell: empty or a communication action gives ``[]``; torch's overlapped
    ``(0F1;3B0)OVERLAP_F_B`` gives its sub-actions in order; anything else one action."""
    if not text.strip() or _COMM_RE.match(text):
        return []
    overlap = _OVERLAP_RE.match(text)
    if overlap is not None:
        return [parse_action(part) for part in overlap.group(1).split(";") if part.strip()]
    return [parse_action(text)]


def _is_overlap_pair(text: str, parsed: Sequence[Action]) -> bool:
    """True for an ``OVERLAP_F_B`` cell holding one forward then one backward (an ``Overlap``)."""
    return (
        len(parsed) == 2
        and _OVERLAP_RE.match(text) is not None
        and parsed[0].op == "F"
        and parsed[1].op in ("B", "I")
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """A static pipeline schedule: the ordered compute actions of every rank and the placement.

    Checked on construction (ValueError naming the problem): ``num_stages == pp * vpp``, every stage
    placed on a rank in ``0..pp-1`` holding exactly ``vpp`` stages, actions only on their stage's rank,
    every ``(stage, op, microbatch)`` at most once, and every (stage, microbatch) of one direction has one F and
    either one B or one I and one W.

    A bidirectional schedule (``num_directions`` = 2, DualPipe) runs two copies of the model fed from opposite
    ends: stages ``0..S/2-1`` are the first copy's pipeline, ``S/2..S-1`` the second's, micro-batches
    ``0..m/2-1`` go through the first, ``m/2..m-1`` through the second (DeepSeek-V3, arXiv:2412.19437
    Sec. 3.2.1). Stage costs still describe the model cut into ``num_stages`` pieces in layer order
    (``workbench.pipeline.simulate.StageCosts``): a stage of a d-direction schedule runs d consecutive pieces
    (``pieces_of_stage``), so a rank's share per micro-batch is the same as with one direction.
    """

    name: str
    """Schedule name (a registry name or ``custom``)."""
    pp: int
    """Number of pipeline ranks."""
    vpp: int
    """Stages per rank (virtual pipeline size); 1 means one stage per rank."""
    num_microbatches: int
    """Micro-batches per step."""
    num_stages: int
    """Number of pipeline stages, ``pp * vpp``."""
    stage_to_rank: tuple[int, ...]
    """Rank holding each stage, indexed by stage."""
    actions: Sequence[tuple[Action, ...]]
    """Per rank, the compute actions in execution order: a tuple of tuples, or (``build_schedule``'s array
    builds) an ``ActionRows`` that decodes them from ``packed`` when read and compares equal to that tuple."""
    num_directions: int = 1
    """Model copies fed from opposite ends of the pipeline (1; DualPipe: 2). It divides num_stages and
    num_microbatches."""
    overlap_pairs: tuple[tuple[int, ...], ...] = ()
    """Per rank (or empty: none), the positions k whose actions k (an F) and k+1 (a B or I) run as one
    ``Overlap`` (torch's ``OVERLAP_F_B``)."""
    packed: np.ndarray = field(init=False, repr=False, compare=False, hash=False)
    """Read-only int64 array (num_actions, 3): stage, op code (index in ``OPS``), micro-batch; rank-major."""
    rank_offsets: np.ndarray = field(init=False, repr=False, compare=False, hash=False)
    """Read-only int64 array (pp + 1,): rank r's actions are ``packed[rank_offsets[r]:rank_offsets[r+1]]``."""

    def __post_init__(self) -> None:
        check_simulated_size(
            f"Schedule {shown(self.name)}", pp=self.pp, vpp=self.vpp, num_microbatches=self.num_microbatches
        )
        if self.num_stages != self.pp * self.vpp:
            raise ValueError(
                f"Schedule {self.name!r}: num_stages must equal pp*vpp = {self.pp * self.vpp}, got {self.num_stages}"
            )
        if len(self.stage_to_rank) != self.num_stages:
            raise ValueError(
                f"Schedule {self.name!r}: stage_to_rank must have {self.num_stages} entries, "
                f"got {len(self.stage_to_rank)}"
            )
        counts = [0] * self.pp
        for stage, rank in enumerate(self.stage_to_rank):
            if not 0 <= rank < self.pp:
                raise ValueError(
                    f"Schedule {self.name!r}: stage {stage} placed on rank {rank}, allowed 0..{self.pp - 1}"
                )
            counts[rank] += 1
        if any(c != self.vpp for c in counts):
            raise ValueError(
                f"Schedule {self.name!r}: every rank must hold vpp={self.vpp} stages, got {counts}"
            )
        d = self.num_directions
        if d not in (1, 2) or self.num_stages % d or self.num_microbatches % d:
            raise ValueError(
                f"Schedule {self.name!r}: num_directions must be 1 or 2 and divide num_stages={self.num_stages} "
                f"and num_microbatches={self.num_microbatches}, got {d!r}"
            )
        if isinstance(self.actions, ActionRows):
            packed, offsets = self.actions.packed, self.actions.offsets
        else:
            packed, offsets = _encode(self)
        _check_packed(self, packed, offsets)
        _check_overlap_pairs(self, packed, offsets)
        packed.flags.writeable = False
        offsets.flags.writeable = False
        object.__setattr__(self, "packed", packed)
        object.__setattr__(self, "rank_offsets", offsets)

    @property
    def num_actions(self) -> int:
        """Total number of compute actions over all ranks."""
        return int(self.rank_offsets[-1])

    def chunk_of_stage(self, stage: int) -> int:
        """Local index of ``stage`` among its rank's stages, in increasing stage order (0..vpp-1)."""
        rank = self.stage_to_rank[stage]
        return sum(1 for s in range(stage) if self.stage_to_rank[s] == rank)

    @property
    def stages_per_direction(self) -> int:
        """Stages one micro-batch goes through: num_stages / num_directions."""
        return self.num_stages // self.num_directions

    def direction_of_stage(self, stage: int) -> int:
        """Which copy of the model ``stage`` belongs to (0 .. num_directions-1)."""
        return stage // self.stages_per_direction

    def direction_of_microbatch(self, microbatch: int) -> int:
        """Which copy of the model ``microbatch`` goes through (first m/d micro-batches: 0, and so on)."""
        return microbatch // (self.num_microbatches // self.num_directions)

    def pieces_of_stage(self, stage: int) -> range:
        """The ``StageCosts`` entries (model pieces, layer order) ``stage`` runs: d consecutive ones, d =
        num_directions; ``range(stage, stage + 1)`` for a one-direction schedule."""
        d = self.num_directions
        first = d * (stage % self.stages_per_direction)
        return range(first, first + d)

    def uses_split_backward(self) -> bool:
        """True if any action is an ``I`` or ``W`` (backward split into input and weight parts)."""
        return bool(np.any(self.packed[:, 1] >= 2))

    def as_text(self, *, overlap: bool = False) -> list[list[str]]:
        """Per rank, the actions as strings like ``"0F3"``; with ``overlap`` every overlapped pair as one cell
        ``"(0F1;7B0)OVERLAP_F_B"`` (torch's text)."""
        return (
            [[str(c) for c in row] for row in self.cells()]
            if overlap
            else [[str(a) for a in row] for row in self.actions]
        )

    def cells(self) -> list[list[Cell]]:
        """Per rank, the order with each overlapped pair as one ``Overlap`` (the inverse of ``flatten_cells``)."""
        pairs = self.overlap_pairs or ((),) * self.pp
        return [cells_of(row, starts) for row, starts in zip(self.actions, pairs, strict=True)]


def cells_of(row: Sequence[Action], starts: Iterable[int]) -> list[Cell]:
    """One rank's order with the actions at ``starts`` and the next one as an ``Overlap`` each."""
    opening = set(starts)
    cells: list[Cell] = []
    k = 0
    while k < len(row):
        if k in opening:
            cells.append(Overlap(row[k], row[k + 1]))
            k += 2
        else:
            cells.append(row[k])
            k += 1
    return cells


def _check_overlap_pairs(s: Schedule, packed: np.ndarray, offsets: np.ndarray) -> None:
    """Every overlapped pair is an F then a B or I on one rank, pairs apart, positions in order."""
    if not s.overlap_pairs:
        return
    if len(s.overlap_pairs) != s.pp:
        raise ValueError(
            f"Schedule {s.name!r}: overlap_pairs must have one row per rank ({s.pp}), got {len(s.overlap_pairs)}"
        )
    ops = packed[:, 1]
    for r, starts in enumerate(s.overlap_pairs):
        first, size = int(offsets[r]), int(offsets[r + 1] - offsets[r])
        last = -2
        for k in starts:
            ok = (
                k >= last + 2
                and 0 <= k < size - 1
                and ops[first + k] == _OPCODE["F"]
                and ops[first + k + 1] in (_OPCODE["B"], _OPCODE["I"])
            )
            if not ok:
                raise ValueError(
                    f"Schedule {s.name!r}: rank {r} overlap at position {k} must open an F followed by a B or I, "
                    "positions increasing by at least 2"
                )
            last = k


def _encode(s: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """The actions as a packed array and rank offsets, at C speed (schedules reach 10^5-10^6 actions)."""
    if len(s.actions) != s.pp:
        raise ValueError(
            f"Schedule {s.name!r}: actions must have one row per rank ({s.pp}), got {len(s.actions)}"
        )
    flat = list(itertools.chain.from_iterable(s.actions))
    offsets = np.cumsum([0] + [len(row) for row in s.actions]).astype(np.int64)
    n = len(flat)
    try:  # map and itemgetter run at C speed (zip(*flat) over 10^5 actions does not)
        op = np.fromiter(map(_OPCODE.__getitem__, map(itemgetter(1), flat)), dtype=np.int64, count=n)
    except KeyError as exc:
        raise ValueError(f"Schedule {s.name!r}: op {exc.args[0]!r} is not one of {', '.join(OPS)}") from None
    except IndexError:
        raise ValueError(
            f"Schedule {s.name!r}: every action needs a stage, an op and a micro-batch"
        ) from None
    stage_col = np.fromiter(map(itemgetter(0), flat), dtype=np.int64, count=n)
    mb_col = np.fromiter(map(itemgetter(2), flat), dtype=np.int64, count=n)
    return np.column_stack([stage_col, op, mb_col]).reshape(n, 3), offsets


def _action_at(packed: np.ndarray, k: int) -> Action:
    stage, op, mb = (int(x) for x in packed[k])
    return Action(stage, OPS[op] if 0 <= op < len(OPS) else str(op), mb)


def _check_packed(s: Schedule, packed: np.ndarray, offsets: np.ndarray) -> None:
    """Check the packed actions with array operations: in range, on their stage's rank, each at most once, and
    every routed (stage, micro-batch) complete."""
    if len(offsets) != s.pp + 1:
        raise ValueError(
            f"Schedule {s.name!r}: actions must have one row per rank ({s.pp}), got {len(offsets) - 1}"
        )
    if not len(packed):
        raise ValueError(f"Schedule {s.name!r}: has no actions")
    stage, op, mb = packed[:, 0], packed[:, 1], packed[:, 2]
    rank = np.repeat(np.arange(s.pp), np.diff(offsets))
    bad = np.flatnonzero(
        (stage < 0)
        | (stage >= s.num_stages)
        | (mb < 0)
        | (mb >= s.num_microbatches)
        | (op < 0)
        | (op >= len(OPS))
    )
    if bad.size:
        raise ValueError(
            f"Schedule {s.name!r}: action {_action_at(packed, bad[0])} on rank {rank[bad[0]]} is out of range "
            f"(stages 0..{s.num_stages - 1}, microbatches 0..{s.num_microbatches - 1})"
        )
    misplaced = np.flatnonzero(np.asarray(s.stage_to_rank)[stage] != rank)
    if misplaced.size:
        a = _action_at(packed, misplaced[0])
        raise ValueError(
            f"Schedule {s.name!r}: action {a} is on rank {rank[misplaced[0]]} but stage {a.stage} lives on rank "
            f"{s.stage_to_rank[a.stage]}"
        )
    m = s.num_microbatches
    count = np.bincount((stage * 4 + op) * m + mb, minlength=s.num_stages * 4 * m)
    dup = np.flatnonzero(count > 1)
    if dup.size:
        key = int(dup[0])
        raise ValueError(
            f"Schedule {s.name!r}: action {Action(key // (4 * m), OPS[key // m % 4], key % m)} appears more than once"
        )
    f, b, i, w = count.reshape(s.num_stages, 4, m).transpose(1, 0, 2)
    d = s.num_directions
    routed = (np.arange(s.num_stages)[:, None] // (s.num_stages // d)) == (np.arange(m)[None, :] // (m // d))
    full = (f == 1) & (((b == 1) & (i == 0) & (w == 0)) | ((b == 0) & (i == 1) & (w == 1)))
    ok = np.where(routed, full, (f + b + i + w) == 0)
    if not ok.all():
        st, mbi = (int(x[0]) for x in np.nonzero(~ok))
        has = "".join(op for op, c in zip(OPS, (f, b, i, w), strict=True) if c[st, mbi]) or "nothing"
        need = "F and either B or I+W" if routed[st, mbi] else "nothing (another direction's micro-batch)"
        raise ValueError(f"Schedule {s.name!r}: stage {st} micro-batch {mbi} has {has}; it needs {need}")


def decoded_rows(packed: np.ndarray, offsets: np.ndarray) -> list[list[Action]]:
    """Per rank, the ``Action`` of each row of ``packed`` ((n, 3) stage, op code, micro-batch; rank r's rows are
    ``offsets[r]:offsets[r + 1]``)."""
    stage, op, mb = (packed[:, k].tolist() for k in range(3))
    flat = list(map(Action._make, zip(stage, map(OPS.__getitem__, op), mb, strict=True)))
    return [flat[a:b] for a, b in itertools.pairwise(offsets.tolist())]


class ActionRows(Sequence[tuple[Action, ...]]):
    """Per rank, the ``Action`` tuples of a packed schedule, decoded from the array when first read.

    ``packed``: (n, 3) int64 rows (stage, op code, micro-batch), rank-major; ``offsets``: pp + 1 int64, rank r's
    actions are ``packed[offsets[r]:offsets[r + 1]]``. Equal to (and hashes as) the tuple of tuples it decodes
    to, so a schedule built from arrays equals one built from ``Action`` rows action for action."""

    __slots__ = ("_rows", "offsets", "packed")

    def __init__(self, packed: np.ndarray, offsets: np.ndarray) -> None:
        self.packed, self.offsets = packed, offsets
        self._rows: tuple[tuple[Action, ...], ...] | None = None

    def _decoded(self) -> tuple[tuple[Action, ...], ...]:
        if self._rows is None:
            self._rows = tuple(tuple(row) for row in decoded_rows(self.packed, self.offsets))
        return self._rows

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> tuple[Action, ...]: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[tuple[Action, ...], ...]: ...
    def __getitem__(self, index: int | slice) -> tuple[Action, ...] | tuple[tuple[Action, ...], ...]:
        return self._decoded()[index]

    def __iter__(self) -> Iterator[tuple[Action, ...]]:
        return iter(self._decoded())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ActionRows):
            return bool(
                np.array_equal(self.offsets, other.offsets) and np.array_equal(self.packed, other.packed)
            )
        if isinstance(other, tuple):
            return self._decoded() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._decoded())

    def __repr__(self) -> str:
        return repr(self._decoded())


def schedule_from_rows(
    rows: Sequence[Iterable[Cell]], *, name: str, stage_to_rank: Sequence[int] | None = None
) -> Schedule:
    """Build a Schedule from per-rank action lists (``Overlap`` cells become overlapped pairs), inferring the
    placement when not given.

    pp is the number of rows, num_stages and num_microbatches one more than the largest index. Two directions
    (DualPipe) when the first half of the micro-batches acts only on the first half of the stages and the second
    half only on the second; one otherwise. Raises ValueError if a stage appears on two ranks or ranks hold
    different numbers of stages.
    """
    flat_rows, pairs = flatten_cells(rows)
    actions = tuple(tuple(row) for row in flat_rows)
    pp = len(actions)
    all_actions = [a for row in actions for a in row]
    if pp == 0 or not all_actions:
        raise ValueError(f"schedule {name!r}: needs at least one rank with actions, got none")
    if pp > MAX_PP:
        raise ValueError(
            f"schedule {name!r}: {pp:,} ranks; at most {MAX_PP:,} (MAX_PP in workbench/specs/limits.py)"
        )
    num_stages = 1 + max(a.stage for a in all_actions)
    num_mb = 1 + max(a.microbatch for a in all_actions)
    if num_stages > MAX_PIPELINE_STAGES or num_stages * num_mb > MAX_SIMULATED_STAGE_MICROBATCHES:
        check_simulated_size(
            f"schedule {name!r}", pp=pp, vpp=max(1, num_stages // pp), num_microbatches=num_mb
        )  # raises: the placement below would otherwise list every stage
    if stage_to_rank is None:
        placement: dict[int, int] = {}
        for rank, row in enumerate(actions):
            for a in row:
                if placement.setdefault(a.stage, rank) != rank:
                    raise ValueError(
                        f"schedule {name!r}: stage {a.stage} has actions on ranks {placement[a.stage]} and {rank}; "
                        "a stage must live on one rank"
                    )
        missing = [s for s in range(num_stages) if s not in placement]
        if missing:
            raise ValueError(f"schedule {name!r}: stages {missing} have no actions")
        stage_to_rank = [placement[s] for s in range(num_stages)]
    if num_stages % pp:
        raise ValueError(f"schedule {name!r}: {num_stages} stages cannot be spread evenly over {pp} ranks")
    return Schedule(
        name=name,
        pp=pp,
        vpp=num_stages // pp,
        num_microbatches=num_mb,
        num_stages=num_stages,
        stage_to_rank=tuple(stage_to_rank),
        actions=actions,
        num_directions=_directions_of(all_actions, num_stages, num_mb),
        overlap_pairs=tuple(pairs) if any(pairs) else (),
    )


def _directions_of(actions: Sequence[Action], num_stages: int, num_microbatches: int) -> int:
    """2 if every action keeps its micro-batch's half of the stages (first half with first half), else 1."""
    if num_stages % 2 or num_microbatches % 2:
        return 1
    halves = {(2 * a.stage >= num_stages) == (2 * a.microbatch >= num_microbatches) for a in actions}
    return 2 if halves == {True} else 1


def read_schedule_csv(path: str | Path, *, name: str = "custom") -> Schedule:
    """Read a torch/torchtitan compute-only CSV schedule: row r lists rank r's actions (``0F0,0I0,0W0``).

    Empty cells (idle steps) and communication actions (``SEND_F``, ``UNSHARD``, ...) are skipped;
    torch's ``(0F1;3B0)OVERLAP_F_B`` cells are read as their sub-actions in order, an F then a B (or I) as one
    overlapped pair (``Overlap``). The file holds no direction, so it reads as a one-direction schedule.
    Raises FileNotFoundError for a missing file and ValueError (with the row and cell) for bad content.
    """
    path = check_input_file(path, "schedule CSV file")
    rows: list[list[Cell]] = []
    blank = 0  # empty rows not yet followed by a non-empty one (trailing ones are dropped, never stored)
    num_actions = 0
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        try:
            for line_no, row in enumerate(reader, start=1):
                parsed: list[Cell] = []
                for cell in row:
                    try:
                        sub = parse_cell(cell)
                    except ValueError as exc:
                        raise ValueError(f"{path}: row {line_no}: {exc}") from None
                    parsed.extend([Overlap(*sub)] if _is_overlap_pair(cell, sub) else sub)
                if not parsed:
                    blank += 1
                    continue
                size = sum(2 if isinstance(c, Overlap) else 1 for c in parsed)
                _check_csv_size(path, len(rows) + blank + 1, num_actions + size)
                rows.extend([] for _ in range(blank))
                rows.append(parsed)
                blank, num_actions = 0, num_actions + size
        except csv.Error as exc:
            raise ValueError(f"{path}: line {reader.line_num}: not a readable CSV row ({exc})") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return schedule_from_rows(rows, name=name)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _check_csv_size(path: Path, num_rows: int, num_actions: int) -> None:
    """Stop reading a schedule CSV as soon as it has more ranks or actions than any schedule the simulator can
    hold (``MAX_PP`` rows; four actions per (stage, micro-batch) pair at most)."""
    if num_rows > MAX_PP:
        raise ValueError(
            f"{path}: more than {MAX_PP:,} rows (pipeline ranks); MAX_PP in workbench/specs/limits.py"
        )
    if num_actions > 4 * MAX_SIMULATED_STAGE_MICROBATCHES:
        raise ValueError(
            f"{path}: more than {4 * MAX_SIMULATED_STAGE_MICROBATCHES:,} actions: more than a simulated timeline "
            "holds (MAX_SIMULATED_STAGE_MICROBATCHES in workbench/specs/limits.py)"
        )


def write_schedule_csv(schedule: Schedule, path: str | Path, *, force: bool = False) -> Path:
    """Write ``schedule`` as a compute-only CSV (one row per rank) that torch's ``_load_csv`` reads; overlapped
    pairs as torch's ``(0F1;7B0)OVERLAP_F_B`` cells.

    Raises FileExistsError naming the path if it exists and ``force`` is False.
    """
    path = Path(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path} already exists; pass force=True (--force) to overwrite it")
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        for row in schedule.as_text(overlap=True):
            writer.writerow(row)
    return path
