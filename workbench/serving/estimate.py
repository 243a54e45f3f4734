"""A serving plan's numbers: the per-iteration cost (:mod:`workbench.serving.cost`) driven by the request
simulator (:mod:`workbench.serving.simulate`), summarised as TTFT, TPOT, throughput and KV capacity.

``serve_estimate`` is what ``workbench serve estimate`` and the serving validation call: it turns a
``ServingWorkload`` into ``Requests``, builds one ``ReplicaCost`` per role (one for aggregated engines, a prefill
and a decode one for a disaggregated plan), runs ``simulate`` with the plan's engine profile's chunking and KV
admission rules (``ServingPlan.engine``) and keeps its tables. Speculative decoding
(``ServingPlan.speculative``) runs each request's decode as its verification steps (``speculative_steps``), and the
tables are read back with the requests' own output lengths; a prefix hit rate (``ServingWorkload.prefix_hit_rate``)
goes to the simulator; closed-loop clients start over one request's estimated duration (``closed_loop_ramp_s``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from workbench.cost.tp_allreduce import priced_table
from workbench.serving.cost import ReplicaCost, kv_bytes_per_token
from workbench.serving.offload import host_offload_bytes_per_device
from workbench.serving.results import with_requests
from workbench.serving.simulate import DisaggregatedPools, Requests, RequestSimResult, simulate
from workbench.serving.speculative import speculative_steps
from workbench.serving.steady import closed_loop_ramp_s
from workbench.specs.serving import Arrival, ServingPlan, ServingWorkload

if TYPE_CHECKING:
    from workbench.presets.calibration import Calibration
    from workbench.specs.hardware import ClusterSpec
    from workbench.specs.model import ModelSpec


@dataclass(frozen=True, kw_only=True)
class ServingEstimate:
    """What one serving plan does with one workload: the simulation's tables and its summary."""

    model: ModelSpec
    cluster: ClusterSpec
    plan: ServingPlan
    workload: ServingWorkload
    sim: RequestSimResult
    """Per-request and per-iteration tables (``workbench.serving.simulate.RequestSimResult``)."""
    kv_cache_capacity_tokens: int
    """KV cache tokens one (decode, for a disaggregated plan) engine holds."""
    kv_transfer_bytes_per_request: float = 0.0
    """Disaggregated plans: the KV bytes one request of the mean prompt sends from its prefill engine to its decode
    engine (every layer, every KV head: ``kv_bytes_per_token``); 0.0 when aggregated."""
    kv_transfer_s: float = 0.0
    """Disaggregated plans: the exposed seconds of that transfer (``ReplicaCost.kv_transfer_s``); 0.0 when
    aggregated."""
    kv_bytes_per_token_per_device: dict[str, float]
    """By engine role (``both`` for an aggregated plan, else ``prefill`` and ``decode``): the KV bytes one cached
    token takes on the fullest device of an attention-DP rank (``ReplicaCost.kv_bytes_per_token_per_device``)."""
    host_offload_bytes_per_device: float = 0.0
    """Expert-weight bytes one device of the (decode) engine keeps in host memory (``ServingPlan.
    offload_group_size``, :func:`workbench.serving.offload.host_offload_bytes_per_device`); 0.0 when off."""
    offload_copy_s: float = 0.0
    """Seconds of copying one forward of the (decode) engine needs for its host-held experts, all offloaded layers
    (``HostOffload.copy_per_forward_s``: the wait if no layer hid it); 0.0 when off."""
    offload_wait_s: float = 0.0
    """Seconds a decode-only iteration at ``offload_decode_batch`` waits for those copies
    (``ReplicaCost.offload_wait_s``); 0.0 when off."""
    offload_decode_batch: int = 0
    """The decode batch ``offload_wait_s`` is priced at: the run's mean decode sequences per decode-only iteration
    of a (decode) engine, at their mean cached tokens; 0 when off or when the run has no decode iteration."""
    tp_all_reduce: str = "nccl"
    """The kernel family of the (decode) engine's tensor-parallel all-reduces (``EngineProfile.tp_all_reduce``)."""
    tp_all_reduce_table: bool = False
    """Whether a published latency table prices those all-reduces (:func:`workbench.cost.tp_allreduce.priced_table`);
    False: NCCL's model does (or tp is 1)."""
    gemm_precision: str = "as-is"
    """How the (decode) engine's main GEMMs run: ``as-is`` or ``weight-only`` (fp8 weights on a device without an
    fp8 peak, :func:`workbench.serving.precision.gemm_precision`)."""
    notes: tuple[str, ...] = ()
    """Assumptions and warnings a user should read (``workbench.specs.estimate.Result``): each engine role's
    weight-only reading and KV-cache kernel path, if any. ``summary()`` lists them under ``assumed``."""

    def table(self) -> pl.DataFrame:
        """The requests, one row each (``workbench.serving.results.REQUEST_COLUMNS``)."""
        return self.sim.requests

    def summary(self) -> dict[str, Any]:
        """Flat numbers in SI units: ``ttft_s``/``tpot_s`` (means) and their p50/p90/p99, e2e latency,
        ``output_tokens_per_s`` (whole deployment), per device, requests/s, preemptions, KV capacity."""
        stats = self.sim.summary()
        return {
            "model": self.model.name,
            "cluster": self.cluster.id,
            "num_devices": self.plan.num_devices,
            "plan": self.plan.describe(),
            "ttft_s": stats["ttft_s_mean"],
            "tpot_s": stats["tpot_s_mean"],
            **stats,
            "output_tokens_per_s_per_device": self.sim.output_tokens_per_s / self.plan.num_devices,
            "kv_cache_capacity_tokens": self.kv_cache_capacity_tokens,
            "disaggregated": self.plan.disaggregation is not None,
            "kv_transfer_bytes_per_request": self.kv_transfer_bytes_per_request,
            "kv_transfer_s": self.kv_transfer_s,
            "speculative": None if self.plan.speculative is None else self.plan.speculative.describe(),
            "accepted_length": None
            if self.plan.speculative is None
            else self.plan.speculative.mean_accepted_length,
            "prefix_hit_rate": self.workload.prefix_hit_rate,
            "host_offload_bytes_per_device": self.host_offload_bytes_per_device,
            "offload_copy_s": self.offload_copy_s,
            "offload_wait_s": self.offload_wait_s,
            "offload_decode_batch": self.offload_decode_batch,
            "tp_all_reduce": self.tp_all_reduce,
            "tp_all_reduce_table": self.tp_all_reduce_table,
            "gemm_precision": self.gemm_precision,
            "assumed": list(self.notes),
        }


def requests_of(workload: ServingWorkload, ramp_s: float = 0.0) -> Requests:
    """The simulator's requests for ``workload``: offline (all at 0), closed loop (its clients starting over
    ``ramp_s``, ``Requests.closed_loop``), Poisson or the trace."""
    n = workload.request_count
    lengths = {
        "input_tokens": list(workload.input_lengths()),
        "output_tokens": list(workload.output_lengths()),
    }
    if workload.arrival is Arrival.OFFLINE:
        return Requests.offline(n, **lengths)
    if workload.arrival is Arrival.CLOSED:
        return Requests.closed_loop(int(workload.concurrency or 1), n, ramp_s=ramp_s, **lengths)
    if workload.arrival is Arrival.POISSON:
        rate = float(workload.request_rate_per_s or 0.0)
        return Requests.poisson(rate, n, seed=workload.seed, **lengths)
    return Requests(
        arrival_s=np.asarray(workload.arrival_times_s() or ()),
        input_tokens=np.asarray(lengths["input_tokens"]),
        output_tokens=np.asarray(lengths["output_tokens"]),
    )


def serve_estimate(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: ServingPlan,
    workload: ServingWorkload,
    calibration: Calibration,
) -> ServingEstimate:
    """Simulate ``workload`` on ``plan``. Raises ValueError when the plan needs more devices than the cluster
    has, when the weights leave no KV cache, or for a request that can never fit (from the cost and the
    simulator)."""
    if plan.num_devices > cluster.num_devices:
        raise ValueError(
            f"serving plan {plan.describe()} needs {plan.num_devices} devices; the cluster has {cluster.num_devices}"
        )
    run = _aggregated if plan.disaggregation is None else _disaggregated
    requests, sim, fields, cost = run(model, cluster, plan, workload, calibration)
    if plan.speculative is not None:
        sim = with_requests(sim, requests)
    first = plan.disaggregation.prefill_workers if plan.disaggregation is not None else 0
    fields.update(_engine_fields(model, cluster, cost, sim.iterations, first))
    return ServingEstimate(model=model, cluster=cluster, plan=plan, workload=workload, sim=sim, **fields)


def _engine_fields(
    model: ModelSpec, cluster: ClusterSpec, cost: ReplicaCost, iterations: pl.DataFrame, first_engine: int
) -> dict[str, Any]:
    """The ``ServingEstimate`` fields of the (decode) engine ``cost``: its host-held experts (bytes per device, the
    copy per forward, the wait of a decode-only iteration at the mean batch and cached tokens of the (decode)
    engines' ``iterations``, those from ``first_engine`` on) and its tp all-reduce kernel family."""
    rp = cost.plan
    fields: dict[str, Any] = {
        "gemm_precision": cost.precision.reading,
        "tp_all_reduce": cost.engine.tp_all_reduce,
        "tp_all_reduce_table": priced_table(cluster, rp.tp, cost.engine.tp_all_reduce) is not None,
    }
    offload = cost.offload
    if offload is None:
        return fields
    fields["host_offload_bytes_per_device"] = host_offload_bytes_per_device(model, rp)
    fields["offload_copy_s"] = offload.copy_per_forward_s
    decode = iterations.filter(
        (pl.col("engine") >= first_engine)
        & (pl.col("num_prefill_tokens") == 0)
        & (pl.col("num_decode_seqs") > 0)
    )
    if decode.height:
        seqs = float(decode["num_decode_seqs"].sum())
        batch = max(1, round(seqs / decode.height))
        context = max(1, round(float(decode["kv_used_tokens"].sum()) / seqs))
        fields["offload_decode_batch"] = batch
        fields["offload_wait_s"] = cost.offload_wait_s(batch, context)
    return fields


def _precision_notes(*costs: ReplicaCost) -> tuple[str, ...]:
    """The weight-only readings of ``costs``' GEMMs (``GemmPrecision.note``) and the kernel paths of their KV
    caches (``KvPrecision.note``), each once, in order."""
    notes = [n for c in costs for n in (c.precision.note, c.kv_precision.note) if n]
    return tuple(dict.fromkeys(notes))


def _batching(plan: ServingPlan, workload: ServingWorkload) -> dict[str, Any]:
    """The simulator's scheduling options every plan shares."""
    return {
        "policy": plan.scheduler.value,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": max(plan.max_num_batched_tokens, plan.max_num_seqs),
        "prefix_hit_rate": workload.prefix_hit_rate,
    }


def _aggregated(
    model: ModelSpec, cluster: ClusterSpec, plan: ServingPlan, workload: ServingWorkload, cal: Calibration
) -> tuple[Requests, RequestSimResult, dict[str, Any], ReplicaCost]:
    """``plan.replicas`` engines that prefill and decode, requests routed to the least loaded."""
    cost = ReplicaCost.of(model, cluster, plan, cal)
    requests = requests_of(workload, closed_loop_ramp_s(workload, cost, cost, plan))
    mean_tokens = float(np.mean(requests.input_tokens)) + float(np.mean(requests.output_tokens)) / 2
    sim = simulate(
        speculative_steps(requests, plan),
        cost,
        replicas=plan.replicas,
        router="least_loaded",
        chunked_prefill=cost.engine.chunked_prefill,
        kv_admission=cost.engine.kv_admission,
        emit_delay_s=cost.emit_delay_s,
        eager_emit_delay_s=cost.eager_emit_delay_s,
        pipeline_depth=cost.pipeline_depth(
            min(plan.max_num_seqs, plan.max_num_batched_tokens), round(mean_tokens)
        ),
        max_chunk_tokens=min(cost.max_chunk_tokens, max(plan.max_num_batched_tokens, plan.max_num_seqs)),
        **_batching(plan, workload),
    )
    per_token = {"both": cost.kv_bytes_per_token_per_device()}
    return (
        requests,
        sim,
        {
            "kv_cache_capacity_tokens": int(cost.kv_capacity_tokens),
            "kv_bytes_per_token_per_device": per_token,
            "notes": _precision_notes(cost),
        },
        cost,
    )


def _disaggregated(
    model: ModelSpec, cluster: ClusterSpec, plan: ServingPlan, workload: ServingWorkload, cal: Calibration
) -> tuple[Requests, RequestSimResult, dict[str, Any], ReplicaCost]:
    """Prefill and decode pools joined by a KV transfer (``plan.disaggregation``)."""
    d = plan.disaggregation
    assert d is not None
    prefill = ReplicaCost.of(model, cluster, plan, cal, role="prefill")
    decode = ReplicaCost.of(model, cluster, plan, cal, role="decode")
    pools = DisaggregatedPools(
        num_prefill_engines=d.prefill_workers,
        num_decode_engines=d.decode_workers,
        prefill_cost=prefill,
        decode_cost=decode,
    )
    requests = requests_of(workload, closed_loop_ramp_s(workload, prefill, decode, plan))
    sim = simulate(
        speculative_steps(requests, plan),
        decode,
        disaggregation=pools,
        chunked_prefill=decode.engine.chunked_prefill,
        kv_admission=decode.engine.kv_admission,
        emit_delay_s=decode.emit_delay_s,
        eager_emit_delay_s=prefill.eager_emit_delay_s,
        max_chunk_tokens=min(prefill.max_chunk_tokens, max(plan.max_num_batched_tokens, plan.max_num_seqs)),
        **_batching(plan, workload),
    )
    mean_prompt = max(1, round(float(requests.input_tokens.mean())))
    return (
        requests,
        sim,
        {
            "kv_cache_capacity_tokens": int(decode.kv_capacity_tokens),
            "kv_bytes_per_token_per_device": {
                "prefill": prefill.kv_bytes_per_token_per_device(),
                "decode": decode.kv_bytes_per_token_per_device(),
            },
            "kv_transfer_bytes_per_request": mean_prompt
            * kv_bytes_per_token(model, prefill.plan.kv_cache_dtype),
            "kv_transfer_s": prefill.kv_transfer_s(mean_prompt),
            "notes": _precision_notes(prefill, decode),
        },
        decode,
    )
