"""State and Store of the app, in process: set parameters, assert on specs, choices, estimates and tables."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("panel")

from workbench_widgets.app import choices  # noqa: E402
from workbench_widgets.app.state import UPLOADED, WorkbenchState  # noqa: E402
from workbench_widgets.app.store import WorkbenchStore  # noqa: E402

from tests.conftest import ROOT  # noqa: E402
from workbench.specs import degrees  # noqa: E402
from workbench.specs.plan import ParallelPlan  # noqa: E402

TWO_LAYERS = ROOT / "profiles/measured/llama-3.1-8b-L2-H512-cpu-fp32/config.json"
"""A small Llama config.json shipped with the repository (2 layers, width 512)."""


@pytest.fixture
def store() -> WorkbenchStore:
    return WorkbenchStore(WorkbenchState(framework="generic"))  # every schedule and feature, to test them all


def test_divisors_and_nearest() -> None:
    assert degrees.divisors(12) == [1, 2, 3, 4, 6, 12]
    assert degrees.nearest(5, [1, 2, 4, 8]) == 4  # |5-4| < |5-8|
    assert degrees.nearest(3, [2, 4]) == 2  # tie goes to the smaller
    with pytest.raises(ValueError, match="divisors: n must be"):
        degrees.divisors(0)


def test_default_state_is_llama70b_on_8_dgx_h100(store: WorkbenchStore) -> None:
    cluster, model = store.cluster_spec(), store.model_spec()
    assert cluster.num_devices == 64 and cluster.devices_per_node == 8
    # DGX H100 preset: NVLink 450 GB/s and 3 us, InfiniBand 50 GB/s and 10 us per device (profiles/clusters).
    assert cluster.levels[0].bytes_per_s == pytest.approx(450e9)
    assert cluster.levels[0].latency_s == pytest.approx(3e-6)
    assert cluster.levels[-1].bytes_per_s == pytest.approx(50e9)
    assert model.num_layers == 80 and model.num_attention_heads == 64  # Meta's config.json for 3.1 70B
    assert store.violations == [] and store.error == ""
    assert store.estimate is not None and store.estimate.plan.num_devices == 64


def test_only_valid_degrees_are_offered(store: WorkbenchStore) -> None:
    s = store.state
    # 64 devices, 64 query heads, 8 KV heads: tp must divide 64 and 64, and tp | 8 or 8 | tp.
    assert s.param.tp.objects == [1, 2, 4, 8, 16, 32, 64]
    # tp=8 leaves 8 devices; pp must divide 8 and the 80 layers.
    assert s.tp == 8 and s.param.pp.objects == [1, 2, 4, 8]
    assert s.dp == 64 // (s.tp * s.pp * s.cp)
    s.num_nodes = 2  # 16 devices: pp=8 still fits with tp=8? 16/8 = 2 -> pp in {1, 2}
    assert s.param.pp.objects == [1, 2] and s.pp == 2 and s.dp == 1
    assert store.estimate is not None and store.estimate.plan.num_devices == 16


def test_micro_batch_choices_follow_the_batch(store: WorkbenchStore) -> None:
    s = store.state
    s.num_nodes = 16  # 128 devices, tp=8, pp=8 -> dp=2
    assert s.dp == 2
    s.global_batch_size = 24  # 24 / dp = 12 sequences per replica
    assert s.param.micro_batch_size.objects == [1, 2, 3, 4, 6, 12]


def test_violation_is_a_sentence_next_to_its_control(store: WorkbenchStore) -> None:
    s = store.state
    s.param.update(tp=8, pp=8)
    s.global_batch_size = 3  # dp=1, m=3 < pp=8: 1F1B needs m >= pp
    assert store.estimate is None
    grouped = choices.violations_by_control(store.violations)
    assert "schedule" in grouped and "1f1b needs at least pp=8 micro-batches" in grouped["schedule"][0]
    assert "1f1b" in store.disabled_schedules and "gpipe" not in store.disabled_schedules
    s.schedule = "gpipe"
    assert store.violations == [] and store.estimate is not None


def test_v_schedule_sets_two_virtual_stages(store: WorkbenchStore) -> None:
    store.state.schedule = "zbv"
    assert store.state.vpp == 2 and store.state.param.vpp.objects == [2]
    assert store.estimate is not None and store.estimate.plan.vpp == 2


def test_cluster_preset_fills_the_fields_and_edits_are_marked(store: WorkbenchStore) -> None:
    s = store.state
    s.cluster_preset = "gb200-nvl72"
    assert (
        s.devices_per_node == 4 and s.scale_up_span == 72
    )  # NVL72: 4 GPUs per tray, 72 in one NVLink domain
    s.scale_out_bandwidth_GBps = 25.0
    cluster = store.cluster_spec()
    assert cluster.levels[-1].bytes_per_s == pytest.approx(25e9) and cluster.name.endswith("(edited)")


def test_model_fields_and_uploaded_config(store: WorkbenchStore) -> None:
    s = store.state
    s.num_layers = 40
    assert store.model_spec().num_layers == 40 and store.model_spec().name.endswith("(edited)")
    gpt2 = {
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": 768,
        "n_head": 12,
        "n_layer": 12,
        "n_positions": 1024,
        "vocab_size": 50257,
    }
    store.upload_config(gpt2)
    assert s.model_preset == UPLOADED and s.num_layers == 12 and s.hidden_size == 768
    with pytest.raises(ValueError, match="architectures"):
        store.upload_config({"architectures": ["Nope"]})


def test_backend_choices_come_from_the_registry(store: WorkbenchStore) -> None:
    from workbench.estimate.registry import backend_names

    assert store.state.param.backend.objects == backend_names()
    for name, reason in store.backend_reasons.items():
        assert name in backend_names() and reason


def test_load_plan_sets_the_controls(store: WorkbenchStore) -> None:
    store.load_plan(ParallelPlan(dp=4, tp=4, pp=4, micro_batch_size=2, zero_stage=3, schedule="gpipe"))
    plan = store.plan()
    assert (plan.tp, plan.pp, plan.dp, plan.micro_batch_size, plan.zero_stage) == (4, 4, 4, 2, 3)
    assert store.estimate is not None and store.estimate.plan == plan


def test_two_stores_share_nothing() -> None:
    a, b = WorkbenchStore(), WorkbenchStore()
    a.state.num_nodes = 2
    a.state.model_preset = "llama-3.1-8b"
    assert b.state.num_nodes == 8 and b.state.model_preset == "llama-3.1-70b"
    assert a.state.param.pp.objects != b.state.param.pp.objects or a.state.pp != b.state.pp
    assert b.estimate is not None and b.estimate.cluster.num_devices == 64


class _SlowBackend:
    """Stands for a profiling or real-run backend: prices with the analytic backend, marked as measured."""

    name = "slow"

    def unavailable_reason(self) -> str | None:
        return None

    def estimate(self, model, cluster, workload, plan):
        from dataclasses import replace

        from workbench.estimate.registry import get_backend

        return replace(
            get_backend("analytic").estimate(model, cluster, workload, plan), backend="slow", measured=True
        )


def test_slow_backends_run_in_the_background(store: WorkbenchStore) -> None:
    queued: list = []
    store.run_in_background = queued.append
    store._backends["slow"] = _SlowBackend()
    store.state.param.backend.objects = [*store.state.param.backend.objects, "slow"]
    store.state.backend = "slow"
    assert store.estimate is None and store.working.startswith("slow is pricing") and len(queued) == 1
    queued.pop()()  # the background thread's work
    assert store.estimate is not None and store.estimate.backend == "slow" and store.working == ""
    store.state.num_nodes = 4  # a run queued for 4 nodes...
    stale = queued.pop()
    store.state.num_nodes = 2  # ...is dropped when the user moved on before it finished
    stale()
    queued.pop()()
    assert store.estimate.cluster.num_nodes == 2


def test_interleaved_schedule_gets_two_virtual_stages(store: WorkbenchStore) -> None:
    assert "interleaved-1f1b" not in store.disabled_schedules  # offered although vpp is 1 now
    store.state.param.update(framework="megatron-lm-2021", zero_stage=0)  # equal stages only, no ZeRO
    store.state.schedule = "interleaved-1f1b"
    # 80 layers over pp=8: vpp in {1, 2, 5, 10 > MAX_VPP}; interleaving needs >= 2 (Narayanan et al. 2021, sec 2.2)
    assert store.state.param.vpp.objects == [1, 2, 5] and store.state.vpp == 2
    assert store.violations == [] and store.estimate is not None and store.estimate.plan.vpp == 2
    # a stack with uneven stages (the generic profile) may put 80 layers on any pp*vpp <= 80 stages
    store.state.framework = "generic"
    assert store.state.param.vpp.objects == list(range(1, 9))
    store.state.vpp = 3  # 24 stages: the remainder 8 layers go to the middle stages
    assert store.violations == [] and store.estimate is not None and store.estimate.plan.vpp == 3


def test_interleaved_runs_as_1f1b_while_no_vpp_is_valid_and_comes_back() -> None:
    """A model whose layers leave no vpp >= 2 moves the interleaved schedule to 1F1B (as Megatron-Core runs a
    pipeline without virtual stages), says so, prices, and the chosen schedule returns with a model that
    allows it. Defect of issue 51 item 3: the schedule was kept, the plan refused and no estimate shown."""
    store = WorkbenchStore(WorkbenchState(framework="megatron-core-2024"))
    store.load_plan(
        {"tp": 8, "pp": 4, "vpp": 5, "cp": 1, "micro_batch_size": 1, "schedule": "interleaved-1f1b"}
    )
    assert store.estimate is not None and store.estimate.plan.vpp == 5
    store.upload_config(json.loads(TWO_LAYERS.read_text()), source="config.json")
    # 2 layers on 8 devices left by tp 8: pp in {1, 2}; pp 2 holds one layer per stage, so vpp is 1 only
    s = store.state
    assert (s.pp, s.vpp, s.schedule) == (2, 1, "1f1b")
    assert store.violations == [] and store.estimate is not None and store.estimate.plan.schedule == "1f1b"
    assert "schedule interleaved-1f1b -> 1f1b (no vpp >= 2 divides the 2 layers into pp 2 stages)" in (
        store.adjusted
    )
    s.model_preset = "llama-3.1-70b"  # 80 layers: pp 4 vpp 5 valid again
    assert (s.pp, s.vpp, s.schedule) == (4, 5, "interleaved-1f1b") and store.adjusted == ""
    assert store.estimate is not None and store.estimate.plan.vpp == 5


def test_interleaved_picks_a_vpp_it_runs_not_a_ties_1() -> None:
    """With vpp options [1, 3] (a tie between 1 and 3 around the default 2), interleaved 1F1B gets 3."""
    store = WorkbenchStore(WorkbenchState(framework="megatron-lm-2021"))
    model, workload = store.model_spec(), store.workload()
    current = {"tp": 8, "cp": 1, "ulysses": 1, "pp": 8, "vpp": 1, "micro_batch_size": 1, "ep": 1, "etp": 1}
    thirty = dataclasses.replace(model, num_layers=48)  # 48 layers over pp 8: 6 per rank, vpp in {1, 2, 3, 6}
    options, picks, schedule = degrees.plan_choices(thirty, 64, workload, current, "interleaved-1f1b")
    assert options["vpp"] == [1, 2, 3, 6] and picks["vpp"] == 2 and schedule == "interleaved-1f1b"
    odd = dataclasses.replace(model, num_layers=24)  # 24 layers over pp 8: 3 per rank, vpp in {1, 3}
    options, picks, schedule = degrees.plan_choices(odd, 64, workload, current, "interleaved-1f1b")
    assert options["vpp"] == [1, 3] and picks["vpp"] == 3 and schedule == "interleaved-1f1b"
    single = dataclasses.replace(model, num_layers=8)  # one layer per rank: vpp 1 only -> 1F1B
    options, picks, schedule = degrees.plan_choices(single, 64, workload, current, "interleaved-1f1b")
    assert options["vpp"] == [1] and picks["vpp"] == 1 and schedule == "1f1b"
    assert (
        degrees.plan_choices(single, 64, workload, current, "zbv")[2] == "zbv"
    )  # no twin: the rules refuse it


def test_violations_go_to_their_record_control() -> None:
    from workbench.specs.rules import Violation

    grouped = choices.violations_by_control(
        [
            Violation(key="devices", control="cluster", sentence="tp=8 reads like a tp rule"),
            Violation(key="tp_divides_heads", control="tp", sentence="a"),
            Violation(key="tp_kv_heads", control="tp", sentence="b"),
        ]
    )
    assert grouped == {"cluster": ["tp=8 reads like a tp rule"], "tp": ["a", "b"]}


def test_expert_controls_offer_valid_etp_and_capacity_factor(store: WorkbenchStore) -> None:
    """Qwen3-30B-A3B (128 experts of width 768) on 2 DGX H100 nodes at tp1 pp1: ep=8 leaves dp*cp*tp/ep = 2,
    so etp may be 0 (automatic), 1 or 2; the capacity factor reaches the workload."""
    s = store.state
    s.param.update(model_preset="qwen3-30b-a3b", num_nodes=2)
    s.param.update(tp=1, pp=1)
    s.ep = 8
    assert s.param.etp.objects == [0, 1, 2]
    assert store.plan().etp is None and store.plan().expert_tp == 1
    s.etp = 2
    assert store.plan().etp == 2 and store.estimate is not None and store.estimate.plan.etp == 2
    s.capacity_factor = 1.25
    assert store.workload().capacity_factor == 1.25
    store.load_plan(ParallelPlan(dp=16, ep=8))
    assert s.etp == 0 and store.plan().etp is None


def test_ulysses_and_rank_order_reach_the_plan(store: WorkbenchStore) -> None:
    """The planner's plans may split cp into Ulysses and ring ranks and number the ranks pipeline-first; the
    controls carry both into the priced plan."""
    s = store.state
    s.param.update(tp=4, cp=2)
    # Llama 3.1 70B: 64 query and 8 key/value heads; tp*ulysses must divide both, ulysses must divide cp.
    assert s.param.ulysses.objects == [1, 2]
    store.load_plan(
        ParallelPlan(dp=4, tp=4, pp=2, cp=2, ulysses=2, rank_order=("tp", "cp", "ep", "pp", "dp"))
    )
    assert (s.ulysses, s.rank_order) == (2, "tp-cp-ep-pp-dp")
    assert store.estimate is not None
    assert store.estimate.plan.ulysses == 2 and store.estimate.plan.rank_order[-1] == "dp"
    s.cp = 1  # no context parallelism left: ulysses back to 1
    assert s.ulysses == 1 and s.param.ulysses.objects == [1]


def test_model_picker_lists_every_preset_by_family(store: WorkbenchStore) -> None:
    """Issue 46: the picker groups the presets by architecture family (the labels a person reads) and keeps the
    preset id as the value; the families are the ones the presets' ``architectures`` name."""
    from workbench.presets import catalog

    names = store.state.param.model_preset.names
    assert sorted(v for v in names.values() if v != UPLOADED) == sorted(catalog.preset_names("model"))
    assert names[UPLOADED] == UPLOADED
    for label, preset in [
        ("Qwen3 · qwen3-8b", "qwen3-8b"),  # Qwen3ForCausalLM
        ("Qwen3-MoE · qwen3-30b-a3b", "qwen3-30b-a3b"),  # Qwen3MoeForCausalLM
        ("Gemma 3 · gemma-3-27b", "gemma-3-27b"),
        ("Mixtral · mixtral-8x7b", "mixtral-8x7b"),
        ("Llama 4 · llama-4-scout-17b-16e", "llama-4-scout-17b-16e"),
    ]:
        assert names[label] == preset
    families = [label.split(" · ")[0] for label in names if label != UPLOADED]
    # grouped: a family's presets stand together
    assert all(families.index(f) == i or families[i - 1] == f for i, f in enumerate(families))
    store.state.model_preset = "qwen3-8b"
    assert store.model_spec().num_layers == 36  # Qwen3-8B config.json: num_hidden_layers 36


def test_fp8_recipe_control_offers_what_the_stack_offers() -> None:
    """The app's FP8 recipe control lists the stack's own ("stack") and the recipes its profile offers
    (profiles/frameworks/megatron-core-2024.toml [offers]); a chosen recipe reaches the plan and its estimate."""
    store = WorkbenchStore(WorkbenchState(framework="megatron-core-2024"))
    assert list(store.state.param.fp8_recipe.objects) == ["stack", "current", "delayed", "blockwise"]
    assert store.plan().fp8_recipe is None
    store.state.param.update(dtype="fp8", fp8_recipe="delayed")
    assert store.plan().fp8_recipe == "delayed" and "fp8-delayed" in store.plan().describe()
    assert store.estimate is not None and store.error == ""


def test_a_shared_links_plan_applies_in_one_update() -> None:
    """Panel applies a link's query string as one update: an interleaved plan (pp 2, vpp 4) arrives before the
    Store has widened the vpp choices for pp 2, and must still be the plan shown; a value that is not valid is
    moved with the sentence that says so, never refused silently."""
    store = WorkbenchStore(WorkbenchState())
    store.state.param.update(tp=4, pp=2, vpp=4, schedule="interleaved-1f1b", micro_batch_size=1)
    plan = store.plan()
    assert (plan.tp, plan.pp, plan.vpp, plan.schedule) == (4, 2, 4, "interleaved-1f1b")
    assert plan.dp == 8 and store.adjusted == "" and store.estimate is not None
    store.state.param.update(tp=3)  # 3 divides neither the heads nor the 64 devices
    assert store.plan().tp != 3 and "tp 3 ->" in store.adjusted
    before = store.plan()
    store.state.param.update(tp="<b>x</b>")  # not a degree at all (a hand-edited link): refused, nothing kept
    assert store.plan() == before and "tp must be a whole number" in store.refused
    assert all(isinstance(o, int) for o in store.state.param.tp.objects)
    store.state.param.update(tp=4)
    assert store.plan().tp == 4 and store.error == ""
