"""The MLPerf Inference LLM benchmarks beyond llama2-70b (profiles/validation/datasets.toml and
workbench.validate.serving_loadgen): each data set's figures against the sources they cite, rows of each benchmark
priced with its means and LoadGen run, and the codes a collector may write for a data set (aliases, an mlperf-...
code naming the benchmark's model)."""

from __future__ import annotations

import tomllib

import pytest

from workbench.presets.calibration import load_calibration
from workbench.validate.rows import Unexpressible
from workbench.validate.serving import case_predictions, row_case
from workbench.validate.serving_csv import SERVING_COLUMNS, read_serving_rows
from workbench.validate.serving_datasets import DATASETS_FILE, load_datasets, named_dataset, resolve_dataset
from workbench.validate.serving_loadgen import LOADGEN_SERVER_RULES, loadgen_rules
from workbench.validate.serving_workload import row_workload

MIXTRAL = "mlperf-mixtral-8x7b-openorca-gsm8k-mbxp"
L405B = "mlperf-llama3.1-405b-longcontext"
L8B = "mlperf-llama3.1-8b-cnndm"
R1 = "mlperf-deepseek-r1-ensemble"
OPENORCA = "mlperf-llama2-70b-openorca"

PER_SAMPLE = {
    # openshift-psap/performance-dashboard@7100702 mlperf-data/summaries/<file>.csv, input_length column:
    # (rows, sum, median, max, population std), summed by a short script over the published file
    MIXTRAL: (15000, 6_410_905, 283, 1948, 328.62),  # mixtral-8x7b.csv
    L405B: (8313, 78_380_323, 10112, 19988, 4066.94),  # llama3-1-405b.csv
    L8B: (13368, 11_639_915, 784, 2540, 430.06),  # llama3-1-8b-datacenter.csv
    R1: (4388, 3_527_036, 901.5, 3140, 405.64),  # deepseek-r1.csv
}

ARCHITECTURE = SERVING_COLUMNS[SERVING_COLUMNS.index("num_layers") : SERVING_COLUMNS.index("weight_dtype")]
"""The architecture columns (num_layers .. v_head_dim): blank, the model is the preset's."""


def by_id(row_id: str) -> dict[str, str]:
    return next(r for r in read_serving_rows() if r["id"] == row_id)


def benchmark_row(base: str, preset: str, code: str, **columns: str) -> dict[str, str]:
    """An MLPerf row of another benchmark: the public row ``base`` with the model columns changed to the preset
    (architecture taken from it), both dist columns naming ``code`` and no output length of its own."""
    row = by_id(base) | dict.fromkeys(ARCHITECTURE, "")
    return row | {
        "model_preset": preset,
        "model_name": preset,
        "input_tokens_dist": code,
        "output_tokens_dist": code,
        "output_tokens_mean": "",
    } | columns  # fmt: skip


@pytest.mark.parametrize("code", sorted(PER_SAMPLE))
def test_each_data_set_holds_the_per_sample_files_figures(code):
    rows, total, median, longest, std = PER_SAMPLE[code]
    ds = load_datasets()[code]
    assert ds.samples == rows  # and mlperf.conf's performance_sample_count_override (below)
    assert ds.input_tokens_mean == pytest.approx(total / rows, abs=0.005)
    assert ds.input_tokens_median == median and ds.input_tokens_max == longest
    assert {"samples", "input_tokens_mean", "input_tokens_median", "input_tokens_max"} <= set(ds.sources)
    assert "performance-dashboard@7100702" in ds.sources["input_tokens_mean"]
    raw = tomllib.loads(DATASETS_FILE.read_text())[code]
    assert raw["input_tokens_std"] == pytest.approx(std, abs=0.05)  # recorded to one decimal


def test_the_generated_lengths_are_mlcommons_tokens_per_sample_targets():
    sets = load_datasets()
    # submission_checker.py (v4.1..v5.1): mixtral-8x7b TOKENS_PER_SAMPLE 145.9; README tokens_per_sample 144.84 is
    # the per-sample file's output mean, 2,172,643 / 15,000
    assert sets[MIXTRAL].output_tokens_mean == 145.9
    assert 0.9 * 145.9 < 2_172_643 / 15000 < 1.1 * 145.9
    # llama3.1-405b README: 'tokens_per_sample': 684.68 = 5,691,783 / 8,313 of the per-sample file
    assert sets[L405B].output_tokens_mean == 684.68 == round(5_691_783 / 8313, 2)
    # v5.1 submission_checker.py: deepseek-r1 TOKENS_PER_SAMPLE 3949.648
    assert sets[R1].output_tokens_mean == 3949.648
    # llama3.1-8b: MLCommons states characters (gen_len), not tokens: no mean, only the SUT's cap
    assert sets[L8B].output_tokens_mean is None and sets[L8B].mean_tokens("output") is None
    # the reference SUTs' caps: SUT.py max_new_tokens 1024, SUT_VLLM.py max_tokens 2000 / 128, MAX_OSL 32 * 1024
    limits = {MIXTRAL: 1024, L405B: 2000, L8B: 128, R1: 32 * 1024}
    for code, cap in limits.items():
        assert "output_tokens_limit" in sets[code].sources
        mean = sets[code].output_tokens_mean
        assert mean is None or mean < cap
    # processed prompts stay under each benchmark's limit: 405b's 8,313 long-context prompts under 20k tokens
    longest = sets[L405B].input_tokens_max
    assert longest is not None and longest < 20000


@pytest.mark.parametrize(
    ("code", "samples"),
    # loadgen/mlperf.conf (v5.1 75f297d): <model>.*.performance_sample_count_override
    [(MIXTRAL, 15000), (L405B, 8313), (L8B, 13368), (R1, 4388), (OPENORCA, 24576)],
)
def test_each_benchmark_has_mlperf_confs_server_rules(code, samples):
    rules = LOADGEN_SERVER_RULES[code]
    # *.Server.min_duration = 600000 ms; <model>.*.sample_concatenate_permutation = 1; test_settings.h default 100
    assert (rules.min_duration_s, rules.min_query_count, rules.equal_issue) == (600.0, 100, True)
    assert rules.performance_sample_count == samples == load_datasets()[code].samples


@pytest.mark.parametrize(
    ("base", "preset", "code", "layout"),
    [
        ("MLP-01", "mixtral-8x7b", MIXTRAL, {"replicas": "4", "tp": "2"}),
        ("MLP-03", "llama-3.1-405b", L405B, {"replicas": "1", "tp": "8"}),
        (
            "MLP-03",
            "deepseek-v3",
            R1,
            {"replicas": "1", "tp": "8"},
        ),  # DeepSeek-R1 is DeepSeek-V3's architecture
    ],
)
def test_an_offline_row_of_each_benchmark_is_priced_with_its_data_sets_means(base, preset, code, layout):
    ds = load_datasets()[code]
    case = row_case(benchmark_row(base, preset, code, **layout))
    assert case.workload is not None
    assert case.workload.input_tokens == round(ds.input_tokens_mean)
    assert case.workload.output_tokens == round(ds.output_tokens_mean or 0)
    assert any(f"input_tokens_mean={ds.input_tokens_mean:g} (blank)" in a and code in a for a in case.assumed)
    assert any(f"output_tokens_mean={ds.output_tokens_mean:g} (blank)" in a for a in case.assumed)
    values = case_predictions(case, load_calibration("default"))
    assert values["output_tokens_per_s"] > 0
    # tokens over requests: the output length priced is the data set's
    assert values["output_tokens_per_s"] / values["requests_per_s"] == pytest.approx(
        case.workload.output_tokens, rel=1e-6
    )


def test_a_llama31_8b_row_takes_its_input_mean_and_needs_its_own_output_length():
    row = benchmark_row("MLP-01", "llama-3.1-8b", L8B, replicas="8", tp="1")
    with pytest.raises(Unexpressible, match=f"data set {L8B} states no mean output length"):
        row_workload(row, [])
    assumed: list[str] = []
    workload = row_workload(row | {"output_tokens_mean": "100"}, assumed)
    assert workload.input_tokens == round(11_639_915 / 13368) == 871 and workload.output_tokens == 100


def test_a_mixtral_server_row_runs_whole_permutations_of_its_15000_samples():
    # 70.98/s x 600 s = 42,588 arrivals, padded to whole permutations of 15,000: 3 x 15,000
    row = benchmark_row("MLP-02", "mixtral-8x7b", "mlperf-mixtral-8x7b")
    assumed: list[str] = []
    assert row_workload(row, assumed).num_requests == 45000
    assert loadgen_rules(row) is LOADGEN_SERVER_RULES[MIXTRAL]
    assert any("num_requests=45000 (blank): the queries MLPerf LoadGen schedules" in a for a in assumed)


@pytest.mark.parametrize(
    ("code", "expected", "why"),
    [
        ("mlperf-llama2-70b", OPENORCA, "is an alias of"),
        ("OpenOrca-MLPerf", OPENORCA, "is an alias of"),
        ("MLPerf-Llama2-70B-OpenOrca", OPENORCA, "in other letter case"),
        ("mlperf-llama2-70b-interactive-openorca", OPENORCA, "names MLPerf benchmark llama2-70b"),
        ("mlperf-llama-3.1-8b-cnn-dailymail", L8B, "names MLPerf benchmark llama3.1-8b"),
        ("mlperf-llama3_1-405b-interactive", L405B, "names MLPerf benchmark llama3.1-405b"),
        ("mlperf-deepseek-r1-aime-math500", R1, "names MLPerf benchmark deepseek-r1"),
        ("mlperf-mixtral-8x7b-orca", MIXTRAL, "names MLPerf benchmark mixtral-8x7b"),
    ],
)
def test_a_code_a_collector_may_write_finds_the_data_set_and_says_why(code, expected, why):
    found = resolve_dataset(code)
    assert found is not None and found[0].code == expected and why in (found[1] or "")
    assumed: list[str] = []
    assert named_dataset({"input_tokens_dist": code}, "input", assumed) == load_datasets()[expected]
    assert assumed and expected in assumed[0] and why in assumed[0]


def test_the_own_code_resolves_silently():
    assumed: list[str] = []
    assert named_dataset({"input_tokens_dist": R1}, "input", assumed) == load_datasets()[R1]
    assert assumed == []


@pytest.mark.parametrize(
    "code",
    [
        "sharegpt",  # not MLPerf, not an alias
        "llama3.1-8b-cnndm",  # a model name outside an mlperf- code
        "mlperf-gpt-j-cnn-dailymail",  # gpt-j: no published input length, not in the table
        "mlperf-llama2-70b-vs-mixtral-8x7b",  # two benchmarks: ambiguous
        "",
        "fixed",
    ],
)
def test_a_code_naming_no_single_data_set_reads_none(code):
    assert resolve_dataset(code) is None
    assert named_dataset({"input_tokens_dist": code}, "input") is None
    assert loadgen_rules({"input_tokens_dist": code}) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('aliases = ["d"]\n', "alias 'd' already names \\[d\\]"),
        ('aliases = "e"\n', "aliases = 'e'; must be a list of codes"),
        ("model = 3\n", "model = 3; must be a benchmark model name"),
    ],
)
def test_a_bad_alias_or_model_names_the_file_the_data_set_and_the_key(tmp_path, extra, message):
    entry = 'name = "x"\nsamples = 10\ninput_tokens_mean = 5.0\n'
    sources = '[{0}.sources]\nsamples = "s"\ninput_tokens_mean = "s"\n'
    path = tmp_path / "datasets.toml"
    path.write_text(f"[d]\n{entry}{sources.format('d')}[e]\n{entry}{extra}{sources.format('e')}")
    with pytest.raises(ValueError, match=message) as err:
        load_datasets(path)
    assert str(path) in str(err.value) and "[e]" in str(err.value)
