"""What torch.distributed.pipelining keeps per micro-batch (``FrameworkProfile.pipeline_stage_buffers``,
``pipeline_keeps_outputs``) against the installed torch itself: a two-stage 1F1B step on CPU (gloo, two
processes) whose stages' receive buffers and kept outputs are counted in bytes, compared with what the step
model prices for the same shapes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_gloo_ranks
from workbench.cost import step
from workbench.cost.activations import pipeline_buffer_bytes, stored_activation_bytes
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_cluster
from workbench.presets.frameworks import load_framework
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

HIDDEN, VOCAB, SEQ, MBS, M = 16, 96, 8, 2, 4

_TWO_STAGES = r"""
import json, sys
import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

H, V, S, B, M = (int(x) for x in sys.argv[1:6])


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def run(rank, world):
    torch.manual_seed(0)
    if rank == 0:  # the first stage: a block whose output goes to the next stage
        mod = torch.nn.Sequential(torch.nn.Linear(H, H), torch.nn.GELU())
    else:  # the last stage: a block and the LM head
        mod = torch.nn.Sequential(torch.nn.Linear(H, H), torch.nn.GELU(), torch.nn.Linear(H, V))
    mod = mod.to(torch.bfloat16)
    stage = PipelineStage(mod, rank, world, torch.device("cpu"))
    loss = lambda logits, y: torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    sched = Schedule1F1B(stage, n_microbatches=M, loss_fn=loss)
    x = torch.randn(M * B, S, H, dtype=torch.bfloat16)
    y = torch.randint(0, V, (M * B, S))
    if rank == 0:
        sched.step(x)
    else:
        sched.step(target=y, losses=[])
    act = [i.buffer for infos in stage.args_recv_info.values() for i in infos if hasattr(i, "buffer")]
    grad = [i.buffer for infos in stage.grad_recv_info.values() for i in infos]
    kept = nbytes([o for o in stage.output_chunks])
    return dict(act_recv=nbytes(act), grad_recv=nbytes(grad), kept_outputs=kept)
"""


def _model() -> ModelSpec:
    return ModelSpec(
        name="tiny",
        num_layers=2,
        hidden_size=HIDDEN,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=HIDDEN // 2,
        ffn_hidden_size=4 * HIDDEN,
        vocab_size=VOCAB,
        gated_mlp=False,
        attention="mha",
    )


def _priced(framework: str) -> tuple[step.ActivationSizes, step.Cols]:
    model = _model()
    workload = Workload(seq_len=SEQ, global_batch_size=MBS * M)
    plan = ParallelPlan(dp=1, tp=1, pp=2, micro_batch_size=MBS, schedule="1f1b")
    cal = Calibration().with_framework(load_framework(framework))
    ctx = step.StepContext.build(model, load_cluster("dgx-h100"), workload, cal)
    cols = step.plan_columns(plan, workload)
    return step.activation_sizes(ctx, cols), cols


@pytest.mark.timeout(300)
def test_pipeline_buffers_match_what_torch_pipelining_keeps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The receive buffers (one per micro-batch: activations on the last stage, output gradients on the first)
    and the last stage's kept outputs (one per micro-batch, torch's default ``return_outputs``) of a real
    Schedule1F1B step are the bytes ``pipeline_buffer_bytes`` prices for torchtitan-2024; torchtitan-2025
    (``return_outputs=False``) keeps the receive buffers only; Megatron-Core keeps neither."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not built in")
    first, last = run_gloo_ranks(_TWO_STAGES, 2, [HIDDEN, VOCAB, SEQ, MBS, M], tmp_path)
    sizes, cols = _priced("torchtitan-2024")
    first_held = {"dense": 1, "moe": 0, "embedding": True, "head": False, "mtp": 0}
    last_held = {"dense": 1, "moe": 0, "embedding": False, "head": True, "mtp": 0}
    edge = MBS * SEQ * HIDDEN * 2  # one bf16 micro-batch between the stages
    assert first == {"act_recv": 0, "grad_recv": M * edge, "kept_outputs": 0}
    assert last == {"act_recv": M * edge, "grad_recv": 0, "kept_outputs": M * MBS * SEQ * VOCAB * 2}
    assert float(pipeline_buffer_bytes(sizes, first_held, cols)) == first["grad_recv"]
    assert float(pipeline_buffer_bytes(sizes, last_held, cols)) == last["act_recv"] + last["kept_outputs"]
    later, _ = _priced("torchtitan-2025")
    assert float(pipeline_buffer_bytes(later, last_held, cols)) == last["act_recv"]
    megatron, _ = _priced("megatron-core-2024")
    assert float(pipeline_buffer_bytes(megatron, first_held, cols)) == 0.0
    assert float(pipeline_buffer_bytes(megatron, last_held, cols)) == 0.0


def test_stage_edges_move_between_stages_and_vanish_without_a_pipeline() -> None:
    """Per micro-batch in flight: the first stage keeps its output (+1 edge), the last stage's input lies in
    a receive buffer counted once per micro-batch (-1 edge), a middle stage both (0); pp = 1: nothing."""
    sizes, _ = _priced("torchtitan-2024")
    off = sizes._replace(pipeline_edge=0.0, kept_output=0.0)
    edge = float(sizes.pipeline_edge)
    assert edge == MBS * SEQ * HIDDEN * 2
    for first, last, delta in ((True, False, edge), (False, True, -edge), (False, False, 0.0)):
        held = {"dense": 1, "moe": 0, "embedding": first, "head": last, "mtp": 0}
        gained = stored_activation_bytes(sizes, held) - stored_activation_bytes(off, held)
        assert float(gained) == pytest.approx(delta)
    model = _model()
    workload = Workload(seq_len=SEQ, global_batch_size=MBS * M)
    cal = Calibration().with_framework(load_framework("torchtitan-2024"))
    ctx = step.StepContext.build(model, load_cluster("dgx-h100"), workload, cal)
    flat = step.activation_sizes(ctx, step.plan_columns(ParallelPlan(dp=1, micro_batch_size=MBS), workload))
    assert float(np.asarray(flat.pipeline_edge)) == 0.0 and float(np.asarray(flat.kept_output)) == 0.0
