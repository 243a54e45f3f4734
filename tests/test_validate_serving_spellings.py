"""Serving validation rows as other sources write them (issue 49, "every published shape read"): each spelling of a
code is read to the code the schema's README defines for it (shared/validation/README.md, "Serving validation
set" and "Serving enumerated values"), every reading is noted in the row's ``assumed``, a cell no spelling reads
fails the file naming the row, the column and the codes, and a file of such variants of the public rows prices
each variant exactly as its public row."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_rows_csv as write
from workbench.presets.calibration import load_calibration
from workbench.validate.rows import Unexpressible
from workbench.validate.serving import case_predictions, row_case, validate_serving
from workbench.validate.serving_codes import read_cluster, read_name, read_serving_codes, read_serving_dtype
from workbench.validate.serving_csv import DEFAULT_SERVING_DATA, read_serving_rows

DTYPES = [
    ("weight_dtype", "bfloat16", "bf16"),
    ("weight_dtype", "torch.bfloat16", "bf16"),
    ("weight_dtype", "BF16", "bf16"),
    ("weight_dtype", "half", "fp16"),
    ("weight_dtype", "float16", "fp16"),
    ("weight_dtype", "FP8 (E4M3)", "fp8"),
    ("weight_dtype", "float8_e4m3fn", "fp8"),
    ("weight_dtype", "NVFP4", "fp4"),
    ("weight_dtype", "FP4 (E2M1)", "fp4"),
    ("weight_dtype", "AWQ", "int4"),
    ("weight_dtype", "W4A16", "int4"),
    ("activation_dtype", "FP8", "fp8"),
    ("kv_cache_dtype", "fp8_e4m3", "fp8"),
    ("kv_cache_dtype", "fp8_e5m2", "fp8"),
    ("kv_cache_dtype", "auto", ""),  # the engine's default: read as a blank cell
    ("kv_cache_dtype", "Auto", ""),
]


NAMES = [
    ("workload_kind", "Offline", "offline"),
    ("workload_kind", "closed-loop", "closed_loop"),
    ("workload_kind", "Closed loop", "closed_loop"),
    ("workload_kind", "Poisson", "open_loop_poisson"),
    ("workload_kind", "open-loop", "open_loop_poisson"),
    ("workload_kind", "Server", "open_loop_poisson"),  # MLPerf's Server scenario: LoadGen's Poisson arrivals
    ("workload_kind", "trace replay", "trace"),
    ("workload_kind", "fixed batch", "fixed_batch"),
    ("phase", "end-to-end", "e2e"),
    ("phase", "Prefill only", "prefill"),
    ("phase", "decode-only", "decode"),
    ("phase", "generation", "decode"),
    ("phase", "prefill+decode", "prefill_and_decode"),
    ("measured_scope", "deployment", "system"),
    ("measured_scope", "per replica", "one_replica"),
    ("spec_method", "NextN", "mtp"),  # SGLang's name for DeepSeek-V3's MTP module
    ("spec_method", "EAGLE-3", "eagle3"),
    ("spec_method", "Eagle", "eagle"),
    ("spec_method", "draft model", "draft"),
    ("spec_method", "prompt lookup", "ngram"),
    ("spec_method", "none", ""),
]


def _read(column: str, written: str) -> str:
    return read_serving_dtype(column, written) if column.endswith("_dtype") else read_name(column, written)


@pytest.mark.parametrize(("column", "written", "code"), DTYPES + NAMES)
def test_each_spelling_reads_to_its_code(column: str, written: str, code: str) -> None:
    assert _read(column, written) == code


REFUSED = [("weight_dtype", "fp32"), ("kv_cache_dtype", "int8"), ("weight_dtype", "auto"),
           ("workload_kind", "burst"), ("phase", "warmup"), ("spec_method", "medusa")]  # fmt: skip


@pytest.mark.parametrize(("column", "written"), REFUSED)
def test_a_cell_no_spelling_reads_is_refused_naming_column_value_and_codes(column: str, written: str) -> None:
    with pytest.raises(Unexpressible) as err:
        _read(column, written)
    assert column in str(err.value) and repr(written) in str(err.value) and "allowed:" in str(err.value)


def test_a_cluster_written_as_its_name_is_its_one_preset() -> None:
    assert read_cluster("DGX H100") == "dgx-h100"
    assert read_cluster("GB200 NVL72") == "gb200-nvl72"
    assert read_cluster("other-h100-roce") == "other-h100-roce"  # the schema's other-* ids stay as written
    assert read_cluster("some pod") == "some pod"  # row_cluster then refuses it with its reason


def _public() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in read_serving_rows(DEFAULT_SERVING_DATA)}


def test_every_reading_is_noted_and_mqa_gets_one_key_value_head() -> None:
    row = {**_public()["APEX-01"], "weight_dtype": "bfloat16", "kv_cache_dtype": "auto", "ignore_eos": "no",
           "attention": "multi-query", "num_key_value_heads": ""}  # fmt: skip
    read, notes = read_serving_codes(row)
    assert (read["weight_dtype"], read["kv_cache_dtype"], read["ignore_eos"]) == ("bf16", "", "false")
    assert (read["attention"], read["num_key_value_heads"]) == ("gqa", "1")
    assert "weight_dtype:'bfloat16' read as bf16" in notes
    assert "kv_cache_dtype:'auto' read as blank" in notes
    assert "ignore_eos:'no' read as false" in notes
    assert any(n.startswith("num_key_value_heads:1") for n in notes)
    case = row_case(row)
    assert "weight_dtype:'bfloat16' read as bf16" in case.assumed


def test_a_code_no_spelling_reads_fails_the_file_naming_row_and_column(tmp_path: Path) -> None:
    row = {**_public()["APEX-01"], "kv_cache_dtype": "int8"}
    with pytest.raises(ValueError) as err:
        read_serving_rows(write(tmp_path / "bad.csv", [row]))
    text = str(err.value)
    assert "bad.csv" in text and "APEX-01" in text and "column kv_cache_dtype" in text and "'int8'" in text


VARIANTS = [
    ("APEX-01", {"weight_dtype": "bfloat16", "activation_dtype": "BF16", "kv_cache_dtype": "auto",
                 "device": "NVIDIA H100 80GB HBM3", "engine": "vLLM", "workload_kind": "Trace",
                 "disaggregated": "no", "ignore_eos": "False", "measured_scope": "deployment",
                 "attention": "grouped-query", "gated_mlp": "yes"}),
    ("TRT-04", {"engine": "TensorRT-LLM", "weight_dtype": "FP8 (E4M3)", "device": "H100 SXM5 80GB",
                "workload_kind": "Offline", "ignore_eos": "1"}),
    ("SGLM-02", {"spec_method": "NextN", "phase": "decode-only", "workload_kind": "closed loop",
                 "weight_dtype": "float8_e4m3fn", "device": "NVIDIA H200", "disaggregated": "yes"}),
    ("TRTB-01", {"weight_dtype": "NVFP4", "activation_dtype": "nvfp4", "device": "B200"}),
    ("SGLB-04", {"phase": "Decode", "device": "H100", "attention": "MLA"}),
]  # fmt: skip


def test_a_file_of_variants_prices_each_variant_exactly_as_its_public_row(tmp_path: Path) -> None:
    public = _public()
    rows = [{**public[rid], **cells, "id": f"{rid}-v"} for rid, cells in VARIANTS]
    result = validate_serving(write(tmp_path / "variants.csv", rows))
    assert result["skipped"] == []
    cal = load_calibration("default")
    for rid, _ in VARIANTS:
        want = case_predictions(row_case(public[rid]), cal)
        got = {r["metric"]: r["predicted"] for r in result["rows"] if r["id"] == f"{rid}-v"}
        assert got, rid
        assert got == {k: want[k] for k in got}, rid


@pytest.mark.parametrize(
    ("source", "month"),
    [
        ("APEX+ (Microsoft; arXiv 2411.17651): real vLLM serving runs", (2024, 11)),
        ("LMSYS blog 2025-07-17 (Eigen AI Team)", (2025, 7)),
        ("a 2024 paper [read from a copy of 2026-01-01]", (2024, 12)),  # the locator's date is a later copy's
        ("no date at all", None),
    ],
)
def test_a_source_dates_itself_by_its_iso_date_arxiv_id_or_year(source: str, month: tuple | None) -> None:
    from workbench.validate.serving_specs import source_month

    assert source_month(source) == month


def test_a_vllm_row_without_a_version_before_v1_became_the_default_runs_v0() -> None:
    """vLLM 0.8.0 (2025-03) made V1 the default: APEX-01 (arXiv 2411, the scripts' 0.6.0) without its version is
    priced on the V0 profile exactly as with it; the same row dated 2025-07 takes the V1 profile."""
    public = _public()["APEX-01"]
    blank = {**public, "engine_version": ""}
    case = row_case(blank)
    assert case.plan.engine == row_case(public).plan.engine and case.plan.engine.startswith("vllm-v0")
    assert any("before vLLM 0.8.0 made V1 the default" in a for a in case.assumed)
    later = row_case({**blank, "source": "a vLLM benchmark blog 2025-07-01"})
    assert not later.plan.engine.startswith("vllm-v0")
