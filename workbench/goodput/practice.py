"""How a run checkpoints and recovers (its practice): the options of the goodput model.

A failure preset (``profiles/failures/<id>.toml``) carries its run's practice in a ``[practice]`` table (Meta's
Llama 3 run kept spare capacity and restarted without waiting for a repair; OPT-175B's restarts waited for
nodes); ``GoodputOptions`` holds it, and the command line's ``--checkpoint``, ``--spare-nodes`` and
``--on-failure`` replace its fields one by one (``with_overrides``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from workbench.specs.limits import MAX_NODES, check_count, check_real

CHECKPOINT_MODES = ("sync", "async")
ON_FAILURE = ("wait", "shrink")


@dataclass(frozen=True, kw_only=True, slots=True)
class GoodputOptions:
    """How the run checkpoints and recovers."""

    checkpoint: str = "async"
    """``sync`` (training waits for the write) or ``async`` (waits for the copy to host memory only)."""
    spare_nodes: int = 0
    """Hot spare nodes kept idle beside the job (paid for the whole run). >= 0."""
    spare_frac: float = 0.0
    """More hot spares as a share of the job's nodes, rounded up (a practice that scales with the job: Llama 3's
    16 of 2,048 nodes is 0.0078). In [0, 1]. The job has ``spare_nodes + ceil(spare_frac x nodes)`` spares."""
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
        check_real("GoodputOptions", "spare_frac", self.spare_frac, min_open=False, maximum=1.0)

    def spares(self, num_nodes: Any) -> Any:
        """Hot spare nodes of a job of ``num_nodes`` nodes (int or numpy array)."""
        import numpy as np

        extra = np.ceil(np.asarray(num_nodes, dtype=np.float64) * self.spare_frac - 1e-9)
        return self.spare_nodes + np.maximum(extra, 0.0).astype(np.int64)

    def with_overrides(self, **given: Any) -> GoodputOptions:
        """A copy with the fields given as non-None keyword arguments replaced (the command line's
        ``--checkpoint``, ``--spare-nodes``, ``--on-failure`` over a preset's practice). ValueError for an
        unknown field or a bad value."""
        unknown = sorted(set(given) - set(self.__slots__))
        if unknown:
            raise ValueError(f"GoodputOptions: unknown field(s) {', '.join(unknown)}")
        values = {k: v for k, v in given.items() if v is not None}
        if "spare_nodes" in values and "spare_frac" not in values:
            values["spare_frac"] = 0.0  # a count given on purpose replaces a share
        return replace(self, **values)
