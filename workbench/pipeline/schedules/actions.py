"""Pipeline actions and schedules as plain data, and their text/CSV form.

An action is ``(stage, op, microbatch)`` with op one of ``F`` (forward), ``B`` (full backward),
``I`` (backward for inputs) and ``W`` (backward for weights), split as in Zero Bubble pipeline
parallelism (Qi et al., arXiv:2401.10241). Its text form is ``"{stage}{op}{microbatch}"``
(``0F3``, ``2I0``), the one ``torch.distributed.pipelining`` and torchtitan use in CSV schedules:
one CSV row per rank, one action per cell.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

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


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """A static pipeline schedule: the ordered compute actions of every rank and the placement.

    Checked on construction (ValueError naming the problem): ``num_stages == pp * vpp``, every stage
    placed on a rank in ``0..pp-1`` holding exactly ``vpp`` stages, actions only on their stage's rank,
    every ``(stage, op, microbatch)`` at most once, and every (stage, microbatch) has one F and either
    one B or one I and one W.
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
    actions: tuple[tuple[Action, ...], ...]
    """Per rank, the compute actions in execution order."""
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
        if len(self.actions) != self.pp:
            raise ValueError(
                f"Schedule {self.name!r}: actions must have one row per rank ({self.pp}), got {len(self.actions)}"
            )
        packed, offsets = _pack(self)
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

    def uses_split_backward(self) -> bool:
        """True if any action is an ``I`` or ``W`` (backward split into input and weight parts)."""
        return bool(np.any(self.packed[:, 1] >= 2))

    def as_text(self) -> list[list[str]]:
        """Per rank, the actions as strings like ``"0F3"``."""
        return [[str(a) for a in row] for row in self.actions]


def _pack(s: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Encode and check the actions with array operations (schedules reach 10^5-10^6 actions)."""
    flat = [a for row in s.actions for a in row]
    offsets = np.cumsum([0] + [len(row) for row in s.actions]).astype(np.int64)
    if not flat:
        raise ValueError(f"Schedule {s.name!r}: has no actions")
    stage_l, op_l, mb_l = zip(*flat, strict=True)
    try:
        op = np.fromiter(map(_OPCODE.__getitem__, op_l), dtype=np.int64, count=len(flat))
    except KeyError as exc:
        raise ValueError(f"Schedule {s.name!r}: op {exc.args[0]!r} is not one of {', '.join(OPS)}") from None
    packed = np.column_stack([np.array(stage_l, dtype=np.int64), op, np.array(mb_l, dtype=np.int64)])
    stage, mb = packed[:, 0], packed[:, 2]
    rank = np.repeat(np.arange(s.pp), np.diff(offsets))
    bad = np.flatnonzero((stage < 0) | (stage >= s.num_stages) | (mb < 0) | (mb >= s.num_microbatches))
    if bad.size:
        raise ValueError(
            f"Schedule {s.name!r}: action {flat[bad[0]]} on rank {rank[bad[0]]} is out of range "
            f"(stages 0..{s.num_stages - 1}, microbatches 0..{s.num_microbatches - 1})"
        )
    misplaced = np.flatnonzero(np.asarray(s.stage_to_rank)[stage] != rank)
    if misplaced.size:
        a = flat[misplaced[0]]
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
    ok = (f == 1) & (((b == 1) & (i == 0) & (w == 0)) | ((b == 0) & (i == 1) & (w == 1)))
    if not ok.all():
        st, mbi = (int(x[0]) for x in np.nonzero(~ok))
        has = "".join(op for op, c in zip(OPS, (f, b, i, w), strict=True) if c[st, mbi]) or "nothing"
        raise ValueError(
            f"Schedule {s.name!r}: stage {st} micro-batch {mbi} has {has}; it needs F and either B or I+W"
        )
    return packed, offsets


def schedule_from_rows(
    rows: Sequence[Iterable[Action]], *, name: str, stage_to_rank: Sequence[int] | None = None
) -> Schedule:
    """Build a Schedule from per-rank action lists, inferring the placement when not given.

    pp is the number of rows, num_stages and num_microbatches one more than the largest index.
    Raises ValueError if a stage appears on two ranks or ranks hold different numbers of stages.
    """
    actions = tuple(tuple(row) for row in rows)
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
    )


def read_schedule_csv(path: str | Path, *, name: str = "custom") -> Schedule:
    """Read a torch/torchtitan compute-only CSV schedule: row r lists rank r's actions (``0F0,0I0,0W0``).

    Empty cells (idle steps) and communication actions (``SEND_F``, ``UNSHARD``, ...) are skipped;
    torch's ``(0F1;3B0)OVERLAP_F_B`` cells are read as their sub-actions in order.
    Raises FileNotFoundError for a missing file and ValueError (with the row and cell) for bad content.
    """
    path = check_input_file(path, "schedule CSV file")
    rows: list[list[Action]] = []
    blank = 0  # empty rows not yet followed by a non-empty one (trailing ones are dropped, never stored)
    num_actions = 0
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        try:
            for line_no, row in enumerate(reader, start=1):
                parsed: list[Action] = []
                for cell in row:
                    try:
                        parsed.extend(parse_cell(cell))
                    except ValueError as exc:
                        raise ValueError(f"{path}: row {line_no}: {exc}") from None
                if not parsed:
                    blank += 1
                    continue
                _check_csv_size(path, len(rows) + blank + 1, num_actions + len(parsed))
                rows.extend([] for _ in range(blank))
                rows.append(parsed)
                blank, num_actions = 0, num_actions + len(parsed)
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
    """Write ``schedule`` as a compute-only CSV (one row per rank) that torch's ``_load_csv`` reads.

    Raises FileExistsError naming the path if it exists and ``force`` is False.
    """
    path = Path(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path} already exists; pass force=True (--force) to overwrite it")
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        for row in schedule.as_text():
            writer.writerow(row)
    return path
