"""The app's Serving tab in process: it computes when opened, then on every change, writes the figures in place
when their shape holds, says why there is no estimate, and reproduces its numbers with the CLI command it shows."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

pytest.importorskip("panel")

from click.testing import CliRunner  # noqa: E402
from workbench_cli import cli  # noqa: E402
from workbench_widgets.app.app import WorkbenchApp  # noqa: E402
from workbench_widgets.app.serving_view import ServingView  # noqa: E402
from workbench_widgets.app.state import WorkbenchState  # noqa: E402
from workbench_widgets.app.tabs import tab_index  # noqa: E402
from workbench_widgets.plots.serving import latency_cdf  # noqa: E402
from workbench_widgets.plots.serving_run import batch_composition  # noqa: E402

from workbench.specs.serving import Arrival  # noqa: E402


@pytest.fixture
def view() -> ServingView:
    v = ServingView()
    v.panel()
    v.store.state.num_requests = 64  # small runs keep the tests fast
    return v


def _data(pane, name):
    return next(r for r in pane.object.renderers if r.name == name).data_source.data


def test_computes_when_opened_and_shows_the_estimate(view: ServingView) -> None:
    assert view.store.estimate is None and "Open the tab" in view.summary.object
    view.show()
    est = view.store.estimate
    assert est is not None and est.workload.request_count == 64 and est.plan.tp == 8
    text = view.summary.object
    for unit in (" ms", " output tokens/s", " tokens per engine", "SLO TTFT <= 2,000 ms"):
        assert unit in text
    assert np.allclose(
        _data(view.figures["ttft_cdf"], "cdf")["latency_ms"], latency_cdf(est, "ttft")["latency_s"] * 1e3
    )
    assert all(p.visible for p in view.figures.values())
    assert view.store.sweep is not None and view.store.sweep.height >= 5


def test_a_change_rewrites_the_figures_in_place(view: ServingView) -> None:
    view.show()
    kv, batch = view.figures["kv_cache"].object, view.figures["batch"].object
    before = list(_data(view.figures["batch"], "prefill")["prefill"])
    view.widgets["input_tokens"].value = 2048
    est = view.store.estimate
    assert est.workload.input_lengths()[0] == 2048
    assert view.figures["kv_cache"].object is kv and view.figures["batch"].object is batch  # same models
    after = _data(view.figures["batch"], "prefill")["prefill"]
    assert list(after) != before
    assert np.allclose(after, batch_composition(est, 0)["prefill_tokens"])  # what a fresh figure would draw
    assert float(np.sum(after)) == 2048 * 64  # every prompt prefilled once


def test_a_refused_plan_says_why_and_hides_the_figures(view: ServingView) -> None:
    view.show()
    view.widgets["tp"].value = 1  # 70B in bf16 does not fit one H100
    assert view.store.estimate is None and "No estimate" in view.summary.object
    assert "no room for one KV block" in view.summary.object
    assert not any(p.visible for p in view.figures.values()) and view.download.disabled
    view.widgets["tp"].value = 4
    assert view.store.estimate is not None and view.figures["batch"].visible and not view.download.disabled


def test_slo_and_arrivals_follow_the_controls(view: ServingView) -> None:
    view.show()
    view.widgets["ttft_slo_ms"].value = None
    view.widgets["tpot_slo_ms"].value = None
    assert view.store.slo is None and "SLO" not in view.summary.object
    assert not [m for m in view.figures["ttft_cdf"].object.center if m.name == "slo"]
    view.widgets["arrival"].value = "poisson"
    view.widgets["request_rate_per_s"].value = 3.0
    w = view.store.estimate.workload
    assert w.arrival is Arrival.POISSON and w.request_rate_per_s == 3.0


def test_the_command_it_shows_reproduces_its_numbers(view: ServingView) -> None:
    view.show()
    args = shlex.split(view.store.cli_command())
    assert args[:3] == ["workbench", "serve", "estimate"]
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    out, mine = json.loads(result.stdout), view.store.estimate.summary()
    for key in ("ttft_s", "tpot_s", "output_tokens_per_s", "kv_cache_capacity_tokens"):
        assert out[key] == pytest.approx(mine[key], rel=1e-12)
    html = view._report_file().getvalue().decode("utf-8")
    assert "Serving plan: llama-3.1-70b" in html and "workbench serve estimate" in html


def test_the_app_has_a_serving_tab_that_computes_when_opened() -> None:
    app = WorkbenchApp(WorkbenchState())
    app.panel()
    assert app.tabs._names[tab_index("serving")] == "Serving"
    assert app.views["serving"].store.estimate is None  # nothing computed before the tab is opened
    app.views["serving"].store.state.num_requests = 32
    app.tabs.active = tab_index("serving")
    assert app.views["serving"].store.estimate is not None
    other = ServingView()
    assert other.store.state is not app.views["serving"].store.state  # sessions share no choice


def test_disaggregated_speculative_and_prefix_deployments_from_the_tab(view: ServingView) -> None:
    view.show()
    plain = view.store.estimate.summary()
    s = view.store.state
    s.param.update(num_nodes=2, prefill_workers=1, prefill_tp=8, decode_workers=1, decode_tp=8,
                   speculative="eagle3", num_speculative_tokens=3, acceptance_rate=0.7, prefix_hit_rate=0.5)  # fmt: skip
    est = view.store.estimate
    assert est is not None, view.store.error
    assert est.plan.disaggregation is not None and est.plan.num_devices == 16
    assert est.plan.speculative is not None and est.workload.prefix_hit_rate == 0.5
    text = view.summary.object
    for line in ("KV transfer per request", "speculative decoding", "prefix cache hit rate 50%"):
        assert line in text
    assert est.summary()["tpot_s"] < plain["tpot_s"]
    # the command it shows reproduces the deployment, and the report lists the pools
    args = shlex.split(view.store.cli_command())
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tpot_s"] == pytest.approx(est.summary()["tpot_s"], rel=1e-12)
    html = view._report_file().getvalue().decode("utf-8")
    assert "decode pool" in html and "speculative decoding" in html and "prefix cache hit rate" in html


def test_host_offload_is_disabled_with_its_reason_on_a_dense_model(view: ServingView) -> None:
    view.show()
    control, note = view.widgets["offload_group_size"], view.offload_note
    assert (
        control.disabled
        and note.visible
        and "no MoE layers" in note.object
        and "llama-3.1-70b" in note.object
    )
    view.store.state.offload_group_size = 4  # kept for an MoE model, not applied to the dense one
    est = view.store.estimate
    assert (
        est is not None
        and est.plan.offload_group_size == 0
        and "host-held experts" not in view.summary.object
    )
    assert "--offload-group-size" not in view.store.cli_command()
    assert "tp all-reduce: NCCL at tp 8, priced by NCCL's tuning model" in view.summary.object


def test_host_offload_of_an_moe_model_reaches_the_plan_the_summary_and_the_command(view: ServingView) -> None:
    """DeepSeek-V3 in bf16 on 2 DGX H100 at tp 16 with one layer in 4 host-held (3, 7, .., 59: 15 layers): each
    device keeps 15 x 256 experts x 3 x 7168 x 2048 parameters / 16 x 2 bytes in host memory (config.json: hidden
    7168, moe_intermediate_size 2048, 256 routed experts)."""
    view.show()
    s = view.store.state
    s.param.update(model_preset="deepseek-v3", num_nodes=2, tp=16, offload_group_size=4, num_requests=32)
    est = view.store.estimate
    assert est is not None, view.store.error
    assert not view.widgets["offload_group_size"].disabled and not view.offload_note.visible
    offloaded = 15 * 256 * 3 * 7168 * 2048 / 16 * 2
    assert est.plan.offload_group_size == 4 and est.host_offload_bytes_per_device == pytest.approx(offloaded)
    text = view.summary.object
    assert (
        f"- host-held experts: the last layer of every 4 (SGLang offload), {offloaded / 2**30:,.2f} GiB"
        in text
    )
    assert f"waits {est.offload_wait_s * 1e3:,.2f} ms" in text and "tp all-reduce: NCCL at tp 16" in text
    args = shlex.split(view.store.cli_command())
    assert args[args.index("--offload-group-size") + 1] == "4"
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in ("tpot_s", "host_offload_bytes_per_device", "offload_wait_s"):
        assert out[key] == pytest.approx(est.summary()[key], rel=1e-12)
    view.widgets["offload_group_size"].value = None  # empty: off
    assert (
        view.store.specs()[2].offload_group_size == 0
        and "--offload-group-size" not in view.store.cli_command()
    )
    assert "host-held experts" not in view.summary.object
    view.widgets["offload_group_size"].value = 3  # layer 2 is one of DeepSeek-V3's 3 dense layers: refused
    assert (
        view.store.estimate is None and "layer 2" in view.summary.object and "is dense" in view.summary.object
    )


def test_the_engine_control_picks_the_all_reduce_kernels(view: ServingView) -> None:
    """TensorRT-LLM's profile names its custom kernels (profiles/engines/trtllm.toml, read with tomllib), timed
    on H100 at tp 8 by sgl-project/sglang PR #2904: the tab says so and its command names the engine."""
    import tomllib
    from pathlib import Path

    from workbench.presets.engines import engines_dir

    view.show()
    view.widgets["engine"].value = "trtllm"
    family = tomllib.loads(Path(engines_dir(), "trtllm.toml").read_text(encoding="utf-8"))["tp_all_reduce"]
    est = view.store.estimate
    assert est is not None and est.plan.engine == "trtllm" and est.tp_all_reduce == family == "trtllm_custom"
    assert (
        "TensorRT-LLM's custom one-shot/two-shot kernels at tp 8, priced by its published latency table"
        in (view.summary.object)
    )
    args = shlex.split(view.store.cli_command())
    assert args[args.index("--engine") + 1] == "trtllm"
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tpot_s"] == pytest.approx(est.summary()["tpot_s"], rel=1e-12)


def test_the_memory_share_is_the_engines_flag_its_default_when_empty(view: ServingView) -> None:
    """Empty: the engine's own default (SGLang at tp 8: --mem-fraction-static 0.81, server_args.py); a value is
    that flag, the command the tab shows passes it, and the CLI reproduces the estimate's KV capacity."""
    view.show()
    s = view.store.state
    s.engine = "sglang"
    est = view.store.estimate
    assert est is not None, view.store.error
    assert est.plan.gpu_memory_utilization_frac == 0.81
    assert "--gpu-memory-utilization" not in view.store.cli_command()
    s.gpu_memory_utilization = 0.6
    est = view.store.estimate
    assert est.plan.gpu_memory_utilization_frac == 0.6
    args = shlex.split(view.store.cli_command())
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.6"
    result = CliRunner().invoke(cli, [*args[1:], "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_cache_capacity_tokens"] == est.kv_cache_capacity_tokens
    assert view.widgets["gpu_memory_utilization"].value == 0.6
