"""Schedules as data: registry, rules, text/CSV form, and torch.distributed.pipelining as an oracle."""

from __future__ import annotations

import pytest

from workbench.pipeline.schedules import (
    SCHEDULE_NAMES,
    Action,
    Schedule,
    build_schedule,
    default_vpp,
    parse_action,
    read_schedule_csv,
    required_vpp,
    schedule_rule_violations,
    uses_split_backward,
    write_schedule_csv,
)

PS = (2, 4, 8)
MS = (1, 2, 3, 4, 6, 8, 9, 12, 16, 17)


def test_action_text_round_trip() -> None:
    assert str(Action(0, "F", 3)) == "0F3"
    assert parse_action("12I40") == Action(12, "I", 40)
    for bad in ("F3", "0X3", "0F", "", "0SEND_F1"):
        with pytest.raises(ValueError, match="stage"):
            parse_action(bad)


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid names: gpipe, 1f1b"):
        build_schedule("pipedream", pp=2, num_microbatches=4)


@pytest.mark.parametrize(
    ("name", "pp", "vpp", "m", "rule"),
    [
        ("1f1b", 4, 1, 3, "at least pp=4 micro-batches"),
        ("interleaved-1f1b", 4, 2, 9, "divisible by the number of rounds"),
        ("interleaved-1f1b", 4, 1, 8, "vpp >= 2"),
        ("zbv", 4, 1, 8, "needs vpp=2"),
        ("dualpipev", 4, 2, 7, "at least 2\\*pp = 8"),
        ("gpipe", 4, 2, 8, "needs vpp=1"),
    ],
)
def test_rule_violations_raise(name: str, pp: int, vpp: int, m: int, rule: str) -> None:
    assert schedule_rule_violations(name, pp=pp, vpp=vpp, num_microbatches=m)
    with pytest.raises(ValueError, match=rule):
        build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp)


def test_helpers() -> None:
    assert [required_vpp(n) for n in ("zbv", "v-half", "v-min", "dualpipev")] == [2, 2, 2, 2]
    assert default_vpp("interleaved-1f1b") == 2 and default_vpp("1f1b") == 1
    assert uses_split_backward("zb-h1") and not uses_split_backward("1f1b")
    assert schedule_rule_violations("1f1b", pp=4, vpp=1, num_microbatches=8) == []
    assert "pp must be an integer" in schedule_rule_violations("1f1b", pp=0, vpp=1, num_microbatches=8)[0]


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
@pytest.mark.parametrize("pp", (1, 2, 3, 4))
def test_every_schedule_is_complete(name: str, pp: int) -> None:
    for m in (2 * pp, 2 * pp + 2, 4 * pp):
        vpp = default_vpp(name)
        if schedule_rule_violations(name, pp=pp, vpp=vpp, num_microbatches=m):
            continue
        s = build_schedule(name, pp=pp, num_microbatches=m, vpp=vpp)  # Schedule checks completeness
        per_pair = 3 if uses_split_backward(name) else 2
        pairs = s.num_stages * m // s.num_directions  # DualPipe: each micro-batch goes through one copy
        if name in ("dualpipev", "dualpipe"):  # the DualPipes mix B with I+W
            assert 2 * pairs < s.num_actions < 3 * pairs
        else:
            assert s.num_actions == pairs * per_pair


def test_schedule_rejects_bad_data() -> None:
    ok = dict(name="x", pp=1, vpp=1, num_microbatches=1, num_stages=1, stage_to_rank=(0,))
    with pytest.raises(ValueError, match="appears more than once"):
        Schedule(**ok, actions=((Action(0, "F", 0), Action(0, "F", 0), Action(0, "B", 0)),))
    with pytest.raises(ValueError, match="needs F and either B or I\\+W"):
        Schedule(**ok, actions=((Action(0, "F", 0), Action(0, "I", 0)),))
    with pytest.raises(ValueError, match="out of range"):
        Schedule(**ok, actions=((Action(0, "F", 0), Action(0, "B", 1)),))


def test_csv_round_trip_and_torch_cells(tmp_path) -> None:
    s = build_schedule("zbv", pp=4, num_microbatches=8)
    path = write_schedule_csv(s, tmp_path / "zbv.csv")
    back = read_schedule_csv(path, name="zbv")
    assert back.actions == s.actions and back.stage_to_rank == s.stage_to_rank
    with pytest.raises(FileExistsError, match="zbv.csv"):
        write_schedule_csv(s, path)
    torch_style = tmp_path / "t.csv"
    torch_style.write_text("0F0,,(0F1;0B0)OVERLAP_F_B,0B1,0REDUCE_GRAD\n1F0,1B0,1F1,1B1\n")
    t = read_schedule_csv(torch_style)
    assert t.as_text()[0] == ["0F0", "0F1", "0B0", "0B1"]
    assert (t.pp, t.vpp, t.num_microbatches) == (2, 1, 2)


def test_csv_errors_name_the_row(tmp_path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("0F0,0B0\n1F0,1Q0\n")
    with pytest.raises(ValueError, match="row 2"):
        read_schedule_csv(path)


def _textbook_1f1b(pp: int, m: int) -> list[list[str]]:
    """Warm-up pp-1-r forwards, steady F/B pairs, cool-down backwards (picotron, Megatron-LM)."""
    rows = []
    for r in range(pp):
        warm = min(pp - 1 - r, m)
        row = [f"{r}F{i}" for i in range(warm)]
        for j in range(m - warm):
            row += [f"{r}F{warm + j}", f"{r}B{j}"]
        row += [f"{r}B{j}" for j in range(m - warm, m)]
        rows.append(row)
    return rows


@pytest.mark.parametrize("pp", PS)
def test_1f1b_textbook(pp: int) -> None:
    # torch 2.13's Schedule1F1B.pipeline_order omits F0 on the last rank, so 1F1B is checked
    # against the textbook warm-up / steady / cool-down rule instead of torch.
    for m in (pp, pp + 1, 2 * pp, 3 * pp + 1):
        assert build_schedule("1f1b", pp=pp, num_microbatches=m).as_text() == _textbook_1f1b(pp, m)


# ours -> (torch class name, stages per rank)
TORCH_MAP = [
    ("gpipe", "GPipe", 1),
    ("interleaved-1f1b", "Interleaved1F1B", 2),
    ("interleaved-1f1b", "Interleaved1F1B", 3),
    ("looped-bfs", "LoopedBFS", 2),
    ("zb-h1", "InterleavedZeroBubble", 1),  # torch's ZB1P with one stage per rank is ZB-H1
    ("zb-h1", "InterleavedZeroBubble", 2),
    ("zbv", "ZBVZeroBubble", 2),
    ("dualpipev", "DualPipeV", 2),
]


def test_torch_map_is_the_records() -> None:
    from workbench.pipeline.schedules import get_schedule

    for ours, theirs, _ in TORCH_MAP:
        assert get_schedule(ours).torch_class == f"Schedule{theirs}"


def _torch_order(cls_name: str, pp: int, m: int, vpp: int) -> list[list[str]] | None:
    from unittest import mock

    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    from torch.distributed.pipelining.stage import PipelineStage

    cls = get_schedule_class(cls_name)
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod, stage.num_stages = 0, pp, None, pp * vpp
    try:
        sched = cls(stage if issubclass(cls, PipelineScheduleSingle) else [stage] * vpp, m)
    except ValueError:
        return None
    out = []
    for r in range(pp):
        row: list[str] = []
        for a in sched.pipeline_order[r]:
            if a is None:
                continue
            for sub in a.sub_actions or (a,):  # DualPipeV's overlapped F+B pairs, flattened
                if sub.computation_type.value in ("F", "B", "I", "W"):
                    row.append(str(sub))
        out.append(row)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("ours", "theirs", "vpp"), TORCH_MAP)
def test_matches_torch_pipeline_order(ours: str, theirs: str, vpp: int) -> None:
    pytest.importorskip("torch.distributed.pipelining")
    compared = 0
    for pp in PS:
        for m in MS:
            expected = _torch_order(theirs, pp, m, vpp)
            if expected is None:  # torch refuses (m): ours may accept more, never fewer
                continue
            assert not schedule_rule_violations(ours, pp=pp, vpp=vpp, num_microbatches=m), (pp, m)
            got = build_schedule(ours, pp=pp, num_microbatches=m, vpp=vpp).as_text()
            assert got == expected, (ours, pp, m, vpp)
            compared += 1
    assert compared >= 10
