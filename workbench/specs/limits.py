"""The bounds on every size the workbench accepts, in one place, each with the reason for its value.

Every input (a spec built in Python, a preset or ``config.json`` file, a schedule or validation CSV, a CLI
option, an app control) ends in a spec constructor or a reader that checks it against these constants, so the
CLI, the app and the notebooks all refuse the same values with the same ``ValueError``. The bounds are set well
above what any published training run uses (so no real plan is refused) and low enough that the work and the
memory a value asks for stay small: nothing here is allocated in proportion to a number a user typed beyond
these limits. Counts have no unit; ``_bytes`` limits are bytes.

The checks themselves (:func:`check_count`, :func:`check_real`) raise ``ValueError`` naming the owner, the field,
the value (shortened when huge), the allowed range and the constant that sets it.
"""

from __future__ import annotations

import math
from typing import Any

# ---- cluster --------------------------------------------------------------------------------------------
MAX_DEVICES = 2**20
"""Devices in one cluster or plan: 1,048,576. The largest training clusters today hold about 100,000-200,000
GPUs (xAI Colossus: 200k H100/H200 in 2025; Meta's two 24k-GPU H100 clusters; Llama 3 405B trained on 16k
H100s, arXiv:2407.21783); 2^20 leaves a 5x margin. It also bounds every parallel degree (dp, tp, pp, cp, ep)
and the trial division that lists a device count's divisors (at most sqrt(2^20) = 1,024 steps)."""

MAX_NODES = MAX_DEVICES
"""Nodes in one cluster (a node holds at least one device)."""

MAX_NODE_COUNTS = 64
"""Node counts one search compares (``plan --nodes 8,16,32``): each is a full screen of its plan space."""

MAX_CANDIDATES = 64
"""Candidate values the planner is given for one axis (``plan --micro-batches 1,2,4``): the plan space grows
in proportion to their number."""

MAX_REFINED_PLANS = 1_000
"""Plans the planner re-prices with the full backend (``plan --top``): each is one simulated estimate (5-50 ms
with the analytic backend), so 1,000 stay within a minute."""

# ---- model ----------------------------------------------------------------------------------------------
MAX_LAYERS = 2**12
"""Transformer blocks: 4,096. The deepest published LLMs have 96-128 (GPT-3 96, Llama 3.1 405B 126,
Megatron-LM's 1T GPT 128, arXiv:2104.04473 Table 1); 32x margin."""

MAX_HIDDEN_SIZE = 2**18
"""Model width (and MLA's low-rank dims): 262,144. Widest published: Megatron's 1T GPT 25,600, PaLM 540B 18,432
(arXiv:2204.02311); 10x margin."""

MAX_FFN_HIDDEN_SIZE = 2**20
"""MLP or expert intermediate size: 1,048,576. Widest published: Megatron's 1T GPT 102,400 (4h), PaLM 540B
73,728; 10x margin."""

MAX_ATTENTION_HEADS = 2**14
"""Query (and key/value) heads: 16,384. Published models use 32-160 (Megatron 1T GPT: 160); 100x margin."""

MAX_HEAD_DIM = 2**12
"""Size of one attention head: 4,096. Published: 64-256 (Gemma 256; DeepSeek-V3 MLA 128 + 64 rope)."""

MAX_VOCAB_SIZE = 2**24
"""Vocabulary: 16,777,216 tokens. Largest published: ~256k (Gemma, mT5 250k); 64x margin."""

MAX_EXPERTS = 2**16
"""Routed or shared experts per MoE layer: 65,536. Published: 8-384 (DeepSeek-V3 256, Kimi K2 384)."""

# ---- workload -------------------------------------------------------------------------------------------
MAX_CAPACITY_FACTOR = 64.0
"""Largest MoE capacity factor: GShard and Switch use 1-2; 64 x the balanced load is far beyond any recipe and
keeps the padded expert GEMMs bounded."""

MAX_SEQ_LEN = 2**24
"""Tokens per sequence (and learned position rows): 16,777,216. The longest trained contexts are about
1M-10M tokens (Llama 4 Scout claims 10M; Gemini 1.5 was tested to 10M, arXiv:2403.05530)."""

MAX_GLOBAL_BATCH_SIZE = 2**24
"""Sequences per optimizer step (and per micro-batch): 16,777,216. Published batches hold 1.5k-16k sequences
(GPT-3 3.2M tokens = 1,536 x 2,048; DeepSeek-V3 15,360 x 4,096, arXiv:2412.19437); 1,000x margin."""

MAX_TOKEN_BUDGET = 1e18
"""Tokens of a training run priced by the ``time`` and ``cost`` objectives. The largest published runs train
on 15-36T tokens (Llama 3: 15.6T; Qwen3: 36T), 3.6e13; 1e18 is far beyond any data set."""

# ---- pipeline -------------------------------------------------------------------------------------------
MAX_PP = MAX_LAYERS
"""Pipeline ranks: a pipeline stage holds at least one layer, so pp <= layers <= MAX_LAYERS."""

MAX_VPP = 2**7
"""Virtual stages (model chunks) per pipeline rank: 128. Published interleaved runs use 2-24 (the planner
offers up to 64)."""

MAX_PIPELINE_STAGES = MAX_LAYERS
"""Stages of one schedule, pp * vpp: each stage holds at least one layer."""

MAX_SIMULATED_STAGE_MICROBATCHES = 2**18
"""pp * vpp * num_microbatches of one simulated timeline: 262,144 (stage, micro-batch) pairs. The simulator's
cost is O(pp * vpp * m) actions (2-3 per pair: F and B, or F, I and W). Measured here (2026-11, one CPU core)
for every built-in schedule: 0.8-1.3 KB and 4-12 us per pair for building, simulating and tabulating it, i.e.
at most ~350 MB and ~3 s at the bound; the whole ``workbench schedule zbv --pp 32 --microbatches 4096`` (the
bound exactly, table printed) peaks at ~410 MB resident and ~9 s. Published runs stay far below it:
Megatron's 1T GPT runs pp=64 with m=512 (arXiv:2104.04473 Table 1), 32,768 pairs."""

MAX_MICROBATCHES = MAX_SIMULATED_STAGE_MICROBATCHES
"""Micro-batches of one schedule (the pair bound with pp = vpp = 1)."""

SCHEDULE_CACHE_SIZE = 16
"""Built schedules one process keeps (``workbench.estimate.analytic.build_pipeline``, least recently used out),
keyed by (schedule, pp, micro-batches, vpp): a search refines its top plans, which share a few pipeline shapes
(20 refined ``plan --framework zero-bubble-2024`` plans of llama-3.1-70b on 16 DGX H100 nodes build 9), and the
app re-costs one shape on every control change. The key holds no cost: no generator reads one (the greedy
zero-bubble rule runs every action in one unit step). 16, not more: a schedule at the pair bound above holds
786,432 actions, 19 MB packed (more once its ``Action`` rows are read), so 16 stay within a few hundred MB;
128 kept the 405B search at 1.5 GB (issue 52)."""

MAX_ACTION_TIME = 1e12
"""Duration of one schedule action given in ``workbench schedule`` (any one unit; seconds by convention: 30,000
years). Sums over the ~10^6 actions the pair bound allows stay finite."""

MAX_MIXED_LAYOUTS = 40_000
"""Pipeline layouts one mixed-pool search prices (``workbench plan --cluster A:1+B:1+...``): pool order, tp per
pool, dp, micro-batch, ZeRO, recompute and schedule. Each costs about 1.5 ms of CPU to split and screen
(measured here 2026-12: six identical DGX H100 pools, 3,252 layouts, 6.9 CPU-s end to end with start-up), so
40,000 stay within a minute. Identical pools are enumerated once up to their symmetry (six copies: 84 tp choices,
not 4^6 = 4,096; before that, six identical pools ran past 300 s and 900 MB, issue 52); beyond the bound the
search is refused with the size of the work, after enumerating at most this many layouts."""

# ---- serving --------------------------------------------------------------------------------------------
MAX_SIMULATED_REQUESTS = 2**20
"""Requests of one simulated serving workload (``serve estimate --num-requests``, a trace's rows, the app):
1,048,576. Measured here (2026-12, one CPU core busy): ``serve estimate`` of Llama-3.1-8B with 2^20 offline
requests takes 7.7 CPU-s and 380 MB, and ``--report`` adds a rate sweep of a few such runs, so the answer comes
within about a minute; 2^24 (the bound before issue 52) took 80 s and 3.2 GB without a report. Percentiles
settle long before: published benchmarks replay 10^2-10^5 requests (MLPerf llama2-70b: 24,576 samples)."""

MAX_SERVE_PLAN_REQUESTS = 2**15
"""Requests each candidate of ``serve plan`` is simulated with: 32,768. The planner simulates every candidate
deployment (engine, tp, dtypes, batch limits), about 1 ms of CPU per request over all of them (measured here:
Llama-3.1-8B on a DGX H100, 4,096 requests 6.5 CPU-s, 32,768 requests 32 CPU-s and 140 MB), so 2^15 answers
within a minute; 2^20 (the bound before issue 52) ran past 300 s."""

# ---- measuring on this host ----------------------------------------------------------------------------
MAX_THREADS = 2**12
"""CPU threads a measurement may ask torch for: 4,096. The largest two-socket servers expose 768 hardware
threads (2 x AMD EPYC 9965: 192 cores each, two threads per core)."""

MAX_TIMING_REPEATS = 10_000
"""Timed (or warm-up) calls per measured point. Medians settle within 5-20 samples; 10,000 keeps a typo from
turning a minute's profile into a day's."""

# ---- files ----------------------------------------------------------------------------------------------
MAX_INPUT_FILE_BYTES = 2**25
"""Size of one text input file (config.json, preset and calibration TOML, schedule or validation CSV, profile
manifest and tables): 32 MiB. A Hugging Face config.json is a few KB, the largest schedule CSV the pair bound
allows is about 10 MB (786k actions of up to 12 characters), the public validation set 150 KB."""

MAX_CSV_FIELD_CHARS = 131_072
"""Characters in one CSV cell: Python's ``csv.field_size_limit()`` default, kept (a schedule cell holds one
action, a validation cell a number or a sentence)."""

MAX_CSV_COLUMNS = 256
"""Columns of a validation CSV (the public schema has 44): each row is kept as a dict of them."""

MAX_VALIDATION_ROWS = 10_000
"""Rows of one validation file (the public set has 264): each is priced by one simulated estimate (10-150 ms),
so 10,000 rows take up to half an hour, and the rows read are kept in memory (a few KB each)."""

MAX_PROFILE_ROWS = 2**20
"""Rows of a measured profile's ``ops.parquet``: one per op kind and shape measured (the shipped ones hold
tens)."""

MAX_SHOWN_CHARS = 60
"""Longest repr of a bad value quoted in an error message (longer ones are cut, huge integers summarised)."""


def shown(value: Any) -> str:
    """``repr(value)`` short enough for a one-line error: huge integers as their digit count, long reprs cut."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        digits = int(math.log10(abs(value))) + 1
        return f"{'a negative' if value < 0 else 'a'} {digits}-digit integer"
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def _limit_name(name: str | None) -> str:
    return f" ({name} in workbench/specs/limits.py)" if name else ""


def check_count(
    where: str, field: str, value: Any, *, minimum: int = 1, maximum: int, limit: str | None = None
) -> int:
    """``value`` if it is an int (not a bool) in ``minimum..maximum``, else ValueError
    ``"{where}: {field} must be an integer in {minimum}..{maximum} ({limit} ...), got {value}"``."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise ValueError(
            f"{where}: {field} must be an integer in {minimum}..{maximum}{_limit_name(limit)}, "
            f"got {shown(value)}"
        )
    return value


def check_real(
    where: str,
    field: str,
    value: Any,
    *,
    minimum: float = 0.0,
    maximum: float = math.inf,
    min_open: bool = True,
    max_open: bool = False,
    unit: str = "",
    limit: str | None = None,
) -> float:
    """``float(value)`` if it is a finite int/float (not a bool) in the range, else ValueError naming the field,
    the value and the range: ``(minimum, maximum]`` by default (``min_open``/``max_open`` choose the ends)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        try:
            number = float(value)
        except OverflowError:
            ok = False
        else:
            ok = math.isfinite(number)
            ok = ok and (number > minimum if min_open else number >= minimum)
            ok = ok and (maximum == math.inf or (number < maximum if max_open else number <= maximum))
    if not ok:
        low = f"({minimum:g}" if min_open or minimum == -math.inf else f"[{minimum:g}"
        high = "inf)" if maximum == math.inf else (f"{maximum:g})" if max_open else f"{maximum:g}]")
        span = "" if minimum == -math.inf and maximum == math.inf else f" in {low}, {high}"
        units = f" {unit}" if unit else ""
        raise ValueError(
            f"{where}: {field} must be a finite number{span}{units}{_limit_name(limit)}, got {shown(value)}"
        )
    return number


MODEL_MAXIMUM: dict[str, tuple[int, str]] = {
    "num_layers": (MAX_LAYERS, "MAX_LAYERS"),
    "hidden_size": (MAX_HIDDEN_SIZE, "MAX_HIDDEN_SIZE"),
    "num_attention_heads": (MAX_ATTENTION_HEADS, "MAX_ATTENTION_HEADS"),
    "num_key_value_heads": (MAX_ATTENTION_HEADS, "MAX_ATTENTION_HEADS"),
    "head_dim": (MAX_HEAD_DIM, "MAX_HEAD_DIM"),
    "ffn_hidden_size": (MAX_FFN_HIDDEN_SIZE, "MAX_FFN_HIDDEN_SIZE"),
    "vocab_size": (MAX_VOCAB_SIZE, "MAX_VOCAB_SIZE"),
    "num_learned_positions": (MAX_SEQ_LEN, "MAX_SEQ_LEN"),
    "num_mtp_layers": (MAX_LAYERS, "MAX_LAYERS"),
    "num_experts": (MAX_EXPERTS, "MAX_EXPERTS"),
    "experts_per_token": (MAX_EXPERTS, "MAX_EXPERTS"),
    "moe_ffn_hidden_size": (MAX_FFN_HIDDEN_SIZE, "MAX_FFN_HIDDEN_SIZE"),
    "num_shared_experts": (MAX_EXPERTS, "MAX_EXPERTS"),
    "num_dense_layers": (MAX_LAYERS, "MAX_LAYERS"),
    "num_expert_groups": (MAX_EXPERTS, "MAX_EXPERTS"),
    "routed_groups_per_token": (MAX_EXPERTS, "MAX_EXPERTS"),
    "q_lora_rank": (MAX_HIDDEN_SIZE, "MAX_HIDDEN_SIZE"),
    "kv_lora_rank": (MAX_HIDDEN_SIZE, "MAX_HIDDEN_SIZE"),
    "qk_nope_head_dim": (MAX_HEAD_DIM, "MAX_HEAD_DIM"),
    "qk_rope_head_dim": (MAX_HEAD_DIM, "MAX_HEAD_DIM"),
    "v_head_dim": (MAX_HEAD_DIM, "MAX_HEAD_DIM"),
}
"""``ModelSpec`` field -> (largest value, name of the constant); the Hugging Face reader checks the same."""


def check_token_budget(value: Any) -> float:
    """A training run's token count: a finite number in (0, MAX_TOKEN_BUDGET]; ValueError otherwise."""
    return check_real("search", "token_budget", value, maximum=MAX_TOKEN_BUDGET, limit="MAX_TOKEN_BUDGET")


def simulated_size_problem(*, pp: int, vpp: int, num_microbatches: int) -> str | None:
    """Why a timeline of ``pp * vpp * num_microbatches`` (stage, micro-batch) pairs is too large to simulate
    (a factor above its own bound, or the product above ``MAX_SIMULATED_STAGE_MICROBATCHES``); None when it
    is not. The factors must be ints >= 1."""
    for field, value, maximum, name in (
        ("pp", pp, MAX_PP, "MAX_PP"),
        ("vpp", vpp, MAX_VPP, "MAX_VPP"),
        ("num_microbatches", num_microbatches, MAX_MICROBATCHES, "MAX_MICROBATCHES"),
    ):
        if value > maximum:
            return f"{field}={shown(value)} is above {maximum:,} ({name} in workbench/specs/limits.py)"
    if too_many_simulated_pairs(pp, vpp, num_microbatches):
        return simulated_pairs_sentence(pp, vpp, num_microbatches)
    return None


def too_many_simulated_pairs(pp: Any, vpp: Any, num_microbatches: Any) -> Any:
    """True where ``pp * vpp * num_microbatches`` (stage, micro-batch) pairs exceed
    ``MAX_SIMULATED_STAGE_MICROBATCHES``; ints or equal-shape integer arrays (the plan rule table's columns),
    multiplied in Python ints or int64 so that the product does not wrap."""
    if all(isinstance(v, int) for v in (pp, vpp, num_microbatches)):
        return pp * vpp * num_microbatches > MAX_SIMULATED_STAGE_MICROBATCHES
    import numpy as np

    pairs = np.asarray(pp, dtype=np.int64) * np.asarray(vpp, dtype=np.int64) * np.asarray(num_microbatches)
    return pairs > MAX_SIMULATED_STAGE_MICROBATCHES


def simulated_pairs_sentence(pp: int, vpp: int, num_microbatches: int) -> str:
    """The one sentence for a timeline of too many (stage, micro-batch) pairs (no final full stop)."""
    pairs = int(pp) * int(vpp) * int(num_microbatches)
    return (
        f"pp*vpp*num_microbatches = {pp}*{vpp}*{num_microbatches} = {pairs:,} (stage, micro-batch) pairs is "
        f"more than a simulated timeline holds ({MAX_SIMULATED_STAGE_MICROBATCHES:,}, "
        "MAX_SIMULATED_STAGE_MICROBATCHES in workbench/specs/limits.py: its memory grows with the pairs); "
        "use fewer micro-batches (a larger micro_batch_size or dp) or fewer stages"
    )


def check_simulated_size(where: str, *, pp: int, vpp: int, num_microbatches: int) -> None:
    """ValueError ``"{where}: {problem}"`` when :func:`simulated_size_problem` finds one (after checking that
    each factor is an int >= 1)."""
    for field, value in (("pp", pp), ("vpp", vpp), ("num_microbatches", num_microbatches)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{where}: {field} must be an integer >= 1, got {shown(value)}")
    problem = simulated_size_problem(pp=pp, vpp=vpp, num_microbatches=num_microbatches)
    if problem:
        raise ValueError(f"{where}: {problem}")
