"""``WorkbenchState``: what the user has chosen, as parameters only (no computation, no widgets).

One instance per session (a served app builds a new one for every browser tab), so concurrent users never
share a choice. Display units are in the names where a field is typed by a person in the unit the vendors
quote (``_GBps`` = 10^9 bytes/s, ``_us`` = 10^-6 s), as in the preset files; the Store converts them once
to SI when it builds the specs.

The option lists of the selectors (presets, backends, valid degrees) are filled per instance by the Store:
``param`` copies a parameter per instance, so narrowing the choices of one session leaves the others alone.
"""

from __future__ import annotations

from dataclasses import fields

import param

from workbench.presets.frameworks import DEFAULT_FRAMEWORK, framework_names
from workbench.specs.limits import MAX_CAPACITY_FACTOR, MAX_LAYERS
from workbench.specs.plan import PLAN_FIELDS, RANK_ORDERS, ParallelPlan, rank_order_name

CUSTOM = "custom"
"""Selector value meaning: the fields as edited, not a preset."""
UPLOADED = "uploaded config.json"
"""Model selector value for a Hugging Face config the user uploaded."""

DEGREE_FIELDS: tuple[str, ...] = ("tp", "pp", "cp", "ulysses", "ep", "etp", "vpp", "micro_batch_size")
"""Plan fields offered as selectors of valid values; ``dp`` follows from them and the device count."""


def _app_plan_fields() -> tuple[str, ...]:
    names = {f.name for f in fields(ParallelPlan)}
    out = [f for f in PLAN_FIELDS if f in names]
    if "ulysses" in names and "ulysses" not in out:
        out.insert(out.index("cp") + 1, "ulysses")
    return (*out, "rank_order")


APP_PLAN_FIELDS: tuple[str, ...] = _app_plan_fields()
"""The plan fields the app's controls set, in display order: the core's ``PLAN_FIELDS``, with ``ulysses``
(the share of cp that exchanges heads) after ``cp`` where the rule table does not list it, and the rank
order (by its name in ``RANK_ORDERS``) last."""
DEFAULT_RANK_ORDER_NAME = rank_order_name(ParallelPlan().rank_order)


class WorkbenchState(param.Parameterized):
    """Every choice of the composer: cluster, model, workload, plan and backend."""

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

    # Plan: the degree selectors hold only values the Store found valid.
    dp = param.Integer(
        default=1, bounds=(1, None), constant=True, doc="Data-parallel degree: devices / (tp*pp*cp)."
    )
    tp = param.Selector(default=8, objects=[1, 2, 4, 8], doc="Tensor-parallel degree.")
    pp = param.Selector(default=8, objects=[1, 2, 4, 8], doc="Pipeline-parallel degree.")
    cp = param.Selector(default=1, objects=[1], doc="Context-parallel degree.")
    ulysses = param.Selector(
        default=1,
        objects=[1],
        doc="Of the cp ranks, how many exchange attention heads by all-to-all (DeepSpeed-Ulysses); the rest "
        "of cp is a ring. Divides cp; 1: ring attention only.",
    )
    ep = param.Selector(default=1, objects=[1], doc="Expert-parallel degree (MoE models only).")
    etp = param.Selector(
        default=0,
        objects=[0],
        doc="Expert tensor-parallel degree (MoE models only); 0: automatic (1 when ep > 1, else tp).",
    )
    vpp = param.Selector(default=1, objects=[1], doc="Virtual stages per pipeline rank.")
    micro_batch_size = param.Selector(default=1, objects=[1], doc="Sequences per micro-batch.")
    rank_order = param.Selector(
        default=DEFAULT_RANK_ORDER_NAME,
        objects=list(RANK_ORDERS),
        doc="How ranks are numbered over the groups, innermost first (workbench.specs.plan.RANK_ORDERS).",
    )
    zero_stage = param.Selector(
        default=1, objects=[0, 1, 2, 3], doc="0 DDP, 1 optimizer, 2 + gradients, 3 FSDP."
    )
    sequence_parallel = param.Boolean(default=True, doc="Megatron sequence parallelism (needs tp > 1).")
    recompute = param.Selector(
        default="selective", objects=["none", "selective", "full"], doc="Activation recompute."
    )
    recompute_num_layers = param.Integer(
        default=0,
        bounds=(0, MAX_LAYERS),
        doc="With full recompute: recompute only the first N layers of each pipeline chunk (Megatron's block "
        "method); 0: every layer.",
    )
    schedule = param.Selector(default="1f1b", objects=["1f1b"], doc="Pipeline schedule (pp > 1).")

    backend = param.Selector(
        default="analytic", objects=["analytic"], doc="Registered backend that prices the plan."
    )
    framework = param.Selector(
        default=DEFAULT_FRAMEWORK,
        objects=framework_names(),
        doc="Framework profile the analytic backend prices with (how the software stack runs the plan).",
    )
