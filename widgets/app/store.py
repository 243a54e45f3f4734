"""``WorkbenchStore``: turns a ``WorkbenchState`` into core specs, calls the backends and the planner, and
holds the results (an ``Estimate``, the search frame, the comparison). No widgets here.

Everything lives on the instance (preset cache, backend instances, estimate cache), so two sessions of a
served app, each with its own State and Store, share nothing.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import fields
from typing import Any

import param
import polars as pl
from workbench_widgets.app import choices, specs
from workbench_widgets.app.state import APP_PLAN_FIELDS, CUSTOM, DEGREE_FIELDS, UPLOADED, WorkbenchState

from workbench.estimate.registry import backend_names, get_backend
from workbench.presets import catalog
from workbench.presets.hf_config import model_from_hf_config
from workbench.specs.axes import PLAN_AXES, PROFILE_AXES
from workbench.specs.axis_types import Control
from workbench.specs.degrees import plan_choices
from workbench.specs.estimate import Estimate
from workbench.specs.hardware import ClusterSpec
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload, data_parallel_degree
from workbench.specs.schedule_traits import schedule_traits

ESTIMATE_CACHE_SIZE = 32
CLUSTER_CONTROLS_FILLED = (
    "device",
    "devices_per_node",
    "scale_up_span",
    "scale_up_bandwidth_GBps",
    "scale_up_latency_us",
    "scale_out_bandwidth_GBps",
    "scale_out_latency_us",
)
"""What ``specs.cluster_fields`` fills from a cluster preset."""
PRESET_FIELDS: dict[str, frozenset[str]] = {
    "model_preset": frozenset(specs.MODEL_FIELDS),
    "cluster_preset": frozenset(CLUSTER_CONTROLS_FILLED),
}
"""The fields a preset fills (``specs.model_fields``, ``specs.cluster_fields``): a change of the preset is said
as that, not as each field it moved."""
PLAN_CHOICES = frozenset({*APP_PLAN_FIELDS, "dp", "backend", "name"})
"""State fields that are the plan itself (or who prices it): changing one makes the plan the user's own;
changing any other field (model, cluster, workload, stack) can make the planner's best another plan."""
MAX_UPLOAD_BYTES = 2**20
"""Largest file the app reads (1 MiB): a Hugging Face ``config.json`` is a few KB. The upload control refuses a
bigger file in the browser, before any byte is sent (``views.ConfigUpload``), and ``upload_file`` again here."""
FAST_BACKENDS = frozenset({"analytic"})
"""Backends quick enough to price a plan inline on every change; others (profiling, real runs) run in the
background when the Store is given ``run_in_background``."""


class WorkbenchStore(param.Parameterized):
    """Results of the current State. Watches every State parameter and recomputes in one pass per change."""

    state = param.ClassSelector(class_=WorkbenchState, doc="The choices this store follows.")
    estimate = param.Parameter(default=None, doc="Estimate of the current plan, None while it is invalid.")
    violations = param.List(
        default=[],
        doc="Violation records (key, control, sentence) of ParallelPlan.violations (empty: valid).",
    )
    error = param.String(default="", doc="Why the last estimate failed (a bad field, a backend error).")
    disabled_schedules = param.Dict(default={}, doc="Schedule name -> why it cannot run this pipeline.")
    backend_reasons = param.Dict(default={}, doc="Backend name -> why it is unavailable here.")
    search_result = param.Parameter(default=None, doc="The planner's SearchResult of the last search.")
    search_results = param.Parameter(default=None, doc="The planner's ranked plans (polars), best first.")
    search_progress = param.Number(default=0.0, bounds=(0.0, 1.0), doc="Share of the search done.")
    pinned = param.Parameter(default=None, doc="Estimate pinned as plan A of the Compare tab.")
    compare_backend = param.Selector(default="analytic", objects=["analytic"], doc="Backend of plan B.")
    compared = param.Parameter(default=None, doc="Plan B: the current plan priced by compare_backend.")
    goodput = param.Parameter(
        default=None,
        doc="(estimate, GoodputEstimate, scaling frame) of the plan the Goodput tab priced last; the report "
        "includes it while that estimate is the current one.",
    )
    working = param.String(default="", doc="What runs in the background now ('' when idle).")
    refused = param.String(
        default="",
        doc="Why the last input was not used ('' once one is): the choices before it were put back.",
    )
    stale = param.String(
        default="",
        doc="Why the plan shown may no longer be the best: it was the planner's best for other inputs ('' when "
        "it is the planner's best for these, or a plan the user chose).",
    )
    why = param.String(
        default="",
        doc="Why the planner ranks the plan shown first ('' when the plan is not the planner's best for these inputs).",
    )
    adjusted = param.String(
        default="",
        doc="Which plan values the inputs forced off the ones chosen, and to what ('' when none): the chosen "
        "ones come back once they are valid again.",
    )

    def __init__(
        self,
        state: WorkbenchState | None = None,
        *,
        batch: Callable[[], AbstractContextManager[Any]] = nullcontext,
        **params: Any,
    ) -> None:
        super().__init__(state=state or WorkbenchState(), **params)
        self.batch = batch
        self.run_in_background: Callable[[Callable[[], None]], None] | None = None
        """Runs slow backends' estimates off the caller's thread (the app sets it; None: run inline)."""
        """Context manager grouping the State changes of one pass (the app passes Panel's ``hold``)."""
        self._presets = specs.Presets()
        self._backends: dict[str, Any] = {}
        self._estimates: OrderedDict[tuple, Estimate] = OrderedDict()
        self._busy = False
        self._refusal: BaseException | None = None
        self._uploading = False
        self._loading = False
        self._planned_for: tuple | None = None
        """The inputs (``_inputs``) the plan was the planner's best for; None: a plan the user chose."""
        self._wanted: dict[str, int] = {f: getattr(self.state, f) for f in DEGREE_FIELDS}
        """The degrees last chosen (by a control or a loaded plan), which normalising moves off only while
        they are invalid."""
        self._wanted_schedule: str = self.state.schedule
        """The schedule last chosen, likewise (an interleaved one runs as 1F1B while no vpp >= 2 is valid)."""
        self._fill_options()
        self._fill_cluster(self.state.cluster_preset)
        self._fill_model(self.state.model_preset)
        names = [p.name for p in self.state.param.objects().values() if p.name != "name"]
        # Last, after the widgets linked to the State: a pass that puts the choices back has the final word.
        self.state.param.watch(self._on_state_change, names, precedence=10)
        self.refresh()
        self._last_good = self._choices()

    # ----- specs from the state (see workbench_widgets.app.specs) ---------------------------------------------------
    def cluster_spec(self) -> ClusterSpec:
        """The cluster the fields describe."""
        return specs.cluster_spec(self.state, self._presets)

    def base_model(self) -> ModelSpec:
        """The preset or uploaded model before the edits of the fields."""
        return specs.base_model(self.state, self._presets)

    def model_spec(self) -> ModelSpec:
        """The model with the edited fields applied (named ``<name> (edited)`` when they differ)."""
        return specs.model_spec(self.state, self._presets)

    def workload(self) -> Workload:
        return specs.workload(self.state)

    def plan(self) -> ParallelPlan:
        return specs.plan(self.state)

    # ----- reacting to the state -------------------------------------------------------------------------
    def _fill_options(self) -> None:
        s = self.state
        s.param.cluster_preset.objects = [*catalog.preset_names("cluster"), CUSTOM]
        s.param.device.objects = catalog.preset_names("device")
        s.param.model_preset.objects = {**catalog.model_choices(), UPLOADED: UPLOADED}
        names = backend_names() or ["analytic"]
        s.param.backend.objects = names
        self.param.compare_backend.objects = names
        self.backend_reasons = {n: r for n in names if (r := self._unavailable(n))}

    def _unavailable(self, name: str) -> str | None:
        try:
            return self.backend(name).unavailable_reason()
        except Exception as exc:  # a broken third-party entry point must not take the app down
            return f"cannot load: {exc}"

    def _uneven_stages(self) -> bool:
        """Whether the plan is priced by a stack that runs uneven stages (the analytic backend with the chosen
        framework profile); other backends keep equal stages."""
        return self.state.backend == "analytic" and bool(self.framework().uneven_stages)

    def framework(self) -> Any:
        """The chosen framework profile."""
        from workbench.presets.frameworks import load_framework

        return load_framework(self.state.framework)

    def backend(self, name: str) -> Any:
        """The backend instance; the analytic one prices with the chosen framework profile."""
        framework = self.state.framework if name == "analytic" else None
        key: Any = (name, framework) if framework else name
        if key not in self._backends:
            self._backends[key] = get_backend(name, **({"framework": framework} if framework else {}))
        return self._backends[key]

    def _fill_cluster(self, preset: str) -> None:
        if preset != CUSTOM:
            self.state.param.update(**specs.cluster_fields(self._presets.get("cluster", preset)))

    def _fill_model(self, preset: str) -> None:
        if preset != UPLOADED or self.state.uploaded_config:
            self.state.param.update(**specs.model_fields(self.base_model()))

    def upload_config(self, config: dict[str, Any], *, source: str = "config.json") -> None:
        """Use a parsed Hugging Face ``config.json`` as the model.

        ValueError, with the choices left as they were and the reason in ``refused``, if it is not a config
        we read or pricing the model it describes fails with anything but a ValueError (a ValueError of the
        pass, e.g. a plan rule, is shown in ``error`` as for any other choice).
        """
        try:
            model_from_hf_config(config)
        except Exception as exc:  # the reader's ValueError, or anything a malformed file provokes
            raise self.refuse(source, exc) from exc
        self._refusal, self._uploading = None, True
        try:
            self.state.param.update(uploaded_config=config, model_preset=UPLOADED)
        finally:
            self._uploading = False
        if self._refusal is not None:  # the pass failed and put the previous model back
            raise self.refuse(source, self._refusal) from self._refusal
        self.refused = ""

    def upload_file(self, data: bytes, filename: str = "config.json") -> None:
        """Read an uploaded ``config.json`` (bytes as sent) and use it (``upload_config``).

        ValueError, nothing changed and the reason in ``refused``, for a file over MAX_UPLOAD_BYTES, not UTF-8,
        not JSON, not a JSON object, or not a config we read.
        """
        name = filename or "config.json"
        if len(data) > MAX_UPLOAD_BYTES:
            raise self.refuse(name, ValueError(too_big_message(len(data))))
        try:
            config = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise self.refuse(name, ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})")) from exc
        except RecursionError as exc:
            raise self.refuse(name, ValueError("JSON nested too deeply")) from exc
        except ValueError as exc:
            raise self.refuse(name, ValueError(f"not JSON ({exc})")) from exc
        if not isinstance(config, dict):
            raise self.refuse(name, ValueError(f"a JSON object was expected, got {type(config).__name__}"))
        self.upload_config(config, source=name)

    def refuse(self, what: str, exc: BaseException) -> ValueError:
        """Publish why ``what`` (an input: a file, a field) was not used in ``refused``; returns it as a
        ValueError to raise."""
        reason = str(exc) or type(exc).__name__
        if not isinstance(exc, ValueError):  # not a message of ours: say what kind of failure it was
            reason = f"{reason} ({type(exc).__name__})"
        self.refused = f"{what} not used: {reason}"
        return ValueError(self.refused)

    def _on_state_change(self, *events: param.parameterized.Event) -> None:
        if self._busy:  # our own normalising updates; the outer pass sees them
            return
        try:
            self._pass({e.name for e in events})
        except Exception as exc:
            # Any failure of a pass (an overflow, a division by zero...) puts the last good choices back.
            self._put_back(events, exc)
            return
        self._last_good = self._choices()
        if self.refused:
            self.refused = ""

    def _pass(self, changed: set[str]) -> None:
        for field in changed & set(DEGREE_FIELDS):
            value = getattr(self.state, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                # the selectors take any value (a link's query arrives in one update): not a degree at all is
                # refused here, and dropped from the options it was added to, before the last good pass returns
                p = self.state.param[field]
                p.objects = [
                    o for o in p.objects if isinstance(o, int) and not isinstance(o, bool) and o >= 0
                ]
                raise ValueError(f"{field} must be a whole number >= 1, got {short(value)}")
            self._wanted[field] = value
        if "schedule" in changed:
            self._wanted_schedule = self.state.schedule
        if changed & PLAN_CHOICES and not self._loading:
            self._planned_for = None  # the user's own plan now: nothing to call stale
            self.why = ""
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
        self._say_if_stale()

    def _inputs(self) -> tuple:
        """What the planner's best plan depends on: every choice but the plan's own, the backend's."""
        return tuple((k, v) for k, v in self._choices().items() if k not in PLAN_CHOICES)

    def _say_if_stale(self) -> None:
        if self._planned_for is None or self._planned_for == self._inputs():
            self.stale = ""
            return
        self.why = ""
        old = dict(self._planned_for)
        now = dict(self._inputs())
        changed = [name for name in now if old.get(name) != now[name] and name != "uploaded_config"]
        for preset, filled in PRESET_FIELDS.items():  # a preset's own fields follow it: name the preset only
            if preset in changed:
                changed = [name for name in changed if name not in filled]
        what = ", ".join(
            f"{name.replace('_', ' ')} {short(old[name])} -> {short(now[name])}" for name in changed
        )
        self.stale = (
            f"This plan was the planner's best before you changed {what or 'the inputs'}: it may not be the "
            "best now, or may not fit. Find the best plan for these inputs."
        )

    def _choices(self) -> dict[str, Any]:
        return {k: v for k, v in self.state.param.values().items() if k != "name"}

    def _put_back(self, events: tuple[param.parameterized.Event, ...], exc: Exception) -> None:
        """Restore the choices of the last pass that worked, recompute, and say in ``refused`` what was not used."""
        self._refusal = exc
        s, good = self.state, self._last_good
        self._wanted.update({f: good[f] for f in DEGREE_FIELDS if f in good})
        self._wanted_schedule = good.get("schedule", self._wanted_schedule)
        self._busy = True
        try:
            for name, value in good.items():  # a half-done pass may have narrowed a selector's options
                p = s.param[name]
                if isinstance(p, param.Selector) and value not in p.objects:
                    p.objects = [*p.objects, value]
            with param.edit_constant(s):
                s.param.update(**{k: v for k, v in good.items() if getattr(s, k) != v})
        finally:
            self._busy = False
        try:
            self.refresh()
        except Exception as again:  # the restored choices worked before; report, never raise into the page
            self.param.update(estimate=None, violations=[], error=f"{again} ({type(again).__name__})")
        if not self._uploading:  # upload_config says it once, naming the file
            self.refuse(", ".join(f"{s.param[e.name].label} = {short(e.new)}" for e in events), exc)

    def _normalise_plan(self, model: ModelSpec, cluster: ClusterSpec, workload: Workload) -> None:
        """Narrow the degree selectors to valid values and move the current ones onto them.

        Options and values come from the core's solver (``workbench.specs.degrees.plan_choices``) on the values
        as they were, then are applied
        so that a selector's value is always in its options (Panel's Select snaps to its first option
        otherwise): widen the options to old and new, set the values, narrow them; ``batch()`` makes it one
        patch for the browser.
        """
        s = self.state
        current = dict(self._wanted)  # the chosen values, back as soon as they are valid again
        options, picks, schedule = plan_choices(
            model,
            cluster.num_devices,
            workload,
            current,
            self._wanted_schedule,
            uneven_stages=self._uneven_stages(),
        )
        dp = data_parallel_degree(cluster.num_devices, tp=picks["tp"], pp=picks["pp"], cp=picks["cp"])
        with self.batch():
            self._set_options(options, widen=True)  # the old and the new values are both valid here...
            with param.edit_constant(s):
                s.param.update(
                    dp=dp,
                    schedule=schedule,
                    sequence_parallel=s.sequence_parallel and picks["tp"] > 1,
                    **picks,
                )
            self._set_options(options, widen=False)  # ...then only the new ones, which the values are in
        moved = [f"{f} {self._wanted[f]} -> {picks[f]}" for f in DEGREE_FIELDS if picks[f] != self._wanted[f]]
        if schedule != self._wanted_schedule:
            min_vpp = schedule_traits(self._wanted_schedule).min_vpp
            moved.append(
                f"schedule {self._wanted_schedule} -> {schedule} (no vpp >= {min_vpp} divides the "
                f"{model.num_layers} layers into pp {picks['pp']} stages)"
            )
        self.adjusted = (
            f"Not valid on {cluster.num_devices:,} device(s) with this model and batch: {', '.join(moved)}. "
            "Your values come back when they are valid again."
            if moved
            else ""
        )

    def _offer_profile_choices(self) -> None:
        """Each plan axis that chooses a profile field (the FP8 recipe) offers the stack's own (its control's
        ``none_as``) and what the stack offers (``FrameworkProfile.offered``); a chosen value the stack does not
        offer stays listed, so the plan is refused by name rather than changed silently."""
        for axis in PROFILE_AXES:
            value = getattr(self.state, axis.name)
            offered = self.framework().offered(axis.profile_field or "")
            target = [axis.app.none_as, *(axis.face_value(v) for v in offered)]
            target += [value] if value not in target else []
            if self.state.param[axis.name].objects != target:
                self.state.param[axis.name].objects = target

    def _set_options(self, options: dict[str, list[int]], *, widen: bool) -> None:
        for field, valid in options.items():
            objects = self.state.param[field].objects
            target = sorted(set(objects) | set(valid)) if widen else valid
            if objects != target:
                self.state.param[field].objects = target

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
        self.disabled_schedules = choices.schedule_disabled_reasons(plan, workload, self.framework())
        if self.state.param.schedule.objects != list(self._schedule_names()):
            self.state.param.schedule.objects = list(self._schedule_names())
        self._offer_profile_choices()
        violations = plan.violations(model, cluster, workload, uneven_stages=self._uneven_stages())
        if violations:
            self.param.update(estimate=None, violations=violations, error="")
            return
        backend = self.state.backend
        key = (model, cluster, workload, plan, backend)
        if self.run_in_background is not None and backend not in FAST_BACKENDS and key not in self._estimates:
            self.param.update(
                estimate=None, violations=[], error="", working=f"{backend} is pricing {plan.describe()}…"
            )
            self.run_in_background(lambda: self._settle(key, background=True))
            return
        self._settle(key)

    def _settle(self, key: tuple, *, background: bool = False) -> None:
        """Price ``key`` = (model, cluster, workload, plan, backend) and publish it, unless the choices moved on
        meanwhile (a background run whose plan is no longer the current one is dropped).

        A ValueError, RuntimeError or OSError is published as ``error``; any other exception propagates to the
        pass (which puts the previous choices back), except in the background, where nobody would see it.
        """
        try:
            estimate = self.estimate_of(*key)
        except Exception as exc:
            if not background and not isinstance(exc, ValueError | RuntimeError | OSError):
                raise
            if self._current_key() == key:
                self.param.update(estimate=None, violations=[], error=str(exc), working="")
            return
        if self._current_key() == key:
            self.param.update(estimate=estimate, violations=[], error="", working="")

    def _current_key(self) -> tuple | None:
        try:
            return (self.model_spec(), self.cluster_spec(), self.workload(), self.plan(), self.state.backend)
        except ValueError:
            return None

    @staticmethod
    def _schedule_names() -> tuple[str, ...]:
        from workbench.pipeline.schedules import SCHEDULE_NAMES

        return SCHEDULE_NAMES

    def estimate_of(
        self, model: ModelSpec, cluster: ClusterSpec, workload: Workload, plan: ParallelPlan, backend: str
    ) -> Estimate:
        """``backend``'s Estimate of the plan, from a per-store cache of the last ESTIMATE_CACHE_SIZE."""
        reason = self._unavailable(backend)
        if reason:
            raise ValueError(f"backend {backend!r} is unavailable: {reason}")
        key = (model, cluster, workload, plan, backend, self.state.framework)
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
        update = {  # a plan's None (etp, the recomputed layers) is the control's none_as, a rank order its name
            a.name: a.face_value(values.get(a.name))
            for a in PLAN_AXES
            if a.app.kind is not Control.DERIVED
            and (values.get(a.name) is not None or a.app.none_as is not None)
        }
        if values.get("num_nodes"):
            update["num_nodes"] = int(values["num_nodes"])
        s = self.state
        for field in DEGREE_FIELDS:  # the values become valid once the controls are re-narrowed
            if field in update and update[field] not in s.param[field].objects:
                s.param[field].objects = [*s.param[field].objects, update[field]]
        self._wanted.update({f: update[f] for f in DEGREE_FIELDS if f in update})
        self._wanted_schedule = update.get("schedule", self._wanted_schedule)
        s.param.update(**update)

    def load_best_plan(self) -> ParallelPlan | None:
        """Load the planner's best plan for the current model, cluster, workload and framework profile
        (``planner.best_plan``: the plan ``workbench plan`` ranks first for them) and return it; None, with
        the choices left as they are, when no plan fits or the inputs are not valid."""
        from workbench_widgets.app.planner import best_plan, best_plan_why

        try:
            inputs = (self.model_spec(), self.cluster_spec(), self.workload(), self.state.framework)
            plan = best_plan(*inputs)
        except ValueError:
            return None
        if plan is not None:
            self._loading = True
            try:
                self.load_plan(plan)
            finally:
                self._loading = False
            self._planned_for = self._inputs()
            self.param.update(stale="", why=best_plan_why(*inputs))
        return plan

    def search(self, progress: Callable[[float], None] | None = None, **options: Any) -> pl.DataFrame:
        """Run the planner (``workbench.search.search``) for the current model, cluster and workload with
        ``options`` (e.g. ``top_k``, ``objective``, ``nodes``; by default the chosen framework's fitted
        constants and ``workbench plan``'s memory headroom, ``planner.HEADROOM_FRAC``); keep the result and
        return its ranked plans."""
        from workbench_widgets.app.planner import run_planner

        def report(frac: float) -> None:
            self.search_progress = min(1.0, max(0.0, frac))
            if progress:
                progress(frac)

        self.search_progress = 0.0
        from workbench_widgets.app.planner import HEADROOM_FRAC

        from workbench.presets.calibration import load_calibration
        from workbench.search import Constraints

        options.setdefault("calibration", load_calibration(framework=self.state.framework))
        options.setdefault("constraints", Constraints(memory_headroom_frac=HEADROOM_FRAC))
        result = run_planner(
            self.model_spec(), self.cluster_spec(), self.workload(), progress=report, **options
        )
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


def too_big_message(size: int) -> str:
    """Why a file of ``size`` bytes is refused (the upload control in the browser shows the same)."""
    return (
        f"{size:,} bytes is more than the {MAX_UPLOAD_BYTES:,}-byte limit of an upload "
        "(a Hugging Face config.json is a few KB)"
    )


def short(value: Any, width: int = 40) -> str:
    """``value`` for a message: a huge integer by its digit count (never converted to text: Python refuses
    past 4,300 digits), anything else cut to ``width`` characters."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"{'a negative' if value < 0 else 'a'} {int(math.log10(abs(value))) + 1}-digit integer"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
