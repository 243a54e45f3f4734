"""Discrete-event simulation of LLM serving engines: requests in, per-request latencies and per-iteration batches out.

Each engine runs iterations (one forward pass each) over a batch the scheduler composes at the iteration's start.
Admission is FCFS (the queue head blocks the requests behind it) while a slot (``max_num_seqs``), KV blocks
(``ceil(tokens / kv_block_tokens)``, the whole prompt reserved at admission) and the token budget
(``max_num_batched_tokens``, one token per decode) allow. Decodes reserve the blocks of their growth; when the pool
runs out the youngest running request is preempted by recompute: its blocks are freed and it re-enters the waiting
queue to redo its prefill over prompt + generated tokens (vLLM, Kwon et al. 2023, arXiv 2309.06180, Sec. 4.5); no
request is admitted in an iteration that preempted one. Under ``kv_admission="full"`` (TensorRT-LLM's
GUARANTEED_NO_EVICT capacity scheduler) a request is admitted only when the blocks of its prompt and all its output
are free beside those the admitted requests reserved, and no request is ever preempted. Batch composition (``workbench.specs.serving.Scheduler``):

- ``vllm`` (vLLM V0, Orca-style): when a waiting prompt can be admitted the iteration prefills whole prompts only
  and the running decodes wait; otherwise every running request decodes;
- ``sarathi`` (Sarathi-Serve, Agrawal et al. 2024, arXiv 2403.02310; vLLM V1): every running request decodes, then
  partial prefills continue, then waiting prompts, in chunks that fill the remaining budget (``chunked_prefill=False``
  keeps whole prompts in the mixed batch; a recompute prompt longer than the budget then runs as the only prefill).

A prefill over C tokens (P prompt + m generated) emits token m + 1; a decode emits one token; a request of O output
tokens runs one prefill and O - 1 decodes. Disaggregated serving (DistServe, Zhong et al. 2024, arXiv 2401.09670):
prefill engines and decode engines in two pools; the first token comes from the prefill engine (TTFT ends with the
prefill), the prefill engine frees the request's blocks at once (DistServe holds them until the decode side pulls
the KV: this understates prefill-side KV pressure by the transfer time), and the KV reaches a decode engine after
``kv_transfer_s``, where it is admitted without compute (a recompute preemption there redoes the prefill locally).
Not modelled: vLLM's free-block watermark, swap preemption, prefix-cache eviction (a hit rate is given), and pipeline-parallel engines keeping
several batches in flight (an iteration is one whole forward pass, as ``ReplicaCost`` prices it).

Speed: a run of decode-only iterations between two events (an arrival or hand-off that could be admitted, a finish,
the KV running out) is one step: its iteration times are priced at both ends and interpolated, exact when the cost
is affine in the context lengths (``max_run_iterations=1`` prices every iteration). Deterministic: ties in the
event heap are broken by ``(time_s, priority, seq)``. The loop itself: :mod:`workbench.serving.event_loop`.
"""

from __future__ import annotations

from workbench.serving.cost import IterationCost
from workbench.serving.engine_state import DisaggregatedPools, check_fits
from workbench.serving.engine_state import EngineState as _Engine
from workbench.serving.event_loop import EventLoop
from workbench.serving.requests import MAX_TOKENS as _MAX_TOKENS
from workbench.serving.requests import Requests
from workbench.serving.results import (
    ITERATION_COLUMNS,
    REQUEST_COLUMNS,
    LatencyStats,
    RequestSimResult,
)
from workbench.specs.engine import KV_ADMISSIONS
from workbench.specs.limits import check_count, check_real, shown
from workbench.specs.serving import Scheduler

__all__ = [
    "IterationCost",
    "Requests",
    "DisaggregatedPools",
    "LatencyStats",
    "RequestSimResult",
    "simulate",
    "POLICIES",
    "ROUTERS",
    "KV_ADMISSIONS",
    "REQUEST_COLUMNS",
    "ITERATION_COLUMNS",
]

POLICIES: tuple[str, ...] = tuple(s.value for s in Scheduler)
"""Scheduler policies (``workbench.specs.serving.Scheduler``): ``vllm`` prefill-priority whole prompts, ``sarathi``
decode-first stall-free batching with chunked prefill (module docstring)."""
ROUTERS: tuple[str, ...] = ("round_robin", "least_loaded")
"""How arrivals are spread over the engines of a pool: in turn, or to the engine holding the fewest requests
(ties to the lowest index)."""


def simulate(
    requests: Requests,
    cost: IterationCost,
    *,
    policy: str = "vllm",
    max_num_seqs: int,
    max_num_batched_tokens: int,
    chunked_prefill: bool | None = None,
    replicas: int = 1,
    router: str = "round_robin",
    disaggregation: DisaggregatedPools | None = None,
    max_run_iterations: int = 1 << 20,
    kv_admission: str = "prompt",
    emit_delay_s: float = 0.0,
    eager_emit_delay_s: float = 0.0,
    pipeline_depth: int = 1,
    prefix_hit_rate: float = 0.0,
    max_chunk_tokens: int | None = None,
) -> RequestSimResult:
    """Simulate serving ``requests`` on ``replicas`` engines priced by ``cost`` (module docstring for the rules).

    policy: one of ``POLICIES`` (module docstring). chunked_prefill: None means the policy's own (off under
    ``vllm``, on under ``sarathi``); on under ``vllm`` it runs Sarathi's rules (vLLM's chunked-prefill scheduler is
    stall-free batching). max_num_seqs: running requests per engine; max_num_batched_tokens: tokens per iteration
    (a decode counts 1), >= max_num_seqs. replicas: identical engines (1 with ``disaggregation``, whose pools
    replace them). router: one of ``ROUTERS``. max_run_iterations: most decode iterations priced as one run (1:
    each priced on its own). kv_admission: one of ``KV_ADMISSIONS`` (``workbench.specs.engine``): ``prompt``
    reserves a request's prompt blocks and grows (preempting when the pool runs out), ``full`` reserves the blocks
    of its prompt and all its output at admission (TensorRT-LLM's GUARANTEED_NO_EVICT), so none is preempted.
    emit_delay_s: seconds from an iteration's end until its tokens reach the client (vLLM 0.6's asynchronous
    output processing, ``ReplicaCost.emit_delay_s``): added to first-token and finish times (closed-loop clients
    still send their next request at the iteration's end). eager_emit_delay_s: seconds more for the first and last
    tokens of an iteration followed by one with prefill tokens, which the engine launches eagerly before it
    processes the earlier outputs (vLLM 0.6 V0 runs that callback inside the next iteration's ``execute_model``,
    after its forward and logits are launched: ``vllm/worker/model_runner.py`` v0.6.0 l. 1489;
    ``ReplicaCost.eager_emit_delay_s``). pipeline_depth: batches one engine keeps in flight (its pipeline stages,
    ``ServingPlan.pp``; 1 with ``disaggregation``): each replica runs as that many virtual engines, each with its
    own scheduler, ``max_num_seqs`` and 1/depth of the KV blocks, and iterations priced as whole forward passes
    (vLLM V0's per-stage virtual engines, TensorRT-LLM's pipeline micro-batches): in a balanced pipeline every
    stage then works on one batch while the others are in the other stages. prefix_hit_rate: share
    of each prompt found in the prefix cache, in [0, 1) (vLLM automatic prefix caching, SGLang RadixAttention):
    a request's first prefill starts on top of floor(rate x prompt / block) whole blocks (at least one prompt
    token is computed), whose KV it holds from admission like the rest of its prompt (cached blocks no running
    request holds are evictable, so they take no capacity). max_chunk_tokens: most new tokens of a prefill chunk,
    1..max_num_batched_tokens (None: that budget; attention-DP ranks: one rank's, ``ReplicaCost.max_chunk_tokens``).
    Returns a :class:`RequestSimResult` (per-request and per-iteration tables, latency percentiles, throughputs).
    Raises ValueError for an unknown policy, router or KV admission, counts out of range, a prompt longer than
    max_num_batched_tokens without chunked prefill (vLLM refuses those), a cost whose KV block or capacity is not
    a whole number of tokens (block >= 1), a request that never fits an engine's KV cache, or a cost whose
    iteration time is not finite and >= 0.
    Long because: the docstring states the rule of each of the sixteen options; the body is one call each.
    """
    chunked, prefill_first, delay, eager_delay, hit_rate = _checked_options(
        requests,
        policy=policy,
        kv_admission=kv_admission,
        router=router,
        chunked_prefill=chunked_prefill,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        replicas=replicas,
        pipeline_depth=pipeline_depth,
        disaggregated=disaggregation is not None,
        max_run_iterations=max_run_iterations,
        emit_delay_s=emit_delay_s,
        eager_emit_delay_s=eager_emit_delay_s,
        prefix_hit_rate=prefix_hit_rate,
        max_chunk_tokens=max_chunk_tokens,
    )
    engines, pools = _engines(requests, cost, replicas, pipeline_depth, disaggregation)
    sim = EventLoop(
        requests,
        engines,
        pools,
        chunked=chunked,
        prefill_first=prefill_first,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        router=router,
        max_run_iterations=max_run_iterations,
        kv_admission=kv_admission,
        prefix_hit_rate=hit_rate,
        max_chunk_tokens=max_chunk_tokens,
        eager_emit_s=eager_delay,
    )
    sim.run()
    return sim.result(delay)


def _checked_options(
    requests: Requests,
    *,
    policy: str,
    kv_admission: str,
    router: str,
    chunked_prefill: bool | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    replicas: int,
    pipeline_depth: int,
    disaggregated: bool,
    max_run_iterations: int,
    emit_delay_s: float,
    eager_emit_delay_s: float,
    prefix_hit_rate: float,
    max_chunk_tokens: int | None,
) -> tuple[bool, bool, float, float, float]:
    """``simulate``'s options checked (ValueError as its docstring lists): (chunked prefill, prefills first,
    emit delay s, eager emit delay s, prefix hit rate)."""
    if policy not in POLICIES:
        raise ValueError(f"simulate: policy must be one of {', '.join(POLICIES)}; got {shown(policy)}")
    if kv_admission not in KV_ADMISSIONS:
        raise ValueError(
            f"simulate: kv_admission must be one of {', '.join(KV_ADMISSIONS)}; got {shown(kv_admission)}"
        )
    if router not in ROUTERS:
        raise ValueError(f"simulate: router must be one of {', '.join(ROUTERS)}; got {shown(router)}")
    chunked = (policy == Scheduler.SARATHI) if chunked_prefill is None else bool(chunked_prefill)
    prefill_first = policy == Scheduler.VLLM and not chunked
    check_count("simulate", "max_num_seqs", max_num_seqs, maximum=_MAX_TOKENS)
    check_count(
        "simulate",
        "max_num_batched_tokens",
        max_num_batched_tokens,
        minimum=max_num_seqs,
        maximum=_MAX_TOKENS,
    )
    check_count("simulate", "replicas", replicas, maximum=1 if disaggregated else 2**16)
    check_count("simulate", "pipeline_depth", pipeline_depth, maximum=1 if disaggregated else 2**10)
    check_count("simulate", "max_run_iterations", max_run_iterations, maximum=1 << 40)
    delay = check_real("simulate", "emit_delay_s", emit_delay_s, minimum=0.0, min_open=False, unit="s")
    eager = check_real(
        "simulate", "eager_emit_delay_s", eager_emit_delay_s, minimum=0.0, min_open=False, unit="s"
    )
    hit_rate = check_real("simulate", "prefix_hit_rate", prefix_hit_rate, minimum=0.0, min_open=False, maximum=1.0,
                          max_open=True)  # fmt: skip
    if max_chunk_tokens is not None:
        check_count("simulate", "max_chunk_tokens", max_chunk_tokens, maximum=max_num_batched_tokens,
                    limit="max_num_batched_tokens")  # fmt: skip
    if not chunked and len(requests) and int(requests.input_tokens.max()) > max_num_batched_tokens:
        i = int(requests.input_tokens.argmax())
        raise ValueError(
            f"simulate: request {i} has a {int(requests.input_tokens[i])}-token prompt, more than "
            f"max_num_batched_tokens = {max_num_batched_tokens}; turn chunked_prefill on or raise the budget"
        )
    return chunked, prefill_first, delay, eager, hit_rate


def _engines(
    requests: Requests,
    cost: IterationCost,
    replicas: int,
    pipeline_depth: int,
    disaggregation: DisaggregatedPools | None,
) -> tuple[list[_Engine], tuple[list[_Engine], list[_Engine]]]:
    """(every engine, (the engines prefills go to, the engines decodes go to)): ``replicas`` x
    ``pipeline_depth`` engines serving both, or the prefill and decode pools of ``disaggregation``. Raises
    ValueError (``check_fits``) for a request that never fits an engine's KV cache."""
    if disaggregation is None:
        engines = [_Engine(e, cost, False, pipeline_depth) for e in range(replicas * pipeline_depth)]
        check_fits(requests, engines, decode=True, name="serving")
        return engines, (engines, engines)
    pc, dc = disaggregation.prefill_cost or cost, disaggregation.decode_cost or cost
    num_p = disaggregation.num_prefill_engines
    prefill = [_Engine(e, pc, True) for e in range(num_p)]
    decode = [_Engine(num_p + e, dc, False) for e in range(disaggregation.num_decode_engines)]
    check_fits(requests, prefill, decode=False, name="prefill")
    check_fits(requests, decode, decode=True, name="decode")
    return prefill + decode, (prefill, decode)
