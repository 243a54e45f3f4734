"""Discrete-event simulation of LLM serving engines: requests in, per-request latencies and per-iteration batches out.

Each engine runs iterations (one forward pass each) over a batch the scheduler composes at the iteration's start.
Admission is FCFS (the queue head blocks the requests behind it) while a slot (``max_num_seqs``), KV blocks
(``ceil(tokens / kv_block_tokens)``, the whole prompt reserved at admission) and the token budget
(``max_num_batched_tokens``, one token per decode) allow. Decodes reserve the blocks of their growth; when the pool
runs out the youngest running request is preempted by recompute: its blocks are freed and it re-enters the waiting
queue to redo its prefill over prompt + generated tokens (vLLM, Kwon et al. 2023, arXiv 2309.06180, Sec. 4.5); no
request is admitted in an iteration that preempted one. Batch composition (``workbench.specs.serving.Scheduler``):

- ``vllm`` (vLLM V0, Orca-style): when a waiting prompt can be admitted the iteration prefills whole prompts only
  and the running decodes wait; otherwise every running request decodes;
- ``sarathi`` (Sarathi-Serve, Agrawal et al. 2024, arXiv 2403.02310; vLLM V1): every running request decodes, then
  partial prefills continue, then waiting prompts, in chunks that fill the remaining budget (``chunked_prefill=False``
  keeps whole prompts in the mixed batch; a recompute prompt longer than the budget then runs as the only prefill).

A prefill over C tokens (P prompt + m generated) emits token m + 1; a decode emits one token; a request of O output
tokens runs one prefill and O - 1 decodes. Disaggregated serving (DistServe, Zhong et al. 2024, arXiv 2401.09670):
prefill engines and decode engines in two pools; the first token comes from the prefill engine (TTFT ends with the
prefill), the prefill engine frees the request's blocks at once (DistServe holds them until the decode side pulls
the KV: this understates prefill-side KV pressure by the transfer time), and the KV reaches a decode engine after
``kv_transfer_s``, where it is admitted without compute (a recompute preemption there redoes the prefill locally).
Not modelled: vLLM's free-block watermark, swap preemption, prefix caching, and pipeline-parallel engines keeping
several batches in flight (an iteration is one whole forward pass, as ``ReplicaCost`` prices it).

Speed: a run of decode-only iterations between two events (an arrival or hand-off that could be admitted, a finish,
the KV running out) is one step: its iteration times are priced at both ends and interpolated, exact when the cost
is affine in the context lengths (``max_run_iterations=1`` prices every iteration). Deterministic: ties in the
event heap are broken by ``(time_s, priority, seq)``.
"""

from __future__ import annotations

import csv
import heapq
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from workbench.serving.cost import IterationCost
from workbench.specs.estimate import TIMELINE_COLUMNS
from workbench.specs.files import check_input_file
from workbench.specs.limits import MAX_CSV_FIELD_CHARS, check_count, check_real, shown
from workbench.specs.serving import Scheduler

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = [
    "IterationCost",
    "Requests",
    "DisaggregatedPools",
    "LatencyStats",
    "SimResult",
    "simulate",
    "POLICIES",
    "ROUTERS",
    "REQUEST_COLUMNS",
    "ITERATION_COLUMNS",
]

POLICIES: tuple[str, ...] = tuple(s.value for s in Scheduler)
"""Scheduler policies (``workbench.specs.serving.Scheduler``): ``vllm`` prefill-priority whole prompts, ``sarathi``
decode-first stall-free batching with chunked prefill (module docstring)."""
ROUTERS: tuple[str, ...] = ("round_robin", "least_loaded")
"""How arrivals are spread over the engines of a pool: in turn, or to the engine holding the fewest requests
(ties to the lowest index)."""
REQUEST_COLUMNS: tuple[str, ...] = (
    "id",
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "preemptions",
    "engine",
    "prefill_engine",
)
ITERATION_COLUMNS: tuple[str, ...] = (
    "engine",
    "iteration",
    "start_s",
    "end_s",
    "num_prefill_tokens",
    "num_decode_seqs",
    "kv_used_tokens",
    "kv_capacity_tokens",
    "waiting",
)
_TRACE_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")
_EMPTY = np.zeros(0, dtype=np.int64)
_EMPTY.flags.writeable = False
_MAX_TOKENS = 2**31
_sum = np.add.reduce  # ndarray.sum without its Python wrapper (hot path)


def _plain_int(value: Any) -> Any:
    """A numpy integer as a Python int (other values unchanged, for the checks to judge)."""
    return int(value) if isinstance(value, np.integer) else value


def _token_array(where: str, field: str, value: ArrayLike, n: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 0:
        arr = np.full(n, arr)
    if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"{where}: {field} must be an integer or {n} integers, got shape {arr.shape} {arr.dtype}"
        )
    bad = np.flatnonzero((arr < 1) | (arr > _MAX_TOKENS))
    if bad.size:
        raise ValueError(f"{where}: {field}[{bad[0]}] must be in 1..{_MAX_TOKENS}, got {arr[bad[0]]}")
    return arr.astype(np.int64)


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class Requests:
    """The requests of one simulation, in arrival order (ids are positions: 0..n-1).

    Build with :meth:`offline`, :meth:`poisson`, :meth:`closed_loop` or :meth:`from_trace_csv`. Raises ValueError
    for arrays of different lengths, token counts outside 1..2**31, arrival times not finite, negative or
    decreasing, or a concurrency outside 1..n.
    """

    arrival_s: np.ndarray
    """Arrival time per request, seconds from the start, shape (n,), non-decreasing. Ignored for requests after
    the first ``concurrency`` in closed loop."""
    input_tokens: np.ndarray
    """Prompt length per request, tokens, shape (n,), >= 1."""
    output_tokens: np.ndarray
    """Tokens to generate per request (the first one included), shape (n,), >= 1."""
    concurrency: int | None = None
    """Closed loop: the first ``concurrency`` requests arrive at ``arrival_s``; each later one arrives the moment
    a request finishes, so that many are in flight. None: open loop (every arrival from ``arrival_s``)."""

    def __post_init__(self) -> None:
        arrival = np.asarray(self.arrival_s, dtype=np.float64)
        if arrival.ndim != 1:
            raise ValueError(
                f"Requests: arrival_s must be 1-D (one time per request), got shape {arrival.shape}"
            )
        n = len(arrival)
        bad = np.flatnonzero(~np.isfinite(arrival) | (arrival < 0))
        if bad.size:
            raise ValueError(
                f"Requests: arrival_s[{bad[0]}] must be finite and >= 0 s, got {arrival[bad[0]]}"
            )
        back = np.flatnonzero(np.diff(arrival) < 0)
        if back.size:
            raise ValueError(
                f"Requests: arrival_s must not decrease; arrival_s[{back[0] + 1}] < arrival_s[{back[0]}]"
            )
        object.__setattr__(self, "arrival_s", arrival)
        object.__setattr__(
            self, "input_tokens", _token_array("Requests", "input_tokens", self.input_tokens, n)
        )
        object.__setattr__(
            self, "output_tokens", _token_array("Requests", "output_tokens", self.output_tokens, n)
        )
        if self.concurrency is not None:
            check_count("Requests", "concurrency", self.concurrency, minimum=1, maximum=max(n, 1))

    def __len__(self) -> int:
        return len(self.arrival_s)

    @classmethod
    def offline(cls, num_requests: int, *, input_tokens: ArrayLike, output_tokens: ArrayLike) -> Requests:
        """``num_requests`` requests all arriving at 0 s (an offline batch). Lengths: one int or one per request."""
        check_count("Requests.offline", "num_requests", num_requests, maximum=_MAX_TOKENS)
        return cls._of("Requests.offline", np.zeros(num_requests), input_tokens, output_tokens)

    @classmethod
    def poisson(
        cls,
        rate_per_s: float,
        num_requests: int,
        *,
        input_tokens: ArrayLike,
        output_tokens: ArrayLike,
        seed: int = 0,
    ) -> Requests:
        """Open-loop Poisson arrivals: exponential gaps of mean 1/rate_per_s (first arrival after one gap),
        drawn with ``numpy.random.default_rng(seed)``. Raises ValueError for rate_per_s <= 0 or not finite."""
        rate = check_real("Requests.poisson", "rate_per_s", rate_per_s, unit="requests/s")
        check_count("Requests.poisson", "num_requests", num_requests, maximum=_MAX_TOKENS)
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, num_requests)
        return cls._of("Requests.poisson", np.cumsum(gaps), input_tokens, output_tokens)

    @classmethod
    def closed_loop(
        cls, concurrency: int, num_requests: int, *, input_tokens: ArrayLike, output_tokens: ArrayLike
    ) -> Requests:
        """Closed loop: ``concurrency`` requests at 0 s, then a new one whenever one finishes (no think time)."""
        check_count("Requests.closed_loop", "num_requests", num_requests, maximum=_MAX_TOKENS)
        return cls._of(
            "Requests.closed_loop", np.zeros(num_requests), input_tokens, output_tokens, concurrency
        )

    @classmethod
    def _of(
        cls,
        where: str,
        arrival_s: np.ndarray,
        inputs: ArrayLike,
        outputs: ArrayLike,
        concurrency: int | None = None,
    ) -> Requests:
        n = len(arrival_s)
        return cls(
            arrival_s=arrival_s,
            input_tokens=_token_array(where, "input_tokens", inputs, n),
            output_tokens=_token_array(where, "output_tokens", outputs, n),
            concurrency=concurrency,
        )

    @classmethod
    def from_trace_csv(cls, path: str | Path) -> Requests:
        """Requests from a CSV file with a header naming ``arrival_s,input_tokens,output_tokens`` (any order,
        other columns ignored; UTF-8, a byte-order mark allowed): seconds (>= 0), tokens (integers >= 1). Rows
        are sorted by arrival (stable), so ids are positions in arrival order.

        Raises FileNotFoundError/ValueError from :func:`workbench.specs.files.check_input_file`, ValueError
        ``PATH: not UTF-8 text ...``, and ValueError ``PATH:LINE: column NAME: ...`` for a missing column, a
        short row or a bad value (``PATH:LINE: ...`` for malformed CSV)."""
        p = check_input_file(path, "trace CSV")
        values: list[list[Any]] = [[], [], []]
        with p.open(newline="", encoding="utf-8-sig") as f:
            rows = csv.reader(f)
            try:
                _read_trace(p, rows, values)
            except UnicodeDecodeError as e:
                raise ValueError(f"{p}: not UTF-8 text (byte {e.start}: {e.reason})") from None
            except csv.Error as e:
                raise ValueError(f"{p}:{rows.line_num}: {e}") from None
        order = np.argsort(np.asarray(values[0], dtype=np.float64), kind="stable")
        return cls(
            arrival_s=np.asarray(values[0], dtype=np.float64)[order],
            input_tokens=np.asarray(values[1], dtype=np.int64)[order],
            output_tokens=np.asarray(values[2], dtype=np.int64)[order],
        )


def _read_trace(p: Path, rows: Any, values: list[list[Any]]) -> None:
    """Append the trace's three columns to ``values`` (``Requests.from_trace_csv``)."""
    header = next(rows, None)
    if header is None:
        raise ValueError(f"{p}:1: empty file; the header must name {', '.join(_TRACE_COLUMNS)}")
    names = [h.strip() for h in header]
    missing = [c for c in _TRACE_COLUMNS if c not in names]
    if missing:
        raise ValueError(
            f"{p}:1: header lacks column {missing[0]!r}; it must name {', '.join(_TRACE_COLUMNS)}"
        )
    where = [names.index(c) for c in _TRACE_COLUMNS]
    for row in rows:
        if row:
            for k, (col, at) in enumerate(zip(_TRACE_COLUMNS, where, strict=True)):
                values[k].append(_trace_field(p, rows.line_num, col, row, at))


def _trace_field(path: Path, line: int, column: str, row: list[str], at: int) -> float | int:
    if at >= len(row):
        raise ValueError(f"{path}:{line}: column {column}: missing (the row has {len(row)} fields)")
    text = row[at].strip()
    if len(text) > MAX_CSV_FIELD_CHARS:
        raise ValueError(f"{path}:{line}: column {column}: field of {len(text):,} characters")
    try:
        if column == "arrival_s":
            value: float | int = float(text)
            ok = math.isfinite(value) and value >= 0
            allowed = "a finite number of seconds >= 0"
        else:
            value = int(text)
            ok = 1 <= value <= _MAX_TOKENS
            allowed = f"an integer in 1..{_MAX_TOKENS}"
    except ValueError:
        ok, allowed = False, "a number" if column == "arrival_s" else "an integer token count"
    if not ok:
        raise ValueError(f"{path}:{line}: column {column}: must be {allowed}, got {shown(text)}")
    return value


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


@dataclass(frozen=True, kw_only=True, slots=True)
class LatencyStats:
    """Mean and percentiles (numpy's linear interpolation) of one latency over the requests, seconds; NaN when
    no request has the metric."""

    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float

    @classmethod
    def of(cls, values: np.ndarray) -> LatencyStats:
        v = values[np.isfinite(values)]
        if not v.size:
            return cls(mean_s=math.nan, p50_s=math.nan, p90_s=math.nan, p99_s=math.nan)
        p50, p90, p99 = np.percentile(v, [50, 90, 99]).tolist()
        return cls(mean_s=float(v.mean()), p50_s=p50, p90_s=p90, p99_s=p99)


@dataclass(frozen=True, kw_only=True, slots=True)
class SimResult:
    """What a serving simulation produced. Times in seconds from the simulation's start.

    ``requests``: one row per request (``REQUEST_COLUMNS``): id (int, position in arrival order), arrival_s,
    input_tokens, output_tokens, first_token_s, finish_s, ttft_s = first_token_s - arrival_s, tpot_s =
    (finish_s - first_token_s) / (output_tokens - 1) (null for one output token), e2e_s = finish_s - arrival_s,
    preemptions (int), engine (the engine that produced the last token), prefill_engine (the engine of the first
    prefill).

    ``iterations``: one row per engine iteration in start order per engine (``ITERATION_COLUMNS``): engine,
    iteration (index on that engine), start_s, end_s, num_prefill_tokens (prompt tokens computed), num_decode_seqs,
    kv_used_tokens (tokens in the KV of the running requests during the iteration, without the round-up to whole
    blocks), kv_capacity_tokens, waiting (queue length when the iteration, or the decode run holding it, was
    scheduled).
    """

    requests: pl.DataFrame
    iterations: pl.DataFrame
    ttft: LatencyStats
    tpot: LatencyStats
    e2e: LatencyStats
    duration_s: float
    """From the first arrival to the last finish."""
    output_tokens_per_s: float
    """All output tokens over ``duration_s``."""
    requests_per_s: float
    """Requests over ``duration_s``."""
    num_preemptions: int

    def summary(self) -> dict[str, float]:
        """Plain numbers: ``ttft_s_p50`` ... ``e2e_s_mean``, throughputs, duration and preemptions."""
        out: dict[str, float] = {}
        for name in ("ttft", "tpot", "e2e"):
            stats: LatencyStats = getattr(self, name)
            for q in ("mean", "p50", "p90", "p99"):
                out[f"{name}_s_{q}"] = getattr(stats, f"{q}_s")
        out |= {
            "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "duration_s": self.duration_s,
            "num_preemptions": self.num_preemptions,
        }
        return out

    def timeline_rows(self) -> pl.DataFrame:
        """The iterations in the training timeline's layout (``workbench.specs.estimate.TIMELINE_COLUMNS``):
        rank = engine, stage = chunk = 0, microbatch = iteration, op = ``prefill``, ``decode`` or ``mixed``,
        start_s, end_s."""
        it = self.iterations
        op = (
            pl.when(pl.col("num_decode_seqs") == 0)
            .then(pl.lit("prefill"))
            .when(pl.col("num_prefill_tokens") == 0)
            .then(pl.lit("decode"))
            .otherwise(pl.lit("mixed"))
        )
        return it.select(
            pl.col("engine").alias("rank"),
            pl.lit(0, dtype=pl.Int64).alias("stage"),
            pl.lit(0, dtype=pl.Int64).alias("chunk"),
            pl.col("iteration").alias("microbatch"),
            op.alias("op"),
            "start_s",
            "end_s",
        ).select(TIMELINE_COLUMNS)


class _Engine:
    """One engine's scheduler state. Every running decode advances in every iteration, so the decodes share a
    counter ``steps`` (decode iterations run). The decodes are the columns of ``d`` (3 x n int64), sorted by their
    first row so the next to finish lead: ``d[0]`` the value of ``steps`` after the iteration that emits the
    request's last token, ``d[1]`` the request id, ``d[2]`` the offset whose sum with ``steps`` is the KV length of
    its next decode (the token it feeds included). Prefills in progress are a short list."""

    __slots__ = (
        "index", "cost", "prefill_only", "block", "cap_blocks", "d", "n", "off_sum", "steps", "next_end",
        "decoding", "head", "prefilling", "pf_blocks", "waiting", "busy", "gen", "k", "start", "t0", "slope",
        "row", "load",
    )  # fmt: skip

    def __init__(self, index: int, cost: IterationCost, prefill_only: bool) -> None:
        self.index, self.cost, self.prefill_only = index, cost, prefill_only
        where = f"{type(cost).__name__} of engine {index}"
        block, capacity = (_plain_int(v) for v in (cost.kv_block_tokens, cost.kv_capacity_tokens))
        self.block = check_count(where, "kv_block_tokens", block, maximum=_MAX_TOKENS)
        capacity = check_count(where, "kv_capacity_tokens", capacity, minimum=0, maximum=1 << 62)
        self.cap_blocks = capacity // self.block
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

    def drop_finished(self) -> np.ndarray:
        """Remove the decodes whose last token came with the iteration that reached ``steps``; their ids."""
        d = self.d
        c = int(d[0].searchsorted(self.steps, side="right"))
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
        off = [c - steps for c in ctx]
        self.off_sum += sum(off)
        cols = np.array([[x + steps for x in left], ids, off], dtype=np.int64)
        d = self.d
        if len(ids) == 1:  # the common case: one insertion after the equal ends
            pos = int(d[0].searchsorted(cols[0, 0], side="right"))
            self.d = np.concatenate((d[:, :pos], cols, d[:, pos:]), axis=1)
        else:
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


_ROW_FIELDS = 9  # engine, start_s, k, t0, slope, prefill tokens, decode seqs, kv tokens, waiting


class _Sim:
    """The event loop; handlers mutate engine state and push events on ``self.heap``."""

    def __init__(
        self,
        requests: Requests,
        engines: list[_Engine],
        pools: tuple[list[_Engine], list[_Engine]],
        *,
        chunked: bool,
        prefill_first: bool,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        router: str,
        max_run_iterations: int,
    ) -> None:
        n = len(requests)
        self.req = requests
        self.prompt = requests.input_tokens.tolist()
        self.out = requests.output_tokens.tolist()
        self.arrival = requests.arrival_s.copy()
        self.engines, self.pools = engines, pools
        self.chunked, self.max_seqs, self.max_tokens = chunked, max_num_seqs, max_num_batched_tokens
        self.prefill_first = prefill_first
        self.least_loaded = router == "least_loaded"
        self.max_run = max_run_iterations
        self.rr = [0, 0]
        self.generated = [0] * n
        self.kv_ready = [False] * n
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.engine_of = np.full(n, -1, dtype=np.int64)
        self.prefill_engine_of = np.full(n, -1, dtype=np.int64)
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.next_closed = n if requests.concurrency is None else requests.concurrency
        self.rows = array("d")  # _ROW_FIELDS numbers per started batch (a head iteration or a decode run)

    # ---- events ----
    def push(self, time_s: float, priority: int, a: int, b: int) -> None:
        """priority 0: a KV hand-off (request a to engine b); 1: engine a's step of generation b."""
        self.seq += 1
        heapq.heappush(self.heap, (time_s, priority, self.seq, a, b))

    def run(self) -> None:
        """Process arrivals (known ones from a pointer, before heap events at the same time) and heap events in
        time order until nothing is left."""
        arrival, heap, engines = self.arrival.tolist(), self.heap, self.engines
        route, complete, schedule, pop = self.route, self.complete, self.schedule, heapq.heappop
        n_known, ptr = self.next_closed, 0
        while True:
            if ptr < n_known and (not heap or arrival[ptr] <= heap[0][0]):
                route(ptr, arrival[ptr], 0)
                ptr += 1
                continue
            if not heap:
                return
            t, priority, _, a, b = pop(heap)
            if priority == 0:
                self.kv_ready[a] = True
                self.enqueue(engines[b], a, t)
                continue
            eng = engines[a]
            if b == eng.gen:
                complete(eng, t)
                schedule(eng, t)

    def pick(self, pool_index: int) -> _Engine:
        """The engine of pool 0 (arrivals) or 1 (hand-offs) that takes the next request; counts it on it."""
        pool = self.pools[pool_index]
        if len(pool) == 1:
            eng = pool[0]
        elif self.least_loaded:
            eng = min(pool, key=lambda e: e.load)
        else:
            k = self.rr[pool_index]
            self.rr[pool_index] = k + 1
            eng = pool[k % len(pool)]
        eng.load += 1
        return eng

    def route(self, i: int, t: float, pool_index: int) -> None:
        eng = self.pick(pool_index)
        if pool_index == 0:
            self.prefill_engine_of[i] = eng.index
        self.enqueue(eng, i, t)

    def enqueue(self, eng: _Engine, i: int, t: float) -> None:
        self.engine_of[i] = eng.index
        heapq.heappush(eng.waiting, i)
        if not eng.busy:
            eng.busy = True
            eng.gen += 1
            self.push(t, 1, eng.index, eng.gen)
        elif eng.k > 1 and eng.waiting[0] == i and eng.n + len(eng.prefilling) < self.max_seqs:
            # a new queue head may be admitted at the next iteration (a blocked head stays blocked in a run)
            self.truncate(eng, t)

    def truncate(self, eng: _Engine, t: float) -> None:
        """Cut a decode run after its first iteration that ends at or after ``t``."""
        k, t0, slope = eng.k, eng.t0, eng.slope
        elapsed = t - eng.start

        def ends(x: int) -> float:  # end of the x-th iteration, from the run's start
            return x * t0 + slope * x * (x - 1) / 2

        if slope:
            b = t0 - slope / 2
            x = math.ceil((-b + math.sqrt(max(b * b + 2 * slope * elapsed, 0.0))) / slope)
        else:
            x = math.ceil(elapsed / t0) if t0 > 0 else 1
        x = min(max(x, 1), k)
        while x > 1 and ends(x - 1) >= elapsed:
            x -= 1
        while x < k and ends(x) < elapsed:
            x += 1
        if x < k:
            eng.k = x
            self.rows[eng.row + 2] = x
            eng.gen += 1
            self.push(eng.start + ends(x), 1, eng.index, eng.gen)

    # ---- one engine step: finish the work in flight, then schedule the next ----
    def complete(self, eng: _Engine, t: float) -> None:
        """Apply the work in flight that ends at ``t``: a head iteration or a decode run."""
        finished = 0
        if eng.head:
            eng.head = False
            if eng.decoding:
                eng.steps += 1
            if eng.prefilling:
                finished = self.complete_prefills(eng, t)
        elif eng.k:
            eng.steps += eng.k
        eng.k = 0
        if eng.steps == eng.next_end:
            done = eng.drop_finished()
            self.finish[done] = t
            finished += done.size
        if finished:
            eng.load -= finished
            if self.next_closed < len(self.prompt):
                self.closed_loop_arrivals(finished, t)

    def complete_prefills(self, eng: _Engine, t: float) -> int:
        """Advance the prefills of the head iteration that ended at ``t``; completed ones emit a token and decode
        (here or, on a prefill engine, after the KV hand-off) unless that was their last. Returns how many
        finished."""
        finished = 0
        new_ids: list[int] = []
        new_ctx: list[int] = []
        new_left: list[int] = []
        still = []
        for entry in eng.prefilling:
            i, c, done, blocks, chunk = entry
            if done + chunk < c:
                entry[2] += chunk
                still.append(entry)
                continue
            eng.pf_blocks -= blocks
            m = c - self.prompt[i] + 1
            self.generated[i] = m
            if m == 1:
                self.first_token[i] = t
            if m >= self.out[i]:
                self.finish[i] = t
                finished += 1
            elif eng.prefill_only:
                eng.load -= 1
                dest = self.pick(1)
                self.push(t + eng.cost.kv_transfer_s(c), 0, i, dest.index)
            else:
                new_ids.append(i)
                new_ctx.append(c + 1)
                new_left.append(self.out[i] - m)
        eng.prefilling = still
        if new_ids:
            eng.add_decodes(new_ids, new_ctx, new_left)
        return finished

    def closed_loop_arrivals(self, num_finished: int, t: float) -> None:
        n = len(self.prompt)
        for _ in range(num_finished):
            if self.next_closed >= n:
                return
            i = self.next_closed
            self.next_closed += 1
            self.arrival[i] = t
            self.route(i, t, 0)

    def preempt_youngest(self, eng: _Engine) -> None:
        young_pf = max((e[0] for e in eng.prefilling), default=-1)
        young_d = int(eng.d[1].max()) if eng.n else -1
        if young_pf > young_d:
            entry = next(e for e in eng.prefilling if e[0] == young_pf)
            eng.prefilling.remove(entry)
            eng.pf_blocks -= entry[3]
            i = young_pf
        else:
            j = int(eng.d[1].argmax())
            i = young_d
            self.generated[i] = self.out[i] - (int(eng.d[0, j]) - eng.steps)
            eng.drop(j)
        self.kv_ready[i] = False
        self.preemptions[i] += 1
        heapq.heappush(eng.waiting, i)

    def schedule(self, eng: _Engine, t: float) -> None:
        """Compose the engine's next batch at ``t`` (module docstring) and start it; idle when there is none."""
        if self.prefill_first and eng.waiting:
            new_tokens: list[int] = []
            context: list[int] = []
            self.admit(eng, -1, self.max_tokens, new_tokens, context, False)
            if new_tokens:
                self.start_head(eng, t, new_tokens, context, False)
                return
        used = eng.blocks_needed(exact=False)
        preempted = used > eng.cap_blocks
        while used > eng.cap_blocks:
            self.preempt_youngest(eng)
            used = eng.blocks_needed()
        new_tokens = []
        context = []
        if eng.prefilling:  # partial prefills first (chunked prefill only)
            budget = self.max_tokens - eng.n
            for entry in eng.prefilling:
                entry[4] = chunk = min(entry[1] - entry[2], budget)
                if chunk:
                    budget -= chunk
                    new_tokens.append(chunk)
                    context.append(entry[2])
        if eng.waiting and not preempted and not self.prefill_first:
            budget = self.max_tokens - eng.n - sum(new_tokens)
            self.admit(eng, 0, budget, new_tokens, context, True)
        if new_tokens:
            self.start_head(eng, t, new_tokens, context, True)
        elif eng.n:
            self.start_run(eng, t, preempted)
        else:
            eng.busy = False

    def start_head(
        self, eng: _Engine, t: float, new_tokens: list[int], context: list[int], decoding: bool
    ) -> None:
        """Start one iteration with prefill chunks (and the running decodes when ``decoding``): price it, record
        its row, push the engine's next event."""
        n = eng.n
        eng.decoding = decoding and n > 0
        eng.next_end = int(eng.d[0, 0]) if n else -1
        eng.start, eng.head, eng.k = t, True, 0
        kv_tokens = eng.off_sum + n * eng.steps - (0 if decoding else n)
        kv_tokens += sum(e[2] + e[4] for e in eng.prefilling)
        ctx = eng.d[2] + eng.steps if eng.decoding else _EMPTY
        head_s = eng.cost.iteration_s(np.array(new_tokens), np.array(context), ctx)
        if not 0.0 <= head_s < math.inf:
            self.bad_time(eng, head_s)
        num_decode = n if eng.decoding else 0
        self.rows.extend(
            (eng.index, t, 1, head_s, 0.0, sum(new_tokens), num_decode, kv_tokens, len(eng.waiting))
        )
        eng.gen += 1
        self.push(t + head_s, 1, eng.index, eng.gen)

    def start_run(self, eng: _Engine, t: float, preempted: bool) -> None:
        """Start a run of decode-only iterations up to the next event that changes the batch (the first finish,
        the KV pool running out; one iteration after a preemption), priced at both ends and interpolated."""
        n, steps, b = eng.n, eng.steps, eng.block
        ctx = eng.d[2] + steps
        ctx_sum = eng.off_sum + n * steps
        eng.next_end = end = int(eng.d[0, 0])
        eng.start, eng.head, eng.decoding = t, False, True
        k = 1 if preempted else min(end - steps, self.max_run)
        cap = eng.cap_blocks - eng.pf_blocks
        if k > 1 and (ctx_sum + n * (k + b - 2)) // b > cap and int(_sum((ctx + (k + b - 2)) // b)) > cap:
            lo, hi = 0, k - 1  # the iteration lo fits, hi does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if int(_sum((ctx + (mid + b - 1)) // b)) <= cap else (lo, mid)
            k = hi
        cost = eng.cost
        t0 = cost.iteration_s(_EMPTY, _EMPTY, ctx)
        t1 = cost.iteration_s(_EMPTY, _EMPTY, ctx + (k - 1)) if k > 1 else t0
        if not (0.0 <= t0 < math.inf and 0.0 <= t1 < math.inf):
            self.bad_time(eng, t1 if 0.0 <= t0 < math.inf else t0)
        slope = (t1 - t0) / (k - 1) if k > 1 else 0.0
        eng.k, eng.t0, eng.slope = k, t0, slope
        eng.row = len(self.rows)
        self.rows.extend((eng.index, t, k, t0, slope, 0, n, ctx_sum, len(eng.waiting)))
        eng.gen += 1
        self.push(t + k * t0 + slope * k * (k - 1) / 2, 1, eng.index, eng.gen)

    def bad_time(self, eng: _Engine, value: float) -> None:
        raise ValueError(
            f"engine {eng.index}: iteration_s returned {value!r}; it must be a finite number >= 0"
        )

    def admit(
        self,
        eng: _Engine,
        extra: int,
        budget: int,
        new_tokens: list[int],
        context: list[int],
        with_decodes: bool,
    ) -> None:
        """Admit waiting requests FCFS while a slot, KV blocks (beside what the running requests hold in the decode
        iteration ``extra`` from now: -1 now, 0 this iteration) and token budget remain; prefills go to
        ``new_tokens``/``context`` and ``eng.prefilling``, hand-offs to the decodes."""
        held, pf0 = eng.blocks_needed(extra, exact=False), eng.pf_blocks
        free = eng.cap_blocks - held
        exact = held == pf0  # no decodes: the count is exact
        slots = self.max_seqs - eng.n - len(eng.prefilling)
        waiting, b = eng.waiting, eng.block
        ids: list[int] = []
        ctx: list[int] = []
        left: list[int] = []
        while waiting and slots > 0 and budget > 0:
            i = waiting[0]
            c = self.prompt[i] + self.generated[i]
            blocks = -(-c // b)
            if self.kv_ready[i]:  # a hand-off: its KV is here, it decodes at once
                chunk = 0
            else:
                chunk = min(c, budget) if self.chunked else c
                if chunk > budget and (new_tokens or ids or (with_decodes and eng.n)):
                    break
            if blocks > free:
                if exact:
                    break
                exact = True  # the bound was too coarse: count the blocks the decodes hold
                free += (held - pf0) - (eng.blocks_needed(extra) - eng.pf_blocks)
                if blocks > free:
                    break
            heapq.heappop(waiting)
            free -= blocks
            slots -= 1
            if chunk:
                budget -= chunk
                eng.prefilling.append([i, c, 0, blocks, chunk])
                eng.pf_blocks += blocks
                new_tokens.append(chunk)
                context.append(0)
            else:
                budget -= 1
                ids.append(i)
                ctx.append(c)
                left.append(self.out[i] - self.generated[i])
        if ids:
            eng.add_decodes(ids, ctx, left)

    # ---- tables ----
    def result(self) -> SimResult:
        req = self.req
        out_tokens = req.output_tokens
        ttft = self.first_token - self.arrival
        e2e = self.finish - self.arrival
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(out_tokens > 1, (self.finish - self.first_token) / (out_tokens - 1), np.nan)
        requests = pl.DataFrame(
            {
                "id": np.arange(len(req), dtype=np.int64),
                "arrival_s": self.arrival,
                "input_tokens": req.input_tokens,
                "output_tokens": out_tokens,
                "first_token_s": self.first_token,
                "finish_s": self.finish,
                "ttft_s": ttft,
                "tpot_s": tpot,
                "e2e_s": e2e,
                "preemptions": self.preemptions,
                "engine": self.engine_of,
                "prefill_engine": self.prefill_engine_of,
            }
        ).with_columns(pl.col("tpot_s").fill_nan(None))
        duration = float(self.finish.max() - self.arrival.min()) if len(req) else 0.0
        rate = 1.0 / duration if duration > 0 else math.nan
        return SimResult(
            requests=requests,
            iterations=self.iteration_table(),
            ttft=LatencyStats.of(ttft),
            tpot=LatencyStats.of(tpot),
            e2e=LatencyStats.of(e2e),
            duration_s=duration,
            output_tokens_per_s=float(out_tokens.sum()) * rate,
            requests_per_s=len(req) * rate,
            num_preemptions=int(self.preemptions.sum()),
        )

    def iteration_table(self) -> pl.DataFrame:
        """One row per iteration: a decode run of k iterations expands to k rows (times from its t0 and slope)."""
        table = np.array(self.rows, dtype=np.float64).reshape(-1, _ROW_FIELDS)  # a copy of the buffer
        table = table[np.argsort(table[:, 0], kind="stable")]  # per engine, rows are already in time order
        engine, k, prefill, decode, kv, waiting = (table[:, c].astype(np.int64) for c in (0, 2, 5, 6, 7, 8))
        start, t0, slope = table[:, 1], table[:, 3], table[:, 4]
        row = np.repeat(np.arange(len(k)), k)
        j = np.arange(row.size) - np.repeat(np.cumsum(k) - k, k)
        jf = j.astype(np.float64)
        begin = start[row] + jf * t0[row] + slope[row] * jf * (jf - 1) / 2
        cap = np.array([e.cap_blocks * e.block for e in self.engines], dtype=np.int64)
        engine_r = engine[row]
        counts = np.bincount(engine_r, minlength=len(self.engines))
        return pl.DataFrame(
            {
                "engine": engine_r,
                "iteration": np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts),
                "start_s": begin,
                "end_s": begin + t0[row] + slope[row] * jf,
                "num_prefill_tokens": prefill[row],
                "num_decode_seqs": decode[row],
                "kv_used_tokens": kv[row] + j * decode[row],
                "kv_capacity_tokens": cap[engine_r],
                "waiting": waiting[row],
            }
        )


def _check_fits(requests: Requests, engines: Sequence[_Engine], *, decode: bool, name: str) -> None:
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


def simulate(
    requests: Requests,
    cost: IterationCost,
    *,
    policy: str = "vllm",
    max_num_seqs: int,
    max_num_batched_tokens: int,
    chunked_prefill: bool | None = None,
    replicas: int = 1,
    router: str = "round_robin",
    disaggregation: DisaggregatedPools | None = None,
    max_run_iterations: int = 1 << 20,
) -> SimResult:
    """Simulate serving ``requests`` on ``replicas`` engines priced by ``cost`` (module docstring for the rules).

    policy: one of ``POLICIES`` (module docstring). chunked_prefill: None means the policy's own (off under
    ``vllm``, on under ``sarathi``); on under ``vllm`` it runs Sarathi's rules (vLLM's chunked-prefill scheduler is
    stall-free batching). max_num_seqs: running requests per engine; max_num_batched_tokens: tokens per iteration
    (a decode counts 1), >= max_num_seqs. replicas: identical engines (1 with ``disaggregation``, whose pools
    replace them). router: one of ``ROUTERS``. max_run_iterations: most decode iterations priced as one run (1:
    each priced on its own).

    Returns a :class:`SimResult` (per-request and per-iteration tables, latency percentiles, throughputs).
    Raises ValueError for an unknown policy or router, counts out of range, a prompt longer than
    max_num_batched_tokens without chunked prefill (vLLM refuses those), a cost whose KV block or capacity is not
    a whole number of tokens (block >= 1), a request that never fits an engine's KV cache, or a cost whose
    iteration time is not finite and >= 0.
    """
    if policy not in POLICIES:
        raise ValueError(f"simulate: policy must be one of {', '.join(POLICIES)}; got {shown(policy)}")
    if router not in ROUTERS:
        raise ValueError(f"simulate: router must be one of {', '.join(ROUTERS)}; got {shown(router)}")
    chunked = (policy == Scheduler.SARATHI) if chunked_prefill is None else bool(chunked_prefill)
    prefill_first = policy == Scheduler.VLLM and not chunked
    check_count("simulate", "max_num_seqs", max_num_seqs, maximum=_MAX_TOKENS)
    check_count(
        "simulate",
        "max_num_batched_tokens",
        max_num_batched_tokens,
        minimum=max_num_seqs,
        maximum=_MAX_TOKENS,
    )
    check_count("simulate", "replicas", replicas, maximum=1 if disaggregation else 2**16)
    check_count("simulate", "max_run_iterations", max_run_iterations, maximum=1 << 40)
    if not chunked and len(requests) and int(requests.input_tokens.max()) > max_num_batched_tokens:
        i = int(requests.input_tokens.argmax())
        raise ValueError(
            f"simulate: request {i} has a {int(requests.input_tokens[i])}-token prompt, more than "
            f"max_num_batched_tokens = {max_num_batched_tokens}; turn chunked_prefill on or raise the budget"
        )
    if disaggregation is None:
        engines = [_Engine(e, cost, False) for e in range(replicas)]
        pools = (engines, engines)
        _check_fits(requests, engines, decode=True, name="serving")
    else:
        pc, dc = disaggregation.prefill_cost or cost, disaggregation.decode_cost or cost
        num_p = disaggregation.num_prefill_engines
        prefill = [_Engine(e, pc, True) for e in range(num_p)]
        decode = [_Engine(num_p + e, dc, False) for e in range(disaggregation.num_decode_engines)]
        engines, pools = prefill + decode, (prefill, decode)
        _check_fits(requests, prefill, decode=False, name="prefill")
        _check_fits(requests, decode, decode=True, name="decode")
    sim = _Sim(
        requests,
        engines,
        pools,
        chunked=chunked,
        prefill_first=prefill_first,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        router=router,
        max_run_iterations=max_run_iterations,
    )
    sim.run()
    return sim.result()
