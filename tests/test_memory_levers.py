"""Memory levers as plan fields (issue 15, item 6): chunked cross-entropy, optimizer offload, activation
offload. Each is checked against a closed form computed here from the model's shapes and the cluster's host
path, not read back from the code under test."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.cost import step
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
