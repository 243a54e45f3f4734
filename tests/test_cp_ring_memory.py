"""The working set of torch's experimental context parallel in an attention layer's backward pass
(``workbench.cost.memory.cp_ring_backward_bytes``, ``FrameworkProfile.cp_rotate_method``): the closed form
against its buffers counted one by one, against torch's own ``_templated_ring_attention_backward`` run on CPU
(gloo, 2 and 4 processes) with every tensor it makes counted while alive, and where the step model adds it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.conftest import run_gloo_ranks
from workbench.cost import step
from workbench.cost.memory import cp_ring_backward_bytes
from workbench.cost.rank_memory import static_memory
from workbench.presets.calibration import Calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.frameworks import load_framework
from workbench.specs.framework import FrameworkProfile
from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

TOKENS, HEADS, KV_HEADS, HEAD_DIM = 256, 4, 2, 16

_RING = r"""
import gc, json, sys, weakref
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.distributed.tensor.experimental._context_parallel import _attention as ring

T, H, D = (int(x) for x in sys.argv[1:4])


class LiveBytes(TorchDispatchMode):
    # peak bytes of the storages of the tensors ops return, while any of them is referenced; the inputs'
    # storages (and views of them) are not counted
    def __init__(self, inputs):
        super().__init__()
        self.live, self.cur, self.peak = {}, 0, 0
        self.skip = {t.untyped_storage().data_ptr() for t in inputs}

    def _drop(self, ptr):
        entry = self.live[ptr]
        entry[1] -= 1
        if entry[1] == 0:
            self.cur -= entry[0]
            del self.live[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if type(t) is not torch.Tensor:
                continue
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if ptr in self.skip:
                continue
            if ptr not in self.live:
                self.live[ptr] = [st.nbytes(), 0]
                self.cur += st.nbytes()
                self.peak = max(self.peak, self.cur)
            self.live[ptr][1] += 1
            weakref.finalize(t, self._drop, ptr)
        return out


def sdpa_backward(*, query, key, value, out, logsumexp, is_causal, grad_out, **kw):
    # what the CUDA flash backward returns (dQ, dK, dV in the inputs' dtype); its internal buffers are the
    # same with or without cp and are not counted
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


INFLIGHT = {}
_permute, _all_gather, _wait = ring.ft_c.permute_tensor, ring.ft_c.all_gather_single, ring._maybe_wait


def _held_until_wait(collective):
    # NCCL semantics made deterministic: the collective's input stays alive until its output is waited on
    # (ProcessGroupNCCL stashes the inputs until the work is waited), whatever gloo's thread does
    def run(tensor, *args, **kwargs):
        result = _wait(collective(tensor, *args, **kwargs))
        INFLIGHT[id(result)] = tensor
        return result
    return run


def _maybe_wait(tensor):
    INFLIGHT.pop(id(tensor), None)
    return _wait(tensor)


ring.ft_c.permute_tensor = _held_until_wait(_permute)
ring.ft_c.all_gather_single = _held_until_wait(_all_gather)
ring._maybe_wait = _maybe_wait


def run(rank, world):
    # torchtitan hands SDPA transposed views of (batch, tokens, heads, head_dim) tensors
    q, k, v, o, go = (torch.randn(1, T, H, D, dtype=torch.bfloat16).transpose(1, 2) for _ in range(5))
    lse = torch.randn(1, H, T)
    report = {}
    with LiveBytes((q, k, v, o, go, lse)) as plain:
        sdpa_backward(query=q, key=k, value=v, out=o, logsumexp=lse, is_causal=True, grad_out=go)
    for method in ("allgather", "alltoall"):
        ring.set_rotate_method(method)
        peaks = []
        for _ in range(3):  # the least of three: a collective that gloo finishes late holds its buffer longer
            gc.collect()
            with LiveBytes((q, k, v, o, go, lse)) as m:
                ring._templated_ring_attention_backward(
                    dist.group.WORLD, 2, sdpa_backward, go, "grad_out", q, k, v, o, lse, is_causal=True
                )
            peaks.append(m.peak - plain.peak)
        report[method] = min(peaks)
    return report
"""


def _tiny() -> ModelSpec:
    return ModelSpec(
        name="tiny-gqa",
        num_layers=1,
        hidden_size=HEADS * HEAD_DIM,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        ffn_hidden_size=128,
        vocab_size=256,
        gated_mlp=True,
        attention="gqa",
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("cp", [2, 4])
def test_ring_backward_working_set_matches_torch(cp: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """torch's ring attention backward (the installed torch's ``_templated_ring_attention_backward``, the code
    of torch @1963fc8 that torchtitan's 2024-12 runs used) on ``cp`` gloo ranks: the largest peak over the
    ranks of the bytes its own tensors hold beyond the plain SDPA backward is the closed form, for both rotate
    methods, with keys and values repeated to the query heads as torchtitan does."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not built in")
    pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")
    ranks = run_gloo_ranks(_RING, cp, [TOKENS, HEADS, HEAD_DIM], tmp_path)
    for method in ("allgather", "alltoall"):
        measured = max(r[method] for r in ranks)
        priced = cp_ring_backward_bytes(
            _tiny(), tokens=TOKENS, cp=cp, tp=1, rotate_method=method, repeats_kv=True
        )
        assert float(priced) == measured, (method, ranks)


def _itemised(x: float, y: float, cp: int, method: str) -> float:
    """The ring backward's buffers at its two peak moments (bytes; x key+value values, y query values of the
    local tokens), listed as the code holds them; the larger moment."""
    fp32_dq = 4 * y
    if method == "allgather":
        gathered = 2 * cp * x
        step1_cat = gathered + 2 * x + 2 * x + (2 * x if cp >= 3 else 0) + 3 * 4 * x + fp32_dq
        partial_step = gathered + 2 * x + 4 * 4 * x + fp32_dq - x
        return max(step1_cat, partial_step)
    received_and_sent = 2 * x + 2 * x + (2 * x if cp >= 3 else 0)
    return received_and_sent + 4 * 4 * x + fp32_dq - x


@pytest.mark.parametrize("method", ["allgather", "alltoall"])
@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_closed_form_is_the_buffers_listed(cp: int, method: str) -> None:
    """Llama 3.1 405B at tp 8 with 32,768 local tokens (the torchtitan 2024-12 Table 6 runs): keys and values
    repeated to the 128 / 8 = 16 query heads per rank, 128-wide heads."""
    model = load_model("llama-3.1-405b")
    t = 32768
    y = t * 16 * 128
    x = t * 16 * (128 + 128)
    got = cp_ring_backward_bytes(model, tokens=t, cp=cp, tp=8, rotate_method=method, repeats_kv=True)
    assert float(got) == _itemised(x, y, cp, method)
    if method == "allgather" and cp == 8:
        assert float(got) == 4.5 * 2**30  # 34 x + 4 y = (34 * 128 + 4 * 64) MiB
    unrepeated = cp_ring_backward_bytes(model, tokens=t, cp=cp, tp=8, rotate_method=method)
    assert float(unrepeated) == _itemised(t * 1 * 256, y, cp, method)  # 8 kv heads over tp 8: one per rank


def test_no_working_set_without_cp_or_a_priced_ring() -> None:
    model = load_model("llama-3.1-8b")
    cps = np.array([1, 2, 8])
    ring = cp_ring_backward_bytes(model, tokens=8192, cp=cps, tp=1, rotate_method="allgather")
    assert ring[0] == 0 and np.all(ring[1:] > 0)
    assert np.all(cp_ring_backward_bytes(model, tokens=8192, cp=cps, tp=1, rotate_method="") == 0)
    with pytest.raises(ValueError, match="rotate_method must be"):
        cp_ring_backward_bytes(model, tokens=8192, cp=2, tp=1, rotate_method="ring")
    with pytest.raises(ValueError, match="cp_rotate_method must be one of"):
        dataclasses.replace(load_framework("torchtitan-2024"), cp_rotate_method="ring")


def _extra(model_name: str, plan: ParallelPlan, seq: int, framework: FrameworkProfile, held: dict) -> float:
    model = load_model(model_name)
    workload = Workload(seq_len=seq, global_batch_size=plan.dp * plan.micro_batch_size * 8)
    cal = Calibration().with_framework(framework)
    ctx = step.StepContext.build(model, load_cluster("dgx-h100"), workload, cal)
    cols = step.plan_columns(plan, workload)
    return float(static_memory(ctx, cols, held)["activation_extra_bytes"])


def test_step_model_adds_the_ring_where_the_logits_are_gone() -> None:
    """torchtitan-2024 (allgather, repeat_kv): on a 405B first pipeline stage at cp 8 the rank's extra
    activations grow by the ring's working set; on a pp = 1 rank whose logits (freed by the LM head's backward
    before any attention backward) are larger, nothing is added."""
    titan = load_framework("torchtitan-2024")
    assert titan.cp_rotate_method == "allgather" and titan.attention_repeats_kv
    unpriced = dataclasses.replace(titan, cp_rotate_method="")
    first = {"dense": 16, "moe": 0, "embedding": True, "head": False, "mtp": 0}
    plan = ParallelPlan(dp=1, tp=8, pp=8, cp=8, micro_batch_size=1, schedule="1f1b")
    grown = _extra("llama-3.1-405b", plan, 262144, titan, first) - _extra(
        "llama-3.1-405b", plan, 262144, unpriced, first
    )
    assert grown == pytest.approx(4.5 * 2**30, rel=1e-12)
    whole = {"dense": 32, "moe": 0, "embedding": True, "head": True, "mtp": 0}
    flat = ParallelPlan(dp=1, cp=8, micro_batch_size=1)
    assert _extra("llama-3.1-8b", flat, 262144, titan, whole) == _extra(
        "llama-3.1-8b", flat, 262144, unpriced, whole
    )
