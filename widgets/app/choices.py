"""Which values a control may offer, and which control each violated rule belongs to.

Pure functions over the core specs (no widgets): the Store narrows the degree selectors of the
``WorkbenchState`` with the core's solver (``plan_choices``, ``workbench.specs.degrees``), greys out the
schedules that cannot run the plan, and places each ``Violation`` next to its ``control``.
"""

from __future__ import annotations

from collections.abc import Iterable

from workbench.pipeline.schedules import SCHEDULE_NAMES, default_vpp, required_vpp, schedule_rule_violations
from workbench.specs.framework import FrameworkProfile
from workbench.specs.plan import ParallelPlan, Workload
from workbench.specs.rules import Violation


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
