"""Benchmark: profile a 2-layer shrunk Llama on this CPU over 6 shapes (target: under 2 minutes), then compare
the torch-profile prediction of a single-process training step with the measured step.

Run: ``.venv/bin/python benchmarks/bench_profile.py [--threads 1]``. Prints wall times and the error.
Measured here (quiet 2-core VM, 1 thread): 6 shapes in 45 s, predicted step +1.4% off the measured one;
with 2 threads the profile of single ops over-predicts the step by ~24%, so profile with the thread count
you will train with.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)  # one thread per process, as real runs use
    args = parser.parse_args()
    import torch
    from workbench_backends.profile_record import Shape, record_profile
    from workbench_backends.shrink import shrink_model
    from workbench_backends.torch_model import build_model, random_tokens
    from workbench_backends.torch_profile import TorchProfileBackend

    from workbench.presets.catalog import load_model
    from workbench.presets.profile_table import host_cluster, read_profile, write_profile
    from workbench.specs.plan import ParallelPlan, Workload

    torch.set_num_threads(args.threads)
    spec = shrink_model(load_model("llama-3.1-8b"), num_layers=2, hidden_size=512)
    shapes = [Shape(micro_batch_size=b, seq_len=s) for s in (128, 256) for b in (1, 2, 4)]
    t0 = time.perf_counter()
    manifest, ops = record_profile(spec, shapes, progress=True)
    profile_s = time.perf_counter() - t0
    print(f"profiled {len(shapes)} shapes x {ops['op'].n_unique()} ops in {profile_s:.1f} s (target < 120 s)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_profile(Path(tmp) / "p", manifest, ops)
        prof = read_profile(folder)
        wl = Workload(seq_len=256, global_batch_size=8, dtype="fp32")
        est = TorchProfileBackend(folder).estimate(
            spec, host_cluster(prof), wl, ParallelPlan(micro_batch_size=2)
        )
    model = build_model(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = random_tokens(spec, 8, 257)
    times = []
    for k in range(7):
        t = time.perf_counter()
        for mb in tokens.split(2):
            model.loss(mb).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if k >= 2:
            times.append(time.perf_counter() - t)
    measured = statistics.median(times)
    print(
        f"step: predicted {est.step_time_s * 1e3:.1f} ms, measured {measured * 1e3:.1f} ms "
        f"(min {min(times) * 1e3:.1f}), error {est.step_time_s / measured - 1:+.1%}"
    )


if __name__ == "__main__":
    main()
