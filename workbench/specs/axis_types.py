"""The vocabulary of the plan-axis table (``workbench.specs.axes``): the record of one axis (``PlanAxis``) with its
CLI option and app control, and the named choices the axes take (``Recompute``, the rank orders).

Kept apart from the table so that the table module holds the rows only; ``ParallelPlan`` reads its named choices
from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    """Recompute the attention core only (Korthikanti et al. 2022, arXiv:2205.05198, section 4.3)."""
    FULL = "full"
    """Keep only each layer's input; recompute the whole layer in the backward pass."""


class Axis(StrEnum):
    """Parallel dimensions, by the field's names."""

    TP = "tp"
    CP = "cp"
    EP = "ep"
    DP = "dp"
    PP = "pp"


DEFAULT_RANK_ORDER: tuple[Axis, ...] = (Axis.TP, Axis.CP, Axis.EP, Axis.DP, Axis.PP)
"""Innermost first: tensor-parallel ranks are adjacent (inside a node), pipeline stages outermost."""

RANK_ORDERS: dict[str, tuple[Axis, ...]] = {
    "tp-cp-ep-dp-pp": DEFAULT_RANK_ORDER,
    "tp-cp-ep-pp-dp": (Axis.TP, Axis.CP, Axis.EP, Axis.PP, Axis.DP),
}
"""Named rank orders the planner searches (innermost first). ``tp-cp-ep-dp-pp``: Megatron-Core's default
``order`` of ``parallel_state.initialize_model_parallel`` and torchtitan's device mesh (pp outermost);
``tp-cp-ep-pp-dp``: Megatron-Core's ``--use-tp-pp-dp-mapping`` (a pipeline's stages on neighbouring ranks,
data-parallel replicas outermost), which keeps the pipeline hops inside a node or a rail group when
tp*cp*pp fits there and moves the gradient reduction out instead."""


def rank_order_name(order: tuple[Axis, ...]) -> str:
    """``tp-cp-ep-dp-pp`` style name of a rank order."""
    return "-".join(Axis(a).value for a in order)


class Domain(StrEnum):
    """What values an axis takes."""

    COUNT = "count"
    """An integer in ``minimum..maximum``."""
    CHOICE = "choice"
    """One of ``choices`` (names)."""
    FLAG = "flag"
    """True or false."""
    SCHEDULE = "schedule"
    """A pipeline schedule name (``workbench.specs.schedule_traits.SCHEDULE_TRAITS``)."""


class Enumeration(StrEnum):
    """How the planner (``workbench.search.space.build_space``) enumerates an axis' candidate values."""

    QUOTIENT = "quotient"
    """Not chosen: the devices left over, devices / (tp*pp*cp) (``workbench.specs.plan.data_parallel_degree``)."""
    DEVICE_DIVISORS = "device divisors"
    """Divisors of the device count whose product with the other such axes divides it (tp capped by default at
    the innermost network level's span, pp at the model's layers)."""
    CP_DIVISORS = "divisors of cp"
    """Divisors of cp that hand each rank whole heads and give an allowed ``cp_kind``."""
    EXPERT_DIVISORS = "divisors of the routed experts"
    """Divisors of the model's routed experts (1 for a dense model)."""
    RANGE = "range"
    """1..maximum (8 by default); a schedule that needs an exact vpp gets only that one."""
    LIST = "constraint list"
    """The values a ``Constraints`` field lists (micro-batch sizes, ZeRO stages, recompute, sequence
    parallelism, schedules, rank orders)."""
    FEWEST_FITTING = "fewest fitting"
    """With full recompute, the fewest layers per chunk that fit (``workbench.search.screen``); else every layer."""
    FIXED = "fixed"
    """Not searched: every plan holds ``ParallelPlan``'s default."""
    OFFERED = "offered by the stack"
    """The values the framework profile offers for the axis' ``profile_field`` (``FrameworkProfile.offered``),
    the planner screening each on its own (``workbench.search.planner``); only under the axis' ``dtype``."""


class Pricing(StrEnum):
    """Where a backend that measures ops on one device (the ``torch-profile`` backend) finds an axis' cost; the
    analytic backend prices every axis with the step model (``workbench.cost.step``)."""

    STEP_MODEL = "step model"
    """It changes the communication, the pipeline schedule, the memory held besides the stored activations or the
    host path: what the step model prices around the measured ops, so a measuring backend prices it with the same
    step-model functions as the analytic backend."""
    MEASURED_OPS = "measured ops"
    """It changes what one device computes or stores (an op's shape, its kernels, the activations it keeps): a
    measuring backend prices it only where it says how, and refuses any value but the plan's default."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CliOption:
    """How ``workbench estimate`` (and every command with its plan options) takes an axis."""

    flag: str
    """The long option, e.g. ``--micro-batch``; a ``FLAG`` axis also gets ``--no-...``."""
    default: Any
    """The option's default; None: unset (the plan's default, or derived: dp, sequence_parallel, schedule)."""
    help: str | None = None
    show_default: bool = False

    @property
    def param(self) -> str:
        """The keyword click passes the value under (``--micro-batch`` -> ``micro_batch``)."""
        return self.flag.removeprefix("--").replace("-", "_")


class Control(StrEnum):
    """The app's control of an axis (``workbench_widgets.app.state`` builds its parameter)."""

    DERIVED = "derived"
    """Shown, not edited: the Store fills it (dp)."""
    DEGREE = "degree"
    """A selector whose options the Store narrows to the valid values (``workbench.specs.degrees``)."""
    CHOICE = "choice"
    """A selector over ``AppControl.objects``."""
    INTEGER = "integer"
    """A number box over ``PlanAxis``'s bounds (``none_as`` and up when set)."""
    BOOLEAN = "boolean"
    """A check box."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AppControl:
    """How the app shows an axis."""

    kind: Control
    label: str
    """The widget's label, with the unit or the meaning of a special value."""
    doc: str
    """The parameter's doc (the widget's tooltip)."""
    default: Any
    """The app's starting value (the app opens on llama-3.1-70b on 8 DGX H100 nodes: tp 8, pp 8)."""
    objects: tuple[Any, ...] = ()
    """A selector's options at start (the Store narrows ``DEGREE`` ones and fills the schedules)."""
    none_as: int | str | None = None
    """The control's value that stands for the plan's None (etp 0: automatic; the FP8 recipe's ``stack``: the
    stack's own); None: the axis is never None."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanAxis:
    """One axis of the training plan: a ``ParallelPlan`` field and how every face offers it."""

    name: str
    """The ``ParallelPlan`` field, and the axis' name in rule columns, result columns and app parameters."""
    domain: Domain
    minimum: int = 1
    """``COUNT``: smallest value."""
    maximum: int | None = None
    """``COUNT``: largest value (a constant of ``workbench.specs.limits``, named by ``limit``)."""
    limit: str | None = None
    """Name of the ``workbench.specs.limits`` constant that sets ``maximum`` (None: a fixed range)."""
    choices: Mapping[str, Any] | None = None
    """``CHOICE``: name -> the plan's value (its name itself, or e.g. the rank order's tuple of axes)."""
    optional: bool = False
    """The plan's field may be None (the automatic or every-rank default)."""
    cli: CliOption
    app: AppControl
    rules: tuple[str, ...] = ()
    """Keys of the rules (``workbench.specs.rule_table.rule_table``) whose mask reads this axis."""
    rule_column: str | None = None
    """Its column in the rule table's plan columns (``RULE_COLUMNS``: an integer, booleans as 0/1, None as 0);
    None: no rule reads it."""
    enumeration: Enumeration
    constrainable: bool = False
    """``workbench.search.space.Constraints.fixed`` and ``.maximum`` accept it."""
    profile_field: str | None = None
    """The ``FrameworkProfile`` field the plan chooses, among what the stack offers (``FrameworkProfile.offered``:
    the profile's own value and its ``offers`` list for the field); the plan's None keeps the stack's value.
    ``FrameworkProfile.running`` lays the plan's choice over the profile and ``unsupported`` refuses a value the
    stack does not offer, for every such axis: the axis' cost is the profile field's."""
    dtype: str | None = None
    """The workload dtype under which the axis matters (the FP8 recipe: fp8); None: always. A plan that sets it
    under another dtype is refused (``FrameworkProfile.unsupported``) and the planner enumerates it only then."""
    cost_column: str | None = None
    """Its name among the cost model's plan columns (``workbench.cost.context.plan_columns``: the plan's value,
    its None as ``app.none_as``); None: not a column, or one worked out from several fields there (etp: the expert
    tp in force, zero_shard: the shard group, recompute: ``recompute_code``)."""
    only_with: tuple[str, Any] | None = None
    """(axis, value): the axis applies only while that other axis has that value (offload_activation_layers with
    offload_activations true, recompute_num_layers with recompute full); the plan's None otherwise.
    ``ParallelPlan`` refuses it set without, and the app's controls give None without (``applies``)."""
    pricing: Pricing
    """How a backend that measures ops on one device prices it (``Pricing``)."""

    def __post_init__(self) -> None:
        problem = None
        if self.domain is Domain.COUNT and (self.maximum is None or self.maximum < self.minimum):
            problem = f"a count needs a maximum >= minimum {self.minimum}, got {self.maximum!r}"
        elif (self.domain is Domain.CHOICE) != bool(self.choices):
            problem = "choices are given exactly for a choice axis"
        elif self.constrainable and (self.domain is not Domain.COUNT or self.limit is None):
            problem = "a constrainable axis is a count bounded by a limits constant"
        elif self.app.none_as is not None and not self.optional:
            problem = "none_as stands for None: only an optional axis has one"
        elif self.profile_field is not None and not (self.optional and self.domain is Domain.CHOICE):
            problem = "a profile field's axis is an optional choice (None: the stack's own value)"
        elif (self.enumeration is Enumeration.OFFERED) != (self.profile_field is not None):
            problem = "an axis is enumerated as the stack offers exactly when it names a profile field"
        elif self.cost_column is not None and (
            self.domain not in (Domain.COUNT, Domain.FLAG) or (self.optional and self.app.none_as is None)
        ):
            problem = "a cost column is a count or a flag, its None (when optional) the app's none_as"
        elif self.only_with is not None and not self.optional:
            problem = "an axis that applies only with another is optional (None: it does not apply)"
        if problem:
            raise ValueError(f"PlanAxis {self.name!r}: {problem}")

    def applies(self, values: Mapping[str, Any]) -> bool:
        """Whether the axis applies among the plan's ``values`` (field -> the plan's value): always, or while its
        ``only_with`` axis has the value named there."""
        return self.only_with is None or values[self.only_with[0]] == self.only_with[1]

    def column_value(self, value: Any) -> Any:
        """The plan's value as its cost column holds it: None as ``app.none_as``."""
        return self.app.none_as if value is None else value

    @property
    def searched(self) -> bool:
        """The planner enumerates more than one value of it."""
        return self.enumeration is not Enumeration.FIXED

    @property
    def cli_declaration(self) -> str:
        """The click declaration: ``--x``, or ``--x/--no-x`` for a flag."""
        flag = self.cli.flag
        return f"{flag}/--no-{flag.removeprefix('--')}" if self.domain is Domain.FLAG else flag

    @property
    def app_bounds(self) -> tuple[int, int | None]:
        """An ``INTEGER`` control's range: from ``none_as`` (when set) or ``minimum`` to ``maximum``."""
        low = self.app.none_as if isinstance(self.app.none_as, int) else self.minimum
        return low, self.maximum

    def plan_value(self, value: Any) -> Any:
        """A face's value (a CLI option, an app control, a result cell) as the plan's: None or the control's
        ``none_as`` -> None, a choice's name -> its value."""
        if value is None or (self.app.none_as is not None and value == self.app.none_as):
            return None
        if self.domain is Domain.COUNT:
            return int(value)
        if self.domain is Domain.FLAG:
            return bool(value)
        if self.choices is not None:
            return self.choices[str(value)]
        return str(value)

    def face_value(self, value: Any) -> Any:
        """The plan's value as a face shows it (the inverse of ``plan_value``): None -> ``none_as``, a choice's
        value -> its name."""
        if value is None:
            return self.app.none_as
        if self.choices is not None:
            names = [k for k, v in self.choices.items() if v == value or k == value]
            if not names:
                raise ValueError(f"{self.name}: {value!r} is none of {', '.join(self.choices)}")
            return names[0]
        if self.domain is Domain.COUNT:
            return int(value)
        return bool(value) if self.domain is Domain.FLAG else str(value)
