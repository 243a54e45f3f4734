"""Every mode's result shares ``workbench.specs.estimate.Result`` (summary, notes, table): what the faces read.

Each record is built by its own mode on a small case; the test checks the protocol and that the summary and the
table carry the record's own figures (plain JSON; the table the record's documented one)."""

from __future__ import annotations

import json
from functools import cache

import polars as pl
import pytest

from workbench.estimate.analytic import estimate_plan
from workbench.estimate.mixed import STAGE_COLUMNS, MixedEstimate
from workbench.goodput.failures import load_failures
from workbench.goodput.model import estimate_goodput
from workbench.hetero.diloco import DiLoCoSettings, diloco_estimate
from workbench.hetero.swarm import STAGE_COLUMNS as SWARM_COLUMNS
from workbench.hetero.swarm import PeerGroup, SwarmSettings, swarm_estimate
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_device, load_model
from workbench.search.mixed.layouts import Layout
from workbench.search.mixed.pipeline import PipelinePricer
from workbench.serving.estimate import serve_estimate
from workbench.serving.results import REQUEST_COLUMNS
from workbench.specs.estimate import MEMORY_COLUMNS, Estimate, Result
from workbench.specs.hardware import NetworkLevel
from workbench.specs.plan import ParallelPlan, Workload
from workbench.specs.pools import MixedCluster
from workbench.specs.serving import ServingPlan, ServingWorkload

MODEL = "llama-3.1-8b"
WAN = NetworkLevel(name="wan", bytes_per_s=1.25e9, latency_s=0.05)


@cache
def training() -> Estimate:
    workload = Workload(seq_len=2048, global_batch_size=32)
    return estimate_plan(load_model(MODEL), load_cluster("dgx-h100", 1), workload, ParallelPlan(dp=4, tp=2))


@cache
def mixed() -> MixedEstimate:
    model, cal = load_model(MODEL), load_calibration("default")
    pools = MixedCluster(
        id="two", name="two", pools=(load_cluster("dgx-h100", 1), load_cluster("dgx-a100", 1))
    )
    layout = Layout(order=(0, 1), tps=(8, 8), stages=(1, 1), dp=1, micro_batch_size=1, zero_stage=0,
                    recompute="none", schedule="zb-h1")  # fmt: skip
    pricer = PipelinePricer(model, pools, Workload(seq_len=2048, global_batch_size=16), cal, 0.05)
    pricer.prepare([layout])
    split = pricer.split(layout)
    assert split is not None
    return pricer.estimate(split)


def results() -> dict[str, Result]:
    est = training()
    serving = serve_estimate(
        load_model(MODEL),
        load_cluster("dgx-h100", 1),
        ServingPlan(tp=1),
        ServingWorkload(arrival="closed", input_tokens=256, output_tokens=16, concurrency=4, num_requests=8),
        load_calibration("default"),
    )
    peers = (PeerGroup(device=load_device("a100-sxm4-80gb"), count=4, link=WAN),)
    swarm = swarm_estimate(
        load_model(MODEL), peers, Workload(seq_len=2048, global_batch_size=8), SwarmSettings(num_stages=4),
        fabric=load_cluster("dgx-a100").levels[-1],
    )  # fmt: skip
    diloco = diloco_estimate(
        num_parameters=8e9, inner_step_s=est.step_time_s, tokens_per_inner_step=65536.0, link=WAN,
        settings=DiLoCoSettings(inner_steps=100, num_workers=4),
    )  # fmt: skip
    goodput = estimate_goodput(est, load_failures("llama3"))
    return {"training": est, "serving": serving, "mixed": mixed(), "swarm": swarm, "diloco": diloco,
            "goodput": goodput}  # fmt: skip


@pytest.fixture(scope="module")
def every() -> dict[str, Result]:
    return results()


@pytest.mark.parametrize("mode", ["training", "serving", "mixed", "swarm", "diloco", "goodput"])
def test_every_result_shares_the_protocol(every: dict[str, Result], mode: str) -> None:
    result = every[mode]
    assert isinstance(result, Result)
    assert isinstance(result.notes, tuple) and all(isinstance(n, str) for n in result.notes)
    summary = result.summary()
    assert json.loads(json.dumps(summary)) == summary  # plain JSON, no NaN or objects
    assert isinstance(result.table(), pl.DataFrame) and result.table().height >= 1


def test_each_table_is_the_records_documented_one(every: dict[str, Result]) -> None:
    assert every["training"].table().columns == ["rank", *MEMORY_COLUMNS, "total_bytes"]
    assert tuple(every["serving"].table().columns) == REQUEST_COLUMNS
    assert every["serving"].table().height == 8
    assert tuple(every["mixed"].table().columns) == STAGE_COLUMNS
    assert tuple(every["swarm"].table().columns) == SWARM_COLUMNS
    assert every["goodput"].table().row(0, named=True) == every["goodput"].summary()


def test_diloco_table_and_summary_carry_its_figures(every: dict[str, Result]) -> None:
    est = every["diloco"]
    rows = est.table().to_dicts()
    h, s = 100, est.summary()
    # DiLoCo's step per inner step: (H inner steps + the exposed outer all-reduce) / H; synchronous DP: its step
    assert rows[0]["step_s"] == pytest.approx((h * s["inner_step_s"] + s["exposed_sync_s"]) / h, rel=1e-12)
    assert rows[1]["step_s"] == s["sync_dp_step_s"]
    assert [r["time_per_token_s"] * r["tokens_per_s"] for r in rows] == pytest.approx([1.0, 1.0])
    assert rows[1]["exposed_sync_s"] == pytest.approx(s["sync_dp_step_s"] - s["inner_step_s"], rel=1e-12)


def test_mixed_pipeline_is_assembled_like_every_plan() -> None:
    """The pool table's memory is the assembly's simulated peak per rank, within the pool's usable memory rule;
    the step is the pipeline's period plus the exposed reduction and the optimizer step."""
    est = mixed()
    parts = est.parts
    assert est.step_time_s == pytest.approx(parts["pipeline_s"] + parts["dp_comm_s"] + parts["optimizer_s"])
    table = est.table()
    assert est.fits == bool((table["memory_bytes"] <= table["usable_bytes"]).all())
    assert table["usable_bytes"].to_list() == pytest.approx([0.95 * 80 * 2**30] * 2, rel=1e-9)
    assert set(est.timeline["op"].unique().to_list()) >= {"F", "I", "W"}
