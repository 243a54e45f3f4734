"""Training validation rows as other sources write them (issue 48): each spelling of a code is read to the code
the schema's README defines for it (shared/validation/README.md, "Enumerated values" and "Device ids"), an
unknown framework is priced by the documented fallback with a note, and a file of such variants of the public
rows prices whole, each variant exactly as its public row."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_rows_csv as write
from workbench.presets.calibration import load_calibration
from workbench.presets.frameworks import source_year
from workbench.validate.rows import Unexpressible
from workbench.validate.training import row_case, validate_rows
from workbench.validate.training_codes import read_codes, read_device
from workbench.validate.training_csv import DEFAULT_DATA, read_rows

SPELLINGS = [
    # dtype: the README's bf16 / fp16 / fp8 ("FP8 GEMMs in the linear layers ... Transformer Engine, torchao float8, MXFP8")
    ("dtype", "bfloat16", "bf16"),
    ("dtype", "BF16", "bf16"),
    ("dtype", "bf16-mixed", "bf16"),
    ("dtype", "amp_bf16", "bf16"),
    ("dtype", "float16", "fp16"),
    ("dtype", "half", "fp16"),
    ("dtype", "16-mixed", "fp16"),
    ("dtype", "FP8", "fp8"),
    ("dtype", "FP8 (E4M3)", "fp8"),
    ("dtype", "float8", "fp8"),
    ("dtype", "MXFP8", "fp8"),
    ("dtype", "fp8 hybrid", "fp8"),
    # recompute: selective covers Megatron selective and torchtitan op/layer AC; full = full AC
    ("recompute", "Full", "full"),
    ("recompute", "full activation checkpointing", "full"),
    ("recompute", "activation checkpointing", "full"),
    ("recompute", "true", "full"),
    ("recompute", "uniform", "full"),
    ("recompute", "selective AC", "selective"),
    ("recompute", "op", "selective"),
    ("recompute", "no", "none"),
    ("recompute", "no activation checkpointing", "none"),
    ("recompute", "off", "none"),
    # zero_stage: 0 = DDP, 1 = distributed optimizer, 2 = SHARD_GRAD_OP, 3 = FULL_SHARD / FSDP2 full shard
    ("zero_stage", "ZeRO-3", "3"),
    ("zero_stage", "zero_stage 2", "2"),
    ("zero_stage", "ZeRO stage 1", "1"),
    ("zero_stage", "Z1", "1"),
    ("zero_stage", "FULL_SHARD", "3"),
    ("zero_stage", "FSDP", "3"),
    ("zero_stage", "SHARD_GRAD_OP", "2"),
    ("zero_stage", "distributed optimizer", "1"),
    ("zero_stage", "DDP", "0"),
    ("zero_stage", "NO_SHARD", "0"),
    # schedule: the README's codes; ZB-1p -> zb-h1, ZB-2p -> zb-h2
    ("schedule", "1F1B", "1f1b"),
    ("schedule", "PipeDream-Flush", "1f1b"),
    ("schedule", "Schedule1F1B", "1f1b"),
    ("schedule", "Interleaved 1F1B", "interleaved-1f1b"),
    ("schedule", "interleaved_1f1b", "interleaved-1f1b"),
    ("schedule", "ScheduleInterleaved1F1B", "interleaved-1f1b"),
    ("schedule", "ZB-1p", "zb-h1"),
    ("schedule", "ZB-H2", "zb-h2"),
    ("schedule", "ZB-2p", "zb-h2"),
    ("schedule", "GPipe", "gpipe"),
    ("schedule", "DualPipe", "dualpipe"),
    # booleans, attention kinds, FLOP definitions
    ("gated_mlp", "yes", "true"),
    ("gated_mlp", "0", "false"),
    ("sequence_parallel", "Y", "true"),
    ("sequence_parallel", "off", "false"),
    ("attention", "Grouped-Query", "gqa"),
    ("attention", "multi-head", "mha"),
    ("attention", "MQA", "gqa"),
    ("flops_definition", "Hardware", "hardware"),
    ("flops_definition", "model FLOPs", "model"),
    ("flops_definition", "Model + FP8 peak", "model+fp8-peak"),
]


@pytest.mark.parametrize(("column", "written", "code"), SPELLINGS)
def test_each_spelling_reads_to_its_code(column: str, written: str, code: str) -> None:
    row, notes = read_codes({column: written})
    assert row[column] == code
    if written.strip().lower() != code:
        assert any(n.startswith(f"{column}:") and code in n for n in notes), notes


DEVICES = [
    ("H100 80GB HBM3", "h100-sxm5-80gb"),  # nvidia-smi's name of the SXM5 part
    ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
    ("H100", "h100-sxm5-80gb"),  # the README: a source saying only "H100" uses the SXM id
    ("H100 SXM5 80GB", "h100-sxm5-80gb"),
    ("H100 PCIe", "h100-pcie-80gb"),
    ("H100 NVL", "h100-nvl-94gb"),
    ("H100 96GB", "h100-sxm5-96gb"),
    ("A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
    ("A100 80GB", "a100-sxm4-80gb"),  # the README's own example
    ("H800", "h800-sxm5-80gb"),
    ("NVIDIA H800 80GB HBM3", "h800-sxm5-80gb"),
    ("H200", "h200-sxm-141gb"),
    ("B200", "b200-sxm-180gb"),
    ("GB200", "gb200"),
    ("GB300", "gb300"),
    ("AMD Instinct MI300X", "mi300x"),
    ("MI355X", "mi355x"),
]


@pytest.mark.parametrize(("written", "device"), DEVICES)
def test_each_device_spelling_reads_to_its_id(written: str, device: str) -> None:
    assert read_device(written)[0] == device


@pytest.mark.parametrize(
    ("written", "reason"),
    [("H800 PCIe", "H800 as written"), ("A100", "does not say its memory"), ("A100 PCIe", "A100 as written")],
)
def test_a_part_without_a_preset_skips_its_row_naming_it(written: str, reason: str) -> None:
    row = next(r for r in read_rows(DEFAULT_DATA) if r["id"] == "NARAYANAN21_T1-001")
    with pytest.raises(Unexpressible, match=reason):
        row_case({**row, "device": written})


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("dtype", "banana"),
        ("recompute", "sometimes"),
        ("zero_stage", "ZeRO-7"),
        ("gated_mlp", "maybe"),
        ("attention", "sparse"),
        ("flops_definition", "vibes"),
    ],
)
def test_a_code_no_spelling_reads_fails_the_file_naming_row_column_and_allowed(
    tmp_path: Path, column: str, value: str
) -> None:
    rows = read_rows(DEFAULT_DATA)[:2]
    rows[1] = {**rows[1], column: value}
    path = write(tmp_path / "bad.csv", rows)
    with pytest.raises(ValueError) as info:
        read_rows(path)
    message = str(info.value)
    assert str(path) in message and "line 3" in message and repr(rows[1]["id"]) in message
    assert f"column {column}" in message and repr(value) in message
    assert "allowed" in message or "true or false" in message


PUBLIC = {
    "NARAYANAN21_T1-001": {"dtype": "float16", "device": "A100-SXM4-80GB", "framework": "Megatron-LM"},
    "KORTHIKANTI22_T5-001": {"recompute": "Full activation checkpointing", "flops_definition": "Model"},
    "MBRIDGE_2511-004": {"schedule": "Interleaved 1F1B", "dtype": "BFloat16", "zero_stage": "ZeRO-1"},
    "MBRIDGE_2511-025": {"schedule": "ScheduleInterleaved1F1B", "device": "NVIDIA H100 80GB HBM3"},
    "TORCHTITAN_2412-001": {"recompute": "selective (op)", "zero_stage": "FULL_SHARD", "gated_mlp": "yes"},
    "ZB_ICLR24-003": {"schedule": "ZB-1p", "device": "A100 80GB"},
    "MOSAIC_LLMFOUNDRY-001": {
        "zero_stage": "FSDP",
        "recompute": "activation checkpointing",
        "device": "H100",
    },
    "MOSAIC_LLMFOUNDRY-105": {"device": "NVIDIA A100-SXM4-40GB", "dtype": "amp_bf16", "attention": "MHA"},
}
"""Public rows and the spellings of the same values a held-out source may use (same run, other words)."""


def test_a_file_of_variants_prices_whole_and_each_variant_as_its_public_row(tmp_path: Path) -> None:
    public = {r["id"]: r for r in read_rows(DEFAULT_DATA) if r["id"] in PUBLIC}
    variants = [{**public[i], **changes, "id": f"{i}-v"} for i, changes in PUBLIC.items()]
    variants.append({**public["MBRIDGE_2511-004"], "id": "moe-blank-ep", "ep": ""})
    variants.append({**public["MBRIDGE_2511-025"], "id": "maxtext", "framework": "MaxText"})
    variants.append({**public["NARAYANAN21_T1-001"], "id": "gh200", "device": "GH200", "cluster": ""})
    path = write(tmp_path / "variants.csv", [*public.values(), *variants])
    cal = load_calibration("default")
    result = validate_rows(read_rows(path), calibration=cal, data_dir=tmp_path)
    priced = {r["id"]: r for r in result["rows"]}
    for i in PUBLIC:
        assert priced[f"{i}-v"]["predicted"] == pytest.approx(priced[i]["predicted"], rel=1e-12), i
        assert priced[f"{i}-v"]["framework"] == priced[i]["framework"]
    assert any(a.startswith("ep:1 (blank on an MoE row") for a in priced["moe-blank-ep"]["assumed"])
    maxtext = priced["maxtext"]
    assert maxtext["framework"] == "generic"
    assert any(a.startswith("framework:'MaxText' names no profile") for a in maxtext["assumed"])
    assert result["skipped"] == []  # a GH200 is priced on its preset now (tests/test_presets_gh200.py)
    assert any("read as gh200-96gb" in a for a in priced["gh200"]["assumed"])


@pytest.mark.parametrize(
    ("source", "year"),
    [
        ("Qi et al. 'Zero Bubble' (ICLR'24), Tables 3-4", 2024),
        ("Narayanan et al. 2021 (SC21) [reproduced in a 2023 README]", 2021),
        ("Megatron-Bridge summary, 25.11 container [repo docs @97ad8cc6f (2025-12-04)]", None),
        ("a blog post", None),
    ],
)
def test_the_source_year_reads_a_venue_year_never_the_locator(source: str, year: int | None) -> None:
    assert source_year(source) == year
