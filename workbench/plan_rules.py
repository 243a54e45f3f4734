"""The constraints a ``ParallelPlan`` must meet for a model, a cluster and a workload."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.hardware import ClusterSpec
    from workbench.model import ModelSpec
    from workbench.plan import ParallelPlan, Workload


def _divides(d: int, n: int) -> bool:
    return n % d == 0


def plan_violations(
    plan: ParallelPlan, model: ModelSpec, cluster: ClusterSpec, workload: Workload
) -> list[str]:
    """Return every violated rule as a sentence (empty list: the plan is valid).

    Rules: the degrees multiply to the cluster's device count; tp divides the attention and key/value heads
    (Megatron splits whole heads; MLA shares no KV heads so only attention heads count); pp * vpp divides the
    layers; dp * micro_batch_size divides the global batch; cp divides the sequence (2 * cp chunks for load
    balancing are not required); ep divides the routed experts and dp * cp * tp; sequence parallelism needs
    tp > 1; the schedule's own rules (``workbench.schedules.schedule_rule_violations``).
    """
    out: list[str] = []
    p = plan
    if p.num_devices != cluster.num_devices:
        out.append(
            f"dp*tp*pp*cp = {p.dp}*{p.tp}*{p.pp}*{p.cp} = {p.num_devices} must equal the cluster's "
            f"{cluster.num_devices} devices ({cluster.num_nodes} nodes x {cluster.devices_per_node})."
        )
    if not _divides(p.tp, model.num_attention_heads):
        out.append(f"tp={p.tp} must divide the {model.num_attention_heads} attention heads.")
    if (
        model.attention != "mla"
        and not _divides(p.tp, model.num_key_value_heads)
        and not _divides(model.num_key_value_heads, p.tp)
    ):
        out.append(f"tp={p.tp} and the {model.num_key_value_heads} key/value heads must divide one another.")
    if not _divides(p.pp * p.vpp, model.num_layers):
        out.append(f"pp*vpp = {p.pp}*{p.vpp} = {p.pp * p.vpp} must divide the {model.num_layers} layers.")
    if not _divides(p.dp * p.micro_batch_size, workload.global_batch_size):
        out.append(
            f"dp*micro_batch_size = {p.dp}*{p.micro_batch_size} = {p.dp * p.micro_batch_size} must divide "
            f"the global batch of {workload.global_batch_size} sequences."
        )
    if not _divides(p.cp, workload.seq_len):
        out.append(f"cp={p.cp} must divide the sequence length {workload.seq_len}.")
    if p.ep > 1:
        if not model.is_moe:
            out.append(f"ep={p.ep} needs a mixture-of-experts model; {model.name} is dense (use ep=1).")
        elif not _divides(p.ep, model.num_experts):
            out.append(f"ep={p.ep} must divide the {model.num_experts} routed experts.")
        if not _divides(p.ep, p.dp * p.cp * p.tp):
            out.append(
                f"ep={p.ep} must divide dp*cp*tp = {p.dp * p.cp * p.tp} (expert groups are carved from them)."
            )
    if p.sequence_parallel and p.tp == 1:
        out.append("sequence_parallel needs tp > 1 (it shards along the tensor-parallel group).")
    if p.pp == 1 and p.vpp > 1:
        out.append(f"vpp={p.vpp} needs pp > 1 (virtual stages interleave a pipeline).")
    if p.pp > 1:
        m = p.num_microbatches(workload)
        if m:
            from workbench.schedules import schedule_rule_violations

            out.extend(schedule_rule_violations(p.schedule, pp=p.pp, vpp=p.vpp, num_microbatches=m))
    return out
