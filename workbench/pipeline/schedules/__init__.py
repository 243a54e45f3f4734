"""Pipeline schedules as data: per-rank ordered actions ``(stage, op, microbatch)`` and the placement.

``build_schedule("zbv", pp=4, num_microbatches=8)`` gives a frozen ``Schedule``; ``workbench.pipeline.simulate``
prices it. Generators are pure functions; every one cites its paper in its docstring.
"""

from workbench.pipeline.schedules.actions import (
    OPS,
    Action,
    Schedule,
    parse_action,
    read_schedule_csv,
    schedule_from_rows,
    write_schedule_csv,
)
from workbench.pipeline.schedules.registry import (
    SCHEDULE_NAMES,
    build_schedule,
    default_vpp,
    required_vpp,
    schedule_rule_violations,
    uses_split_backward,
    uses_v_placement,
)

__all__ = [
    "OPS",
    "SCHEDULE_NAMES",
    "Action",
    "Schedule",
    "build_schedule",
    "default_vpp",
    "parse_action",
    "read_schedule_csv",
    "required_vpp",
    "schedule_from_rows",
    "schedule_rule_violations",
    "uses_split_backward",
    "uses_v_placement",
    "write_schedule_csv",
]
