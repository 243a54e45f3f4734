"""backends.profiling: split backward adds up to the fused one; saved-tensor bytes; CUDA path skipped on CPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from backends.profiling import count_saved_bytes, measure_module  # noqa: E402
from backends.torch_model import DecoderLayer, Embedding  # noqa: E402
from workbench.catalog import load_model  # noqa: E402

torch.set_num_threads(1)
SPEC = replace(
    load_model("llama-3.1-8b"),
    num_layers=1,
    hidden_size=256,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    ffn_hidden_size=1024,
    vocab_size=1024,
)


def test_linear_saved_bytes_equal_its_input() -> None:
    # y = x W^T saves x (for dW) and W (excluded as a parameter): exactly x's bytes.
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(10, 64, requires_grad=True)
    with count_saved_bytes(list(lin.parameters())) as saved:
        lin(x)
    assert saved["bytes"] == 10 * 64 * 4


def test_split_weight_gradients_equal_autograd() -> None:
    layer = DecoderLayer(SPEC)
    x = torch.randn(2, 32, 256, requires_grad=True)
    layer(x).sum().backward()
    ref = {n: p.grad.clone() for n, p in layer.named_parameters()}
    from backends.profiling import _input_pass, _LinearGrads, _other_params

    layer.zero_grad(set_to_none=True)
    grads = _LinearGrads(layer)
    out = layer(x)
    _input_pass(out, torch.ones_like(out), x, _other_params(layer))
    grads.weight_grads()
    grads.close()
    for name, p in layer.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], atol=1e-4, rtol=1e-4, msg=name)


def test_fused_and_split_backward_agree_within_noise() -> None:
    layer = DecoderLayer(SPEC)
    timing = measure_module(layer, lambda: torch.randn(2, 128, 256, requires_grad=True), warmup=2, repeats=9)
    assert timing.forward_s > 0 and timing.backward_input_s > 0 and timing.backward_weight_s > 0
    # I + W re-does no matmul of B; on this shared 2-core machine medians of 9 repeats move by ~10-20%,
    # so 35% is the noise allowance (quiet machine: |I + W - B| / B ~ 1-2%).
    assert abs(timing.consistency_frac) < 0.35
    # A layer's saved activations: at least the inputs of its 7 projections, 2 norms and the attention core.
    tokens = 2 * 128
    assert timing.activation_bytes > tokens * 4 * (4 * 256 + 2 * 1024)


def test_embedding_has_no_input_gradient() -> None:
    emb = Embedding(SPEC)
    timing = measure_module(emb, lambda: torch.randint(0, 1024, (2, 16)), warmup=1, repeats=3)
    assert timing.backward_input_s == 0.0 and timing.backward_weight_s > 0
    assert timing.activation_bytes == 2 * 16 * 8  # the int64 token ids


def test_bad_repeats() -> None:
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        measure_module(torch.nn.Linear(2, 2), lambda: torch.randn(1, 2, requires_grad=True), repeats=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_events_and_peak_memory() -> None:
    layer = DecoderLayer(SPEC, dtype=torch.bfloat16, device="cuda")
    timing = measure_module(
        layer, lambda: torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    )
    assert (
        timing.peak_allocated_bytes is not None
        and timing.peak_allocated_bytes >= timing.activation_bytes * 0.5
    )
    assert abs(timing.consistency_frac) < 0.35
