"""``workbench compare``: real run outputs read back and laid beside the prediction of an export.

The fixtures in tests/fixtures/launch/ are written in the formats the stacks print (each cites the source line):
megatron_pretrain_gpt.log (Megatron-LM core_v0.19.0 training_log and report_memory), torchtitan_train.log
(torchtitan v0.2.2 MetricsProcessor.log, with its ANSI colours), vllm_bench_serve.json (the keys of vLLM's
``vllm bench serve --save-result``, vllm/benchmarks/serve.py BenchmarkMetrics) and sglang_bench_serving.jsonl
(SGLang's bench_serving.py result lines). Their numbers are made up; the expected values below are computed
here from those numbers, not read back from the reader.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from workbench_cli import cli

from workbench.launch.runlogs import read_run_output
from workbench.validate import read_rows

FIXTURES = Path(__file__).parent / "fixtures" / "launch"


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_megatron_log() -> None:
    m = read_run_output(_text("megatron_pretrain_gpt.log"), "megatron.log")
    steady_ms = [2001.0, 2003.0, 1999.0, 2000.0, 1997.0]  # iterations 3..7: the first two are warm-up
    assert m.source == "megatron" and m.num_steps == 5
    assert m.step_time_s == pytest.approx(statistics.fmean(steady_ms) / 1e3)
    assert m.tflops_per_device == pytest.approx(statistics.fmean([401.0, 400.6, 401.4, 401.0, 401.8]))
    assert m.peak_memory_bytes == pytest.approx(52345.25 * 2**20)


def test_torchtitan_log() -> None:
    m = read_run_output(_text("torchtitan_train.log"), "titan.log")
    tps = [7001, 7010, 6990, 7003]
    assert m.source == "torchtitan" and m.num_steps == 4
    assert m.tokens_per_s_per_device == pytest.approx(statistics.fmean(tps))
    assert m.mfu == pytest.approx(statistics.fmean(round(t * 0.0562 / 989 * 100, 2) for t in tps) / 100)
    assert m.peak_memory_bytes == pytest.approx(61.25 * 2**30)


def test_serving_benchmark_json() -> None:
    v = read_run_output(_text("vllm_bench_serve.json"), "vllm.json")
    assert (v.source, v.ttft_s, v.tpot_s, v.output_tokens_per_s) == ("vllm-bench", 1.8302, 0.0381, 595.3)
    s = read_run_output(_text("sglang_bench_serving.jsonl"), "sglang.jsonl")
    assert (s.source, s.ttft_s, s.tpot_s) == ("sglang-bench", 1.7, 0.036)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\nworld\n", r"x.log: no known run output: expected Megatron-LM"),
        (
            _text("megatron_pretrain_gpt.log").split(" [2026-12-01 10:00:03")[0],  # cut after iteration 2
            r"x.log: 2 iteration line\(s\); expected more",
        ),
        ('{"mean_ttft_ms": 12.0, "mean_tpot', r"x.log:1: not JSON .*truncated"),
        (
            '{"mean_ttft_ms": 12.0, "output_throughput": 3}',
            r"x.log: a serving benchmark result needs .* missing mean_tpot_ms",
        ),
        (
            '{"mean_ttft_ms": "fast", "mean_tpot_ms": 1, "output_throughput": 3}',
            r"mean_ttft_ms must be a number",
        ),
        (
            _text("megatron_pretrain_gpt.log").replace("(ms): 2003.0 |", "(ms): n/a |"),
            r"x.log:22: expected ' iteration N/M \| ... elapsed time per iteration \(ms\)",
        ),
    ],
)
def test_bad_run_output_is_refused_with_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_run_output(text, "x.log")


def _export(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "export"
    args = [
        "export",
        "--to",
        "megatron-core",
        "--out",
        str(out),
        "--model",
        "llama-3.1-8b",
        "--cluster",
        "dgx-h100",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--tp",
        "2",
        "--framework",
        "megatron-core-2024",
        *extra,
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return out


def test_cli_compare_against_an_export_and_append_a_validation_row(tmp_path: Path) -> None:
    out = _export(tmp_path)
    log = out / "run.log"
    log.write_text(_text("megatron_pretrain_gpt.log"))
    result = CliRunner().invoke(cli, ["compare", str(log), "--json"])  # finds prediction.json beside the log
    assert result.exit_code == 0, result.output
    rows = {r["metric"]: r for r in json.loads(result.output)["rows"]}
    predicted = json.loads((out / "prediction.json").read_text())["summary"]
    step = rows["step_time_s"]
    assert step["predicted"] == pytest.approx(predicted["step_time_s"])
    assert step["error_frac"] == pytest.approx((predicted["step_time_s"] - 2.0) / 2.0)
    assert set(rows) == {"step_time_s", "tflops_per_device", "peak_memory_bytes"}
    csv = tmp_path / "own.csv"
    for _ in range(2):
        r = CliRunner().invoke(cli, ["compare", str(log), "--append-row", str(csv)])
        assert r.exit_code == 0, r.output
    read = read_rows(csv)  # the project's validation reader accepts the rows (schema, ranges, unique ids)
    assert [row["id"] for row in read] == ["OWN-001", "OWN-002"]
    assert float(read[0]["measured_step_time_s"]) == pytest.approx(2.0)
    assert (read[0]["tp"], read[0]["dp"], read[0]["num_devices"], read[0]["device"]) == (
        "2",
        "4",
        "8",
        "h100-sxm5-80gb",
    )


def test_a_log_of_another_model_or_plan_is_refused_at_its_line(tmp_path: Path) -> None:
    """The set-up the run printed (Megatron's argument dump, torchtitan's model line) must be the prediction's."""
    out = _export(tmp_path, "--pp", "2")  # the fixture run is tp2 pp1: 32 layers, dp 4
    log = out / "run.log"
    log.write_text(_text("megatron_pretrain_gpt.log"))
    r = CliRunner().invoke(cli, ["compare", str(log)])
    assert r.exit_code == 1, r.output
    line = (
        _text("megatron_pretrain_gpt.log")
        .splitlines()
        .index(
            next(
                x
                for x in _text("megatron_pretrain_gpt.log").splitlines()
                if x.startswith("  data_parallel_size")
            )
        )
        + 1
    )
    assert f"run.log:{line}: the run has dp = 4; the prediction is for dp = 2" in r.output
    other = tmp_path / "other"
    r = CliRunner().invoke(
        cli,
        [
            "export",
            "--to",
            "torchtitan",
            "--out",
            str(other),
            "--model",
            "llama-3.1-70b",
            "--cluster",
            "dgx-h100",
            "--nodes",
            "8",
            "--seq-len",
            "4096",
            "--global-batch",
            "64",
            "--zero",
            "3",
        ],
    )
    assert r.exit_code == 0, r.output
    titan = other / "train.log"
    titan.write_text(_text("torchtitan_train.log"))
    r = CliRunner().invoke(cli, ["compare", str(titan)])
    line = _text("torchtitan_train.log").splitlines().index('  "dim": 4096,') + 1
    assert r.exit_code == 1
    assert (
        f"train.log:{line}: the run has hidden_size = 4096; the prediction is for hidden_size = 8192"
        in r.output
    )


def test_cli_compare_refuses_another_model_or_kind(tmp_path: Path) -> None:
    out = _export(tmp_path)
    vllm = tmp_path / "vllm.json"
    vllm.write_text(_text("vllm_bench_serve.json"))
    r = CliRunner().invoke(cli, ["compare", str(vllm), "--prediction", str(out / "prediction.json")])
    assert (
        r.exit_code == 1
        and "a serving run (vllm-bench) cannot be compared with a training prediction" in r.output
    )
    serve = tmp_path / "serve"
    r = CliRunner().invoke(
        cli,
        [
            "serve",
            "export",
            "--engine",
            "vllm-v1",
            "--out",
            str(serve),
            "--model",
            "llama-3.1-8b",
            "--cluster",
            "dgx-h100",
            "--tp",
            "8",
            "--input-tokens",
            "1000",
            "--output-tokens",
            "200",
            "--num-requests",
            "16",
        ],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["compare", str(vllm), "--prediction", str(serve / "prediction.json")])
    assert r.exit_code == 1 and "the run is of model 'meta-llama/Llama-3.1-70B'" in r.output
    r = CliRunner().invoke(cli, ["compare", str(vllm), "--prediction", str(vllm)])
    assert r.exit_code == 1 and "not a prediction.json written by `workbench export`" in r.output


def test_workbench_run_record() -> None:
    """tests/fixtures/launch/workbench_run.json: `workbench run --json` of the tiny pp=2 model with --nnodes 2 on
    this machine (2026-12-07), trimmed to its measured summary and losses."""
    from workbench.launch.compare import compare_run

    data = json.loads(_text("workbench_run.json"))
    m = read_run_output(_text("workbench_run.json"), "run.json")
    summary = data["measured"]
    assert m.source == "workbench-run" and m.step_time_s == summary["step_time_s"]
    assert m.tokens_per_s_per_device == pytest.approx(summary["tokens_per_s"] / summary["num_devices"])
    prediction = {
        "kind": "training",
        "model_ref": {"name": summary["model"]},
        "summary": {
            "model": summary["model"],
            "num_devices": 2,
            "step_time_s": 0.25,
            "tokens_per_s": 400.0,
            "mfu": 0.004,
        },
    }
    rows = {r.metric: r for r in compare_run(m, prediction)}
    assert rows["step_time_s"].error_frac == pytest.approx(
        (0.25 - summary["step_time_s"]) / summary["step_time_s"]
    )
    assert rows["tokens_per_s_per_device"].predicted == 200.0
    with pytest.raises(ValueError, match="the run is of model 'c-L2-H64'"):
        compare_run(
            m, {**prediction, "model_ref": {"name": "llama-3.1-8b"}, "summary": {"model": "llama-3.1-8b"}}
        )


def test_a_benchmark_of_other_lengths_is_refused_and_failed_requests_are_said(tmp_path: Path) -> None:
    """The fixture's 64 completed requests carry 64,000 prompt and 12,800 output tokens: 1,000 and 200 per request,
    the lengths of the prediction below; the same run read against a prediction for 2,000-token prompts is
    another workload and is refused, and requests vLLM counts as failed are said beside the table."""
    data = json.loads(_text("vllm_bench_serve.json"))
    v = read_run_output(json.dumps(data), "vllm.json")
    assert (v.mean_input_tokens, v.mean_output_tokens, v.notes) == (1000.0, 200.0, ())
    serve = {}
    for prompt in (1000, 2000):
        serve[prompt] = tmp_path / f"serve{prompt}"
        r = CliRunner().invoke(
            cli,
            ["serve", "export", "--engine", "vllm-v1", "--out", str(serve[prompt]), "--model", "llama-3.1-70b",
             "--cluster", "dgx-h100", "--tp", "8", "--input-tokens", str(prompt), "--output-tokens", "200",
             "--num-requests", "16"],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
    run = tmp_path / "vllm.json"
    run.write_text(json.dumps(data | {"failed": 3}))
    r = CliRunner().invoke(cli, ["compare", str(run), "--prediction", str(serve[1000] / "prediction.json")])
    assert r.exit_code == 0, r.output
    assert "note: 3 request(s) failed: the means are over the 64 completed" in r.output
    r = CliRunner().invoke(cli, ["compare", str(run), "--prediction", str(serve[2000] / "prediction.json")])
    assert r.exit_code == 1
    assert (
        "average 1,000 prompt tokens; the prediction is for 2,000 (input_tokens); allowed: within 10%"
        in r.output
    )
