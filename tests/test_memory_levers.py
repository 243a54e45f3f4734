"""Memory levers as plan fields (issue 15, item 6): chunked cross-entropy, optimizer offload, activation
offload. Each is checked against a closed form computed here from the model's shapes and the cluster's host
path, not read back from the code under test."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost import step
from workbench.cost.activations import offload_share
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.presets.kernels import load_kernel_table
from workbench.specs.plan import ParallelPlan, Workload

MODEL, CLUSTER = load_model("llama-3.1-8b"), load_cluster("dgx-h100", 1)
WORK = Workload(seq_len=8192, global_batch_size=32)
CAL = load_calibration("default", framework="generic")
CTX = step.StepContext.build(MODEL, CLUSTER, WORK, CAL)


def _cols(**kw):
    return step.plan_columns(ParallelPlan(dp=8, micro_batch_size=1, zero_stage=1, **kw), WORK)


def _head_rank():
    return step.stage_holdings(MODEL, np.asarray(1), np.asarray(0))  # one stage: embedding and head


def test_chunked_loss_keeps_one_chunk_of_logits():
    """Logits of 8192 tokens over the 128,256-token vocabulary: 16-bit values, their fp32 upcast and fp32
    gradient = 10 bytes each; in 8 chunks only one eighth are alive at once."""
    whole = step.static_memory(CTX, _cols(), _head_rank())["activation_extra_bytes"]
    chunked = step.static_memory(CTX, _cols(loss_chunks=8), _head_rank())["activation_extra_bytes"]
    logits = 8192 * 128256 * 10.0
    assert float(whole - chunked) == pytest.approx(logits * 7 / 8, rel=1e-12)
    # the head's FLOPs are unchanged; only the GEMMs shrink, so on a GEMM curve that rises with size (the
    # published H100 table) the time may only grow. The H100's measured curve falls again above ~1e13 FLOPs
    # (the largest GEMMs hold the power limit longer), where a chunk can run faster than the whole.
    published = load_calibration("default", framework="generic", kernels=load_kernel_table("h100-sxm5-80gb"))
    ctx = step.StepContext.build(MODEL, CLUSTER, WORK, published)
    pair, chunk_pair = step.layer_pair(ctx, _cols()), step.layer_pair(ctx, _cols(loss_chunks=8))
    assert float(chunk_pair.edges.head_f_s) >= float(pair.edges.head_f_s)


def test_optimizer_offload_moves_the_states_and_prices_the_host_step():
    """ZeRO-1 over 8 ranks: each owns 1/8 of the 8.03e9 parameters. Offloaded, their 12 bytes of fp32 master
    weight and moments leave the device, and the step streams 28 bytes per parameter through the DGX H100's
    614 GB/s of host DRAM shared by 8 GPUs, then sends 2 bytes per parameter back over the 50 GB/s PCIe link."""
    held = _head_rank()
    on, off = _cols(offload_optimizer=True), _cols()
    assert float(step.static_memory(CTX, on, held)["optimizer_states_bytes"]) == 0.0
    dense, expert = step.params_held(CTX, off, held)
    local = float(dense + expert) / 8
    assert float(step.static_memory(CTX, off, held)["optimizer_states_bytes"]) == pytest.approx(12.0 * local)
    want = local * 28.0 / (614e9 / 8) + local * 2.0 / 50e9
    assert float(step.optimizer_s(CTX, on, dense, expert)) == pytest.approx(want, rel=1e-12)


def test_activation_offload_keeps_a_working_set_and_exposes_what_pcie_cannot_hide():
    """Offloaded, a micro-batch leaves no layer activations stored on the device (the peak counts a working set
    of two layers instead); each layer's forward is stretched by max(0, bytes / PCIe - forward) and its
    backward by max(0, bytes / PCIe - backward)."""
    base, off = _cols(), _cols(offload_activations=True)
    sizes, sizes_off = step.activation_sizes(CTX, base), step.activation_sizes(CTX, off)
    assert float(sizes_off.dense_layer) == 0.0
    assert float(sizes_off.recompute_work - sizes.recompute_work) == pytest.approx(
        2 * float(sizes.dense_layer)
    )
    plain, moved = step.layer_pair(CTX, base).dense, step.layer_pair(CTX, off).dense
    trip = float(sizes.dense_layer) / 50e9
    f, b = float(plain.compute_f_s), float(plain.compute_i_s + plain.compute_w_s)
    assert float(moved.compute_f_s) == pytest.approx(f + max(0.0, trip - f), rel=1e-12)
    assert float(moved.compute_i_s) == pytest.approx(float(plain.compute_i_s) + max(0.0, trip - b), rel=1e-12)


def test_frameworks_say_which_levers_they_run():
    plan = ParallelPlan(dp=8, loss_chunks=4, offload_optimizer=True, offload_activations=True)
    assert load_framework("generic").unsupported(plan) == []
    titan = " ".join(load_framework("torchtitan-2024").unsupported(plan))
    assert "loss_chunks" in titan and "activation offload" in titan and "optimizer offload" not in titan
    mcore = " ".join(load_framework("megatron-core-2024").unsupported(plan))
    assert "optimizer offload" in mcore and "activation offload" not in mcore
    with pytest.raises(ValueError, match="offload_optimizer"):
        ParallelPlan(offload_optimizer=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="loss_chunks"):
        ParallelPlan(loss_chunks=0)
    assert "ce/4" in plan.describe() and "offload-opt" in plan.describe()


def _te29_peak_layers(model_layers: int, offloaded: int) -> int:
    """Most layers' activations held at once in the forward pass under Transformer Engine 2.9's
    ``AsyncDoubleBufferGroupOffloadHandler`` (transformer_engine/pytorch/cpu_offload.py, release_v2.9), replayed
    here from its ``layer_window_map`` rule: groups 0..N-1 are offloaded; group i is freed when the forward of
    layer window[i] = (L // N) (i + 1) - 1 (+ the remainder spread over the first groups) ends."""
    window, constant = {}, 0
    for i in range(offloaded):
        window[i] = (model_layers // offloaded) * (i + 1) - 1
        if i < model_layers % offloaded:
            window[i] += i + 1
            constant = i + 1
        else:
            window[i] += constant
    peak = 0
    for layer in range(
        model_layers
    ):  # during layer `layer`: every layer so far, less the groups freed before
        freed = sum(1 for i in range(offloaded) if window[i] < layer)
        peak = max(peak, layer + 1 - freed)
    return peak


@pytest.mark.parametrize("offloaded", [1, 8, 20, 31])
def test_partial_activation_offload_holds_what_transformer_engine_holds(offloaded: int) -> None:
    """Megatron-Core ``--cpu-offloading-num-layers N`` on a 32-layer model (pp 1): the layers held at the peak
    are those of Transformer Engine 2.9's handler replayed above (32 - N + 1: the kept layers and the last
    offloaded group still being copied out)."""
    base = step.activation_sizes(CTX, _cols())
    part = step.activation_sizes(CTX, _cols(offload_activations=True, offload_activation_layers=offloaded))
    layer = float(base.dense_layer)
    assert float(part.recompute_work) == float(base.recompute_work)
    held = MODEL.num_layers * float(part.dense_layer) + float(part.offload_in_flight)
    assert held / layer == pytest.approx(_te29_peak_layers(MODEL.num_layers, offloaded), rel=1e-12)
    assert offload_share(MODEL, _cols()) == 0.0
    everything = _cols(offload_activations=True, offload_activation_layers=MODEL.num_layers)
    assert float(offload_share(MODEL, everything)) == 1.0  # N at or above the rank's layers: every layer


def test_partial_activation_offload_hides_each_copy_behind_its_window() -> None:
    """8 of 32 layers offloaded: each offloaded layer's copy out runs over the 4 layers up to its sync point, so
    the mean layer's forward grows by 8/32 * max(0, bytes / PCIe - 4 forwards), likewise its backward."""
    base = _cols()
    sizes = step.activation_sizes(CTX, base)
    plain = step.layer_pair(CTX, base).dense
    moved = step.layer_pair(CTX, _cols(offload_activations=True, offload_activation_layers=8)).dense
    trip = float(sizes.dense_layer) / 50e9
    f, b = float(plain.compute_f_s), float(plain.compute_i_s + plain.compute_w_s)
    assert float(moved.compute_f_s) == pytest.approx(f + 0.25 * max(0.0, trip - 4 * f), rel=1e-12)
    assert float(moved.compute_i_s) == pytest.approx(
        float(plain.compute_i_s) + 0.25 * max(0.0, trip - 4 * b), rel=1e-12
    )


def test_offloaded_layers_need_activation_offload() -> None:
    with pytest.raises(ValueError, match="offload_activation_layers=4 needs offload_activations true"):
        ParallelPlan(offload_activation_layers=4)
    plan = ParallelPlan(dp=8, offload_activations=True, offload_activation_layers=4)
    assert "offload-act4" in plan.describe()
    assert "offload-act " in ParallelPlan(dp=8, offload_activations=True).describe() + " "


def test_grace_blackwell_hides_the_recipes_offload_behind_two_layers() -> None:
    """GB200: NVLink-C2C 900 GB/s bidirectional between a Grace and its two GPUs, 225 GB/s per GPU and
    direction. Megatron-Bridge's GB200 Llama 3 70B FP8 recipe offloads 40 of 80 layers (mbs 2, seq 8192): each
    copy has two layers' forward to hide behind, and takes less, so the layer time is unchanged."""
    cluster = load_cluster("gb200-nvl72", 16)
    assert cluster.storage is not None and cluster.storage.device_to_host_bytes_per_s == 900e9 / 2 / 2
    model, work = load_model("llama-3.1-70b"), Workload(seq_len=8192, global_batch_size=256, dtype="fp8")
    ctx = step.StepContext.build(model, cluster, work, load_calibration("default"))
    base = step.plan_columns(ParallelPlan(dp=64, micro_batch_size=2, zero_stage=3), work)
    off = step.plan_columns(
        ParallelPlan(
            dp=64, micro_batch_size=2, zero_stage=3, offload_activations=True, offload_activation_layers=40
        ),
        work,
    )
    plain, moved = step.layer_pair(ctx, base).dense, step.layer_pair(ctx, off).dense
    trip = float(step.activation_sizes(ctx, base).dense_layer) / 225e9
    assert trip < 2 * float(plain.compute_f_s)
    assert float(moved.compute_f_s) == float(plain.compute_f_s)
    assert float(moved.compute_i_s) == float(plain.compute_i_s)
