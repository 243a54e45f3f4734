"""Pipeline schedules as data: per-rank ordered actions ``(stage, op, microbatch)`` and the placement.

``build_schedule("zbv", pp=4, num_microbatches=8)`` gives a frozen ``Schedule``; ``workbench.pipeline.simulate``
prices it. Generators are pure functions; every one cites its paper in its docstring.
"""

from workbench.pipeline.schedules.actions import (
    OPS,
    Action,
    Overlap,
    Schedule,
    parse_action,
    read_schedule_csv,
    schedule_from_rows,
    write_schedule_csv,
)
from workbench.pipeline.schedules.registry import (
    REGISTRY,
    SCHEDULE_NAMES,
    SCHEDULES,
    build_schedule,
    default_vpp,
    get_schedule,
    num_directions,
    required_vpp,
    schedule_rule_violations,
    uses_split_backward,
    uses_v_placement,
)
from workbench.pipeline.schedules.spec import ScheduleSpec
from workbench.specs.schedule_traits import Placement

__all__ = [
    "OPS",
    "REGISTRY",
    "SCHEDULES",
    "SCHEDULE_NAMES",
    "Action",
    "Overlap",
    "Placement",
    "Schedule",
    "ScheduleSpec",
    "build_schedule",
    "default_vpp",
    "get_schedule",
    "num_directions",
    "parse_action",
    "read_schedule_csv",
    "required_vpp",
    "schedule_from_rows",
    "schedule_rule_violations",
    "uses_split_backward",
    "uses_v_placement",
    "write_schedule_csv",
]
