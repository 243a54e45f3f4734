"""``FrameworkProfile``: how one training software stack runs a plan, apart from the hardware it runs on.

A profile says which features the stack offers (schedules, ZeRO stages, sequence/context/expert parallelism,
FP8) and how it executes them: which fused attention kernels it calls (looked up in the device's
:class:`~workbench.specs.kernels.KernelTable`), whether element-wise ops are fused, how much communication it
hides behind compute, what it keeps in memory and what its memory report counts. Every field of a profile
file carries its source (the framework's docs or flags) in ``[sources]``. A few fields are named as
``fitted``: those (and only those) ``workbench validate`` may fit to published runs, per ``fit_group``;
everything else comes from the stack's documentation.

The fields and their checks are in :mod:`workbench.specs.framework_fields`, the allowed values and number
ranges in :mod:`workbench.specs.framework_values` (both importable from here). Profiles live in
``profiles/frameworks/<id>.toml`` (loader: :mod:`workbench.presets.frameworks`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workbench.specs.axes import PROFILE_AXES
from workbench.specs.framework_fields import FrameworkFields
from workbench.specs.framework_values import (
    CP_KINDS,
    CUDA_GRAPH_SCOPES,
    DEFAULT_MICROBATCHES,
    DEVICE_RECIPE_FIELDS,
    FITTABLE,
    FP8_RECIPES,
    MEMORY_REPORTS,
    MOE_DISPATCHERS,
    NUMBER_RANGES,
    POOLED,
    RECOMPUTE_MODULES,
    UNFUSED_MODEL_OPS,
    check_number,
    model_key,
    recipe_for,
)
from workbench.specs.plan import ParallelPlan, rank_order_name

__all__ = [
    "CP_KINDS",
    "CUDA_GRAPH_SCOPES",
    "DEFAULT_MICROBATCHES",
    "DEVICE_RECIPE_FIELDS",
    "FITTABLE",
    "FP8_RECIPES",
    "MEMORY_REPORTS",
    "MOE_DISPATCHERS",
    "NUMBER_RANGES",
    "POOLED",
    "RECOMPUTE_MODULES",
    "UNFUSED_MODEL_OPS",
    "FrameworkFields",
    "FrameworkProfile",
    "check_number",
    "model_key",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkProfile(FrameworkFields):
    """One software stack (see the module docstring): the fields of :class:`FrameworkFields` and what a
    profile answers about a device, a model and a plan."""

    def covers_year(self, year: int | None) -> bool:
        """Whether the profile describes the stack as it ran in ``year`` (always for None or no ``years``)."""
        return year is None or not self.years or self.years[0] <= year <= self.years[1]

    def for_device(self, device_id: str, model_name: str = "") -> FrameworkProfile:
        """This profile as its recipes run the model ``model_name`` on the device preset ``device_id``: its
        ``device_recipes`` entry with the model's ``model_recipes`` entry for that device laid over it (the
        profile itself when neither sets anything). Raises ValueError for a bad entry."""
        recipe = self.recipe(device_id, model_name)
        return self._with_recipe(recipe) if recipe else self

    def recipe(self, device_id: str, model_name: str = "") -> dict[str, Any]:
        """The execution fields (``DEVICE_RECIPE_FIELDS``) the stack's recipes set for the model ``model_name``
        on the device preset ``device_id``: the ``device_recipes`` entry with the model's ``model_recipes``
        entry for that device laid over it, each with its sub-table for the profile's ``fp8_recipe``
        (:func:`recipe_for`); empty when neither sets anything."""
        device, model = (
            self.device_recipes.get(device_id, {}),
            self.model_recipe(model_name).get(device_id, {}),
        )
        return {**recipe_for(device, self.fp8_recipe), **recipe_for(model, self.fp8_recipe)}

    def model_recipe(self, model_name: str) -> dict[str, dict[str, Any]]:
        """The ``model_recipes`` entry (device id -> fields) of the model named ``model_name``: the longest
        key its normalised name starts with (:func:`model_key`); empty when none matches."""
        name = model_key(model_name)
        keys = [k for k in self.model_recipes if name and name.startswith(model_key(k))]
        return self.model_recipes[max(keys, key=lambda k: len(model_key(k)))] if keys else {}

    @property
    def graphs_whole_step(self) -> bool:
        """The stack replays a whole forward-backward step as one CUDA graph (``cuda_graph_scopes``
        full_iteration): no layer costs host time of its own."""
        return "full_iteration" in self.cuda_graph_scopes

    def held_grad_bytes_per_param(self, dtype: str) -> float:
        """Bytes per parameter of the gradient buffer a run of ``dtype`` keeps: ``fp16_grad_bytes_per_param``
        for fp16 where set, else ``grad_bytes_per_param``."""
        if str(dtype) == "fp16" and self.fp16_grad_bytes_per_param > 0:
            return self.fp16_grad_bytes_per_param
        return self.grad_bytes_per_param

    @property
    def reduce_bytes_per_param(self) -> float:
        """Bytes per gradient element the data-parallel reduction moves: ``grad_reduce_bytes_per_param``, else
        (0) ``grad_bytes_per_param``."""
        return self.grad_reduce_bytes_per_param or self.grad_bytes_per_param

    @property
    def group(self) -> str:
        """The fit group (the id when none is set)."""
        return self.fit_group or self.id

    @property
    def label(self) -> str:
        """The stack a plan is for, as every face names it: ``id (version)``, or the id alone without one."""
        return f"{self.id} ({self.version})" if self.version else self.id

    @property
    def zero_stages_with_pipeline(self) -> tuple[int, ...]:
        """The ZeRO stages the stack runs when pp > 1 (``pipeline_zero_stages``, else every ``zero_stages``)."""
        return self.zero_stages if self.pipeline_zero_stages is None else self.pipeline_zero_stages

    @property
    def flash_attention(self) -> bool:
        """Attention runs as a fused kernel (some family is named)."""
        return bool(self.attention_kernels)

    def offered(self, field: str) -> tuple[Any, ...]:
        """The values the stack offers for the profile ``field`` a plan axis chooses (``PlanAxis.profile_field``):
        the profile's own value first, then its ``offers`` list for the field."""
        own = getattr(self, field)
        return (own, *(v for v in self.offers.get(field, ()) if v != own))

    def offered_names(self, field: str) -> str:
        """``offered(field)`` as the plan axis names its values (``PlanAxis.face_value``: the FP8 recipe's own
        names, ``on``/``off`` for a flag), comma-separated."""
        axis = next(a for a in PROFILE_AXES if a.profile_field == field)
        return ", ".join(str(axis.face_value(v)) for v in self.offered(field))

    def running(self, plan: ParallelPlan) -> FrameworkProfile:
        """This profile as it runs ``plan``: each plan axis with a ``profile_field`` (``workbench.specs.axes``)
        that the plan sets replaces the profile's value (the FP8 recipe); ``self`` when the plan sets none. The
        one place a plan's choice among the stack's offers reaches the cost model (``estimate_plan``, the
        planner's screen, the exports)."""
        changes = {
            a.profile_field: getattr(plan, a.name)
            for a in PROFILE_AXES
            if a.profile_field is not None and getattr(plan, a.name) is not None
        }
        return replace(self, **changes) if changes else self

    def _unoffered(self, plan: ParallelPlan, dtype: str) -> list[str]:
        """Reasons for the plan's choices among the stack's offers: a value it does not offer, or a choice that
        matters only under another dtype."""
        out = []
        for a in PROFILE_AXES:
            value = getattr(plan, a.name)
            if a.profile_field is None or value is None:
                continue
            if a.dtype is not None and str(dtype) != a.dtype:
                out.append(f"{a.name} {a.face_value(value)} without dtype {a.dtype} (the run is {dtype})")
            elif value not in self.offered(a.profile_field):
                out.append(f"{a.name} {a.face_value(value)} (offers: {self.offered_names(a.profile_field)})")
        return out

    def unsupported(self, plan: ParallelPlan, *, dtype: str = "bf16") -> list[str]:
        """Reasons ``plan`` is not something this stack runs (empty when it is)."""
        out = self._unoffered(plan, dtype)
        if plan.pp > 1 and self.schedules is not None and plan.schedule not in self.schedules:
            runs = ", ".join(self.schedules) or "no pipeline parallelism"
            out.append(f"schedule {plan.schedule} (runs: {runs})")
        if plan.zero_stage not in self.zero_stages:
            out.append(f"zero_stage {plan.zero_stage} (runs: {', '.join(map(str, self.zero_stages))})")
        elif plan.pp > 1 and plan.zero_stage not in self.zero_stages_with_pipeline:
            runs = ", ".join(map(str, self.zero_stages_with_pipeline)) or "none"
            out.append(f"zero_stage {plan.zero_stage} with pp > 1 (runs with a pipeline: {runs})")
        if plan.sequence_parallel and plan.tp > 1 and not self.sequence_parallel:
            out.append("sequence parallelism")
        if plan.cp > 1 and not self.context_parallel:
            out.append(f"cp={plan.cp} (no context parallelism)")
        elif plan.cp > 1 and plan.cp_kind not in self.cp_kinds:
            out.append(f"{plan.cp_kind} context parallelism (runs: {', '.join(self.cp_kinds) or 'none'})")
        if plan.ep > 1 and not self.expert_parallel:
            out.append(f"ep={plan.ep} (no expert parallelism)")
        order = rank_order_name(plan.rank_order)
        if order not in self.rank_orders and plan.num_devices > 1:
            out.append(f"rank order {order} (lays out: {', '.join(self.rank_orders)})")
        if plan.loss_chunks > 1 and not self.chunked_loss:
            out.append(f"loss_chunks={plan.loss_chunks} (no chunked cross-entropy)")
        if plan.offload_optimizer and not self.optimizer_offload:
            out.append("optimizer offload to host memory")
        if plan.offload_activations and not self.activation_offload:
            out.append("activation offload to host memory")
        if plan.recompute_num_layers is not None and not self.partial_recompute:
            out.append(f"recompute_num_layers={plan.recompute_num_layers} (recomputes every layer or none)")
        if plan.vocab_parallel and plan.pp > 1 and not self.vocab_parallel:
            out.append("vocabulary parallelism")
        return out + self.unsupported_dtype(dtype)

    def admitting(self, plan: ParallelPlan, *, dtype: str = "bf16") -> FrameworkProfile:
        """This profile widened just enough that :meth:`unsupported` has nothing against ``plan``: the plan's
        schedule, ZeRO stage, rank order and features join the lists of what the stack runs; every execution
        mechanism (kernels, overlaps, overheads, fitted constants) stays. For pricing a run that is known to
        have happened (a published measurement) whose stack the profile describes by an older or narrower
        feature list; the planner never widens. ``self`` when nothing needs widening."""
        if not self.unsupported(plan, dtype=dtype):
            return self
        changes: dict[str, Any] = {}
        if plan.pp > 1 and self.schedules is not None and plan.schedule not in self.schedules:
            changes["schedules"] = (*self.schedules, plan.schedule)
        if plan.zero_stage not in self.zero_stages:
            changes["zero_stages"] = tuple(sorted((*self.zero_stages, plan.zero_stage)))
        if plan.pp > 1 and plan.zero_stage not in self.zero_stages_with_pipeline:
            changes["pipeline_zero_stages"] = tuple(
                sorted((*self.zero_stages_with_pipeline, plan.zero_stage))
            )
        if plan.sequence_parallel and plan.tp > 1:
            changes["sequence_parallel"] = True
        if plan.cp > 1:
            changes["context_parallel"] = True
            if plan.cp_kind not in self.cp_kinds:
                changes["cp_kinds"] = (*self.cp_kinds, plan.cp_kind)
        if plan.ep > 1:
            changes["expert_parallel"] = True
        order = rank_order_name(plan.rank_order)
        if order not in self.rank_orders and plan.num_devices > 1:
            changes["rank_orders"] = (*self.rank_orders, order)
        if plan.loss_chunks > 1:
            changes["chunked_loss"] = True
        if plan.offload_optimizer:
            changes["optimizer_offload"] = True
        if plan.offload_activations:
            changes["activation_offload"] = True
        if plan.recompute_num_layers is not None:
            changes["partial_recompute"] = True
        if plan.vocab_parallel and plan.pp > 1:
            changes["vocab_parallel"] = True
        if self.unsupported_dtype(dtype):
            changes["fp8"] = True
        offers = self._widened_offers(plan)
        if offers != self.offers:
            changes["offers"] = offers
        return replace(self, **changes)

    def _widened_offers(self, plan: ParallelPlan) -> dict[str, tuple[Any, ...]]:
        """``offers`` with each value the plan chooses that the stack does not offer added."""
        offers = dict(self.offers)
        for a in PROFILE_AXES:
            value = getattr(plan, a.name)
            if (
                a.profile_field is not None
                and value is not None
                and value not in self.offered(a.profile_field)
            ):
                offers[a.profile_field] = (*offers.get(a.profile_field, ()), value)
        return offers

    def unsupported_dtype(self, dtype: str) -> list[str]:
        """``["fp8 GEMMs"]`` when ``dtype`` is fp8 and the stack has no FP8 recipe, else empty."""
        return ["fp8 GEMMs"] if str(dtype) == "fp8" and not self.fp8 else []

    def describe(self) -> dict[str, Any]:
        """A flat summary for tables (id, name, schedules, features, kernels, pipeline mechanisms, fitted)."""
        features = [
            name
            for name, on in (
                ("sp", self.sequence_parallel),
                ("cp", self.context_parallel),
                ("ep", self.expert_parallel),
                ("fp8", self.fp8),
                ("uneven", self.uneven_stages),
            )
            if on
        ]
        return {
            "id": self.id,
            "name": self.name,
            "version": self.version,
            "as_of": self.as_of,
            "schedules": "any" if self.schedules is None else ", ".join(self.schedules) or "none (pp = 1)",
            "zero_stages": ", ".join(map(str, self.zero_stages))
            + (
                f" (with pp > 1: {', '.join(map(str, self.zero_stages_with_pipeline))})"
                if self.zero_stages_with_pipeline != self.zero_stages
                else ""
            ),
            "features": ", ".join(features),
            "attention": ", ".join(self.attention_kernels) or "unfused",
            "elementwise": "fused" if self.fused_elementwise else "eager",
            "pipeline": "; ".join(
                part
                for part, on in (
                    (
                        f"blocking sends: {', '.join(self.blocking_p2p_schedules)}",
                        self.blocking_p2p_schedules,
                    ),
                    ("steps overlap (optimizer post-validation)", self.optimizer_post_validation),
                    (
                        "gradients reduced after the schedule",
                        self.overlap_grad_reduce and not self.grad_reduce_overlaps_pipeline,
                    ),
                )
                if on
            ),
            "fitted": ", ".join(self.fitted),
            "offers": "; ".join(f"{k}: {self.offered_names(k)}" for k in self.offers),
        }
