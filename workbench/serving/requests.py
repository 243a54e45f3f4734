"""The requests of a serving simulation: arrival times and prompt/output lengths, built offline, closed-loop,
Poisson or from a trace CSV (``arrival_s,input_tokens,output_tokens``)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.specs.files import check_input_file
from workbench.specs.limits import MAX_CSV_FIELD_CHARS, MAX_SIMULATED_REQUESTS, check_count, check_real, shown

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

MAX_TOKENS = 2**31
"""Largest prompt or output length of one request, tokens."""

_TRACE_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")


def _token_array(where: str, field: str, value: ArrayLike, n: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 0:
        arr = np.full(n, arr)
    if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"{where}: {field} must be an integer or {n} integers, got shape {arr.shape} {arr.dtype}"
        )
    bad = np.flatnonzero((arr < 1) | (arr > MAX_TOKENS))
    if bad.size:
        raise ValueError(f"{where}: {field}[{bad[0]}] must be in 1..{MAX_TOKENS}, got {arr[bad[0]]}")
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
        check_count("Requests.offline", "num_requests", num_requests, maximum=MAX_TOKENS)
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
        check_count("Requests.poisson", "num_requests", num_requests, maximum=MAX_TOKENS)
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, num_requests)
        return cls._of("Requests.poisson", np.cumsum(gaps), input_tokens, output_tokens)

    @classmethod
    def closed_loop(
        cls,
        concurrency: int,
        num_requests: int,
        *,
        input_tokens: ArrayLike,
        output_tokens: ArrayLike,
        ramp_s: float = 0.0,
    ) -> Requests:
        """Closed loop: ``concurrency`` clients send their first request at i x ramp_s / concurrency (i = 0, 1,
        ...; all at 0 s by default), then each sends a new one whenever its request finishes (no think time). A
        ramp of about one request's duration desynchronises the clients as benchmark clients that start one after
        another do, so equal-length requests do not finish in lock-step waves."""
        check_count("Requests.closed_loop", "num_requests", num_requests, maximum=MAX_TOKENS)
        ramp = check_real("Requests.closed_loop", "ramp_s", ramp_s, minimum=0.0, min_open=False, unit="s")
        arrival = np.zeros(num_requests)
        first = min(concurrency, num_requests) if isinstance(concurrency, int) and concurrency > 0 else 0
        if ramp and first:
            arrival[:first] = np.arange(first) * (ramp / concurrency)
            arrival[first:] = arrival[first - 1]
        return cls._of("Requests.closed_loop", arrival, input_tokens, output_tokens, concurrency)

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
        if (
            row and len(values[0]) >= MAX_SIMULATED_REQUESTS
        ):  # stop reading: a huge trace costs time and memory
            raise ValueError(
                f"{p}:{rows.line_num}: more than {MAX_SIMULATED_REQUESTS:,} requests; at most "
                f"{MAX_SIMULATED_REQUESTS:,} (MAX_SIMULATED_REQUESTS in workbench/specs/limits.py)"
            )
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
            ok = 1 <= value <= MAX_TOKENS
            allowed = f"an integer in 1..{MAX_TOKENS}"
    except ValueError:
        ok, allowed = False, "a number" if column == "arrival_s" else "an integer token count"
    if not ok:
        raise ValueError(f"{path}:{line}: column {column}: must be {allowed}, got {shown(text)}")
    return value
