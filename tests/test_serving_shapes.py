"""Every published serving shape read by ``workbench validate`` (issue 49): the five columns added on 2026-12-07
(blank in an older file), bad values that fail the read with file, row and column, phase-only rows priced per
device (closed forms on the cost), P/D role rows, steady-state closed loops and speculative rows."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from workbench_cli import cli

from tests.conftest import serving_row as by_id
from tests.conftest import write_serving_csv as write
from workbench.presets.calibration import load_calibration
from workbench.serving.cost import ReplicaCost
from workbench.serving.phases import decode_tokens_per_s_per_device, prefill_tokens_per_s_per_device
from workbench.validate.serving import ServingCase, case_predictions, row_case
from workbench.validate.serving_csv import (
    DEFAULT_SERVING_DATA,
    LATER_COLUMNS,
    SERVING_COLUMNS,
    read_serving_rows,
)

CAL = load_calibration("default")


def test_a_file_without_the_new_columns_reads_them_blank(tmp_path):
    old = SERVING_COLUMNS[: -len(LATER_COLUMNS)]
    rows = read_serving_rows(write(tmp_path / "old.csv", [by_id("APEX-01"), by_id("SGLM-02")], old))
    assert all(r[c] == "" for r in rows for c in LATER_COLUMNS)
    new = read_serving_rows()
    assert by_id("SGLM-02")["spec_accept_len"] == "2.18" and len(new) == 46


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("tp", "0", "column tp: 0 must be a whole number >= 1"),
        ("engine", "vLLM 0.6", "column engine: 'vllm 0.6' is not an engine code"),
        ("gpu_memory_utilization_frac", "1.2", "column gpu_memory_utilization_frac: 1.2 must be in (0, 1]"),
        ("prefix_hit_rate", "1.5", "column prefix_hit_rate: 1.5 must be in [0, 1]"),
        ("spec_method", "medusa", "column spec_method"),
        ("spec_accept_len", "0.5", "column spec_accept_len"),
    ],
)
def test_bad_values_fail_the_read_naming_file_row_and_column(tmp_path, column, value, message):
    path = write(tmp_path / "bad.csv", [by_id("APEX-01"), {**by_id("APEX-02"), column: value}])
    with pytest.raises(ValueError, match="bad.csv: line 3 \\(row 'APEX-02'\\)") as info:
        read_serving_rows(path)
    assert message in str(info.value)
    result = CliRunner().invoke(cli, ["validate", "--data", str(path)])
    assert result.exit_code != 0 and message in result.output


def case_of(row: dict[str, str]) -> ServingCase:
    case = row_case(row)
    assert isinstance(case, ServingCase), case
    return case


def test_a_prefill_phase_row_is_tokens_over_one_batch_per_device():
    case = case_of(by_id("SGLB-03"))  # 16,384 tokens per device at 4,096-token prompts: 4 prompts per rank
    (phase,) = case.phases
    assert (phase.phase, phase.prompt_tokens, phase.batch_tokens_per_rank) == ("prefill", 4096, 16384)
    cost = ReplicaCost.of(case.model, case.cluster, case.plan, CAL)
    n = 4 * 32  # 32 attention-DP ranks of tp 1
    seconds = cost.iteration_s(np.full(n, 4096), np.zeros(n, dtype=int), np.zeros(0, dtype=int))
    assert prefill_tokens_per_s_per_device(cost, 4096, 16384) == pytest.approx(n * 4096 / seconds / 32)
    assert case_predictions(case, CAL)["input_tokens_per_s_per_device"] == pytest.approx(
        n * 4096 / seconds / 32
    )


def test_a_decode_phase_row_with_redundant_experts_and_its_batch_per_rank():
    case = case_of(by_id("SGLB-04"))  # EP72 over 256 + 32 experts, 256 sequences per rank at KV 2,000
    assert case.plan.num_redundant_experts == 32 and case.plan.ep == 72
    (phase,) = case.phases
    assert (phase.num_seqs, phase.context_tokens) == (256 * 72, 2000)
    cost = ReplicaCost.of(case.model, case.cluster, case.plan, CAL)
    expected = 256 * 72 / cost.decode_s(256 * 72, 2000) / 72
    assert decode_tokens_per_s_per_device(cost, 256 * 72, 2000) == pytest.approx(expected)


def test_a_pd_decode_role_row_with_mtp_is_its_decode_engine():
    base, mtp = case_of(by_id("SGLM-01")), case_of(by_id("SGLM-02"))
    assert mtp.plan.num_devices == 16 and mtp.plan.attention_dp == 16 and mtp.plan.ep == 16
    assert mtp.plan.speculative is not None and mtp.plan.speculative.mean_accepted_length == 2.18
    (phase,) = mtp.phases
    assert phase.num_seqs == 32 and phase.context_tokens == 65536 + 2048  # concurrency 32, mean KV
    predicted = [case_predictions(c, CAL)["output_tokens_per_s_per_device"] for c in (base, mtp)]
    assert predicted[1] > predicted[0]
    assert any("num_devices_total blank" in a for a in mtp.assumed)


def test_a_closed_loop_without_a_request_count_is_priced_in_steady_state():
    case = case_of(by_id("TRTB-01"))
    assert case.steady_concurrency == 1 and case.workload is not None and case.workload.num_requests == 8
    assert any("steady state" in a for a in case.assumed)
    values = case_predictions(case, CAL)
    # one client: each request is its prefill and 2,047 decodes back to back, so tokens/s = 2048 / e2e
    cost = ReplicaCost.of(case.model, case.cluster, case.plan, CAL)
    e2e = cost.prefill_s(1024) + sum(cost.decode_s(1, 1025 + k) for k in range(2047))
    assert values["output_tokens_per_s"] == pytest.approx(2048 / e2e, rel=0.01)


def test_every_row_of_the_shipped_file_is_priced_or_skipped_for_a_named_reason():
    result = CliRunner().invoke(cli, ["validate", "--data", str(DEFAULT_SERVING_DATA), "--json"])
    assert result.exit_code == 0, result.output
    import json

    out = json.loads(result.output)
    skipped = {s["id"]: s["reason"] for s in out["skipped"]}
    assert set(skipped) == {"SGL-01"}
    assert "prefill_workers" in skipped["SGL-01"]
    assert [(r["id"], r["scored"]) for r in out["readings"]] == [("TRT-07", "ep=1")]
    scored = {r["id"] for r in out["rows"]}
    assert {
        "SGLB-01",
        "SGLB-04",
        "SGLM-03",
        "TRTB-03",
        "SGLG-02",
        "SGLG-04",
        "MLP-01",
        "MLP-02",
        "MLP-03",
        "MLP-04",
    } <= scored
