"""Memory formulas: Megatron bytes per parameter, Korthikanti Table 2, shard invariants, the loss peak."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.cost import step
from workbench.cost.memory import activation_parts, layer_activation_bytes, logits_bytes, model_state_bytes
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

GPT22B = ModelSpec(
    name="gpt-22b",
    num_layers=48,
    hidden_size=6144,
    num_attention_heads=64,
    num_key_value_heads=64,
    head_dim=96,
    ffn_hidden_size=24576,
    vocab_size=51200,
    gated_mlp=False,
    attention="mha",
    norm="layernorm",
    linear_bias=True,
)


def test_megatron_18_bytes_per_parameter() -> None:
    s = model_state_bytes(num_params=1.0, dp=8, zero_stage=0)
    assert sum(s) == pytest.approx(18.0)
    d = model_state_bytes(num_params=1.0, dp=8, zero_stage=1)  # distributed optimizer
    assert sum(d) == pytest.approx(6 + 12 / 8)
    z3 = model_state_bytes(num_params=1.0, dp=8, zero_stage=3)
    assert sum(z3) == pytest.approx(18 / 8)


@pytest.mark.parametrize(
    ("t", "sp", "rc", "per_sbh"),
    [
        (1, False, 0, lambda a, s, h, t: 34 + 5 * a * s / h),
        (8, False, 0, lambda a, s, h, t: 10 + 24 / t + 5 * a * s / (h * t)),
        (8, True, 0, lambda a, s, h, t: (34 + 5 * a * s / h) / t),
        (8, True, 1, lambda a, s, h, t: 34 / t),
        (8, False, 1, lambda a, s, h, t: 10 + 24 / t),
        (8, False, 2, lambda a, s, h, t: 2),
        (8, True, 2, lambda a, s, h, t: 2 / t),
    ],
)
def test_korthikanti_table2(t: int, sp: bool, rc: int, per_sbh) -> None:  # type: ignore[no-untyped-def]
    """Korthikanti et al. 2022 Table 2 (bytes = s b h x the factor), GPT with dropout, unfused attention."""
    s, b, h, a = 2048, 4, 6144, 64
    parts = activation_parts(GPT22B, flash=False, dropout=True)
    got = layer_activation_bytes(parts, tokens=s * b, seq_len=s, tp=t, sequence_parallel=sp, recompute=rc)
    assert got == pytest.approx(s * b * h * per_sbh(a, s, h, t), rel=1e-12)


def test_flash_attention_has_no_s2_term() -> None:
    parts = activation_parts(GPT22B, flash=True, dropout=True)
    assert parts.scores_per_key == 0.0
    a = [
        layer_activation_bytes(parts, tokens=s, seq_len=s, tp=1, sequence_parallel=False, recompute=0) / s
        for s in (1024, 8192)
    ]
    assert a[0] == pytest.approx(a[1])


def test_vectorised_recompute_codes() -> None:
    parts = activation_parts(GPT22B, flash=False, dropout=True)
    rc = np.array([0, 1, 2])
    got = layer_activation_bytes(parts, tokens=8192, seq_len=2048, tp=8, sequence_parallel=True, recompute=rc)
    assert got.shape == (3,) and got[0] > got[1] > got[2]


@pytest.mark.parametrize(
    ("name", "plan"),
    [
        ("llama-3.1-8b", ParallelPlan(tp=4, pp=4, dp=1)),
        ("mixtral-8x7b", ParallelPlan(tp=2, pp=4, dp=4, ep=8)),
        ("mixtral-8x7b", ParallelPlan(tp=2, pp=2, dp=1)),
    ],
)
def test_shards_add_up_to_the_model(name: str, plan: ParallelPlan) -> None:
    model = load_model(name)
    ctx = step.StepContext.build(
        model, load_cluster("dgx-h100"), Workload(seq_len=4096, global_batch_size=64), Calibration()
    )
    cols = step.plan_columns(plan, ctx.workload)
    stages = plan.pp * plan.vpp
    held = step.stage_holdings(model, stages, np.arange(stages))
    dense, expert = step.params_held(ctx, cols, held)
    etp = 1 if plan.ep > 1 else plan.tp
    total = dense.sum() * plan.tp + expert.sum() * plan.ep * etp
    tied_copy = model.embedding_parameters() if model.tied_embeddings else 0
    assert total == pytest.approx(model.total_parameters() + tied_copy, rel=1e-12)


def test_per_op_sac_keeps_between_full_and_megatron_selective() -> None:
    parts = activation_parts(load_model("llama-3.1-8b"), flash=True, dropout=False)
    kw = dict(tokens=8192, seq_len=8192, tp=1, sequence_parallel=False)
    full = layer_activation_bytes(parts, recompute=2, **kw)  # type: ignore[arg-type]
    op = layer_activation_bytes(parts, recompute=1, selective_op=True, **kw)  # type: ignore[arg-type]
    megatron = layer_activation_bytes(parts, recompute=1, **kw)  # type: ignore[arg-type]
    assert full < op < megatron


_LOSS_PEAK = r"""
import gc, os
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
tokens, vocab, hidden = 2048, 8192, 64  # every fp32 logits tensor is 64 MiB: glibc maps it, free unmaps it


def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024


h = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(vocab, hidden, dtype=torch.bfloat16, requires_grad=True)
y = torch.randint(0, vocab, (tokens,))
STEP


step()
h.grad = w.grad = None
gc.collect()
base = rss("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset the peak resident size
step()
print((rss("VmHWM") - base) / (tokens * vocab))
"""
"""Peak resident bytes per logit of one loss step (``STEP``: a function ``step`` on h, w, y), measured twice
in a fresh process: the second call, after a warm-up."""

_PLAIN_STEP = """
def step():  # torchtitan's train step: the loss on an fp32 upcast, pred freed before the backward
    pred = h @ w.t()
    loss = F.cross_entropy(pred.float(), y)
    del pred
    loss.backward()
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak-RSS reset")
def test_torchtitan_loss_peak_bytes_per_logit_matches_torch() -> None:
    """The torchtitan profile's loss peak (``loss_bytes_per_logit``) against PyTorch itself: the peak resident
    bytes of that loss path over the number of logits, measured in a fresh process on the CPU (the autograd
    graph, and so what is alive when, is the same on a GPU)."""
    out = subprocess.run(
        [sys.executable, "-c", _LOSS_PEAK.replace("STEP", _PLAIN_STEP)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    measured = float(out.stdout.split()[-1])
    assert load_framework("torchtitan-2024").loss_bytes_per_logit == pytest.approx(measured, abs=0.5)
    model = load_model("llama-3.1-8b")
    assert float(logits_bytes(model, tokens=8192, tp=1, bytes_per_logit=12.0)) == 8192 * model.vocab_size * 12


_LOSS_PARALLEL_STEP = """
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import loss_parallel

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
dist.init_process_group("gloo", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))


def step():  # torchtitan's train step with TP: the logits sharded over the vocabulary, the loss in loss_parallel
    pred = DTensor.from_local(h @ w.t(), mesh, [Shard(1)])
    with loss_parallel():
        loss = F.cross_entropy(pred.float(), y)
        del pred
        loss.backward()
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak-RSS reset")
def test_torchtitan_loss_parallel_peak_bytes_per_logit_matches_torch() -> None:
    """With tp > 1 torchtitan computes the loss on vocabulary-sharded logits under ``loss_parallel`` (the
    profile's ``loss_parallel_bytes_per_logit``): measured as above, on a one-rank gloo mesh (the same code
    path; its all-reduces are over one rank), and priced only where tp > 1."""
    import os
    import socket

    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not built in")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = subprocess.run(
        [sys.executable, "-c", _LOSS_PEAK.replace("STEP", _LOSS_PARALLEL_STEP)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PORT": str(port)},
    )
    measured = float(out.stdout.split()[-1])
    titan = load_framework("torchtitan-2024")
    assert titan.loss_parallel_bytes_per_logit == pytest.approx(measured, abs=0.5)
    assert measured > titan.loss_bytes_per_logit + 2  # not the plain cross-entropy's peak
    model = load_model("llama-3.1-70b")
    cal = Calibration().with_framework(titan)
    ctx = step.StepContext.build(
        model, load_cluster("dgx-h100"), Workload(seq_len=8192, global_batch_size=64), cal
    )
    for tp, per_logit in ((1, titan.loss_bytes_per_logit), (8, titan.loss_parallel_bytes_per_logit)):
        plan = ParallelPlan(dp=64 // tp, tp=tp, micro_batch_size=1)
        logits = step.activation_sizes(ctx, step.plan_columns(plan, ctx.workload)).logits
        assert float(logits) == pytest.approx(8192 * model.vocab_size / tp * per_logit, rel=1e-12)
