"""Replay files of the ``trace`` rows of a serving validation file: every request's arrival time and lengths, so a
row is simulated with the requests the source ran instead of Poisson arrivals with mean lengths (the fallback of
``workbench.validate.serving_workload`` when no file ships)."""

from __future__ import annotations

from pathlib import Path

from workbench.presets.catalog import profiles_dir
from workbench.serving.requests import Requests
from workbench.specs.serving import Arrival, ServingWorkload
from workbench.validate.rows import cell_number

TRACE_DIR = profiles_dir() / "validation"
"""Folder of the replay files of ``trace`` rows (``trace_file``). Shipped: the three LLMServingSim workloads
``trace-lss-sharegpt-<model>-300-sps10.csv``, the ``arrival_time_ns`` (as seconds), ``input_toks`` and
``output_toks`` of every line of ``casys-kaist/LLMServingSim@5daddb2 workloads/sharegpt-<model>-300-sps10.jsonl``
(the runs replay them strictly: their ``requests.jsonl`` have the same lengths, and queue entries within 0.4 s of
these times)."""


def trace_file(code: str, folder: Path = TRACE_DIR) -> Path:
    """Where the replay file of the trace named ``code`` (a row's ``input_tokens_dist``) would be:
    ``<folder>/trace-<code>.csv`` (``arrival_s,input_tokens,output_tokens``, :meth:`Requests.from_trace_csv`)."""
    return folder / f"trace-{code}.csv"


def trace_workload(row: dict[str, str], n_req: int, assumed: list[str]) -> ServingWorkload | None:
    """The row's requests replayed from its trace file (``trace_file``), or None when there is none. The file
    must hold ``num_requests`` requests whose mean lengths round to the row's means (it is the run's trace, not
    another), and when the row says EOS was not ignored (``ignore_eos`` false; blank is not stated, and the file's
    lengths are replayed) it must hold what was generated (``output_tokens_total``). A file that does not describe
    the run is not replayed: None, with the reason in ``assumed`` (the caller then simulates Poisson arrivals with
    the mean lengths, the README's reading of a trace row without its file)."""
    code = row["input_tokens_dist"].strip()
    path = trace_file(code) if code else None
    if path is None or not path.is_file() or row["output_tokens_dist"].strip() != code:
        return None
    req = Requests.from_trace_csv(path)
    inputs, outputs = req.input_tokens, req.output_tokens
    problems = [] if len(req) == n_req else [f"{len(req)} requests, not num_requests={n_req}"]
    for side, values in (("input", inputs), ("output", outputs)):
        mean = cell_number(row, f"{side}_tokens_mean")
        if mean is not None and round(float(values.mean())) != round(mean):
            problems.append(f"{side} mean {values.mean():.1f} != {side}_tokens_mean {mean:g}")
    total = cell_number(row, "output_tokens_total")
    eos = row["ignore_eos"].strip()
    if eos == "false" and (total is None or int(outputs.sum()) != int(total)):
        problems.append("EOS not ignored and the generated token count does not match output_tokens_total")
    if problems:
        assumed.append(
            f"trace file {path.name} does not describe this run ({'; '.join(problems)}): not replayed"
        )
        return None
    if not eos:
        assumed.append("ignore_eos blank: the trace's output lengths replayed as generated")
    assumed.append(f"requests replayed from {path.name} (arrival times and lengths of the run)")
    trace = zip(req.arrival_s.tolist(), inputs.tolist(), outputs.tolist(), strict=True)
    return ServingWorkload(arrival=Arrival.TRACE, trace=tuple(trace))


def trace_requests(row: dict[str, str]) -> int | None:
    """Requests in the row's trace file (``trace_file`` of its ``input_tokens_dist``), or None when it ships none."""
    code = row["input_tokens_dist"].strip()
    path = trace_file(code) if code else None
    return len(Requests.from_trace_csv(path)) if path is not None and path.is_file() else None
