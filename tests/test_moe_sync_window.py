"""Two mechanisms of fine-grained MoE layers as Megatron-Bridge 25.11 runs them (issue 48):

- the dropless host sync splits a layer's forward in two: the host blocks until the GPU drains, so the launches
  after the sync and the GPU's work before the next one add up (``moe_synced_forward_s``), checked against a
  kernel-by-kernel simulation of a host that launches in order and a GPU that runs in order;
- sliding-window attention runs at its own kernel's rate (cuDNN's banded kernel with a 128-key window reaches
  about 165 TFLOP/s on GB200, a fifth of the full causal kernel), checked against the published kernel times
  of cudnn-frontend's GPT-OSS training benchmark.

Expected values are a reference simulation or published numbers written out here, never the model's output.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from workbench.cost.flops import attention_ops
from workbench.cost.layer import layer_costs
from workbench.cost.moe import (
    MOE_LAYER_KERNEL_PARTS,
    moe_post_sync_host_s,
    moe_synced_forward_s,
    unfused_op_launches,
)
from workbench.cost.op_time import op_times
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.kernels import kernel_table_from_dict, kernel_table_to_dict, load_kernel_table


def _simulate_period_s(
    n_pre: int, g_pre: float, n_post: int, g_post: float, h: float, layers: int = 40
) -> float:
    """Steady-state seconds per layer of a host that launches each kernel in ``h`` seconds, in order, and
    blocks once per layer (after the pre-sync kernels) until the GPU has run everything launched; the GPU runs
    kernels in launch order, each starting when launched and the previous one is done."""
    host = gpu = 0.0
    ends = []
    for _ in range(layers):
        for segment, (n, g) in enumerate(((n_pre, g_pre), (n_post, g_post))):
            for _ in range(n):
                host += h
                gpu = max(gpu, host) + g
            if segment == 0:  # the sync: the host waits for the GPU to drain
                host = max(host, gpu)
                ends.append(host)
    return (ends[-1] - ends[10]) / (len(ends) - 11)


@pytest.mark.parametrize(
    ("n_pre", "g_pre", "n_post", "g_post", "h"),
    [
        (10, 100e-6, 50, 1e-6, 10e-6),  # launch-heavy experts after the sync, GPU-heavy attention before it
        (10, 100e-6, 50, 50e-6, 10e-6),  # GPU-bound throughout: the GPU time
        (40, 2e-6, 40, 2e-6, 30e-6),  # host-bound throughout: the host time
        (20, 30e-6, 60, 8e-6, 12e-6),  # in between
    ],
)
def test_synced_forward_matches_a_launch_by_launch_simulation(
    n_pre: int, g_pre: float, n_post: int, g_post: float, h: float
) -> None:
    sim = _simulate_period_s(n_pre, g_pre, n_post, g_post, h)
    host, gpu = (n_pre + n_post) * h, n_pre * g_pre + n_post * g_post
    got = float(moe_synced_forward_s(host, n_post * h, gpu, n_pre * g_pre))
    # the closed form treats launches as a fluid: within one kernel's launch and run of the simulation
    assert got == pytest.approx(sim, abs=h + max(g_pre, g_post))
    assert got >= max(host, gpu)  # never faster than the unsynced floor


def test_post_sync_launches_follow_the_dispatcher_code() -> None:
    """Qwen3-30B-A3B at ep8 in BF16: 16 local experts, two grouped GEMMs each forward; after the sync come half
    of the permute part (the unpermutation), the dispatch and combine, the expert activation and residuals."""
    model = load_model("qwen3-30b-a3b")
    cal = load_calibration("default")
    fw = dataclasses.replace(
        cal.framework, host_s_per_kernel=1e-5, cuda_graph_scopes=(), device_recipes={}, model_recipes={}
    )
    cal = dataclasses.replace(cal, framework=fw)
    parts = MOE_LAYER_KERNEL_PARTS
    want = (parts["permute"] / 2 + parts["dispatch"] + parts["expert_act"] + 2 * 16) * 1e-5
    assert float(moe_post_sync_host_s(model, cal, dtype="bf16", ep=8)) == pytest.approx(want)
    whole = dataclasses.replace(cal, framework=dataclasses.replace(fw, cuda_graph_scopes=("full_iteration",)))
    assert float(moe_post_sync_host_s(model, whole, dtype="bf16", ep=8)) == 0.0


def test_a_launch_bound_moe_layer_pays_its_post_sync_launches_after_its_attention() -> None:
    """With launches slow enough that the experts' launches (ep2: 64 local experts) outlast their GPU work and a
    long sequence whose attention outlasts its launches, the layer's forward is the post-sync launches plus the
    attention block's GPU time, above both the host and the GPU totals."""
    model = load_model("qwen3-30b-a3b")
    cluster = load_cluster("dgx-h100", 1)
    base = load_calibration("default")
    fw = dataclasses.replace(
        base.framework,
        host_s_per_kernel=6e-5,
        host_overhead_per_layer_s=0.0,
        cuda_graph_scopes=(),
        device_recipes={},
        model_recipes={},
    )
    cal = dataclasses.replace(base, framework=fw)
    args = dict(dtype="bf16", tokens=16384.0, seq_len=16384, tp=1, cp=1, ep=2, sequence_parallel=False)
    common = dict(recompute=0, tp_stride=1, cp_stride=1, moe_layer=True)
    synced = layer_costs(model, cluster, cal, **args, **common)  # type: ignore[arg-type]
    free = layer_costs(
        model,
        cluster,
        dataclasses.replace(cal, framework=dataclasses.replace(fw, moe_host_sync=False)),
        **args,  # type: ignore[arg-type]
        **common,  # type: ignore[arg-type]
    )
    parts = MOE_LAYER_KERNEL_PARTS
    post = (parts["permute"] / 2 + parts["dispatch"] + parts["expert_act"] + 2 * 64) * 6e-5
    host = (sum(parts.values()) + 2 * 64) * 6e-5
    assert float(synced.compute_f_s) > max(host, float(free.compute_f_s))
    assert float(synced.compute_f_s) - post < float(free.compute_f_s)  # the rest is GPU time before the sync


def test_unfused_op_launches_of_gpt_oss_follow_megatron_core() -> None:
    """GPT-OSS runs YaRN RoPE (12 kernels on the queries, 12 on the keys), the attention output bias's add
    (its bias-dropout-add unfused: 1), a clamped GLU (two clamps, a concatenation and a host-to-device copy)
    and biased experts (a concatenation and a cast) eagerly; the attention block's CUDA graph (GB300's
    recipe) replays the RoPE and bias kernels; Qwen3 has none of them."""
    cal = load_calibration("default")
    fw = dataclasses.replace(cal.framework, cuda_graph_scopes=(), device_recipes={}, model_recipes={})
    oss, qwen = load_model("gpt-oss-120b"), load_model("qwen3-30b-a3b")
    assert unfused_op_launches(fw, oss) == (2 * 12 + 1, 3 + 1 + 2)
    graphed = dataclasses.replace(fw, cuda_graph_scopes=("attn", "moe_router", "moe_preprocess"))
    assert unfused_op_launches(graphed, oss) == (0, 6)
    assert unfused_op_launches(fw, qwen) == (0, 0)
    fused = dataclasses.replace(fw, unfused_model_ops=())
    assert unfused_op_launches(fused, oss) == (0, 0)


GB200_SWA_FWD_MS = {2048: 0.109, 4096: 0.210, 8192: 0.414, 16384: 0.822}
"""cudnn-frontend (NVIDIA/cudnn-frontend @3929da2) benchmark/sdpa_benchmark_training/results/gpt_oss/gb200/
gpt_oss_20260424_100011.csv: cuDNN 9.22 BF16 forward time_ms of the 128-key sliding window, batch 2, 128 heads,
head_dim 64, causal."""
GB200_SWA_BWD_MS = {2048: 0.237, 4096: 0.465, 8192: 0.911, 16384: 1.818}
"""The same file's backward (non-deterministic) time_ms."""


@pytest.mark.parametrize("seq", sorted(GB200_SWA_FWD_MS))
def test_gb200_window_table_reproduces_the_published_kernel_times(seq: int) -> None:
    """GPT-OSS's window layers on GB200 at the published shape: the modelled forward and backward of the window
    op equal the benchmark's time_ms (batch 2, 128 heads, head_dim 64; the model counts the band's FLOPs as
    s w - w^2/2 per head, the benchmark w(w+1)/2 + (s - w) w: within 0.1%)."""
    model = dataclasses.replace(
        load_model("gpt-oss-120b"),
        num_attention_heads=128,
        num_key_value_heads=128,
        num_sliding_window_layers=36,
    )
    cal = load_calibration("default", framework="megatron-core-2024")
    device = load_cluster("gb200-nvl72", 1).device
    win = cal.window_attention(device, dtype="bf16", seq_len=seq, head_dim=64, window=128)
    assert win is not None
    ops = attention_ops(model, tokens=2.0 * seq, seq_len=seq, tp=1, act_bytes=2.0, flash=True)
    band = [o for o in ops if o.name == "attention_window"]
    t = op_times(
        band,
        peak_flop_per_s=device.peak("bf16"),
        gemm_curve=((1e9, 0.5),),
        hbm_bytes_per_s=device.hbm_bytes_per_s,
        attention=(1.0, 1.0),  # the full kernel's rate must not be used for the band
        window_attention=win,
    )
    assert float(t.fwd_s) * 1e3 == pytest.approx(GB200_SWA_FWD_MS[seq], rel=0.01)
    assert float(t.bwd_input_s) * 1e3 == pytest.approx(GB200_SWA_BWD_MS[seq], rel=0.01)


SWA_PREFILL_FWD_MS = {
    ("dgx-b200", 2048): 0.035168,
    ("dgx-b200", 8192): 0.113408,
    ("dgx-b200", 32768): 0.436928,
    ("dgx-h200", 2048): 0.03664,
    ("dgx-h200", 8192): 0.135487,
    ("dgx-h200", 32768): 0.517145,
}
"""cudnn-frontend benchmark/attention_inference/results/gpt_oss/{b200/gpt_oss_20260918_170602.csv @0501eca,
h200/gpt_oss_20260928_135723.csv @104a33b}: cuDNN 9.27 BF16 prefill time_ms of GPT-OSS's 128-key sliding window
with its sinks (rows gpt_oss_swa, phase context), batch 1, 64 q / 8 kv heads, head_dim 64, q_tokens = kv_len."""


@pytest.mark.parametrize(("cluster", "seq"), sorted(SWA_PREFILL_FWD_MS))
def test_b200_and_hopper_window_tables_reproduce_the_published_prefill_times(cluster: str, seq: int) -> None:
    """GPT-OSS's window layers at the published prefill shape on B200 and H200: the modelled forward of the
    window op equals the benchmark's time_ms (the model's band s w - w^2/2 per head against the benchmark's
    w(w+1)/2 + (s - w) w: within 0.1%, rounding of the table's fractions within 0.5%); H100 SXM reads the same
    fractions as H200 (the same GH100 SMs and clocks)."""
    model = dataclasses.replace(load_model("gpt-oss-120b"), num_sliding_window_layers=36)
    cal = load_calibration("default", framework="megatron-core-2024")
    device = load_cluster(cluster, 1).device
    win = cal.window_attention(device, dtype="bf16", seq_len=seq, head_dim=64, window=128)
    assert win is not None
    ops = attention_ops(model, tokens=float(seq), seq_len=seq, tp=1, act_bytes=2.0, flash=True)
    t = op_times(
        [o for o in ops if o.name == "attention_window"],
        peak_flop_per_s=device.peak("bf16"),
        gemm_curve=((1e9, 0.5),),
        hbm_bytes_per_s=device.hbm_bytes_per_s,
        attention=(1.0, 1.0),
        window_attention=win,
    )
    assert float(t.fwd_s) * 1e3 == pytest.approx(SWA_PREFILL_FWD_MS[(cluster, seq)], rel=0.01)
    if cluster == "dgx-h200":
        h100 = load_cluster("dgx-h100", 1).device
        same = cal.window_attention(h100, dtype="bf16", seq_len=seq, head_dim=64, window=128)
        assert same is not None and (float(same[0]), float(same[1])) == (float(win[0]), float(win[1]))


def test_window_tables_stand_only_for_windows_near_their_own() -> None:
    table = load_kernel_table("gb200")
    hit = table.attention_fracs(("cudnn",), dtype="bf16", head_dim=64, causal=True, seq_len=8192, window=128)
    assert hit is not None and float(hit[1]) == pytest.approx(164.7 / 2500, rel=0.01)
    assert (
        table.attention_fracs(("cudnn",), dtype="bf16", head_dim=64, causal=True, seq_len=8192, window=4096)
        is None
    )
    full = table.attention_fracs(("cudnn",), dtype="bf16", head_dim=64, causal=True, seq_len=8192)
    assert full is not None and float(full[1]) > 5 * float(hit[1])  # the full kernel, not the band's
    cal = load_calibration("default", framework="megatron-core-2024")
    a100 = load_cluster("dgx-a100", 1).device  # no window table: the caller keeps the full kernel's rate
    assert cal.window_attention(a100, dtype="bf16", seq_len=8192, head_dim=64, window=128) is None


def test_gpt_oss_window_layers_cost_more_on_gb200_than_at_the_full_kernel_rate() -> None:
    model = load_model("gpt-oss-120b")
    cluster = load_cluster("gb200-nvl72", 1)
    cal = load_calibration("default", framework="megatron-core-2024")
    args = dict(dtype="bf16", tokens=8192.0, seq_len=8192, tp=1, cp=1, ep=64, sequence_parallel=False)
    common = dict(recompute=0, tp_stride=1, cp_stride=1, moe_layer=True)
    banded = layer_costs(model, cluster, cal, **args, **common)  # type: ignore[arg-type]
    flat = layer_costs(
        dataclasses.replace(model, sliding_window=0, num_sliding_window_layers=0),
        cluster,
        cal,
        **args,
        **common,
    )  # type: ignore[arg-type]
    # 18 of 36 layers at 128 keys: fewer FLOPs than all-full attention, but the band's kernel is slow
    assert float(banded.compute_i_s) < float(flat.compute_i_s)
    per_layer_band_s = 0.5 * (GB200_SWA_FWD_MS[8192] / 4) * 1e-3  # half the layers, a quarter of the shape
    assert float(banded.compute_f_s) > per_layer_band_s


def test_window_key_round_trips_and_bad_windows_are_refused() -> None:
    table = load_kernel_table("gb300")
    data = kernel_table_to_dict(table)
    assert [t["window"] for t in data["attention"] if "window" in t] == [128]
    again = kernel_table_from_dict(data, where="gb300.toml")
    assert [t.window for t in again.attention if t.window] == [128]
    bad = dict(data, attention=[dict(data["attention"][0], window=-3)])
    with pytest.raises(ValueError, match="gb300.toml.*window"):
        kernel_table_from_dict(bad, where="gb300.toml")
    unmasked = dict(data, attention=[dict(data["attention"][0], causal=False, window=128)])
    with pytest.raises(ValueError, match="must be causal"):
        kernel_table_from_dict(unmasked, where="gb300.toml")
    assert np.isfinite(float(again.hbm_frac))
