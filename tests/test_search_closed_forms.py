"""The screen's closed forms against the schedule generators and the simulator (reference implementations).

Peak chunks: a walk over each rank's action order (+1 at F, -1 at B or W). Bubbles: ``simulate`` on equal
stages with F:I:W ratios around the ones the cost model produces.
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.pipeline.bubble import bubble_s, family_of, tile_s
from workbench.pipeline.peak import family_codes, peak_chunks
from workbench.pipeline.schedules import SCHEDULE_NAMES, build_schedule, schedule_rule_violations
from workbench.pipeline.schedules.registry import get_schedule
from workbench.pipeline.simulate import StageCosts, simulate

RATIOS = [(1.0, 1.0, 1.0), (1.0, 2.0, 1.0), (2.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.0, 0.5, 1.0)]


def _walk(schedule) -> list[int]:
    peaks = []
    for actions in schedule.actions:
        held = best = 0
        for a in actions:
            held += 1 if a.op == "F" else -1 if a.op in ("B", "W") else 0
            best = max(best, held)
        peaks.append(best)
    return peaks


def _cases(names, vpps=(1, 2, 4), pps=(2, 4, 8), ms=(1, 2, 3, 4, 6, 8, 12, 16, 32)):
    for name in names:
        for vpp in vpps:
            for pp in pps:
                for m in ms:
                    if not schedule_rule_violations(name, pp=pp, vpp=vpp, num_microbatches=m):
                        yield name, pp, vpp, m


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_peak_chunks_match_the_generators(name):
    for _, pp, vpp, m in _cases([name]):
        walk = _walk(build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp))
        first, last = peak_chunks(family_codes((name,))[0], pp=np.array(pp), vpp=np.array(vpp), m=np.array(m))
        assert int(first) == walk[0], (name, pp, vpp, m, walk)
        assert int(last) >= walk[-1] and max(int(first), int(last)) == max(walk), (name, pp, vpp, m, walk)


@pytest.mark.parametrize("name", ["interleaved-1f1b", "zb-h1"])
def test_peak_chunks_when_a_round_holds_more_than_pp_micro_batches(name):
    """Where pp does not divide m (the rules admit m = rounds x g, g > pp micro-batches per round), the
    warm-up holds (v - 1) g chunks of the other virtual stages, not (v - 1) p: exact on every rank."""
    from workbench.pipeline.peak import peak_chunks_at

    fam = family_codes((name,))[0]
    seen = 0
    for _, pp, vpp, m in _cases(
        [name], vpps=(2, 3, 4), pps=(3, 5, 8), ms=(10, 12, 14, 15, 18, 20, 22, 27, 30)
    ):
        walk = _walk(build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp))
        ranks = np.arange(pp)
        got = peak_chunks_at(fam, pp=np.full(pp, pp), vpp=np.full(pp, vpp), m=np.full(pp, m), rank=ranks)
        first, last = peak_chunks(fam, pp=np.array(pp), vpp=np.array(vpp), m=np.array(m))
        assert got.tolist() == walk and [int(first), int(last)] == [walk[0], walk[-1]], (pp, vpp, m, walk)
        seen += m % pp != 0 and m >= 2 * pp
    assert seen >= 10


def _simulated_bubble(name, pp, vpp, m, f, i, w):
    sim = simulate(
        build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp),
        StageCosts.uniform(num_stages=pp * vpp, vpp=vpp, forward_s=f, backward_s=i + w, backward_weight_s=w),
    )
    return sim.makespan_s - m * (f + i + w)


def _closed(name, pp, vpp, m, f, i, w):
    fam = family_of((name,))[0]
    return float(bubble_s(fam, pp=np.array(pp), vpp=np.array(vpp), m=np.array(m), f_s=f, i_s=i, w_s=w))


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs"])
def test_exact_bubbles(name):
    for _, pp, vpp, m in _cases([name], ms=(1, 3, 4, 8, 16)):
        for f, i, w in RATIOS:
            assert _closed(name, pp, vpp, m, f, i, w) == pytest.approx(
                _simulated_bubble(name, pp, vpp, m, f, i, w), rel=1e-9, abs=1e-9
            ), (name, pp, vpp, m, f, i, w)


def test_zero_bubble_h1_steady_state_is_exact_and_ramp_close():
    for _, pp, vpp, m in _cases(["zb-h1"], ms=(1, 2, 3, 4, 8, 16)):
        for f, i, w in RATIOS:
            sim = _simulated_bubble("zb-h1", pp, vpp, m, f, i, w)
            got = _closed("zb-h1", pp, vpp, m, f, i, w)
            if m >= pp:
                assert got == pytest.approx(sim, rel=1e-9, abs=1e-9), (pp, vpp, m, f, i, w)
            else:  # few micro-batches (m < pp): the step (m (F+B) + bubble) is within 15%
                assert abs(got - sim) <= 0.15 * (m * (f + i + w) + sim), (pp, vpp, m, f, i, w)


@pytest.mark.parametrize("name", ["zb-h2", "zbv", "dualpipev", "dualpipe"])
def test_greedy_and_v_schedules_step_within_5_percent_in_steady_state(name):
    for _, pp, vpp, m in _cases([name], vpps=(1, 2), pps=(4, 8), ms=(16, 32)):
        if m < 2 * pp:
            continue
        for f, i, w in RATIOS:
            sim = _simulated_bubble(name, pp, vpp, m, f, i, w)
            got = _closed(name, pp, vpp, m, f, i, w)
            assert abs(got - sim) <= 0.05 * (m * (f + i + w) + sim), (name, pp, vpp, m, f, i, w, got, sim)


@pytest.mark.parametrize(("name", "vpp"), [("zb-h1", 1), ("zb-h1", 2), ("zb-h2", 1)])
def test_split_backward_last_rank_matches_the_simulated_in_flight_bytes(name, vpp):
    from workbench.pipeline.peak import split_backward_last_rank

    for pp in (2, 4, 8):
        m, freed = 4 * pp, 0.7
        schedule = build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp)
        n = schedule.num_stages
        sim = simulate(
            schedule,
            StageCosts(
                forward_s=(1.0,) * n,
                backward_s=(2.0,) * n,
                backward_input_s=(1.0,) * n,
                backward_weight_s=(1.0,) * n,
                activation_bytes=(1.0,) * n,
                released_at_input_grad_frac=freed,
            ),
        )
        fam = family_codes((name,))[0]
        _, last = peak_chunks(fam, pp=np.array(pp), vpp=np.array(vpp), m=np.array(m))
        got = split_backward_last_rank(fam, last, pp=np.array(pp), m=np.array(m), freed_frac=freed)
        assert float(got) == pytest.approx(sim.peak_activation_bytes_per_rank[-1], rel=1e-9), (pp, vpp)


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_peak_chunks_at_every_rank(name):
    """Every rank's count: exact for the looping placements, an upper bound for V placements and DualPipe."""
    from workbench.pipeline.peak import peak_chunks_at

    fam = family_codes((name,))[0]
    looping = ("gpipe", "looped-bfs", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2")
    exact = get_schedule(name).peak_family in looping
    for _, pp, vpp, m in _cases([name]):
        walk = _walk(build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp))
        ranks = np.arange(pp)
        got = peak_chunks_at(fam, pp=np.full(pp, pp), vpp=np.full(pp, vpp), m=np.full(pp, m), rank=ranks)
        if exact:
            assert got.tolist() == walk, (name, pp, vpp, m, walk)
        else:
            assert np.all(got >= np.array(walk)), (name, pp, vpp, m, walk)


@pytest.mark.parametrize(("name", "vpp"), [("zb-h1", 1), ("zb-h1", 2), ("zb-h2", 1), ("1f1b", 1)])
def test_split_backward_at_every_rank_matches_the_simulated_in_flight_bytes(name, vpp):
    from workbench.pipeline.peak import peak_chunks_at, split_backward_at

    # every micro-batch count for one stage per rank (few micro-batches leave fewer I-done chunks pending)
    cases = [(pp, m, f) for pp in (2, 4, 8) for m in range(1, 4 * pp + 1) for f in (0.3, 0.7)]
    for pp, m, freed in cases if vpp == 1 else [(pp, 4 * pp, 0.7) for pp in (4, 8)]:
        if schedule_rule_violations(name, pp=pp, vpp=vpp, num_microbatches=m):
            continue
        schedule = build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp)
        n = schedule.num_stages
        costs = StageCosts(
            forward_s=(1.0,) * n,
            backward_s=(2.0,) * n,
            backward_input_s=(1.0,) * n,
            backward_weight_s=(1.0,) * n,
            activation_bytes=(1.0,) * n,
            released_at_input_grad_frac=freed if name != "1f1b" else 0.0,
        )
        sim = simulate(schedule, costs)
        fam, ranks = family_codes((name,))[0], np.arange(pp)
        at = peak_chunks_at(fam, pp=np.full(pp, pp), vpp=np.full(pp, vpp), m=np.full(pp, m), rank=ranks)
        got = split_backward_at(fam, at, rank=ranks, freed_frac=freed, pp=np.full(pp, pp), m=np.full(pp, m))
        assert np.allclose(got, sim.peak_activation_bytes_per_rank, rtol=1e-9), (
            pp,
            m,
            freed,
            got,
            sim.peak_activation_bytes_per_rank,
        )


def _simulated_tile(name, pp, vpp, m, f, i, w):
    """Makespan less the longest rank span: what overlapping consecutive steps saves."""
    sim = simulate(
        build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp),
        StageCosts.uniform(num_stages=pp * vpp, vpp=vpp, forward_s=f, backward_s=i + w, backward_weight_s=w),
    )
    return sim.makespan_s - max(sim.span_s)


def _closed_tile(name, pp, vpp, m, f, i, w):
    fam = family_of((name,))[0]
    return float(tile_s(fam, pp=np.array(pp), vpp=np.array(vpp), m=np.array(m), f_s=f, i_s=i, w_s=w))


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_only_schedules_marked_as_tiling_have_rank_spans_shorter_than_the_step(name):
    """Read off the generators: every rank of a schedule not marked ``tiles_across_steps`` spans the whole
    step, so overlapping steps gains nothing there."""
    tiles = get_schedule(name).tiles_across_steps
    gains = []
    for _, pp, vpp, m in _cases([name], vpps=(1, 2), pps=(4, 8), ms=(8, 16, 32)):
        for f, i, w in RATIOS:
            gains.append(_simulated_tile(name, pp, vpp, m, f, i, w))
    assert (max(gains) > 0) == tiles, (name, max(gains))


def test_zb_h2_tile_matches_the_generator_and_makes_the_papers_bubble():
    """ZB-H2 tiled: exact where I >= W, within F/2 otherwise; in steady state with I <= 2W <= I + F the bubble
    is Qi et al.'s (p-1)(F + I - 2W) (arXiv:2401.10241 Table 1)."""
    for pp in (4, 8):
        for m in range(pp, 2 * pp + 3):
            for f, i, w in RATIOS:
                got, sim = (
                    _closed_tile("zb-h2", pp, 1, m, f, i, w),
                    _simulated_tile("zb-h2", pp, 1, m, f, i, w),
                )
                assert abs(got - sim) <= (1e-9 if i >= w else 0.5 * f), (pp, m, f, i, w, got, sim)
                if m >= 2 * pp and i <= 2 * w <= i + f:
                    tiled_bubble = _simulated_bubble("zb-h2", pp, 1, m, f, i, w) - sim
                    assert tiled_bubble == pytest.approx((pp - 1) * (f + i - 2 * w), abs=1e-9)


def test_zb_h1_tile_is_exact_from_p_micro_batches():
    """ZB-H1 tiled, W > I: the paper's (p-1)(F + I - W) bubble per v chunks (arXiv:2401.10241 Table 1)."""
    for _, pp, vpp, m in _cases(["zb-h1"], vpps=(1, 2), pps=(4, 8), ms=(1, 2, 3, 4, 8, 16)):
        for f, i, w in RATIOS:
            got, sim = (
                _closed_tile("zb-h1", pp, vpp, m, f, i, w),
                _simulated_tile("zb-h1", pp, vpp, m, f, i, w),
            )
            assert abs(got - sim) <= (1e-9 if m >= pp or vpp == 1 else 0.5 * f), (
                pp,
                vpp,
                m,
                f,
                i,
                w,
                got,
                sim,
            )
            if m >= pp and w >= i:
                tiled = _simulated_bubble("zb-h1", pp, vpp, m, f, i, w) - sim
                assert tiled == pytest.approx((pp - 1) * (f + i - w) / vpp, abs=1e-9)


def test_zbv_tile_within_half_a_forward_of_the_generator():
    for pp in (4, 8):
        for m in (2 * pp, 2 * pp + 2, 4 * pp):
            for f, i, w in RATIOS:
                got, sim = _closed_tile("zbv", pp, 2, m, f, i, w), _simulated_tile("zbv", pp, 2, m, f, i, w)
                assert abs(got - sim) <= 0.5 * f + 1e-9, (pp, m, f, i, w, got, sim)
