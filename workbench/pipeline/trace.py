"""Chrome Trace Event Format export of a simulated timeline (opens in Perfetto and chrome://tracing).

One process per pipeline rank; thread 0 holds its compute blocks, threads 1.. its outgoing p2p
transfers (as many rows as needed so that blocks on one row never overlap). Blocks are complete
events (``ph: "X"``) with ``ts``/``dur`` in microseconds; rows are named with ``ph: "M"`` metadata.
Format: Google, "Trace Event Format" (docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

_US_PER_S = 1e6
_OP_NAMES = {"F": "forward", "B": "backward", "I": "backward-input", "W": "backward-weight"}


def chrome_trace(
    timeline: pl.DataFrame, *, name: str = "pipeline", comm: pl.DataFrame | None = None
) -> dict[str, Any]:
    """Trace dict ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"name": name}}``.

    ``timeline``: columns rank, stage, chunk, microbatch, op, start_s, end_s (``SimResult.timeline``).
    ``comm``: optional ``SimResult.comm`` (src_rank, dst_rank, stage, microbatch, op, start_s, end_s),
    drawn on the sender's communication rows. Raises ValueError naming missing columns.
    """
    _require(timeline, ("rank", "stage", "chunk", "microbatch", "op", "start_s", "end_s"), "timeline")
    events: list[dict[str, Any]] = []
    ranks = sorted(set(timeline["rank"].to_list()))
    for rank in ranks:
        events.append(
            {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}}
        )
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": 0, "args": {"name": "compute"}})
    for row in timeline.iter_rows(named=True):
        events.append(
            {
                "ph": "X",
                "name": f"{row['stage']}{row['op']}{row['microbatch']}",
                "cat": _OP_NAMES.get(row["op"], row["op"]),
                "pid": row["rank"],
                "tid": 0,
                "ts": row["start_s"] * _US_PER_S,
                "dur": (row["end_s"] - row["start_s"]) * _US_PER_S,
                "args": {"stage": row["stage"], "chunk": row["chunk"], "microbatch": row["microbatch"]},
            }
        )
    if comm is not None and comm.height:
        _require(comm, ("src_rank", "dst_rank", "stage", "microbatch", "op", "start_s", "end_s"), "comm")
        events.extend(_comm_events(comm))
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"name": name}}


def _comm_events(comm: pl.DataFrame) -> list[dict[str, Any]]:
    """Sends on rows ``tid`` 1.., each send on the first row of its rank that is free at its start."""
    events: list[dict[str, Any]] = []
    lanes: dict[int, list[float]] = {}
    for row in comm.sort(["src_rank", "start_s"]).iter_rows(named=True):
        ends = lanes.setdefault(row["src_rank"], [])
        lane = next((k for k, busy_until in enumerate(ends) if busy_until <= row["start_s"]), len(ends))
        if lane == len(ends):
            ends.append(0.0)
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": row["src_rank"],
                    "tid": lane + 1,
                    "args": {"name": f"p2p send {lane}"},
                }
            )
        ends[lane] = row["end_s"]
        kind = "activations" if row["op"] == "F" else "gradients"
        events.append(
            {
                "ph": "X",
                "name": f"send {kind} mb{row['microbatch']} -> rank {row['dst_rank']}",
                "cat": "p2p",
                "pid": row["src_rank"],
                "tid": lane + 1,
                "ts": row["start_s"] * _US_PER_S,
                "dur": (row["end_s"] - row["start_s"]) * _US_PER_S,
                "args": {
                    "to_stage": row["stage"],
                    "microbatch": row["microbatch"],
                    "dst_rank": row["dst_rank"],
                },
            }
        )
    return events


def _require(frame: pl.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing}; it needs {list(columns)}")


def write_chrome_trace(trace: dict[str, Any], path: str | Path, *, force: bool = False) -> Path:
    """Write ``trace`` as JSON to ``path``. Raises FileExistsError naming the path if it exists and
    ``force`` is False, ValueError if ``trace`` has no ``traceEvents`` list."""
    if not isinstance(trace.get("traceEvents"), list):
        raise ValueError("trace must be a dict with a 'traceEvents' list (see chrome_trace)")
    path = Path(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path} already exists; pass force=True (--force) to overwrite it")
    path.write_text(json.dumps(trace))
    return path
