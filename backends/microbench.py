"""``workbench microbench``: measure this device's GEMM, attention and copy efficiencies into a ``KernelTable``.

- GEMM ``(M, K) @ (K, N)``, FLOPs = 2*M*N*K: squares M = N = K in powers of two, plus "tokens x width" shapes
  (M = tokens, (N, K) = (w, w), (4w, w), (w, 4w): a projection and the two FFN matmuls of width w). cuda: bf16,
  and fp8 e4m3 via ``torch._scaled_mm`` (unit scales, bf16 out) on sm89+; cpu: fp32, plus bf16 when a 256^3
  bf16 GEMM runs at least half as fast as fp32 (oneDNN on AVX512-BF16/AMX; else bf16 is emulated).
  Points of the table: shapes binned by ``round(log2(flop))``, each bin keeps its most efficient shape (the
  max over aspect ratios at about equal FLOPs) at that shape's FLOPs; fractions clipped into (0, 1].
- Attention: ``scaled_dot_product_attention``, causal, (batch, heads, seq, head_dim) inputs, forward and
  backward (``autograd.grad`` on a retained graph) timed apart; ``batch*seq`` and ``heads*head_dim`` fixed so
  memory stays bounded. FLOPs (Dao 2023, section 4.1): forward ``4*s*s*head_dim*heads*batch`` halved for the
  causal mask, backward 2.5x forward. The aten kernel torch picked (flash, efficient, cudnn, math) is read
  with a ``TorchDispatchMode`` and named in each table's ``source``.
- Copy: ``dst.copy_(src)`` of random fp32 data (64 MiB on cpu, 1 GiB on cuda), read + write bytes.

Timing: median of ``repeats`` samples after ``warmup`` calls; a sample runs the call back to back until it
lasts ~1-2 ms and divides. cuda: CUDA events; cpu: ``time.perf_counter`` under ``torch.set_num_threads``.

Peaks: cuda, the GPU's catalog preset (``guess_device_id`` as ``workbench profile`` picks it, or
``--device-id``): datasheet dense peaks and HBM bandwidth. cpu: the host as ``workbench profile --device cpu``
describes it (``host-cpu``; peak = best square GEMM ``gemm_peak_flop_per_s``, bandwidth = best copy
``copy_bytes_per_s``); a dtype's peak is raised to the sweep's best GEMM rate when the sweep beat it (the
curve tops out at 1 rather than clipping), both figures in the provenance.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import subprocess
import time
from collections.abc import Callable
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
    """fp32 elements of the copied tensor."""
    min_sample_s: float
    """A timing sample repeats the call until it lasts about this long."""


def default_sweep(device_type: str, *, quick: bool = False) -> Sweep:
    """The sizes of ``workbench microbench`` on ``cpu`` or ``cuda``; ``quick`` trims them (tests, a first look)."""
    if device_type == "cuda":
        return Sweep(
            square=tuple(2**i for i in range(8, 14 if quick else 15)),
            tokens=4096,
            widths=(2048, 4096) if quick else (1024, 2048, 4096, 8192),
            seq_lens=tuple(2**i for i in range(9, 13 if quick else 15)),
            attention_tokens=16384,
            attention_width=2048,
            copy_numel=1 << 28,
            min_sample_s=1e-3,
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
    """One row per GEMM shape: dtype, m, n, k, flop, time_s, achieved_flop_per_s, peak_flop_per_s, peak_frac."""
    attention: pl.DataFrame
    """One row per (dtype, head_dim, seq_len): shape, fwd/bwd flop, time_s and achieved_flop_per_s, kernel."""
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
    fn: Callable[[], Any], dev: torch.device, *, warmup: int, repeats: int, min_sample_s: float
) -> float:
    """Median seconds of one ``fn()`` on ``dev`` (see the module docstring). ValueError if repeats < 1."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    one_s = _sample_s(fn, dev, 1)
    inner = max(1, min(1000, math.ceil(min_sample_s / max(one_s, 1e-7))))
    return statistics.median(_sample_s(fn, dev, inner) / inner for _ in range(repeats))


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


def gemm_shapes(sweep: Sweep) -> list[tuple[int, int, int]]:
    """(M, N, K) of the sweep: the squares, then tokens x (w, w), (4w, w), (w, 4w) per width."""
    rect = [(sweep.tokens, n, k) for w in sweep.widths for n, k in ((w, w), (4 * w, w), (w, 4 * w))]
    return [(s, s, s) for s in sweep.square] + rect


def _gemm_fn(dtype: str, m: int, n: int, k: int, dev: torch.device) -> Callable[[], torch.Tensor]:
    gen = torch.Generator(device=dev).manual_seed(0)
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev, generator=gen).to(torch.float8_e4m3fn).t()  # column-major (K, N)
        one = torch.ones((), device=dev, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, device=dev, generator=gen, dtype=TORCH_DTYPES[dtype])
    b = torch.randn(k, n, device=dev, generator=gen, dtype=TORCH_DTYPES[dtype])
    return lambda: a @ b


def measure_gemms(
    dtype: str,
    shapes: list[tuple[int, int, int]],
    dev: torch.device,
    *,
    warmup: int,
    repeats: int,
    sweep: Sweep,
) -> pl.DataFrame:
    """Time every (M, N, K) GEMM at ``dtype`` (fp32, bf16 or fp8); rows without the peak columns."""
    rows = []
    for m, n, k in shapes:
        fn = _gemm_fn(dtype, m, n, k, dev)
        time_s = time_per_call_s(fn, dev, warmup=warmup, repeats=repeats, min_sample_s=sweep.min_sample_s)
        flop = 2.0 * m * n * k
        rows.append(
            dict(dtype=dtype, m=m, n=n, k=k, flop=flop, time_s=time_s, achieved_flop_per_s=flop / time_s)
        )
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


def _sdpa_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> str:
    """The aten op ``scaled_dot_product_attention`` dispatched to, e.g. ``_scaled_dot_product_flash_attention``
    (read with a dispatch mode: the profiler would print its own lines on stderr)."""
    with _OpRecorder() as rec:
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    names = [n.removeprefix("aten::") for n in rec.names if "attention" in n]
    return names[0] if names else "unknown"


def attention_flop(*, seq_len: int, head_dim: int, heads: int, batch: int, causal: bool = True) -> float:
    """Forward FLOPs of attention: 4*s*s*head_dim*heads*batch, halved when causal (Dao 2023, section 4.1)."""
    flop = 4.0 * seq_len * seq_len * head_dim * heads * batch
    return flop / 2 if causal else flop


def measure_attention(
    dtype: str, dev: torch.device, *, warmup: int, repeats: int, sweep: Sweep, log: Log | None = None
) -> pl.DataFrame:
    """Time causal SDPA forward and backward at every (head_dim, seq_len) of the sweep; one row each."""
    rows = []
    for head_dim in sweep.head_dims:
        for seq_len in sweep.seq_lens:
            if log:
                log(f"attention {dtype} d{head_dim} s{seq_len}")
            rows.append(
                _attention_row(dtype, head_dim, seq_len, dev, warmup=warmup, repeats=repeats, sweep=sweep)
            )
    return pl.DataFrame(rows)


def _attention_row(
    dtype: str, head_dim: int, seq_len: int, dev: torch.device, *, warmup: int, repeats: int, sweep: Sweep
) -> dict[str, Any]:
    batch = max(1, sweep.attention_tokens // seq_len)
    heads = max(1, sweep.attention_width // head_dim)
    gen = torch.Generator(device=dev).manual_seed(0)
    shape = (batch, heads, seq_len, head_dim)
    q, k, v = (
        torch.randn(shape, device=dev, dtype=TORCH_DTYPES[dtype], generator=gen).requires_grad_(True)
        for _ in range(3)
    )
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    seed = torch.ones_like(out)
    timing = {"warmup": warmup, "repeats": repeats, "min_sample_s": sweep.min_sample_s}
    fwd_s = time_per_call_s(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), dev, **timing)
    bwd_s = time_per_call_s(
        lambda: torch.autograd.grad(out, (q, k, v), seed, retain_graph=True), dev, **timing
    )
    fwd_flop = attention_flop(seq_len=seq_len, head_dim=head_dim, heads=heads, batch=batch)
    shape_cols = dict(dtype=dtype, head_dim=head_dim, seq_len=seq_len, batch=batch, heads=heads, causal=True)
    return shape_cols | dict(
        fwd_flop=fwd_flop,
        fwd_time_s=fwd_s,
        fwd_flop_per_s=fwd_flop / fwd_s,
        bwd_flop=2.5 * fwd_flop,
        bwd_time_s=bwd_s,
        bwd_flop_per_s=2.5 * fwd_flop / bwd_s,
        kernel=_sdpa_kernel(q, k, v),
    )


def copy_bandwidth_bytes_per_s(dev: torch.device, numel: int, *, warmup: int, repeats: int) -> float:
    """Median bandwidth of ``dst.copy_(src)`` for ``numel`` fp32 elements, read + write bytes counted."""
    src = torch.randn(numel, device=dev)
    dst = torch.empty_like(src)
    copy_s = time_per_call_s(lambda: dst.copy_(src), dev, warmup=warmup, repeats=repeats, min_sample_s=0.0)
    return 2.0 * src.numel() * src.element_size() / copy_s


def attention_tables(
    rows: pl.DataFrame, peak_flop_per_s: float, *, source: str
) -> tuple[AttentionTable, ...]:
    """One ``sdpa`` table per (dtype, head_dim) of ``rows``: fractions of ``peak_flop_per_s``, clipped."""
    tables = []
    for (dtype, head_dim), part in rows.sort("seq_len").group_by(["dtype", "head_dim"], maintain_order=True):
        kernels = ", ".join(sorted(set(part["kernel"])))
        tables.append(
            AttentionTable(
                family="sdpa",
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
        / time_per_call_s(_gemm_fn(d, 256, 256, 256, dev), dev, warmup=2, repeats=3, min_sample_s=2e-3)
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
    attention = measure_attention(attn_dtype, dev, log=log, **timing)
    if log:
        log("copy bandwidth")
    hbm_bytes_per_s = copy_bandwidth_bytes_per_s(dev, sweep.copy_numel, warmup=warmup, repeats=repeats)
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
    return MicrobenchResult(table=table, gemm=gemm, attention=attention, hbm_bytes_per_s=hbm_bytes_per_s)


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
    """Write ``kernels.toml``, ``gemm.csv`` and ``attention.csv`` into ``out`` (created); the caller decides
    about overwriting. Returns the paths written."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    table = write_kernel_table(folder / TABLE_FILE, result.table)
    result.gemm.write_csv(folder / GEMM_CSV)
    result.attention.write_csv(folder / ATTENTION_CSV)
    return [table, folder / GEMM_CSV, folder / ATTENTION_CSV]
