"""The self-contained HTML report: offline, escaped, no broken panel tags, refuses to overwrite, small."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import textwrap
from dataclasses import replace
from html.parser import HTMLParser

import polars as pl
import pytest
from workbench_widgets.report import cli_command, render_report, write_csv_tables, write_report
from workbench_widgets.sample import renamed, sample_cluster, sample_estimate

from tests.conftest import ROOT
from workbench.specs.plan import ParallelPlan

EVIL = "<script>alert(1)</script>"
LINKS = re.compile(r"<script[^>]*\ssrc=|<link[^>]*stylesheet|static/extensions", re.IGNORECASE)


@pytest.fixture(scope="module")
def estimates():
    best = renamed(
        sample_estimate(plan=ParallelPlan(pp=4, dp=2, tp=8, schedule="1f1b"), num_microbatches=8), EVIL
    )
    other = renamed(
        sample_estimate(plan=ParallelPlan(pp=2, dp=4, tp=8, schedule="zb-h1"), num_microbatches=4), EVIL
    )
    return [best, other]


@pytest.fixture(scope="module")
def search():
    return pl.DataFrame(
        {
            "plan": ["dp2 tp8 pp4", "dp4 tp8 pp2", "<b>odd</b>"],
            "tokens_per_s": [3e5, 2e5, 1e5],
            "mfu": [0.5, 0.4, 0.2],
            "peak_memory_bytes": [50e9, 60e9, 90e9],
            "fits": [True, True, False],
            "pp": [4, 2, 1],
            "rejected_reason": [None, None, "does not fit"],
        }
    )


def test_report_is_self_contained_and_escapes_user_strings(tmp_path, estimates, search):
    out = write_report(
        tmp_path / "plan.html",
        estimates=estimates,
        search_results=search,
        plan_index=1,
        command="workbench plan --model '<b>m</b>'",
        notes=["<img src=x onerror=alert(2)>"],
        validation={"analytic": 0.123},
    )
    text = out.read_text(encoding="utf-8")
    assert EVIL not in text and html.escape(EVIL) in text
    assert "<img src=x" not in text and "<b>odd</b>" not in text and "<b>m</b>" not in text
    assert LINKS.search(text) is None
    assert "12.3 %" in text  # the validation error, shown as a percentage
    assert "#2 (chosen plan)" in text and "#1 (best plan)" in text
    assert text.count('class="bk-root"') + text.count("data-root-id") >= 5


def test_refuses_to_overwrite_and_checks_the_index(tmp_path, estimates):
    path = tmp_path / "r.html"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="--force"):
        write_report(path, estimates=estimates, command="x")
    assert path.read_text() == "keep me"
    write_report(path, estimates=estimates, command="x", force=True)
    assert path.read_text() != "keep me"
    with pytest.raises(ValueError, match="plan_index"):
        render_report(estimates=estimates, command="x", plan_index=2)
    with pytest.raises(ValueError, match="at least one"):
        render_report(estimates=[], command="x")
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "missing" / "r.html", estimates=estimates, command="x")


def test_export_after_importing_panel_has_no_relative_extension_tag(tmp_path):
    script = textwrap.dedent(f"""
        import panel  # registers panel's bokeh extension, which adds a static/extensions/panel script tag
        from workbench.specs.plan import ParallelPlan
        from workbench_widgets.report import write_report
        from workbench_widgets.sample import sample_estimate
        est = sample_estimate(plan=ParallelPlan(pp=2, schedule="1f1b"), num_microbatches=4)
        write_report({str(tmp_path / "p.html")!r}, estimates=[est], command="x")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "p.html").read_text(encoding="utf-8")
    assert "static/extensions" not in text and LINKS.search(text) is None


def test_csv_tables(tmp_path, estimates, search):
    paths = write_csv_tables(tmp_path / "tables", estimates=estimates, search_results=search)
    assert sorted(p.name for p in paths) == [
        "activation.csv",
        "memory.csv",
        "plans.csv",
        "search.csv",
        "timeline.csv",
    ]
    timeline = pl.read_csv(tmp_path / "tables" / "timeline.csv")
    assert timeline.height == 4 * 8 * 2  # 1F1B: one F and one B per stage and micro-batch
    assert pl.read_csv(tmp_path / "tables" / "plans.csv").height == 2
    with pytest.raises(FileExistsError):
        write_csv_tables(tmp_path / "tables", estimates=estimates)


def test_cli_command_is_shell_quoted():
    assert cli_command(["estimate", "--model", "a b"]) == "workbench estimate --model 'a b'"


@pytest.mark.slow
def test_report_for_64_ranks_and_256_microbatches_is_under_3_mb(tmp_path):
    est = sample_estimate(
        plan=ParallelPlan(pp=64, schedule="1f1b"), num_microbatches=256, cluster=sample_cluster(8)
    )
    assert est.timeline.height == 64 * 256 * 2
    out = write_report(tmp_path / "big.html", estimates=[est], command="x")
    assert out.stat().st_size < 3 * 1024**2


def test_cli_estimate_writes_a_report(tmp_path, workbench_cli):
    args = [
        "estimate",
        "--model",
        "llama-3.1-8b",
        "--cluster",
        "dgx-h100",
        "--nodes",
        "1",
        "--seq-len",
        "2048",
        "--global-batch",
        "16",
        "--tp",
        "4",
        "--pp",
        "2",
    ]
    out = tmp_path / "e.html"
    proc = workbench_cli(*args, "--report", str(out), "--csv", str(tmp_path / "csv"))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert "llama-3.1-8b" in text and "--report" in text and LINKS.search(text) is None
    assert (tmp_path / "csv" / "timeline.csv").exists()
    again = workbench_cli(*args, "--report", str(out))
    assert again.returncode != 0 and "exists" in again.stderr and "Traceback" not in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    bad = workbench_cli(*args, "--report", str(tmp_path / "x.html"), "--plan-index", "3")
    assert bad.returncode != 0 and "--plan-index" in bad.stderr and "Traceback" not in bad.stderr


def _predicted_and_measured():
    """GPipe p=4, m=8 simulated with F = 2 ms ("predicted", backend named EVIL) and F = 3 ms ("measured")."""
    plan = ParallelPlan(pp=4, schedule="gpipe")
    predicted = renamed(sample_estimate(plan=plan, num_microbatches=8, forward_s=2e-3), EVIL)
    measured = renamed(sample_estimate(plan=plan, num_microbatches=8, forward_s=3e-3), EVIL)
    return replace(predicted, backend=EVIL), replace(measured, backend="real-run", measured=True)


def _gpipe_step_ms(forward_s: float, pp: int = 4, m: int = 8) -> tuple[float, float]:
    """(step time ms, bubble fraction) of the sample GPipe estimate in closed form: makespan
    (m + p - 1)(F + B) + 2 (p - 1) c with B = 2F, c = F/20, plus the sample's DP (2F) and optimizer (F)
    terms; bubble = the critical rank's idle (p - 1)(F + B) over the step, pipeline sends excluded (GPipe,
    arXiv:1811.06965; ``workbench.estimate.metrics``)."""
    makespan_s = (m + pp - 1) * 3 * forward_s + 2 * (pp - 1) * forward_s / 20
    step_s = makespan_s + 3 * forward_s
    return step_s * 1e3, (pp - 1) * 3 * forward_s / step_s


def test_report_overlays_predicted_and_measured_with_a_table(tmp_path):
    predicted, measured = _predicted_and_measured()
    out = write_report(
        tmp_path / "run.html",
        estimates=[measured, predicted],
        command="workbench run --model '<b>m</b>'",
        comparison=(predicted, measured),
    )
    text = out.read_text(encoding="utf-8")
    assert text.count(">Predicted vs measured</h2>") == 1
    section = text[
        text.index(">Predicted vs measured</h2>") : text.index("</table>", text.index("Predicted vs"))
    ]
    step_pred, bubble_pred = _gpipe_step_ms(2e-3)
    step_meas, bubble_meas = _gpipe_step_ms(3e-3)
    tokens_per_step = 4096 * 8
    assert f"{step_pred:,.2f}" in section and f"{step_meas:,.2f}" in section
    assert f"{(step_pred / step_meas - 1) * 100:+.1f} %" in section
    assert f"{bubble_pred * 100:.1f}" in section and f"{bubble_meas * 100:.1f}" in section
    assert f"{tokens_per_step / (step_pred / 1e3):,.0f}" in section
    assert f"{(step_meas / step_pred - 1) * 100:+.1f} %" in section  # tokens/s error: inverse of the step's
    # sample memory: 8 + 8 + 24 + 1 + 2 GiB, plus GPipe's rank 0 holding all m = 8 activations of 2 GiB
    assert f"{8 + 8 + 24 + 1 + 2 + 8 * 2:,.3f}" in section and "peak memory per rank (GiB)" in section
    assert EVIL not in text and html.escape(EVIL) in section and "<b>m</b>" not in text
    assert LINKS.search(text) is None
    assert text.count("data-root-id") == 1 + render_report(
        estimates=[measured, predicted], command="x"
    ).count("data-root-id")


def test_report_without_comparison_has_no_overlay_section(estimates):
    text = render_report(estimates=estimates, command="x")
    assert "Predicted vs measured" not in text


# What a user sees (issue 19, item 7): numbering from #1, the planner's real totals, notes once, no wrapping. ---


class _Page(HTMLParser):
    """Tables (rows of (tag, class, text) cells), h2/h3 headings, list items and style text of a report."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[tuple[str, str, str]]]] = []
        self.headings: list[str] = []
        self.items: list[str] = []
        self.style = ""
        self._cell: tuple[str, str] | None = None
        self._text: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables and self.tables[-1]:
            self._cell, self._text = (tag, dict(attrs).get("class") or ""), []
        elif tag in ("h2", "h3", "li", "style"):
            self._in, self._text = tag, []

    def handle_data(self, data: str) -> None:
        if self._cell is not None or self._in is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        text = "".join(self._text).strip()
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append((*self._cell, text))
            self._cell = None
        elif tag == self._in:
            if tag == "style":
                self.style += text
            else:
                {"h2": self.headings, "h3": self.headings, "li": self.items}[tag].append(
                    " ".join(text.split())
                )
            self._in = None


def _page(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def _table_after(text: str, marker: str) -> list[list[tuple[str, str, str]]]:
    """The first table after ``marker`` in the page."""
    start = text.index(marker)
    return _page(text[start : text.index("</table>", start) + len("</table>")]).tables[0]


def _values(table: list[list[tuple[str, str, str]]], column: str) -> list[str]:
    names = [c[2] for c in table[0]]
    return [row[names.index(column)][2] for row in table[1:]]


@pytest.fixture(scope="module")
def planned():
    """A real search (Llama 3.1 8B on one DGX H100 node, top 3 refined) and the report the CLI writes of it."""
    from workbench.presets.catalog import load_cluster, load_model
    from workbench.search import Constraints, search
    from workbench.specs.plan import Workload

    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", num_nodes=1)
    workload = Workload(seq_len=4096, global_batch_size=32)
    result = search(model, cluster, workload, Constraints(memory_headroom_frac=0.05), top_k=3)
    text = render_report(
        estimates=list(result.estimates),
        command="x",
        search=result,
        notes=[result.explanation],
    )
    return model, cluster, workload, result, text


def test_plans_are_numbered_from_one_everywhere(planned):
    *_, result, text = planned
    page = _page(text)
    ranked = _table_after(text, "<h2>Ranked plans</h2>")
    assert [v.split()[0] for v in _values(ranked, "#")] == ["1", "2", "3"]  # "2 =": tied with #1
    assert [v.removeprefix("└ ") for v in _values(ranked, "plan")] == [
        e.plan.describe() for e in result.estimates
    ]
    kept = _table_after(text, "<h3>Plans kept by the search")
    assert [v.split()[0] for v in _values(kept, "#")[:3]] == ["1", "2", "3"]  # "2 =": tied with #1
    assert any(h.startswith("#1 (best plan): ") for h in page.headings)
    assert not any(h.startswith("#0") for h in page.headings + page.items)
    assert result.explanation.startswith("#1 beats #") and result.explanation in page.items
    bars = sorted(set(re.findall(r'"(#\d+) ([^"]+)"', text)))  # the breakdown figure's bar labels
    described = [e.plan.describe() for e in result.estimates]
    assert [(n, plan) for n, plan in bars if plan in described] == [
        (f"#{i + 1}", plan) for i, plan in enumerate(described)
    ]


def test_search_totals_are_the_planners_counts(planned):
    """Screened = every plan of the space (its size, computed here from the plan space), = rejected + feasible;
    each reason's count as the planner counted it; refined = the estimates. Not the rows kept for the table."""
    from workbench.presets.calibration import load_calibration
    from workbench.search import Constraints
    from workbench.search.space import build_space, framework_constraints

    model, cluster, _, result, text = planned
    cal = load_calibration("default")
    space = build_space(
        model, cluster, framework_constraints(Constraints(memory_headroom_frac=0.05), cal.framework)
    )
    totals = dict((row[0][2], row[1][2]) for row in _table_after(text, '<h2 id="search">')[1:])
    words = ("plans screened", "rejected", "feasible", "refined")
    counts = {w: int(v.replace(",", "")) for k, v in totals.items() for w in words if k.startswith(w)}
    assert len(counts) == len(words), totals
    reasons = {
        row[0][2]: int(row[1][2].replace(",", ""))
        for row in _table_after(text, "Rejected plans by reason")[1:]
    }
    assert counts["plans screened"] == space.size == result.num_plans
    assert counts["plans screened"] > 10 * result.report_frame().height  # not the 277 rows kept for the table
    assert counts["rejected"] == sum(reasons.values())
    assert counts["rejected"] + counts["feasible"] == counts["plans screened"]
    assert counts["feasible"] == result.num_feasible
    assert counts["refined"] == len(result.estimates) == 3
    assert reasons == {text: n for _, text, n in result.rejection_table() if n}
    assert set(reasons) >= {"exceeds the device memory"}


def test_common_notes_are_said_once_and_plan_notes_once_with_their_plans(planned, estimates):
    *_, result, text = planned
    items = _page(text[text.index("<h2>Notes</h2>") :]).items  # the summary's why lines are items too
    common = list(result.estimates[0].notes)
    assert all(set(e.notes) == set(common) for e in result.estimates)
    for note in common:
        assert items.count(note) == 1, (note, items)
    assert not any(i.endswith(common[0]) and i != common[0] for i in items)
    assert len(items) == len(common) + 1  # and the explanation

    base = estimates[0]
    shared = ("MFU: PaLM", "attention: fused")
    plans = [
        replace(base, notes=(*shared, "experts: balanced routing")),
        replace(base, notes=shared),
        replace(base, notes=(*shared, "experts: balanced routing")),
    ]
    items = _page(render_report(estimates=plans, command="x", notes=["MFU: PaLM"])).items
    assert items == ["MFU: PaLM", "attention: fused", "#1, #3: experts: balanced routing"]


def test_numeric_cells_do_not_wrap(planned):
    *_, text = planned
    page = _page(text)
    rule = re.search(r"td\.num\s*\{([^}]*)\}", page.style)
    assert rule is not None and "white-space: nowrap" in rule.group(1)
    number = re.compile(r"^[+-]?[\d,]+(\.\d+)?( %)?$")
    checked = 0
    for table in page.tables:
        if any(tag != "th" for tag, _, _ in table[0]):
            continue  # a key/value table of the inputs, not a data table
        for row in table[1:]:
            for tag, cls, cell in row:
                if tag == "td" and number.match(cell):
                    assert "num" in cls.split(), (cell, row)
                    checked += 1
    ranked = _table_after(text, "<h2>Ranked plans</h2>")
    mfu = [row[[c[2] for c in ranked[0]].index("MFU")] for row in ranked[1:]]
    assert all(cls == "num" and cell.endswith(" %") for _, cls, cell in mfu)
    assert checked > 50


# --- the answer at the top (issue 51 items 1 and 2) ---------------------------------------------------------


def test_report_starts_with_the_answer(planned):
    """The first section after the title is the summary: #1's plan, its tokens/s, MFU, memory against the usable
    line (80 GiB less the search's 5 % headroom) and the token budget's days and device-hours, recomputed here
    from the estimate and the budget."""
    *_, result, text = planned
    page = _page(text)
    assert page.headings[0] == f"Answer: {result.estimates[0].plan.describe()}"
    assert text.index('id="summary"') < text.index("<h2>Inputs</h2>") < text.index("<h2>Ranked plans</h2>")
    best = result.estimates[0]
    rows = {r[0][2]: r[1][2] for r in page.tables[0]}
    assert rows["throughput"] == f"{best.tokens_per_s:,.0f} tokens/s on {best.plan.num_devices:,} devices"
    assert rows["MFU"] == f"{best.mfu * 100:.1f} %"
    usable_gib = best.memory_capacity_bytes * 0.95 / 2**30
    assert f"of {usable_gib:,.1f} GiB usable" in rows["peak memory per device"]
    days = result.token_budget / best.tokens_per_s / 86_400
    hours = days * 24 * best.plan.num_devices
    (budget,) = [v for k, v in rows.items() if k.startswith("token budget")]
    assert budget == f"{days:,.1f} days on {best.plan.num_devices:,} devices, {hours:,.0f} device-hours"


def test_why_compares_the_best_plan_of_each_other_layout(planned):
    """One line per distinct layout (not a variant of #1's), each naming that layout's best plan, in rank order."""
    from workbench.search.planner import layout_key

    *_, result, text = planned
    page = _page(text[: text.index("<h2>Inputs</h2>")])
    rows = result.plans.to_dicts()
    firsts: list[tuple[int, str]] = []
    seen = {layout_key(rows[0])}
    for i, r in enumerate(rows[1:], start=2):
        if r["fits"] and layout_key(r) not in seen:
            seen.add(layout_key(r))
            firsts.append((i, r["plan"]))
    why = [item for item in page.items if item.startswith("#1 beats #")]
    assert len(why) == min(5, len(firsts)) >= 1
    for line, (i, plan) in zip(why, firsts, strict=False):
        assert line.startswith(f"#1 beats #{i} ({plan})"), line
    assert "tied with #1: within 6.7%" in text


def test_variants_are_folded_under_their_layout(planned):
    """Rows of the search table whose plan is a variant (same layout as the plan above) carry the class that the
    "show variants" toggle unfolds; tie marks follow the planner's ``tied``."""
    *_, result, text = planned
    start = text.index("<h3>Plans kept by the search")
    table = text[start : text.index("</table>", start)]
    classes = re.findall(r'<tr class="([^"]*)">', table)
    frame = result.report_frame().head(len(classes))
    assert [("variant" in c.split()) for c in classes] == [bool(v) for v in frame["variant"].fill_null(False)]
    assert any("variant" in c for c in classes)
    assert 'class="fold-toggle"' in text and ".fold-toggle:not(:checked) ~ .scroll tr.variant" in text
    kept = _table_after(text, "<h3>Plans kept by the search")
    tied = [v.endswith(" =") for v in _values(kept, "#")]
    assert tied == [bool(t) and i > 0 for i, t in enumerate(frame["tied"].fill_null(False))]


def test_figures_draw_the_usable_line_a_rank_legend_and_only_what_they_draw(planned):
    from bokeh.models import Span
    from workbench_widgets.plots import estimate_activation_figure, estimate_memory_figure, search_figure

    *_, result, _ = planned
    best = result.estimates[0]
    fig = estimate_memory_figure(best, headroom_frac=0.05)
    spans = {s.name: s.location for s in fig.center if isinstance(s, Span)}
    assert spans == pytest.approx(
        {"capacity": best.memory_capacity_bytes * 0.95 / 2**30, "hbm": best.memory_capacity_bytes / 2**30}
    )
    act = estimate_activation_figure(best)
    assert act is not None and "capacity" not in act.title.text
    labels = [
        item.label.value if hasattr(item.label, "value") else item.label.field for item in act.legend[0].items
    ]
    ranks = sorted(best.activation_timeline["rank"].unique().to_list())
    assert labels == ["label"] or labels == [f"rank {r}" for r in ranks]
    assert act.renderers[0].data_source.data["label"] == [f"rank {r}" for r in ranks]
    feasible_only = result.plans.filter(pl.col("fits"))
    scatter = search_figure(feasible_only)
    assert not [r for r in scatter.renderers if r.name == "infeasible"]
    assert "grey" not in scatter.title.text
    assert all("rejected" not in str(getattr(i.label, "value", "")) for i in scatter.legend[0].items)
    mixed = result.report_frame()
    if (~mixed["fits"]).any():
        scatter = search_figure(mixed)
        assert [r for r in scatter.renderers if r.name == "infeasible"] and "grey" in scatter.title.text


def test_summary_sets_the_best_plan_beside_the_published_recipe(planned):
    """Megatron-Bridge 25.11 publishes Llama 3 8B on 8 H100 (row MBRIDGE_2511-021: Megatron FSDP, mbs 1): the
    summary prices that layout on the fixture's node and batch with estimate_plan (the search's default
    calibration) and says how #1 compares."""
    from workbench.estimate.analytic import estimate_plan
    from workbench.presets.calibration import load_calibration

    model, cluster, workload, result, text = planned
    assert "<h3>Against the stack&#39;s published recipe</h3>" in text
    (para,) = re.findall(r'<p class="reference">(.*?)</p>', text, re.S)
    line = " ".join(html.unescape(para).split())
    assert line.startswith("published recipe MBRIDGE_2511-021 (NVIDIA Megatron-Bridge performance summary")
    assert (
        "on 8 h100-sxm5-80gb, seq 8192, global batch 128, fp8; priced here in bf16)" in line
    )  # the row's run
    plan = ParallelPlan(dp=8, tp=1, pp=1, micro_batch_size=1, zero_stage=3)
    est = estimate_plan(
        model, cluster, workload, plan, calibration=load_calibration(framework=result.framework)
    )
    usable = est.memory_capacity_bytes * 0.95 / 2**30
    assert (
        f" as {plan.describe()}: {est.tokens_per_s:,.0f} tokens/s, {est.peak_memory_bytes / 2**30:,.1f} GiB of "
        f"{usable:,.1f} GiB usable; " in line
    )
    lead = result.estimates[0].tokens_per_s / est.tokens_per_s - 1
    assert line.endswith(
        f"#1 at {lead:+.1%}: the published recipe is within the tie band (6.7%)"
        if abs(lead) <= 0.067
        else f"#1 is faster by {lead:.1%}"
    )
