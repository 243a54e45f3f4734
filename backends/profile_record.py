"""Record a profile: measure every op kind of a model at every requested shard shape on this device.

``record_profile`` builds the modules of :mod:`workbench_backends.torch_model` per tp degree, measures them with
:func:`workbench_backends.profiling.measure_module` under a rich progress bar, micro-benchmarks the device (best GEMM
FLOP/s, copy bandwidth) and probes a whole model's step (the AdamW step and gradient accumulation per parameter,
``step_probe``) and returns the manifest and the ops table in the
schema of :mod:`workbench.presets.profile_table`.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import socket
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl
import torch
from torch import nn
from workbench_backends.profiling import Clock, OpTiming, measure_module
from workbench_backends.torch_model import (
    DecoderLayer,
    Embedding,
    LMHead,
    ShardShape,
    build_model,
    loss_fn,
    random_tokens,
    torch_dtype,
)

from workbench.presets.catalog import resolve
from workbench.presets.hf_config import load_json_object, shrunk_hf_config
from workbench.presets.profile_table import OP_COLUMNS
from workbench.specs.model import ModelSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """One shard shape to measure."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    micro_batch_size: int = 1
    seq_len: int = 128


def op_kinds(model: ModelSpec) -> list[str]:
    """Op kinds a model needs: embedding, layer (dense blocks), moe_layer (MoE blocks), head."""
    kinds = ["embedding"]
    if not model.is_moe or model.num_dense_layers:
        kinds.append("layer")
    if model.is_moe:
        kinds.append("moe_layer")
    return [*kinds, "head"]


def build_op(model: ModelSpec, op: str, shape: Shape, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """The module measured for ``op`` at ``shape`` (random weights)."""
    if op == "embedding":
        module: nn.Module = Embedding(model, tp=shape.tp)
    elif op == "head":
        module = LMHead(model, tp=shape.tp)
    else:
        module = DecoderLayer(model, tp=shape.tp, ep=shape.ep, moe=op == "moe_layer")
    return module.to(device=device, dtype=dtype)


def _inputs(
    model: ModelSpec, op: str, shape: Shape, dtype: torch.dtype, device: torch.device
) -> tuple[Callable[[], torch.Tensor], Callable[[torch.Tensor], torch.Tensor] | None]:
    local_seq = shape.seq_len // shape.cp
    dims = (shape.micro_batch_size, local_seq)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.vocab_size, dims, generator=gen).to(device)
    if op == "embedding":
        return (lambda: tokens), None
    x0 = torch.randn(*dims, model.hidden_size, generator=gen).to(device=device, dtype=dtype)

    def make() -> torch.Tensor:
        return x0.clone().requires_grad_(True)

    return make, ((lambda logits: loss_fn(logits, tokens)) if op == "head" else None)


def measure_op(
    model: ModelSpec,
    op: str,
    shape: Shape,
    *,
    dtype: torch.dtype,
    device: torch.device,
    warmup: int,
    repeats: int,
) -> dict[str, Any]:
    """One row of the ops table (``OP_COLUMNS``)."""
    if shape.seq_len % shape.cp:
        raise ValueError(f"seq_len={shape.seq_len} is not divisible by cp={shape.cp}")
    module = build_op(model, op, shape, dtype, device)
    make, out_fn = _inputs(model, op, shape, dtype, device)
    timing: OpTiming = measure_module(module, make, warmup=warmup, repeats=repeats, output_fn=out_fn)
    row = {k: v for k, v in asdict(timing).items() if k in OP_COLUMNS}
    return {
        "op": op,
        **asdict(shape),
        "num_tokens": shape.micro_batch_size * shape.seq_len // shape.cp,
        **row,
        "num_parameters": sum(p.numel() for p in module.parameters()),
    }


def gemm_peak_flop_per_s(dtype: torch.dtype, device: torch.device, *, size: int | None = None) -> float:
    """Best FLOP/s of a square matmul (2 n^3 FLOPs) over 5 runs: this device's practical dense peak."""
    n = size or (8192 if device.type == "cuda" else 1024)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    return 2.0 * n**3 / _best_time(lambda: a @ b, device)


def copy_bytes_per_s(device: torch.device) -> float:
    """Best bandwidth of a tensor copy (read + write counted) over 5 runs. Both tensors are written first:
    an untouched ``torch.empty`` source reads the kernel's shared zero page on a CPU host, which doubles
    the apparent bandwidth."""
    num = (1 << 28) if device.type == "cuda" else (1 << 24)
    src = torch.randn(num, dtype=torch.float32, device=device)
    dst = torch.zeros_like(src)
    return 2.0 * src.numel() * 4 / _best_time(lambda: dst.copy_(src), device)


PROBE_MAX_PARAMETERS = 1 << 27
"""Cap on the parameters of the model the step probe builds (its layers are cut to stay under it, at least
one kept): 134 M parameters, 2.1 GB with fp32 AdamW states, far above any cache, small enough for a CPU host."""


def probe_layers(model: ModelSpec) -> int:
    """Layers of the step probe: the model's, or as many as keep it under ``PROBE_MAX_PARAMETERS`` (>= 1)."""
    ends = model.embedding_parameters() + model.lm_head_parameters()
    per_layer = max(model.layer_parameters(i) for i in range(model.num_layers))
    return max(1, min(model.num_layers, (PROBE_MAX_PARAMETERS - ends) // per_layer))


def step_probe(
    model: ModelSpec,
    shape: Shape,
    dtype: torch.dtype,
    device: torch.device,
    *,
    warmup: int = 2,
    repeats: int = 9,
) -> dict[str, float | int]:
    """Per-parameter costs that only a whole model in sequence shows, measured on ``model`` cut to
    ``probe_layers`` layers (tp = ep = 1) at ``shape``'s micro-batch and sequence length.

    - ``optimizer_s_per_parameter``: one ``torch.optim.AdamW`` step over every parameter of the probe, right
      after its backward, over its parameter count. Timed on one block alone it was 1.7x too fast on a CPU
      (7.9 ms for the test model's 3.6 M parameters against 13.4 ms over the whole model: the block's states
      stay in cache, the model's do not).
    - ``grad_accumulate_s_per_parameter``: a backward that adds into gradients already there (every
      micro-batch after the first: autograd's ``AccumulateGrad`` adds in place instead of keeping the new
      buffer) minus the one just before it that started from none (paired, so drift cancels), over the
      parameter count; clipped at 0. Measured per op it is about a third of what a whole model shows (the old
      gradients come from memory, not cache).
    Each is the median of ``repeats`` after ``warmup`` rounds (seconds per parameter, on ``device``'s clock).
    """
    layers = probe_layers(model)
    net = build_model(model, num_layers=layers, dtype=dtype, device=device)
    tokens = random_tokens(model, shape.micro_batch_size, shape.seq_len + 1, device=device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    clock = Clock(device)
    accumulate, optimizer = [], []
    for k in range(warmup + repeats):
        net.zero_grad(set_to_none=True)
        backward = []
        for _ in range(2):  # from no gradients, then adding into them
            loss = net.loss(tokens)
            clock.sync()
            backward.append(clock.time(loss.backward)[0])
        opt_s, _ = clock.time(opt.step)
        if k >= warmup:
            accumulate.append(backward[1] - backward[0])
            optimizer.append(opt_s)
    num = sum(p.numel() for p in net.parameters())
    return {
        "optimizer_s_per_parameter": statistics.median(optimizer) / num,
        "grad_accumulate_s_per_parameter": max(0.0, statistics.median(accumulate)) / num,
        "step_probe_layers": layers,
        "step_probe_parameters": num,
    }


def _probe_shape(shapes: list[Shape]) -> Shape:
    """The step probe's shape: the first measured shape's micro-batch and sequence (tp = cp = ep = 1)."""
    first = shapes[0] if shapes else Shape()
    return Shape(micro_batch_size=first.micro_batch_size, seq_len=first.seq_len)


def _best_time(fn: Callable[[], Any], device: torch.device) -> float:
    best = float("inf")
    for _ in range(6):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def device_name(device: torch.device) -> str:
    """``torch.cuda.get_device_name`` on a GPU; the CPU model from /proc/cpuinfo (or platform) otherwise."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def record_profile(
    model: ModelSpec,
    shapes: Iterable[Shape],
    *,
    dtype: str = "fp32",
    device: str = "cpu",
    device_id: str | None = None,
    warmup: int = 2,
    repeats: int = 5,
    progress: bool = True,
    base_model: str | None = None,
    overrides: dict[str, int] | None = None,
) -> tuple[dict[str, Any], pl.DataFrame]:
    """Measure every op kind of ``model`` at every shape; returns (manifest, ops table).

    Raises ValueError for a shape the model cannot be split into (checked before anything is measured).
    """
    shapes = list(shapes)
    for s in shapes:
        ShardShape.of(model, tp=s.tp, ep=s.ep)
    dev, tdtype = torch.device(device), torch_dtype(dtype)
    jobs = [(op, s) for s in shapes for op in op_kinds(model)]
    rows = []
    for op, shape in _progress(jobs, progress):
        rows.append(measure_op(model, op, shape, dtype=tdtype, device=dev, warmup=warmup, repeats=repeats))
    ops = pl.DataFrame(rows).select(list(OP_COLUMNS))
    manifest = {
        "model": model.to_dict(),
        "base_model": base_model or model.name,
        "overrides": overrides or {},
        "device_kind": dev.type,
        "device_id": device_id or ("host-cpu" if dev.type == "cpu" else device_name(dev)),
        "device_name": device_name(dev),
        "device_peak_flop_per_s": gemm_peak_flop_per_s(tdtype, dev),
        "device_memory_bytes_per_s": copy_bytes_per_s(dev),
        **step_probe(model, _probe_shape(shapes), tdtype, dev),
        "dtype": dtype,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "host": socket.gethostname(),
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "num_threads": torch.get_num_threads(),
        "warmup": warmup,
        "repeats": repeats,
        "shapes": [asdict(s) for s in shapes],
        "collective_fit": [],
    }
    return manifest, ops


def _progress(jobs: list[tuple[str, Shape]], show: bool) -> Iterable[tuple[str, Shape]]:
    if not show:
        yield from jobs
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task("profiling", total=len(jobs))
        for op, shape in jobs:
            bar.update(task, description=f"{op} tp{shape.tp} mbs{shape.micro_batch_size} s{shape.seq_len}")
            yield op, shape
            bar.advance(task)


def guess_device_id(device: torch.device) -> str:
    """``host-cpu`` on the CPU; on a GPU the catalog preset whose id family (``h200``) is in the CUDA device
    name, the closest in memory when several are; else the CUDA name itself."""
    if device.type != "cuda":
        return "host-cpu"
    from workbench.presets.catalog import load_device, preset_names

    name = torch.cuda.get_device_name(device).lower()
    total = torch.cuda.get_device_properties(device).total_memory
    hits = [
        load_device(p) for p in preset_names("device") if p.split("-")[0] in name.replace("-", " ").split()
    ]
    if not hits:
        return name.replace(" ", "-")
    return min(hits, key=lambda d: abs(d.hbm_bytes - total)).id


def _host_files(out: Path, manifest: dict[str, Any]) -> None:
    """device.toml and cluster.toml of this host, so ``--cluster <profile>/cluster.toml`` works (CPU only)."""
    tflops = manifest["device_peak_flop_per_s"] / 1e12
    mem_gib = _physical_memory_bytes() / 2**30
    (out / "device.toml").write_text(
        f"# This host's CPU as measured by workbench profile ({manifest['created_at']}): the peak is the best\n"
        f"# square-GEMM rate, the bandwidth the best tensor copy (read + write).\n"
        f'id = "{manifest["device_id"]}"\nname = "{manifest["device_name"]}"\n'
        f'source = "micro-benchmarked by workbench profile on {manifest["host"]}"\n\n'
        f"[peak_tflops]\n{manifest['dtype']} = {tflops:.6g}\n\n"
        f"[memory]\nhbm_GiB = {mem_gib:.3f}\nhbm_bandwidth_TBps = {manifest['device_memory_bytes_per_s'] / 1e12:.6g}\n"
    )
    fit = {f["level"]: f for f in manifest.get("collective_fit", [])}.get("host", {})
    (out / "cluster.toml").write_text(
        f"# One host, processes talking over loopback/shared memory (bandwidth and latency: "
        f"{'fitted collectives' if fit else 'placeholder'}).\n"
        f'id = "{manifest["device_id"]}-host"\nname = "this host"\ndevice = "device.toml"\n'
        f'devices_per_node = 1\ndefault_num_nodes = 1\nsource = "workbench profile"\n\n[[levels]]\nname = "host"\n'
        f"bandwidth_GBps = {fit.get('bytes_per_s', 5e9) / 1e9:.6g}\nlatency_us = {fit.get('latency_s', 20e-6) * 1e6:.6g}\n"
    )


def _physical_memory_bytes() -> float:
    try:
        import os

        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 64.0 * 2**30


def run_profile(
    spec: ModelSpec,
    *,
    base_model: str,
    shapes_args: tuple[list[int], ...],
    cp: int,
    ep: int,
    dtype: str,
    device: str,
    device_id: str | None,
    repeats: int,
    warmup: int,
    threads: int | None,
    collectives: bool,
    out: Path,
    force: bool,
    quiet: bool,
    overrides: dict[str, int],
) -> tuple[int, str, bool]:
    """What ``workbench profile`` does: measure and write the folder ``out``. Returns (rows, device name,
    whether ``config.json`` was written) for the caller to print once the folder is in place."""
    from workbench.presets.profile_table import write_profile

    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to torch here; use --device cpu")
    if threads:
        torch.set_num_threads(threads)
    tps, mbs, seqs = shapes_args
    shapes = [
        Shape(tp=t, cp=cp, ep=ep, micro_batch_size=b, seq_len=s) for t in tps for s in seqs for b in mbs
    ]
    dev = torch.device(device)
    manifest, ops = record_profile(
        spec,
        shapes,
        dtype=dtype,
        device=device,
        device_id=device_id or guess_device_id(dev),
        warmup=warmup,
        repeats=repeats,
        progress=not quiet,
        base_model=base_model,
        overrides=overrides,
    )
    coll = None
    if collectives:
        from workbench_backends.collectives import run_collectives

        coll, fit = run_collectives(backend="nccl" if device == "cuda" else "gloo", num_ranks=2)
        manifest["collective_fit"] = fit
    manifest["device_memory_bytes"] = (
        _physical_memory_bytes()
        if device == "cpu"
        else float(torch.cuda.get_device_properties(dev).total_memory)
    )
    write_profile(out, manifest, ops, coll, force=force)
    if device == "cpu":
        _host_files(out, manifest)
    has_config = write_model_config(out, base_model, spec) if spec.name != base_model else False
    return len(ops), str(manifest["device_name"]), has_config


def write_model_config(out: Path, base_name: str, spec: ModelSpec) -> bool:
    """Write ``config.json`` of the profiled (possibly shrunk) model; False when it cannot be expressed."""
    cfg = shrunk_hf_config(load_json_object(resolve("model", base_name)), spec)
    if cfg is None:
        return False
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return True
