"""The start-up memory profile that sizes an engine's KV cache: vLLM V1 runs a dummy sampler after its dummy
forward, and the sampler's peak (top-k and top-p over a sorted vocabulary) is the profile's peak."""

from __future__ import annotations

import math

import pytest

from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_cluster, load_model
from workbench.presets.engines import load_engine
from workbench.serving.cost import ReplicaCost
from workbench.serving.memory import activation_peak_bytes, kv_capacity_tokens, weight_bytes_per_device
from workbench.specs.engine import EngineProfile
from workbench.specs.serving import ServingPlan

LLAMA_8B = load_model("llama-3.1-8b")
PLAN = ServingPlan(tp=1, max_num_seqs=256, max_num_batched_tokens=2048, gpu_memory_utilization_frac=0.9)


def test_vllm_v1_sampler_bytes_are_the_live_tensors_of_its_top_k_top_p_path() -> None:
    """Per (sequence, vocabulary entry), the tensors live when apply_top_k_top_p's scatter allocates (vllm/v1/
    sample/sampler.py and ops/topk_topp_sampler.py), each at its dtype's width (torch's own itemsize)."""
    torch = pytest.importorskip("torch")
    live = [
        torch.bfloat16,  # compute_logits output, held by _dummy_sampler_run
        torch.float32,  # Sampler.forward: logits.to(torch.float32)
        torch.float32,  # logits.sort values
        torch.int64,  # logits.sort indices
        torch.bool,  # top-k mask (logits_sort < k-th value)
        torch.float32,  # logits_sort.softmax (cumsum writes into it)
        torch.bool,  # top-p mask
        torch.float32,  # logits_sort.scatter output
    ]
    assert load_engine("vllm-v1-async").profile_sampler_bytes_per_logit == sum(d.itemsize for d in live) == 28


def test_profile_peak_is_the_larger_of_forward_and_sampler_by_hand() -> None:
    """Llama-3.1-8B, 2,048 batched tokens, 256 sequences, vocabulary 128,256, hidden 4,096, MLP 14,336:
    forward 2 x (2 x 2048 x 4096 + 3 x 2048 x 14336) = 209,715,200 B; sampler 28 x 256 x 128256 + 2 x (2048 +
    256) x 4096 = 938,213,376 B; without a sampler run the forward plus fp32 logits, 209,715,200 + 256 x 128256
    x 4 = 341,049,344 B."""
    assert activation_peak_bytes(LLAMA_8B, PLAN, 28.0) == 938_213_376
    assert activation_peak_bytes(LLAMA_8B, PLAN) == 341_049_344
    # few sequences: the forward is the peak again
    few = ServingPlan(tp=1, max_num_seqs=8, max_num_batched_tokens=2048)
    assert activation_peak_bytes(LLAMA_8B, few, 28.0) == 209_715_200


def test_kv_capacity_of_the_rtx4090_run_by_hand() -> None:
    """The LLMServingSim 0.19.0 run's shape on an RTX 4090 at utilisation 0.9: (HBM x 0.9 - weights -
    938,213,376 - 0.25 GiB) / (32 layers x 2 x 8 x 128 x 2 B x 16 tokens) blocks, 16 tokens each."""
    device = load_cluster("pcie-rtx4090").device
    free = device.hbm_bytes * 0.9 - weight_bytes_per_device(LLAMA_8B, PLAN) - 938_213_376 - 0.25 * 2**30
    blocks = math.floor(free / (32 * 2 * 8 * 128 * 2 * 16))
    assert kv_capacity_tokens(LLAMA_8B, device, PLAN, 28.0) == 16 * blocks
    rc = ReplicaCost.of(
        LLAMA_8B, load_cluster("pcie-rtx4090"), PLAN, load_calibration(), engine="vllm-v1-async"
    )
    assert rc.kv_capacity_tokens == 16 * blocks
    assert rc.activation_peak_bytes() == 938_213_376


def test_profile_sampler_bytes_out_of_range_names_the_field() -> None:
    with pytest.raises(ValueError, match="profile_sampler_bytes_per_logit"):
        EngineProfile(id="x", name="x", profile_sampler_bytes_per_logit=-1.0)


def test_each_data_parallel_rank_profiles_its_own_sequences() -> None:
    """Two attention-DP ranks of 128 sequences each (the engine's 256) profile 128 sequences apiece: 28 x 128 x
    128256 + 2 x (1024 + 128) x 4096 = 469,106,688 B, above the forward's share of 1,024 tokens (104,857,600 B)."""
    plan = ServingPlan(tp=1, attention_dp=2, max_num_seqs=256, max_num_batched_tokens=2048)
    assert activation_peak_bytes(LLAMA_8B, plan, 28.0) == 469_106_688
