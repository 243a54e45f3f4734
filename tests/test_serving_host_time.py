"""Host work per request (``EngineProfile.host_per_request_s``): an overlap scheduler hides it behind the GPU up
to the GPU's step, and TensorRT-LLM 1.0's pipeline-parallel loop serialises it after every stage's forward
(``pp_host_serial``). Each iteration is checked against the closed form built from the same plan priced with
the host term off."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.engines import engine_from_dict, load_engine
from workbench.serving.cost import ReplicaCost
from workbench.specs.engine import EngineProfile
from workbench.specs.serving import ServingPlan

CAL = load_calibration("default")
MODEL = load_model("llama-3.1-8b")
CLUSTER = load_cluster("dgx-h100")
EMPTY = np.array([], dtype=int)


def _costs(engine: EngineProfile, plan: ServingPlan) -> tuple[ReplicaCost, ReplicaCost]:
    """(the plan priced with ``engine``, the same with the host term off)."""
    off = dataclasses.replace(engine, host_per_request_s=0.0)
    return (ReplicaCost(MODEL, CLUSTER, plan, CAL, engine=engine),
            ReplicaCost(MODEL, CLUSTER, plan, CAL, engine=off))  # fmt: skip


def test_trtllm_host_time_is_the_published_step_over_its_batch() -> None:
    trt = load_engine("trtllm")
    # TensorRT-LLM PR #10273: 45.11 ms host_step_time per iteration at max_batch_size 1536
    assert trt.host_per_request_s == pytest.approx(45.11e-3 / 1536, rel=2e-3)
    assert trt.pp_host_serial and trt.step_overhead_s == 0.0
    for name in ("host_per_request_s", "pp_host_serial"):
        assert name in trt.sources
    assert load_engine("vllm-v0").host_per_request_s == 0.0 and not load_engine("sglang").pp_host_serial


def test_overlapped_host_work_sets_a_floor_under_the_gpu_step() -> None:
    host = 100e-6  # 100 us a request: 256 decodes need 25.6 ms of host work
    engine = EngineProfile(id="x", name="x", step_overhead_s=0.0, host_per_request_s=host)
    with_host, without = _costs(engine, ServingPlan(tp=1, max_num_seqs=256))
    for n, ctx in ((1, 512), (8, 2048), (256, 1024)):
        dec = np.full(n, ctx)
        gpu = without.iteration_s(EMPTY, EMPTY, dec)
        assert with_host.iteration_s(EMPTY, EMPTY, dec) == pytest.approx(max(gpu, n * host))
    assert 256 * host > without.decode_s(256, 1024)  # the last case is host-bound, the first GPU-bound
    assert 1 * host < without.decode_s(1, 512)
    # a prefill chunk counts as one request, as a decode does
    mixed = (np.array([1000]), np.array([0]), np.full(255, 1024))
    assert with_host.iteration_s(*mixed) == pytest.approx(max(without.iteration_s(*mixed), 256 * host))


def test_serial_host_work_adds_once_per_pipeline_stage() -> None:
    host = 20e-6
    engine = EngineProfile(
        id="x", name="x", step_overhead_s=0.0, host_per_request_s=host, pp_host_serial=True
    )
    plan = ServingPlan(tp=1, pp=4, max_num_seqs=256)
    with_host, without = _costs(engine, plan)
    dec = np.full(128, 1500)
    gpu = without.iteration_s(EMPTY, EMPTY, dec)
    assert with_host.iteration_s(EMPTY, EMPTY, dec) == pytest.approx(gpu + 3 * 128 * host)  # all but the last
    # without pipeline parallelism the same engine overlaps it
    flat, flat_off = _costs(engine, ServingPlan(tp=1, max_num_seqs=256))
    assert flat.iteration_s(EMPTY, EMPTY, dec) == pytest.approx(
        max(flat_off.iteration_s(EMPTY, EMPTY, dec), 128 * host)
    )


def test_an_explicit_step_overhead_drops_the_request_host_time() -> None:
    engine = EngineProfile(id="x", name="x", step_overhead_s=0.0, host_per_request_s=1e-3)
    plan = ServingPlan(tp=1)
    bare = ReplicaCost(MODEL, CLUSTER, plan, CAL, engine=engine, step_overhead_s=0.0)
    _, without = _costs(engine, plan)
    assert bare.decode_s(64, 1024) == pytest.approx(without.decode_s(64, 1024))


def test_host_fields_are_checked() -> None:
    prof = engine_from_dict({"id": "x", "name": "x", "host_per_request_us": 12.5}, where="f.toml")
    assert prof.host_per_request_s == pytest.approx(12.5e-6)
    with pytest.raises(ValueError, match="host_per_request_s must be a finite number"):
        EngineProfile(id="x", name="x", host_per_request_s=-1.0)
    with pytest.raises(ValueError, match="pp_host_serial must be true or false"):
        EngineProfile(id="x", name="x", pp_host_serial=1)  # type: ignore[arg-type]
