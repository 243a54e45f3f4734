"""``workbench export``: launch files checked by the stacks' own parsers where they install on CPU (torchtitan's
ConfigManager, DeepSpeed's DeepSpeedConfig) and otherwise against the option names of a pinned release
(Megatron-LM's pretrain_gpt.py parser, Megatron-Bridge's ConfigContainer fields: tests/fixtures/launch/)."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from workbench_backends.analytic import AnalyticBackend
from workbench_cli import cli

from workbench.launch.export import export_training
from workbench.launch.stacks import ExportRefused, ModelRef, stack_for_framework
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.specs.plan import RANK_ORDERS, ParallelPlan, Workload

FIXTURES = Path(__file__).parent / "fixtures" / "launch"
MCORE = load_framework("megatron-core-2024")


def _megatron_parser(fixture: str = "megatron_lm_core_r0.19.0_args.txt") -> dict[str, tuple[str, list[str]]]:
    """Flag -> (flag|value|list, choices) of a pinned parser's option list (default: Megatron-LM core_v0.19.0's
    pretrain_gpt.py; sglang_0.5.23_server_args.txt: SGLang's launch_server)."""
    out = {}
    for line in (FIXTURES / fixture).read_text().splitlines():
        if line and not line.startswith("#"):
            name, kind, choices = line.split("\t")[:3]  # vLLM's fixtures add a type column
            out[name] = (kind, choices.split(",") if choices else [])
    return out


def _human_readable_int(value: str) -> int:
    """vLLM's ``human_readable_int`` (vllm/utils/argparse_utils.py): an integer, or one with a k/M/G/T suffix."""
    import re

    assert re.fullmatch(r"\d+|\d+(\.\d+)?[kKmMgGtT]", value), value
    return 0


_VALUE_TYPES: dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "human_readable_int": _human_readable_int,
    "loads": json.loads,
    "parse_dataclass": json.loads,  # vllm/engine/arg_utils.py parse_dataclass: a JSON object of the config's fields
}
"""The Python check of each argparse type a vLLM option table names (optional:NAME also takes "None")."""


def _parse_vllm(tokens: list[str], fixture: str, what: str) -> dict[str, list[str]]:
    """Parse ``tokens`` against a vLLM-family option table (flags, kinds, choices), then convert each value with
    the check of the type the real parser gives it (``int`` for the sizes, ``float`` for the memory share, JSON for
    config objects); fails on a type the table names that has no check here."""
    parsed = _parse_megatron(tokens, _megatron_parser(fixture), what)
    types = {}
    for line in (FIXTURES / fixture).read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, _, kind = line.split("\t")
            types[name] = kind
    for flag, values in parsed.items():
        kind = types[flag]
        optional = kind.startswith("optional:")
        kind = kind.removeprefix("optional:")
        for v in values:
            if optional and v in ("", "None"):
                continue
            assert kind in _VALUE_TYPES or not kind, f"{flag}: no check for vLLM's type {kind!r}"
            if kind:
                try:
                    _VALUE_TYPES[kind](v)
                except ValueError as e:
                    raise AssertionError(f"{flag} {v!r} is not a {kind} ({what})") from e
    return parsed


def _estimate(
    model: str,
    cluster: str,
    nodes: int,
    *,
    seq: int = 4096,
    gbs: int = 64,
    dtype: str = "bf16",
    framework: Any = MCORE,
    **plan: Any,
) -> Any:
    # framework None: the any-feature profile (every schedule and lever), to see what a stack refuses
    backend = AnalyticBackend(framework=framework.id if framework is not None else "generic")
    cl = load_cluster(cluster, num_nodes=nodes)
    return backend.estimate(
        load_model(model), cl, Workload(seq_len=seq, global_batch_size=gbs, dtype=dtype), ParallelPlan(**plan)
    )


def _parse_megatron(
    tokens: list[str], parser: dict[str, tuple[str, list[str]]], what: str = "pretrain_gpt.py at core_v0.19.0"
) -> dict[str, list[str]]:
    """Parse ``tokens`` as argparse would with the parser's option kinds; fails on an unknown flag, a value where
    none is taken, a missing value, or a value outside the choices."""
    parsed: dict[str, list[str]] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        assert flag in parser, f"{flag} is not an option of {what}"
        kind, choices = parser[flag]
        values = []
        i += 1
        while i < len(tokens) and not tokens[i].startswith("--"):
            values.append(tokens[i])
            i += 1
        expected = {"flag": (0, 0), "value": (1, 1), "list": (1, 99)}[kind]
        assert expected[0] <= len(values) <= expected[1], f"{flag} ({kind}) got {values}"
        for v in values:
            assert not choices or v in choices, f"{flag} {v} not in {choices}"
        parsed[flag] = values
    return parsed


def _check_bash(files: dict[str, str], tmp_path: Path) -> None:
    """bash itself parses the launch scripts (``bash -n``: syntax only, nothing runs)."""
    for name in ("launch.sh", "launch.sbatch", "serve.sh"):
        if name in files:
            path = tmp_path / name
            path.write_text(files[name])
            checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
            assert checked.returncode == 0, (name, checked.stderr)


def _launch_tokens(script: str) -> list[str]:
    """The pretrain_gpt.py arguments of launch.sh after the torchrun options (bash arrays left out)."""
    body = script[script.index("torchrun") :].replace("\\\n", " ")
    words = shlex.split(body)
    start = words.index("$MEGATRON_LM/pretrain_gpt.py") + 1
    return [w for w in words[start:] if not w.endswith("[@]}")]


MEGATRON_CASES = {
    "dense-interleaved-usp-hsdp": dict(
        model="llama-3.1-70b",
        cluster="dgx-h100",
        nodes=8,
        seq=16384,
        gbs=64,
        dp=2,
        tp=4,
        pp=2,
        cp=4,
        ulysses=2,
        vpp=5,
        schedule="interleaved-1f1b",
        zero_stage=1,
        zero_shard=2,
        sequence_parallel=True,
        recompute="full",
        recompute_num_layers=2,
        rank_order=RANK_ORDERS["tp-cp-ep-pp-dp"],
    ),
    "moe-ep-fp8": dict(
        model="mixtral-8x7b",
        cluster="dgx-h100",
        nodes=2,
        dtype="fp8",
        dp=4,
        tp=2,
        pp=2,
        ep=4,
        etp=1,
        sequence_parallel=True,
        zero_stage=1,
        recompute="selective",
    ),
    "uneven-stages": dict(model="llama-3.1-70b", cluster="dgx-h100", nodes=3, dp=1, tp=8, pp=3, gbs=24),
    "fp8-recipe-chosen": dict(  # the plan's FP8 recipe, among those Megatron-Core offers, over the profile's own
        model="llama-3.1-70b",
        cluster="dgx-h100",
        nodes=8,
        dtype="fp8",
        dp=2,
        tp=4,
        pp=8,
        zero_stage=1,
        sequence_parallel=True,
        fp8_recipe="blockwise",
    ),
    "mla-moe-mtp": dict(
        model="deepseek-v3",
        cluster="dgx-h100",
        nodes=16,
        dp=8,
        pp=16,
        ep=8,
        gbs=256,
        zero_stage=1,
        recompute="full",
    ),
}


@pytest.mark.parametrize("case", MEGATRON_CASES)
def test_megatron_args_parse_with_the_pinned_parser(case: str, tmp_path: Path) -> None:
    kw = dict(MEGATRON_CASES[case])
    est = _estimate(kw.pop("model"), kw.pop("cluster"), kw.pop("nodes"), **kw)
    folder = export_training(
        est, "megatron-core", ModelRef(name=est.model.name, hf_id="org/m"), framework=MCORE
    )
    _check_bash(folder.files, tmp_path)
    parser = _megatron_parser()
    args = _parse_megatron(folder.files["pretrain_gpt.args"].splitlines(), parser)
    script = folder.files["launch.sh"]
    _parse_megatron(_launch_tokens(script), parser)
    plan, model = est.plan, est.model
    assert args["--tensor-model-parallel-size"] == [str(plan.tp)]
    assert args["--pipeline-model-parallel-size"] == [str(plan.pp)]
    assert args["--global-batch-size"] == [str(est.workload.global_batch_size)]
    assert args["--num-layers"] == [str(model.num_layers)]
    if case == "dense-interleaved-usp-hsdp":
        assert args["--num-virtual-stages-per-pipeline-rank"] == ["5"]
        assert args["--cp-comm-type"] == ["a2a+p2p"]
        assert args["--hierarchical-context-parallel-sizes"] == ["2", "2"]
        assert args["--num-distributed-optimizer-instances"] == ["4"]  # dp*cp / zero_shard = 8 / 2
        assert args["--recompute-method"] == ["block"] and args["--recompute-num-layers"] == ["2"]
        assert "--use-tp-pp-dp-mapping" in args and "--overlap-param-gather" in args
    if case == "moe-ep-fp8":
        assert args["--expert-model-parallel-size"] == ["4"] and args["--expert-tensor-parallel-size"] == [
            "1"
        ]
        assert args["--fp8-recipe"] == ["tensorwise"]  # the profile's current scaling
        assert args["--num-experts"] == ["8"] and args["--moe-router-topk"] == ["2"]
    if case == "fp8-recipe-chosen":
        assert args["--fp8-recipe"] == ["blockwise"]
    if case == "mla-moe-mtp":  # 61 layers + 1 MTP block on 16 stages: 3, 14 x 4, and 3 less the MTP block
        assert args["--decoder-first-pipeline-num-layers"] == ["3"]
        assert args["--decoder-last-pipeline-num-layers"] == ["2"]
        assert args["--mtp-num-layers"] == ["1"] and "--multi-latent-attention" in args
        assert args["--moe-router-num-groups"] == ["8"] and args["--moe-router-group-topk"] == ["4"]
        assert args["--moe-layer-freq"] == ["([0]*3+[1]*58)"]
    if case == "uneven-stages":  # 80 layers on 3 stages: 27, 27, 26 (the spare layers off the head's stage)
        assert args["--decoder-first-pipeline-num-layers"] == ["27"]
        assert args["--decoder-last-pipeline-num-layers"] == ["26"]


def test_megatron_refuses_what_it_cannot_run() -> None:
    est = _estimate("llama-3.1-8b", "dgx-h100", 1, dp=2, pp=4, gbs=32, schedule="zb-h1", framework=None)
    with pytest.raises(ExportRefused, match=r"megatron-core cannot run schedule=zb-h1: it runs 1f1b"):
        export_training(est, "megatron-core", ModelRef(name="m"))
    est = _estimate("llama-3.1-8b", "dgx-h100", 1, dp=8, loss_chunks=4, framework=None)
    with pytest.raises(ExportRefused, match="loss_chunks=4"):
        export_training(est, "megatron-bridge", ModelRef(name="m"))
    est = _estimate("llama-3.1-8b", "dgx-h100", 3, dp=1, tp=4, pp=6, gbs=24)  # 32 layers: 5/5/6/6/5/5
    with pytest.raises(
        ExportRefused, match="cannot run pipeline stages=5/5/6/6/5/5: it sets the first and last"
    ):
        export_training(est, "megatron-core", ModelRef(name="m"), framework=MCORE)


def test_bridge_overrides_are_config_container_fields(tmp_path: Path) -> None:
    kw = dict(MEGATRON_CASES["dense-interleaved-usp-hsdp"])
    est = _estimate(kw.pop("model"), kw.pop("cluster"), kw.pop("nodes"), **kw)
    folder = export_training(est, "megatron-bridge", ModelRef(name="llama-3.1-70b"), framework=MCORE)
    _check_bash(folder.files, tmp_path)
    known = {
        line
        for line in (FIXTURES / "megatron_bridge_v0.6.0_fields.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    values = {}
    for line in folder.files["overrides.txt"].splitlines():
        key, value = line.split("=", 1)
        if key == "mixed_precision":
            assert f"mixed_precision={value}" in known
        else:
            assert key in known, f"{key} is no ConfigContainer field of Megatron-Bridge v0.6.0"
        values[key] = value
    assert values["model.virtual_pipeline_model_parallel_size"] == "5"
    assert values["model.hierarchical_context_parallel_sizes"] == "[2,2]"
    assert values["ddp.num_distributed_optimizer_instances"] == "4"
    assert values["dist.use_tp_pp_dp_mapping"] == "true"
    assert values["train.global_batch_size"] == "64"


def test_partial_activation_offload_exports_as_megatron_and_bridge_run_it(tmp_path: Path) -> None:
    """The Megatron-Bridge 25.11 GB200 Llama 3 70B FP8-CS recipe's layout (FSDP, 40 layers offloaded): the
    pinned parser takes ``--cpu-offloading-num-layers 40`` and Bridge's override sets the model's
    ``cpu_offloading`` fields as its perf scripts do (_set_recompute_overrides); what TransformerConfig refuses
    (every layer, pp > 1, recompute) is refused by name."""
    kw = dict(dp=64, zero_stage=3, micro_batch_size=2, offload_activations=True, offload_activation_layers=40)
    est = _estimate("llama-3.1-70b", "gb200-nvl72", 16, seq=8192, gbs=256, dtype="fp8", **kw)
    folder = export_training(est, "megatron-core", ModelRef(name="m", hf_id="org/m"), framework=MCORE)
    args = _parse_megatron(folder.files["pretrain_gpt.args"].splitlines(), _megatron_parser())
    assert args["--cpu-offloading-num-layers"] == ["40"] and "--recompute-granularity" not in args
    bridge = export_training(est, "megatron-bridge", ModelRef(name="llama-3.1-70b"), framework=MCORE)
    known = set((FIXTURES / "megatron_bridge_v0.6.0_fields.txt").read_text().splitlines())
    values = dict(line.split("=", 1) for line in bridge.files["overrides.txt"].splitlines())
    offload = {k: v for k, v in values.items() if "offload" in k}
    assert offload == {
        "model.cpu_offloading_num_layers": "40",
        "model.cpu_offloading": "true",
        "model.cpu_offloading_weights": "false",
    }
    assert set(offload) <= known
    refusals = {
        "set offload_activation_layers": dict(dp=8, offload_activations=True),
        "without pipeline parallelism": dict(
            dp=2, pp=4, gbs=32, offload_activations=True, offload_activation_layers=2
        ),
        "without activation recompute": dict(
            dp=8, recompute="full", offload_activations=True, offload_activation_layers=2
        ),
        r"must be below num_layers \(32\)": dict(
            dp=8, offload_activations=True, offload_activation_layers=32
        ),
    }
    for why, plan in refusals.items():
        est = _estimate("llama-3.1-8b", "dgx-h100", 1, **{"gbs": 64, **plan})
        with pytest.raises(ExportRefused, match=why):
            export_training(est, "megatron-core", ModelRef(name="m"), framework=MCORE)


@pytest.fixture
def torchtitan_config_manager() -> Any:
    """torchtitan's ConfigManager, imported without torchtitan/__init__ (which loads Triton MoE kernels)."""
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or spec.submodule_search_locations is None:
        pytest.skip("torchtitan is not installed (pip install '.[launch-check]')")
    saved = {k: v for k, v in sys.modules.items() if k == "torchtitan" or k.startswith("torchtitan.")}
    package = types.ModuleType("torchtitan")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["torchtitan"] = package
    try:
        from torchtitan.config import ConfigManager

        yield ConfigManager
    finally:
        for k in [k for k in sys.modules if k == "torchtitan" or k.startswith("torchtitan.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@pytest.mark.parametrize(
    "plan",
    [
        dict(
            dp=8,
            tp=4,
            pp=2,
            schedule="interleaved-1f1b",
            vpp=2,
            zero_stage=3,
            sequence_parallel=True,
            recompute="selective",
            dtype="fp8",
        ),
        dict(dp=16, tp=2, pp=1, cp=2, zero_stage=3, zero_shard=8, sequence_parallel=True, recompute="full"),
        dict(dp=64, zero_stage=0),
    ],
)
def test_torchtitan_job_parses_with_its_config_manager(
    plan: dict[str, Any], tmp_path: Path, torchtitan_config_manager: Any
) -> None:
    config_manager = torchtitan_config_manager
    plan = dict(plan)
    dtype = plan.pop("dtype", "bf16")
    tt = load_framework("torchtitan-2024")
    est = _estimate("llama-3.1-8b", "dgx-h100", 8, gbs=128, dtype=dtype, framework=tt, **plan)
    folder = export_training(
        est, "torchtitan", ModelRef(name="llama-3.1-8b", hf_id="meta-llama/Llama-3.1-8B"), framework=tt
    )
    _check_bash(folder.files, tmp_path)
    path = tmp_path / "job.toml"
    path.write_text(folder.files["job.toml"])
    job = config_manager().parse_args(["--job.config_file", str(path)])
    p = est.plan
    par = job.parallelism
    assert par.tensor_parallel_degree == p.tp and par.pipeline_parallel_degree == p.pp
    assert par.context_parallel_degree == p.cp
    assert par.data_parallel_replicate_degree * par.data_parallel_shard_degree * p.cp == p.dp * p.cp
    assert job.training.global_batch_size == 128 and job.training.seq_len == 4096
    if p.pp > 1:  # the model parts cover every layer once, in order, pp*vpp of them
        parts = par.module_fqns_per_model_part
        assert len(parts) == p.pp * p.vpp
        layers = [int(n.split(".")[1]) for part in parts for n in part if n.startswith("layers.")]
        assert layers == list(range(32))
        assert par.pipeline_parallel_schedule == "Interleaved1F1B"
    if dtype == "fp8":
        assert job.model.converters == ["quantize.linear.float8"]
        assert job.quantize.linear.float8.recipe_name == "tensorwise"
    assert job.activation_checkpoint.mode == str(p.recompute)
    if p.zero_shard:
        assert (par.data_parallel_replicate_degree, par.data_parallel_shard_degree) == (
            4,
            4,
        )  # 32 / 8; 8 / cp


def test_torchtitan_job_takes_the_plans_fp8_recipe(tmp_path: Path, torchtitan_config_manager: Any) -> None:
    """torchtitan 2025 offers torchao's rowwise recipe beside its tensorwise one: a plan that chooses it gets
    ``recipe_name = "rowwise"``, as torchtitan's own config manager reads the job file."""
    tt = load_framework("torchtitan-2025")
    est = _estimate("llama-3.1-8b", "dgx-h100", 1, gbs=32, dtype="fp8", framework=tt, dp=8, zero_stage=3,
                    fp8_recipe="rowwise")  # fmt: skip
    folder = export_training(
        est, "torchtitan", ModelRef(name="llama-3.1-8b", hf_id="meta-llama/Llama-3.1-8B"), framework=tt
    )
    path = tmp_path / "job.toml"
    path.write_text(folder.files["job.toml"])
    job = torchtitan_config_manager().parse_args(["--job.config_file", str(path)])
    assert job.quantize.linear.float8.recipe_name == "rowwise"


def test_torchtitan_refuses_zero1_and_ulysses() -> None:
    tt = load_framework("torchtitan-2024")
    est = _estimate("llama-3.1-8b", "dgx-h100", 1, dp=8, zero_stage=1, framework=None)
    with pytest.raises(ExportRefused, match="torchtitan cannot run zero_stage=1: it replicates"):
        export_training(est, "torchtitan", ModelRef(name="m"), framework=tt)
    est = _estimate("llama-3.1-8b", "dgx-h100", 1, dp=4, cp=2, ulysses=2, zero_stage=3, framework=None)
    with pytest.raises(ExportRefused, match="cp_kind=ulysses"):
        export_training(est, "torchtitan", ModelRef(name="m"), framework=tt)


class _DataParallelOnly:
    """The ``mpu`` DeepSpeedConfig asks for the data-parallel world size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


@pytest.mark.parametrize(
    "plan",
    [
        dict(dp=16, zero_stage=3, zero_shard=8, offload_optimizer=True, micro_batch_size=2),
        dict(dp=16, zero_stage=1, recompute="full"),
    ],
)
def test_deepspeed_config_parses_with_deepspeed(
    plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("deepspeed", reason="pip install '.[launch-check]'")
    import deepspeed.comm
    from deepspeed.runtime.config import DeepSpeedConfig

    monkeypatch.setattr(deepspeed.comm, "get_rank", lambda *a, **k: 0)  # no process group: the mpu gives dp
    est = _estimate("llama-3.1-8b", "dgx-h100", 2, gbs=128, framework=None, **plan)
    folder = export_training(est, "deepspeed", ModelRef(name="llama-3.1-8b"))
    config = json.loads(folder.files["ds_config.json"])
    ds = DeepSpeedConfig(config, mpu=_DataParallelOnly(est.plan.dp))
    assert ds.train_batch_size == 128
    assert ds.train_micro_batch_size_per_gpu == est.plan.micro_batch_size
    assert ds.gradient_accumulation_steps * ds.train_micro_batch_size_per_gpu * est.plan.dp == 128
    assert ds.zero_optimization_stage == est.plan.zero_stage and ds.bfloat16_config.enabled
    if est.plan.zero_shard:
        assert ds.mics_shard_size == 8
        assert ds.zero_config.offload_optimizer.device == "cpu"
    with pytest.raises(AssertionError):  # the parser catches a batch that does not add up
        DeepSpeedConfig({**config, "train_batch_size": 127}, mpu=_DataParallelOnly(est.plan.dp))


def test_stack_of_a_profile_id() -> None:
    assert stack_for_framework("megatron-core-2024") == "megatron-core"
    assert stack_for_framework("megatron-lm-2021") == "megatron-core"
    assert stack_for_framework("torchtitan-2025") == "torchtitan"
    assert stack_for_framework("deepspeed-2025") == "deepspeed"
    with pytest.raises(ValueError, match="generic.*name one with --to"):
        stack_for_framework("generic")


PLAN = ["--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--seq-len", "4096", "--global-batch", "64"]


def test_cli_export_writes_atomically_and_never_over_a_foreign_folder(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "run1"
    ok = runner.invoke(cli, ["export", "--to", "torchtitan", "--out", str(out), *PLAN, "--zero", "3"])
    assert ok.exit_code == 0, ok.output
    assert {p.name for p in out.iterdir()} == {
        "README.md",
        "job.toml",
        "launch.sh",
        "launch.sbatch",
        "prediction.json",
    }
    assert tomllib.loads((out / "job.toml").read_text())["parallelism"]["data_parallel_shard_degree"] == 8
    prediction = json.loads((out / "prediction.json").read_text())
    assert prediction["plan"]["zero_stage"] == 3 and prediction["summary"]["step_time_s"] > 0
    again = runner.invoke(cli, ["export", "--to", "torchtitan", "--out", str(out), *PLAN, "--zero", "3"])
    assert again.exit_code == 1 and "--force" in again.output
    assert (
        runner.invoke(cli, ["export", "--to", "deepspeed", "--out", str(out), *PLAN, "--force"]).exit_code
        == 0
    )
    assert {p.name for p in out.iterdir()} == {
        "README.md",
        "ds_config.json",
        "launch.sh",
        "launch.sbatch",
        "prediction.json",
    }  # the earlier job.toml is gone
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    refused = runner.invoke(cli, ["export", "--to", "deepspeed", "--out", str(foreign), *PLAN, "--force"])
    assert refused.exit_code == 1 and "not empty" in refused.output
    bad = runner.invoke(
        cli, ["export", "--to", "deepspeed", "--out", str(tmp_path / "new"), *PLAN, "--tp", "2"]
    )
    assert bad.exit_code == 1 and "deepspeed cannot run tp=2" in bad.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "run1"]  # no partial folder, no temp folder


def test_cli_export_needs_a_stack_for_the_generic_profile(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["export", "--out", str(tmp_path / "x"), *PLAN, "--framework", "generic"]
    )
    assert result.exit_code == 1 and "name one with --to" in result.output
    result = CliRunner().invoke(cli, ["export", "--out", str(tmp_path / "x"), *PLAN, "--tp", "8"])
    assert result.exit_code == 0, result.output  # the default stack is Megatron-Core: exported as it
    assert "--tensor-model-parallel-size\n8\n" in (tmp_path / "x" / "pretrain_gpt.args").read_text()


def test_cli_export_from_a_saved_estimate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = tmp_path / "e.workbench.json"
    runner = CliRunner()
    command = ["estimate", *PLAN, "--tp", "2", "--framework", "megatron-core-2024", "--save", str(saved)]
    monkeypatch.setattr(sys, "argv", ["workbench", *command])  # what the saved file records as its command
    r = runner.invoke(cli, command)
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["export", "--from", str(saved), "--out", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output  # the framework (hence the stack) comes from the saved command
    args = (tmp_path / "x" / "pretrain_gpt.args").read_text().splitlines()
    assert args[args.index("--tensor-model-parallel-size") + 1] == "2"
    assert "meta-llama/Llama-3.1-8B" in (tmp_path / "x" / "launch.sh").read_text()


SERVE = [
    "--model",
    "llama-3.1-70b",
    "--cluster",
    "dgx-h100",
    "--input-tokens",
    "1000",
    "--output-tokens",
    "200",
    "--num-requests",
    "16",
]


@pytest.mark.parametrize("engine", ["vllm-v1", "sglang", "trtllm"])
def test_cli_serve_export_lays_the_plan_on_each_engine(engine: str, tmp_path: Path) -> None:
    """Each engine's options checked against its own parser's option table (tests/fixtures/launch/), and the
    degrees and limits in the command are those of the plan, in each engine's terms (SGLang and TensorRT-LLM count
    attention-dp ranks in their tp size)."""
    import yaml

    out = tmp_path / engine
    moe = ["--model", "mixtral-8x7b", *SERVE[2:]]
    args = [
        "serve",
        "export",
        "--engine",
        engine,
        "--out",
        str(out),
        *moe,
        "--tp",
        "4",
        "--attention-dp",
        "2",
        "--ep",
        "8",
        "--kv-dtype",
        "fp8",
        "--max-num-seqs",
        "128",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    script = (out / "serve.sh").read_text()
    _check_bash({"serve.sh": script}, tmp_path)
    words = shlex.split(script[script.index("\n", script.index("HERE=")) :].replace("\\\n", " "))

    def value(flag: str) -> str:
        return words[words.index(flag) + 1]

    if (
        engine == "vllm-v1"
    ):  # every option, its kind, choices and value type as vLLM 0.33.0's own parser has them
        assert words[:3] == ["vllm", "serve", "mistralai/Mixtral-8x7B-v0.1"]
        _parse_vllm(words[3:-1], "vllm_0.33.0_serve_args.txt", "vllm serve 0.33.0")
        assert (value("--tensor-parallel-size"), value("--data-parallel-size")) == ("4", "2")
        assert "--enable-expert-parallel" in words and value("--kv-cache-dtype") == "fp8"
        assert value("--max-num-seqs") == "128"
    if engine == "sglang":  # every option, its kind and its choices as SGLang 0.5.23's own parser has them
        start = words.index("--model-path")
        _parse_megatron(words[start:-1], _megatron_parser("sglang_0.5.23_server_args.txt"), "sglang 0.5.23")
        assert (value("--tp-size"), value("--dp-size"), value("--ep-size")) == ("8", "2", "8")
        assert "--enable-dp-attention" in words and value("--kv-cache-dtype") == "fp8_e4m3"
        assert value("--max-running-requests") == "128"
    if (
        engine == "trtllm"
    ):  # the options of trtllm-serve at a pinned commit (transcribed: it needs a GPU build)
        assert words[:2] == ["trtllm-serve", "mistralai/Mixtral-8x7B-v0.1"]
        _parse_megatron(words[2:-1], _megatron_parser("trtllm_serve_options.txt"), "trtllm-serve")
        assert (value("--tp_size"), value("--ep_size"), value("--max_batch_size")) == ("8", "8", "128")
        options = yaml.safe_load((out / "llm_api_options.yaml").read_text())
        assert options["enable_attention_dp"] is True and options["kv_cache_config"]["dtype"] == "fp8"
    prediction = json.loads((out / "prediction.json").read_text())
    assert prediction["kind"] == "serving" and prediction["summary"]["ttft_s"] > 0


def test_serve_export_refuses_generic_engines_and_disaggregated_plans(tmp_path: Path) -> None:
    from workbench.launch.serving import serve_command
    from workbench.specs.serving import Disaggregation, ServingPlan

    result = CliRunner().invoke(cli, ["serve", "export", "--out", str(tmp_path / "x"), *SERVE])
    assert result.exit_code == 2 and "name a vLLM, SGLang or TensorRT-LLM profile" in result.output
    plan = ServingPlan(
        disaggregation=Disaggregation(prefill_workers=1, prefill_tp=4, decode_workers=1, decode_tp=4)
    )
    with pytest.raises(ExportRefused, match="vllm cannot run disaggregation"):
        serve_command(plan, "vllm", ModelRef(name="m"))


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8", "fp4", "int4"])
def test_serve_export_dtypes_are_names_the_engines_know(dtype: str) -> None:
    """Every weight and KV-cache dtype a plan can hold becomes a --quantization / --kv-cache-dtype value within the
    choices of vLLM 0.33.0's and SGLang 0.5.23's own tables (vLLM's from the lists its config checks them with)."""
    from workbench.specs.serving import ServingPlan

    model = ModelRef(name="llama-3.1-70b", hf_id="meta-llama/Llama-3.1-70B")
    plan = ServingPlan(tp=2, weight_dtype=dtype, kv_cache_dtype=dtype)
    if dtype == "int4":  # no engine has an int4 KV cache of this kind: refused, not written as 16-bit
        for engine in ("vllm", "sglang", "trtllm"):
            with pytest.raises(ExportRefused, match=f"{engine} cannot run kv_cache_dtype=int4"):
                serve_command_words(plan, engine, model)
        plan = ServingPlan(tp=2, weight_dtype=dtype)
    vllm = _parse_vllm(
        serve_command_words(plan, "vllm", model)[3:], "vllm_0.33.0_serve_args.txt", "vllm serve 0.33.0"
    )
    words = serve_command_words(plan, "sglang", model)
    sglang = _parse_megatron(
        words[words.index("--model-path") :],
        _megatron_parser("sglang_0.5.23_server_args.txt"),
        "sglang 0.5.23",
    )
    quantised = dtype in ("fp8", "fp4", "int4")
    assert ("--quantization" in vllm, "--quantization" in sglang) == (quantised, quantised)
    kv = {"fp8": ("fp8", "fp8_e4m3"), "fp4": ("nvfp4", "nvfp4")}.get(
        dtype, ("auto", "auto")
    )  # 16-bit: the model's
    assert (vllm["--kv-cache-dtype"], sglang["--kv-cache-dtype"]) == ([kv[0]], [kv[1]])


def test_serve_export_without_chunked_prefill_parses_on_both_vllm_tables() -> None:
    """The ``vllm`` scheduler (whole prefills) turns chunked prefill off with ``--no-enable-chunked-prefill``: the
    spelling both vLLM 0.31.0 (Dynamo's) and 0.33.0 register (0.33.0 shows ``--disable-chunked-prefill`` in its
    help and keeps this one as a hidden alias), with pp stages as vLLM's pipeline size."""
    from workbench.specs.serving import ServingPlan

    model = ModelRef(name="llama-3.1-70b", hf_id="meta-llama/Llama-3.1-70B")
    words = serve_command_words(ServingPlan(tp=2, pp=2, scheduler="vllm"), "vllm", model)[3:]
    for fixture in ("vllm_0.33.0_serve_args.txt", "dynamo_1.6.1_vllm_worker_args.txt"):
        parsed = _parse_vllm(words, fixture, fixture)
        assert parsed["--no-enable-chunked-prefill"] == [] and "--enable-chunked-prefill" not in parsed
        assert parsed["--pipeline-parallel-size"] == ["2"]


def serve_command_words(plan: Any, engine: str, model: ModelRef) -> list[str]:
    from workbench.launch.serving import serve_command

    return serve_command(plan, engine, model)


SGLANG_SPEC_ALGORITHMS = {
    "EAGLE",
    "EAGLE3",
    "STANDALONE",
    "NGRAM",
    "DFLASH",
    "UNO",
    "DSPARK",
    "FROZEN_KV_MTP",
    "NEXTN",
}
"""SGLang 0.5.23's --speculative-algorithm values (its parser takes any string): the SpeculativeAlgorithm members of
sglang/srt/speculative/spec_info.py and the NEXTN alias of spec_registry.py (_RESERVED_ALIASES), read from the
PyPI wheel."""


@pytest.mark.parametrize("method", ["mtp", "eagle", "eagle3", "draft", "ngram"])
def test_serve_export_writes_the_plans_speculative_decoding(method: str) -> None:
    """vLLM: --speculative-config is a JSON object of vLLM 0.33.0's SpeculativeConfig fields (from the real class)
    with a method it knows and the plan's k; SGLang: the chain of k top-1 draft steps and k + 1 verified tokens,
    its options checked against SGLang 0.5.23's parser table."""
    from workbench.launch.serving import EAGLE_HEAD, export_serving, serve_command
    from workbench.specs.serving import ServingPlan
    from workbench.specs.speculative import SpeculativeDecoding

    draft_model = "llama-3.1-8b" if method == "draft" else None
    spec = SpeculativeDecoding(
        method=method, num_speculative_tokens=3, acceptance_rate=0.7, draft_model=draft_model
    )
    plan = ServingPlan(tp=4, speculative=spec)
    model = ModelRef(name="llama-3.1-70b", hf_id="meta-llama/Llama-3.1-70B")
    draft = ModelRef(name="llama-3.1-8b", hf_id="meta-llama/Llama-3.1-8B") if draft_model else None
    words = serve_command(plan, "vllm", model, draft)
    parsed = _parse_vllm(words[3:], "vllm_0.33.0_serve_args.txt", "vllm serve 0.33.0")
    config = json.loads(parsed["--speculative-config"][0])
    schema = {}
    for line in (FIXTURES / "vllm_0.33.0_speculative_config.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, choices = line.split("\t")
            schema[name] = choices.split(",") if choices else []
    assert schema and set(config) <= set(schema), set(config) - set(schema)
    assert config["method"] in schema["method"] and config["num_speculative_tokens"] == 3
    expected_model = {"eagle": EAGLE_HEAD, "eagle3": EAGLE_HEAD, "draft": "meta-llama/Llama-3.1-8B"}
    assert config.get("model") == expected_model.get(method)

    words = serve_command(plan, "sglang", model, draft)
    start = words.index("--model-path")
    sglang = _parse_megatron(
        words[start:], _megatron_parser("sglang_0.5.23_server_args.txt"), "sglang 0.5.23"
    )
    if method == "ngram":  # the tree width of SGLang's NGRAM is not in the plan: left to the README
        assert "--speculative-algorithm" not in sglang
        readme = export_serving(plan, "sglang", model, {"summary": _SUMMARY}).files["README.md"]
        assert "speculative decoding (ngram, k=3) is in the prediction but not in these files" in readme
    else:
        assert sglang["--speculative-algorithm"][0] in SGLANG_SPEC_ALGORITHMS
        assert (sglang["--speculative-num-steps"], sglang["--speculative-num-draft-tokens"]) == (["3"], ["4"])
        assert sglang["--speculative-eagle-topk"] == ["1"]
        assert sglang.get("--speculative-draft-model-path") == (
            [expected_model[method]] if method in expected_model else None
        )


_SUMMARY = {"ttft_s": 0.2, "tpot_s": 0.02, "output_tokens_per_s": 1000.0}


def test_cli_plan_exports_its_first_plan(tmp_path: Path) -> None:
    out = tmp_path / "best"
    args = [
        "plan",
        "--model",
        "llama-3.1-8b",
        "--cluster",
        "dgx-h100",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--framework",
        "torchtitan-2024",
        "--top",
        "2",
        "--json",
        "--export",
        "torchtitan",
        "--export-dir",
        str(out),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    best = json.loads(result.output)["plans"][0]
    prediction = json.loads((out / "prediction.json").read_text())
    assert prediction["plan"]["describe"] == best["plan"]
    assert prediction["summary"]["step_time_s"] == pytest.approx(best["step_time_s"])
    job = tomllib.loads((out / "job.toml").read_text())
    assert job["parallelism"]["tensor_parallel_degree"] == best["tp"]
    refused = CliRunner().invoke(cli, [*args[:-4], "--export", "torchtitan"])
    assert refused.exit_code == 2 and "--export needs --export-dir" in refused.output


def test_a_disaggregated_plan_becomes_a_dynamo_deployment(tmp_path: Path) -> None:
    """The DynamoGraphDeployment follows ai-dynamo/dynamo's examples/backends/vllm/deploy/disagg.yaml (7893f268):
    a Frontend and prefill/decode dynamo.vllm workers; replicas and GPUs per pod are the plan's. Each worker's
    arguments are checked against the option table of ai-dynamo 1.6.1's own dynamo.vllm parser (with the vLLM
    0.31.0 it pins): every flag, kind, choice and value type."""
    import yaml

    from workbench.launch.serving import export_serving
    from workbench.specs.serving import Disaggregation, ServingPlan
    from workbench.specs.speculative import SpeculativeDecoding

    plan = ServingPlan(
        disaggregation=Disaggregation(
            prefill_workers=3,
            prefill_tp=2,
            decode_workers=1,
            decode_tp=4,
            decode_attention_dp=2,
            decode_dtypes=("fp8", "fp8", "fp8"),
        ),
        max_num_seqs=64,
        speculative=SpeculativeDecoding(method="mtp", num_speculative_tokens=2, accepted_length=2.5),
    )
    prediction = {"summary": {"ttft_s": 0.2, "tpot_s": 0.02}}
    folder = export_serving(
        plan, "vllm", ModelRef(name="llama-3.1-8b", hf_id="meta-llama/Llama-3.1-8B"), prediction
    )
    assert set(folder.files) == {"dynamo.yaml", "README.md", "prediction.json"}
    doc = yaml.safe_load(folder.files["dynamo.yaml"])
    assert (doc["apiVersion"], doc["kind"]) == ("nvidia.com/v1alpha1", "DynamoGraphDeployment")
    services = doc["spec"]["services"]
    assert services["Frontend"]["componentType"] == "frontend"
    prefill, decode = services["VllmPrefillWorker"], services["VllmDecodeWorker"]
    assert (prefill["subComponentType"], prefill["replicas"], prefill["resources"]["limits"]["gpu"]) == (
        "prefill",
        3,
        "2",
    )
    assert (decode["subComponentType"], decode["replicas"], decode["resources"]["limits"]["gpu"]) == (
        "decode",
        1,
        "8",
    )
    gpus = sum(s["replicas"] * int(s["resources"]["limits"]["gpu"]) for s in (prefill, decode))
    assert gpus == plan.num_devices == 3 * 2 + 1 * 4 * 2
    parsed = {}
    for role, service in (("prefill", prefill), ("decode", decode)):
        container = service["extraPodSpec"]["mainContainer"]
        assert container["command"] == ["python3", "-m", "dynamo.vllm"]
        parsed[role] = _parse_vllm(
            container["args"], "dynamo_1.6.1_vllm_worker_args.txt", "dynamo.vllm 1.6.1"
        )
        assert parsed[role]["--model"] == ["meta-llama/Llama-3.1-8B"]
        assert parsed[role]["--disaggregation-mode"] == [role]
        # dynamo 1.6.1 refuses a prefill worker without a KV connector (dynamo/vllm/args.py)
        kv_transfer = json.loads(parsed[role]["--kv-transfer-config"][0])
        assert kv_transfer == {
            "kv_connector": "NixlConnector",
            "kv_role": {"prefill": "kv_producer", "decode": "kv_consumer"}[role],
        }
    assert parsed["decode"]["--tensor-parallel-size"] == ["4"] and parsed["decode"][
        "--data-parallel-size"
    ] == ["2"]
    assert parsed["decode"]["--max-num-seqs"] == ["64"]
    # the roles' own dtypes: the decode engines are fp8 with an fp8 KV cache, the prefill engines the plan's bf16
    assert (parsed["decode"]["--quantization"], parsed["decode"]["--kv-cache-dtype"]) == (["fp8"], ["fp8"])
    assert "--quantization" not in parsed["prefill"] and parsed["prefill"]["--kv-cache-dtype"] == ["auto"]
    # speculative decoding on the decode engines only (a prefill engine emits one token per prompt)
    assert json.loads(parsed["decode"]["--speculative-config"][0]) == {
        "method": "mtp",
        "num_speculative_tokens": 2,
    }
    assert "--speculative-config" not in parsed["prefill"]
    with pytest.raises(ExportRefused, match="dynamo cannot run engine=sglang"):
        export_serving(plan, "sglang", ModelRef(name="m"), prediction)


def test_cli_export_refuses_a_stack_other_than_the_profiles(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "export",
            "--to",
            "deepspeed",
            "--out",
            str(tmp_path / "x"),
            *PLAN,
            "--framework",
            "torchtitan-2024",
        ],
    )
    assert (
        result.exit_code == 2 and "prices torchtitan's execution; export it --to torchtitan" in result.output
    )
    assert not (tmp_path / "x").exists()
