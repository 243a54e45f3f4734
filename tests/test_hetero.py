"""Mixed clusters (issue 18): the pool specs and their loaders, the one cost path of a pipeline over pools, the
layer split, the batch split, and the done-when case: 4 DGX H100 + 4 DGX A100 plan Llama-3.1-70B faster than
either homogeneous baseline of the existing planner, with stages sized per pool, and the placement drawn."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.pools import is_mixed_ref, load_mixed_cluster, mixed_preset_names, parse_pools_text
from workbench.search import Constraints, search
from workbench.search.mixed.layouts import Layout, split_layers
from workbench.search.mixed.pipeline import PipelinePricer
from workbench.search.mixed.planner import MixedOptions, plan_mixed
from workbench.search.mixed.split import best_estimate, proportional_shares
from workbench.search.space import DEFAULT_HEADROOM_FRAC
from workbench.specs.hardware import NetworkLevel
from workbench.specs.plan import ParallelPlan, Recompute, Workload
from workbench.specs.pools import MixedCluster

H100, A100 = load_cluster("dgx-h100", num_nodes=2), load_cluster("dgx-a100", num_nodes=2)


# ---- specs and loaders ---------------------------------------------------------------------------------


def test_shared_level_defaults_to_the_slowest_outermost_level() -> None:
    mixed = MixedCluster(id="m", name="m", pools=(H100, A100))
    # dgx-h100: ConnectX-7 400 Gb/s = 50 GB/s per GPU; dgx-a100: HDR 200 Gb/s = 25 GB/s (the presets' datasheets)
    assert mixed.link.bytes_per_s == 25e9 and mixed.link.span is None
    assert mixed.link.latency_s == max(H100.levels[-1].latency_s, A100.levels[-1].latency_s)
    assert mixed.num_devices == 32 and mixed.labels == ("dgx-h100", "dgx-a100")
    assert MixedCluster(id="two", name="two", pools=(H100, H100)).labels == ("dgx-h100", "dgx-h100#2")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pools": ()}, "at least one ClusterSpec"),
        ({"pools": (H100, "dgx-a100")}, r"pools\[1\] must be a ClusterSpec"),
        ({"pools": (H100,), "shared": NetworkLevel(name="x", bytes_per_s=1e9, latency_s=0, span=8)}, "span"),
        ({"pools": (H100, A100), "labels": ("a", "a")}, "labels must name each pool once"),
    ],
)
def test_mixed_cluster_refuses_bad_fields(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MixedCluster(id="bad", name="bad", **kwargs)


def test_plus_form_builds_pools_from_presets_with_their_node_counts() -> None:
    mixed = load_mixed_cluster("dgx-h100:4+dgx-a100:4")
    assert [p.id for p in mixed.pools] == ["dgx-h100", "dgx-a100"]
    assert [p.num_nodes for p in mixed.pools] == [4, 4] and mixed.num_devices == 64
    assert parse_pools_text("dgx-h100+dgx-a100:2") == [("dgx-h100", None), ("dgx-a100", 2)]
    assert is_mixed_ref("dgx-h100:4+dgx-a100:4") and is_mixed_ref("dgx-h100:2")
    assert not is_mixed_ref("dgx-h100")  # a plain cluster keeps today's meaning


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("dgx-h100:4+", "each pool is CLUSTER"),
        ("dgx-h100:0+dgx-a100:4", "node count of 'dgx-h100' must be"),
        ("dgx-h100:x+dgx-a100:4", "each pool is CLUSTER"),
        ("dgx-h100:4+no-such:4", "unknown cluster 'no-such'"),
    ],
)
def test_plus_form_errors_name_the_bad_part(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_mixed_cluster(text)


def test_mixed_preset_toml_and_its_errors(tmp_path: Path) -> None:
    assert "h100-a100-ib" in mixed_preset_names()
    mixed = load_mixed_cluster("h100-a100-ib")
    assert mixed.labels == ("h100", "a100") and mixed.link.bytes_per_s == 25e9 and mixed.num_devices == 64
    bad = tmp_path / "bad.toml"
    bad.write_text('id = "b"\nname = "b"\n[[pools]]\ncluster = "dgx-h100"\nnodes = 2\n')
    with pytest.raises(
        ValueError, match=r"bad.toml pools\[0\]: unknown key\(s\) nodes; allowed: cluster, label, num_nodes"
    ):
        load_mixed_cluster(str(bad))
    with pytest.raises(ValueError, match="a mixed cluster"):  # the single-cluster loader says what it is
        load_cluster(str(bad))


# ---- one cost path: a pipeline over one pool is the homogeneous estimate ------------------------------


@pytest.mark.parametrize(
    ("tp", "pp", "dp", "zero", "rc"), [(8, 2, 1, 0, "none"), (4, 4, 1, 0, "selective"), (2, 4, 2, 1, "full")]
)
def test_single_pool_pipeline_equals_the_homogeneous_estimate(
    tp: int, pp: int, dp: int, zero: int, rc: str
) -> None:
    model, cal = load_model("llama-3.1-8b"), load_calibration("default")
    workload = Workload(seq_len=4096, global_batch_size=64)
    mixed = MixedCluster(id="one", name="one", pools=(H100,))
    layout = Layout(order=(0,), tps=(tp,), stages=(pp,), dp=dp, micro_batch_size=1, zero_stage=zero,
                    recompute=rc, schedule="1f1b")  # fmt: skip
    pricer = PipelinePricer(model, mixed, workload, cal, 0.0)
    pricer.prepare([layout])
    split = pricer.split(layout, layers=(model.num_layers // pp,) * pp)
    assert split is not None
    mixed_est = pricer.estimate(split)
    plan = ParallelPlan(
        dp=dp, tp=tp, pp=pp, zero_stage=zero, sequence_parallel=tp > 1, recompute=Recompute(rc)
    )
    ref = estimate_plan(model, H100, workload, plan, calibration=cal)
    assert mixed_est.step_time_s == pytest.approx(ref.step_time_s, rel=1e-12)
    assert mixed_est.mfu == pytest.approx(ref.mfu, rel=1e-12)
    assert mixed_est.bubble_fraction == pytest.approx(ref.bubble_fraction, rel=1e-12)
    assert mixed_est.stages["memory_bytes"].to_list() == pytest.approx(
        ref.memory["total_bytes"].to_list(), rel=1e-12
    )


@pytest.mark.parametrize(
    ("framework", "schedule", "tp", "pp"),
    [
        ("megatron-core-2024", "1f1b", 4, 4),
        ("zero-bubble-2024", "zb-h2", 1, 4),
        ("zero-bubble-2024", "zb-h2", 8, 2),
    ],
)
def test_single_pool_pipeline_keeps_blocking_sends_and_overlapped_steps(
    framework: str, schedule: str, tp: int, pp: int
) -> None:
    """The profile's pipeline mechanisms reach the mixed-cluster path too: Megatron-Core's blocking 1F1B sends
    and Zero Bubble's overlapped steps (optimizer post-validation) price one pool exactly as the homogeneous
    estimate does."""
    model, cal = load_model("llama-3.1-8b"), load_calibration("default").with_framework(framework)
    workload = Workload(seq_len=2048, global_batch_size=64)
    mixed = MixedCluster(id="one", name="one", pools=(H100,))
    dp = H100.num_devices // (tp * pp)
    layout = Layout(order=(0,), tps=(tp,), stages=(pp,), dp=dp, micro_batch_size=1, zero_stage=0,
                    recompute="none", schedule=schedule)  # fmt: skip
    pricer = PipelinePricer(model, mixed, workload, cal, 0.0)
    pricer.prepare([layout])
    split = pricer.split(layout, layers=(model.num_layers // pp,) * pp)
    assert split is not None
    plan = ParallelPlan(
        dp=dp, tp=tp, pp=pp, sequence_parallel=tp > 1, recompute=Recompute.NONE, schedule=schedule
    )
    ref = estimate_plan(model, H100, workload, plan, calibration=cal)
    est = pricer.estimate(split)
    assert est.step_time_s == pytest.approx(ref.step_time_s, rel=1e-12)
    # one assembly, one bubble: the pipeline sends excluded, as the homogeneous estimate counts it
    assert est.bubble_fraction == pytest.approx(ref.bubble_fraction, rel=1e-12)
    got, want = (t.sort(["rank", "start_s", "op"]) for t in (est.timeline, ref.timeline))
    assert got.drop("start_s", "end_s").equals(want.drop("start_s", "end_s"))
    assert got["end_s"].to_list() == pytest.approx(want["end_s"].to_list(), rel=1e-12)


# ---- the layer split and the batch split ---------------------------------------------------------------


def test_layer_split_follows_speed_and_memory() -> None:
    assert split_layers(80, [1.0, 3.0], [0.0, 0.0], [80, 80]) == (60, 20)  # 3x faster stage, 3x the layers
    assert split_layers(8, [1.0] * 4, [0.0] * 4, [8] * 4) == (2, 2, 2, 2)
    assert split_layers(80, [1.0, 3.0], [0.0, 0.0], [50, 80]) == (50, 30)  # the fast stage's memory caps it
    assert split_layers(10, [1.0, 1.0], [0.0, 0.0], [4, 5]) is None  # 9 layers fit, 10 do not
    assert split_layers(3, [1.0] * 4, [0.0] * 4, [3] * 4) is None  # fewer layers than stages


@pytest.mark.parametrize("seed", range(5))
def test_layer_split_is_the_min_max_optimum(seed: int) -> None:
    import random

    rng = random.Random(seed)
    per = [rng.uniform(0.5, 3.0) for _ in range(3)]
    edge = [rng.uniform(0.0, 2.0) for _ in range(3)]
    caps = [rng.randint(2, 9) for _ in range(3)]
    layers = 12
    got = split_layers(layers, per, edge, caps)
    best = min(
        (max(e + n * c for e, n, c in zip(edge, ns, per, strict=True)), ns)
        for ns in itertools.product(*(range(1, c + 1) for c in caps))
        if sum(ns) == layers
    )
    assert got is not None
    assert max(e + n * c for e, n, c in zip(edge, got, per, strict=True)) == pytest.approx(best[0])


def test_batch_shares_follow_speed() -> None:
    assert proportional_shares(256, [3.0, 1.0], 8) == (192, 64)
    assert proportional_shares(256, [36_000.0, 14_000.0], 1) == (184, 72)  # 256 x 36/50 = 184.3
    assert sum(proportional_shares(100, [1.0, 1.0, 1.0], 1) or ()) == 100
    assert proportional_shares(16, [1.0, 1.0, 1.0], 8) is None  # three pools cannot each take 8 of 16


# ---- done when: 4 DGX H100 + 4 DGX A100, Llama-3.1-70B ---------------------------------------------------


def test_mixed_h100_a100_beats_both_homogeneous_baselines() -> None:
    model = load_model("llama-3.1-70b")
    workload = Workload(seq_len=8192, global_batch_size=256)
    mixed = load_mixed_cluster("dgx-h100:4+dgx-a100:4")
    result = plan_mixed(model, mixed, workload, options=MixedOptions())
    best = result.best
    assert best is not None and best.fits
    constraints = Constraints(memory_headroom_frac=DEFAULT_HEADROOM_FRAC)
    h100_alone = best_estimate(search(model, load_cluster("dgx-h100", num_nodes=4), workload, constraints))
    all_a100 = best_estimate(search(model, load_cluster("dgx-a100", num_nodes=8), workload, constraints))
    assert h100_alone is not None and all_a100 is not None
    assert best.tokens_per_s > 1.2 * h100_alone.tokens_per_s
    assert best.tokens_per_s > 1.2 * all_a100.tokens_per_s
    # stages sized per pool: each pool's stages hold its own layer counts, every layer placed once
    stages = best.stages
    assert stages["layers"].sum() == model.num_layers
    assert set(stages["pool"].to_list()) == set(mixed.labels)
    assert best.kind == "pipeline"
    share = {  # the model's layers per device of a stage (a stage's n layers are split over its tp devices)
        pool: [r["layers"] / r["tp"] for r in stages.iter_rows(named=True) if r["pool"] == pool]
        for pool in mixed.labels
    }
    assert min(share["dgx-h100"]) > 2 * max(share["dgx-a100"])  # an H100 carries over twice an A100's work
    stage_s = [f + b for f, b in zip(stages["forward_s"], stages["backward_s"], strict=True)]
    assert max(stage_s) / min(stage_s) < 1.3  # balanced by time, not by layer count
    assert all(m <= u for m, u in zip(stages["memory_bytes"], stages["usable_bytes"], strict=True))


def test_the_placement_is_drawn() -> None:
    from workbench_widgets.plots.mixed import mixed_placement_figure

    model = load_model("llama-3.1-8b")
    mixed = MixedCluster(id="m", name="m", pools=(load_cluster("dgx-h100"), load_cluster("dgx-a100")))
    result = plan_mixed(
        model,
        mixed,
        Workload(seq_len=4096, global_batch_size=32),
        options=MixedOptions(tp=(8,), recompute=("none",), micro_batch_sizes=(1,), families=("pipeline",)),
    )
    best = result.best
    assert best is not None
    fig = mixed_placement_figure(best, num_layers=model.num_layers)
    data = fig.renderers[0].data_source.data
    assert list(data["pool"]) == best.stages["pool"].to_list()
    assert [r - a for a, r in zip(data["left"], data["right"], strict=True)] == best.stages[
        "layers"
    ].to_list()
    assert len(set(data["color"])) == 2  # one colour per pool
