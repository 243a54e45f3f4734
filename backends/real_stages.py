"""Pipeline stage modules of the real run, their tensor/data parallel wrapping, the data and the reference.

Stage ``s`` of ``S`` holds the blocks ``stage_layer_range`` gives (the torch-profile split), stage 0 also the embedding and
stage ``S-1`` the final norm and LM head. Every part (embedding, each block, head) is built from its own seed
``seed * PART_SEED_STRIDE + index`` on the CPU, so a rank builds only its parts and still gets the very weights
the single-process reference builds. The modules are those of ``workbench_backends.torch_model``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn
from workbench_backends.torch_model import DecoderLayer, Embedding, LMHead, loss_fn, random_tokens

from workbench.specs.model import ModelSpec
from workbench.specs.plan import ParallelPlan, Workload

PART_SEED_STRIDE = 100_003
"""Seed of part ``i`` (0 embedding, 1..L blocks, L+1 head) is ``seed * PART_SEED_STRIDE + i``."""


class StageModule(nn.Module):
    """One pipeline stage: optional embedding, a run of blocks, optional head. forward(tokens or x) -> x or logits."""

    def __init__(self, embedding: nn.Module | None, layers: list[nn.Module], head: nn.Module | None) -> None:
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleList(layers)
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x) if self.head is not None else x


def stage_layer_range(stage: int, num_stages: int, num_layers: int) -> range:
    """Blocks of ``stage``: the core's one split (``workbench.cost.step.stage_layer_span``), so measured and
    predicted stages hold the same blocks. ValueError if there are fewer blocks than stages."""
    if num_layers < num_stages:
        raise ValueError(
            f"the model has {num_layers} layers but the plan has {num_stages} pipeline stages "
            "(pp * vpp); use --layers >= pp * vpp"
        )
    from workbench.cost.step import stage_layer_span

    first, count = (int(x) for x in stage_layer_span(num_layers, num_stages, stage))
    return range(first, first + count)


def _seeded(seed: int, index: int, build: Any) -> nn.Module:
    torch.manual_seed(seed * PART_SEED_STRIDE + index)
    module: nn.Module = build()
    return module


def build_stage(
    spec: ModelSpec, stage: int, num_stages: int, *, seed: int, device: torch.device | str = "cpu"
) -> StageModule:
    """The fp32 module of ``stage`` (weights drawn on the CPU from per-part seeds, then moved to ``device``)."""
    layers = [
        _seeded(seed, 1 + i, lambda i=i: DecoderLayer(spec, moe=spec.is_moe and i >= spec.num_dense_layers))
        for i in stage_layer_range(stage, num_stages, spec.num_layers)
    ]
    embedding = _seeded(seed, 0, lambda: Embedding(spec)) if stage == 0 else None
    head = _seeded(seed, spec.num_layers + 1, lambda: LMHead(spec)) if stage == num_stages - 1 else None
    return StageModule(embedding, layers, head).to(device)


def build_stage_modules(
    spec: ModelSpec, stages: list[int], num_stages: int, *, seed: int, device: torch.device | str = "cpu"
) -> list[StageModule]:
    return [build_stage(spec, s, num_stages, seed=seed, device=device) for s in stages]


def _tp_plan(layer: Any) -> dict[str, Any]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    out: dict[str, Any] = {f"attention.{n}": ColwiseParallel() for n in ("q_proj", "k_proj", "v_proj")}
    out["attention.o_proj"] = RowwiseParallel()
    mlps = (
        [("mlp", layer.mlp)]
        if not hasattr(layer.mlp, "experts")
        else [(f"mlp.experts.{i}", e) for i, e in enumerate(layer.mlp.experts)]
        + ([("mlp.shared", layer.mlp.shared)] if layer.mlp.shared is not None else [])
    )
    for prefix, mlp in mlps:
        for name in ("gate_proj", "up_proj"):
            if getattr(mlp, name, None) is not None:
                out[f"{prefix}.{name}"] = ColwiseParallel()
        out[f"{prefix}.down_proj"] = RowwiseParallel()
    return out


def parallelize_stage(module: StageModule, plan: ParallelPlan, mesh: Any) -> nn.Module:
    """Apply tensor parallelism (tp > 1) and data parallelism (dp > 1) to one stage; return the module to run.

    TP: Megatron's column/row split with DTensor ``parallelize_module``; the attention's head counts are divided
    by tp so its reshapes see the local width. DP: DDP for zero_stage 0 without tp, else FSDP2 ``fully_shard``
    per block and on the stage (parameters resharded after forward only for zero_stage 3).
    Raises ValueError when tp does not divide the query or key/value heads.
    """
    if plan.tp > 1:
        from torch.distributed.tensor.parallel import parallelize_module

        for layer in module.layers:
            attn: Any = layer.attention
            if attn.num_q_heads % plan.tp or attn.num_kv_heads % plan.tp:
                raise ValueError(
                    f"tp={plan.tp} must divide the attention heads ({attn.num_q_heads}) and the "
                    f"key/value heads ({attn.num_kv_heads}) for the real run"
                )
            parallelize_module(layer, mesh["tp"], _tp_plan(layer))
            attn.num_q_heads //= plan.tp
            attn.num_kv_heads //= plan.tp
    if plan.dp == 1:
        return module
    if plan.zero_stage == 0 and plan.tp == 1:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(module, process_group=mesh["dp"].get_group())
    from torch.distributed.fsdp import fully_shard

    reshard = plan.zero_stage == 3
    for layer in module.layers:
        fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=reshard)
    fully_shard(module, mesh=mesh["dp"], reshard_after_forward=reshard)
    return module


def make_batch(
    spec: ModelSpec,
    workload: Workload,
    plan: ParallelPlan,
    dp_rank: int,
    *,
    seed: int,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets [B/dp, seq_len] of data-parallel rank ``dp_rank`` (rows split evenly)."""
    tokens = random_tokens(spec, workload.global_batch_size, workload.seq_len + 1, seed=seed)
    rows = workload.global_batch_size // plan.dp
    local = tokens[dp_rank * rows : (dp_rank + 1) * rows].to(device)
    return local[:, :-1].contiguous(), local[:, 1:].contiguous()


def precision(workload: Workload, device: torch.device | str) -> contextlib.AbstractContextManager[Any]:
    """The forward's precision context: ``torch.autocast`` to bf16 when the workload is bf16 (fp32 weights,
    gradients and AdamW states as mixed-precision training keeps them: 16 bytes per parameter, Micikevicius et
    al. 2018; matmuls and attention in bf16), else nothing. ValueError for another dtype."""
    if str(workload.dtype) == "fp32":
        return contextlib.nullcontext()
    if str(workload.dtype) == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    raise ValueError(f"a real run trains in fp32 or bf16 (autocast), got dtype {workload.dtype}")


def full_reference_losses(
    spec: ModelSpec, workload: Workload, config: dict[str, Any], device: torch.device | str = "cpu"
) -> list[float]:
    """Per-step losses of one process training the whole model on the whole global batch with AdamW:
    the ground truth a parallel run must reproduce (same seeds, same data)."""
    model = build_stage(spec, 0, 1, seed=config["seed"], device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], foreach=False)
    whole = ParallelPlan()
    losses = []
    for step in range(config["steps"]):
        inputs, targets = make_batch(spec, workload, whole, 0, seed=config["seed"] + 1 + step, device=device)
        with precision(workload, device):
            loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses
