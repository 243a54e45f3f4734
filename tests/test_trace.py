"""Chrome Trace Event export: well-formed X events in microseconds, named rows, no overlap on a row."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from workbench.pipeline.schedules import build_schedule
from workbench.pipeline.simulate import StageCosts, simulate
from workbench.pipeline.trace import chrome_trace, write_chrome_trace


def _result(p2p_s: float):
    s = build_schedule("zbv", pp=4, num_microbatches=8)
    return simulate(
        s,
        StageCosts.uniform(
            num_stages=8, vpp=2, forward_s=1e-3, backward_s=2e-3, backward_weight_s=1e-3, p2p_s=p2p_s
        ),
    )


@pytest.mark.parametrize("p2p_s", [0.0, 3e-3])
def test_trace_events(p2p_s: float) -> None:
    r = _result(p2p_s)
    trace = chrome_trace(r.timeline, name="zbv", comm=r.comm)
    events = trace["traceEvents"]
    blocks = [e for e in events if e["ph"] == "X"]
    compute = [e for e in blocks if e["tid"] == 0]
    assert len(compute) == r.timeline.height
    assert max(e["ts"] + e["dur"] for e in compute) == pytest.approx(r.makespan_s * 1e6)
    names = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    rows: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in blocks:
        assert {"name", "cat", "pid", "tid", "ts", "dur", "args"} <= e.keys()
        assert (e["pid"], e["tid"]) in names
        rows[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in rows.values():
        spans.sort()
        assert all(
            a_end <= b_start + 1e-6 for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False)
        )
    if p2p_s:
        assert any(e["tid"] > 0 for e in blocks)
        assert len(names) > 4  # p2p sends of 3 ms overlap each other and need several rows


def test_write_refuses_overwrite(tmp_path) -> None:
    r = _result(0.0)
    path = write_chrome_trace(chrome_trace(r.timeline), tmp_path / "t.json")
    assert json.loads(path.read_text())["traceEvents"]
    with pytest.raises(FileExistsError, match="t.json"):
        write_chrome_trace(chrome_trace(r.timeline), path)
    write_chrome_trace(chrome_trace(r.timeline), path, force=True)
    with pytest.raises(ValueError, match="traceEvents"):
        write_chrome_trace({}, tmp_path / "x.json")


def test_missing_columns() -> None:
    with pytest.raises(ValueError, match="missing columns"):
        chrome_trace(_result(0.0).timeline.drop("op"))
