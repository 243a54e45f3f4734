"""A serving row whose blank leaves several readings (issue 48's rule, applied to serving): TRT-07, Qwen3-235B-A22B
FP8 on 8 H100 with trtllm-bench, whose page (NVIDIA/TensorRT-LLM@00f3768 docs/source/performance/perf-overview.md)
passes ``--ep $ep_size`` for MoE runs without giving the value."""

from __future__ import annotations

import pytest

from workbench.presets.calibration import load_calibration
from workbench.validate.rows import Unexpressible
from workbench.validate.serving import alternative_readings, row_case, score_serving_case
from workbench.validate.serving_csv import read_serving_rows

CAL = load_calibration("default")


def by_id(row_id: str) -> dict[str, str]:
    return next(r for r in read_serving_rows() if r["id"] == row_id)


def test_a_blank_ep_is_scored_at_the_stacks_default_and_every_other_degree_priced_beside_it():
    case = row_case(by_id("TRT-07"))
    # TensorRT-LLM's Mapping: moe_tp_size = tp, moe_ep_size = 1 when neither is given
    assert case.plan.tp == 8 and case.plan.ep == 1
    assert any(a.startswith("ep:1, the stack's default") for a in case.assumed)
    # Qwen3-235B-A22B has 128 experts: every divisor of the 8 ranks divides them
    assert [name for name, _ in case.readings] == ["ep=2", "ep=4", "ep=8"]
    scored = score_serving_case(case, CAL)
    (entry,) = alternative_readings(case, scored, CAL)
    assert entry["scored"] == "ep=1" and set(entry["readings"]) == {"ep=1", "ep=2", "ep=4", "ep=8"}
    assert entry["readings"]["ep=1"] == scored[0]["predicted"]
    assert entry["range"] == (min(entry["readings"].values()), max(entry["readings"].values()))
    nearest = min(entry["readings"], key=lambda k: abs(entry["readings"][k] - entry["measured"]))
    assert entry["supported"] == nearest


def test_a_row_that_states_ep_has_no_other_reading():
    row = by_id("TRT-07") | {"ep": "8"}
    case = row_case(row)
    assert case.plan.ep == 8 and case.readings == ()
    assert not any(a.startswith("ep:") for a in case.assumed)


def test_a_pd_rows_blank_role_ep_is_still_named_not_guessed():
    row = next(r for r in read_serving_rows() if r["id"].startswith("SGLM-"))
    with pytest.raises(Unexpressible, match="decode_ep blank"):
        row_case(row | {"decode_ep": ""})
