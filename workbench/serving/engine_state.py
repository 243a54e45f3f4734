"""One engine's scheduler state in the request simulator (:mod:`workbench.serving.simulate`): the running decodes
as columns of an int64 array sorted by finish, the prefills in progress, the waiting queue and the KV blocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
    counter ``steps`` (decode iterations run). The decodes are the columns of ``d`` (3 x n int64), sorted by their
    first row so the next to finish lead: ``d[0]`` the value of ``steps`` after the iteration that emits the
    request's last token, ``d[1]`` the request id, ``d[2]`` the offset whose sum with ``steps`` is the KV length of
    its next decode (the token it feeds included). Prefills in progress are a short list."""

    __slots__ = (
        "index", "cost", "prefill_only", "block", "cap_blocks", "d", "n", "off_sum", "steps", "next_end",
        "decoding", "head", "prefilling", "pf_blocks", "waiting", "busy", "gen", "k", "start", "t0", "slope",
        "row", "load", "reserved",
    )  # fmt: skip

    def __init__(self, index: int, cost: IterationCost, prefill_only: bool, kv_share: int = 1) -> None:
        self.index, self.cost, self.prefill_only = index, cost, prefill_only
        where = f"{type(cost).__name__} of engine {index}"
        block, capacity = (plain_int(v) for v in (cost.kv_block_tokens, cost.kv_capacity_tokens))
        self.block = check_count(where, "kv_block_tokens", block, maximum=MAX_TOKENS)
        capacity = check_count(where, "kv_capacity_tokens", capacity, minimum=0, maximum=1 << 62)
        self.cap_blocks = capacity // self.block // kv_share  # a pipeline's batches in flight split the pool
        self.d = np.zeros((3, 0), dtype=np.int64)
        self.n = 0  # running decodes
        self.off_sum = 0  # sum of d[2], so the decodes' KV tokens are off_sum + n * steps
        self.steps = 0
        self.next_end = -1  # d[0, 0] when the work in flight was scheduled
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

    def drop_finished(self) -> np.ndarray:
        """Remove the decodes whose last token came with the iteration that reached ``steps``; their ids."""
        d, n, steps = self.d, self.n, self.steps
        if n and d[0, 0] == steps and (n == 1 or d[0, 1] > steps):  # the common case: exactly one ends
            self.off_sum -= int(d[2, 0])
            self.d = d[:, 1:]
            self.n -= 1
            return d[1, :1]
        c = int(d[0].searchsorted(steps, side="right"))
        self.off_sum -= int(_sum(d[2, :c]))
        self.d = d[:, c:]
        self.n -= c
        return d[1, :c]

    def drop(self, j: int) -> None:
        self.off_sum -= int(self.d[2, j])
        self.d = np.delete(self.d, j, axis=1)
        self.n -= 1

    def add_decodes(self, ids: list[int], ctx: list[int], left: list[int]) -> None:
        """Decodes whose next iteration has KV length ``ctx`` and that emit ``left`` more tokens."""
        steps = self.steps
        d = self.d
        if len(ids) == 1:  # the common case: one insertion after the equal ends
            end, off0 = left[0] + steps, ctx[0] - steps
            self.off_sum += off0
            pos = int(d[0].searchsorted(end, side="right"))
            new = np.empty((3, self.n + 1), dtype=np.int64)
            new[:, :pos] = d[:, :pos]
            new[0, pos], new[1, pos], new[2, pos] = end, ids[0], off0  # scalar stores: no tuple conversion
            new[:, pos + 1 :] = d[:, pos:]
            self.d = new
        else:
            off = [c - steps for c in ctx]
            self.off_sum += sum(off)
            cols = np.array([[x + steps for x in left], ids, off], dtype=np.int64)
            d = np.concatenate((d, cols), axis=1)
            self.d = d[:, np.argsort(d[0], kind="stable")]
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
        return int(_sum((self.d[2] + shift) // b)) + self.pf_blocks


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
