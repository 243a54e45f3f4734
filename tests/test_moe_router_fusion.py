"""Megatron-Bridge 25.11 fuses the MoE router (issue 48): Transformer Engine's fused top-k, aux-loss score and
aux-loss kernels replace the router's eager ops, so a layer whose router is not CUDA-graphed launches fewer
kernels.

The expected count is the call sequence of Megatron-Core 0.15's ``TopKRouter.forward`` with
``moe_router_fusion=True`` (NVIDIA/Megatron-LM @0d8e0714, moe/router.py and moe/moe_utils.py) and Transformer
Engine release_v2.9's fused router (pytorch/router.py -> csrc/extensions/router.cpp -> one kernel each in
common/fused_router/*.cu), written out call by call here, not read back from the cost model.
"""

from __future__ import annotations

import dataclasses

import pytest

from workbench.cost.moe import (
    BACKWARD_KERNELS,
    FUSED_ROUTER_LAUNCHES,
    MOE_LAYER_KERNEL_PARTS,
    moe_host_s,
    moe_layer_launches,
    on_device,
)
from workbench.presets.calibration import load_calibration
from workbench.presets.catalog import load_device, load_model
from workbench.presets.frameworks import load_framework

MCORE = load_framework("megatron-core-2024")

# (call in TopKRouter.forward's order at tp x cp = 1, kernels it launches) for a softmax top-k router with
# the auxiliary load-balancing loss (Qwen3-30B-A3B, GPT-OSS 120B) and the benchmarks' forced balance
FUSED_CALLS = [
    ("pre_mlp_layernorm: TE RMSNorm forward", 1),
    ("router_gating_linear: te_general_gemm", 1),
    ("apply_random_logits: logits.clone()", 1),
    ("apply_random_logits: .normal_(generator)", 1),
    ("fused_topk_with_score_function: tex.fused_topk_with_score_function_fwd", 1),
    ("fused_compute_score_for_moe_aux_loss: tex.fused_score_for_moe_aux_loss_fwd", 1),
    ("_apply_aux_loss: routing_map.sum(dim=0)", 1),
    ("fused_moe_aux_loss: tex.fused_moe_aux_loss_fwd", 1),
    ("save_to_aux_losses_tracker: aux_loss / aux_loss_coeff", 1),
    ("save_to_aux_losses_tracker: values[layer_number - 1] += loss", 1),
]


def _fw(**changes: object):  # noqa: ANN202
    return dataclasses.replace(MCORE, device_recipes={}, model_recipes={}, **changes)


def test_fused_router_launches_follow_the_call_sequence() -> None:
    assert sum(FUSED_ROUTER_LAUNCHES.values()) == sum(n for _, n in FUSED_CALLS) == 10
    assert len(FUSED_ROUTER_LAUNCHES) == 8  # the two random-logit and the two tracker kernels grouped


def test_fusing_the_router_cuts_a_layers_eager_launches() -> None:
    unfused, fused = _fw(moe_router_fusion=False), _fw(moe_router_fusion=True)
    all_parts = sum(MOE_LAYER_KERNEL_PARTS.values())
    assert moe_layer_launches(unfused) == all_parts
    assert moe_layer_launches(fused) == all_parts - MOE_LAYER_KERNEL_PARTS["moe_router"] + 10
    # a graphed router replays as one launch whatever runs inside it
    for scopes in (("moe_router", "moe_preprocess"), ("attn", "moe_router", "moe_preprocess")):
        graphed = [dataclasses.replace(fw, cuda_graph_scopes=scopes) for fw in (unfused, fused)]
        assert moe_layer_launches(graphed[0]) == moe_layer_launches(graphed[1])


def test_the_megatron_bridge_profile_fuses_the_router_with_its_source() -> None:
    assert MCORE.moe_router_fusion
    source = MCORE.sources["moe_router_fusion"]
    for where in ("qwen3_llm_pretrain.py:39", "deepseek_llm_pretrain.py:36", "gpt_oss_llm_pretrain.py:35"):
        assert where in source
    assert not load_framework("generic").moe_router_fusion  # Megatron-Core's own default is False


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_gpt_oss_on_gb200_launches_the_fused_router_forward_and_backward(dtype: str) -> None:
    """GPT-OSS 120B on GB200 graphs nothing (its 25.11 recipe): the fused router saves 12 - 10 launches
    forward and BACKWARD_KERNELS times that backward, at host_s_per_kernel each."""
    model = load_model("gpt-oss-120b")
    cal = load_calibration("default")
    per_kernel = 1e-5
    times = []
    for fusion in (False, True):
        fw = dataclasses.replace(MCORE, host_s_per_kernel=per_kernel, moe_router_fusion=fusion)
        resolved = on_device(dataclasses.replace(cal, framework=fw), load_device("gb200"), model)
        assert resolved.framework.cuda_graph_scopes == ()
        times.append(moe_host_s(model, resolved, dtype=dtype, ep=64))
    saved = 12 - 10
    assert float(times[0][0] - times[1][0]) == pytest.approx(saved * per_kernel)
    assert float(times[0][1] - times[1][1]) == pytest.approx(BACKWARD_KERNELS * saved * per_kernel)
