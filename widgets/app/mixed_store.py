"""State and Store of the Mixed cluster tab: pools composed by a person, planned with ``workbench.hetero``.

- ``MixedState``: the choices, parameters only: the pools as (cluster preset id, node count) rows, an optional
  shared level (empty fields: the pools' slowest outer level, as ``workbench.specs.pools`` defaults it), the model
  preset and the workload;
- ``MixedStore``: checks the composition and builds the specs (``inputs``, on the caller's thread), runs
  ``plan_mixed`` on them (``search``, safe in a worker thread: it reads only its frozen inputs), holds the result,
  the selected plan and the reason there is none; no widgets.

The tab's View is ``workbench_widgets.app.mixed_view``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import param

from workbench.presets import catalog
from workbench.specs.limits import MAX_GLOBAL_BATCH_SIZE, MAX_NODES, MAX_SEQ_LEN, shown
from workbench.specs.pools import MAX_POOLS

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.model import ModelSpec
    from workbench.specs.plan import Workload
    from workbench.specs.pools import MixedCluster

DTYPES = ("bf16", "fp16", "fp8")
"""Precisions ``workbench plan --dtype`` takes."""
TOP_K = 20
"""Pipeline layouts simulated after the screen: ``workbench plan --top``'s default, so the command shown reproduces
the tab's table."""
GBPS, US = 1e9, 1e-6
"""The shared level is typed in GB/s (10^9 bytes/s) and us, as in the preset files; the Store converts once."""


class MixedState(param.Parameterized):
    """The Mixed cluster tab's choices."""

    pools = param.List(
        default=[("dgx-h100", 4), ("dgx-a100", 4)],
        doc="(cluster preset id, nodes) per pool, in order; replaced whole on every change, never mutated.",
    )
    shared_bandwidth_GBps = param.Number(
        default=None, allow_None=True, bounds=(1e-3, 1e6),
        doc="Level between pools, GB/s per device, one direction; None: the pools' slowest outer level.",
    )  # fmt: skip
    shared_latency_us = param.Number(
        default=None, allow_None=True, bounds=(0.0, 1e9),
        doc="Latency of the level between pools, us; None: the highest of the pools' outer levels.",
    )  # fmt: skip
    model_preset = param.Selector(default="llama-3.1-70b", objects=["llama-3.1-70b"], doc="Model preset id.")
    seq_len = param.Integer(default=8192, bounds=(1, MAX_SEQ_LEN), doc="Tokens per sequence.")
    global_batch_size = param.Integer(
        default=256, bounds=(1, MAX_GLOBAL_BATCH_SIZE), doc="Sequences per step."
    )
    dtype = param.Selector(default="bf16", objects=list(DTYPES), doc="Training precision.")


def pools_text(pools: list[tuple[str, Any]]) -> str:
    """The command line's form of the pools: ``dgx-h100:4+dgx-a100:4``."""
    return "+".join(f"{name}:{nodes}" for name, nodes in pools)


@dataclass(frozen=True, kw_only=True)
class MixedInputs:
    """What one run of the planner takes (frozen, so a worker thread reads it safely)."""

    model: ModelSpec
    cluster: MixedCluster
    workload: Workload
    calibration: Calibration


class MixedStore(param.Parameterized):
    """The planner's result for a ``MixedState`` (on request: ``run`` or the View's button), the plan selected in
    it, and why there is none."""

    state = param.ClassSelector(class_=MixedState)
    result = param.Parameter(default=None, doc="MixedSearchResult of the last run; None before one.")
    selected = param.Integer(default=0, bounds=(0, None), doc="Index of the shown plan in result.plans.")
    error = param.String(default="", doc="Why the last run gave no result ('' when it did).")
    running = param.Boolean(default=False, doc="A run is under way.")

    def __init__(self, state: MixedState | None = None, **params: Any) -> None:
        super().__init__(state=state or MixedState(), **params)
        self._cache: dict[tuple[str, Any], Any] = {}  # per session: presets and the calibration
        self.cluster_presets = catalog.preset_names("cluster")
        self.state.param.model_preset.objects = catalog.model_choices()

    def _cached(self, kind: str, key: Any, load: Any) -> Any:
        if (kind, key) not in self._cache:
            self._cache[kind, key] = load()
        return self._cache[kind, key]

    def pool_spec(self, i: int, row: Any) -> Any:
        """The ``ClusterSpec`` of row ``i``; ValueError names the row, the bad value and what is allowed."""
        if not isinstance(row, tuple | list) or len(row) != 2:
            raise ValueError(f"pool {i + 1}: a row is (cluster preset, nodes), got {shown(row)}")
        name, nodes = row
        if name not in self.cluster_presets:
            raise ValueError(
                f"pool {i + 1}: unknown cluster preset {shown(name)}; known: {', '.join(self.cluster_presets)}"
            )
        if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES:
            raise ValueError(
                f"pool {i + 1} ({name}): nodes must be a whole number 1..{MAX_NODES:,}, got {shown(nodes)}"
            )
        return self._cached("cluster", (name, nodes), lambda: catalog.load_cluster(name, num_nodes=nodes))

    def cluster(self) -> MixedCluster:
        """The ``MixedCluster`` of the rows and the shared-level fields. ValueError for fewer than two pools,
        more than ``MAX_POOLS``, an unknown preset, a node count outside 1..MAX_NODES or a bad level."""
        from workbench.specs.hardware import NetworkLevel
        from workbench.specs.pools import MixedCluster

        rows = list(self.state.pools)
        if len(rows) < 2:
            raise ValueError(
                f"a mixed cluster needs at least two pools, got {len(rows)}: add a pool (one kind of cluster "
                "alone is planned in the Plan and Search tabs)"
            )
        if len(rows) > MAX_POOLS:
            raise ValueError(f"{len(rows)} pools; at most {MAX_POOLS} (MAX_POOLS)")
        pools = tuple(self.pool_spec(i, row) for i, row in enumerate(rows))
        mixed = MixedCluster(
            id=pools_text(rows), name=" + ".join(f"{p.num_nodes} x {p.name}" for p in pools), pools=pools
        )  # as ``workbench.presets.pools.load_mixed_cluster`` builds the command line's form
        if not self.level_typed():
            return mixed
        s, base = self.state, mixed.link
        gbps, us = s.shared_bandwidth_GBps, s.shared_latency_us
        shared = NetworkLevel(
            name=base.name,
            bytes_per_s=base.bytes_per_s if gbps is None else gbps * GBPS,
            latency_s=base.latency_s if us is None else us * US,
        )
        return replace(mixed, shared=shared)

    def level_typed(self) -> bool:
        """Whether a field of the shared level is typed in (else the pools' slowest outer level joins them)."""
        return self.state.shared_bandwidth_GBps is not None or self.state.shared_latency_us is not None

    def default_shared(self) -> Any:
        """The level that joins the rows' pools when no field is given; None while a row is invalid."""
        from workbench.specs.pools import slowest_shared_level

        try:
            return slowest_shared_level(tuple(self.pool_spec(i, r) for i, r in enumerate(self.state.pools)))
        except (ValueError, OSError):
            return None

    def inputs(self) -> MixedInputs:
        """Specs of the State, checked (ValueError names the bad choice), as ``workbench plan`` builds them."""
        from workbench.presets.calibration import load_calibration
        from workbench.presets.frameworks import DEFAULT_FRAMEWORK
        from workbench.specs.plan import Workload

        s = self.state
        cluster = self.cluster()
        model = self._cached("model", s.model_preset, lambda: catalog.load_model(s.model_preset))
        workload = Workload(seq_len=s.seq_len, global_batch_size=s.global_batch_size, dtype=s.dtype)
        for pool in cluster.pools:
            pool.device.peak(workload.dtype)
        cal = self._cached(
            "calibration", "default", lambda: load_calibration("default", framework=DEFAULT_FRAMEWORK)
        )
        return MixedInputs(model=model, cluster=cluster, workload=workload, calibration=cal)

    @staticmethod
    def search(inputs: MixedInputs) -> Any:
        """``plan_mixed`` on ``inputs`` with ``workbench plan``'s defaults (memory headroom, ``TOP_K``)."""
        from workbench.search.mixed.planner import MixedOptions, plan_mixed
        from workbench.search.space import DEFAULT_HEADROOM_FRAC

        options = MixedOptions(headroom_frac=DEFAULT_HEADROOM_FRAC, top_k=TOP_K)
        return plan_mixed(
            inputs.model, inputs.cluster, inputs.workload, options=options, calibration=inputs.calibration
        )

    def accept(self, result: Any) -> None:
        """Keep ``result`` and show its first plan."""
        self.param.update(result=result, selected=0, error="")

    def refuse(self, exc: BaseException) -> None:
        """Drop the result and keep why (a ValueError's own message; other errors with their type)."""
        text = str(exc) or type(exc).__name__
        if not isinstance(exc, ValueError | OSError):
            text = f"{text} ({type(exc).__name__})"
        self.param.update(result=None, selected=0, error=text)

    def run(self) -> None:
        """Check, plan and keep the result on this thread (notebooks and tests; the View runs ``search`` in a
        worker thread)."""
        try:
            self.accept(self.search(self.inputs()))
        except Exception as exc:  # said in the tab; the session goes on
            self.refuse(exc)

    def cli_command(self) -> str:
        """The ``workbench plan`` command of the choices; with a shared level typed in, the cluster is the TOML
        file ``cluster_toml`` writes (``mixed-cluster.toml``)."""
        s = self.state
        args = ["workbench", "plan", "--model", s.model_preset, "--cluster",
                "mixed-cluster.toml" if self.level_typed() else pools_text(s.pools), "--seq-len", str(s.seq_len),
                "--global-batch", str(s.global_batch_size), "--dtype", s.dtype]  # fmt: skip
        return shlex.join(args)

    def cluster_toml(self) -> str:
        """The composition as a mixed cluster TOML file (``workbench.presets.pools``'s form; ``[shared]`` only when
        a field of the level is typed in). ValueError as ``cluster``."""
        cluster = self.cluster()
        lines = ['id = "mixed-cluster"', f"name = {json.dumps(cluster.name)}", ""]
        for name, nodes in self.state.pools:
            lines += ["[[pools]]", f"cluster = {json.dumps(name)}", f"num_nodes = {nodes}", ""]
        if self.level_typed():
            link = cluster.link
            lines += ["[shared]", f"name = {json.dumps(link.name)}",
                      f"bandwidth_GBps = {_shown_number(link.bytes_per_s / GBPS)!r}",
                      f"latency_us = {_shown_number(link.latency_s / US)!r}", ""]  # fmt: skip
        return "\n".join(lines)

    def load_preset(self, name: str) -> None:
        """Fill the rows and the shared level from a mixed preset (``profiles/clusters/mixed/``). ValueError for
        an unknown preset or one whose pools are not cluster presets."""
        from workbench.presets.pools import load_mixed_cluster, mixed_preset_names

        if name not in mixed_preset_names():
            raise ValueError(f"unknown mixed preset {shown(name)}; known: {', '.join(mixed_preset_names())}")
        mixed = load_mixed_cluster(name)
        rows = [(p.id, p.num_nodes) for p in mixed.pools]
        for i, row in enumerate(rows):
            self.pool_spec(i, row)
        link = mixed.link
        self.state.param.update(
            pools=rows,
            shared_bandwidth_GBps=_shown_number(link.bytes_per_s / GBPS),
            shared_latency_us=_shown_number(link.latency_s / US),
        )


def _shown_number(value: float) -> float:
    """``value`` to 12 significant digits: a unit conversion's last-bit noise (9.999999999999998) not shown."""
    return float(f"{value:.12g}")
