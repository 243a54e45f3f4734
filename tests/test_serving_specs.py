"""Serving specs: layout arithmetic, role plans, and every bad value refused with the class and field named."""

from __future__ import annotations

import pytest

from workbench.specs.serving import (
    SLO,
    Arrival,
    Disaggregation,
    Percentile,
    Scheduler,
    ServingDType,
    ServingPlan,
    ServingWorkload,
)


def test_defaults_are_vllm_defaults() -> None:
    plan = ServingPlan()
    assert plan.kv_block_tokens == 16  # vLLM --block-size default
    assert plan.gpu_memory_utilization_frac == 0.9  # vLLM --gpu-memory-utilization default
    assert plan.max_num_seqs == 256  # vLLM --max-num-seqs default
    assert plan.scheduler is Scheduler.SARATHI and plan.chunked_prefill
    assert not ServingPlan(scheduler="vllm").chunked_prefill


def test_device_count_rule_of_the_readme() -> None:
    # README: devices per engine = tp * pp * (attention_dp or 1); total = replicas * that.
    plan = ServingPlan(replicas=3, tp=2, pp=2, attention_dp=4, ep=8)
    assert plan.devices_per_engine == 16
    assert plan.num_devices == 48
    assert plan.expert_tp == 1  # tp * attention_dp / ep = 8 / 8
    assert ServingPlan(tp=8).expert_tp == 8  # ep unset: experts tensor-parallel over the engine


def test_disaggregated_device_count_and_role_plans() -> None:
    d = Disaggregation(prefill_workers=3, prefill_tp=8, decode_workers=1, decode_tp=1, decode_attention_dp=16,
                       decode_ep=16)  # fmt: skip
    plan = ServingPlan(disaggregation=d, weight_dtype="fp8")
    assert plan.num_devices == 3 * 8 + 1 * 16
    prefill = plan.role_plan("prefill")
    assert (prefill.replicas, prefill.tp, prefill.attention_dp, prefill.disaggregation) == (3, 8, 1, None)
    assert prefill.weight_dtype is ServingDType.FP8
    decode = plan.role_plan("decode")
    assert (decode.replicas, decode.tp, decode.attention_dp, decode.ep) == (1, 1, 16, 16)
    with pytest.raises(ValueError, match="no 'both' engines"):
        plan.role_plan("both")
    with pytest.raises(ValueError, match="needs a disaggregated plan"):
        ServingPlan().role_plan("decode")
    with pytest.raises(ValueError, match="role must be one of both, prefill, decode"):
        ServingPlan().role_plan("router")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tp": 0}, "tp"),
        ({"pp": -1}, "pp"),
        ({"replicas": 1.5}, "replicas"),
        ({"attention_dp": True}, "attention_dp"),
        ({"tp": 4, "ep": 3}, "ep=3 must divide tp \\* attention_dp = 4"),
        ({"ep": 0}, "ep"),
        ({"weight_dtype": "int8"}, "weight_dtype must be one of bf16, fp16, fp8, fp4, int4"),
        ({"kv_cache_dtype": "fp32"}, "kv_cache_dtype"),
        ({"kv_block_tokens": 0}, "kv_block_tokens"),
        ({"kv_block_tokens": 2**13}, "MAX_KV_BLOCK_TOKENS"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
        ({"scheduler": "fcfs"}, "scheduler must be one of vllm, sarathi"),
        ({"gpu_memory_utilization_frac": 1.5}, "gpu_memory_utilization_frac"),
        ({"gpu_memory_utilization_frac": 0.0}, "gpu_memory_utilization_frac"),
        ({"disaggregation": "yes"}, "disaggregation must be a Disaggregation"),
        ({"tp": 2, "disaggregation": Disaggregation(prefill_workers=1, decode_workers=1)}, "tp=2"),
        ({"replicas": 2**20, "tp": 2}, "devices in all"),
    ],
)
def test_bad_plan_values_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"ServingPlan.*{field}"):
        ServingPlan(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prefill_workers": 0, "decode_workers": 1}, "prefill_workers"),
        ({"prefill_workers": 1, "decode_workers": 1, "decode_tp": 0}, "decode_tp"),
        ({"prefill_workers": 1, "decode_workers": 1, "prefill_tp": 4, "prefill_ep": 3}, "prefill_ep=3"),
        ({"prefill_workers": 1, "decode_workers": 1, "decode_attention_dp": -2}, "decode_attention_dp"),
    ],
)
def test_bad_disaggregation_values_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"Disaggregation.*{field}"):
        Disaggregation(**kwargs)


def test_workloads_of_each_arrival_kind() -> None:
    offline = ServingWorkload(num_requests=3, input_tokens=128, output_tokens=(1, 2, 3))
    assert offline.arrival is Arrival.OFFLINE
    assert offline.input_lengths() == (128, 128, 128)
    assert offline.output_lengths() == (1, 2, 3)
    assert offline.arrival_times_s() == (0.0, 0.0, 0.0)
    closed = ServingWorkload(
        arrival="closed", concurrency=32, num_requests=64, input_tokens=1024, output_tokens=1024
    )
    assert closed.arrival_times_s() is None
    poisson = ServingWorkload(arrival="poisson", request_rate_per_s=0.5, num_requests=10, input_tokens=62,
                              output_tokens=162, seed=7)  # fmt: skip
    assert poisson.request_count == 10 and poisson.seed == 7
    trace = ServingWorkload(arrival="trace", trace=((0.0, 10, 5), (0.5, 20, 6), (0.5, 30, 7)))
    assert trace.request_count == 3
    assert trace.arrival_times_s() == (0.0, 0.5, 0.5)
    assert trace.input_lengths() == (10, 20, 30) and trace.output_lengths() == (5, 6, 7)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"arrival": "burst", "num_requests": 1, "input_tokens": 1, "output_tokens": 1}, "arrival must be one of"),
        ({"input_tokens": 1, "output_tokens": 1}, "num_requests is required"),
        ({"num_requests": 0, "input_tokens": 1, "output_tokens": 1}, "num_requests"),
        ({"num_requests": 2, "output_tokens": 1}, "input_tokens is required"),
        ({"num_requests": 2, "input_tokens": 0, "output_tokens": 1}, "input_tokens must be in 1"),
        ({"num_requests": 2, "input_tokens": (1, 2, 3), "output_tokens": 1}, "input_tokens has 3 entries"),
        ({"num_requests": 2, "input_tokens": 1, "output_tokens": (1, -1)}, "output_tokens must be a token count"),
        ({"arrival": "closed", "num_requests": 2, "input_tokens": 1, "output_tokens": 1}, "concurrency is required"),
        ({"arrival": "closed", "concurrency": 0, "num_requests": 2, "input_tokens": 1, "output_tokens": 1},
         "concurrency"),
        ({"arrival": "poisson", "num_requests": 2, "input_tokens": 1, "output_tokens": 1},
         "request_rate_per_s is required"),
        ({"arrival": "poisson", "request_rate_per_s": -1.0, "num_requests": 2, "input_tokens": 1,
          "output_tokens": 1}, "request_rate_per_s"),
        ({"num_requests": 2, "input_tokens": 1, "output_tokens": 1, "concurrency": 4}, "concurrency is only read"),
        ({"arrival": "trace"}, "trace must be a non-empty tuple"),
        ({"arrival": "trace", "trace": ((1.0, 1, 1), (0.5, 1, 1))}, "trace\\[1\\]"),
        ({"arrival": "trace", "trace": ((0.0, 0, 1),)}, "trace\\[0\\]"),
        ({"arrival": "trace", "trace": ((0.0, 1, 1),), "num_requests": 2}, "must equal the trace length"),
        ({"arrival": "trace", "trace": ((0.0, 1, 1),), "input_tokens": 4}, "input_tokens must be left unset"),
        ({"num_requests": 1, "input_tokens": 1, "output_tokens": 1, "seed": -1}, "seed"),
    ],
)  # fmt: skip
def test_bad_workload_values_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"ServingWorkload.*{field}"):
        ServingWorkload(**kwargs)


def test_slo() -> None:
    slo = SLO(ttft_s=2.0, tpot_s=0.1)
    assert slo.percentile is Percentile.P99 and slo.percentile.quantile == 0.99
    assert SLO(tpot_s=0.05, percentile="p90").percentile.quantile == 0.9
    with pytest.raises(ValueError, match="SLO: set ttft_s, tpot_s or both"):
        SLO()
    with pytest.raises(ValueError, match="SLO: ttft_s"):
        SLO(ttft_s=0.0)
    with pytest.raises(ValueError, match="SLO: tpot_s"):
        SLO(tpot_s=float("nan"))
    with pytest.raises(ValueError, match="SLO: percentile must be one of p50, p90, p99"):
        SLO(ttft_s=1.0, percentile="p95")
