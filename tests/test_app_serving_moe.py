"""The Serving tab's expert-parallel, attention-DP and dtype controls (issue 49): what they offer for the model and
the cluster, that the plan the tab prices takes exactly their values, what an fp8 weight does to the weights and
the KV cache (closed forms from the models' config.json), and the refusals the tab shows instead of raising."""

from __future__ import annotations

import json
import shlex

import pytest

pytest.importorskip("panel")

from click.testing import CliRunner  # noqa: E402
from workbench_cli import cli  # noqa: E402
from workbench_widgets.app.serving_view import ServingView  # noqa: E402

from workbench.presets import catalog  # noqa: E402
from workbench.presets.engines import load_engine  # noqa: E402
from workbench.serving.memory import kv_capacity_tokens, weight_bytes_per_device  # noqa: E402
from workbench.serving.precision import kv_dtypes  # noqa: E402
from workbench.specs.serving import ServingPlan  # noqa: E402

DSV3 = {"model_preset": "deepseek-v3", "cluster_preset": "dgx-h200", "num_nodes": 2, "num_requests": 32}
"""DeepSeek-V3 on 16 H200 (two DGX H200 nodes); its config.json: 256 routed experts, 61 layers, hidden 7168."""


def _opened(num_requests: int = 64) -> ServingView:
    """The tab laid out and opened, simulating ``num_requests`` requests a run (small runs keep the tests fast)."""
    v = ServingView()
    v.panel()
    v.store.state.num_requests = num_requests
    v.show()
    return v


@pytest.fixture
def view() -> ServingView:
    return _opened()


def _same_as_cli(view: ServingView) -> dict:
    args = shlex.split(view.store.cli_command())
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_deepseek_v3_with_dp_attention_ep16_in_fp8_reaches_the_plan_the_summary_and_the_command(
    view: ServingView,
) -> None:
    s = view.store.state
    s.param.update(**DSV3, tp=1, attention_dp=16, ep=16, weight_dtype="fp8", activation_dtype="fp8",
                   kv_cache_dtype="fp8")  # fmt: skip
    est = view.store.estimate
    assert est is not None, view.store.error
    p = est.plan
    assert (p.tp, p.pp, p.attention_dp, p.ep, p.num_devices) == (1, 1, 16, 16, 16)
    assert (p.weight_dtype, p.activation_dtype, p.kv_cache_dtype) == ("fp8", "fp8", "fp8")
    # ep offered: the divisors of tp x attention_dp = 16 that divide 256 routed experts
    assert list(view.widgets["ep"].options.values()) == [1, 2, 4, 8, 16]
    assert not view.widgets["ep"].disabled and not view.ep_note.visible
    assert "1x tp1 ep16 adp16 fp8/fp8 kv-fp8" in view.summary.object
    args = shlex.split(view.store.cli_command())
    for flag, value in (("--ep", "16"), ("--attention-dp", "16"), ("--weight-dtype", "fp8"),
                        ("--activation-dtype", "fp8"), ("--kv-dtype", "fp8")):  # fmt: skip
        assert args[args.index(flag) + 1] == value
    out = _same_as_cli(view)
    for key in ("tpot_s", "ttft_s", "kv_cache_capacity_tokens"):
        assert out[key] == pytest.approx(est.summary()[key], rel=1e-12)
    html = view._report_file().getvalue().decode("utf-8")
    assert "1x tp1 ep16 adp16 fp8/fp8 kv-fp8" in html and "fp8 / fp8 / fp8" in html


def test_ep_choices_divide_both_the_engine_ranks_and_the_routed_experts(view: ServingView) -> None:
    """Mixtral-8x7B has 8 routed experts (config.json num_local_experts): an engine of tp 16 offers ep up to 8."""
    s = view.store.state
    s.param.update(model_preset="deepseek-v3", tp=2, attention_dp=4)
    assert list(view.widgets["ep"].options.values()) == [1, 2, 4, 8]
    s.param.update(model_preset="mixtral-8x7b", num_nodes=2, tp=16, attention_dp=1)
    assert list(view.widgets["ep"].options.values()) == [1, 2, 4, 8]
    s.param.update(
        prefill_workers=1, prefill_tp=2, prefill_attention_dp=2, decode_tp=8, decode_attention_dp=2
    )
    assert list(view.widgets["prefill_ep"].options.values()) == [1, 2, 4]
    assert list(view.widgets["decode_ep"].options.values()) == [1, 2, 4, 8]


def test_disaggregated_pools_take_their_own_ep_and_attention_dp(view: ServingView) -> None:
    s = view.store.state
    s.param.update(**DSV3, weight_dtype="fp8", activation_dtype="fp8", prefill_workers=1, prefill_tp=8,
                   prefill_ep=8, decode_workers=1, decode_tp=2, decode_attention_dp=4, decode_ep=4)  # fmt: skip
    est = view.store.estimate
    assert est is not None, view.store.error
    d = est.plan.disaggregation
    assert d is not None
    assert (d.prefill_workers, d.prefill_tp, d.prefill_ep, d.prefill_attention_dp) == (1, 8, 8, 1)
    assert (d.decode_workers, d.decode_tp, d.decode_ep, d.decode_attention_dp) == (1, 2, 4, 4)
    assert est.plan.ep is None and est.plan.attention_dp == 1  # the role layouts replace the plan's
    text = view.summary.object
    assert "- prefill pool 1 x tp8 ep8, fp8/fp8/kv-bf16" in text
    assert "- decode pool 1 x tp2 ep4 adp4, fp8/fp8/kv-bf16" in text
    out = _same_as_cli(view)
    assert out["tpot_s"] == pytest.approx(est.summary()["tpot_s"], rel=1e-12)
    html = view._report_file().getvalue().decode("utf-8")
    assert "1 x tp2 ep4 adp4, fp8/fp8/kv-bf16" in html


def test_fp8_weights_halve_the_gemm_weights_and_the_kv_cache_grows_by_what_they_free(
    view: ServingView,
) -> None:
    """Llama-3.1-70B (config.json: hidden 8192, 80 layers, 64 heads, 8 KV heads of 128, intermediate 28672,
    vocab 128256, untied) at tp 8 on one DGX H100: the GEMM weights of a device are 80 x (2 x 8192^2 +
    2 x 8192 x 1024 + 3 x 8192 x 28672) / 8 parameters, at 2 bytes in bf16 and 1 in fp8; the norms, embedding
    and LM head stay 16-bit. The bytes fp8 frees hold KV at 2 x 1 KV head x 128 x 2 bytes x 80 layers a token."""
    model = catalog.load_model("llama-3.1-70b")
    device = catalog.load_cluster("dgx-h100").device
    gemm = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) / 8
    rest_bytes = 80 * 2 * 8192 * 2 + 2 * (128256 * 8192 / 8) * 2 + 8192 * 2
    bf16 = view.store.estimate
    view.widgets["weight_dtype"].value = "fp8"
    fp8 = view.store.estimate
    assert fp8 is not None and fp8.plan.weight_dtype == "fp8" and bf16.plan.weight_dtype == "bf16"
    assert weight_bytes_per_device(model, bf16.plan) == pytest.approx(gemm * 2 + rest_bytes, rel=1e-12)
    assert weight_bytes_per_device(model, fp8.plan) == pytest.approx(gemm * 1 + rest_bytes, rel=1e-12)
    kv_per_token = 2 * 1 * 128 * 2 * 80
    assert gemm % (kv_per_token * 16) == 0  # the freed bytes are whole 16-token blocks: an exact difference
    grown = fp8.summary()["kv_cache_capacity_tokens"] - bf16.summary()["kv_cache_capacity_tokens"]
    assert grown == gemm / kv_per_token == 208_896
    sampler = load_engine("generic").profile_sampler_bytes_per_logit
    direct = kv_capacity_tokens(model, device, ServingPlan(tp=8, weight_dtype="fp8"), sampler)
    assert fp8.summary()["kv_cache_capacity_tokens"] == direct


def test_a_dense_model_disables_ep_with_its_reason_and_keeps_todays_plan(view: ServingView) -> None:
    assert view.widgets["ep"].disabled and view.widgets["decode_ep"].disabled and view.ep_note.visible
    assert "'llama-3.1-70b' is dense" in view.ep_note.object and "MoE" in view.ep_note.object
    p = view.store.estimate.plan
    assert p == ServingPlan(tp=8, pp=1, replicas=1)  # every new field at the ServingPlan default
    view.store.state.ep = 8  # kept for an MoE model, not applied to the dense one
    assert view.store.estimate is not None and view.store.estimate.plan.ep is None
    assert "--ep" not in view.store.cli_command() and "dtype" not in view.store.cli_command()


def test_an_invalid_combination_shows_the_error_instead_of_raising(view: ServingView) -> None:
    s = view.store.state
    s.param.update(**DSV3, tp=16, weight_dtype="fp8", ep=16)
    assert view.store.estimate is not None, view.store.error
    view.widgets["tp"].value = 8  # 8 ranks: ep 16 no longer divides them
    assert view.store.estimate is None and view.download.disabled
    assert "ep=16 must divide tp * attention_dp = 8" in view.store.error
    assert "No estimate" in view.summary.object and "ep=16 must divide tp" in view.summary.object
    assert 16 in view.widgets["ep"].options.values()  # the refused value stays shown beside its reason
    view.widgets["ep"].value = 8
    assert view.store.estimate is not None and view.store.estimate.plan.ep == 8


def test_dtype_choices_follow_the_device_peaks() -> None:
    """A100 has no FP8 tensor cores (its datasheet; profiles/hardware/a100-sxm4-80gb.toml has no fp8 peak): the
    tab offers no fp8 or fp4 GEMM inputs beside 16-bit weights there (``gemm_precision``) and says why when one is
    already chosen; weights may be fp8 (weight-only kernels). The KV cache offers what the engine stores on the
    device (``kv_dtypes``): fp8 on A100 and H100 under the generic engine (vLLM's rule: its kernels up-convert
    fp8 KV, PR #2279), never int4 (no engine has an int4 cache), fp4 only on datacenter Blackwell."""
    v = _opened(32)
    options = {n: list(v.widgets[n].options.values()) for n in ("activation_dtype", "weight_dtype")}
    assert options == {n: ["bf16", "fp16", "fp8", "fp4", "int4"] for n in options}  # H100 has an fp8 peak
    assert list(v.widgets["kv_cache_dtype"].options.values()) == ["bf16", "fp16", "fp8"]
    v.store.state.activation_dtype = "fp8"
    v.store.state.cluster_preset = "dgx-a100"
    assert v.store.estimate is None
    assert "activation_dtype='fp8'" in v.store.error and "a100-sxm4-80gb" in v.summary.object
    assert list(v.widgets["kv_cache_dtype"].options.values()) == ["bf16", "fp16", "fp8"]
    assert list(v.widgets["activation_dtype"].options.values()) == ["bf16", "fp16", "fp8", "int4"]
    assert "fp8" in v.widgets["weight_dtype"].options.values()
    v.widgets["activation_dtype"].value = "bf16"
    v.widgets["weight_dtype"].value = "fp8"
    assert v.store.estimate is not None and v.store.estimate.plan.weight_dtype == "fp8", v.store.error
    a100 = catalog.load_cluster("dgx-a100").device
    assert [d.value for d in kv_dtypes(load_engine("generic"), a100)] == ["bf16", "fp16", "fp8"]
    assert [d.value for d in kv_dtypes(load_engine("trtllm"), a100)] == ["bf16", "fp16"]


def test_sessions_offer_their_own_choices() -> None:
    a, b = _opened(16), _opened(16)
    a.store.state.param.update(model_preset="deepseek-v3", num_nodes=2, tp=16)
    assert list(a.widgets["ep"].options.values()) == [1, 2, 4, 8, 16]
    assert list(b.widgets["ep"].options.values()) == [1] and b.widgets["ep"].disabled


def test_serve_plan_searches_the_same_dtypes_the_tab_offers() -> None:
    """``workbench serve plan`` (``candidate_plans``) and the tab share ``gemm_precision`` and ``kv_dtypes``: on
    DGX A100 fp8 weights (W8A8 as searched) and an fp8 KV cache stay under the generic engine (weights priced
    weight-only there, the cache through vLLM's FlashInfer path) and are refused under TensorRT-LLM (no FP8 GEMMs
    or FP8 KV on Ampere, its support matrix). With bf16 and fp8 tried for weights and KV, none of the 4 dtype
    pairs is refused (generic), 3 are (trtllm), none on H100."""
    from collections import Counter

    from workbench.search.serving.space import ServingSearchConstraints, candidate_plans

    model = catalog.load_model("llama-3.1-8b")
    for cluster, engine, kept_pairs in (
        ("dgx-a100", "generic", {(a, k) for a in ("bf16", "fp8") for k in ("bf16", "fp8")}),
        ("dgx-a100", "trtllm", {("bf16", "bf16")}),
        ("dgx-h100", "generic", {(a, k) for a in ("bf16", "fp8") for k in ("bf16", "fp8")}),
    ):
        c = ServingSearchConstraints(disaggregation=False, max_num_seqs=(64,), max_num_batched_tokens=(2048,),
                                     engine=engine)  # fmt: skip
        counts: Counter[str] = Counter()
        plans = candidate_plans(model, catalog.load_cluster(cluster), 8, c, counts)
        assert {(p.activation_dtype.value, p.kv_cache_dtype.value) for p in plans} == kept_pairs
        refused = 4 - len(kept_pairs)
        assert counts["dtype"] * len(kept_pairs) == refused * len(plans)
