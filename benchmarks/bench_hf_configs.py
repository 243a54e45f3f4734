"""Reading Hugging Face configs: the time to load every model preset without transformers (floor: 0.2 s per
config, issue 46), and with the ``[hf]`` extra the time of the meta-device check of the 100B+ configs (floor: 10 s
each), with our counts beside transformers' and the published ones.

Usage: python benchmarks/bench_hf_configs.py [--no-meta]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from workbench.presets.catalog import preset_names, profiles_dir
from workbench.presets.hf_config import read_hf_config

LOAD_FLOOR_S, META_FLOOR_S = 0.2, 10.0


def load_times() -> dict[str, float]:
    """Seconds to read each model preset (best of three), transformers not imported."""
    out = {}
    for name in preset_names("model"):
        path = profiles_dir() / "models" / f"{name}.json"
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            read_hf_config(path)
            best = min(best, time.perf_counter() - t0)
        out[name] = best
    return out


def meta_checks(min_params: float = 1e11) -> None:
    t0 = time.perf_counter()
    import transformers.modeling_utils  # noqa: F401  (what every modeling module imports first)
    from workbench_backends.hf_meta import meta_counts  # imports torch and transformers

    print(
        f"import torch + transformers + modeling_utils: {time.perf_counter() - t0:.1f} s (once per process; each"
    )
    print("architecture's first build also imports its modeling module, counted in its check)")
    print(f"{'model':24} {'ours':>16} {'transformers':>16} {'published':>32} {'check s':>8}")
    for name in preset_names("model"):
        path = profiles_dir() / "models" / f"{name}.json"
        reading = read_hf_config(path)
        ours = reading.total_with_encoder
        if ours < min_params:
            continue
        t0 = time.perf_counter()
        counts = meta_counts(json.loads(path.read_text()))
        elapsed = time.perf_counter() - t0
        published = json.loads(path.read_text()).get("_published_parameters", "")[:32]
        flag = "" if elapsed < META_FLOOR_S else "  OVER FLOOR"
        print(f"{name:24} {ours:>16,} {counts.total:>16,} {published:>32} {elapsed:>8.2f}{flag}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-meta", action="store_true", help="skip the transformers meta-device checks")
    args = parser.parse_args()
    times = load_times()
    slowest = max(times, key=times.__getitem__)
    print(f"load {len(times)} configs: slowest {slowest} {times[slowest] * 1e3:.2f} ms (floor {LOAD_FLOOR_S} s); "
          f"transformers imported: {'transformers' in sys.modules}")  # fmt: skip
    if not args.no_meta:
        meta_checks()


if __name__ == "__main__":
    main()
