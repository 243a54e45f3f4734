"""How a run checkpoints and recovers (its practice): the options of the goodput model.

A failure preset (``profiles/failures/<id>.toml``) carries its run's practice in a ``[practice]`` table (Meta's
Llama 3 run kept spare capacity and restarted without waiting for a repair; OPT-175B's restarts waited for
nodes); ``GoodputOptions`` holds it, and the command line's ``--checkpoint``, ``--spare-nodes`` and
``--on-failure`` replace its fields one by one (``with_overrides``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workbench.specs.limits import MAX_NODES, check_count

CHECKPOINT_MODES = ("sync", "async")
ON_FAILURE = ("wait", "shrink")


@dataclass(frozen=True, kw_only=True, slots=True)
class GoodputOptions:
    """How the run checkpoints and recovers."""

    checkpoint: str = "async"
    """``sync`` (training waits for the write) or ``async`` (waits for the copy to host memory only)."""
    spare_nodes: int = 0
    """Hot spare nodes kept idle beside the job (paid for the whole run). >= 0."""
    on_failure: str = "wait"
    """With no free spare: ``wait`` for the repair, or ``shrink`` dp and run on until it (elastic)."""

    def __post_init__(self) -> None:
        if self.checkpoint not in CHECKPOINT_MODES:
            raise ValueError(
                f"GoodputOptions: checkpoint must be one of {', '.join(CHECKPOINT_MODES)}, got {self.checkpoint!r}"
            )
        if self.on_failure not in ON_FAILURE:
            raise ValueError(
                f"GoodputOptions: on_failure must be one of {', '.join(ON_FAILURE)}, got {self.on_failure!r}"
            )
        check_count("GoodputOptions", "spare_nodes", self.spare_nodes, minimum=0, maximum=MAX_NODES)

    def with_overrides(self, **given: Any) -> GoodputOptions:
        """A copy with the fields given as non-None keyword arguments replaced (the command line's
        ``--checkpoint``, ``--spare-nodes``, ``--on-failure`` over a preset's practice). ValueError for an
        unknown field or a bad value."""
        unknown = sorted(set(given) - set(self.__slots__))
        if unknown:
            raise ValueError(f"GoodputOptions: unknown field(s) {', '.join(unknown)}")
        return replace(self, **{k: v for k, v in given.items() if v is not None})
