"""``WorkbenchStore``: turns a ``WorkbenchState`` into core specs, calls the backends and the planner, and
holds the results (an ``Estimate``, the search frame, the comparison). No widgets here.

Everything lives on the instance (preset cache, backend instances, estimate cache), so two sessions of a
served app, each with its own State and Store, share nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import fields, replace
from typing import Any

import param
import polars as pl

from widgets.app import choices
from widgets.app.state import CUSTOM, DEGREE_FIELDS, UPLOADED, WorkbenchState
from workbench import catalog
from workbench.estimate import Estimate
from workbench.hardware import ClusterSpec, NetworkLevel
from workbench.hf_config import model_from_hf_config
from workbench.model import ModelSpec
from workbench.plan import ParallelPlan, Workload
from workbench.registry import backend_names, get_backend
from workbench.schedules import required_vpp

CLUSTER_FIELDS = (
    "device",
    "num_nodes",
    "devices_per_node",
    "scale_up_span",
    "scale_up_bandwidth_GBps",
    "scale_up_latency_us",
    "scale_out_bandwidth_GBps",
    "scale_out_latency_us",
)
MODEL_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "ffn_hidden_size",
    "vocab_size",
)
PLAN_FIELDS = ("dp", *DEGREE_FIELDS, "zero_stage", "sequence_parallel", "recompute", "schedule")
ESTIMATE_CACHE_SIZE = 32
GBPS, US = 1e9, 1e-6
"""The State's display units: GB/s (10^9 bytes/s) and microseconds."""


class WorkbenchStore(param.Parameterized):
    """Results of the current State. Watches every State parameter and recomputes in one pass per change."""

    state = param.ClassSelector(class_=WorkbenchState, doc="The choices this store follows.")
    estimate = param.Parameter(default=None, doc="Estimate of the current plan, None while it is invalid.")
    violations = param.List(default=[], doc="Sentences from ParallelPlan.validate (empty: valid).")
    error = param.String(default="", doc="Why the last estimate failed (a bad field, a backend error).")
    disabled_schedules = param.Dict(default={}, doc="Schedule name -> why it cannot run this pipeline.")
    backend_reasons = param.Dict(default={}, doc="Backend name -> why it is unavailable here.")
    search_result = param.Parameter(default=None, doc="The planner's SearchResult of the last search.")
    search_results = param.Parameter(default=None, doc="The planner's ranked plans (polars), best first.")
    search_progress = param.Number(default=0.0, bounds=(0.0, 1.0), doc="Share of the search done.")
    pinned = param.Parameter(default=None, doc="Estimate pinned as plan A of the Compare tab.")
    compare_backend = param.Selector(default="analytic", objects=["analytic"], doc="Backend of plan B.")
    compared = param.Parameter(default=None, doc="Plan B: the current plan priced by compare_backend.")

    def __init__(self, state: WorkbenchState | None = None, *,
                 batch: Callable[[], AbstractContextManager[Any]] = nullcontext, **params: Any) -> None:
        super().__init__(state=state or WorkbenchState(), **params)
        self.batch = batch
        """Context manager grouping the State changes of one pass (the app passes Panel's ``hold``)."""
        self._presets: dict[tuple[str, str], Any] = {}
        self._backends: dict[str, Any] = {}
        self._estimates: OrderedDict[tuple, Estimate] = OrderedDict()
        self._busy = False
        self._fill_options()
        self._fill_cluster(self.state.cluster_preset)
        self._fill_model(self.state.model_preset)
        names = [p.name for p in self.state.param.objects().values() if p.name != "name"]
        self.state.param.watch(self._on_state_change, names)
        self.refresh()

    # ----- specs from the state -------------------------------------------------------------------------
    def _preset(self, kind: str, name: str) -> Any:
        key = (kind, name)
        if key not in self._presets:
            loader = {
                "model": catalog.load_model,
                "device": catalog.load_device,
                "cluster": catalog.load_cluster,
            }
            self._presets[key] = loader[kind](name)
        return self._presets[key]

    def cluster_spec(self) -> ClusterSpec:
        """The cluster the fields describe (the preset's levels beyond the first and last are kept)."""
        s = self.state
        base = self._preset("cluster", s.cluster_preset) if s.cluster_preset != CUSTOM else None
        inner = NetworkLevel(
            name=base.levels[0].name if base else "scale-up",
            span=s.scale_up_span,
            bytes_per_s=s.scale_up_bandwidth_GBps * GBPS,
            latency_s=s.scale_up_latency_us * US,
        )
        outer = NetworkLevel(
            name=base.levels[-1].name if base else "scale-out",
            bytes_per_s=s.scale_out_bandwidth_GBps * GBPS,
            latency_s=s.scale_out_latency_us * US,
        )
        middle = base.levels[1:-1] if base else ()
        spec = ClusterSpec(
            id=base.id if base else CUSTOM,
            name=base.name if base else "Custom cluster",
            device=self._preset("device", s.device),
            devices_per_node=s.devices_per_node,
            num_nodes=s.num_nodes,
            levels=(inner, *middle, outer),
            source=base.source if base else "",
        )
        if base and replace(base, num_nodes=s.num_nodes) != spec:
            spec = replace(spec, name=f"{base.name} (edited)")
        return spec

    def base_model(self) -> ModelSpec:
        """The preset or uploaded model before the edits of the fields."""
        s = self.state
        if s.model_preset == UPLOADED:
            if not s.uploaded_config:
                raise ValueError("model: upload a Hugging Face config.json first, or pick a preset")
            return model_from_hf_config(s.uploaded_config)
        return self._preset("model", s.model_preset)

    def model_spec(self) -> ModelSpec:
        """The model with the edited fields applied (named ``<name> (edited)`` when they differ)."""
        base = self.base_model()
        edits = {
            f: getattr(self.state, f) for f in MODEL_FIELDS if getattr(self.state, f) != getattr(base, f)
        }
        if not edits:
            return base
        if "hidden_size" in edits or "num_attention_heads" in edits:
            edits["head_dim"] = self.state.hidden_size // self.state.num_attention_heads
        return replace(base, name=f"{base.name} (edited)", **edits)

    def workload(self) -> Workload:
        s = self.state
        return Workload(seq_len=s.seq_len, global_batch_size=s.global_batch_size, dtype=s.dtype)

    def plan(self) -> ParallelPlan:
        s = self.state
        return ParallelPlan(**{f: getattr(s, f) for f in PLAN_FIELDS})

    # ----- reacting to the state -------------------------------------------------------------------------
    def _fill_options(self) -> None:
        s = self.state
        s.param.cluster_preset.objects = [*catalog.preset_names("cluster"), CUSTOM]
        s.param.device.objects = catalog.preset_names("device")
        s.param.model_preset.objects = [*catalog.preset_names("model"), UPLOADED]
        names = backend_names() or ["analytic"]
        s.param.backend.objects = names
        self.param.compare_backend.objects = names
        self.backend_reasons = {n: r for n in names if (r := self._unavailable(n))}

    def _unavailable(self, name: str) -> str | None:
        try:
            return self.backend(name).unavailable_reason()
        except Exception as exc:  # a broken third-party entry point must not take the app down
            return f"cannot load: {exc}"

    def backend(self, name: str) -> Any:
        if name not in self._backends:
            self._backends[name] = get_backend(name)
        return self._backends[name]

    def _fill_cluster(self, preset: str) -> None:
        if preset == CUSTOM:
            return
        c = self._preset("cluster", preset)
        self.state.param.update(
            device=c.device.id,
            devices_per_node=c.devices_per_node,
            scale_up_span=c.levels[0].span or c.num_devices,
            scale_up_bandwidth_GBps=c.levels[0].bytes_per_s / GBPS,
            scale_up_latency_us=c.levels[0].latency_s / US,
            scale_out_bandwidth_GBps=c.levels[-1].bytes_per_s / GBPS,
            scale_out_latency_us=c.levels[-1].latency_s / US,
        )

    def _fill_model(self, preset: str) -> None:
        if preset == UPLOADED and not self.state.uploaded_config:
            return
        base = self.base_model()
        self.state.param.update(**{f: getattr(base, f) for f in MODEL_FIELDS})

    def upload_config(self, config: dict[str, Any]) -> None:
        """Use a parsed Hugging Face ``config.json`` as the model (ValueError if it is not one we read)."""
        model_from_hf_config(config)
        self.state.param.update(uploaded_config=config, model_preset=UPLOADED)

    def _on_state_change(self, *events: param.parameterized.Event) -> None:
        if self._busy:  # our own normalising updates; the outer pass sees them
            return
        changed = {e.name for e in events}
        self._busy = True
        try:
            if "cluster_preset" in changed:
                self._fill_cluster(self.state.cluster_preset)
            if changed & {"model_preset", "uploaded_config"}:
                self._fill_model(self.state.model_preset)
        except ValueError as exc:
            self.error = str(exc)
        finally:
            self._busy = False
        self.refresh()

    def _normalise_plan(self, model: ModelSpec, cluster: ClusterSpec, workload: Workload) -> None:
        """Narrow the degree selectors to valid values and move the current ones onto them.

        Every new option list and value is computed from the values as they were, then all are applied in
        one ``batch()``: a front end that snaps a selector to its first option when its value leaves the
        list (Panel's Select in the browser does) then sees options and value change together.
        """
        s, n = self.state, cluster.num_devices
        current = {f: getattr(s, f) for f in DEGREE_FIELDS}
        options: dict[str, list[int]] = {}
        picks: dict[str, int] = {}

        def pick(field: str, valid: list[int]) -> int:
            options[field] = valid
            picks[field] = choices.nearest(current[field], valid)
            return picks[field]

        tp = pick("tp", choices.tp_choices(model, n) or [1])
        cp = pick("cp", choices.cp_choices(workload, n // tp) if n % tp == 0 else [1])
        pp = pick("pp", choices.pp_choices(model, n // (tp * cp)) if n % (tp * cp) == 0 else [1])
        dp = max(1, n // (tp * cp * pp))
        fixed_vpp = required_vpp(s.schedule) if pp > 1 else None
        vpp_options = choices.vpp_choices(model, pp)
        pick("vpp", [fixed_vpp] if fixed_vpp in vpp_options else vpp_options)
        pick("micro_batch_size", choices.micro_batch_choices(workload, dp))
        pick("ep", choices.ep_choices(model, dp, cp, tp))
        with self.batch(), param.parameterized.batch_call_watchers(s), param.edit_constant(s):
            for field, valid in options.items():
                if s.param[field].objects != valid:
                    s.param[field].objects = valid
            s.param.update(dp=dp, sequence_parallel=s.sequence_parallel and tp > 1, **picks)

    def refresh(self) -> None:
        """Recompute options, violations and the estimate from the state (one pass)."""
        self._busy = True
        try:
            model, cluster, workload = self.model_spec(), self.cluster_spec(), self.workload()
            self._normalise_plan(model, cluster, workload)
            plan = self.plan()
        except ValueError as exc:
            self.param.update(estimate=None, violations=[], error=str(exc))
            return
        finally:
            self._busy = False
        self.disabled_schedules = choices.schedule_disabled_reasons(plan, workload)
        if self.state.param.schedule.objects != list(self._schedule_names()):
            self.state.param.schedule.objects = list(self._schedule_names())
        violations = plan.validate(model, cluster, workload)
        if violations:
            self.param.update(estimate=None, violations=violations, error="")
            return
        try:
            estimate = self.estimate_of(model, cluster, workload, plan, self.state.backend)
        except (ValueError, RuntimeError, OSError) as exc:
            self.param.update(estimate=None, violations=[], error=str(exc))
            return
        self.param.update(estimate=estimate, violations=[], error="")

    @staticmethod
    def _schedule_names() -> tuple[str, ...]:
        from workbench.schedules import SCHEDULE_NAMES

        return SCHEDULE_NAMES

    def estimate_of(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan, backend: str
    ) -> Estimate:
        """``backend``'s Estimate of the plan, from a per-store cache of the last ESTIMATE_CACHE_SIZE."""
        reason = self._unavailable(backend)
        if reason:
            raise ValueError(f"backend {backend!r} is unavailable: {reason}")
        key = (model, cluster, workload, plan, backend)
        if key in self._estimates:
            self._estimates.move_to_end(key)
            return self._estimates[key]
        estimate = self.backend(backend).estimate(model, cluster, workload, plan)
        self._estimates[key] = estimate
        if len(self._estimates) > ESTIMATE_CACHE_SIZE:
            self._estimates.popitem(last=False)
        return estimate

    # ----- plans in and out ------------------------------------------------------------------------------
    def load_plan(self, plan: ParallelPlan | dict[str, Any]) -> None:
        """Set the plan controls from a ParallelPlan or a search row (its ``num_nodes`` too; extra keys ignored)."""
        values = plan if isinstance(plan, dict) else {f.name: getattr(plan, f.name) for f in fields(plan)}
        update = {f: values[f] for f in PLAN_FIELDS if f in values and f != "dp" and values[f] is not None}
        if "recompute" in update:
            update["recompute"] = str(update["recompute"])
        if values.get("num_nodes"):
            update["num_nodes"] = int(values["num_nodes"])
        s = self.state
        for field in DEGREE_FIELDS:  # the values become valid once the controls are re-narrowed
            if field in update and update[field] not in s.param[field].objects:
                s.param[field].objects = [*s.param[field].objects, update[field]]
        s.param.update(**update)

    def search(self, progress: Callable[[float], None] | None = None, **options: Any) -> pl.DataFrame:
        """Run the planner (``workbench.search.search``) for the current model, cluster and workload with
        ``options`` (e.g. ``top_k``, ``objective``, ``nodes``); keep the result and return its ranked plans."""
        from widgets.app.planner import run_planner

        def report(frac: float) -> None:
            self.search_progress = min(1.0, max(0.0, frac))
            if progress:
                progress(frac)

        self.search_progress = 0.0
        result = run_planner(self.model_spec(), self.cluster_spec(), self.workload(), progress=report, **options)
        self.param.update(search_result=result, search_results=result.plans, search_progress=1.0)
        return result.plans

    def pin(self) -> None:
        """Keep the current estimate as plan A of the comparison."""
        self.pinned = self.estimate

    def compare(self) -> Estimate | None:
        """Price the current plan with ``compare_backend`` (plan B); None while the plan is invalid."""
        if self.estimate is None:
            self.compared = None
            return None
        e = self.estimate
        self.compared = self.estimate_of(e.model, e.cluster, e.workload, e.plan, self.compare_backend)
        return self.compared
