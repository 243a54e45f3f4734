"""The plan-axis table: one record per ``ParallelPlan`` field a user chooses, from which every face derives.

``PLAN_AXES`` is the one list of the training plan's axes. Read off it: the CLI's plan options and their reading
(``workbench_cli.estimate_cmd``), the app's plan parameters, labels, degree selectors and command line
(``workbench_widgets.app.state``, ``views``, ``app``), the planner's constrainable axes and their bounds
(``workbench.search.space``), the result columns (``workbench.search.result``), the rule table's plan columns
and controls (``workbench.specs.rules``), the cost model's plan columns (``workbench.cost.context.plan_columns``),
the check that an axis applying only with another's value is None without it (``ParallelPlan``, the app's
``plan_values``) and how the torch-profile backend prices the field (``pricing``). Adding an axis is one row here
and its ``ParallelPlan`` field, plus its cost term, its export mapping and its docs (and a rule if it has one);
``tests/test_axes.py`` checks that every row reaches each face. The record's fields are
documented in ``workbench.specs.axis_types``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from workbench.specs.axis_types import (
    DEFAULT_RANK_ORDER,
    RANK_ORDERS,
    AppControl,
    CliOption,
    Control,
    Domain,
    Enumeration,
    PlanAxis,
    Pricing,
    Recompute,
    rank_order_name,
)
from workbench.specs.errors import unique_index
from workbench.specs.framework_values import FP8_RECIPES
from workbench.specs.limits import (
    MAX_DEVICES,
    MAX_GLOBAL_BATCH_SIZE,
    MAX_LAYERS,
    MAX_PP,
    MAX_SEQ_LEN,
    MAX_VPP,
)

_SCHEDULE_RULES = (
    "schedule_known",
    "schedule_vpp",
    "schedule_min_vpp",
    "schedule_microbatches",
    "schedule_rounds",
    "schedule_directions",
)
"""The schedule rules (``workbench.specs.schedule_traits.SCHEDULE_RULES``): they read pp, vpp and the schedule."""


_ULYSSES_DOC = (
    "Of the cp ranks, how many exchange attention heads by all-to-all (DeepSpeed-Ulysses); the rest of cp is a "
    "ring. Divides cp; 1: ring attention only."
)

PLAN_AXES: tuple[PlanAxis, ...] = (
    PlanAxis(
        name="dp",
        domain=Domain.COUNT,
        maximum=MAX_DEVICES,
        limit="MAX_DEVICES",
        cli=CliOption(flag="--dp", default=None, help="Default: devices / (tp*pp*cp)."),
        app=AppControl(
            kind=Control.DERIVED,
            label="dp (derived)",
            doc="Data-parallel degree: devices / (tp*pp*cp).",
            default=1,
        ),
        rules=("devices", "batch", "ep_divides_groups"),
        rule_column="dp",
        enumeration=Enumeration.QUOTIENT,
        pricing=Pricing.STEP_MODEL,
        cost_column="dp",
    ),
    PlanAxis(
        name="tp",
        domain=Domain.COUNT,
        maximum=MAX_DEVICES,
        limit="MAX_DEVICES",
        cli=CliOption(flag="--tp", default=1, show_default=True),
        app=AppControl(
            kind=Control.DEGREE, label="tp", doc="Tensor-parallel degree.", default=8, objects=(1, 2, 4, 8)
        ),
        rules=(
            "devices",
            "tp_divides_heads",
            "tp_kv_heads",
            "ulysses_heads",
            "ep_divides_groups",
            "sequence_parallel_needs_tp",
        ),
        rule_column="tp",
        enumeration=Enumeration.DEVICE_DIVISORS,
        constrainable=True,
        pricing=Pricing.MEASURED_OPS,
        cost_column="tp",
    ),
    PlanAxis(
        name="pp",
        domain=Domain.COUNT,
        maximum=MAX_PP,
        limit="MAX_PP",
        cli=CliOption(flag="--pp", default=1, show_default=True),
        app=AppControl(
            kind=Control.DEGREE, label="pp", doc="Pipeline-parallel degree.", default=8, objects=(1, 2, 4, 8)
        ),
        rules=(
            "devices",
            "layers",
            "timeline_size",
            "vpp_needs_pp",
            *_SCHEDULE_RULES,
        ),
        rule_column="pp",
        enumeration=Enumeration.DEVICE_DIVISORS,
        constrainable=True,
        pricing=Pricing.STEP_MODEL,
        cost_column="pp",
    ),
    PlanAxis(
        name="cp",
        domain=Domain.COUNT,
        maximum=MAX_DEVICES,
        limit="MAX_DEVICES",
        cli=CliOption(flag="--cp", default=1, show_default=True),
        app=AppControl(
            kind=Control.DEGREE, label="cp", doc="Context-parallel degree.", default=1, objects=(1,)
        ),
        rules=("devices", "sequence", "ulysses_divides_cp", "ep_divides_groups"),
        rule_column="cp",
        enumeration=Enumeration.DEVICE_DIVISORS,
        constrainable=True,
        pricing=Pricing.MEASURED_OPS,
        cost_column="cp",
    ),
    PlanAxis(
        name="ulysses",
        domain=Domain.COUNT,
        maximum=MAX_DEVICES,
        limit="MAX_DEVICES",
        cli=CliOption(
            flag="--ulysses",
            default=1,
            show_default=True,
            help="Of the cp ranks, how many exchange heads by all-to-all (DeepSpeed-Ulysses); the rest form a "
            "ring. 1: ring attention; = cp: Ulysses; between: USP.",
        ),
        app=AppControl(
            kind=Control.DEGREE,
            label="ulysses (of cp, all-to-all)",
            doc=_ULYSSES_DOC,
            default=1,
            objects=(1,),
        ),
        rules=("ulysses_divides_cp", "ulysses_heads"),
        rule_column="ulysses",
        enumeration=Enumeration.CP_DIVISORS,
        constrainable=True,
        pricing=Pricing.STEP_MODEL,
        cost_column="ulysses",
    ),
    PlanAxis(
        name="ep",
        domain=Domain.COUNT,
        maximum=MAX_DEVICES,
        limit="MAX_DEVICES",
        cli=CliOption(flag="--ep", default=1, show_default=True),
        app=AppControl(
            kind=Control.DEGREE,
            label="ep",
            doc="Expert-parallel degree (MoE models only).",
            default=1,
            objects=(1,),
        ),
        rules=("ep_needs_moe", "ep_divides_experts", "ep_divides_groups"),
        rule_column="ep",
        enumeration=Enumeration.EXPERT_DIVISORS,
        constrainable=True,
        pricing=Pricing.MEASURED_OPS,
        cost_column="ep",
    ),
    PlanAxis(
        name="etp",
        domain=Domain.COUNT,
        maximum=MAX_DEVICES,
        limit="MAX_DEVICES",
        optional=True,
        cli=CliOption(
            flag="--etp",
            default=None,
            help="Expert tensor-parallel degree (default: 1 when ep > 1, else tp).",
        ),
        app=AppControl(
            kind=Control.DEGREE,
            label="etp (0 = automatic)",
            doc="Expert tensor-parallel degree (MoE models only); 0: automatic (1 when ep > 1, else tp).",
            default=0,
            objects=(0,),
            none_as=0,
        ),
        rules=("ep_divides_groups", "etp_divides_experts"),
        rule_column="etp",
        enumeration=Enumeration.FIXED,
        pricing=Pricing.MEASURED_OPS,
    ),
    PlanAxis(
        name="vpp",
        domain=Domain.COUNT,
        maximum=MAX_VPP,
        limit="MAX_VPP",
        cli=CliOption(flag="--vpp", default=1, show_default=True),
        app=AppControl(
            kind=Control.DEGREE,
            label="vpp (virtual stages)",
            doc="Virtual stages per pipeline rank.",
            default=1,
            objects=(1,),
        ),
        rules=(
            "layers",
            "timeline_size",
            "vpp_needs_pp",
            *_SCHEDULE_RULES,
        ),
        rule_column="vpp",
        enumeration=Enumeration.RANGE,
        constrainable=True,
        pricing=Pricing.STEP_MODEL,
        cost_column="vpp",
    ),
    PlanAxis(
        name="micro_batch_size",
        domain=Domain.COUNT,
        maximum=MAX_GLOBAL_BATCH_SIZE,
        limit="MAX_GLOBAL_BATCH_SIZE",
        cli=CliOption(flag="--micro-batch", default=1, show_default=True),
        app=AppControl(
            kind=Control.DEGREE,
            label="Micro-batch (sequences)",
            doc="Sequences per micro-batch.",
            default=1,
            objects=(1,),
        ),
        rules=("batch",),
        rule_column="micro_batch_size",
        enumeration=Enumeration.LIST,
        constrainable=True,
        pricing=Pricing.MEASURED_OPS,
        cost_column="micro_batch_size",
    ),
    PlanAxis(
        name="zero_stage",
        domain=Domain.COUNT,
        minimum=0,
        maximum=3,
        cli=CliOption(flag="--zero", default=0, show_default=True),
        app=AppControl(
            kind=Control.CHOICE,
            label="ZeRO stage",
            doc="0 DDP, 1 optimizer, 2 + gradients, 3 FSDP.",
            default=1,
            objects=(0, 1, 2, 3),
        ),
        enumeration=Enumeration.LIST,
        pricing=Pricing.STEP_MODEL,
        cost_column="zero_stage",
    ),
    PlanAxis(
        name="zero_shard",
        domain=Domain.COUNT,
        maximum=MAX_DEVICES,
        limit="MAX_DEVICES",
        optional=True,
        cli=CliOption(
            flag="--zero-shard",
            default=None,
            help="Hybrid sharding (HSDP): shard the ZeRO states over groups of this many dp*cp ranks and "
            "replicate them over the rest (default: one group of all dp*cp).",
        ),
        app=AppControl(
            kind=Control.INTEGER,
            label="ZeRO shard group (0 = all dp*cp)",
            doc="Hybrid sharding (HSDP): the ZeRO states are sharded over groups of this many dp*cp ranks and "
            "replicated over the rest; 0: one group of all dp*cp.",
            default=0,
            none_as=0,
        ),
        enumeration=Enumeration.FIXED,
        pricing=Pricing.STEP_MODEL,
    ),
    PlanAxis(
        name="sequence_parallel",
        domain=Domain.FLAG,
        cli=CliOption(flag="--sequence-parallel", default=None, help="Default: on when tp > 1."),
        app=AppControl(
            kind=Control.BOOLEAN,
            label="Sequence parallel",
            doc="Megatron sequence parallelism (needs tp > 1).",
            default=True,
        ),
        rules=("sequence_parallel_needs_tp",),
        rule_column="sequence_parallel",
        enumeration=Enumeration.LIST,
        pricing=Pricing.MEASURED_OPS,
        cost_column="sequence_parallel",
    ),
    PlanAxis(
        name="recompute",
        domain=Domain.CHOICE,
        choices=MappingProxyType({r.value: r.value for r in Recompute}),
        cli=CliOption(flag="--recompute", default="none", show_default=True),
        app=AppControl(
            kind=Control.CHOICE,
            label="Recompute",
            doc="Activation recompute.",
            default="selective",
            objects=tuple(r.value for r in Recompute),
        ),
        enumeration=Enumeration.LIST,
        pricing=Pricing.MEASURED_OPS,
    ),
    PlanAxis(
        name="recompute_num_layers",
        domain=Domain.COUNT,
        maximum=MAX_LAYERS,
        limit="MAX_LAYERS",
        optional=True,
        cli=CliOption(
            flag="--recompute-num-layers",
            default=None,
            help="With --recompute full: recompute only the first N layers of each pipeline chunk "
            "(Megatron's block method); default every layer.",
        ),
        app=AppControl(
            kind=Control.INTEGER,
            label="Recomputed layers per chunk (0 = all)",
            doc="With full recompute: recompute only the first N layers of each pipeline chunk (Megatron's block "
            "method); 0: every layer.",
            default=0,
            none_as=0,
        ),
        enumeration=Enumeration.FEWEST_FITTING,
        pricing=Pricing.MEASURED_OPS,
        cost_column="recompute_layers",
        only_with=("recompute", Recompute.FULL),
    ),
    PlanAxis(
        name="schedule",
        domain=Domain.SCHEDULE,
        cli=CliOption(
            flag="--schedule",
            default=None,
            help="Pipeline schedule name (any case). Default: interleaved-1f1b when --vpp > 1 (as Megatron "
            "infers it from the virtual stage count), else 1f1b.",
        ),
        app=AppControl(
            kind=Control.CHOICE,
            label="Pipeline schedule",
            doc="Pipeline schedule (pp > 1).",
            default="1f1b",
            objects=("1f1b",),
        ),
        rules=_SCHEDULE_RULES,
        rule_column="schedule_code",
        enumeration=Enumeration.LIST,
        pricing=Pricing.STEP_MODEL,
    ),
    PlanAxis(
        name="loss_chunks",
        domain=Domain.COUNT,
        maximum=MAX_SEQ_LEN,
        limit="MAX_SEQ_LEN",
        cli=CliOption(
            flag="--loss-chunks",
            default=1,
            show_default=True,
            help="Run the LM head and the loss over this many chunks of tokens (fused linear cross-entropy).",
        ),
        app=AppControl(
            kind=Control.INTEGER,
            label="Loss chunks",
            doc="The LM head and the loss run over this many chunks of the micro-batch's tokens (fused linear "
            "cross-entropy); 1: the whole micro-batch's logits at once.",
            default=1,
        ),
        enumeration=Enumeration.FIXED,
        pricing=Pricing.MEASURED_OPS,
        cost_column="loss_chunks",
    ),
    PlanAxis(
        name="offload_optimizer",
        domain=Domain.FLAG,
        cli=CliOption(
            flag="--offload-optimizer",
            default=False,
            help="Keep the optimizer states in host memory and step on the CPUs (ZeRO-Offload).",
        ),
        app=AppControl(
            kind=Control.BOOLEAN,
            label="Offload optimizer to host",
            doc="Keep the optimizer states in host memory and step on the CPUs (ZeRO-Offload).",
            default=False,
        ),
        enumeration=Enumeration.FIXED,
        pricing=Pricing.STEP_MODEL,
        cost_column="offload_optimizer",
    ),
    PlanAxis(
        name="offload_activations",
        domain=Domain.FLAG,
        cli=CliOption(
            flag="--offload-activations",
            default=False,
            help="Move saved activations to host memory between forward and backward.",
        ),
        app=AppControl(
            kind=Control.BOOLEAN,
            label="Offload activations to host",
            doc="Move each layer's saved activations to host memory between its forward and backward.",
            default=False,
        ),
        enumeration=Enumeration.FIXED,
        pricing=Pricing.MEASURED_OPS,
        cost_column="offload_activations",
    ),
    PlanAxis(
        name="offload_activation_layers",
        domain=Domain.COUNT,
        maximum=MAX_LAYERS,
        limit="MAX_LAYERS",
        optional=True,
        cli=CliOption(
            flag="--offload-activation-layers",
            default=None,
            help="With --offload-activations: offload only the first N layers of each pipeline rank "
            "(Megatron's --cpu-offloading-num-layers); default every layer.",
        ),
        app=AppControl(
            kind=Control.INTEGER,
            label="Offloaded layers per rank (0 = all)",
            doc="With activation offload: only the first N layers of each pipeline rank send their saved "
            "activations to host memory (Megatron's --cpu-offloading-num-layers); 0: every layer.",
            default=0,
            none_as=0,
        ),
        enumeration=Enumeration.FIXED,
        pricing=Pricing.MEASURED_OPS,
        cost_column="offload_layers",
        only_with=("offload_activations", True),
    ),
    PlanAxis(
        name="vocab_parallel",
        domain=Domain.FLAG,
        cli=CliOption(
            flag="--vocab-parallel",
            default=False,
            help="Spread the embedding and the LM head over every pipeline rank (vocabulary parallelism).",
        ),
        app=AppControl(
            kind=Control.BOOLEAN,
            label="Vocabulary parallel",
            doc="Spread the embedding and the LM head over every pipeline rank (vocabulary parallelism; "
            "needs pp > 1).",
            default=False,
        ),
        enumeration=Enumeration.FIXED,
        pricing=Pricing.MEASURED_OPS,
        cost_column="vocab_parallel",
    ),
    PlanAxis(
        name="fp8_recipe",
        domain=Domain.CHOICE,
        choices=MappingProxyType({r: r for r in FP8_RECIPES}),
        optional=True,
        cli=CliOption(
            flag="--fp8-recipe",
            default=None,
            help="With --dtype fp8: how FP8 tensors are scaled, one the stack offers (`workbench frameworks "
            "--json`, key offers); default: the stack's own.",
        ),
        app=AppControl(
            kind=Control.CHOICE,
            label="FP8 recipe (fp8 runs)",
            doc="How FP8 runs scale their tensors (delayed or current per-tensor, MXFP8, blockwise, torchao "
            "tensorwise or rowwise), among those the stack offers; stack: the stack's own.",
            default="stack",
            objects=("stack", *FP8_RECIPES),
            none_as="stack",
        ),
        enumeration=Enumeration.OFFERED,
        profile_field="fp8_recipe",
        dtype="fp8",
        pricing=Pricing.MEASURED_OPS,
    ),
    PlanAxis(
        name="tp_comm_overlap",
        domain=Domain.CHOICE,
        choices=MappingProxyType({"on": True, "off": False}),
        optional=True,
        cli=CliOption(
            flag="--tp-comm-overlap",
            default=None,
            help="Overlap the tensor-parallel collectives with the GEMMs (Megatron --tp-comm-overlap, torchtitan "
            "async TP), as the stack offers (`workbench frameworks --json`, key offers); default: the stack's own.",
        ),
        app=AppControl(
            kind=Control.CHOICE,
            label="TP comm overlap",
            doc="Overlap the tensor-parallel all-gathers and reduce-scatters with the GEMMs (Megatron's userbuffers, "
            "torchtitan's async TP), where the stack offers it; stack: the stack's own.",
            default="stack",
            objects=("stack", "on", "off"),
            none_as="stack",
        ),
        enumeration=Enumeration.OFFERED,
        profile_field="tp_comm_overlap",
        pricing=Pricing.MEASURED_OPS,
    ),
    PlanAxis(
        name="rank_order",
        domain=Domain.CHOICE,
        choices=MappingProxyType(RANK_ORDERS),
        cli=CliOption(
            flag="--rank-order",
            default=rank_order_name(DEFAULT_RANK_ORDER),
            show_default=True,
            help="How the groups are laid on consecutive ranks, innermost first.",
        ),
        app=AppControl(
            kind=Control.CHOICE,
            label="Rank order (innermost first)",
            doc="How ranks are numbered over the groups, innermost first (workbench.specs.plan.RANK_ORDERS).",
            default=rank_order_name(DEFAULT_RANK_ORDER),
            objects=tuple(RANK_ORDERS),
        ),
        enumeration=Enumeration.LIST,
        pricing=Pricing.STEP_MODEL,
    ),
)
"""Every axis of the training plan, in display order (the app's controls, the CLI's options, result columns)."""


AXES_BY_NAME: Mapping[str, PlanAxis] = unique_index(
    PLAN_AXES, lambda a: a.name, "plan axis {} appears twice in PLAN_AXES"
)
"""Name -> record (read-only; duplicate names refused)."""

AXIS_NAMES: tuple[str, ...] = tuple(AXES_BY_NAME)
"""The plan axes' names in display order."""

PROFILE_AXES: tuple[PlanAxis, ...] = tuple(a for a in PLAN_AXES if a.profile_field is not None)
"""The axes that choose a field of the stack's framework profile among what it offers (``PlanAxis.profile_field``:
the FP8 recipe)."""


def plan_axis(name: str) -> PlanAxis:
    """The record of axis ``name``; ValueError listing the axes if there is none."""
    if name not in AXES_BY_NAME:
        raise ValueError(f"unknown plan axis {name!r}; axes: {', '.join(AXIS_NAMES)}")
    return AXES_BY_NAME[name]
