"""CPU time of ``workbench --help`` (issue 51 item 10): floor 0.25 CPU-s.

Runs the console script ``N`` times in fresh processes and prints the median user+system CPU time of one run
(``resource.getrusage(RUSAGE_CHILDREN)`` differences) and its wall time. The listing imports click and
``workbench_cli`` only; before the lazy group it imported every command module, the core, polars and numpy
(0.5-0.7 CPU-s on the 2-core CI machine).

Run: ``python benchmarks/bench_cli_help.py [--repeat N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

FLOOR_CPU_S = 0.25


def _one(command: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    script = Path(sys.executable).with_name("workbench")
    command = [str(script)] if script.exists() else [shutil.which("workbench") or "workbench"]
    command.append("--help")
    _one(command)  # warm the file cache
    runs = [_one(command) for _ in range(args.repeat)]
    cpu = statistics.median(c for c, _ in runs)
    wall = statistics.median(w for _, w in runs)
    result = {"cpu_s": cpu, "wall_s": wall, "floor_cpu_s": FLOOR_CPU_S, "ok": cpu <= FLOOR_CPU_S}
    if args.json:
        print(json.dumps(result))
    else:
        verdict = "ok" if result["ok"] else "OVER THE FLOOR"
        print(
            f"workbench --help: {cpu:.3f} CPU-s, {wall:.3f} s wall (median of {args.repeat}); floor {FLOOR_CPU_S} CPU-s: {verdict}"
        )
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
