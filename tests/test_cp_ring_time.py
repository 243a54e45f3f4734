"""The time torch's experimental context parallel adds to an attention layer (``workbench.cost.cp_ring``,
``FrameworkProfile.cp_rotate_method``): the collectives, the SDPA calls and the bytes of the eager element-wise
work the model prices, against what torch's own ``_templated_ring_attention`` and its backward dispatch on
CPU gloo ranks (torch 2.13's ``_context_parallel/_attention.py``, the code of torch @1963fc8 that torchtitan's
2024-12 runs used), counted op by op; the waits the model assumes; and where the step model adds them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.conftest import run_gloo_ranks
from tests.test_cp_ring_memory import HEAD_DIM, HEADS, TOKENS, _tiny  # the same tiny GQA layer
from workbench.cost import layer
from workbench.cost.comm import all_gather_s, p2p_s
from workbench.cost.cp_ring import merge_bytes, ring_comm, ring_traffic, ring_values, step_attention_rates
from workbench.cost.layer import device_rates
from workbench.cost.layer_comm import compute_slowdown
from workbench.estimate.analytic import estimate_plan
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.specs.plan import ParallelPlan, Workload

_COUNT = r"""
import json, sys
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.distributed.tensor.experimental._context_parallel import _attention as ring

T, H, D = (int(x) for x in sys.argv[1:4])
aten = torch.ops.aten
WRITE_ONLY = {aten.zero_.default, aten.fill_.Scalar, aten.zeros_like.default}
FREE = {aten.empty_like.default, aten.empty.memory_format, aten.empty_strided.default, aten._unsafe_view.default}


def _nbytes(t):
    return t.numel() * t.element_size()


class Count(TorchDispatchMode):
    # HBM bytes read + written by every op the ring dispatches outside the SDPA kernels (views move nothing,
    # fills only write), and every collective with its input bytes
    def __init__(self):
        super().__init__()
        self.bytes, self.collectives, self.in_kernel = 0, [], False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.in_kernel or func in FREE or func.is_view or func is aten.detach.default:
            return out
        name = func._schema.name
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name.startswith("_c10d_functional::"):
            if name.split("::")[1] in ("all_gather_into_tensor", "all_to_all_single"):
                self.collectives.append([name.split("::")[1], sum(map(_nbytes, ins))])
            return out
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if func is aten.log_sigmoid_forward.default:
            outs = outs[:1]  # the CUDA kernel's second output is an empty buffer; the CPU one's is not
        self.bytes += sum(map(_nbytes, [] if func in WRITE_ONLY else ins)) + sum(map(_nbytes, outs))
        return out


COUNT, CALLS = Count(), []


def sdpa(query, key, value, *, is_causal, **kw):
    # stands in for the flash kernel: its output and fp32 log-sum-exp, uncounted
    CALLS.append([query.shape[2], key.shape[2], bool(is_causal)])
    COUNT.in_kernel = True
    out, lse = torch.randn_like(query), torch.randn(query.shape[:3])
    COUNT.in_kernel = False
    return out, lse


def sdpa_backward(*, query, key, value, out, logsumexp, is_causal, grad_out, **kw):
    CALLS.append([query.shape[2], key.shape[2], bool(is_causal)])
    COUNT.in_kernel = True
    grads = torch.randn_like(query), torch.randn_like(key), torch.randn_like(value)
    COUNT.in_kernel = False
    return grads


def _counted(fn):
    COUNT.bytes, COUNT.collectives = 0, []
    CALLS.clear()
    with COUNT:
        result = fn()
    return result, dict(bytes=COUNT.bytes, collectives=COUNT.collectives, calls=list(CALLS))


def run(rank, world):
    # torchtitan hands SDPA transposed views of (batch, tokens, heads, head_dim) tensors, its keys and values
    # repeated to the query heads
    q, k, v, go = (torch.randn(1, T, H, D, dtype=torch.bfloat16).transpose(1, 2) for _ in range(4))
    report = {}
    for method in ("allgather", "alltoall"):
        ring.set_rotate_method(method)
        group = dist.group.WORLD
        (o, lse, *_), fwd = _counted(lambda: ring._templated_ring_attention(group, 2, sdpa, q, k, v, is_causal=True))
        o = o.detach()
        _, bwd = _counted(
            lambda: ring._templated_ring_attention_backward(
                group, 2, sdpa_backward, go, "grad_out", q, k, v, o, lse, is_causal=True
            )
        )
        report[method] = dict(fwd=fwd, bwd=bwd)
    return report
"""


def _priced_collectives(cp: int, method: str, backward: bool) -> list[tuple[str, float]]:
    """The collectives ``ring_traffic`` prices, as torch names them (``permute_tensor`` is an
    ``all_to_all_single``), in any order."""
    t = ring_traffic(
        ring_values(_tiny(), tokens=TOKENS, tp=1, repeats_kv=True), cp, method, backward=backward
    )
    kv, dkv = float(t.kv_bytes), float(t.dkv_bytes)
    return sorted(
        [("all_gather_into_tensor", kv)] * int(t.gathers)
        + [("all_to_all_single", kv)] * int(t.kv_passes)
        + [("all_to_all_single", dkv)] * int(t.dkv_passes)
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("cp", [2, 4])
def test_ring_work_matches_torch(cp: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On ``cp`` gloo ranks, for both rotate methods: every rank's collectives are the ones the model prices
    (kind and bytes); every rank calls the SDPA kernel cp times per pass, each call on 1/cp of the rank's share
    of the causal attention (head-tail load balance), which is the step the model hides collectives behind;
    and the busiest rank's element-wise bytes, forward and backward, are ``merge_bytes``."""
    pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")
    ranks = run_gloo_ranks(_COUNT, cp, [TOKENS, HEADS, HEAD_DIM], tmp_path)
    seq = TOKENS * cp
    causal_share = HEADS * HEAD_DIM * 4 * seq * seq / 2 / cp  # FLOPs of one rank's 1/cp of causal attention
    fwd_bytes, bwd_bytes = merge_bytes(ring_values(_tiny(), tokens=TOKENS, tp=1, repeats_kv=True), cp)
    for method in ("allgather", "alltoall"):
        for rank in ranks:
            for name, backward in (("fwd", False), ("bwd", True)):
                got = sorted((c, float(b)) for c, b in rank[method][name]["collectives"])
                assert got == _priced_collectives(cp, method, backward), (method, name)
                calls = rank[method][name]["calls"]
                flops = [HEADS * HEAD_DIM * 4 * sq * sk / (2 if causal else 1) for sq, sk, causal in calls]
                assert len(calls) == cp and all(f == causal_share / cp for f in flops), calls
        # the busiest (last) rank's calls, the shapes step_attention_rates reads: one causal diagonal block,
        # then cp - 1 calls of the local queries on half a block of keys, unmasked
        for name in ("fwd", "bwd"):
            assert ranks[-1][method][name]["calls"] == [[TOKENS, TOKENS, True]] + [
                [TOKENS, TOKENS // 2, False]
            ] * (cp - 1)
        assert max(r[method]["fwd"]["bytes"] for r in ranks) == float(fwd_bytes)
        assert max(r[method]["bwd"]["bytes"] for r in ranks) == float(bwd_bytes)


def test_step_kernels_at_their_shapes() -> None:
    """Llama 3.1 8B, 131,072 tokens over cp 8 on H100 SXM5: step 0 runs FA2 causal on 16,384 x 16,384, the
    other seven FA2 without a mask on 16,384 queries x 8,192 keys (the shapes the gloo test sees torch call);
    each is 1/8 of the FLOPs, so the layer runs at the FLOP-weighted harmonic mean of the kernel table's
    figures at those two points (the committed measurements laid over the published table)."""
    cal = load_calibration("default", framework="torchtitan-2024")
    model, device = load_model("llama-3.1-8b"), load_cluster("dgx-h100", 1).device
    fa2 = {"dtype": "bf16", "head_dim": 128, "families": ("fa2",)}
    diagonal = cal.attention(device, seq_len=16384, **fa2)  # type: ignore[arg-type]
    block = cal.attention(device, seq_len=8192, causal=False, **fa2)  # type: ignore[arg-type]
    assert block[0] > diagonal[0]  # FA2's forward without a mask runs nearer its peak than the causal one
    got = step_attention_rates(cal, device, model, seq_len=131072, cp=np.array([1, 8]), whole=(0.5, 0.25))
    for i in (0, 1):
        want = 1 / (1 / 8 / diagonal[i] + 7 / 8 / block[i])
        assert got[i][1] == pytest.approx(want, rel=1e-12) and got[i][0] == (0.5, 0.25)[i]


def test_nothing_without_cp_or_for_another_method() -> None:
    values = ring_values(load_model("llama-3.1-8b"), tokens=8192, tp=1, repeats_kv=True)
    f, b = merge_bytes(values, np.array([1, 2]))
    assert f[0] == b[0] == 0 and f[1] > 0 and b[1] > 0
    t = ring_traffic(values, np.array([1, 8]), "allgather", backward=True)
    assert list(t.gathers) == [0, 1] and list(t.dkv_passes) == [0, 8]
    with pytest.raises(ValueError, match="rotate_method must be"):
        ring_traffic(values, 2, "ring", backward=False)


def test_repeated_keys_are_as_wide_as_the_queries() -> None:
    """Llama 3.1 405B at tp 8: 128 / 8 = 16 query heads per rank; its 8 key/value heads give one per rank,
    repeated to 16 when the stack repeats them (torchtitan's ``repeat_kv``)."""
    model = load_model("llama-3.1-405b")
    rep = ring_values(model, tokens=1000, tp=8, repeats_kv=True)
    plain = ring_values(model, tokens=1000, tp=8, repeats_kv=False)
    assert rep.q == rep.kv == 1000 * 16 * 128 and plain.kv == 1000 * 1 * 128 and rep.lse == 1000 * 16


def test_waits_hide_what_one_step_covers() -> None:
    """All-gather: hidden behind step 0's kernel, the rest exposed; the backward's dK/dV passes each hidden
    behind the next step's kernel but the last one, which nothing covers."""
    cluster = load_cluster("dgx-h100", 8)
    values = ring_values(load_model("llama-3.1-405b"), tokens=32768, tp=8, repeats_kv=True)
    cp, stride = 8, 8  # one rank per node: the cp group crosses the scale-out network
    kv, dkv = 2 * values.kv * 2, 2 * values.kv * 4
    gather = float(all_gather_s(cluster, kv * cp, cp, stride))
    one = float(p2p_s(cluster, dkv, stride))
    for step_f, step_b in ((0.0, 0.0), (gather / 2, one / 2), (1.0, 1.0)):
        c = ring_comm(
            cluster,
            values,
            cp=cp,
            stride=stride,
            rotate_method="allgather",
            step_fwd_s=step_f,
            step_bwd_s=step_b,
        )
        assert float(c.f_s) == pytest.approx(max(gather - step_f, 0.0))
        want_b = max(gather - step_b, 0.0) + (cp - 1) * max(one - step_b, 0.0) + one
        assert float(c.b_s) == pytest.approx(want_b)
        assert float(c.hidden_f_s + c.f_s) == pytest.approx(gather)
        assert float(c.hidden_b_s + c.b_s) == pytest.approx(gather + cp * one)


def test_step_model_prices_the_ring_for_torchtitan_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama 3.1 8B at cp 8 on one node (torchtitan 2024-12 Table 2's last row, in BF16): with the torch ring
    the step's compute grows by the merges of every layer (forward, its full recompute, backward) at the
    device's achieved HBM bandwidth, slowed as every op is, and exposed cp traffic appears; a profile without
    a rotate method is priced by the generic ring. (The kernels' own shapes, ``step_attention_rates``, are held
    at the whole sequence's here to isolate the merges; test_step_kernels_at_their_shapes covers them.)"""
    monkeypatch.setattr(layer, "step_attention_rates", lambda *a, whole, **k: whole)
    model, cluster = load_model("llama-3.1-8b"), load_cluster("dgx-h100", 1)
    work = Workload(seq_len=262144, global_batch_size=1)
    plan = ParallelPlan(dp=1, tp=1, cp=8, micro_batch_size=1, zero_stage=3, recompute="full")
    cal = load_calibration("default", framework="torchtitan-2024")
    unpriced = cal.with_framework(dataclasses.replace(cal.framework, cp_rotate_method=""))
    ring = estimate_plan(model, cluster, work, plan, calibration=cal)
    plain = estimate_plan(model, cluster, work, plan, calibration=unpriced)
    values = ring_values(model, tokens=262144 / 8, tp=1, repeats_kv=True)
    fwd, bwd = merge_bytes(values, 8)
    per_byte = compute_slowdown(cal.framework) / device_rates(cluster.device, "bf16", cal).hbm_bytes_per_s
    merges = model.num_layers * (2 * fwd + bwd) * per_byte
    assert ring.breakdown.compute_s - plain.breakdown.compute_s == pytest.approx(float(merges), rel=1e-9)
    assert ring.breakdown.exposed_cp_comm_s > 0
