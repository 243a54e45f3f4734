"""Serving rows as the schema lets other sources write them (``shared/validation/README.md``): an engine outside
vllm/sglang/trtllm under "a short lowercase code explained in notes", a blank ``workload_kind`` and a blank
``num_devices_total`` are priced, each reading listed in ``assumed``, instead of failing the file or skipping the
row. Each reading is checked against what the README's rules give by hand: the engine the notes name, the kind
the filled columns leave, replicas x tp x pp x attention_dp devices; and a row read so is priced exactly as the
same row written out in full."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from workbench_cli import cli

from tests.conftest import serving_row as by_id
from tests.conftest import write_serving_csv as write
from workbench.presets.calibration import load_calibration
from workbench.serving.engine_defaults import GENERIC_ENGINE, priced_engine
from workbench.validate.serving import case_predictions, row_case

CAL = load_calibration("default")


@pytest.mark.parametrize(
    ("engine", "notes", "priced"),
    [
        ("vllm", "", "vllm"),
        ("tensorrt-llm", "", "trtllm"),
        ("dynamo", "dynamo = NVIDIA Dynamo serving with the SGLang backend", "sglang"),
        ("nim", "nim = NVIDIA NIM container running TensorRT-LLM engines", "trtllm"),
        ("lmdeploy", "lmdeploy = LMDeploy's TurboMind engine", GENERIC_ENGINE),
        ("tgi", "tgi = text-generation-inference, compared with vLLM and SGLang", GENERIC_ENGINE),
        ("", "", GENERIC_ENGINE),
    ],
)
def test_the_engine_a_row_is_priced_as(engine, notes, priced):
    assumed: list[str] = []
    assert priced_engine({"engine": engine, "notes": notes}, assumed) == priced
    assert bool(assumed) == (engine != "vllm")  # every reading but a known code is listed


def test_another_engines_code_is_priced_not_refused(tmp_path):
    row = {**by_id("TRT-01"), "id": "OTHER-01", "source_key": "OTHER", "engine": "lmdeploy",
           "notes": "lmdeploy = LMDeploy's TurboMind engine, offline throughput"}  # fmt: skip
    path = write(tmp_path / "other.csv", [by_id("TRT-01"), row])
    result = CliRunner().invoke(cli, ["validate", "--data", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert not out["skipped"]
    assert {r["engine"] for r in out["rows"] if r["id"] == "OTHER-01"} == {GENERIC_ENGINE}
    case = row_case(row)
    assert case.plan.engine == GENERIC_ENGINE
    assert any("generic engine profile" in a for a in case.assumed)


def test_a_serving_layer_over_a_known_engine_is_priced_as_that_engine():
    base = by_id("MLP-01")  # an MLPerf v4.0 row: NVIDIA's harness profile is chosen by its repository
    renamed = {**base, "engine": "tensorrt-llm"}
    assert row_case(renamed).plan.engine == row_case(base).plan.engine == "trtllm-mlperf-v4"
    assert case_predictions(row_case(renamed), CAL) == case_predictions(row_case(base), CAL)


@pytest.mark.parametrize(
    ("row_id", "blanked", "kind"),
    [
        ("TRT-01", {}, "offline"),  # no concurrency, no rate
        (
            "LSS-04",
            {},
            "open_loop_poisson",
        ),  # a rate, no concurrency (a trace row: the README simulates it so)
        ("APEX-01", {}, "open_loop_poisson"),
    ],
)
def test_a_blank_workload_kind_is_the_kind_the_filled_columns_leave(row_id, blanked, kind):
    base = by_id(row_id)
    row = {**base, **blanked, "workload_kind": ""}
    case = row_case(row)
    assert f"workload_kind={kind} (blank)" in " ".join(case.assumed)
    expected = row_case({**base, **blanked, "workload_kind": kind})
    assert case_predictions(case, CAL) == case_predictions(expected, CAL)


def test_a_blank_workload_kind_with_concurrency_is_a_closed_loop():
    base = by_id("TRT-01")
    row = {**base, "workload_kind": "", "concurrency": "64", "num_requests": "512"}
    case = row_case(row)
    assert case.workload is not None and case.workload.concurrency == 64
    assert "workload_kind=closed_loop (blank)" in " ".join(case.assumed)


def test_a_blank_device_count_is_replicas_by_tp_by_pp_by_attention_dp():
    base = by_id("MLP-03")  # 8 replicas of tp 1 on 8 H200
    case = row_case({**base, "num_devices_total": ""})
    assert "devices=8 = replicas x tp x pp x attention_dp" in " ".join(case.assumed)
    assert case_predictions(case, CAL) == case_predictions(row_case(base), CAL)
    both_blank = {**base, "num_devices_total": "", "replicas": ""}
    with pytest.raises(Exception, match="num_devices_total is blank"):
        row_case(both_blank)
