"""The stack's published reference recipe beside the best plan (issue 51 item 1): ``workbench plan``'s line and the
report summary's, the recipe's layout read from the validation data (``workbench.validate.recipes``) and priced
here by ``estimate_plan`` on the user's cluster and workload."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.plan import ParallelPlan, Workload
from workbench.validate.recipes import published_recipe, reference_comparison

GIB = 2**30
STACK = "megatron-core-2024"
TIE = 0.067


@pytest.fixture(scope="module")
def cal():
    return load_calibration(framework=STACK)


def _numbers(line: str) -> tuple[float, float, float]:
    """(tokens/s, peak GiB, usable GiB) as the line prints them."""
    m = re.search(r": ([\d,]+) tokens/s, ([\d.,]+) GiB of ([\d.,]+) GiB usable", line)
    assert m, line
    return tuple(float(g.replace(",", "")) for g in m.groups())  # type: ignore[return-value]


def test_plan_prints_the_megatron_bridge_llama3_70b_h100_fp8_recipe_priced_on_this_cluster(cal):
    """Llama 3.1 70B on 8 DGX H100 nodes, seq 8192, global batch 128, fp8: Megatron-Bridge 25.11's Llama 3 70B
    H100 FP8 layout (row MBRIDGE_2511-022: tp4 pp8 vpp5 mbs1, distributed optimizer; the recipes turn sequence
    parallelism on with tp) priced by estimate_plan here, and #1's lead over it from the table's #1."""
    from workbench_cli import cli

    args = ["plan", "--model", "llama-3.1-70b", "--cluster", "dgx-h100", "--nodes", "8", "--seq-len", "8192"]
    out = CliRunner().invoke(cli, [*args, "--global-batch", "128", "--dtype", "fp8", "--top", "3"])
    assert out.exit_code == 0, out.output
    (line,) = [x for x in out.output.splitlines() if x.startswith("published recipe ")]
    assert line.startswith("published recipe MBRIDGE_2511-022 (NVIDIA Megatron-Bridge performance summary")
    assert "tp4 pp8 vpp5 mbs1 on 64 h100-sxm5-80gb, seq 8192, global batch 128, fp8" in line
    plan = ParallelPlan(dp=2, tp=4, pp=8, vpp=5, micro_batch_size=1, zero_stage=1, sequence_parallel=True,
                        schedule="interleaved-1f1b")  # fmt: skip
    assert f" as {plan.describe()}: " in line
    model, cluster = load_model("llama-3.1-70b"), load_cluster("dgx-h100", num_nodes=8)
    est = estimate_plan(model, cluster, Workload(seq_len=8192, global_batch_size=128, dtype="fp8"), plan,
                        calibration=cal)  # fmt: skip
    tokens, peak, usable = _numbers(line)
    assert tokens == round(est.tokens_per_s)
    assert peak == round(est.peak_memory_bytes / GIB, 1)
    assert usable == round(cluster.device.hbm_bytes * 0.95 / GIB, 1)  # the default 5 % headroom
    best = float(re.search(r"│ 1\s+│[^│]+│\s*([\d,]+)", out.output).group(1).replace(",", ""))  # type: ignore[union-attr]
    lead = best / est.tokens_per_s - 1
    if abs(lead) <= TIE:
        assert "the published recipe is within the tie band (6.7%)" in line
    elif lead > 0:
        assert f"#1 is faster by {lead:.1%}" in line
    else:
        assert f"the published recipe is faster by {1 / (1 + lead) - 1:.1%}" in line


def test_the_recipe_is_read_from_the_validation_rows():
    """The row chosen for (stack, model, device, dtype) is the one whose columns say so; another stack has none."""
    model = load_model("llama-3.1-70b")
    case = published_recipe(STACK, model, "h100-sxm5-80gb", "fp8")
    assert case is not None and case.id == "MBRIDGE_2511-022"
    assert (case.plan.tp, case.plan.pp, case.plan.vpp, case.plan.micro_batch_size) == (4, 8, 5, 1)
    assert published_recipe(STACK, model, "a100-sxm4-80gb") is None
    assert published_recipe("torchtitan-2025", model, "h100-sxm5-80gb") is None
    assert published_recipe(STACK, load_model("gpt3-175b"), "h100-sxm5-80gb") is None


def _best(
    cal,
    nodes: int,
    device: str = "dgx-h100",
    gbs: int = 128,
    plan: ParallelPlan | None = None,
    dtype: str = "fp8",
):
    model = load_model("llama-3.1-70b")
    cluster = load_cluster(device, num_nodes=nodes)
    plan = plan or ParallelPlan(dp=nodes, tp=8, micro_batch_size=1, sequence_parallel=True, recompute="full")
    return estimate_plan(model, cluster, Workload(seq_len=8192, global_batch_size=gbs, dtype=dtype), plan,
                         calibration=cal)  # fmt: skip


def test_not_comparable_says_why(cal):
    """Degrees that do not divide the devices, a batch the layout cannot split, another device: the line names
    the reason; a model the stack publishes nothing for gets no line."""
    two = reference_comparison(_best(cal, 2), STACK, cal)
    assert two is not None and two.estimate is None
    assert two.sentence(TIE).endswith(
        "not comparable here: tp*pp*cp = 32 does not divide the cluster's 16 devices"
    )
    odd = reference_comparison(_best(cal, 8, gbs=120), STACK, cal)
    assert (
        odd is not None and odd.estimate is None
    )  # 120 / (dp2 x mbs1) = 60 micro-batches: not whole rounds of 8
    assert odd.sentence(TIE).endswith("not comparable here: " + odd.reason) and "got m=60" in odd.reason
    a100 = reference_comparison(_best(cal, 8, device="dgx-a100", dtype="bf16"), STACK, cal)
    assert a100 is not None and a100.sentence(TIE).startswith(
        "published recipe MBRIDGE_2511 (NVIDIA Megatron-Bridge"
    )
    # the LLAMA3_70B rows (MBRIDGE_2511-002, -009, -022) are on GB300, GB200 and H100
    assert a100.sentence(TIE).endswith("published for gb200, gb300, h100-sxm5-80gb, not a100-sxm4-80gb")
    assert reference_comparison(_best(cal, 8), "torchtitan-2025", cal) is None


def test_the_recipe_itself_and_the_tie_band(cal):
    """#1 equal to the recipe's layout says so; a plan within 6.7 % of it says the tie band."""
    recipe = ParallelPlan(dp=2, tp=4, pp=8, vpp=5, micro_batch_size=1, zero_stage=1, sequence_parallel=True,
                          schedule="interleaved-1f1b")  # fmt: skip
    same = reference_comparison(_best(cal, 8, plan=recipe), STACK, cal)
    assert same is not None and same.sentence(TIE).endswith("#1 is the published recipe")
    near = reference_comparison(
        _best(cal, 8, plan=ParallelPlan(**{**_fields(recipe), "zero_stage": 0})), STACK, cal
    )
    assert near is not None and near.faster_frac is not None
    assert abs(near.faster_frac) <= TIE
    assert near.sentence(TIE).endswith(
        f"#1 at {near.faster_frac:+.1%}: the published recipe is within the tie band (6.7%)"
    )


def _fields(plan: ParallelPlan) -> dict:
    import dataclasses

    return {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
