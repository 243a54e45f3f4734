"""The plan-axis table (``workbench.specs.axes``): every axis reaches the CLI, the app, the planner, the result
columns and the rule table, and the faces build the same plans as before the table."""

from __future__ import annotations

import dataclasses
import shlex

import numpy as np
import param
import pytest

from workbench.presets.catalog import load_cluster, load_model
from workbench.search import Constraints, search
from workbench.search.refine import plan_from_row
from workbench.search.result import PLAN_COLUMNS
from workbench.search.space import AXES, AXIS_MAXIMUM, build_space
from workbench.specs import limits
from workbench.specs.axes import AXIS_NAMES, PLAN_AXES, plan_axis
from workbench.specs.axis_types import Control, Domain, Enumeration, PlanAxis
from workbench.specs.errors import unique_index
from workbench.specs.plan import RANK_ORDERS, Axis, ParallelPlan, Recompute, Workload, data_parallel_degree
from workbench.specs.rule_table import rule_table
from workbench.specs.rules import CONTROLS, PLAN_FIELDS, RULE_COLUMNS

click = pytest.importorskip("click")
from workbench_cli.estimate_cmd import build_inputs, estimate_cmd  # noqa: E402

IDS = [a.name for a in PLAN_AXES]
CLI_PARAMS = {p.name: p for p in estimate_cmd.params}


def test_every_plan_field_has_one_axis() -> None:
    """The table covers ``ParallelPlan`` exactly: a field without a row would reach no face."""
    assert set(AXIS_NAMES) == set(ParallelPlan.__dataclass_fields__)
    assert len(AXIS_NAMES) == len(PLAN_AXES)


@pytest.mark.parametrize("axis", PLAN_AXES, ids=IDS)
def test_axis_reaches_the_cli(axis: PlanAxis) -> None:
    option = CLI_PARAMS[axis.cli.param]
    assert axis.cli.flag in option.opts and option.default == axis.cli.default
    assert option.help == axis.cli.help and option.show_default == axis.cli.show_default
    if axis.domain is Domain.FLAG:
        assert option.secondary_opts == [f"--no-{axis.cli.flag.removeprefix('--')}"]
    if axis.domain is Domain.COUNT:
        assert (option.type.min, option.type.max) == (axis.minimum, axis.maximum)
        assert axis.limit is None or getattr(limits, axis.limit) == axis.maximum
    if axis.domain is Domain.CHOICE:
        assert list(option.type.choices) == list(axis.choices or ())


@pytest.mark.parametrize("axis", PLAN_AXES, ids=IDS)
def test_axis_reaches_the_rules(axis: PlanAxis) -> None:
    """``axis.rules`` lists exactly the rules whose mask reads the axis' rule column; the rules name it as a
    control (what a user changes) through ``PLAN_FIELDS``."""
    reading = {r.key for r in rule_table() if axis.rule_column in r.reads}
    assert set(axis.rules) == reading
    assert (axis.rule_column in RULE_COLUMNS) == (axis.rule_column is not None)
    assert axis.name == "rank_order" or axis.name in CONTROLS and axis.name in PLAN_FIELDS


def test_a_bad_row_is_refused() -> None:
    tp = plan_axis("tp")
    with pytest.raises(ValueError, match="PlanAxis 'tp': a count needs a maximum >= minimum 1, got None"):
        dataclasses.replace(tp, maximum=None)
    with pytest.raises(ValueError, match="PlanAxis 'tp': none_as stands for None"):
        dataclasses.replace(tp, app=dataclasses.replace(tp.app, none_as=0))
    with pytest.raises(ValueError, match="plan axis 'tp' appears twice"):
        unique_index((tp, tp), lambda a: a.name, "plan axis {} appears twice in PLAN_AXES")
    with pytest.raises(ValueError, match="unknown plan axis 'fp9'"):
        plan_axis("fp9")


@pytest.mark.parametrize("axis", PLAN_AXES, ids=IDS)
def test_face_values_round_trip(axis: PlanAxis) -> None:
    """A plan's value shown by a face and read back is the plan's value (defaults and a non-default)."""
    plan = ParallelPlan(
        tp=2,
        etp=2,
        zero_stage=1,
        zero_shard=1,
        recompute=Recompute.FULL,
        recompute_num_layers=2,
        loss_chunks=2,
    )
    for value in (getattr(ParallelPlan(), axis.name), getattr(plan, axis.name)):
        assert axis.plan_value(axis.face_value(value)) == value


def test_rule_columns_are_the_axes_and_the_microbatch_count() -> None:
    assert RULE_COLUMNS == (
        "dp",
        "tp",
        "pp",
        "cp",
        "ulysses",
        "ep",
        "etp",
        "vpp",
        "micro_batch_size",
        "sequence_parallel",
        "schedule_code",
        "num_microbatches",
    )


def test_constrainable_axes_and_their_bounds() -> None:
    assert set(AXES) == {"tp", "cp", "ulysses", "pp", "ep", "vpp", "micro_batch_size"}
    assert AXIS_MAXIMUM["pp"] == (limits.MAX_PP, "MAX_PP") and AXIS_MAXIMUM["vpp"] == (
        limits.MAX_VPP,
        "MAX_VPP",
    )
    assert AXIS_MAXIMUM["tp"] == (limits.MAX_DEVICES, "MAX_DEVICES")
    with pytest.raises(ValueError, match=r"fixed\[pp\].*MAX_PP"):
        Constraints(fixed={"pp": limits.MAX_PP + 1})


@pytest.fixture(scope="module")
def small_search():  # type: ignore[no-untyped-def]
    model = load_model("mixtral-8x7b")
    cluster = load_cluster("dgx-h100", num_nodes=2)
    workload = Workload(seq_len=4096, global_batch_size=64)
    result = search(model, cluster, workload, top_k=3)
    return result, build_space(model, cluster, Constraints())


_SPACE_COLUMN = {"schedule": "schedule_code", "rank_order": "order_code", "recompute": "recompute_code"}


@pytest.mark.parametrize("axis", PLAN_AXES, ids=IDS)
def test_axis_reaches_the_search_and_the_result_columns(axis: PlanAxis, small_search) -> None:  # type: ignore[no-untyped-def]
    result, space = small_search
    assert axis.name in PLAN_COLUMNS and axis.name in result.plans.columns
    values = result.plans[axis.name].to_list()
    if not axis.searched:  # every plan holds the default (etp as its rule column's 0: automatic)
        default = getattr(ParallelPlan(), axis.name)
        assert [axis.plan_value(v) for v in values] == [default] * len(values) and values
        return
    column = _SPACE_COLUMN.get(axis.name, axis.name)
    if axis.enumeration is Enumeration.FEWEST_FITTING:  # the screen's trimmed variants of full recompute
        from workbench.search.screen import trimmed_recompute

        assert callable(trimmed_recompute)
        return
    if (
        axis.enumeration is Enumeration.OFFERED
    ):  # one screen per value the stack offers (bf16 here: the stack's own)
        from workbench.presets.frameworks import all_frameworks
        from workbench.search.planner import _offered_choices

        workload = Workload(seq_len=1, global_batch_size=1, dtype=axis.dtype or "bf16")
        assert any(  # some stack offers a choice on it, which the planner then screens each of
            len(_offered_choices(fw, workload)) > 1 and len(fw.offered(axis.profile_field or "")) > 1
            for fw in all_frameworks()
        )
        assert set(values) == {None}  # the default stack (Megatron-Core) offers one value in bf16
        return
    in_space = column in space.layout or hasattr(space, column)
    assert in_space, f"{axis.name}: not in the plan space ({column})"
    if axis.constrainable:
        assert axis.name in AXES


@pytest.mark.parametrize("axis", [a for a in PLAN_AXES if a.constrainable], ids=lambda a: a.name)
def test_a_constrainable_axis_narrows_the_space(axis: PlanAxis) -> None:
    """``Constraints.fixed`` on the axis leaves only that value in the space (vpp: a schedule that needs an
    exact vpp keeps its own, and pp = 1 rows hold 1)."""
    space = build_space(
        load_model("mixtral-8x7b"), load_cluster("dgx-h100", num_nodes=2), Constraints(fixed={axis.name: 2})
    )
    values = set(
        np.asarray(
            space.layout[axis.name] if axis.name in space.layout else getattr(space, axis.name)
        ).tolist()
    )
    if axis.name == "vpp":
        assert 2 in values and values <= {1, 2}
    else:
        assert values == {2}


def test_result_rows_give_back_their_plans(small_search) -> None:  # type: ignore[no-untyped-def]
    result, _ = small_search
    for row, est in zip(result.plans.to_dicts(), result.estimates, strict=False):
        assert plan_from_row(row) == est.plan


def _cli_plan(args: str) -> ParallelPlan:
    base = "--model llama-3.1-70b --cluster dgx-h100 --nodes 8 --seq-len 8192 --global-batch 256 "
    ctx = estimate_cmd.make_context("estimate", shlex.split(base + args))
    return build_inputs(dict(ctx.params))[3]


def test_plans_built_from_estimate_flags() -> None:
    """Plans from flag sets, field by field, as ``build_inputs`` built them before the table (64 devices)."""
    assert _cli_plan("--tp 4 --pp 8 --vpp 5") == ParallelPlan(
        dp=2, tp=4, pp=8, vpp=5, sequence_parallel=True, schedule="interleaved-1f1b"
    )
    assert _cli_plan("--tp 8 --dp 2") == ParallelPlan(dp=2, tp=8, sequence_parallel=True, schedule="1f1b")
    assert _cli_plan("") == ParallelPlan(dp=64)
    every = (
        "--tp 2 --pp 2 --cp 4 --ulysses 2 --ep 8 --etp 1 --vpp 3 --micro-batch 2 --zero 3 --zero-shard 8 "
        "--recompute full --recompute-num-layers 3 --no-sequence-parallel --schedule ZB-H1 --loss-chunks 4 "
        "--offload-optimizer --offload-activations --vocab-parallel --rank-order tp-cp-ep-pp-dp"
    )
    plan = _cli_plan(every)
    expected = {
        "dp": 4,
        "tp": 2,
        "pp": 2,
        "cp": 4,
        "ulysses": 2,
        "ep": 8,
        "etp": 1,
        "vpp": 3,
        "micro_batch_size": 2,
        "zero_stage": 3,
        "zero_shard": 8,
        "sequence_parallel": False,
        "recompute": Recompute.FULL,
        "recompute_num_layers": 3,
        "schedule": "zb-h1",
        "loss_chunks": 4,
        "offload_optimizer": True,
        "offload_activations": True,
        "vocab_parallel": True,
        "rank_order": (Axis.TP, Axis.CP, Axis.EP, Axis.PP, Axis.DP),
    }
    assert {k: getattr(plan, k) for k in expected} == expected
    with pytest.raises(ValueError, match=r"tp\*pp\*cp = 3 does not divide the cluster's 64 devices"):
        _cli_plan("--tp 3")


def test_data_parallel_degree() -> None:
    assert data_parallel_degree(64, tp=4, pp=8, cp=1) == 2
    dp = data_parallel_degree(64, tp=np.array([1, 2, 8]), pp=np.array([1, 4, 2]), cp=np.array([2, 1, 4]))
    assert dp.tolist() == [32, 8, 1]
    with pytest.raises(ValueError, match=r"tp\*pp\*cp = 12 does not divide the cluster's 64 devices"):
        data_parallel_degree(64, tp=np.array([2, 3]), pp=np.array([2, 2]), cp=np.array([2, 2]))


def _columns_by_hand(plan: ParallelPlan, workload: Workload) -> dict[str, np.ndarray]:
    """``plan_columns`` as it was written out by hand before the table named each axis' cost column (main
    5349977): the reference the derived columns must equal."""
    from workbench.cost.memory import RECOMPUTE_CODES
    from workbench.cost.placement import axis_stride

    cols = {
        "tp": plan.tp,
        "cp": plan.cp,
        "ulysses": plan.ulysses,
        "loss_chunks": plan.loss_chunks,
        "offload_optimizer": plan.offload_optimizer,
        "offload_activations": plan.offload_activations,
        "offload_layers": plan.offload_activation_layers or 0,
        "vocab_parallel": plan.vocab_parallel,
        "pp": plan.pp,
        "dp": plan.dp,
        "ep": plan.ep,
        "etp": plan.expert_tp,
        "zero_shard": plan.shard_group,
        "vpp": plan.vpp,
        "micro_batch_size": plan.micro_batch_size,
        "zero_stage": plan.zero_stage,
        "recompute_code": RECOMPUTE_CODES[plan.recompute.value],
        "recompute_layers": plan.recompute_num_layers or 0,
        "sequence_parallel": plan.sequence_parallel,
        "num_microbatches": plan.num_microbatches(workload),
        "num_devices": plan.num_devices,
        **{f"{a}_stride": axis_stride(plan, a) for a in ("tp", "cp", "dp", "pp")},
    }
    return {k: np.asarray(v) for k, v in cols.items()}


def _random_plan(rng: np.random.Generator) -> ParallelPlan:
    def pick(*values):  # type: ignore[no-untyped-def]
        return values[int(rng.integers(len(values)))]

    cp = pick(1, 2, 4)
    dp, zero = pick(1, 2, 8), pick(0, 1, 2, 3)
    recompute, offload = pick(*Recompute), pick(False, True)
    return ParallelPlan(
        dp=dp,
        tp=pick(1, 2, 8),
        pp=pick(1, 2, 4),
        cp=cp,
        ulysses=pick(*(u for u in (1, 2, 4) if cp % u == 0)),
        ep=pick(1, 2),
        etp=pick(None, 1, 2),
        vpp=pick(1, 2),
        micro_batch_size=pick(1, 2, 4),
        zero_stage=zero,
        zero_shard=pick(None, 1) if zero else None,
        sequence_parallel=pick(False, True),
        recompute=recompute,
        recompute_num_layers=pick(None, 1, 3) if recompute is Recompute.FULL else None,
        loss_chunks=pick(1, 4),
        offload_optimizer=pick(False, True),
        offload_activations=offload,
        offload_activation_layers=pick(None, 2) if offload else None,
        vocab_parallel=pick(False, True),
        fp8_recipe=pick(None, "delayed"),
        rank_order=pick(*RANK_ORDERS.values()),
    )


def test_cost_columns_derive_from_the_table_as_written_by_hand() -> None:
    """``plan_columns`` (every row's ``cost_column`` plus the computed ones) equals the hand-written columns on
    500 random plans: the same names, values and dtypes."""
    from workbench.cost.step import plan_columns

    rng = np.random.default_rng(44)
    for _ in range(500):
        plan = _random_plan(rng)
        workload = Workload(seq_len=4096, global_batch_size=int(rng.choice([64, 96, 256])))
        derived, by_hand = plan_columns(plan, workload), _columns_by_hand(plan, workload)
        assert derived.keys() == by_hand.keys(), plan
        for k, v in by_hand.items():
            assert derived[k].dtype == v.dtype and derived[k] == v, (k, plan)


def test_every_count_and_flag_is_a_cost_column_or_computed() -> None:
    """A count or a flag reaches the cost model as its ``cost_column``; only etp (the expert tp in force) and
    zero_shard (the shard group) are worked out in ``plan_columns`` instead, so a new axis cannot be left out."""
    from workbench.cost.step import plan_columns

    computed = {
        a.name for a in PLAN_AXES if a.domain in (Domain.COUNT, Domain.FLAG) and a.cost_column is None
    }
    assert computed == {"etp", "zero_shard"}
    cols = plan_columns(ParallelPlan(), Workload(seq_len=1, global_batch_size=1))
    assert {a.cost_column for a in PLAN_AXES if a.cost_column} | computed <= set(cols)


@pytest.mark.parametrize("axis", [a for a in PLAN_AXES if a.only_with], ids=lambda a: a.name)
def test_an_axis_that_needs_another_is_refused_without_it(axis: PlanAxis) -> None:
    """A row's ``only_with`` is what ``ParallelPlan`` checks: the count set without the other axis' value is
    refused naming both; with it, accepted."""
    other, needed = axis.only_with or ("", None)
    with pytest.raises(
        ValueError, match=rf"{axis.name}=2 needs {other} {str(needed).lower()} \(got {other} "
    ):
        ParallelPlan(**{axis.name: 2})
    assert getattr(ParallelPlan(**{axis.name: 2, other: needed}), axis.name) == 2
    assert {a.name: a.only_with for a in PLAN_AXES if a.only_with} == {
        "recompute_num_layers": ("recompute", "full"),
        "offload_activation_layers": ("offload_activations", True),
    }


# ---- the app ---------------------------------------------------------------------------------------------
pytest.importorskip("panel")


@pytest.fixture(scope="module")
def composer():  # type: ignore[no-untyped-def]
    from workbench_widgets.app.store import WorkbenchStore
    from workbench_widgets.app.views import Composer

    return Composer(store=WorkbenchStore())


_PARAM_KIND = {
    Control.DERIVED: param.Integer,
    Control.DEGREE: param.Selector,
    Control.CHOICE: param.Selector,
    Control.INTEGER: param.Integer,
    Control.BOOLEAN: param.Boolean,
}


@pytest.mark.parametrize("axis", PLAN_AXES, ids=IDS)
def test_axis_reaches_the_app(axis: PlanAxis, composer) -> None:  # type: ignore[no-untyped-def]
    from workbench_widgets.app.state import APP_PLAN_FIELDS, DEGREE_FIELDS, WorkbenchState
    from workbench_widgets.app.views import LABELS, PLAN_CONTROLS

    p = WorkbenchState.param[axis.name]
    assert (
        isinstance(p, _PARAM_KIND[axis.app.kind]) and p.default == axis.app.default and p.doc == axis.app.doc
    )
    assert p.constant == (axis.app.kind is Control.DERIVED)
    assert axis.name in APP_PLAN_FIELDS and axis.name in PLAN_CONTROLS and LABELS[axis.name] == axis.app.label
    assert (axis.name in DEGREE_FIELDS) == (axis.app.kind is Control.DEGREE)
    widget = composer.widgets[axis.name]
    assert widget.name == axis.app.label and f"wb-{axis.name}" in widget.css_classes


def test_app_degree_fields_keep_their_order() -> None:
    from workbench_widgets.app.state import DEGREE_FIELDS

    assert DEGREE_FIELDS == ("tp", "pp", "cp", "ulysses", "ep", "etp", "vpp", "micro_batch_size")


def test_the_app_command_line_builds_the_apps_plan(composer) -> None:  # type: ignore[no-untyped-def]
    """The ``workbench estimate`` line the app shows, parsed by the CLI, gives the plan the app prices."""
    from workbench_widgets.app.app import cli_command

    store = composer.store
    s = store.state
    s.param.update(recompute="full", recompute_num_layers=2, loss_chunks=2, offload_optimizer=True)
    s.param.update(offload_activation_layers=3)  # without activation offload: no count (None)
    try:
        assert store.plan().offload_activation_layers is None
        s.param.update(offload_activations=True)
        args = shlex.split(cli_command(s))[2:]
        ctx = estimate_cmd.make_context("estimate", args)
        built = build_inputs(dict(ctx.params))[3]
        assert built == store.plan()
        assert store.plan().recompute_num_layers == 2 and store.plan().loss_chunks == 2
        assert store.plan().offload_activation_layers == 3
    finally:
        s.param.update(recompute="selective", recompute_num_layers=0, loss_chunks=1, offload_optimizer=False)
        s.param.update(offload_activations=False, offload_activation_layers=0)


@pytest.mark.parametrize("axis", [a for a in PLAN_AXES if a.only_with], ids=lambda a: a.name)
def test_the_apps_count_is_none_without_the_axis_it_needs(axis: PlanAxis, composer) -> None:  # type: ignore[no-untyped-def]
    """The app's controls give the plan None for an axis whose ``only_with`` axis lacks its value
    (``plan_values``), and the control's count with it."""
    from workbench_widgets.app.specs import plan_values

    s = composer.store.state
    other, needed = axis.only_with or ("", None)
    on = plan_axis(other).face_value(needed)
    off = next(v for v in plan_axis(other).app.objects or (False,) if v != on)
    before = {axis.name: getattr(s, axis.name), other: getattr(s, other)}
    try:
        s.param.update({axis.name: 2, other: on})
        assert plan_values(s)[axis.name] == 2
        s.param.update({other: off})
        assert plan_values(s)[axis.name] is None
    finally:
        s.param.update(before)


def test_load_plan_round_trips_every_axis(composer) -> None:  # type: ignore[no-untyped-def]
    store = composer.store
    before = store.plan()
    plan = ParallelPlan(
        dp=before.dp,
        tp=before.tp,
        pp=before.pp,
        vpp=before.vpp,
        micro_batch_size=before.micro_batch_size,
        zero_stage=3,
        zero_shard=before.dp * before.cp,
        loss_chunks=4,
        offload_activations=True,
        sequence_parallel=True,
        recompute=Recompute.NONE,
        schedule=before.schedule,
        rank_order=(Axis.TP, Axis.CP, Axis.EP, Axis.PP, Axis.DP),
    )
    try:
        store.load_plan(plan)
        assert store.plan() == plan
    finally:
        store.load_plan(before)
    assert store.plan() == before
