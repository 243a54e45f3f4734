"""Rows whose published table and their stack's recipe disagree (issue 48, "rows read as their authors meant").

Independent values: the recipe's degrees are read here from verbatim excerpts of the Megatron-Bridge 25.11
recipe files (tests/fixtures/mbridge/workload-base-configs-25.11@97ad8cc6f.txt) with Python's own parser
(``ast``: the ``WorkloadBaseConfig`` defaults, the base config and its ``replace`` overrides); each reading's
memory need and prediction is the model's own estimate of a plain row that states that layout in its degree
columns (no ``recipe_layout``: the ordinary path); the rule's choice is checked in both directions.
"""

from __future__ import annotations

import ast
import csv
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from workbench.specs.plan import ParallelPlan
from workbench.validate import DEFAULT_DATA, read_rows, run_validation
from workbench.validate.readings import choose_layout, recipe_layout, recipe_plan

EXCERPT = Path(__file__).parent / "fixtures" / "mbridge" / "workload-base-configs-25.11@97ad8cc6f.txt"

RECIPE_OF = {
    "MBRIDGE_2511-018": "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_BASE_CONFIG",
    "MBRIDGE_2511-025": "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_BASE_CONFIG",
}
"""The recipe of each row's model, GPU and precision (GPT-OSS 120B on B200 in BF16; Qwen3-30B-A3B on H100 in
FP8 current scaling)."""

FIELDS = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "micro_batch_size": "micro_batch_size",
}
"""The CSV's degree columns as ``WorkloadBaseConfig`` names them."""


def _recipes() -> dict[str, dict[str, Any]]:
    """Every config of the excerpt with its fields resolved: the dataclass defaults, then the base config's
    keywords, then ``replace``'s."""
    sections = re.split(r"^# file: .*\n", EXCERPT.read_text(), flags=re.MULTILINE)[1:]
    defaults: dict[str, Any] = {}
    for node in ast.parse(textwrap.dedent(sections[0])).body:
        assert isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value
        defaults[node.target.id] = ast.literal_eval(node.value)
    configs: dict[str, dict[str, Any]] = {}
    for section in sections[1:]:
        (node,) = ast.parse(section).body
        assert isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        call, name = node.value, node.targets[0].id  # type: ignore[attr-defined]
        base = (
            defaults
            if call.func.id == "WorkloadBaseConfig"  # type: ignore[attr-defined]
            else configs[call.args[0].id]  # type: ignore[attr-defined]
        )
        configs[name] = {**base, **{k.arg: ast.literal_eval(k.value) for k in call.keywords}}
    return configs


def _rows(*ids: str) -> list[dict[str, str]]:
    by_id = {r["id"]: r for r in read_rows(DEFAULT_DATA)}
    return [dict(by_id[i]) for i in ids]


def _write(rows: list[dict[str, str]], path: Path) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_recipe_layout_holds_the_recipe_where_the_table_disagrees() -> None:
    recipes = _recipes()
    for row in read_rows(DEFAULT_DATA):
        if row["id"] not in RECIPE_OF:
            assert not row["recipe_layout"], row["id"]
            continue
        recipe = recipes[RECIPE_OF[row["id"]]]
        assert recipe["num_gpus"] == int(row["num_devices"])
        assert recipe["global_batch_size"] == int(row["global_batch_size"])
        degrees = {k: recipe[f] or 1 for k, f in FIELDS.items()}  # vpp None: not interleaved
        degrees["dp"] = recipe["num_gpus"] // (degrees["tp"] * degrees["pp"] * degrees["cp"])
        differ = {k: v for k, v in degrees.items() if v != int(row[k])}
        assert differ and recipe_layout(row) == differ, row["id"]
    assert {k: v["expert_model_parallel_size"] for k, v in recipes.items() if "GPT" in k} == {
        "BASE_GPT_OSS_120B_CONFIG": 8,
        "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_BASE_CONFIG": 64,
    }


def test_the_table_that_cannot_fit_is_scored_at_the_recipe(tmp_path: Path) -> None:
    """MBRIDGE_2511-018: the table's EP 8 needs more than the B200's usable memory, the recipe's EP 64 fits;
    each reading's need and prediction are those of a plain row stating that layout."""
    (row,) = _rows("MBRIDGE_2511-018")
    table = {**row, "id": "TABLE", "recipe_layout": ""}
    recipe = {**table, "id": "RECIPE", "ep": "64"}
    plain = run_validation(_write([table, recipe], tmp_path / "plain.csv"))
    want = {r["id"]: r for r in plain["rows"]}
    assert [r["id"] for r in plain["not_fitting"]] == ["TABLE"]
    assert want["RECIPE"]["fits"] and not want["TABLE"]["fits"]

    result = run_validation(_write([row], tmp_path / "row.csv"))
    (scored,) = result["rows"]
    assert result["not_fitting"] == [] and scored["fits"]
    assert "ep64" in scored["plan"] and scored["predicted"] == pytest.approx(want["RECIPE"]["predicted"])
    (note,) = [a for a in scored["assumed"] if a.startswith("layout:")]
    assert note.startswith("layout:recipe ep=64") and "could not have run as tabulated" in note
    assert f"{want['TABLE']['predicted_need_GiB']:.1f} of {want['TABLE']['usable_GiB']:.1f}" in note
    (layout,) = [e for e in result["readings"] if e["question"] == "layout"]
    assert layout["scored"] == "recipe"
    for name, plain_id in (("table", "TABLE"), ("recipe", "RECIPE")):
        assert layout["readings"][name] == pytest.approx(want[plain_id]["predicted"], rel=1e-9)
        assert layout["need_GiB"][name] == pytest.approx(want[plain_id]["predicted_need_GiB"], rel=1e-9)
    assert layout["range"] == (min(layout["readings"].values()), max(layout["readings"].values()))
    measured = float(row["measured_tokens_per_s_per_device"])
    nearer = min(layout["readings"], key=lambda k: abs(layout["readings"][k] - measured))
    assert layout["supported"] == nearer


def test_a_table_that_fits_keeps_the_table_reading(tmp_path: Path) -> None:
    """MBRIDGE_2511-025 (its table's MBS 2, VP 24 fit the H100) and a synthetic copy of -018 whose table states
    EP 32 keep the table's layout; the recipe's is priced beside it."""
    qwen, oss = _rows("MBRIDGE_2511-025", "MBRIDGE_2511-018")
    oss32 = {**oss, "id": "OSS_EP32", "ep": "32"}
    plain = run_validation(_write([{**oss32, "id": "PLAIN32", "recipe_layout": ""}], tmp_path / "p.csv"))
    assert plain["rows"][0]["fits"]
    result = run_validation(_write([qwen, oss32], tmp_path / "rows.csv"))
    by_id = {r["id"]: r for r in result["rows"]}
    assert "vpp24 mbs2" in by_id["MBRIDGE_2511-025"]["plan"] and "ep32" in by_id["OSS_EP32"]["plan"]
    assert by_id["OSS_EP32"]["predicted"] == pytest.approx(plain["rows"][0]["predicted"], rel=1e-9)
    layouts = {e["id"]: e for e in result["readings"] if e["question"] == "layout"}
    assert {e["scored"] for e in layouts.values()} == {"table"}
    assert any(
        a.startswith("layout:table vpp=24;micro_batch_size=2") for a in by_id["MBRIDGE_2511-025"]["assumed"]
    )
    assert set(layouts["OSS_EP32"]["readings"]) == {"table", "recipe"}


def _plan(**changes: Any) -> ParallelPlan:
    base: dict[str, Any] = {"dp": 8, "tp": 1, "pp": 2, "ep": 8, "vpp": 24, "micro_batch_size": 2}
    base["schedule"] = "interleaved-1f1b"
    return ParallelPlan(**{**base, **changes})


@pytest.mark.parametrize(
    ("table_fits", "recipe_fits", "want"),
    [(True, True, "table"), (True, False, "table"), (False, True, "recipe"), (False, False, "table")],
)
def test_the_rule_reads_memory_only(table_fits: bool, recipe_fits: bool, want: str) -> None:
    table, recipe = _plan(), _plan(vpp=12, micro_batch_size=1)
    verdict = {table: (table_fits, "T GiB"), recipe: (recipe_fits, "R GiB")}
    name, plan, note = choose_layout(table, recipe, verdict.__getitem__)
    assert name == want and plan == (table if want == "table" else recipe)
    assert note.startswith(f"layout:{want} ") and ("neither fits" in note) == (
        not table_fits and not recipe_fits
    )


def test_recipe_plan_refills_dp_and_the_schedule() -> None:
    table = _plan()
    assert recipe_plan(table, {"pp": 4}, 16).dp == 4
    flat = recipe_plan(table, {"vpp": 1}, 16)
    assert flat.schedule == "1f1b" and flat.vpp == 1
    with pytest.raises(ValueError, match="recipe_layout: tp 3"):
        recipe_plan(table, {"tp": 3}, 16)
    with pytest.raises(ValueError, match="recipe_layout: dp 4 x tp 1 x pp 2 x cp 1 is 8 devices"):
        recipe_plan(table, {"dp": 4}, 16)


@pytest.mark.parametrize(
    ("cell", "match"),
    [
        ("ep=64;zero=1", "key among tp, pp"),
        ("ep64", "not key=value"),
        ("ep=64;ep=8", "ep given twice"),
        ("ep=0", "whole number >= 1"),
        ("vpp=1.5", "whole number >= 1"),
    ],
)
def test_a_bad_recipe_layout_names_the_column_and_what_is_allowed(cell: str, match: str) -> None:
    with pytest.raises(ValueError, match=f"recipe_layout: .*{match}"):
        recipe_layout({"recipe_layout": cell})
    assert recipe_layout({"recipe_layout": " micro_batch_size=1 ; vpp=12 "}) == {
        "micro_batch_size": 1,
        "vpp": 12,
    }


def test_out_of_sample_readings_price_both_layouts(tmp_path: Path) -> None:
    """``--cv source``: the layout question of -018 is priced with the constants of the fold that left its
    source out; the scored reading's prediction is the row's out-of-sample prediction."""
    from workbench.validate.band import cross_validate_with_band

    rows = (
        _rows("MBRIDGE_2511-018") + [r for r in read_rows(DEFAULT_DATA) if r["source_key"] == "ZB_ICLR24"][:3]
    )
    result, _ = cross_validate_with_band(_write(rows, tmp_path / "rows.csv"), generated="today", source="t")
    (row,) = [r for r in result["rows"] if r["id"] == "MBRIDGE_2511-018"]
    (layout,) = [e for e in result["readings"] if e["question"] == "layout"]
    assert layout["scored"] == "recipe" and layout["readings"]["recipe"] == row["predicted"]
    assert layout["need_GiB"]["table"] > layout["usable_GiB"] >= layout["need_GiB"]["recipe"]
    assert not any(r["id"] == "MBRIDGE_2511-018" for r in result["not_fitting"])
