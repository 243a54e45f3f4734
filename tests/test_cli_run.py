"""``workbench run`` through the real console script: JSON output, measured estimate, clear errors, outputs
written only after a successful run and never over a file that appeared meanwhile, the worker cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from workbench_backends.shrink import shrink_model

from tests.conftest import ROOT, run_cli
from workbench.presets.catalog import load_model
from workbench.presets.profile_table import read_profile

TINY_HF = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 256,
    "vocab_size": 512,
    "tie_word_embeddings": False,
}


@pytest.fixture()
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_HF))
    return path


def test_run_json_gives_measured_estimate_and_matching_loss(tiny_config: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    proc = run_cli(
        "run",
        "--model",
        str(tiny_config),
        "--layers",
        "2",
        "--hidden",
        "64",
        "--seq-len",
        "16",
        "--global-batch",
        "4",
        "--pp",
        "2",
        "--steps",
        "3",
        "--json",
        "--trace",
        str(trace),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["measured"]["measured"] is True and out["measured"]["backend"] == "real-run"
    assert out["timeline_problems"] == []
    for got, ref in zip(out["losses"], out["reference_losses"], strict=True):
        assert abs(got - ref) <= 1e-4 * abs(ref)
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("ph") == "X" and e["name"][1:2] in "FB") == 2 * 2 * 4


def test_too_few_layers_is_one_line_error(tiny_config: Path) -> None:
    proc = run_cli(
        "run",
        "--model",
        str(tiny_config),
        "--layers",
        "1",
        "--seq-len",
        "16",
        "--global-batch",
        "4",
        "--pp",
        "2",
        timeout=60,
    )
    assert proc.returncode != 0
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_existing_trace_file_is_not_overwritten(tiny_config: Path, tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("keep")
    proc = run_cli(
        "run",
        "--model",
        str(tiny_config),
        "--seq-len",
        "16",
        "--global-batch",
        "4",
        "--trace",
        str(trace),
        timeout=60,
    )
    assert proc.returncode != 0 and "--force" in proc.stderr
    assert trace.read_text() == "keep"


def test_shrink_is_the_profiles_rule_with_a_vocabulary_override() -> None:
    # One rule for `workbench run` and `workbench profile`: heads of at most 64, the GQA ratio kept, widths
    # scaled; so a run of a shrunk model finds the profile of the same shrunk model.
    base = load_model("llama-3.1-8b")  # 32 heads of 128, 8 kv heads, ffn 14336, hidden 4096
    small = shrink_model(base, num_layers=2, hidden_size=512, vocab_size=1000)
    assert (small.num_layers, small.hidden_size, small.vocab_size) == (2, 512, 1000)
    assert (small.head_dim, small.num_attention_heads, small.num_key_value_heads) == (64, 8, 2)
    assert small.ffn_hidden_size == 14336 * 512 // 4096
    assert small.name == "llama-3.1-8b-L2-H512-V1000"
    profiled = read_profile(ROOT / "profiles" / "measured" / "llama-3.1-8b-L2-H512-cpu-fp32")
    assert profiled.matches(shrink_model(base, num_layers=4, hidden_size=512), "host-cpu", "fp32")
    assert shrink_model(base) is base
    with pytest.raises(ValueError, match="--hidden"):
        shrink_model(base, hidden_size=100)
    with pytest.raises(ValueError, match="--vocab"):
        shrink_model(base, vocab_size=0)


def test_comparison_table_prints_the_core_figures(capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    from workbench_cli.run_cmd import print_comparison
    from workbench_widgets.sample import sample_estimate

    from workbench.estimate.compare import compare
    from workbench.specs.plan import ParallelPlan

    plan = ParallelPlan(pp=2, schedule="1f1b")
    predicted = sample_estimate(plan=plan, num_microbatches=4, forward_s=2e-3)
    measured = replace(
        sample_estimate(plan=plan, num_microbatches=4, forward_s=3e-3), backend="real-run", measured=True
    )
    cmp = compare(predicted, measured)
    print_comparison(cmp)
    out = capsys.readouterr().out
    assert f"{predicted.step_time_s * 1e3:.2f}" in out and f"{measured.step_time_s * 1e3:.2f}" in out
    assert f"{cmp['step_time_s']['error_frac'] * 100:+.1f} %" in out
    assert "tokens/s" in out and "peak memory per rank (MiB)" in out and "stage 1 B (ms)" in out


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_more_workers_than_the_machine_takes_is_one_line_naming_the_option(tiny_config: Path) -> None:
    proc = run_cli(
        "run",
        "--model",
        str(tiny_config),
        "--layers",
        "1000",
        "--seq-len",
        "16",
        "--global-batch",
        "4",
        "--pp",
        "1000",
        timeout=60,
    )
    assert proc.returncode == 1
    line = _one_line(proc.stderr)
    assert "--pp 1000 needs 1000 worker processes but this machine allows at most " in line
    assert "usable CPU cores" in line and "GiB per worker" in line


def test_output_that_appears_during_the_run_is_left_alone(tmp_path: Path) -> None:
    # --report appears while the run is going: nothing is written (not even --trace), the file is untouched,
    # no temporary file is left beside it, and the run folder is removed.
    from tests.test_run_safety import start_run, wait_for

    out = tmp_path / "out"
    out.mkdir()
    trace, report = out / "t.json", out / "r.html"
    proc, tmpdir = start_run(tmp_path, "--trace", str(trace), "--report", str(report), steps=2)
    wait_for("folder", proc, tmpdir)
    report.write_text("mine")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    line = _one_line(err)
    assert f"{report} appeared while the command ran" in line and "--force" in line
    assert report.read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["r.html"]
    assert list(tmpdir.glob("wb-run-*")) == []


def test_failed_run_writes_no_output_and_leaves_no_folder(tmp_path: Path) -> None:
    from tests.test_run_safety import processes_of, start_run

    trace, report = tmp_path / "t.json", tmp_path / "r.html"
    proc, tmpdir = start_run(tmp_path, "--timeout", "1", "--trace", str(trace), "--report", str(report))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    line = _one_line(err)
    assert "real run failed: the run did not finish within 1 s and was stopped" in line
    assert "rerun with --run-dir DIR to keep the logs" in line
    assert not trace.exists() and not report.exists()
    assert list(tmpdir.glob("wb-run-*")) == [] and not processes_of(tmpdir)


def test_failure_message_carries_the_failing_line_instead_of_a_removed_path() -> None:
    from workbench_backends.launch import LaunchError
    from workbench_cli.run_cmd import failure_message

    tb = (
        "rank 1:\nTraceback (most recent call last):\n"
        '  File "/w/backends/run_worker.py", line 70, in main\n    result = run(config, rank)\n'
        '  File "/w/backends/real_stages.py", line 12, in forward\n    x / 0\n'
        "ZeroDivisionError: division by zero"
    )
    summary = "rank 1 failed: ZeroDivisionError: division by zero"
    exc = LaunchError(summary, rank=1, traceback_text=tb, summary=summary)
    assert failure_message(exc, None) == (
        f"real run failed: {summary} (raised in forward at /w/backends/real_stages.py:12); "
        "rerun with --run-dir DIR to keep the logs"
    )
    assert failure_message(exc, "runs/a").endswith("; logs and tracebacks in runs/a")


def test_bf16_without_a_gpu_is_one_line_error(tiny_config: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU host runs bf16")
    tiny = ("--model", str(tiny_config), "--seq-len", "16", "--global-batch", "4")
    proc = run_cli(
        "run",
        *tiny,
        "--dtype",
        "bf16",
        timeout=60,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "--dtype bf16 runs on CUDA devices only" in proc.stderr


def test_bf16_precision_is_autocast_over_fp32_states() -> None:
    """bf16 runs matmuls in bf16 under autocast while the parameters (and so gradients and AdamW states) stay
    fp32; fp32 changes nothing; other dtypes are refused."""
    import torch
    from workbench_backends.real_stages import precision

    from workbench.specs.plan import Workload

    weight = torch.nn.Linear(4, 4)
    with precision(Workload(seq_len=8, global_batch_size=1, dtype="bf16"), "cpu"):
        out = weight(torch.ones(2, 4))
    assert out.dtype == torch.bfloat16 and weight.weight.dtype == torch.float32
    with precision(Workload(seq_len=8, global_batch_size=1, dtype="fp32"), "cpu"):
        assert weight(torch.ones(2, 4)).dtype == torch.float32
    with pytest.raises(ValueError, match="fp32 or bf16"):
        precision(Workload(seq_len=8, global_batch_size=1, dtype="fp16"), "cpu")
