"""DualPipe (DeepSeek-V3 report, arXiv:2412.19437 Sec. 3.2.1, Table 2; github.com/deepseek-ai/DualPipe) against the
report's closed forms, its reference implementation's rules, and the data model it needs (two directions, overlapped
F&B pairs, two copies of the weights).

Table 2, PP ranks (= stages of one direction), F / B / W the time of a forward / full backward / weight-backward
chunk (one stage of one copy), F&B the time of an overlapped forward-and-backward pair:
bubble (PP/2 - 1)(F&B + B - 3W), parameters 2x, activations PP + 1 (stage activations per rank).
The simulator prices an overlapped pair as one unit that starts when both of its inputs are in and runs F then B
back to back, so F&B = F + B here; the bubble is then (PP/2 - 1)(F + 2B - 3W), exact when the input-backward
I = B - W equals F (the equal-chunk case the report draws).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from workbench.cost import step
from workbench.pipeline.bubble import bubble_s, family_of, makespan_s
from workbench.pipeline.peak import family_codes, peak_chunks
from workbench.pipeline.schedules import (
    Overlap,
    build_schedule,
    get_schedule,
    num_directions,
    read_schedule_csv,
    schedule_rule_violations,
    write_schedule_csv,
)
from workbench.pipeline.schedules.actions import parse_cell
from workbench.pipeline.simulate import StageCosts, simulate
from workbench.presets.catalog import load_model

PPS = (4, 8, 16)


def _sim(pp: int, m: int, *, f: float, b: float, w: float, name: str = "dualpipe", **kw: float):
    s = build_schedule(name, pp=pp, num_microbatches=m)
    costs = StageCosts.uniform(
        num_stages=s.num_stages, vpp=s.vpp, forward_s=f, backward_s=b, backward_weight_s=w, **kw
    )
    return simulate(s, costs)


def _table2_bubble(pp: int, f: float, b: float, w: float) -> float:
    f_and_b = f + b  # an overlapped pair, priced as its F then its B (module docstring)
    return (pp / 2 - 1) * (f_and_b + b - 3 * w)


@pytest.mark.parametrize("pp", PPS)
@pytest.mark.parametrize(("f", "b", "w"), [(1.0, 2.0, 1.0), (2.0, 3.0, 1.0), (1.0, 1.5, 0.5)])
def test_bubble_is_table_2(pp: int, f: float, b: float, w: float) -> None:
    assert b - w == f  # I = F: the case Table 2 draws
    for m in (2 * pp, 2 * pp + 2, 4 * pp):
        r = _sim(pp, m, f=f, b=b, w=w)
        assert r.busy_s == pytest.approx([m * (f + b)] * pp)  # each DualPipe stage is a full stage
        assert r.idle_s == pytest.approx([_table2_bubble(pp, f, b, w)] * pp), (pp, m)


@pytest.mark.parametrize("pp", PPS)
def test_activation_peak_is_pp_plus_one(pp: int) -> None:
    for m in (2 * pp, 4 * pp):
        r = _sim(pp, m, f=1.0, b=2.0, w=1.0, activation_bytes=10.0)
        assert r.peak_inflight_chunks_per_rank == (pp + 1,) * pp
        assert r.peak_inflight_per_rank == (float(pp + 1),) * pp  # in full stages
        assert r.peak_activation_bytes_per_rank == pytest.approx([10.0 * (pp + 1)] * pp)


@pytest.mark.parametrize("pp", PPS)
def test_dualpipev_peak_and_bubble_beside_dualpipe(pp: int) -> None:
    # DualPipeV: the same Table 2 row on PP = 2p half-size stages: PP + 1 = 2p + 1 chunks; its overlapped pairs are
    # flattened (torch's ScheduleDualPipeV order), so F may start before its partner's input: at most Table 2's bubble.
    m, f, b, w = 4 * pp, 1.0, 2.0, 1.0
    dv = _sim(pp, m, f=2 * f, b=2 * b, w=2 * w, name="dualpipev")  # chunk = half a rank's share
    assert dv.peak_inflight_chunks_per_rank == (2 * pp + 1,) * pp
    assert max(dv.idle_s) <= _table2_bubble(2 * pp, f, b, w) + 1e-9


def test_closed_forms_of_the_screen() -> None:
    fam, code = family_of(("dualpipe",))[0], family_codes(("dualpipe",))[0]
    for pp in PPS:
        p, v = np.array(pp), np.array(2)
        first, last = peak_chunks(code, pp=p, vpp=v, m=np.array(2 * pp))
        assert int(first) == int(last) == pp + 1
        got = bubble_s(fam, pp=p, vpp=v, m=np.array(2 * pp), f_s=1.0, i_s=1.0, w_s=1.0)
        assert float(got) == pytest.approx(_table2_bubble(pp, 1.0, 2.0, 1.0))
        for f, i, w in [(1.0, 0.5, 0.5), (2.0, 1.0, 1.0), (1.0, 0.8, 0.5), (1.0, 1.0, 2.0)]:  # I <= F: exact
            sim = _sim(pp, 4 * pp, f=f, b=i + w, w=w)
            closed = bubble_s(fam, pp=p, vpp=v, m=np.array(4 * pp), f_s=f, i_s=i, w_s=w)
            assert float(closed) == pytest.approx(max(sim.idle_s)), (pp, f, i, w)


@pytest.mark.parametrize("pp", PPS)
def test_pipeline_hops_on_the_critical_path(pp: int) -> None:
    fam = family_of(("dualpipe",))[0]
    for m in (2 * pp, 4 * pp):
        base, slow = (_sim(pp, m, f=1.0, b=2.0, w=1.0, p2p_s=q).makespan_s for q in (0.0, 0.01))
        closed = [
            makespan_s(
                fam, pp=np.array(pp), vpp=np.array(2), m=np.array(m), f_s=1.0, i_s=1.0, w_s=1.0, p2p_time_s=q
            )
            for q in (0.0, 0.01)
        ]
        assert float(closed[0]) == pytest.approx(base)
        assert float(closed[1]) == pytest.approx(slow), (pp, m)


@pytest.mark.parametrize("pp", (2, 4, 8))
def test_every_microbatch_runs_its_copy_once_in_dependency_order(pp: int) -> None:
    m = 2 * pp + 2
    r = _sim(pp, m, f=1.0, b=2.0, w=1.0, p2p_s=0.1)
    s = r.schedule
    assert (s.num_directions, s.vpp, s.num_stages) == (2, 2, 2 * pp)
    assert s.stage_to_rank == tuple(range(pp)) + tuple(reversed(range(pp)))
    t = {
        (a["stage"], a["op"], a["microbatch"]): (a["start_s"], a["end_s"])
        for a in r.timeline.iter_rows(named=True)
    }
    for mb in range(m):
        copy = range(0, pp) if mb < m // 2 else range(pp, 2 * pp)  # first half flows down, second half up
        assert {k for k in t if k[2] == mb and k[1] == "F"} == {(st, "F", mb) for st in copy}
        for st in copy:
            back = (st, "B", mb) if (st, "B", mb) in t else (st, "I", mb)
            assert ((st, "B", mb) in t) != ((st, "I", mb) in t)
            assert ((st, "I", mb) in t) == ((st, "W", mb) in t)
            if st != copy[0]:
                assert t[(st, "F", mb)][0] >= t[(st - 1, "F", mb)][1] + 0.1 - 1e-9
            nxt = (st + 1, "B", mb) if (st + 1, "B", mb) in t else (st + 1, "I", mb)
            assert t[back][0] >= (t[(st, "F", mb)][1] if st == copy[-1] else t[nxt][1] + 0.1) - 1e-9
            if (st, "W", mb) in t:
                assert t[(st, "W", mb)][0] >= t[(st, "I", mb)][1] - 1e-9


@pytest.mark.parametrize("pp", (4, 8))
def test_overlapped_pairs_are_one_unit(pp: int) -> None:
    m = 4 * pp
    r = _sim(pp, m, f=1.0, b=2.0, w=1.0, p2p_s=0.05)
    s = r.schedule
    tl = r.timeline.with_row_index("i")
    for rank, starts in enumerate(s.overlap_pairs):
        row = s.actions[rank]
        h = min(rank, pp - 1 - rank)
        steady = 2 * (m // 2 - pp + h + 1) + (pp // 2 - h - 1) - (h == pp // 2 - 1)
        assert len(starts) == steady  # the reference's step 4 and 5 pairs; the middle ranks keep one apart
        for k in starts:
            fwd, bwd = row[k], row[k + 1]
            assert (fwd.op, bwd.op) == ("F", "B")
            assert s.direction_of_stage(fwd.stage) != s.direction_of_stage(
                bwd.stage
            )  # F of one copy, B of the other
            base = int(s.rank_offsets[rank]) + k
            pair = tl.filter(pl.col("i").is_in([base, base + 1]))
            assert pair["start_s"][1] == pytest.approx(pair["end_s"][0])  # B right after F: one unit
    cells = s.as_text(overlap=True)[0]
    assert sum("OVERLAP_F_B" in c for c in cells) == len(s.overlap_pairs[0])
    pair = next(c for c in cells if "OVERLAP_F_B" in c)
    assert len(parse_cell(pair)) == 2  # torch's text: "(0F3;7B5)OVERLAP_F_B"
    assert [c for row in s.cells() for c in row if isinstance(c, Overlap)][0].forward.op == "F"


def test_csv_writes_the_overlapped_pairs_as_torch_does(tmp_path) -> None:
    s = build_schedule("dualpipe", pp=4, num_microbatches=8)
    text = write_schedule_csv(s, tmp_path / "dualpipe.csv").read_text()
    assert text.count("OVERLAP_F_B") == sum(len(p) for p in s.overlap_pairs)
    assert "(0F3;7B5)OVERLAP_F_B" in text.splitlines()[0]
    back = read_schedule_csv(tmp_path / "dualpipe.csv", name="dualpipe")
    assert (back.actions, back.overlap_pairs, back.num_directions) == (s.actions, s.overlap_pairs, 2)
    assert back.stage_to_rank == s.stage_to_rank


def test_rules_of_the_reference_implementation() -> None:
    # dualpipe/dualpipe.py, DualPipe.step: num_ranks % 2 == 0; num_chunks % 2 == 0 and num_chunks >= 2 * num_ranks
    assert schedule_rule_violations("dualpipe", pp=4, vpp=2, num_microbatches=8) == []
    assert any("2*pp = 8" in v for v in schedule_rule_violations("dualpipe", pp=4, vpp=2, num_microbatches=6))
    assert any(
        "multiples of 2" in v for v in schedule_rule_violations("dualpipe", pp=4, vpp=2, num_microbatches=9)
    )
    assert any(
        "multiples of 2" in v for v in schedule_rule_violations("dualpipe", pp=3, vpp=2, num_microbatches=8)
    )
    assert any("vpp=2" in v for v in schedule_rule_violations("dualpipe", pp=4, vpp=1, num_microbatches=8))
    with pytest.raises(ValueError, match="multiples of 2"):
        build_schedule("dualpipe", pp=4, num_microbatches=9)


def test_record() -> None:
    spec = get_schedule("dualpipe")
    assert num_directions("dualpipe") == spec.traits.num_directions == 2 and num_directions("dualpipev") == 1
    assert spec.torch_class is None  # torch 2.13 ships ScheduleDualPipeV only
    assert "deepseek-ai/DualPipe" in spec.frameworks and "2412.19437" in spec.source


@pytest.mark.parametrize("pp", (2, 4, 8))
def test_two_copies_of_the_weights(pp: int) -> None:
    # Table 2: parameters 2x. Rank r holds block r of the first copy and block p-1-r of the second (p blocks).
    model = load_model("llama-3.1-8b")  # 32 layers: p blocks of 32/p
    rank = np.arange(pp)

    def params(h: step.Holdings) -> np.ndarray:
        layers = np.asarray(h["dense"]) + np.asarray(h["moe"])
        return (
            layers * model.layer_parameters(0)
            + np.asarray(h["embedding"]) * model.embedding_parameters()
            + np.asarray(h["head"]) * model.lm_head_parameters()
        )

    one = step.rank_holdings(model, pp=pp, vpp=1, v_shape=False, rank=rank)
    dual = step.rank_holdings(model, pp=pp, vpp=2, v_shape=True, rank=rank, copies=2)
    v = step.rank_holdings(model, pp=pp, vpp=2, v_shape=True, rank=rank)
    assert params(dual).sum() == 2 * params(one).sum()
    assert params(v).sum() == params(one).sum()  # DualPipeV: 1x
    assert list(np.asarray(dual["dense"]) + np.asarray(dual["moe"])) == [2 * 32 // pp] * pp
    ends = (rank == 0) | (rank == pp - 1)
    assert list(dual["embedding"]) == list(ends) and list(dual["head"]) == list(ends)
    assert dual["copies"] == 2  # a micro-batch goes through one copy: step.share_s counts half


def test_screen_memory_sees_dualpipes_middle_ranks():
    """Regression: DualPipe's first and last ranks hold the two edge stages, which uneven splits make the
    smallest, so a screen that read only those ranks under-counted the peak (DeepSeek-V3 pp16: 70.9 GiB screened
    against 94.7 GiB estimated). The screen now also reads the middle rank and agrees with the full estimate."""
    from workbench.estimate.analytic import estimate_plan
    from workbench.presets.calibration import load_calibration
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.search import search
    from workbench.search.space import Constraints
    from workbench.specs.plan import Workload

    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", 6)  # 32 layers over pp 6: uneven
    work = Workload(seq_len=4096, global_batch_size=96)
    result = search(
        model,
        cluster,
        work,
        Constraints(fixed={"pp": 6, "tp": 8}, schedules=("dualpipe",), zero_stages=(1,), recompute=("none",)),
        top_k=2,
        calibration=load_calibration("default", framework="generic"),  # a stack-agnostic schedule
    )
    rows = [r for r in result.plans.iter_rows(named=True) if r["refined"]]
    assert rows
    for row in rows:
        assert row["schedule"] == "dualpipe"
        # never below the simulated peak, at most 10 % above it (the closed form keeps PP+1 whole micro-batches;
        # the simulation frees the split backward's share at I); the edge ranks alone were below it
        assert row["peak_memory_bytes"] <= row["screen_peak_memory_bytes"] <= 1.10 * row["peak_memory_bytes"]
    est = estimate_plan(
        model,
        cluster,
        work,
        result.estimates[0].plan,
        calibration=load_calibration("default", framework="generic"),
    )
    assert est.peak_memory_bytes == pytest.approx(rows[0]["peak_memory_bytes"], rel=1e-9)
