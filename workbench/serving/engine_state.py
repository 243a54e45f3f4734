"""One engine's scheduler state in the request simulator (:mod:`workbench.serving.simulate`): the running decodes
as columns of an int64 array sorted by finish, the prefills in progress, the waiting queue and the KV blocks."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.serving.cost import IterationCost
from workbench.serving.requests import MAX_TOKENS
from workbench.specs.limits import check_count

if TYPE_CHECKING:
    from workbench.serving.requests import Requests

EMPTY = np.zeros(0, dtype=np.int64)
EMPTY.flags.writeable = False
_sum = np.add.reduce  # ndarray.sum without its Python wrapper (hot path)


def plain_int(value: Any) -> Any:
    """A numpy integer as a Python int (other values unchanged, for the checks to judge)."""
    return int(value) if isinstance(value, np.integer) else value


class EngineState:
    """One engine's scheduler state. Every running decode advances in every iteration, so the decodes share a
    counter ``steps`` (decode iterations run). The decodes are kept sorted so the next to finish lead (a new one
    after those that finish at the same step), as three lists: ``ends`` the value of ``steps`` after the iteration
    that emits the request's last token, ``ids`` the request id, ``offs`` the offset whose sum with ``steps`` is
    the KV length of its next decode (the token it feeds included); ``off_view`` holds ``offs`` as an int64 array
    (the costs price arrays of context lengths). ``d`` gives the three as one 3 x n array. Prefills in progress are
    a short list.

    Lists, not arrays, for what the event loop reads one value at a time: a numpy call on a small array costs
    about a microsecond, several per request (issue 52: the simulator's floor)."""

    __slots__ = (
        "index", "cost", "prefill_only", "block", "cap_blocks", "n", "off_sum", "steps", "next_end",
        "decoding", "head", "prefilling", "pf_blocks", "waiting", "busy", "gen", "k", "start", "t0", "slope",
        "row", "load", "reserved", "ends", "ids", "offs", "off_view", "buf", "lo", "hi",
    )  # fmt: skip

    def __init__(self, index: int, cost: IterationCost, prefill_only: bool, kv_share: int = 1) -> None:
        self.index, self.cost, self.prefill_only = index, cost, prefill_only
        where = f"{type(cost).__name__} of engine {index}"
        block, capacity = (plain_int(v) for v in (cost.kv_block_tokens, cost.kv_capacity_tokens))
        self.block = check_count(where, "kv_block_tokens", block, maximum=MAX_TOKENS)
        capacity = check_count(where, "kv_capacity_tokens", capacity, minimum=0, maximum=1 << 62)
        self.cap_blocks = capacity // self.block // kv_share  # a pipeline's batches in flight split the pool
        self.ends: list[int] = []
        self.ids: list[int] = []
        self.offs: list[int] = []
        self._placed()
        self.n = 0  # running decodes
        self.off_sum = 0  # sum of offs, so the decodes' KV tokens are off_sum + n * steps
        self.steps = 0
        self.next_end = -1  # ends[0] when the work in flight was scheduled
        self.decoding = False  # the head iteration in flight advances the decodes too
        self.head = False  # the work in flight is one iteration with prefill chunks (else a run of k decodes)
        self.prefilling: list[list[int]] = []  # [id, tokens C, done, blocks, chunk this iteration]
        self.pf_blocks = 0
        self.waiting: list[int] = []  # heap of ids (FCFS by arrival)
        self.busy = False
        self.gen = 0  # invalidates stale engine events after a truncated decode run
        self.k = 0  # decode-run iterations in flight
        self.start = self.t0 = self.slope = 0.0  # start of the work in flight; a run's first time and growth
        self.row = -1
        self.load = 0
        self.reserved = 0  # blocks reserved for the whole length of the admitted requests (full admission)

    @property
    def d(self) -> np.ndarray:
        """The decodes as one 3 x n int64 array: ends, ids, offs (a copy, for inspection)."""
        return np.array([self.ends, self.ids, self.offs], dtype=np.int64).reshape(3, self.n)

    def _placed(self) -> None:
        """Hold ``offs`` in the middle of a new buffer twice its size (at least 64): room to insert and drop
        without copying the rest; ``off_view`` is the live part ``buf[lo:hi]``."""
        n = len(self.offs)
        size = max(64, 2 * n + 2)
        self.buf = np.empty(size, dtype=np.int64)
        self.lo = (size - n) // 2
        self.hi = self.lo + n
        self.buf[self.lo : self.hi] = self.offs
        self.off_view = self.buf[self.lo : self.hi]

    def drop_finished(self) -> list[int]:
        """Remove the decodes whose last token came with the iteration that reached ``steps``; their ids."""
        ends, steps = self.ends, self.steps
        if ends and ends[0] == steps and (len(ends) == 1 or ends[1] > steps):  # the common case: one ends
            del ends[0]
            self.off_sum -= self.offs.pop(0)
            self.n -= 1
            self.lo = lo = self.lo + 1
            self.off_view = self.buf[lo : self.hi]
            return [self.ids.pop(0)]
        c = bisect_right(ends, steps)
        done = self.ids[:c]
        self.off_sum -= sum(self.offs[:c])
        del ends[:c], self.ids[:c], self.offs[:c]
        self.n -= c
        self.lo = lo = self.lo + c
        self.off_view = self.buf[lo : self.hi]
        return done

    def drop(self, j: int) -> None:
        """Remove the decode at position ``j``."""
        del self.ends[j], self.ids[j]
        self.off_sum -= self.offs.pop(j)
        buf, lo, hi = self.buf, self.lo, self.hi
        buf[lo + j : hi - 1] = buf[lo + j + 1 : hi]
        self.hi = hi - 1
        self.off_view = buf[lo : hi - 1]
        self.n -= 1

    def add_decodes(self, ids: list[int], ctx: list[int], left: list[int]) -> None:
        """Decodes whose next iteration has KV length ``ctx`` and that emit ``left`` more tokens."""
        steps = self.steps
        if len(ids) == 1:  # the common case: one insertion after the equal ends, in place in the buffer
            end, off0 = left[0] + steps, ctx[0] - steps
            self.off_sum += off0
            pos = bisect_right(self.ends, end)
            self.ends.insert(pos, end)
            self.ids.insert(pos, ids[0])
            self.offs.insert(pos, off0)
            buf, lo, hi = self.buf, self.lo, self.hi
            if 2 * pos < hi - lo and lo > 0:  # shift the head left
                buf[lo - 1 : lo + pos - 1] = buf[lo : lo + pos]
                self.lo = lo = lo - 1
                buf[lo + pos] = off0
                self.off_view = buf[lo:hi]
            elif hi < len(buf):  # shift the tail right (an overlapping copy: numpy buffers it)
                buf[lo + pos + 1 : hi + 1] = buf[lo + pos : hi]
                buf[lo + pos] = off0
                self.hi = hi + 1
                self.off_view = buf[lo : hi + 1]
            else:
                self._placed()
        else:
            off = [c - steps for c in ctx]
            self.off_sum += sum(off)
            merged = sorted(  # stable: the new ones after the running ones that end at the same step
                zip(self.ends + [x + steps for x in left], self.ids + ids, self.offs + off, strict=True),
                key=itemgetter(0),
            )
            self.ends, self.ids, self.offs = (list(col) for col in zip(*merged, strict=True))
            self._placed()
        self.n += len(ids)

    def blocks_needed(self, extra: int = 0, *, exact: bool = True) -> int:
        """KV blocks the running requests hold in the decode iteration ``extra`` iterations from now (-1: now,
        after the last iteration). ``exact=False`` may return an upper bound, when that bound fits the pool (a
        cheaper answer to "does it fit")."""
        n = self.n
        if not n:
            return self.pf_blocks
        b = self.block
        shift = self.steps + extra + b - 1
        if not exact:
            bound = (self.off_sum + n * shift) // b + self.pf_blocks  # >= the sum of ceil(ctx / b)
            if bound <= self.cap_blocks:
                return bound
        return int(_sum((self.off_view + shift) // b)) + self.pf_blocks


def check_fits(requests: Requests, engines: Sequence[EngineState], *, decode: bool, name: str) -> None:
    """ValueError if a request can never fit one engine's KV (prompt, or prompt + output - 1 for decoding; a
    decode pool sees only requests of two or more output tokens)."""
    if not engines or not len(requests):
        return
    cap = min(e.cap_blocks for e in engines)
    block = engines[0].block
    tokens = requests.input_tokens + (requests.output_tokens - 1 if decode else 0)
    reaches = (
        requests.output_tokens > 1 if decode and name == "decode" else True
    )  # one token: prefill side only
    bad = np.flatnonzero((-(-tokens // block) > cap) & reaches)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"request {i} needs {int(tokens[i])} KV tokens but a {name} engine holds "
            f"{cap * block} ({cap} blocks of {block}); it could never finish"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class DisaggregatedPools:
    """Prefill/decode disaggregation (DistServe, arXiv 2401.09670): two pools of engines.

    Engines are numbered prefill first (0..num_prefill_engines-1), then decode. The KV hand-off of a request of C
    cached tokens takes ``prefill_cost.kv_transfer_s(C)`` seconds."""

    num_prefill_engines: int
    """Engines that only prefill. >= 1."""
    num_decode_engines: int
    """Engines that decode (and redo the prefill of a request they preempt). >= 1."""
    prefill_cost: IterationCost | None = None
    """Cost of one prefill engine; None: the ``cost`` given to :func:`simulate`."""
    decode_cost: IterationCost | None = None
    """Cost of one decode engine; None: the ``cost`` given to :func:`simulate`."""

    def __post_init__(self) -> None:
        for name in ("num_prefill_engines", "num_decode_engines"):
            check_count("DisaggregatedPools", name, getattr(self, name), maximum=2**16)
