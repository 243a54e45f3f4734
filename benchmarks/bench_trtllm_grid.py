"""TensorRT-LLM's whole perf-overview grid: every ISL/OSL shape of the four FP8 columns the public serving rows take
one shape from, priced as those rows (trtllm-bench's own batch sizing, whole contexts, GUARANTEED_NO_EVICT, CUDA-graph
padding, the overlap scheduler) and scored against the page. The serving file keeps one shape per column (1000/1000,
20000/2000 for 8B); the other nine of each column show where an error sits: decode-heavy shapes (OSL >= ISL) price
the decode GEMMs and attention at a few hundred sequences, prefill-heavy ones (2048/128, 5000/500) whole contexts.

Source of every measured value: NVIDIA/TensorRT-LLM@00f3768 docs/source/performance/perf-overview.md, "Throughput
Measurements" ("Total Output Throughput (tokens/sec)"): "Llama 3.1 8B" H100 TP1 (FP8), "Llama 3.3 70B" H100 TP2 and
H200 TP1 (FP8), "Llama 3.1 405B" H100 TP8 (FP8); request counts from the page's ``$num_requests`` table. Nothing is
fitted to them.

Usage: python benchmarks/bench_trtllm_grid.py [--data CSV]
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from pathlib import Path

from workbench.validate.serving import validate_serving
from workbench.validate.serving_csv import DEFAULT_SERVING_DATA

NUM_REQUESTS = {
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (500, 2000): 3000, (1000, 1000): 3000,
    (1000, 2000): 1500, (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500, (20000, 2000): 1000,
}  # fmt: skip
"""(ISL, OSL) -> the page's ``$num_requests``."""

GRID = {
    "TRT-02": (28312, 22714, 14325, 17660, 15220, 13899, 3450, 9305, 3459, 1351),  # Llama 3.1 8B, H100 TP1
    "TRT-04": (6378, 6651, 4199, 5222, 4205, 4146, 762, 3082, 898, 437),  # Llama 3.3 70B, H100 TP2
    "TRT-05": (3803, 4336, 2872, 3666, 2909, 2994, 442, 2003, 566, 283),  # Llama 3.3 70B, H200 TP1
    "TRT-06": (3627, 4340, 3116, 3994, 2919, 2895, 453, 2296, 610, 345),  # Llama 3.1 405B, H100 TP8
}
"""Template row of the serving file -> output tokens/s of its column, in ``NUM_REQUESTS``' order of shapes."""


def grid_rows(data: Path) -> list[dict[str, str]]:
    """Every grid shape as a copy of its column's row in ``data`` with the shape, request count and measured
    throughput replaced (ids ``<row>-<isl>-<osl>``). KeyError when a template row is missing."""
    with open(data, encoding="utf-8", newline="") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    out = []
    for template, measured in GRID.items():
        for (isl, osl), value in zip(NUM_REQUESTS, measured, strict=True):
            row = dict(rows[template])
            row.update(id=f"{template}-{isl}-{osl}", input_tokens_mean=str(isl), output_tokens_mean=str(osl),
                       num_requests=str(NUM_REQUESTS[(isl, osl)]), measured_output_tokens_per_s=str(value))  # fmt: skip
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--data", default=str(DEFAULT_SERVING_DATA), help="serving file holding the template rows"
    )
    args = ap.parse_args()
    rows = grid_rows(Path(args.data))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "grid.csv"
        with open(path, "w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        result = validate_serving(path)
    errors = {r["id"]: (r["predicted"] - r["measured"]) / r["measured"] for r in result["rows"]}
    for template in GRID:
        cells = [f"{i}/{o} {100 * errors[f'{template}-{i}-{o}']:+.1f}%" for i, o in NUM_REQUESTS]
        print(f"{template} column: " + ", ".join(cells))
    for name, pick in (
        ("decode-heavy (OSL >= ISL)", lambda i, o: o >= i),
        ("prefill-heavy", lambda i, o: o < i),
    ):
        apes = [abs(errors[f"{t}-{i}-{o}"]) for t in GRID for i, o in NUM_REQUESTS if pick(i, o)]
        print(f"MAPE {name}: {100 * sum(apes) / len(apes):.1f}% over {len(apes)} shapes")
    print(
        f"MAPE throughput, whole grid: {100 * result['mape_by_metric']['throughput']:.1f}% over {len(errors)} shapes"
    )
    for s in result["skipped"]:
        print(f"skipped {s['id']}: {s['reason']}")


if __name__ == "__main__":
    main()
