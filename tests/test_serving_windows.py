"""Sliding-window and chunked layers in serving: attention over the keys each query sees, KV reads, transfers and
the KV pool bounded by the window (chunk); full-attention models priced exactly as before."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.serving.cost import ReplicaCost
from workbench.serving.cost_attention import attended_keys, held_keys
from workbench.serving.memory import bounded_kv_capacity_tokens, kv_capacity_tokens
from workbench.specs.serving import ServingPlan


@pytest.mark.parametrize(("kind", "span"), [("sliding", 128), ("chunked", 8192), ("chunked", 7), ("full", 0)])
def test_attended_keys_closed_form_equals_the_mask_sum(kind: str, span: int) -> None:
    """Sum over query positions of the keys its mask lets through, counted one query at a time."""

    def keys(p: int) -> int:
        if kind == "sliding":
            return min(p, span)
        if kind == "chunked":
            return (p - 1) % span + 1
        return p

    for positions in (1, 6, 7, 127, 128, 129, 300, 20000):
        brute = sum(keys(p) for p in range(1, positions + 1))
        assert attended_keys(positions, kind, span) == brute
        assert held_keys(positions, kind, span) == keys(positions)


def _no_windows(model):  # type: ignore[no-untyped-def]
    return replace(model, sliding_window=0, num_sliding_window_layers=0, attention_chunk_size=0,
                   num_chunked_attention_layers=0)  # fmt: skip


@pytest.fixture(scope="module")
def h200():  # type: ignore[no-untyped-def]
    return load_cluster("dgx-h200").with_nodes(1)


@pytest.mark.parametrize("name", ["gpt-oss-120b", "llama-4-scout-17b-16e", "gemma-2-9b"])
def test_local_layers_cost_what_full_layers_cost_inside_the_window(name: str, h200) -> None:  # type: ignore[no-untyped-def]
    """Below the window (chunk) every mask is the causal one: the same iteration time as the model with every
    layer global; far beyond it, less."""
    cal = load_calibration("default")
    model = load_model(name)
    plan = ServingPlan(tp=8)
    local, full = ReplicaCost.of(model, h200, plan, cal), ReplicaCost.of(_no_windows(model), h200, plan, cal)
    short = min(model.sliding_window or 10**9, model.attention_chunk_size or 10**9)
    assert local.decode_s(32, short) == pytest.approx(full.decode_s(32, short), rel=1e-12)
    assert local.prefill_s(short) == pytest.approx(full.prefill_s(short), rel=1e-12)
    assert local.decode_s(32, 16 * short) < full.decode_s(32, 16 * short)


def test_bounded_pool_solves_the_byte_budget() -> None:
    """GPT-OSS-120B: 18 full + 18 sliding layers of 128 keys; S sequences; the pool T fills the budget exactly."""
    m = load_model("gpt-oss-120b")
    b, seqs = 2048.0, 64
    for free in (1e6, 4e7, 5e9):
        t = bounded_kv_capacity_tokens(m, free, b, seqs)
        assert (18 * t + 18 * min(t, seqs * 128)) * b == pytest.approx(free)


def test_kv_pool_larger_with_windows_and_unchanged_without(h200) -> None:  # type: ignore[no-untyped-def]
    m = load_model("gpt-oss-120b")
    plan = ServingPlan(tp=8)
    assert kv_capacity_tokens(m, h200.device, plan) > 1.9 * kv_capacity_tokens(
        _no_windows(m), h200.device, plan
    )
    llama = load_model("llama-3.1-70b")
    per_token = 80 * 2 * 1 * 128 * 2  # 80 layers, K and V, 8 KV heads / tp 8, head 128, bf16
    cap = kv_capacity_tokens(llama, h200.device, plan)
    rc = ReplicaCost.of(llama, h200, plan, load_calibration("default"))
    assert rc.kv_bytes_per_token_per_device() == per_token and cap == rc.kv_capacity_tokens
    assert np.isfinite(cap)
