"""The rule table: every constraint a ``ParallelPlan`` must meet, one record per rule.

A rule is checked three ways from the same record: ``ParallelPlan.violations`` (one plan: a batch of one), the
planner's grid (``workbench.search.grid``: millions of plans, counted by ``reason``) and the app (the
choice lists of ``workbench.specs.degrees`` and the note under ``control``). This module holds the records and
the plan's own rules (``PLAN_RULES``); the schedules' rules are built from their traits
(``workbench.specs.schedule_traits.SCHEDULE_RULES``) and ``workbench.specs.rule_table`` joins the two.

Plan columns (``RULE_COLUMNS``) are equal-length numpy arrays, one entry per plan: the integer degrees,
``sequence_parallel`` (bool), ``schedule_code`` (index into ``RuleContext.schedule_names``) and
``num_microbatches`` (0 where dp * micro_batch_size does not divide the global batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.specs.axes import PLAN_AXES
from workbench.specs.errors import unique_index
from workbench.specs.limits import simulated_pairs_sentence, too_many_simulated_pairs

if TYPE_CHECKING:
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec

Columns = Mapping[str, Any]
"""Plan column name -> numpy array (or a scalar that broadcasts against the other columns)."""
Row = Mapping[str, int]
"""One plan's columns as Python ints (booleans as 0/1)."""

RULE_COLUMNS: tuple[str, ...] = (
    *(a.rule_column for a in PLAN_AXES if a.rule_column is not None),
    "num_microbatches",
)
"""The plan columns a rule mask may read: each plan axis' ``rule_column`` (``workbench.specs.axes``) and the
micro-batch count."""

PLAN_FIELDS: tuple[str, ...] = tuple(a.name for a in PLAN_AXES if a.name != "rank_order")
"""The fields of ``ParallelPlan`` that a user chooses (every plan axis but ``rank_order``), in display order."""

CONTROLS: tuple[str, ...] = (*PLAN_FIELDS, "cluster")
"""What a user changes to fix a rule: a plan field (``PLAN_FIELDS``) or the cluster
(its device count)."""

REJECTION_REASONS: tuple[tuple[str, str], ...] = (
    ("heads", "tp does not split the attention and key/value heads"),
    ("layers", "pp*vpp does not divide the layers (or, with uneven stages, exceeds them)"),
    ("batch", "dp*micro_batch_size does not divide the global batch"),
    ("sequence", "cp does not divide the sequence length"),
    ("experts", "ep does not divide dp*cp*tp"),
    ("schedule", "breaks the schedule's micro-batch rules"),
)
"""The planner's rejection reasons (key, text) in checking order; a plan counts under the first it breaks."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RuleContext:
    """What the rules read besides the plan columns. Each part is needed only by the rules that read it
    (``need_*`` raise ValueError naming the missing part)."""

    model: ModelSpec | None = None
    cluster: ClusterSpec | None = None
    """Needed only by the device-count rule (the planner's space meets it by construction)."""
    seq_len: int | None = None
    """The workload's tokens per sequence."""
    global_batch_size: int | None = None
    """The workload's sequences per optimizer step."""
    schedule_names: tuple[str, ...] = ()
    """``schedule_code`` i means ``schedule_names[i]``."""
    uneven_stages: bool = False
    """The stack lets pipeline stages hold different layer counts (``FrameworkProfile.uneven_stages``): then
    pp * vpp need only not exceed the layers (the remainder goes to the middle stages,
    ``workbench.cost.step.stage_layer_span``); else it must divide them."""

    def need_model(self) -> ModelSpec:
        if self.model is None:
            raise ValueError("RuleContext: this rule reads the model; pass model=")
        return self.model

    def need_seq_len(self) -> int:
        if self.seq_len is None:
            raise ValueError("RuleContext: this rule reads the sequence length; pass seq_len=")
        return self.seq_len

    def need_global_batch_size(self) -> int:
        if self.global_batch_size is None:
            raise ValueError("RuleContext: this rule reads the global batch; pass global_batch_size=")
        return self.global_batch_size

    def need_cluster(self) -> ClusterSpec:
        if self.cluster is None:
            raise ValueError("RuleContext: this rule reads the cluster; pass cluster=")
        return self.cluster


Mask = Callable[[Columns, RuleContext], Any]
Sentence = Callable[[Row, RuleContext], str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """One constraint on a plan."""

    key: str
    """Unique name, e.g. ``"tp_divides_heads"``."""
    control: str
    """The control that fixes it (one of ``CONTROLS``); the app shows the sentence under it."""
    reason: str | None
    """Key of ``REJECTION_REASONS`` the planner counts it under; None: the planner's space holds no plan that
    breaks it (``workbench.search.space`` leaves such plans out), so the grid does not evaluate it."""
    reads: tuple[str, ...]
    """The ``RULE_COLUMNS`` its mask reads (a choice list passes these, and only these)."""
    mask: Mask
    """Plan columns -> bool array, True where the plan breaks the rule. Pure numpy, so one plan is a
    batch of one."""
    sentence: Sentence
    """One broken plan's row -> what is wrong and what to change, as a sentence."""

    def __post_init__(self) -> None:
        if self.control not in CONTROLS:
            raise ValueError(
                f"Rule {self.key!r}: control must be one of {', '.join(CONTROLS)}, got {self.control!r}"
            )
        reasons = [k for k, _ in REJECTION_REASONS]
        if self.reason is not None and self.reason not in reasons:
            raise ValueError(f"Rule {self.key!r}: reason must be None or one of {', '.join(reasons)}")
        unknown = [c for c in self.reads if c not in RULE_COLUMNS]
        if unknown:
            raise ValueError(
                f"Rule {self.key!r}: reads unknown columns {unknown}; allowed: {', '.join(RULE_COLUMNS)}"
            )

    def violated(self, cols: Columns, ctx: RuleContext) -> np.ndarray:
        """The mask as a bool array of the columns' broadcast shape."""
        shape = np.broadcast_shapes(*(np.shape(cols[c]) for c in self.reads))
        return np.broadcast_to(np.asarray(self.mask(cols, ctx), dtype=bool), shape)


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    """One broken rule of one plan."""

    key: str
    """The ``Rule.key``."""
    control: str
    """The control that fixes it (``Rule.control``)."""
    sentence: str

    def __str__(self) -> str:
        return self.sentence


def _ep_used(c: Columns) -> Any:
    return np.asarray(c["ep"]) > 1


def _devices_sentence(r: Row, ctx: RuleContext) -> str:
    cluster, n = ctx.need_cluster(), r["dp"] * r["tp"] * r["pp"] * r["cp"]
    return (
        f"dp*tp*pp*cp = {r['dp']}*{r['tp']}*{r['pp']}*{r['cp']} = {n} must equal the cluster's "
        f"{cluster.num_devices} devices ({cluster.num_nodes} nodes x {cluster.devices_per_node})."
    )


def _kv_mask(c: Columns, ctx: RuleContext) -> Any:
    m, tp = ctx.need_model(), np.asarray(c["tp"])
    kv = m.num_key_value_heads
    return (m.attention != "mla") & (kv % tp != 0) & (tp % kv != 0)


def _ulysses_heads_mask(c: Columns, ctx: RuleContext) -> Any:
    m, split = ctx.need_model(), np.asarray(c["tp"]) * c["ulysses"]
    kv_bad = (m.attention != "mla") & (m.num_key_value_heads % split != 0)
    return (np.asarray(c["ulysses"]) > 1) & ((m.num_attention_heads % split != 0) | kv_bad)


PLAN_RULES: tuple[Rule, ...] = (
    Rule(
        key="devices",
        control="cluster",
        reason=None,
        reads=("dp", "tp", "pp", "cp"),
        mask=lambda c, ctx: c["dp"] * c["tp"] * c["pp"] * c["cp"] != ctx.need_cluster().num_devices,
        sentence=_devices_sentence,
    ),
    Rule(
        key="tp_divides_heads",
        control="tp",
        reason="heads",
        reads=("tp",),
        mask=lambda c, ctx: ctx.need_model().num_attention_heads % np.asarray(c["tp"]) != 0,
        sentence=lambda r, ctx: (
            f"tp={r['tp']} must divide the {ctx.need_model().num_attention_heads} attention heads."
        ),
    ),
    Rule(
        key="tp_kv_heads",
        control="tp",
        reason="heads",
        reads=("tp",),
        mask=_kv_mask,
        sentence=lambda r, ctx: (
            f"tp={r['tp']} and the {ctx.need_model().num_key_value_heads} key/value heads must divide one another."
        ),
    ),
    Rule(
        key="layers",
        control="pp",
        reason="layers",
        reads=("pp", "vpp"),
        mask=lambda c, ctx: (
            np.asarray(c["pp"]) * c["vpp"] > ctx.need_model().num_layers
            if ctx.uneven_stages
            else ctx.need_model().num_layers % (np.asarray(c["pp"]) * c["vpp"]) != 0
        ),
        sentence=lambda r, ctx: (
            f"pp*vpp = {r['pp']}*{r['vpp']} = {r['pp'] * r['vpp']} must "
            + (
                f"not exceed the {ctx.need_model().num_layers} layers (a stage holds at least one)."
                if ctx.uneven_stages
                else f"divide the {ctx.need_model().num_layers} layers (this stack runs equal stages)."
            )
        ),
    ),
    Rule(
        key="batch",
        control="micro_batch_size",
        reason="batch",
        reads=("dp", "micro_batch_size"),
        mask=lambda c, ctx: ctx.need_global_batch_size() % (np.asarray(c["dp"]) * c["micro_batch_size"]) != 0,
        sentence=lambda r, ctx: (
            f"dp*micro_batch_size = {r['dp']}*{r['micro_batch_size']} = {r['dp'] * r['micro_batch_size']} "
            f"must divide the global batch of {ctx.need_global_batch_size()} sequences."
        ),
    ),
    Rule(
        key="sequence",
        control="cp",
        reason="sequence",
        reads=("cp",),
        mask=lambda c, ctx: ctx.need_seq_len() % np.asarray(c["cp"]) != 0,
        sentence=lambda r, ctx: f"cp={r['cp']} must divide the sequence length {ctx.need_seq_len()}.",
    ),
    Rule(
        key="ulysses_divides_cp",
        control="cp",
        reason="sequence",
        reads=("cp", "ulysses"),
        mask=lambda c, ctx: np.asarray(c["cp"]) % np.asarray(c["ulysses"]) != 0,
        sentence=lambda r, ctx: (
            f"ulysses={r['ulysses']} must divide cp={r['cp']} (the rest of cp is the ring)."
        ),
    ),
    Rule(
        key="ulysses_heads",
        control="cp",
        reason="heads",
        reads=("tp", "ulysses"),
        mask=_ulysses_heads_mask,
        sentence=lambda r, ctx: (
            f"tp*ulysses = {r['tp']}*{r['ulysses']} must divide the {ctx.need_model().num_attention_heads} "
            "attention heads"
            + (
                ""
                if ctx.need_model().attention == "mla"
                else f" and the {ctx.need_model().num_key_value_heads} key/value heads"
            )
            + " (Ulysses' all-to-all hands each rank whole heads)."
        ),
    ),
    Rule(
        key="ep_needs_moe",
        control="ep",
        reason="experts",
        reads=("ep",),
        mask=lambda c, ctx: _ep_used(c) & (not ctx.need_model().is_moe),
        sentence=lambda r, ctx: (
            f"ep={r['ep']} needs a mixture-of-experts model; {ctx.need_model().name} is dense (use ep=1)."
        ),
    ),
    Rule(
        key="ep_divides_experts",
        control="ep",
        reason="experts",
        reads=("ep",),
        mask=lambda c, ctx: (
            _ep_used(c) & ctx.need_model().is_moe & (ctx.need_model().num_experts % np.asarray(c["ep"]) != 0)
        ),
        sentence=lambda r, ctx: (
            f"ep={r['ep']} must divide the {ctx.need_model().num_experts} routed experts."
        ),
    ),
    Rule(
        key="ep_divides_groups",
        control="ep",
        reason="experts",
        reads=("ep", "etp", "dp", "cp", "tp"),
        mask=lambda c, ctx: (
            (_ep_used(c) | (np.asarray(c["etp"]) > 0))
            & ((np.asarray(c["dp"]) * c["cp"] * c["tp"]) % (c["ep"] * np.maximum(c["etp"], 1)) != 0)
        ),
        sentence=lambda r, ctx: (
            (f"ep*etp = {r['ep']}*{r['etp']}" if r["etp"] else f"ep={r['ep']}")
            + f" must divide dp*cp*tp = {r['dp'] * r['cp'] * r['tp']} (expert groups are carved from them)."
        ),
    ),
    Rule(
        key="etp_divides_experts",
        control="ep",
        reason="experts",
        reads=("etp",),
        mask=lambda c, ctx: (
            (np.asarray(c["etp"]) > 1)
            & (
                (not ctx.need_model().is_moe)
                | (ctx.need_model().moe_ffn_hidden_size % np.maximum(np.asarray(c["etp"]), 1) != 0)
            )
        ),
        sentence=lambda r, ctx: (
            (
                f"etp={r['etp']} must divide the expert width {ctx.need_model().moe_ffn_hidden_size}"
                if ctx.need_model().is_moe
                else f"etp={r['etp']} needs a mixture-of-experts model; {ctx.need_model().name} is dense"
            )
            + "."
        ),
    ),
    Rule(
        key="sequence_parallel_needs_tp",
        control="sequence_parallel",
        reason=None,
        reads=("sequence_parallel", "tp"),
        mask=lambda c, ctx: np.asarray(c["sequence_parallel"], dtype=bool) & (np.asarray(c["tp"]) == 1),
        sentence=lambda r, ctx: "sequence_parallel needs tp > 1 (it shards along the tensor-parallel group).",
    ),
    Rule(
        key="timeline_size",
        control="micro_batch_size",
        reason="schedule",
        reads=("pp", "vpp", "num_microbatches"),
        mask=lambda c, ctx: too_many_simulated_pairs(c["pp"], c["vpp"], c["num_microbatches"]),
        sentence=lambda r, ctx: simulated_pairs_sentence(r["pp"], r["vpp"], r["num_microbatches"]) + ".",
    ),
    Rule(
        key="vpp_needs_pp",
        control="vpp",
        reason=None,
        reads=("pp", "vpp"),
        mask=lambda c, ctx: (np.asarray(c["pp"]) == 1) & (np.asarray(c["vpp"]) > 1),
        sentence=lambda r, ctx: f"vpp={r['vpp']} needs pp > 1 (virtual stages interleave a pipeline).",
    ),
)
"""Rules on the degrees, the model and the workload. Sources: Megatron splits whole attention heads and
tp and the key/value heads must divide one another (MLA shares no KV heads, so only attention heads count);
pp * vpp divides the layers; Ulysses' all-to-all gives each of its ranks whole attention and key/value heads
(Transformer Engine's ``cp_comm_type="a2a"`` asserts both head counts divide the a2a degree; DeepSpeed-Ulysses
needs heads divisible by its degree); ep splits the routed experts inside dp * cp * tp (Megatron-Core); sequence
parallelism shards along tp; 2 * cp load-balancing chunks are not required. ``timeline_size`` is the
workbench's own bound: a step's simulated timeline holds at most ``limits.MAX_SIMULATED_STAGE_MICROBATCHES``
(stage, micro-batch) pairs."""


def index_rules(rules: Iterable[Rule]) -> Mapping[str, Rule]:
    """Rules by key, in order (read-only). Raises ValueError on a duplicate key."""
    return unique_index(rules, lambda r: r.key, "rule key {} appears twice in the rule table")
