"""The request process of a serving validation row (``row_workload``), for :mod:`workbench.validate.serving`.

A ``trace`` row is replayed from its trace file (``workbench.validate.serving_traces``: every request's arrival time and
lengths) when one ships; without it, it is simulated as Poisson arrivals at its rate with the mean lengths (the
README's reading); per-request means come from the totals where the row gives them (``output_tokens_total`` counts
what was really generated when EOS was not ignored). A row the specs cannot express raises ``Unexpressible`` with
the reason.
"""

from __future__ import annotations

from functools import partial

from workbench.serving.steady import STEADY_WAVES, steady_state_requests
from workbench.specs.serving import Arrival, ServingWorkload
from workbench.validate.rows import Unexpressible, cell_count, cell_number
from workbench.validate.serving_datasets import named_dataset
from workbench.validate.serving_loadgen import loadgen_rules, loadgen_server_queries
from workbench.validate.serving_traces import trace_requests, trace_workload


def _dataset_means(row: dict[str, str], assumed: list[str]) -> dict[str, float]:
    """The mean length of each side the row leaves blank (``<side>_tokens_mean`` and ``_total``), taken from the
    named data set of its ``<side>_tokens_dist`` (``workbench.validate.serving_datasets``) and said in
    ``assumed`` (and which data set a code other than its own named, ``named_dataset``); Unexpressible naming both
    columns when the side has neither a value nor a named data set, or the data set states no mean for it."""
    means: dict[str, float] = {}
    for side in ("input", "output"):
        if (
            cell_number(row, f"{side}_tokens_total") is not None
            or cell_number(row, f"{side}_tokens_mean") is not None
        ):
            continue
        dataset = named_dataset(row, side, assumed)
        if dataset is None:
            raise Unexpressible(
                f"no {side} length ({side}_tokens_mean and _total blank, {side}_tokens_dist names no data set "
                "of profiles/validation/datasets.toml)"
            )
        mean = dataset.mean_tokens(side)
        if mean is None:
            raise Unexpressible(
                f"no {side} length ({side}_tokens_mean and _total blank, and data set {dataset.code} states no "
                f"mean {side} length in tokens: profiles/validation/datasets.toml)"
            )
        means[side] = mean
        assumed.append(
            f"{side}_tokens_mean={means[side]:g} (blank): the mean of data set {dataset.code} "
            f"({dataset.samples} samples; profiles/validation/datasets.toml)"
        )
    return means


OFFLINE_STEADY_WAVES = 32
"""Full batches of requests simulated for an offline row whose run length is not given
(``_offline_steady_requests``): an offline benchmark issues its whole query at once and reports samples over the
whole run (MLPerf LoadGen's Offline scenario: one query of ``samples_per_query`` samples, at least the data set's
24,576 for llama2-70b), so its fill and drain are a small part of it; at 32 batches they are about 1/32 of
the simulated run."""


def _offline_steady_requests(row: dict[str, str], assumed: list[str]) -> int | None:
    """Requests to simulate for an offline row that gives no ``num_requests``: ``OFFLINE_STEADY_WAVES`` times the
    deployment's batch limit (``max_batch_size`` x ``replicas``); None when ``max_batch_size`` is blank too."""
    batch = cell_number(row, "max_batch_size")
    if batch is None:
        return None
    replicas = cell_number(row, "replicas") or 1
    n = OFFLINE_STEADY_WAVES * int(batch) * int(replicas)
    assumed.append(
        f"num_requests={n} (blank): the offline run priced over {OFFLINE_STEADY_WAVES} full batches of "
        f"max_batch_size {int(batch)} x {int(replicas)} replica(s), so its fill and drain are a small part of it"
    )
    return n


def _loadgen_server_requests(row: dict[str, str], assumed: list[str]) -> int | None:
    """Requests to simulate for a Poisson row of an MLPerf benchmark that gives no ``num_requests``: the query count
    LoadGen schedules at the row's rate under that benchmark's rules (``workbench.validate.serving_loadgen.
    loadgen_rules``: by the row's data set), said in ``assumed``; None for other rows or a blank rate."""
    rules = loadgen_rules(row)
    rate = cell_number(row, "request_rate_per_s")
    if rules is None or rate is None or rate <= 0:
        return None
    n = loadgen_server_queries(rate, rules)
    assumed.append(
        f"num_requests={n} (blank): the queries MLPerf LoadGen schedules in a Server run at {rate:g}/s "
        f"({rules.source}; loadgen.cc GenerateQueries: Poisson arrivals until min_duration and the query count, "
        "padded to whole permutations of the samples, are met), scored over all of them as LoadGen reports"
    )
    return n


def steady_warmup_requests(row: dict[str, str], workload: ServingWorkload) -> int | None:
    """Requests a row without ``num_requests`` is scored without at each end (``workbench.serving.steady.
    steady_window``): a closed loop's clients; a Poisson run priced in steady state (not an MLPerf Server run,
    which is scored over LoadGen's whole run) its 1/``STEADY_WAVES``; None for a row scored over its whole run."""
    if row["num_requests"].strip():
        return None
    if workload.arrival is Arrival.CLOSED:
        return workload.concurrency
    poisson = workload.arrival is Arrival.POISSON and workload.num_requests is not None
    if poisson and loadgen_rules(row) is None:
        return int(workload.num_requests or 0) // STEADY_WAVES
    return None


def read_workload_kind(row: dict[str, str], assumed: list[str]) -> str:
    """The row's ``workload_kind``; where it is blank on a whole-request (``e2e``) row, the kind its filled columns
    leave (README, "Serving enumerated values"): ``closed_loop`` when ``concurrency`` is given (requests kept in
    flight), else ``open_loop_poisson`` when ``request_rate_per_s`` is (a rate's arrivals are Poisson; a trace
    without its file is simulated so too), else ``offline`` (no arrival process stated: every request available at
    once, as throughput benchmarks run), noted in ``assumed``. Phase-only rows keep theirs (they are priced at a
    batch, not a request process)."""
    kind = row["workload_kind"].strip()
    if kind or row["phase"].strip() != "e2e":
        return kind
    if cell_number(row, "concurrency") is not None:
        kind, why = "closed_loop", "concurrency is given (requests kept in flight)"
    elif cell_number(row, "request_rate_per_s") is not None:
        kind, why = "open_loop_poisson", "an arrival rate is given and no concurrency"
    else:
        kind, why = (
            "offline",
            "neither a concurrency nor an arrival rate is given (every request available at once)",
        )
    assumed.append(f"workload_kind={kind} (blank): {why}")
    return kind


def row_workload(row: dict[str, str], assumed: list[str], engine_seqs: int | None = None) -> ServingWorkload:
    """The request process of the row (see the module docstring for ``trace`` rows and the means). ``engine_seqs``:
    the sequences the deployment holds at once (``max_num_seqs`` x replicas), which sizes a Poisson run without
    ``num_requests`` outside MLPerf (``STEADY_WAVES`` times it, scored in steady state: ``steady_warmup_requests``);
    without it such a row raises Unexpressible."""
    kind = row["workload_kind"].strip()
    if not kind:
        raise Unexpressible("the workload kind is not stated")
    if kind == "fixed_batch":
        raise Unexpressible("fixed-batch phase measurements are not a request workload")
    dataset_means = _dataset_means(row, assumed)
    n = cell_number(row, "num_requests")
    if n is None and kind == "closed_loop":
        clients = cell_count(row, "concurrency")
        n = steady_state_requests(clients)
        assumed.append(f"num_requests={int(n)} (blank): the closed loop priced in steady state, {clients} clients "
                       "started over one request's duration, warm-up and drain waves excluded")  # fmt: skip
    if n is None and kind == "offline":
        n = _offline_steady_requests(row, assumed)
    if n is None and kind == "open_loop_poisson":
        n = _loadgen_server_requests(row, assumed)
    if n is None and kind == "open_loop_poisson" and engine_seqs is not None:
        n = STEADY_WAVES * engine_seqs
        assumed.append(f"num_requests={n} (blank): the Poisson run priced in steady state, {STEADY_WAVES} x the "
                       f"{engine_seqs} sequences the deployment holds at once, scored without the first "
                       f"{engine_seqs} (warm-up) and the last {2 * engine_seqs} (drain)")  # fmt: skip
    if n is None and kind == "trace":
        n = trace_requests(row)
        if n is not None:
            assumed.append(f"num_requests={n} (blank): the requests of the trace file")
    if n is None:
        raise Unexpressible("num_requests is blank")
    n_req = int(n)
    lengths: dict[str, int] = {}
    for side in ("input", "output"):
        total, mean = cell_number(row, f"{side}_tokens_total"), cell_number(row, f"{side}_tokens_mean")
        if total is not None:
            lengths[side] = max(1, round(total / n_req))
            assumed.append(f"{side}_tokens={lengths[side]} = {side}_tokens_total / num_requests")
        else:
            lengths[side] = max(1, round(dataset_means.get(side, mean) or 1))
    requests = partial(
        ServingWorkload,
        num_requests=n_req,
        input_tokens=lengths["input"],
        output_tokens=lengths["output"],
        prefix_hit_rate=cell_number(row, "prefix_hit_rate") or 0.0,
    )
    if kind == "offline":
        return requests(arrival=Arrival.OFFLINE)
    if kind == "closed_loop":
        return requests(arrival=Arrival.CLOSED, concurrency=cell_count(row, "concurrency"))
    rate = cell_number(row, "request_rate_per_s")
    if rate is None or rate <= 0:
        raise Unexpressible("request_rate_per_s is blank")
    if kind == "trace":
        replay = trace_workload(row, n_req, assumed)
        if replay is not None:
            return replay
        assumed.append(
            f"trace {row['input_tokens_dist']} not at hand: Poisson at {rate:g}/s with mean lengths"
        )
    return requests(arrival=Arrival.POISSON, request_rate_per_s=rate)
