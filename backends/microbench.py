"""``workbench microbench``: measure this device's GEMM, attention and copy efficiencies into a ``KernelTable``.

- GEMM ``(M, K) @ (K, N)``, FLOPs = 2*M*N*K: squares M = N = K in powers of two, plus "tokens x width" shapes
  (M = tokens, (N, K) = (w, w), (4w, w), (w, 4w): a projection and the two FFN matmuls of width w), plus on
  cuda the linear layers of real models (:data:`LAYER_MODELS`: QKV, attention output, FFN up+gate, FFN down)
  sharded over tp and at several token counts (micro-batch x sequence), each as the three GEMMs of a training
  step with the operand layouts ``nn.Linear`` hands cuBLAS: forward ``x @ w.T``, input gradient ``dy @ w``,
  weight gradient ``dy.T @ x``. cuda: bf16, and fp8 e4m3 via ``torch._scaled_mm`` (unit scales, bf16 out,
  always the row-major x column-major layout it requires) on sm89+; cpu: fp32, plus bf16 when a 256^3 bf16
  GEMM runs at least half as fast as fp32 (oneDNN on AVX512-BF16/AMX; else bf16 is emulated). Points of the
  table: shapes binned by ``round(log2(flop))``, each bin keeps its most efficient shape (the max over aspect
  ratios and layouts at about equal FLOPs) at that shape's FLOPs; fractions clipped into (0, 1].
- Attention: ``scaled_dot_product_attention``, causal, (batch, heads, seq, head_dim) inputs, forward and
  backward (``autograd.grad`` on a retained graph) timed apart; ``batch*seq`` and ``heads*head_dim`` fixed so
  memory stays bounded. FLOPs (Dao 2023, section 4.1): forward ``4*s*s*head_dim*heads*batch`` halved for the
  causal mask (query heads counted), backward 2.5x forward. cuda: each SDPA back-end forced in turn with
  ``torch.nn.attention.sdpa_kernel`` and filed under its kernel family (:data:`BACKEND_FAMILY`: torch's flash
  back-end is FlashAttention-2, PyTorch 2.2 release notes; cuDNN fused attention; FlashAttention-3 where this
  torch can switch its flash back-end to it), with grouped-query rows (``kv_heads = heads / gqa_ratio``,
  ``enable_gqa``) in the raw CSV beside the table's MHA rows; cpu: whatever torch dispatches, family
  ``sdpa``. The aten kernel that ran is read with a ``TorchDispatchMode`` and named in each row and table.
- Memory-bound ops (``memory.csv``): copy, add, SiLU, softmax, LayerNorm, RMSNorm and the fused AdamW step,
  each with the bytes its kernels must move (read + write, nominal) and the number of aten ops it dispatched
  (an op that decomposes moves more than the nominal bytes). The table's ``hbm_frac`` is the copy's.

Timing: median of ``repeats`` samples after ``warmup`` calls; a sample runs the call back to back until it
lasts ~1-2 ms and divides. cuda: CUDA events, and the GEMMs' samples replayed from a CUDA graph (a small GEMM
runs faster than Python launches it: 256^3 takes ~20 us per eager call on the lent H100's host, the GPU time
the cost model wants is a fraction of that); cpu: ``time.perf_counter`` under ``torch.set_num_threads``.

Peaks: cuda, the GPU's catalog preset (``guess_device_id`` as ``workbench profile`` picks it, or
``--device-id``): datasheet dense peaks and HBM bandwidth. cpu: the host as ``workbench profile --device cpu``
describes it (``host-cpu``; peak = best square GEMM ``gemm_peak_flop_per_s``, bandwidth = best copy
``copy_bytes_per_s``); a dtype's peak is raised to the sweep's best GEMM rate when the sweep beat it (the
curve tops out at 1 rather than clipping), both figures in the provenance.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from workbench_backends.profile_record import (
    copy_bytes_per_s,
    device_name,
    gemm_peak_flop_per_s,
    guess_device_id,
)

from workbench.presets.kernels import TABLE_FILE, write_kernel_table
from workbench.specs.kernels import AttentionTable, KernelTable

GEMM_CSV = "gemm.csv"
ATTENTION_CSV = "attention.csv"
MEMORY_CSV = "memory.csv"
LAYER_MODELS = (
    ("llama-3.1-8b", 4096, 14336, 32, 8),
    ("llama-3.1-70b", 8192, 28672, 64, 8),
    ("llama-3.1-405b", 16384, 53248, 128, 8),
)
"""(name, hidden, ffn_hidden, heads, kv_heads) of the models whose linear layers the cuda sweep times (Meta's
Llama 3.1 config.json files; head_dim = hidden / heads = 128)."""
BACKEND_FAMILY = {"flash": "fa2", "cudnn": "cudnn", "fa3": "fa3", "default": "sdpa"}
"""SDPA back-end -> kernel family of the table (:data:`workbench.specs.kernels.ATTENTION_FAMILIES`)."""
MIN_FRAC = 1e-6
"""Lower clip of a fraction (the table needs fractions > 0)."""
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True, slots=True)
class Sweep:
    """Sizes of one microbench run."""

    square: tuple[int, ...]
    """M = N = K of the square GEMMs."""
    tokens: int
    """M of the rectangular GEMMs."""
    widths: tuple[int, ...]
    """Model widths w of the rectangular GEMMs ((N, K) = (w, w), (4w, w), (w, 4w))."""
    seq_lens: tuple[int, ...]
    head_dims: tuple[int, ...] = (64, 128)
    attention_tokens: int
    """batch * seq_len of every attention call."""
    attention_width: int
    """heads * head_dim of every attention call."""
    copy_numel: int
    """fp32 elements of the copied tensor (and of every memory-bound op's input)."""
    min_sample_s: float
    """A timing sample repeats the call until it lasts about this long."""
    attention_backends: tuple[str, ...] = ("default",)
    """SDPA back-ends to force (keys of :data:`BACKEND_FAMILY`); ``default``: torch's own choice."""
    gqa_ratio: int = 1
    """Query heads per KV head of the extra grouped-query rows at head_dim 128 (1: none)."""
    layer_models: tuple[tuple[str, int, int, int, int], ...] = ()
    """Models whose linear layers are timed (see :data:`LAYER_MODELS`)."""
    layer_tp: tuple[int, ...] = (1,)
    layer_tokens: tuple[int, ...] = ()
    """Tokens per micro-batch (micro-batch x sequence) of the layer GEMMs."""


def default_sweep(device_type: str, *, quick: bool = False) -> Sweep:
    """The sizes of ``workbench microbench`` on ``cpu`` or ``cuda``; ``quick`` trims them (tests, a first look)."""
    if device_type == "cuda":
        return Sweep(
            square=tuple(2**i for i in range(8, 14 if quick else 15)),
            tokens=4096,
            widths=(2048, 4096) if quick else (1024, 2048, 4096, 8192),
            seq_lens=tuple(2**i for i in range(9, 13 if quick else 17)),
            attention_tokens=16384,
            attention_width=2048,
            copy_numel=1 << 28,
            min_sample_s=1e-3,
            attention_backends=("flash", "cudnn") if quick else ("flash", "cudnn", "fa3"),
            gqa_ratio=1 if quick else 8,
            layer_models=LAYER_MODELS[:1] if quick else LAYER_MODELS,
            layer_tp=(1, 8) if quick else (1, 2, 4, 8),
            layer_tokens=(4096,) if quick else (2048, 8192, 32768),
        )
    return Sweep(
        square=tuple(2**i for i in range(5, 10 if quick else 11)),
        tokens=256 if quick else 512,
        widths=(128,) if quick else (128, 256),
        seq_lens=(128, 256) if quick else (128, 256, 512, 1024),
        attention_tokens=512 if quick else 1024,
        attention_width=256,
        copy_numel=1 << 24,
        min_sample_s=2e-3,
    )


@dataclass(frozen=True, kw_only=True)
class MicrobenchResult:
    """A finished run: the table and the raw measurements behind it."""

    table: KernelTable
    gemm: pl.DataFrame
    """One row per GEMM: dtype, m, n, k, layout, what, flop, time_s, achieved_flop_per_s, cuda_graph (timed
    from a graph replay), peak_flop_per_s, peak_frac."""
    attention: pl.DataFrame
    """One row per (back-end, head_dim, seq_len, kv_heads): shape, fwd/bwd flop, time_s and achieved_flop_per_s,
    kernel, family."""
    memory: pl.DataFrame
    """One row per memory-bound op: op, dtype, numel, bytes, aten_ops, time_s, bytes_per_s, hbm_frac."""
    hbm_bytes_per_s: float
    """Achieved copy bandwidth (read + write)."""


def require_device(device: str) -> torch.device:
    """``torch.device(device)``; ValueError when ``device`` is not cpu/cuda or cuda is not visible to torch."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to torch here; use --device cpu")
    return torch.device(device)


def time_per_call_s(
    fn: Callable[[], Any],
    dev: torch.device,
    *,
    warmup: int,
    repeats: int,
    min_sample_s: float,
    graph: bool = False,
) -> float:
    """Median seconds of one ``fn()`` on ``dev`` (see the module docstring). ``graph`` (cuda only): the calls
    of a sample are captured in a CUDA graph and replayed, so a kernel shorter than Python's launch of it is
    timed on the GPU rather than at the launch rate. ValueError if repeats < 1."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    if graph and dev.type == "cuda":
        one_s = _sample_s(_graphed(fn, dev, 1), dev, 1)
        inner = max(1, min(1000, math.ceil(min_sample_s / max(one_s, 1e-7))))
        replay = _graphed(fn, dev, inner)
        return statistics.median(_sample_s(replay, dev, 1) / inner for _ in range(repeats))
    one_s = _sample_s(fn, dev, 1)
    inner = max(1, min(1000, math.ceil(min_sample_s / max(one_s, 1e-7))))
    return statistics.median(_sample_s(fn, dev, inner) / inner for _ in range(repeats))


def _graphed(fn: Callable[[], Any], dev: torch.device, calls: int) -> Callable[[], Any]:
    """A CUDA graph of ``calls`` back-to-back ``fn()`` (warmed up on a side stream first, as torch's CUDA
    graph notes ask); returns its ``replay``."""
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph.replay


def _sample_s(fn: Callable[[], Any], dev: torch.device, inner: int) -> float:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return time.perf_counter() - t0


@dataclass(frozen=True, slots=True)
class Gemm:
    """One GEMM of the sweep: output (m, n), reduction k, the operand layout and what it stands for."""

    m: int
    n: int
    k: int
    layout: str = "nn"
    """``nn``: A (m, k) @ B (k, n), both row-major; ``nt``: B stored as (n, k) and transposed (a linear
    layer's forward); ``tn``: A stored as (k, m) and transposed (its weight gradient)."""
    what: str = "square"
    """``square``, ``rect`` or ``<model> tp<t> <linear> <pass>``."""


def training_gemms(tokens: int, fan_in: int, fan_out: int, tag: str) -> list[Gemm]:
    """The three GEMMs of a training step of one linear layer ``fan_in -> fan_out`` on ``tokens`` rows, with the
    operand layouts ``nn.Linear`` hands cuBLAS: forward (tokens, out, in) ``nt``, input gradient (tokens, in,
    out) ``nn``, weight gradient (out, in, tokens) ``tn``; ``what`` is ``tag`` plus the pass."""
    return [
        Gemm(tokens, fan_out, fan_in, "nt", f"{tag} fwd"),
        Gemm(tokens, fan_in, fan_out, "nn", f"{tag} dgrad"),
        Gemm(fan_out, fan_in, tokens, "tn", f"{tag} wgrad"),
    ]


def layer_gemms(sweep: Sweep) -> list[Gemm]:
    """The :func:`training_gemms` of every linear layer of :attr:`Sweep.layer_models` at every tp and token
    count. Linears: QKV (out = (heads + 2 kv_heads) head_dim / tp), attention output
    (in = hidden / tp), FFN up+gate (out = 2 ffn / tp, SwiGLU), FFN down (in = ffn / tp)."""
    out = []
    for name, hidden, ffn, heads, kv_heads in sweep.layer_models:
        head_dim = hidden // heads
        for tp in sweep.layer_tp:
            linears = (
                ("qkv", hidden, (heads + 2 * kv_heads) * head_dim // tp),
                ("proj", hidden // tp, hidden),
                ("fc1", hidden, 2 * ffn // tp),
                ("fc2", ffn // tp, hidden),
            )
            for tokens in sweep.layer_tokens:
                for linear, fan_in, fan_out in linears:
                    out += training_gemms(tokens, fan_in, fan_out, f"{name} tp{tp} {linear}")
    return out


def gemm_shapes(sweep: Sweep) -> list[Gemm]:
    """The GEMMs of the sweep: the squares, tokens x (w, w), (4w, w), (w, 4w) per width, then
    :func:`layer_gemms`."""
    rect = [
        Gemm(sweep.tokens, n, k, "nn", "rect")
        for w in sweep.widths
        for n, k in ((w, w), (4 * w, w), (w, 4 * w))
    ]
    return [Gemm(s, s, s) for s in sweep.square] + rect + layer_gemms(sweep)


def gemm_fn(dtype: str, g: Gemm, dev: torch.device) -> Callable[[], torch.Tensor]:
    """A call of the GEMM ``g`` on ``dev`` with fixed random operands (seed 0): A (m, k) times B (k, n) in
    ``g.layout`` (``nt``/``tn`` store B or A transposed), output (m, n). ``dtype`` fp32 or bf16 (both operands
    and the output), or fp8: e4m3 operands through ``torch._scaled_mm`` with unit scales and a bf16 output,
    always A row-major and B column-major (the only layout it takes). KeyError for another dtype."""
    gen = torch.Generator(device=dev).manual_seed(0)
    m, n, k = g.m, g.n, g.k
    if dtype == "fp8":  # _scaled_mm takes A row-major and B column-major only: every pass in that layout
        a = torch.randn(m, k, device=dev, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev, generator=gen).to(torch.float8_e4m3fn).t()  # column-major (K, N)
        one = torch.ones((), device=dev, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dt_ = TORCH_DTYPES[dtype]
    a = torch.randn(*((k, m) if g.layout == "tn" else (m, k)), device=dev, generator=gen, dtype=dt_)
    b = torch.randn(*((n, k) if g.layout == "nt" else (k, n)), device=dev, generator=gen, dtype=dt_)
    if g.layout == "nt":
        return lambda: a @ b.t()
    if g.layout == "tn":
        return lambda: a.t() @ b
    return lambda: a @ b


def measure_gemms(
    dtype: str,
    shapes: list[Gemm],
    dev: torch.device,
    *,
    warmup: int,
    repeats: int,
    sweep: Sweep,
) -> pl.DataFrame:
    """Time every GEMM at ``dtype`` (fp32, bf16 or fp8); rows without the peak columns."""
    rows = []
    timing = {"warmup": warmup, "repeats": repeats, "min_sample_s": sweep.min_sample_s}
    for g in shapes:
        fn = gemm_fn(dtype, g, dev)
        try:
            time_s, graphed = time_per_call_s(fn, dev, graph=True, **timing), dev.type == "cuda"
        except RuntimeError:  # a kernel CUDA graphs cannot capture: timed eagerly, and the row says so
            time_s, graphed = time_per_call_s(fn, dev, **timing), False
        flop = 2.0 * g.m * g.n * g.k
        layout = "nt" if dtype == "fp8" else g.layout
        rows.append(
            dict(dtype=dtype, m=g.m, n=g.n, k=g.k, layout=layout, what=g.what, flop=flop, time_s=time_s)
            | dict(achieved_flop_per_s=flop / time_s, cuda_graph=graphed)
        )
        del fn
    return pl.DataFrame(rows)


def clip_frac(value: float) -> float:
    """``value`` clipped into (0, 1] (lower bound ``MIN_FRAC``)."""
    return min(1.0, max(MIN_FRAC, value))


def gemm_points(rows: pl.DataFrame) -> tuple[tuple[float, float], ...]:
    """(flop, fraction) points of one dtype's rows (columns flop, peak_frac), sorted by flop: one per bin of
    ``round(log2(flop))``, the bin's most efficient shape (module docstring). ValueError on no rows."""
    if rows.is_empty():
        raise ValueError("gemm_points: no GEMM rows")
    best = (
        rows.with_columns(pl.col("flop").log(2).round().alias("bin"))
        .sort("peak_frac", descending=True)
        .group_by("bin", maintain_order=True)
        .first()
        .sort("flop")
    )
    return tuple((float(x), clip_frac(f)) for x, f in zip(best["flop"], best["peak_frac"], strict=True))


class _OpRecorder(TorchDispatchMode):
    """Records the names of the aten ops dispatched inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(func.name())
        return func(*args, **(kwargs or {}))


def _sdpa_kernel(call: Callable[[], Any]) -> str:
    """The aten attention op ``call`` dispatched to, e.g. ``_scaled_dot_product_cudnn_attention`` (read with a
    dispatch mode: the profiler would print its own lines on stderr)."""
    with _OpRecorder() as rec:
        call()
    names = [n.removeprefix("aten::") for n in rec.names if "attention" in n]
    return names[0] if names else "unknown"


@contextlib.contextmanager
def sdpa_backend(backend: str) -> Iterator[None]:
    """Force one SDPA back-end (:data:`BACKEND_FAMILY` keys) for the block. ``fa3`` switches torch's flash
    back-end to FlashAttention-3 (``torch.nn.attention.activate_flash_attention_impl``) and back; RuntimeError
    when this torch build cannot."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if backend == "default":
        yield
        return
    if backend == "fa3":
        import torch.nn.attention as attn

        activate = getattr(attn, "activate_flash_attention_impl", None)
        restore = getattr(attn, "restore_flash_attention_impl", None)
        if activate is None or restore is None:
            raise RuntimeError(f"torch {torch.__version__} has no activate_flash_attention_impl")
        activate("FA3")
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                yield
        finally:
            restore()
        return
    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    with sdpa_kernel([chosen]):
        yield


def attention_flop(*, seq_len: int, head_dim: int, heads: int, batch: int, causal: bool = True) -> float:
    """Forward FLOPs of attention: 4*s*s*head_dim*heads*batch, halved when causal (Dao 2023, section 4.1)."""
    flop = 4.0 * seq_len * seq_len * head_dim * heads * batch
    return flop / 2 if causal else flop


def attention_cases(sweep: Sweep) -> list[tuple[str, int, int, int]]:
    """(back-end, head_dim, seq_len, gqa_ratio) of the sweep: every back-end x head dim x sequence length with
    MHA, then at head_dim 128 the grouped-query rows when ``gqa_ratio > 1``."""
    cases = []
    for backend in sweep.attention_backends:
        for head_dim in sweep.head_dims:
            cases += [(backend, head_dim, s, 1) for s in sweep.seq_lens]
        if sweep.gqa_ratio > 1 and 128 in sweep.head_dims:
            cases += [(backend, 128, s, sweep.gqa_ratio) for s in sweep.seq_lens]
    return cases


def measure_attention(
    dtype: str,
    dev: torch.device,
    *,
    warmup: int,
    repeats: int,
    sweep: Sweep,
    log: Log | None = None,
    skipped: dict[str, str] | None = None,
) -> pl.DataFrame:
    """Time causal SDPA forward and backward for every case of :func:`attention_cases`; one row each. A
    back-end that cannot run a case (no kernel for it in this build) is left out and noted in ``skipped``."""
    rows = []
    for backend, head_dim, seq_len, gqa in attention_cases(sweep):
        if log:
            log(f"attention {backend} {dtype} d{head_dim} s{seq_len}" + (f" gqa{gqa}" if gqa > 1 else ""))
        try:
            with sdpa_backend(backend):
                rows.append(
                    _attention_row(
                        dtype, head_dim, seq_len, gqa, dev, warmup=warmup, repeats=repeats, sweep=sweep
                    )
                    | {"backend": backend, "family": BACKEND_FAMILY[backend]}
                )
        except (RuntimeError, ImportError, ValueError, NotImplementedError) as exc:
            if backend == "default":
                raise
            key = f"skipped_attention_{backend}"
            if skipped is not None and key not in skipped:  # the first failure says why
                skipped[key] = f"d{head_dim} s{seq_len} gqa{gqa}: {' '.join(str(exc).split())[:200]}"
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return pl.DataFrame(rows)


def _attention_row(
    dtype: str,
    head_dim: int,
    seq_len: int,
    gqa: int,
    dev: torch.device,
    *,
    warmup: int,
    repeats: int,
    sweep: Sweep,
) -> dict[str, Any]:
    batch = max(1, sweep.attention_tokens // seq_len)
    heads = max(1, sweep.attention_width // head_dim)
    kv_heads = max(1, heads // gqa)
    gen = torch.Generator(device=dev).manual_seed(0)

    def tensor(h: int) -> torch.Tensor:
        shape = (batch, h, seq_len, head_dim)
        return torch.randn(shape, device=dev, dtype=TORCH_DTYPES[dtype], generator=gen).requires_grad_(True)

    q, k, v = tensor(heads), tensor(kv_heads), tensor(kv_heads)
    gqa_kw = {"enable_gqa": True} if kv_heads != heads else {}

    def forward() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa_kw)

    out = forward()
    seed = torch.ones_like(out)
    timing = {"warmup": warmup, "repeats": repeats, "min_sample_s": sweep.min_sample_s}
    fwd_s = time_per_call_s(forward, dev, **timing)
    bwd_s = time_per_call_s(
        lambda: torch.autograd.grad(out, (q, k, v), seed, retain_graph=True), dev, **timing
    )
    fwd_flop = attention_flop(seq_len=seq_len, head_dim=head_dim, heads=heads, batch=batch)
    shape_cols = dict(
        dtype=dtype,
        head_dim=head_dim,
        seq_len=seq_len,
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        causal=True,
    )
    return shape_cols | dict(
        fwd_flop=fwd_flop,
        fwd_time_s=fwd_s,
        fwd_flop_per_s=fwd_flop / fwd_s,
        bwd_flop=2.5 * fwd_flop,
        bwd_time_s=bwd_s,
        bwd_flop_per_s=2.5 * fwd_flop / bwd_s,
        kernel=_sdpa_kernel(forward),
    )


NORM_WIDTH = 4096
"""Row width of the softmax and norm rows (a model width)."""


def memory_ops(dev: torch.device, numel: int) -> list[tuple[str, str, float, Callable[[], Any]]]:
    """(op, dtype, nominal bytes, call) of the memory-bound ops on ``numel`` elements: the bytes the op must
    read and write once each (weights of a norm, one row wide, left out)."""
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(dtype: torch.dtype, n: int = numel) -> torch.Tensor:
        return torch.randn(n, device=dev, generator=gen, dtype=dtype)

    bf = torch.bfloat16
    src, dst = rand(torch.float32), rand(torch.float32)
    a, b, c = rand(bf), rand(bf), rand(bf)
    rows = a.view(-1, NORM_WIDTH)
    weight, bias = rand(bf, NORM_WIDTH), rand(bf, NORM_WIDTH)
    params = torch.nn.Parameter(rand(torch.float32, numel // 4))
    params.grad = rand(torch.float32, numel // 4)
    adamw = (
        torch.optim.AdamW([params], lr=1e-4, fused=True)
        if dev.type == "cuda"
        else torch.optim.AdamW([params])
    )
    adamw.step()  # creates the two moment buffers
    two = 2 * numel
    return [
        ("copy", "fp32", 8.0 * numel, lambda: dst.copy_(src)),
        ("add", "bf16", 3.0 * two, lambda: torch.add(a, b, out=c)),
        ("silu", "bf16", 2.0 * two, lambda: F.silu(a)),
        ("softmax", "bf16", 2.0 * two, lambda: rows.softmax(-1)),
        ("layer_norm", "bf16", 2.0 * two, lambda: F.layer_norm(rows, (NORM_WIDTH,), weight, bias)),
        ("rms_norm", "bf16", 2.0 * two, lambda: F.rms_norm(rows, (NORM_WIDTH,), weight)),
        # AdamW reads param, grad and both moments and writes param and moments: 7 fp32 values per parameter
        ("adamw_step", "fp32", 7.0 * 4 * (numel // 4), adamw.step),
    ]


def measure_memory_ops(dev: torch.device, numel: int, *, warmup: int, repeats: int) -> pl.DataFrame:
    """Median time and achieved bandwidth (nominal bytes / time) of every op of :func:`memory_ops`, with the
    number of aten ops it dispatched."""
    rows = []
    for op, dtype, nbytes, call in memory_ops(dev, numel):
        with _OpRecorder() as rec:
            call()
        time_s = time_per_call_s(call, dev, warmup=warmup, repeats=repeats, min_sample_s=0.0)
        rows.append(
            dict(op=op, dtype=dtype, numel=numel, bytes=nbytes, aten_ops=len(rec.names), time_s=time_s)
            | dict(bytes_per_s=nbytes / time_s)
        )
    return pl.DataFrame(rows)


def attention_tables(
    rows: pl.DataFrame, peak_flop_per_s: float, *, source: str
) -> tuple[AttentionTable, ...]:
    """One table per (family, dtype, head_dim) of the MHA rows (``kv_heads == heads``): fractions of
    ``peak_flop_per_s``, clipped."""
    tables = []
    mha = rows.filter(pl.col("kv_heads") == pl.col("heads")).sort("seq_len")
    for (family, dtype, head_dim), part in mha.group_by(["family", "dtype", "head_dim"], maintain_order=True):
        kernels = ", ".join(sorted(set(part["kernel"])))
        tables.append(
            AttentionTable(
                family=str(family),
                dtype=str(dtype),
                head_dim=int(head_dim),
                causal=True,
                seq_len=tuple(float(s) for s in part["seq_len"]),
                fwd_frac=tuple(clip_frac(f / peak_flop_per_s) for f in part["fwd_flop_per_s"]),
                bwd_frac=tuple(clip_frac(f / peak_flop_per_s) for f in part["bwd_flop_per_s"]),
                source=f"{source}; torch dispatched to {kernels}",
            )
        )
    return tuple(tables)


@dataclass(frozen=True, kw_only=True)
class Reference:
    """What the fractions are taken against: the device preset id, dense peaks and memory bandwidth."""

    device_id: str
    name: str
    peak_flop_per_s: dict[str, float]
    """Dense peak per dtype (fp32, bf16, fp8), FLOP/s: datasheet on cuda, measured on the cpu."""
    memory_bytes_per_s: float
    source: str


def gpu_reference(dev: torch.device, device_id: str | None, dtypes: list[str]) -> Reference:
    """The catalog preset of this GPU (``guess_device_id`` unless ``device_id``): datasheet dense peaks of
    ``dtypes`` it has and its HBM bandwidth. ValueError when the id is no preset (naming the known ones)."""
    from workbench.presets.catalog import load_device

    preset_id = device_id or guess_device_id(dev)
    try:
        spec = load_device(preset_id)
    except ValueError as exc:
        raise ValueError(
            f"GPU {torch.cuda.get_device_name(dev)!r}: {exc}; pass --device-id with its preset"
        ) from None
    peaks = {d: spec.peak(d) for d in dtypes if d in {k.value for k in spec.peak_flop_per_s}}
    return Reference(
        device_id=spec.id,
        name=spec.name,
        peak_flop_per_s=peaks,
        memory_bytes_per_s=spec.hbm_bytes_per_s,
        source=f"device preset {spec.id} (dense datasheet peaks, HBM bandwidth)",
    )


def host_reference(dev: torch.device, dtypes: list[str]) -> Reference:
    """This host as ``workbench profile --device cpu`` describes it: id ``host-cpu``, peak per dtype = the
    best square GEMM (``gemm_peak_flop_per_s``), bandwidth = the best copy (``copy_bytes_per_s``)."""
    return Reference(
        device_id=guess_device_id(dev),
        name=device_name(dev),
        peak_flop_per_s={d: gemm_peak_flop_per_s(TORCH_DTYPES[d], dev) for d in dtypes},
        memory_bytes_per_s=copy_bytes_per_s(dev),
        source="host-cpu as workbench profile measures it (best square GEMM, best copy)",
    )


def gemm_dtypes(dev: torch.device, *, log: Log | None = None) -> list[str]:
    """Precisions to sweep: cuda bf16 (+ fp8 on sm89+); cpu fp32 (+ bf16 when >= half the fp32 rate at 256^3)."""
    if dev.type == "cuda":
        has_fp8 = hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability(dev) >= (8, 9)
        return ["bf16", "fp8"] if has_fp8 else ["bf16"]
    rate = {
        d: 2
        * 256**3
        / time_per_call_s(gemm_fn(d, Gemm(256, 256, 256), dev), dev, warmup=2, repeats=3, min_sample_s=2e-3)
        for d in ("fp32", "bf16")
    }
    if log:
        log(f"cpu 256^3 GEMM: fp32 {rate['fp32'] / 1e9:.0f}, bf16 {rate['bf16'] / 1e9:.0f} GFLOP/s")
    return ["fp32", "bf16"] if rate["bf16"] >= 0.5 * rate["fp32"] else ["fp32"]


def _nvidia_smi(dev: torch.device) -> dict[str, str]:
    """Clocks, power limit and driver of the GPU from nvidia-smi; {} when it is missing or fails."""
    query = "clocks.sm,clocks.max.sm,power.limit,driver_version"
    cmd = [
        "nvidia-smi",
        f"--query-gpu={query}",
        "--format=csv",
        "-i",
        str(torch.cuda.current_device() if dev.index is None else dev.index),
    ]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    if len(lines) < 2:
        return {}
    keys = [k.strip() for k in lines[0].split(",")]
    return dict(zip(keys, (v.strip() for v in lines[1].split(",")), strict=False))


def provenance(dev: torch.device, ref: Reference, *, command: str, extra: dict[str, str]) -> dict[str, str]:
    """The table's provenance (all strings): torch, CUDA, driver, GPU, clocks, host CPU, threads, date, command."""
    out = {
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "device_kind": dev.type,
        "device_name": ref.name,
        "host_cpu": device_name(torch.device("cpu")),
        "num_threads": str(torch.get_num_threads()),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "reference": ref.source,
        "memory_reference_bytes_per_s": f"{ref.memory_bytes_per_s:.6g}",
    }
    if dev.type == "cuda":
        smi = _nvidia_smi(dev)
        out["gpu"] = torch.cuda.get_device_name(dev)
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(dev)))
        out["driver"] = smi.pop("driver_version", "unknown (nvidia-smi unavailable)")
        out |= {f"nvidia_smi {k}": v for k, v in smi.items()}
    return out | extra


def run_microbench(
    device: str,
    *,
    device_id: str | None = None,
    quick: bool = False,
    warmup: int = 2,
    repeats: int = 5,
    threads: int | None = None,
    command: str = "",
    log: Log | None = None,
) -> MicrobenchResult:
    """Measure GEMM, attention and copy on ``device`` (cpu or cuda); return the table and the raw rows.

    ``threads`` sets ``torch.set_num_threads`` for the run (restored after). Raises ValueError when cuda is
    asked for and absent, when the GPU has no device preset and no ``device_id`` is given, or when
    ``repeats < 1``/``warmup < 0``.
    """
    dev = require_device(device)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _run(dev, device_id, default_sweep(dev.type, quick=quick), warmup, repeats, command, log)
    finally:
        torch.set_num_threads(before)


def _run(
    dev: torch.device,
    device_id: str | None,
    sweep: Sweep,
    warmup: int,
    repeats: int,
    command: str,
    log: Log | None,
) -> MicrobenchResult:
    dtypes = gemm_dtypes(dev, log=log)
    attn_dtype = "bf16" if dev.type == "cuda" else "fp32"
    ref = gpu_reference(dev, device_id, dtypes) if dev.type == "cuda" else host_reference(dev, dtypes)
    if attn_dtype not in ref.peak_flop_per_s:
        raise ValueError(f"device preset {ref.device_id} has no {attn_dtype} peak to rate attention against")
    timing = {"warmup": warmup, "repeats": repeats, "sweep": sweep}
    extra: dict[str, str] = {"warmup": str(warmup), "repeats": str(repeats)}
    for d in set(dtypes) - set(ref.peak_flop_per_s):
        extra[f"skipped_{d}"] = f"device preset {ref.device_id} has no {d} peak"
    gemm = _gemm_sweep(dev, [d for d in dtypes if d in ref.peak_flop_per_s], ref, timing, extra, log)
    peaks = dict(gemm.group_by("dtype").agg(pl.col("peak_flop_per_s").first()).iter_rows())
    attention = measure_attention(attn_dtype, dev, log=log, skipped=extra, **timing)
    if dev.type == "cuda":
        extra["sdpa_default_kernel"] = _default_sdpa_kernel(dev)
        extra["cudnn"] = str(torch.backends.cudnn.version())
    if log:
        log("memory-bound ops")
    memory = measure_memory_ops(dev, sweep.copy_numel, warmup=warmup, repeats=repeats).with_columns(
        (pl.col("bytes_per_s") / ref.memory_bytes_per_s).alias("hbm_frac")
    )
    hbm_bytes_per_s = float(memory.filter(pl.col("op") == "copy")["bytes_per_s"][0])
    what = f"workbench microbench on {ref.name} ({ref.device_id}), torch {torch.__version__}"
    table = KernelTable(
        device=ref.device_id,
        gemm={
            d: gemm_points(gemm.filter(pl.col("dtype") == d))
            for d in gemm["dtype"].unique(maintain_order=True)
        },
        hbm_frac=clip_frac(hbm_bytes_per_s / ref.memory_bytes_per_s),
        attention=attention_tables(
            attention, peaks.get(attn_dtype, ref.peak_flop_per_s[attn_dtype]), source=what
        ),
        measured=True,
        source=what,
        provenance=provenance(dev, ref, command=command, extra=extra | _peak_notes(peaks)),
    )
    return MicrobenchResult(
        table=table, gemm=gemm, attention=attention, memory=memory, hbm_bytes_per_s=hbm_bytes_per_s
    )


def _default_sdpa_kernel(dev: torch.device) -> str:
    """The aten op SDPA picks by itself for a causal bf16 (1, 16, 4096, 128) call on ``dev``."""
    q = torch.randn(1, 16, 4096, 128, device=dev, dtype=torch.bfloat16)
    return _sdpa_kernel(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))


def _peak_notes(peaks: dict[str, float]) -> dict[str, str]:
    return {f"peak_{d}_flop_per_s": f"{p:.6g}" for d, p in peaks.items()}


def _gemm_sweep(
    dev: torch.device,
    dtypes: list[str],
    ref: Reference,
    timing: dict[str, Any],
    extra: dict[str, str],
    log: Log | None,
) -> pl.DataFrame:
    """All GEMM rows with ``peak_flop_per_s`` and ``peak_frac``; on the cpu the peak of a dtype is raised to
    the sweep's best rate when that beat the profile's (noted in ``extra``)."""
    parts = []
    for dtype in dtypes:
        shapes = gemm_shapes(timing["sweep"])
        if log:
            log(f"gemm {dtype}: {len(shapes)} shapes")
        try:
            rows = measure_gemms(dtype, shapes, dev, **timing)
        except RuntimeError as exc:  # fp8 kernels missing from this torch/CUDA build: record and go on
            if dtype != "fp8":
                raise
            extra["skipped_fp8"] = " ".join(str(exc).split())[:300]
            continue
        peak = ref.peak_flop_per_s[dtype]
        best = float(rows["achieved_flop_per_s"].max())
        if dev.type == "cpu" and best > peak:
            extra[f"profile_peak_{dtype}_flop_per_s"] = f"{peak:.6g}"
            peak = best
        parts.append(rows.with_columns(pl.lit(peak).alias("peak_flop_per_s")))
    return pl.concat(parts).with_columns(
        (pl.col("achieved_flop_per_s") / pl.col("peak_flop_per_s")).alias("peak_frac")
    )


def write_microbench(out: str | Path, result: MicrobenchResult) -> list[Path]:
    """Write ``kernels.toml``, ``gemm.csv``, ``attention.csv`` and ``memory.csv`` into ``out`` (created); the
    caller decides about overwriting. Returns the paths written."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    table = write_kernel_table(folder / TABLE_FILE, result.table)
    result.gemm.write_csv(folder / GEMM_CSV)
    result.attention.write_csv(folder / ATTENTION_CSV)
    result.memory.write_csv(folder / MEMORY_CSV)
    return [table, folder / GEMM_CSV, folder / ATTENTION_CSV, folder / MEMORY_CSV]
