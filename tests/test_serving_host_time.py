"""Host work per request (``EngineProfile.host_per_request_s``): an overlap scheduler hides it behind the GPU up
to the GPU's step, and TensorRT-LLM 1.0's pipeline-parallel loop serialises it after every stage's forward
(``pp_host_serial``); an API server in the engine's process adds its own per request to every iteration
(``frontend_host_per_request_s``). Each iteration is checked against the closed form built from the same plan priced with
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
from workbench.validate.serving import row_case
from workbench.validate.serving_csv import read_serving_rows

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


def test_an_in_process_api_server_adds_its_time_per_request() -> None:
    """``vllm-v0-inproc`` is ``vllm-v0`` with the OpenAI server in the engine's process: its per-request time is
    vLLM PR #6883's TPOT gap (70.74 ms in process vs 57.35 ms in its own, Llama-3-8B on one H100, 10 QPS of 550/150
    tokens) over the sequences decoding at once by Little's law (10/s x 149 tokens x 70.74 ms), and it adds that
    much per scheduled request to every iteration, decode-only or mixed, on top of the same iteration of
    ``vllm-v0``."""
    inproc, v0 = load_engine("vllm-v0-inproc"), load_engine("vllm-v0")
    published_s = (70.74e-3 - 57.35e-3) / (10 * 149 * 70.74e-3)
    assert inproc.frontend_host_per_request_s == pytest.approx(published_s, rel=2e-3)
    same = dataclasses.replace(inproc, id=v0.id, name=v0.name, versions=v0.versions, description=v0.description,
                               sources=v0.sources, frontend_host_per_request_s=0.0)  # fmt: skip
    assert same == v0 and v0.frontend_host_per_request_s == 0.0
    plan = ServingPlan(tp=1, max_num_seqs=256, max_num_batched_tokens=512, engine="vllm-v0")
    with_server = ReplicaCost(MODEL, CLUSTER, plan, CAL, engine=inproc)
    without = ReplicaCost(MODEL, CLUSTER, plan, CAL, engine=v0)
    decodes = np.full(24, 700)
    for new, ctx, requests in ((EMPTY, EMPTY, 24), (np.array([300]), np.array([0]), 25)):
        gap = with_server.iteration_s(new, ctx, decodes) - without.iteration_s(new, ctx, decodes)
        assert gap == pytest.approx(requests * inproc.frontend_host_per_request_s, rel=1e-9)
    draft_free = ReplicaCost(MODEL, CLUSTER, plan, CAL, engine=inproc, step_overhead_s=0.0)
    assert draft_free.iteration_s(EMPTY, EMPTY, decodes) == pytest.approx(
        ReplicaCost(MODEL, CLUSTER, plan, CAL, engine=v0, step_overhead_s=0.0).iteration_s(
            EMPTY, EMPTY, decodes
        )
    )


def test_apex_rows_run_the_api_server_in_the_engine_process() -> None:
    """The APEX launch scripts pass ``--disable-frontend-multiprocessing``: their vLLM 0.6.0 rows take
    ``vllm-v0-inproc`` and say why, under any source key (the row names the repository); a vLLM 0.6.0 row of another
    repository keeps ``vllm-v0``."""
    row = next(r for r in read_serving_rows() if r["id"] == "APEX-01")
    case = row_case(row)
    assert case.plan.engine == "vllm-v0-inproc"
    assert any("--disable-frontend-multiprocessing" in a for a in case.assumed)
    assert row_case({**row, "source_key": "APEX_RERUN"}).plan.engine == "vllm-v0-inproc"
    other = row_case(
        {**row, "source_key": "OTHER_V0", "source": "a V0 run", "locator": "someone/else@0 results.txt"}
    )
    assert other.plan.engine == "vllm-v0" and not any("inproc" in a for a in other.assumed)
