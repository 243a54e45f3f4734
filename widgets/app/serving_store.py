"""State and Store of the Serving tab: a serving deployment of a model on a cluster, simulated with
``workbench.serving``.

- ``ServingState``: the choices (model, cluster, layout with expert parallelism and attention-DP, dtypes, engine,
  host offload, request lengths, arrivals, SLO), parameters only;
- ``ServingStore``: builds the specs, runs ``serve_estimate`` and a rate sweep, holds the results and the reason
  there are none; no widgets.

The tab's View is ``workbench_widgets.app.serving_view``.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

import param

from workbench.presets import catalog
from workbench.presets.engines import DEFAULT_ENGINE, engine_names, load_engine
from workbench.serving.engine_defaults import with_engine_memory_share
from workbench.serving.estimate import serve_estimate
from workbench.serving.offload import offload_unavailable
from workbench.serving.precision import gemm_precision, gemm_runs, kv_dtypes, kv_precision
from workbench.serving.sweep import rate_sweep, sweep_table
from workbench.specs.degrees import divisors
from workbench.specs.limits import MAX_DEVICES, MAX_PP, MAX_SEQ_LEN
from workbench.specs.serving import SLO, Disaggregation, ServingDType, ServingPlan, ServingWorkload
from workbench.specs.speculative import MAX_SPECULATIVE_TOKENS, SpecMethod, SpeculativeDecoding

MS_PER_S = 1e3
SPEC_METHODS = tuple(m.value for m in SpecMethod if m is not SpecMethod.DRAFT)
"""Speculative methods the tab offers (a draft model needs a second model choice: the CLI's --draft-model)."""
MAX_APP_REQUESTS = 5_000
"""Most requests one change of the tab simulates (the simulation and the sweep run on every change)."""
DEGREES = [1, 2, 4, 8, 16, 32]
"""tp and attention-DP degrees the tab offers."""
DTYPES = [d.value for d in ServingDType]
EP_FIELDS = {"ep": ("tp", "attention_dp"), "prefill_ep": ("prefill_tp", "prefill_attention_dp"),
             "decode_ep": ("decode_tp", "decode_attention_dp")}  # fmt: skip
"""Each ep choice and the (tp, attention_dp) choices of its engine: ep divides tp * attention_dp."""
DTYPE_FIELDS = ("weight_dtype", "activation_dtype", "kv_cache_dtype")
"""The plan's dtype choices: weights take any; GEMM inputs those ``gemm_precision`` runs with the chosen weights,
engine and device; the KV cache those the engine stores on the device (``kv_dtypes``, ``kv_precision``)."""


def ep_unavailable(model: Any) -> str:
    """Why no ``ep`` applies to ``model`` (a ``ModelSpec``), or '' when one can: expert parallelism splits the
    routed experts of MoE layers, which a dense model has none of."""
    return "" if model.is_moe else f"model {model.name!r} is dense: expert parallelism needs MoE layers"


def ep_choices(model: Any, ranks: int) -> list[int]:
    """The ep degrees an engine of ``ranks`` = tp x attention_dp devices can take for ``model``: the divisors of
    ``ranks`` that divide its routed experts (``ServingPlan``'s and ``ReplicaCost``'s rules); [1] for a dense
    model. Raises ValueError for ``ranks`` outside 1..MAX_DEVICES."""
    experts = model.num_experts if model.is_moe else 1
    return [d for d in divisors(ranks) if experts % d == 0]


class ServingState(param.Parameterized):
    """The Serving tab's choices. Times typed by a person are in ms (``_ms``); the Store converts to seconds."""

    model_preset = param.Selector(default="llama-3.1-70b", objects=["llama-3.1-70b"], doc="Model preset id.")
    cluster_preset = param.Selector(default="dgx-h100", objects=["dgx-h100"], doc="Cluster preset id.")
    num_nodes = param.Integer(default=1, bounds=(1, 4096), doc="Nodes of the cluster.")
    replicas = param.Integer(default=1, bounds=(1, MAX_DEVICES), doc="Engines behind the router.")
    tp = param.Selector(default=8, objects=DEGREES, doc="Tensor-parallel degree of an engine.")
    pp = param.Selector(default=1, objects=[1, 2, 4, 8], doc="Pipeline stages of an engine.")
    ep = param.Selector(check_on_set=False, default=1, objects=DEGREES,
                        doc="Expert-parallel degree of an engine's MoE layers; 1: the experts tensor-parallel over "
                            "the engine (ep unset). MoE models only.")  # fmt: skip
    attention_dp = param.Selector(
        default=1, objects=DEGREES, doc="Data-parallel attention ranks of an engine."
    )
    scheduler = param.Selector(default="sarathi", objects=["sarathi", "vllm"], doc="Batching policy.")
    weight_dtype = param.Selector(
        check_on_set=False, default="bf16", objects=DTYPES, doc="Storage type of the main GEMM weights."
    )
    activation_dtype = param.Selector(
        check_on_set=False, default="bf16", objects=DTYPES, doc="Input type of the main GEMMs."
    )
    kv_cache_dtype = param.Selector(
        check_on_set=False, default="bf16", objects=DTYPES, doc="Element type of the KV cache."
    )
    input_tokens = param.Integer(default=1024, bounds=(1, MAX_SEQ_LEN), doc="Prompt tokens per request.")
    output_tokens = param.Integer(default=256, bounds=(1, MAX_SEQ_LEN), doc="Generated tokens per request.")
    num_requests = param.Integer(default=200, bounds=(1, MAX_APP_REQUESTS), doc="Requests simulated.")
    arrival = param.Selector(default="closed", objects=["closed", "poisson"], doc="Closed loop or Poisson.")
    concurrency = param.Integer(default=32, bounds=(1, MAX_APP_REQUESTS), doc="Requests in flight (closed).")
    request_rate_per_s = param.Number(default=8.0, bounds=(1e-6, 1e6), doc="Mean arrival rate (Poisson).")
    ttft_slo_ms = param.Number(default=2000.0, allow_None=True, bounds=(1e-3, None), doc="TTFT target, ms.")
    tpot_slo_ms = param.Number(default=100.0, allow_None=True, bounds=(1e-3, None), doc="TPOT target, ms.")
    slo_percentile = param.Selector(
        default="p99", objects=["p50", "p90", "p99"], doc="Percentile of the SLO."
    )
    prefill_workers = param.Integer(default=0, bounds=(0, MAX_DEVICES),
                                    doc="Prefill engines of a disaggregated deployment; 0: aggregated.")  # fmt: skip
    prefill_tp = param.Selector(default=8, objects=DEGREES, doc="tp of a prefill engine.")
    prefill_ep = param.Selector(
        check_on_set=False, default=1, objects=DEGREES, doc="ep of a prefill engine (1: unset)."
    )
    prefill_attention_dp = param.Selector(default=1, objects=DEGREES, doc="Attention-DP of a prefill engine.")
    decode_workers = param.Integer(default=1, bounds=(1, MAX_DEVICES), doc="Decode engines (disaggregated).")
    decode_tp = param.Selector(default=8, objects=DEGREES, doc="tp of a decode engine.")
    decode_ep = param.Selector(
        check_on_set=False, default=1, objects=DEGREES, doc="ep of a decode engine (1: unset)."
    )
    decode_attention_dp = param.Selector(default=1, objects=DEGREES, doc="Attention-DP of a decode engine.")
    speculative = param.Selector(default="none", objects=["none", *SPEC_METHODS], doc="Speculative decoding.")
    num_speculative_tokens = param.Integer(
        default=3, bounds=(1, MAX_SPECULATIVE_TOKENS), doc="Tokens proposed."
    )
    acceptance_rate = param.Number(default=0.7, bounds=(0.0, 0.999), doc="Per-token acceptance probability.")
    prefix_hit_rate = param.Number(
        default=0.0, bounds=(0.0, 0.999), doc="Share of prompts in the prefix cache."
    )
    engine = param.Selector(
        default=DEFAULT_ENGINE, objects=[DEFAULT_ENGINE], doc="Serving engine profile id."
    )
    gpu_memory_utilization = param.Number(default=None, allow_None=True, bounds=(0.01, 1.0),
                                          doc="The engine's memory flag, read as its own (vLLM's share of the "
                                              "device, SGLang's --mem-fraction-static, TensorRT-LLM's share of the "
                                              "memory left); empty: the engine's default.")  # fmt: skip
    offload_group_size = param.Integer(default=0, bounds=(0, MAX_PP), allow_None=True,
                                       doc="SGLang host offload: of every N layers the last keeps its experts in "
                                           "host memory; 0 or empty: off (MoE models only).")  # fmt: skip


class ServingStore(param.Parameterized):
    """Results of a ``ServingState``: the estimate, the rate sweep (a ``sweep_table`` frame) and the SLO, or the
    reason there are none. Follows every State change once ``refresh`` has run (``show``)."""

    state = param.ClassSelector(class_=ServingState)
    estimate = param.Parameter(
        default=None, doc="ServingEstimate of the choices; None while they are invalid."
    )
    sweep = param.Parameter(default=None, doc="Rate sweep of the plan (polars, SWEEP_COLUMNS).")
    slo = param.Parameter(default=None, doc="The SLO of the choices, or None without targets.")
    error = param.String(default="", doc="Why the last estimate failed.")
    offload_reason = param.String(
        default="",
        doc="Why the model takes no host offload (a dense model); '' when it can, or before a refresh.",
    )
    ep_reason = param.String(
        default="", doc="Why the model takes no ep (a dense model); '' when it can, or before a refresh."
    )

    def __init__(self, state: ServingState | None = None, **params: Any) -> None:
        super().__init__(state=state or ServingState(), **params)
        self._specs: dict[tuple[str, Any], Any] = {}  # per session: presets and the calibration
        self.active = False
        s = self.state
        s.param.model_preset.objects = catalog.model_choices()
        s.param.cluster_preset.objects = catalog.preset_names("cluster")
        s.param.engine.objects = engine_names()
        names = [n for n in s.param if n != "name"]
        s.param.watch(lambda *_: self.refresh() if self.active else None, names)

    def _cached(self, kind: str, key: Any, load: Any) -> Any:
        if (kind, key) not in self._specs:
            self._specs[kind, key] = load()
        return self._specs[kind, key]

    def specs(self) -> tuple[Any, Any, ServingPlan, ServingWorkload, SLO | None]:
        """(model, cluster, plan, workload, slo) of the State. Raises ValueError naming a bad choice."""
        s = self.state
        model = self._cached("model", s.model_preset, lambda: catalog.load_model(s.model_preset))
        cluster = self._cached(
            "cluster",
            (s.cluster_preset, s.num_nodes),
            lambda: catalog.load_cluster(s.cluster_preset, num_nodes=s.num_nodes),
        )
        self.offload_reason = offload_unavailable(model)
        self.ep_reason = ep_unavailable(model)
        # a dense model takes none: the control is disabled with the reason, and its value kept for an MoE model
        self._offer_choices(model, cluster)
        common: dict[str, Any] = {"scheduler": s.scheduler, "engine": s.engine,
                                  "offload_group_size": self.offload_group_size(),
                                  **{name: getattr(s, name) for name in DTYPE_FIELDS}}  # fmt: skip
        spec = None
        if s.speculative != "none":
            spec = SpeculativeDecoding(method=s.speculative, num_speculative_tokens=s.num_speculative_tokens,
                                       acceptance_rate=s.acceptance_rate)  # fmt: skip
        if s.prefill_workers:  # disaggregated: the role layouts replace replicas, tp and pp
            split = Disaggregation(
                prefill_workers=s.prefill_workers, prefill_tp=s.prefill_tp, prefill_ep=self.ep("prefill_ep"),
                prefill_attention_dp=s.prefill_attention_dp, decode_workers=s.decode_workers,
                decode_tp=s.decode_tp, decode_ep=self.ep("decode_ep"), decode_attention_dp=s.decode_attention_dp,
            )  # fmt: skip
            plan = ServingPlan(disaggregation=split, speculative=spec, **common)
        else:
            plan = ServingPlan(replicas=s.replicas, tp=s.tp, pp=s.pp, ep=self.ep("ep"), attention_dp=s.attention_dp,
                               speculative=spec, **common)  # fmt: skip
        share = s.gpu_memory_utilization  # empty: the engine's own default for its engine size
        plan = (
            with_engine_memory_share(plan)
            if share is None
            else replace(plan, gpu_memory_utilization_frac=share)
        )
        arrival = (
            {"concurrency": s.concurrency}
            if s.arrival == "closed"
            else {"request_rate_per_s": s.request_rate_per_s}
        )
        workload = ServingWorkload(arrival=s.arrival, num_requests=s.num_requests, input_tokens=s.input_tokens,
                                   output_tokens=s.output_tokens, prefix_hit_rate=s.prefix_hit_rate,
                                   **arrival)  # fmt: skip
        targets = {"ttft_s": s.ttft_slo_ms, "tpot_s": s.tpot_slo_ms}
        given = {k: v / MS_PER_S for k, v in targets.items() if v is not None}
        slo = SLO(percentile=s.slo_percentile, **given) if given else None
        return model, cluster, plan, workload, slo

    def _offer_choices(self, model: Any, cluster: Any) -> None:
        """Offer the ep degrees each engine can take (``ep_choices``), the GEMM-input dtypes ``gemm_precision`` runs
        with the chosen weights and engine on the device, and the KV dtypes the engine stores there (``kv_dtypes``);
        a current value outside them stays offered so that the refusal names it. Raises ValueError naming a
        refused dtype (``kv_precision``'s error for the KV cache, ``gemm_precision``'s for the GEMM dtypes)."""
        s = self.state
        assert s is not None  # set by the constructor
        for name, (tp, adp) in EP_FIELDS.items():
            offered = ep_choices(model, getattr(s, tp) * getattr(s, adp))
            s.param[name].objects = sorted({*offered, getattr(s, name)})
        if s.weight_dtype not in DTYPES or s.activation_dtype not in DTYPES:
            return  # ServingPlan names it
        engine = self._cached("engine", s.engine, lambda: load_engine(s.engine))
        device, weight = cluster.device, s.weight_dtype
        s.param.activation_dtype.objects = [
            d
            for d in DTYPES
            if gemm_runs(engine, device, weight, d, moe=model.is_moe) or d == s.activation_dtype
        ]
        usable = [d.value for d in kv_dtypes(engine, cluster.device)]
        s.param.kv_cache_dtype.objects = [d for d in DTYPES if d in usable or d == s.kv_cache_dtype]
        if s.kv_cache_dtype in DTYPES:  # else ServingPlan names it
            kv_precision(engine, cluster.device, s.kv_cache_dtype)
        gemm_precision(engine, cluster.device, s.weight_dtype, s.activation_dtype, moe=model.is_moe)

    def ep(self, name: str) -> int | None:
        """The plan's value of the State's ``name`` (``ep``, ``prefill_ep`` or ``decode_ep``): None (unset) for 1
        or when the model takes none (``ep_reason``, set by ``specs``)."""
        value = int(getattr(self.state, name))
        return None if self.ep_reason or value == 1 else value

    def offload_group_size(self) -> int:
        """The State's offload group size the plan takes: 0 when empty or when the model takes none
        (``offload_reason``, set by ``specs``)."""
        return 0 if self.offload_reason else int(self.state.offload_group_size or 0)

    def refresh(self) -> None:
        """Recompute from the State (and follow its changes from now on); a refusal is kept in ``error``."""
        from workbench.presets.calibration import load_calibration

        self.active = True
        try:
            model, cluster, plan, workload, slo = self.specs()
            cal = self._cached("calibration", "default", lambda: load_calibration("default"))
            est = serve_estimate(model, cluster, plan, workload, cal)
            sweep = sweep_table(rate_sweep(model, cluster, plan, workload, cal), slo)
        except (ValueError, OSError) as exc:
            self.param.update(estimate=None, sweep=None, slo=None, error=str(exc))
            return
        self.param.update(estimate=est, sweep=sweep, slo=slo, error="")

    def cli_command(self) -> str:
        """The ``workbench serve estimate`` command line of the current choices (shown in the report)."""
        s = self.state
        args = ["workbench", "serve", "estimate", "--model", s.model_preset, "--cluster", s.cluster_preset,
                "--nodes", str(s.num_nodes)]  # fmt: skip
        if s.prefill_workers:
            args += ["--prefill-workers", str(s.prefill_workers), "--prefill-tp", str(s.prefill_tp),
                     "--decode-workers", str(s.decode_workers), "--decode-tp", str(s.decode_tp)]  # fmt: skip
            layout: tuple[str, ...] = (
                "prefill_ep",
                "prefill_attention_dp",
                "decode_ep",
                "decode_attention_dp",
            )
        else:
            args += ["--replicas", str(s.replicas), "--tp", str(s.tp), "--pp", str(s.pp)]
            layout = ("ep", "attention_dp")
        for name in layout:
            value = self.ep(name) if name.endswith("ep") else getattr(s, name)
            if value not in (None, 1):
                args += ["--" + name.replace("_", "-"), str(value)]
        for name, flag in (("weight_dtype", "--weight-dtype"), ("activation_dtype", "--activation-dtype"),
                           ("kv_cache_dtype", "--kv-dtype")):  # fmt: skip
            if getattr(s, name) != "bf16":
                args += [flag, getattr(s, name)]
        args += ["--scheduler", s.scheduler, "--input-tokens", str(s.input_tokens), "--output-tokens",
                 str(s.output_tokens), "--num-requests", str(s.num_requests)]  # fmt: skip
        if s.speculative != "none":
            args += ["--speculative", s.speculative, "--num-speculative-tokens", str(s.num_speculative_tokens),
                     "--acceptance-rate", f"{s.acceptance_rate:g}"]  # fmt: skip
        if s.prefix_hit_rate:
            args += ["--prefix-hit-rate", f"{s.prefix_hit_rate:g}"]
        if s.engine != DEFAULT_ENGINE:
            args += ["--engine", s.engine]
        if s.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}"]
        if self.offload_group_size():
            args += ["--offload-group-size", str(self.offload_group_size())]
        if s.arrival == "closed":
            args += ["--concurrency", str(s.concurrency)]
        else:
            args += ["--rate", f"{s.request_rate_per_s:g}"]
        return shlex.join(args)
