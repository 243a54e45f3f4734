"""Near ties and distinct layouts in the planner's list (issue 15, item 8): variants of a layout fold under its
best plan, plans within the model's ranking error of #1 are marked tied, and the explanation compares #1 with
the next distinct layout, not with a variant of its own."""

from __future__ import annotations

from click.testing import CliRunner
from workbench_cli import cli

from workbench.presets.catalog import load_cluster, load_model
from workbench.search import search
from workbench.search.frontier import TIE_FRAC
from workbench.specs.plan import Workload


def _result():
    return search(
        load_model("llama-3.1-70b"),
        load_cluster("dgx-h100", 8),
        Workload(seq_len=8192, global_batch_size=256),
        top_k=12,
        calibration="default",
    )


def test_variants_fold_under_their_layout_and_ties_follow_the_ranking_error():
    result = _result()
    rows = [r for r in result.plans.iter_rows(named=True) if r["refined"] and r["fits"]]
    seen: list[str] = []
    for r in rows:
        key = (
            r["num_devices"],
            r["dp"],
            r["tp"],
            r["pp"],
            r["cp"],
            r["ulysses"],
            r["ep"],
            r["schedule"] if r["pp"] > 1 else "",
        )
        name = str(key)
        if seen and seen[-1] == name:
            assert r["variant"]  # same degrees and schedule as the row above: a variant, folded under it
        else:
            assert name not in seen and not r["variant"]  # a layout appears once, its best plan first
            seen.append(name)
    best = rows[0]["tokens_per_s"]
    for r in rows:
        assert r["tied"] == (abs(r["tokens_per_s"] - best) <= TIE_FRAC * best)
    assert [r["layout_rank"] for r in rows] == sorted(r["layout_rank"] for r in rows)


def test_explanation_names_the_next_distinct_layout():
    result = _result()
    plans = list(result.plans.iter_rows(named=True))
    nxt = next(i for i, r in enumerate(plans) if r["layout_rank"] != plans[0]["layout_rank"])
    assert result.explanation.startswith(f"#1 beats #{nxt + 1} ")
    assert "same layout" not in result.explanation
    out = CliRunner().invoke(
        cli,
        ["plan", "--model", "llama-3.1-70b", "--cluster", "dgx-h100", "--nodes", "8", "--seq-len", "8192",
         "--global-batch", "256", "--top", "6"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "└" in out.output and "tied" in out.output
