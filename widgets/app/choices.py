"""Which values a control may offer, and which control each violated rule belongs to.

Pure functions over the core specs (no widgets): the Store calls them to narrow the selectors of the
``WorkbenchState`` so that only valid degrees are offered (each list is the candidates that pass the rules
of ``workbench.specs.rules`` it names), and to place each ``Violation`` next to its ``control``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from workbench.pipeline.schedules import SCHEDULE_NAMES, default_vpp, required_vpp, schedule_rule_violations
from workbench.specs.framework import FrameworkProfile
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload
from workbench.specs.rules import RuleContext, Violation, passes

MAX_VPP = 8
"""Largest virtual-stage count offered (Megatron's interleaved runs use 2-6)."""
MAX_MICRO_BATCH_SIZE = 64
"""Largest micro-batch size offered."""


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order (ValueError if n < 1)."""
    if n < 1:
        raise ValueError(f"divisors: n must be >= 1, got {n}")
    return [d for d in range(1, n + 1) if n % d == 0]


def _passing(candidates: list[int], keys: tuple[str, ...], ctx: RuleContext, **cols: object) -> list[int]:
    """The candidates (the column named ``cols``'s array) that break none of the rules ``keys``."""
    ok = passes(keys, cols, ctx)
    return [c for c, good in zip(candidates, np.broadcast_to(ok, (len(candidates),)), strict=True) if good]


def context(model: ModelSpec, workload: Workload, *, uneven_stages: bool = False) -> RuleContext:
    """What the choice rules read of the model and the workload (and whether the stack runs uneven stages)."""
    return RuleContext(
        model=model,
        seq_len=workload.seq_len,
        global_batch_size=workload.global_batch_size,
        uneven_stages=uneven_stages,
    )


def tp_choices(ctx: RuleContext, num_devices: int) -> list[int]:
    """Tensor-parallel degrees: divisors of the devices that split the attention and key/value heads."""
    d = divisors(num_devices)
    return _passing(d, ("tp_divides_heads", "tp_kv_heads"), ctx, tp=np.array(d))


def cp_choices(ctx: RuleContext, devices_left: int) -> list[int]:
    """Context-parallel degrees: divisors of the devices left after tp that divide the sequence."""
    d = divisors(devices_left)
    return _passing(d, ("sequence",), ctx, cp=np.array(d))


def ulysses_choices(ctx: RuleContext, cp: int, tp: int) -> list[int]:
    """Ulysses degrees: divisors of cp for which tp*ulysses splits the attention and key/value heads."""
    d = divisors(cp)
    keys = ("ulysses_divides_cp", "ulysses_heads")
    return _passing(d, keys, ctx, ulysses=np.array(d), cp=cp, tp=tp) or [1]


def pp_choices(ctx: RuleContext, devices_left: int) -> list[int]:
    """Pipeline degrees: divisors of the devices left after tp and cp that divide the layers (vpp = 1)."""
    d = divisors(devices_left)
    return _passing(d, ("layers",), ctx, pp=np.array(d), vpp=1)


def vpp_choices(ctx: RuleContext, pp: int) -> list[int]:
    """Virtual stages per rank: 1 without a pipeline, else v <= MAX_VPP with pp*v dividing the layers."""
    v = list(range(1, MAX_VPP + 1))
    return _passing(v, ("layers", "vpp_needs_pp"), ctx, pp=pp, vpp=np.array(v)) or [1]


def micro_batch_choices(ctx: RuleContext, dp: int) -> list[int]:
    """Micro-batch sizes b <= MAX_MICRO_BATCH_SIZE with dp*b dividing the global batch; [1] if even dp
    alone does not divide it (the violation then says so)."""
    b = list(range(1, MAX_MICRO_BATCH_SIZE + 1))
    return _passing(b, ("batch",), ctx, dp=dp, micro_batch_size=np.array(b)) or [1]


def ep_choices(ctx: RuleContext, dp: int, cp: int, tp: int) -> list[int]:
    """Expert-parallel degrees: 1 for dense models, else divisors of the routed experts that divide dp*cp*tp."""
    e = divisors(max(ctx.need_model().num_experts, 1))
    keys = ("ep_needs_moe", "ep_divides_experts", "ep_divides_groups")
    return _passing(e, keys, ctx, ep=np.array(e), etp=0, dp=dp, cp=cp, tp=tp) or [1]


def etp_choices(ctx: RuleContext, dp: int, cp: int, tp: int, ep: int) -> list[int]:
    """Expert tensor-parallel degrees: 0 (automatic), and for an MoE model the divisors of dp*cp*tp/ep that
    divide the expert width."""
    if not ctx.need_model().is_moe:
        return [0]
    e = divisors(max(dp * cp * tp // max(ep, 1), 1))
    keys = ("ep_divides_groups", "etp_divides_experts")
    return [0, *_passing(e, keys, ctx, etp=np.array(e), ep=ep, dp=dp, cp=cp, tp=tp)]


def nearest(value: int, options: list[int]) -> int:
    """``value`` if offered, else the offered value closest to it (ties to the smaller)."""
    return value if value in options else min(options, key=lambda o: (abs(o - value), o))


def plan_choices(
    model: ModelSpec,
    num_devices: int,
    workload: Workload,
    current: dict[str, int],
    schedule: str,
    *,
    uneven_stages: bool = False,
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Valid options of every degree selector and the value each moves to (the current one if still valid,
    else the nearest), in dependency order tp -> cp -> ulysses, pp -> vpp, micro-batch, ep; dp is what
    remains.
    ``uneven_stages``: the chosen stack runs stages of different layer counts."""
    options: dict[str, list[int]] = {}
    picks: dict[str, int] = {}

    def pick(field: str, valid: list[int]) -> int:
        options[field], picks[field] = valid, nearest(current[field], valid)
        return picks[field]

    n, ctx = num_devices, context(model, workload, uneven_stages=uneven_stages)
    tp = pick("tp", tp_choices(ctx, n) or [1])
    cp = pick("cp", cp_choices(ctx, n // tp) if n % tp == 0 else [1])
    pick("ulysses", ulysses_choices(ctx, cp, tp))
    pp = pick("pp", pp_choices(ctx, n // (tp * cp)) if n % (tp * cp) == 0 else [1])
    dp = max(1, n // (tp * cp * pp))
    fixed_vpp = required_vpp(schedule) if pp > 1 else None
    vpp_options = vpp_choices(ctx, pp)
    if fixed_vpp is None and pp > 1 and current["vpp"] < default_vpp(schedule):  # interleaved: at least 2
        current = {**current, "vpp": default_vpp(schedule)}
    pick("vpp", [fixed_vpp] if fixed_vpp in vpp_options else vpp_options)
    pick("micro_batch_size", micro_batch_choices(ctx, dp))
    ep = pick("ep", ep_choices(ctx, dp, cp, tp))
    pick("etp", etp_choices(ctx, dp, cp, tp, ep))
    return options, picks


def schedule_disabled_reasons(
    plan: ParallelPlan, workload: Workload, framework: FrameworkProfile | None = None
) -> dict[str, str]:
    """Schedule name -> why it cannot run this plan's pipeline (each at the vpp it would use, or because
    ``framework`` does not run it); empty when pp = 1 (the schedule is then ignored) or when
    dp*micro_batch_size does not divide the batch."""
    m = plan.num_microbatches(workload)
    if plan.pp == 1 or m == 0:
        return {}
    out = {}
    for name in SCHEDULE_NAMES:
        if framework is not None and framework.schedules is not None and name not in framework.schedules:
            out[name] = f"{framework.name} does not run it."
            continue
        vpp = required_vpp(name) or max(plan.vpp, default_vpp(name))
        problems = schedule_rule_violations(name, pp=plan.pp, vpp=vpp, num_microbatches=m)
        if problems:
            out[name] = " ".join(problems)
    return out


def violations_by_control(violations: Iterable[Violation]) -> dict[str, list[str]]:
    """Sentences of ``ParallelPlan.violations`` grouped by the control that fixes them (``Violation.control``:
    a plan field, or ``"cluster"``)."""
    out: dict[str, list[str]] = {}
    for v in violations:
        out.setdefault(v.control, []).append(v.sentence)
    return out
