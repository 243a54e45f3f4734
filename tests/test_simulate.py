"""Timeline simulator: closed forms from the papers, memory peaks, deadlocks and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.pipeline.schedules import (
    SCHEDULE_NAMES,
    Action,
    build_schedule,
    default_vpp,
    schedule_rule_violations,
)
from workbench.pipeline.schedules.actions import schedule_from_rows
from workbench.pipeline.simulate import StageCosts, simulate


def run(name: str, pp: int, m: int, vpp: int | None = None, *, f=1.0, b=2.0, w=1.0, p2p=0.0):
    s = build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp)
    costs = StageCosts.uniform(
        num_stages=s.num_stages, vpp=s.vpp, forward_s=f, backward_s=b, backward_weight_s=w, p2p_s=p2p
    )
    return simulate(s, costs)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 13), (8, 32)])
def test_gpipe_and_1f1b_bubble(pp: int, m: int) -> None:
    # GPipe arXiv:1811.06965; Megatron-LM arXiv:2104.04473 Sec. 2.2.1: (p-1)/(m+p-1) of the step
    for name in ("gpipe", "1f1b"):
        r = run(name, pp, m)
        assert r.bubble_fraction_of_step == pytest.approx((pp - 1) / (m + pp - 1))
        assert r.bubble_over_ideal == pytest.approx((pp - 1) / m)
    assert run("1f1b", pp, m).peak_inflight_per_rank == tuple(float(pp - i) for i in range(pp))
    assert run("gpipe", pp, m).peak_inflight_per_rank == (float(m),) * pp


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 2, 4), (4, 2, 8), (4, 3, 16), (8, 2, 16)])
def test_interleaved_bubble_and_peak(pp: int, vpp: int, m: int) -> None:
    # Megatron-LM arXiv:2104.04473 Sec. 2.2.2: (p-1)/(v*m+p-1); rank 0 holds p + (p-1)/v stages' worth
    r = run("interleaved-1f1b", pp, m, vpp)
    assert r.bubble_fraction_of_step == pytest.approx((pp - 1) / (vpp * m + pp - 1))
    assert r.peak_inflight_per_rank[0] == pytest.approx(pp + (pp - 1) / vpp)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (8, 16)])
def test_zero_bubble_closed_forms(pp: int, m: int) -> None:
    # Zero Bubble arXiv:2401.10241 Sec. 3: ZB-H1 idle (p-1)(T_F+T_I-T_W); ZB-H2 zero idle at T_F=T_I=T_W
    f, i_, w = 1.0, 1.5, 0.5
    r1 = run("zb-h1", pp, m, f=f, b=i_ + w, w=w)
    assert r1.idle_s == pytest.approx([(pp - 1) * (f + i_ - w)] * pp)
    assert r1.peak_inflight_per_rank[0] == pp
    r2 = run("zb-h2", pp, m, b=2.0, w=1.0)
    assert r2.idle_in_span_s == pytest.approx([0.0] * pp)
    assert r2.peak_inflight_per_rank[0] == 2 * pp - 1
    rv = run("zbv", pp, m, b=2.0, w=1.0)
    assert rv.idle_in_span_s == pytest.approx([0.0] * pp)
    assert rv.peak_inflight_per_rank[0] == pp


@pytest.mark.parametrize("pp", (2, 4, 6, 8))
def test_controllable_memory_and_dualpipev_peaks(pp: int) -> None:
    # Controllable Memory arXiv:2405.15362: V-Half floor((p+2)/2), V-Min floor((p+4)/3);
    # DeepSeek-V3 Table 2: DualPipe PP+1 stage activations; DualPipeV is DualPipe on PP = 2p
    # half-size stages, so (2p+1) chunks = (PP+1)/2 full-stage units.
    m = 4 * pp
    assert max(run("v-half", pp, m).peak_inflight_per_rank) == (pp + 2) // 2
    assert max(run("v-min", pp, m).peak_inflight_per_rank) == (pp + 4) // 3
    dv = run("dualpipev", pp, m)
    assert dv.peak_inflight_chunks_per_rank[0] == 2 * pp + 1
    assert dv.peak_inflight_per_rank[0] == pytest.approx((2 * pp + 1) / 2)
    assert run("v-half", pp, m).bubble_fraction_of_step < run("1f1b", pp, m).bubble_fraction_of_step


def test_p2p_latency_adds_to_critical_path() -> None:
    base, slow = run("1f1b", 4, 8), run("1f1b", 4, 8, p2p=0.25)
    # micro-batch 0 alone crosses 2(p-1) links before rank 0 can run its first B
    assert slow.makespan_s >= base.makespan_s + 2 * 3 * 0.25
    ref = _reference_ends(
        slow.schedule, StageCosts.uniform(num_stages=4, forward_s=1, backward_s=2, p2p_s=0.25)
    )
    assert slow.makespan_s == pytest.approx(max(ref.values()))
    assert slow.comm.height == 2 * 3 * 8
    assert run("1f1b", 4, 8).comm.height == 0


def test_timeline_schema_and_activation_bytes() -> None:
    s = build_schedule("zb-h1", pp=2, num_microbatches=4)
    costs = StageCosts.uniform(
        num_stages=2,
        forward_s=1,
        backward_s=2,
        backward_weight_s=1,
        activation_bytes=100.0,
        released_at_input_grad_frac=0.25,
    )
    r = simulate(s, costs)
    assert r.timeline.columns == ["rank", "stage", "chunk", "microbatch", "op", "start_s", "end_s"]
    assert r.timeline.height == s.num_actions
    assert r.peak_activation_bytes_per_rank[0] == pytest.approx(100.0 * r.peak_inflight_chunks_per_rank[0])
    assert r.inflight.group_by("rank").agg(last=__import__("polars").col("num_inflight").last())[
        "last"
    ].to_list() == [0, 0]


def test_deadlock_names_stuck_actions() -> None:
    rows = [
        [Action(0, "F", 0), Action(0, "B", 1), Action(0, "F", 1), Action(0, "B", 0)],
        [Action(1, "F", 1), Action(1, "F", 0), Action(1, "B", 0), Action(1, "B", 1)],
    ]
    s = schedule_from_rows(rows, name="bad")
    with pytest.raises(
        ValueError, match=r"deadlocks: rank 0 at 0B1 .* waits for 1B1.*rank 1 at 1F1 .* waits for 0F1"
    ):
        simulate(s, StageCosts.uniform(num_stages=2, forward_s=1, backward_s=2))


def test_costs_validation() -> None:
    with pytest.raises(ValueError, match="backward_s must hold 2"):
        StageCosts(forward_s=(1, 1), backward_s=(1,), backward_input_s=(1, 1), backward_weight_s=(0, 0))
    with pytest.raises(ValueError, match="p2p_s"):
        StageCosts.uniform(num_stages=2, forward_s=1, backward_s=2, p2p_s=-1)
    with pytest.raises(ValueError, match="StageCosts has 2 stages"):
        simulate(
            build_schedule("1f1b", pp=4, num_microbatches=4),
            StageCosts.uniform(num_stages=2, forward_s=1, backward_s=1),
        )


def _reference_ends(schedule, costs) -> dict:
    """Slow fixed-point reference: relax every action until nothing changes. A stage runs the cost entries of
    its pieces (``Schedule.pieces_of_stage``: two for each DualPipe stage, one otherwise)."""
    per_piece = {
        "F": costs.forward_s,
        "B": costs.backward_s,
        "I": costs.backward_input_s,
        "W": costs.backward_weight_s,
    }
    dur = {
        op: [sum(v[k] for k in schedule.pieces_of_stage(s)) for s in range(schedule.num_stages)]
        for op, v in per_piece.items()
    }
    key = {(a.stage, a.op, a.microbatch) for row in schedule.actions for a in row}

    def dependency(a):
        s, op, i = a
        if op == "F":
            return (s - 1, "F", i) if s > 0 else None
        if op == "W":
            return (s, "I", i)
        if s == schedule.num_stages - 1:
            return (s, "F", i)
        return (s + 1, "B", i) if (s + 1, "B", i) in key else (s + 1, "I", i)

    def ready(a, end):
        d = dependency(a)
        if d is None:
            return 0.0
        cross = schedule.stage_to_rank[d[0]] != schedule.stage_to_rank[a[0]]
        return end.get(d, 0.0) + (costs.p2p_s if cross else 0.0)

    end: dict = {}
    changed = True
    while changed:
        changed = False
        for r, row in enumerate(schedule.actions):
            openers = set(schedule.overlap_pairs[r]) if schedule.overlap_pairs else set()
            t = 0.0
            for j, a in enumerate(row):
                t = max(t, ready(a, end))
                if j in openers:  # an overlapped F&B pair starts as one unit: it waits for both inputs
                    t = max(t, ready(row[j + 1], end))
                t += dur[a.op][a.stage]
                if end.get(a) != t:
                    end[a], changed = t, True
    return end


VALID = [
    (n, p, m)
    for n in SCHEDULE_NAMES
    for p in (1, 2, 3, 4)
    for m in (1, 2, 3, 5, 8, 9)
    if not schedule_rule_violations(n, pp=p, vpp=default_vpp(n), num_microbatches=m)
]


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(VALID), data=st.data())
def test_properties(case, data) -> None:
    name, pp, m = case
    s = build_schedule(name, pp=pp, num_microbatches=m)
    n = s.num_stages
    times = st.floats(0.1, 3.0)
    f = data.draw(st.lists(times, min_size=n, max_size=n))
    i_ = data.draw(st.lists(times, min_size=n, max_size=n))
    w = data.draw(st.lists(times, min_size=n, max_size=n))
    p2p = data.draw(st.sampled_from([0.0, 0.3]))
    costs = StageCosts(
        forward_s=f,
        backward_s=[a + b for a, b in zip(i_, w, strict=True)],
        backward_input_s=i_,
        backward_weight_s=w,
        p2p_s=p2p,
    )
    r = simulate(s, costs)
    tl = r.timeline
    # every action once
    assert tl.height == s.num_actions == len(set(zip(tl["stage"], tl["op"], tl["microbatch"], strict=True)))
    # dependencies and per-rank order hold: equal to a slow fixed-point reference
    ref = _reference_ends(s, costs)
    for row in tl.iter_rows(named=True):
        assert row["end_s"] == pytest.approx(ref[(row["stage"], row["op"], row["microbatch"])])
    # scaling all durations by k scales the makespan by k
    k = 2.5
    scaled = StageCosts(
        forward_s=[x * k for x in costs.forward_s],
        backward_s=[x * k for x in costs.backward_s],
        backward_input_s=[x * k for x in costs.backward_input_s],
        backward_weight_s=[x * k for x in costs.backward_weight_s],
        p2p_s=p2p * k,
    )
    assert simulate(s, scaled).makespan_s == pytest.approx(k * r.makespan_s)
    assert all(0 <= x <= 1 for x in r.idle_frac_per_rank)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "zb-h2", "looped-bfs"])
def test_single_rank_has_no_bubble(name: str) -> None:
    r = run(name, 1, 5)
    assert r.bubble_fraction_of_step == pytest.approx(0.0)
    assert r.makespan_s == pytest.approx(sum(r.busy_s))
    assert not math.isnan(r.bubble_over_ideal)
