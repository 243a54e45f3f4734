"""Which values a control may offer, and which control each violated rule belongs to.

Pure functions over the core specs (no widgets): the Store calls them to narrow the selectors of the
``WorkbenchState`` so that only valid degrees are offered, and to place each sentence of
``ParallelPlan.validate`` next to the control the user should change.
"""

from __future__ import annotations

from workbench.pipeline.schedules import SCHEDULE_NAMES, default_vpp, required_vpp, schedule_rule_violations
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

MAX_VPP = 8
"""Largest virtual-stage count offered (Megatron's interleaved runs use 2-6)."""
MAX_MICRO_BATCH_SIZE = 64
"""Largest micro-batch size offered."""

CONTROL_OF_PREFIX: tuple[tuple[str, str], ...] = (
    ("dp*tp*pp*cp", "num_nodes"),
    ("dp*micro_batch_size", "micro_batch_size"),
    ("pp*vpp", "pp"),
    ("tp=", "tp"),
    ("cp=", "cp"),
    ("ep=", "ep"),
    ("vpp=", "vpp"),
    ("sequence_parallel", "sequence_parallel"),
)
"""How ``plan_violations`` sentences start, and the control each belongs to; anything else is the
schedule's own rule (``schedule_rule_violations``) and goes next to the schedule selector."""


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order (ValueError if n < 1)."""
    if n < 1:
        raise ValueError(f"divisors: n must be >= 1, got {n}")
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_choices(model: ModelSpec, num_devices: int) -> list[int]:
    """Tensor-parallel degrees: divide the devices and the attention heads; tp and the key/value heads
    divide one another (the rules of ``workbench.specs.rules``)."""
    kv = model.num_key_value_heads
    return [
        d
        for d in divisors(num_devices)
        if model.num_attention_heads % d == 0 and (model.attention == "mla" or kv % d == 0 or d % kv == 0)
    ]


def cp_choices(workload: Workload, devices_left: int) -> list[int]:
    """Context-parallel degrees: divide the devices left after tp and the sequence length."""
    return [d for d in divisors(devices_left) if workload.seq_len % d == 0]


def pp_choices(model: ModelSpec, devices_left: int) -> list[int]:
    """Pipeline degrees: divide the devices left after tp and cp, and the layers."""
    return [d for d in divisors(devices_left) if model.num_layers % d == 0]


def vpp_choices(model: ModelSpec, pp: int) -> list[int]:
    """Virtual stages per rank: 1 without a pipeline, else v <= MAX_VPP with pp*v dividing the layers."""
    if pp == 1:
        return [1]
    return [v for v in range(1, MAX_VPP + 1) if model.num_layers % (pp * v) == 0]


def micro_batch_choices(workload: Workload, dp: int) -> list[int]:
    """Micro-batch sizes b with dp*b dividing the global batch (b <= MAX_MICRO_BATCH_SIZE); [1] if even
    dp alone does not divide it (the violation then says so)."""
    if workload.global_batch_size % dp:
        return [1]
    per_replica = workload.global_batch_size // dp
    return [b for b in divisors(per_replica) if b <= MAX_MICRO_BATCH_SIZE] or [1]


def ep_choices(model: ModelSpec, dp: int, cp: int, tp: int) -> list[int]:
    """Expert-parallel degrees: 1 for dense models, else divisors of the routed experts that divide dp*cp*tp."""
    if not model.is_moe:
        return [1]
    return [e for e in divisors(model.num_experts) if (dp * cp * tp) % e == 0]


def nearest(value: int, options: list[int]) -> int:
    """``value`` if offered, else the offered value closest to it (ties to the smaller)."""
    return value if value in options else min(options, key=lambda o: (abs(o - value), o))


def plan_choices(
    model: ModelSpec, num_devices: int, workload: Workload, current: dict[str, int], schedule: str
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Valid options of every degree selector and the value each moves to (the current one if still valid,
    else the nearest), in dependency order tp -> cp -> pp -> vpp, micro-batch, ep; dp is what remains."""
    options: dict[str, list[int]] = {}
    picks: dict[str, int] = {}

    def pick(field: str, valid: list[int]) -> int:
        options[field], picks[field] = valid, nearest(current[field], valid)
        return picks[field]

    n = num_devices
    tp = pick("tp", tp_choices(model, n) or [1])
    cp = pick("cp", cp_choices(workload, n // tp) if n % tp == 0 else [1])
    pp = pick("pp", pp_choices(model, n // (tp * cp)) if n % (tp * cp) == 0 else [1])
    dp = max(1, n // (tp * cp * pp))
    fixed_vpp = required_vpp(schedule) if pp > 1 else None
    vpp_options = vpp_choices(model, pp)
    if fixed_vpp is None and pp > 1 and current["vpp"] < default_vpp(schedule):  # interleaved: at least 2
        current = {**current, "vpp": default_vpp(schedule)}
    pick("vpp", [fixed_vpp] if fixed_vpp in vpp_options else vpp_options)
    pick("micro_batch_size", micro_batch_choices(workload, dp))
    pick("ep", ep_choices(model, dp, cp, tp))
    return options, picks


def schedule_disabled_reasons(plan: ParallelPlan, workload: Workload) -> dict[str, str]:
    """Schedule name -> why it cannot run this plan's pipeline (each at the vpp it would use); empty when
    pp = 1 (the schedule is then ignored) or when dp*micro_batch_size does not divide the batch."""
    m = plan.num_microbatches(workload)
    if plan.pp == 1 or m == 0:
        return {}
    out = {}
    for name in SCHEDULE_NAMES:
        vpp = required_vpp(name) or max(plan.vpp, default_vpp(name))
        problems = schedule_rule_violations(name, pp=plan.pp, vpp=vpp, num_microbatches=m)
        if problems:
            out[name] = " ".join(problems)
    return out


def violations_by_control(sentences: list[str]) -> dict[str, list[str]]:
    """Group ``ParallelPlan.validate`` sentences by the control that fixes them (see CONTROL_OF_PREFIX)."""
    out: dict[str, list[str]] = {}
    for sentence in sentences:
        control = next((c for prefix, c in CONTROL_OF_PREFIX if sentence.startswith(prefix)), "schedule")
        out.setdefault(control, []).append(sentence)
    return out
