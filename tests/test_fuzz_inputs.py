"""Property-based fuzz of every file reader and of the command line (issue 20): whatever the input, the answer
is a result or a ``ValueError`` naming the file; on the command line a non-zero exit with exactly one line on
stderr, never an internal error or a traceback.

Each reader starts from a shipped, valid file and puts random values (any JSON or TOML type, zero, negative,
huge, nan and inf numbers, strings with control characters, deep nesting) into the fields it knows, so that
most draws reach the checks behind the syntax. Examples are few and derandomized so the whole file runs in
well under a minute on two cores; the database is off (nothing written to the tree).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from workbench.pipeline.schedules import build_schedule, read_schedule_csv
from workbench.pipeline.simulate import StageCosts, simulate
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_device
from workbench.presets.frameworks import load_framework
from workbench.presets.hf_config import model_from_hf_config
from workbench.presets.kernels import load_kernel_table
from workbench.presets.profile_table import read_profile
from workbench.validate import DEFAULT_DATA, read_rows, validate_rows

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "profiles"


def fuzz(examples: int) -> Any:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


_COUNTER = itertools.count()


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="wb-fuzz-") as folder:
        yield Path(folder)


def fresh(workdir: Path, name: str) -> Path:
    """A path no earlier example used (readers may cache by path)."""
    folder = workdir / str(next(_COUNTER))
    folder.mkdir()
    return folder / name


def expect_value_error(exc: BaseException, path: Path) -> None:
    assert isinstance(exc, ValueError), f"{type(exc).__name__}: {exc}"
    assert str(path) in str(exc), str(exc)
    event("refused")  # --hypothesis-show-statistics: how many draws got past the checks


def accepted() -> None:
    event("accepted")


# ---- values -----------------------------------------------------------------------------------------------
SPECIAL_INTS = [0, -1, 1, 2, 3, 2**31, 2**63, 2**64 + 1, 10**30, 10**200, 1_048_577, 16_777_217]
NASTY_TEXT = ["", "\x1b[31m", "a\nb", "\u2028", "\x00", "nan", "inf", "-1", "0", "1e999", "x" * 300]
ints = st.one_of(st.integers(-3, 64), st.sampled_from(SPECIAL_INTS))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.5, 50.0, 1e308]))
texts = st.one_of(st.text(max_size=12), st.sampled_from(NASTY_TEXT))
plausible = st.one_of(st.floats(1e-3, 1.0), st.integers(1, 8), st.floats(1.0, 1e4))
"""Values a field may well hold, so that some draws get past every check and reach the code behind them."""
json_scalars = st.one_of(plausible, st.none(), st.booleans(), ints, floats, texts)
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=6,
)
toml_scalars = st.one_of(
    plausible,
    plausible,
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-3, 64),
    floats,
    texts,
    st.datetimes(),
    st.dates(),
)
toml_values = st.recursive(
    toml_scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from("abcxyz"), kids, max_size=3),
    max_leaves=6,
)


def dump_toml(data: dict[str, Any]) -> str:
    try:
        return tomli_w.dumps(data)
    except Exception:  # a value TOML cannot hold (tomli_w refuses it): not an input a user can write
        assume(False)
        raise


def mutate(base: dict[str, Any], edits: list[tuple[tuple[str | int, ...], Any]]) -> dict[str, Any]:
    """``base`` (deep-copied) with each (key path, value) set; a value of ``...`` deletes the key."""
    data = json.loads(json.dumps(base, default=str))
    for path, value in edits:
        node: Any = data
        for key in path[:-1]:
            if (
                isinstance(node, dict)
                and key in node
                or isinstance(node, list)
                and isinstance(key, int)
                and key < len(node)
            ):
                node = node[key]
            else:
                break
        else:
            last = path[-1]
            if isinstance(node, dict):
                if value is ...:
                    node.pop(last, None)
                else:
                    node[last] = value
            elif isinstance(node, list) and isinstance(last, int) and last < len(node) and value is not ...:
                node[last] = value
    return data


def edits_of(paths: list[tuple[str | int, ...]], values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(
        st.tuples(st.sampled_from(paths), st.one_of(values, st.just(...))), min_size=1, max_size=3
    )


# ---- (a) file readers -------------------------------------------------------------------------------------
HF_BASES = {
    name: json.loads((PROFILES / "models" / f"{name}.json").read_text())
    for name in ("llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b", "qwen3-30b-a3b")
}
HF_KEYS = sorted(
    {k for cfg in HF_BASES.values() for k in cfg if not k.startswith("_")} | {"n_head", "n_embd"}
)


@fuzz(300)
@given(
    base=st.sampled_from(sorted(HF_BASES)),
    edits=edits_of([(k,) for k in HF_KEYS] + [("architectures", 0)], json_values),
    depth=st.one_of(st.just(0), st.integers(1, 50), st.just(100_000)),
)
def test_hf_config_reader(workdir: Path, base: str, edits: list, depth: int) -> None:
    cfg = mutate(HF_BASES[base], edits)
    text = json.dumps(cfg, allow_nan=True)
    if depth:
        text = text[:-1] + ', "nested": ' + "[" * depth + "]" * depth + "}"
    path = fresh(workdir, "config.json")
    path.write_text(text)
    try:
        spec = model_from_hf_config(path)
    except Exception as exc:
        expect_value_error(exc, path)
    else:
        accepted()
        assert spec.total_parameters() > 0 and math.isfinite(spec.model_flop_per_token(4096))


DEVICE = tomllib.loads((PROFILES / "hardware" / "h100-sxm5-80gb.toml").read_text())
DEVICE_PATHS = [
    ("id",),
    ("name",),
    ("peak_tflops",),
    ("memory",),
    ("efficiency",),
    ("efficiency", "matmul"),
] + [(t, k) for t in ("peak_tflops", "memory") for k in DEVICE[t]]


@fuzz(150)
@given(edits=edits_of(DEVICE_PATHS, toml_values))
def test_device_toml_reader(workdir: Path, edits: list) -> None:
    path = fresh(workdir, "dev.toml")
    path.write_text(dump_toml(mutate(DEVICE, edits)))
    try:
        device = load_device(path)
    except Exception as exc:
        expect_value_error(exc, path)
    else:
        accepted()
        assert all(math.isfinite(v) and v > 0 for v in device.peak_flop_per_s.values())
        assert math.isfinite(device.hbm_bytes) and device.hbm_bytes > 0


CLUSTER = tomllib.loads((PROFILES / "clusters" / "dgx-h100.toml").read_text())
CLUSTER_PATHS = [(k,) for k in CLUSTER] + [
    ("levels", i, k) for i in range(len(CLUSTER["levels"])) for k in ("span", "bandwidth_GBps", "latency_us")
]


@fuzz(120)
@given(edits=edits_of(CLUSTER_PATHS, toml_values), nodes=st.one_of(st.none(), ints))
def test_cluster_toml_reader(workdir: Path, edits: list, nodes: int | None) -> None:
    path = fresh(workdir, "cluster.toml")
    path.write_text(dump_toml(mutate(CLUSTER, edits)))
    try:
        cluster = load_cluster(path, num_nodes=nodes)
    except Exception as exc:
        # the device key may name another file: a missing one is an OSError the CLI reports in one line
        assert isinstance(exc, ValueError | OSError), f"{type(exc).__name__}: {exc}"
        assert str(path) in str(exc) or "device" in str(exc), str(exc)
        event("refused")
    else:
        accepted()
        assert 1 <= cluster.num_devices <= 2**20


FITTABLE = [
    "kernel_efficiency_frac",
    "host_overhead_per_layer_s",
    "comm_interference_frac",
    "host_s_per_kernel",
]
CALIBRATION_PATHS = [("source",), ("fit",), ("fit", "pooled"), ("extra",)] + [
    ("fit", g, k) for g in ("pooled", "megatron-core-2024") for k in FITTABLE
]
CALIBRATION = tomllib.loads((PROFILES / "calibration" / "default.toml").read_text())


@fuzz(100)
@given(edits=edits_of(CALIBRATION_PATHS, toml_values))
def test_calibration_toml_reader(workdir: Path, edits: list) -> None:
    path = fresh(workdir, "cal.toml")
    path.write_text(dump_toml(mutate(CALIBRATION, edits)))
    try:
        cal = load_calibration(path)
    except Exception as exc:
        expect_value_error(exc, path)
    else:
        accepted()
        assert 0 < cal.framework.kernel_efficiency_frac <= 1


KERNELS = tomllib.loads((PROFILES / "kernels" / "h100-sxm5-80gb.toml").read_text())
KERNEL_PATHS = (
    [(k,) for k in KERNELS]
    + [("hbm", "achieved_frac"), ("gemm", "bf16"), ("gemm", "bf16", "points")]
    + [
        ("attention", 0, k)
        for k in ("family", "dtype", "head_dim", "causal", "seq_len", "fwd_frac", "bwd_frac")
    ]
)


@fuzz(150)
@given(edits=edits_of(KERNEL_PATHS, toml_values))
def test_kernel_table_reader(workdir: Path, edits: list) -> None:
    path = fresh(workdir, "kernels.toml")
    path.write_text(dump_toml(mutate(KERNELS, edits)))
    try:
        table = load_kernel_table(path)
    except Exception as exc:
        expect_value_error(exc, path)
    else:
        accepted()
        assert 0 < table.hbm_frac <= 1


FRAMEWORK = tomllib.loads((PROFILES / "frameworks" / "torchtitan-2024.toml").read_text())
FRAMEWORK_KEYS = sorted(
    set(FRAMEWORK)
    | {"moe_imbalance", "moe_dispatcher", "fp8_weight_copies", "context_bytes", "schedules", "zero_stages"}
)


@fuzz(150)
@given(edits=edits_of([(k,) for k in FRAMEWORK_KEYS], toml_values))
def test_framework_toml_reader(workdir: Path, edits: list) -> None:
    path = fresh(workdir, "fw.toml")
    path.write_text(dump_toml(mutate(FRAMEWORK, edits)))
    try:
        prof = load_framework(path)
    except Exception as exc:
        expect_value_error(exc, path)
    else:
        accepted()
        assert 0 < prof.kernel_efficiency_frac <= 1 and prof.moe_imbalance >= 1
        assert prof.moe_dispatcher in ("alltoall", "deepep") and 0 <= prof.fp8_weight_copies <= 4


index = st.one_of(st.integers(0, 5), st.sampled_from([4095, 4096, 262_143, 262_144, 99_999_999, 10**30]))
actions = st.builds(lambda s, op, m: f"{s}{op}{m}", index, st.sampled_from("FBIWFBX"), index)
cells = st.one_of(
    actions,
    actions,
    st.just(""),
    st.sampled_from(["1SEND_F1", "0UNSHARD", "(0F1;1B0)OVERLAP_F_B", "(0F0;)OVERLAP_F_B", '"0F0"', "0 F 0"]),
    texts,
)


@st.composite
def schedule_rows(draw: st.DrawFn) -> list[list[str]]:
    """A built-in schedule's CSV rows (valid), then up to three cells replaced or deleted, or random rows."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.lists(st.lists(cells, max_size=8), max_size=6))
    name = draw(st.sampled_from(["1f1b", "gpipe", "zb-h1", "zbv", "interleaved-1f1b", "dualpipev", "zb-h2"]))
    pp = draw(st.integers(1, 4))
    try:
        rows = build_schedule(name, pp=pp, num_microbatches=pp * draw(st.integers(2, 3))).as_text()
    except ValueError:
        assume(False)
        raise
    for r, c, value in draw(
        st.lists(st.tuples(st.integers(0, 99), st.integers(0, 999), cells | st.none()), max_size=3)
    ):
        row = rows[r % len(rows)]
        if row and value is None:
            del row[c % len(row)]
        elif row:
            row[c % len(row)] = value
    return rows


@fuzz(250)
@given(
    rows=schedule_rows(),
    tail=st.sampled_from(["", "", "", "\n", "\n\n\n", '"unterminated', "\x00", "x" * 140_000]),
)
def test_schedule_csv_reader(workdir: Path, rows: list[list[str]], tail: str) -> None:
    path = fresh(workdir, "s.csv")
    path.write_text("\n".join(",".join(r) for r in rows) + tail, encoding="utf-8")
    try:
        schedule = read_schedule_csv(path)
    except Exception as exc:
        expect_value_error(exc, path)
        return
    accepted()
    costs = StageCosts.uniform(
        num_stages=schedule.num_stages, vpp=schedule.vpp, forward_s=1.0, backward_s=2.0
    )
    try:
        result = simulate(schedule, costs)
    except ValueError as exc:  # a schedule whose rank orders deadlock says which actions wait for which
        assert "deadlock" in str(exc) or "wait" in str(exc), str(exc)
    else:
        assert math.isfinite(result.makespan_s)


with DEFAULT_DATA.open(newline="", encoding="utf-8") as _fh:
    _reader = csv.DictReader(_fh)
    VALIDATION_ROW = next(_reader)
VALIDATION_COLUMNS = list(VALIDATION_ROW)
NUMERIC = [
    c
    for c in VALIDATION_COLUMNS
    if c.startswith("measured_")
    or c
    in (
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "ffn_hidden_size",
        "vocab_size",
        "seq_len",
        "num_experts",
        "experts_per_token",
        "num_devices",
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "vpp",
        "micro_batch_size",
        "global_batch_size",
        "zero_stage",
    )
]
cell_values = st.one_of(
    st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e999", "1.5", "2", "8", "", "abc", "9" * 40, "\x00"]),
    st.integers(-5, 5000).map(str),
    floats.map(repr),
    texts,
)
validation_calibration = load_calibration()


@fuzz(60)
@given(
    changes=st.dictionaries(
        st.one_of(st.sampled_from(NUMERIC), st.sampled_from(VALIDATION_COLUMNS)), cell_values, max_size=3
    ),
    extra=st.sampled_from(["", "\n", "\nA,B\n", '\n"open', "\n" + "y" * 140_000]),
)
def test_validation_csv_reader(workdir: Path, changes: dict[str, str], extra: str) -> None:
    path = fresh(workdir, "v.csv")
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=VALIDATION_COLUMNS)
        writer.writeheader()
        writer.writerow({**VALIDATION_ROW, **changes})
        fh.write(extra.lstrip("\n") if extra.strip() else "")
    try:
        rows = read_rows(path)
    except Exception as exc:
        expect_value_error(exc, path)
        return
    accepted()
    result = validate_rows(rows, calibration=validation_calibration)
    for row in result["rows"]:
        assert row["ape"] is None or (math.isfinite(row["ape"]) and row["ape"] >= 0)
        assert row["measured"] is None or row["measured"] > 0


OPS = (PROFILES / "measured" / "llama-3.1-8b-L2-H512-cpu-fp32" / "ops.parquet").read_bytes()
MANIFEST = (PROFILES / "measured" / "llama-3.1-8b-L2-H512-cpu-fp32" / "manifest.json").read_text()


@fuzz(100)
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["random", "flip", "truncate", "empty"]),
    size=st.integers(0, 4096),
)
def test_ops_parquet_reader(workdir: Path, seed: int, kind: str, size: int) -> None:
    rng = random.Random(seed)
    data = bytearray(OPS)
    if kind == "random":
        data = bytearray(rng.randbytes(size))
    elif kind == "flip":
        for _ in range(1 + size % 8):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == "truncate":
        data = data[: size % len(data)]
    else:
        data = bytearray()
    folder = fresh(workdir, "prof")
    folder.mkdir()
    (folder / "manifest.json").write_text(MANIFEST)
    (folder / "ops.parquet").write_bytes(bytes(data))
    try:
        prof = read_profile(folder)
    except Exception as exc:
        expect_value_error(exc, folder)
    else:
        accepted()
        assert prof.ops.height <= 2**20


# ---- (b) the command line ---------------------------------------------------------------------------------
def run_cli(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    """``workbench ARGS`` in this process: (exit code, stderr); a failure is exactly one clean stderr line."""
    from workbench_cli import main

    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    event("exit 0" if code == 0 else f"exit {code}")
    if code:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert "internal error" not in err and "Traceback" not in err, err
    return code, err


option_ints = st.one_of(st.integers(-2, 9), st.sampled_from(SPECIAL_INTS)).map(str)
option_values = st.one_of(
    option_ints, option_ints, st.sampled_from(NASTY_TEXT + ["1.5", "0x10", " 4", "1_0"])
)


def is_count(text: str) -> bool:
    """True when click would read ``text`` as an integer >= 1."""
    try:
        return int(text) >= 1
    except ValueError:
        return False


def usually(valid: list[str]) -> st.SearchStrategy[str]:
    """Mostly one of ``valid``, sometimes anything (so that most draws reach the command's work)."""
    return st.one_of(*[st.sampled_from(valid)] * 4, option_values)


DEGREES = {
    "--tp": usually(["1", "2", "4", "8"]),
    "--pp": usually(["1", "2", "4"]),
    "--dp": usually(["1", "2", "4", "8"]),
    "--cp": usually(["1", "2"]),
    "--ep": usually(["1", "2", "8"]),
    "--vpp": usually(["1", "2"]),
    "--micro-batch": usually(["1", "2"]),
    "--nodes": usually(["1", "2"]),
    "--zero": usually(["0", "1", "3"]),
}


@st.composite
def degree_options(draw: st.DrawFn) -> dict[str, str]:
    keys = draw(st.lists(st.sampled_from(sorted(DEGREES)), unique=True, max_size=4))
    return {k: draw(DEGREES[k]) for k in keys}


@fuzz(150)
@given(
    degrees=degree_options(),
    seq_len=usually(["1024", "4096"]),
    batch=usually(["8", "16", "64"]),
    schedule=st.one_of(st.sampled_from(["1f1b", "zbv", "interleaved-1f1b", "gpipe"]), texts),
    model=st.sampled_from(["llama-3.1-8b"] * 4 + ["mixtral-8x7b", "mixtral-8x7b", "nope", "\x1b[31m"]),
)
def test_cli_estimate(
    capsys: pytest.CaptureFixture[str],
    degrees: dict[str, str],
    seq_len: str,
    batch: str,
    schedule: str,
    model: str,
) -> None:
    args = [
        "estimate",
        "--model",
        model,
        "--cluster",
        "dgx-h100",
        "--seq-len",
        seq_len,
        "--global-batch",
        batch,
    ]
    for option, value in degrees.items():
        args += [option, value]
    code, _ = run_cli(capsys, [*args, "--schedule", schedule, "--json"])
    counts = [seq_len, batch, *(v for k, v in degrees.items() if k != "--zero")]
    if not all(is_count(v) for v in counts):
        assert code != 0


@fuzz(40)
@given(
    nodes=st.one_of(*[st.sampled_from(["1", "1", "1,2", "2"])] * 4, option_values, st.just("1," * 70)),
    batch=usually(["32", "64"]),
    budget=st.one_of(
        *[st.just("1e12")] * 4, st.sampled_from(["-1", "nan", "inf", "0", "1e30"]), floats.map(repr)
    ),
    top=st.one_of(*[st.sampled_from(["0", "1", "2"])] * 4, option_values),
    fixes=st.lists(
        st.sampled_from(["tp=2", "tp=2", "cp=1", "pp=0", "mbs=99999999999999999999", "vpp=x", "tp=²"]),
        max_size=2,
    ),
    micro=st.sampled_from([None, None, "1,2", "0", "1,-2", ",".join(map(str, range(1, 80)))]),
)
def test_cli_plan(
    capsys: pytest.CaptureFixture[str],
    nodes: str,
    batch: str,
    budget: str,
    top: str,
    fixes: list[str],
    micro: str | None,
) -> None:
    args = ["plan", "--model", "llama-3.1-8b", "--cluster", "dgx-h100", "--nodes", nodes, "--seq-len", "4096"]
    args += ["--global-batch", batch, "--token-budget", budget, "--top", top, "--objective", "time", "--json"]
    for fix in fixes:
        args += ["--fix", fix]
    if micro is not None:
        args += ["--micro-batches", micro]
    code, _ = run_cli(capsys, args)
    number = float(budget)
    if not (math.isfinite(number) and 0 < number <= 1e18) or not is_count(batch):
        assert code != 0


@fuzz(150)
@given(
    name=st.sampled_from(["1f1b", "gpipe", "zbv", "interleaved-1f1b", "zb-h2", "dualpipev", "custom"]),
    pp=usually(["2", "4"]),
    microbatches=usually(["4", "8", "16"]),
    vpp=st.one_of(st.none(), st.none(), st.sampled_from(["1", "2"]), option_values),
    times=st.dictionaries(
        st.sampled_from(["--f-time", "--b-time", "--w-time", "--p2p-time"]),
        st.one_of(
            st.sampled_from(["0.5", "1", "2", "0"]),
            st.sampled_from(["0.5", "1", "2", "0"]),
            floats.map(repr),
            st.sampled_from(["-1", "nan", "inf", "1e300", "x"]),
        ),
        max_size=2,
    ),
)
def test_cli_schedule(
    capsys: pytest.CaptureFixture[str],
    name: str,
    pp: str,
    microbatches: str,
    vpp: str | None,
    times: dict[str, str],
) -> None:
    args = ["schedule", name, "--pp", pp, "--microbatches", microbatches, "--json"]
    if vpp is not None:
        args += ["--vpp", vpp]
    for option, value in times.items():
        args += [option, value]
    code, _ = run_cli(capsys, args)
    if not (is_count(pp) and is_count(microbatches)) or name == "custom":
        assert code != 0


@fuzz(60)
@given(rows=schedule_rows(), name=st.sampled_from(["custom", "1f1b"]))
def test_cli_schedule_from_csv(
    capsys: pytest.CaptureFixture[str], workdir: Path, rows: list[list[str]], name: str
) -> None:
    path = fresh(workdir, "s.csv")
    path.write_text("\n".join(",".join(r) for r in rows), encoding="utf-8")
    run_cli(capsys, ["schedule", name, "--from-csv", str(path), "--json"])


@fuzz(120)
@given(
    degrees=st.fixed_dictionaries(
        {},
        optional={
            "--tp": st.sampled_from(["1", "2", "4", "8", "3"]),
            "--pp": st.sampled_from(["1", "2", "4", "8"]),
            "--cp": st.sampled_from(["1", "2", "4"]),
            "--ep": st.sampled_from(["1", "2", "4", "8"]),
            "--vpp": st.sampled_from(["1", "2", "4"]),
            "--micro-batch": st.sampled_from(["1", "2", "4", "3"]),
            "--nodes": st.sampled_from(["1", "2"]),
            "--zero": st.sampled_from(["0", "1", "2", "3"]),
            "--recompute": st.sampled_from(["none", "selective", "full"]),
            "--dtype": st.sampled_from(["bf16", "fp8", "fp32"]),
        },
    ),
    seq_len=st.sampled_from(["128", "1024", "4096", "8192", "3000"]),
    batch=st.sampled_from(["1", "8", "16", "64", "100", "1024"]),
    schedule=st.sampled_from(["1f1b", "zbv", "interleaved-1f1b", "gpipe", "zb-h1", "dualpipev", "v-half"]),
    model=st.sampled_from(["llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt3-175b"]),
)
def test_cli_estimate_plausible(
    capsys: pytest.CaptureFixture[str],
    degrees: dict[str, str],
    seq_len: str,
    batch: str,
    schedule: str,
    model: str,
) -> None:
    """Well-formed options in many combinations: a result, or one line saying which rule the plan breaks."""
    args = [
        "estimate",
        "--model",
        model,
        "--cluster",
        "dgx-h100",
        "--seq-len",
        seq_len,
        "--global-batch",
        batch,
    ]
    for option, value in degrees.items():
        args += [option, value]
    code, err = run_cli(capsys, [*args, "--schedule", schedule, "--json"])
    assert code in (0, 1), err


@fuzz(120)
@given(
    name=st.sampled_from(
        ["1f1b", "gpipe", "zbv", "interleaved-1f1b", "zb-h1", "zb-h2", "dualpipev", "v-half"]
    ),
    pp=st.integers(1, 6),
    microbatches=st.integers(1, 24),
    vpp=st.one_of(st.none(), st.integers(1, 4)),
    f=st.floats(0, 10),
    b=st.floats(0, 10),
    w=st.floats(0, 10),
    p2p=st.floats(0, 1),
)
def test_cli_schedule_plausible(
    capsys: pytest.CaptureFixture[str],
    name: str,
    pp: int,
    microbatches: int,
    vpp: int | None,
    f: float,
    b: float,
    w: float,
    p2p: float,
) -> None:
    """Every schedule at small shapes and times: it simulates, or one line names the rule it breaks."""
    args = ["schedule", name, "--pp", str(pp), "--microbatches", str(microbatches), "--json"]
    args += ["--f-time", repr(f), "--b-time", repr(b), "--w-time", repr(w), "--p2p-time", repr(p2p)]
    code, err = run_cli(capsys, args + (["--vpp", str(vpp)] if vpp is not None else []))
    assert code in (0, 1, 2), err
    if code == 0:
        assert w <= b
