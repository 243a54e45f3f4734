"""Report size and build time for a 64-rank, 256-micro-batch plan (and the 200,000-block timeline).

Run: ``python benchmarks/bench_report.py [--out-dir DIR]``. Prints one line per case: blocks in the
timeline, seconds to simulate, seconds to write the report, and the file size in MB (10^6 bytes) and MiB.
The estimates come from ``workbench_widgets.sample`` (real simulated schedules, synthetic memory).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from workbench_widgets.report import write_report
from workbench_widgets.sample import sample_cluster, sample_estimate

from workbench.specs.plan import ParallelPlan

CASES = (
    ("1f1b p=64 m=256", ParallelPlan(pp=64, schedule="1f1b"), 256),
    ("zb-h1 p=64 m=256", ParallelPlan(pp=64, schedule="zb-h1"), 256),
    ("zbv p=64 vpp=2 m=512", ParallelPlan(pp=64, vpp=2, schedule="zbv"), 512),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="Keep the reports here (default: a temp dir)."
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.out_dir or Path(tmp)
        for name, plan, m in CASES:
            t0 = time.perf_counter()
            est = sample_estimate(plan=plan, num_microbatches=m, cluster=sample_cluster(8))
            t1 = time.perf_counter()
            path = write_report(
                out_dir / f"{name.replace(' ', '_')}.html", estimates=[est], command="bench", force=True
            )
            t2 = time.perf_counter()
            size = path.stat().st_size
            print(
                f"{name:24s} blocks={est.timeline.height:7d} simulate={t1 - t0:5.2f}s report={t2 - t1:5.2f}s "
                f"size={size / 1e6:5.2f} MB ({size / 2**20:5.2f} MiB)"
            )


if __name__ == "__main__":
    main()
