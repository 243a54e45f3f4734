"""``WorkbenchState``: what the user has chosen, as parameters only (no computation, no widgets).

One instance per session (a served app builds a new one for every browser tab), so concurrent users never
share a choice. Display units are in the names where a field is typed by a person in the unit the vendors
quote (``_GBps`` = 10^9 bytes/s, ``_us`` = 10^-6 s), as in the preset files; the Store converts them once
to SI when it builds the specs.

The option lists of the selectors (presets, backends, valid degrees) are filled per instance by the Store:
``param`` copies a parameter per instance, so narrowing the choices of one session leaves the others alone.
"""

from __future__ import annotations

import param

from workbench.presets.frameworks import DEFAULT_FRAMEWORK, framework_names
from workbench.specs.axes import AXIS_NAMES, PLAN_AXES
from workbench.specs.axis_types import Control, Domain, PlanAxis
from workbench.specs.limits import MAX_CAPACITY_FACTOR

CUSTOM = "custom"
"""Selector value meaning: the fields as edited, not a preset."""
UPLOADED = "uploaded config.json"
"""Model selector value for a Hugging Face config the user uploaded."""

DEGREE_FIELDS: tuple[str, ...] = tuple(a.name for a in PLAN_AXES if a.app.kind is Control.DEGREE)
"""Plan fields offered as selectors of valid values (``workbench.specs.degrees``); ``dp`` follows from them and
the device count."""

APP_PLAN_FIELDS: tuple[str, ...] = AXIS_NAMES
"""The plan fields the app's controls set, in display order: every axis of ``workbench.specs.axes.PLAN_AXES``
(the rank order by its name in ``RANK_ORDERS``)."""


def plan_parameter(axis: PlanAxis) -> param.Parameter:
    """The State parameter of one plan axis, from its ``AppControl``: a constant integer (derived), a selector
    (degree or choice), an integer over the axis' bounds, or a boolean."""
    app = axis.app
    if app.kind is Control.DERIVED:
        return param.Integer(default=app.default, bounds=(axis.minimum, None), constant=True, doc=app.doc)
    if app.kind is Control.DEGREE or axis.domain is Domain.SCHEDULE:
        # The Store narrows these options to what is valid for the inputs and moves a value that is not (saying
        # so), so the selector takes any value: a shared link sets tp, pp, vpp and the schedule in one update,
        # before the Store has widened the options for them.
        return param.Selector(default=app.default, objects=list(app.objects), doc=app.doc, check_on_set=False)
    if app.kind is Control.CHOICE:
        return param.Selector(default=app.default, objects=list(app.objects), doc=app.doc)
    if app.kind is Control.INTEGER:
        return param.Integer(default=app.default, bounds=axis.app_bounds, doc=app.doc)
    return param.Boolean(default=app.default, doc=app.doc)


PlanChoices = type(
    "PlanChoices",
    (param.Parameterized,),
    {
        "__doc__": "The plan's choices: one parameter per plan axis (workbench.specs.axes.PLAN_AXES). The degree "
        "selectors hold only values the Store found valid.",
        **{a.name: plan_parameter(a) for a in PLAN_AXES},
    },
)


class WorkbenchState(PlanChoices):
    """Every choice of the composer: cluster, model, workload, plan (``PlanChoices``) and backend."""

    # Cluster: a preset fills the fields below; editing a field makes the cluster an edited preset.
    cluster_preset = param.Selector(
        default="dgx-h100", objects=["dgx-h100", CUSTOM], doc="Cluster preset id."
    )
    device = param.Selector(default="h100-sxm5-80gb", objects=["h100-sxm5-80gb"], doc="Device preset id.")
    num_nodes = param.Integer(default=8, bounds=(1, 4096), doc="Nodes (hosts) in the cluster.")
    devices_per_node = param.Integer(default=8, bounds=(1, 128), doc="Devices per node.")
    scale_up_span = param.Integer(
        default=8, bounds=(1, 4096), doc="Devices joined by the inner (NVLink) level."
    )
    scale_up_bandwidth_GBps = param.Number(
        default=450.0, bounds=(0.001, None), doc="Inner level, GB/s per device, one direction."
    )
    scale_up_latency_us = param.Number(
        default=3.0, bounds=(0.0, None), doc="Inner level message latency, us."
    )
    scale_out_bandwidth_GBps = param.Number(
        default=50.0, bounds=(0.001, None), doc="Outer level, GB/s per device, one direction."
    )
    scale_out_latency_us = param.Number(
        default=10.0, bounds=(0.0, None), doc="Outer level message latency, us."
    )

    # Model: a preset or an uploaded config.json fills the editable fields.
    model_preset = param.Selector(
        default="llama-3.1-70b", objects=["llama-3.1-70b", UPLOADED], doc="Model preset id."
    )
    uploaded_config = param.Dict(
        default=None, allow_None=True, doc="Parsed Hugging Face config.json, if uploaded."
    )
    num_layers = param.Integer(default=80, bounds=(1, None), doc="Transformer layers.")
    hidden_size = param.Integer(default=8192, bounds=(1, None), doc="Model width.")
    num_attention_heads = param.Integer(default=64, bounds=(1, None), doc="Query heads.")
    num_key_value_heads = param.Integer(default=8, bounds=(1, None), doc="Key/value heads.")
    ffn_hidden_size = param.Integer(default=28672, bounds=(0, None), doc="MLP intermediate size.")
    vocab_size = param.Integer(default=128256, bounds=(1, None), doc="Vocabulary size.")

    # Workload.
    seq_len = param.Integer(default=8192, bounds=(1, None), doc="Tokens per sequence.")
    global_batch_size = param.Integer(default=256, bounds=(1, None), doc="Sequences per optimizer step.")
    dtype = param.Selector(default="bf16", objects=["bf16", "fp16", "fp8", "fp32"], doc="Matmul precision.")
    capacity_factor = param.Number(
        default=None,
        allow_None=True,
        bounds=(1.0, MAX_CAPACITY_FACTOR),
        doc="MoE capacity factor: experts padded to this many times their balanced share; empty: dropless.",
    )

    backend = param.Selector(
        default="analytic", objects=["analytic"], doc="Registered backend that prices the plan."
    )
    framework = param.Selector(
        default=DEFAULT_FRAMEWORK,
        objects=framework_names(),
        doc="Framework profile the analytic backend prices with (how the software stack runs the plan).",
    )
