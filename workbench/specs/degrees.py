"""The valid degrees of a plan: which values each degree may take on a model, a device count and a workload.

Pure functions over the specs: each list is the candidates that pass the rules of the rule table
(``workbench.specs.rule_table``) it names, so the app's selectors (``workbench_widgets.app.choices``) offer only
what ``ParallelPlan.violations`` accepts. ``plan_choices`` solves them in dependency order (tp -> cp ->
ulysses, pp -> vpp, micro-batch, ep -> etp; dp is what remains, ``workbench.specs.plan.data_parallel_degree``).
"""

from __future__ import annotations

import numpy as np

from workbench.specs.limits import MAX_DEVICES, check_count
from workbench.specs.model import ModelSpec
from workbench.specs.plan import Workload, data_parallel_degree
from workbench.specs.rule_table import passes
from workbench.specs.rules import RuleContext
from workbench.specs.schedule_traits import schedule_traits

MAX_OFFERED_VPP = 8
"""Largest virtual-stage count offered (Megatron's interleaved runs use 2-6)."""
MAX_OFFERED_MICRO_BATCH_SIZE = 64
"""Largest micro-batch size offered."""


def divisors(n: int) -> list[int]:
    """All positive divisors of ``n`` (a device or expert count, 1..``limits.MAX_DEVICES``) in increasing order.

    Factorises ``n`` by trial division over 2 and the odd numbers up to sqrt(n) (at most 512 steps within the
    bound), then multiplies out the prime powers: the work is bounded and the answer small (no n <= 2^20 has
    more than 240 divisors). Raises ValueError for n outside 1..MAX_DEVICES.
    """
    check_count("divisors", "n", n, maximum=MAX_DEVICES, limit="MAX_DEVICES")
    out, rest, p = [1], n, 2
    while p * p <= rest:
        power = 0
        while rest % p == 0:
            rest //= p
            power += 1
        if power:
            out = [d * p**k for d in out for k in range(power + 1)]
        p += 1 if p == 2 else 2
    if rest > 1:
        out = out + [d * rest for d in out]
    return sorted(out)


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
    """Virtual stages per rank: 1 without a pipeline, else v <= MAX_OFFERED_VPP with pp*v dividing the layers."""
    v = list(range(1, MAX_OFFERED_VPP + 1))
    return _passing(v, ("layers", "vpp_needs_pp"), ctx, pp=pp, vpp=np.array(v)) or [1]


def micro_batch_choices(ctx: RuleContext, dp: int) -> list[int]:
    """Micro-batch sizes b <= MAX_OFFERED_MICRO_BATCH_SIZE with dp*b dividing the global batch; [1] if even dp
    alone does not divide it (the violation then says so)."""
    b = list(range(1, MAX_OFFERED_MICRO_BATCH_SIZE + 1))
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
) -> tuple[dict[str, list[int]], dict[str, int], str]:
    """Valid options of every degree, the value each moves to (the current one if still valid, else the
    nearest), in dependency order tp -> cp -> ulysses, pp -> vpp, micro-batch, ep -> etp (dp is what remains,
    ``data_parallel_degree``), and the schedule that runs them. ``current``: the chosen value of each of those
    degrees; ``schedule``: the chosen schedule's name (its required or default vpp applies when pp > 1); it
    moves to its ``ScheduleTraits.without_vpp`` (interleaved 1F1B -> 1F1B) when no vpp >= its ``min_vpp``
    divides the layers into pp * vpp stages, and is kept otherwise (a plan it cannot run is then refused by
    the rules, naming it). ``uneven_stages``: the chosen stack runs stages of different layer counts.
    Raises ValueError for an unknown schedule name when pp > 1."""
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
    dp = data_parallel_degree(n, tp=tp, pp=pp, cp=cp)
    traits = schedule_traits(schedule) if pp > 1 else None  # the schedule is ignored without a pipeline
    vpp_options = vpp_choices(ctx, pp)
    if traits is not None and traits.without_vpp is not None and max(vpp_options) < traits.min_vpp:
        schedule = traits.without_vpp
        traits = schedule_traits(schedule)
    fixed_vpp = traits.required_vpp if traits is not None else None
    if traits is not None and fixed_vpp is None and current["vpp"] < traits.default_vpp:  # interleaved: >= 2
        current = {**current, "vpp": traits.default_vpp}
    pick("vpp", [fixed_vpp] if fixed_vpp in vpp_options else vpp_options)
    runnable = (
        [v for v in vpp_options if v >= traits.min_vpp] if traits is not None and fixed_vpp is None else []
    )
    if runnable and picks["vpp"] not in runnable:  # interleaved: the nearest vpp it runs, not a tie's 1
        picks["vpp"] = nearest(current["vpp"], runnable)
    pick("micro_batch_size", micro_batch_choices(ctx, dp))
    ep = pick("ep", ep_choices(ctx, dp, cp, tp))
    pick("etp", etp_choices(ctx, dp, cp, tp, ep))
    return options, picks, schedule
