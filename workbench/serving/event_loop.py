"""The event loop of the serving simulator: engines, their queues and batches, arrivals, hand-offs and
preemptions, priced iteration by iteration. The rules it follows and the entry point are in
:mod:`workbench.serving.simulate`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from heapq import heappush as _push

import numpy as np
from numpy import array as _array

from workbench.serving.engine_state import EMPTY as _EMPTY
from workbench.serving.engine_state import EngineState as _Engine
from workbench.serving.engine_state import _sum
from workbench.serving.requests import Requests
from workbench.serving.results import ROW_FIELDS, RequestSimResult, iteration_table, sim_result


class EventLoop:
    """The event loop; handlers mutate engine state and push events on ``self.heap``."""

    def __init__(
        self,
        requests: Requests,
        engines: list[_Engine],
        pools: tuple[list[_Engine], list[_Engine]],
        *,
        chunked: bool,
        prefill_first: bool,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        router: str,
        max_run_iterations: int,
        kv_admission: str,
        prefix_hit_rate: float = 0.0,
        max_chunk_tokens: int | None = None,
        eager_emit_s: float = 0.0,
    ) -> None:
        n = len(requests)
        self.req = requests
        self.prompt = requests.input_tokens.tolist()
        self.out = requests.output_tokens.tolist()
        self.arrival = requests.arrival_s.copy()
        self.engines, self.pools = engines, pools
        self.single = (len(pools[0]) == 1, len(pools[1]) == 1)
        self.chunked, self.max_seqs, self.max_tokens = chunked, max_num_seqs, max_num_batched_tokens
        self.max_chunk = max_num_batched_tokens if max_chunk_tokens is None else max_chunk_tokens
        self.prefill_first = prefill_first
        self.reserve_full = kv_admission == "full"
        self.full_tokens = requests.input_tokens + requests.output_tokens - 1  # KV of a request's last decode
        self.least_loaded = router == "least_loaded"
        self.max_run = max_run_iterations
        self.rr = [0, 0]
        self.generated = [0] * n
        self.kv_ready = [False] * n
        self.first_token = [math.nan] * n  # lists: one scalar store per token event (arrays at the end)
        self.finish = [math.nan] * n
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.engine_of = [-1] * n
        self.prefill_engine_of = [-1] * n
        # prompt tokens found in the prefix cache: whole blocks, at least one token left to compute
        self.hit: list[int] | None = None
        if prefix_hit_rate > 0.0:
            b = engines[0].block
            hits = np.floor(requests.input_tokens * prefix_hit_rate / b).astype(np.int64) * b
            self.hit = np.minimum(hits, requests.input_tokens - 1).tolist()
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = itertools.count(1)  # ties in the heap: (time_s, priority, seq)
        self.num_requests = n
        self.next_closed = n if requests.concurrency is None else requests.concurrency
        # ROW_FIELDS numbers per started batch (a head iteration or a decode run)
        self.rows: list[tuple[float, ...]] = []
        # requests whose first or last token came at the end of the iteration just completed: emitted later when
        # the next iteration is launched eagerly (``eager_emit_s``; vLLM V0's outputs callback)
        self.eager_emit_s = eager_emit_s
        self.emitted: list[int] = []

    # ---- events ----
    def push(self, time_s: float, priority: int, a: int, b: int) -> None:
        """priority 0: a KV hand-off (request a to engine b); 1: engine a's step of generation b."""
        _push(self.heap, (time_s, priority, next(self.seq), a, b))

    def run(self) -> None:
        """Process arrivals (known ones from a pointer, before heap events at the same time) and heap events in
        time order until nothing is left."""
        arrival, heap, engines = self.arrival.tolist(), self.heap, self.engines
        pick, enqueue, complete, schedule, pop = (
            self.pick,
            self.enqueue,
            self.complete,
            self.schedule,
            heapq.heappop,
        )
        prefill_engine_of = self.prefill_engine_of
        n_known, ptr = self.next_closed, 0
        while True:
            if ptr < n_known and (not heap or arrival[ptr] <= heap[0][0]):
                eng = pick(0)  # route(ptr, arrival[ptr], 0), inline
                prefill_engine_of[ptr] = eng.index
                enqueue(eng, ptr, arrival[ptr])
                ptr += 1
                continue
            if not heap:
                return
            t, priority, _, a, b = pop(heap)
            if priority == 0:
                self.kv_ready[a] = True
                enqueue(engines[b], a, t)
                continue
            eng = engines[a]
            if b == eng.gen:
                complete(eng, t)
                schedule(eng, t)

    def pick(self, pool_index: int) -> _Engine:
        """The engine of pool 0 (arrivals) or 1 (hand-offs) that takes the next request; counts it on it."""
        pool = self.pools[pool_index]
        if self.single[pool_index]:
            eng = pool[0]
        elif self.least_loaded:
            eng = min(pool, key=lambda e: e.load)
        else:
            k = self.rr[pool_index]
            self.rr[pool_index] = k + 1
            eng = pool[k % len(pool)]
        eng.load += 1
        return eng

    def route(self, i: int, t: float, pool_index: int) -> None:
        eng = self.pick(pool_index)
        if pool_index == 0:
            self.prefill_engine_of[i] = eng.index
        self.enqueue(eng, i, t)

    def enqueue(self, eng: _Engine, i: int, t: float) -> None:
        self.engine_of[i] = eng.index
        heapq.heappush(eng.waiting, i)
        if not eng.busy:
            eng.busy = True
            eng.gen += 1
            _push(self.heap, (t, 1, next(self.seq), eng.index, eng.gen))
        elif eng.k > 1 and eng.waiting[0] == i and eng.n + len(eng.prefilling) < self.max_seqs:
            # a new queue head may be admitted at the next iteration (a blocked head stays blocked in a run)
            self.truncate(eng, t)

    def truncate(self, eng: _Engine, t: float) -> None:
        """Cut a decode run after its first iteration that ends at or after ``t``."""
        k, t0, slope = eng.k, eng.t0, eng.slope
        elapsed = t - eng.start
        # the end of the x-th iteration from the run's start is x * t0 + slope * x * (x - 1) / 2 (written out below)
        if slope:
            b = t0 - slope / 2
            x = math.ceil((-b + math.sqrt(max(b * b + 2 * slope * elapsed, 0.0))) / slope)
        else:
            x = math.ceil(elapsed / t0) if t0 > 0 else 1
        x = min(max(x, 1), k)
        while x > 1 and (x - 1) * t0 + slope * (x - 1) * (x - 2) / 2 >= elapsed:
            x -= 1
        while x < k and x * t0 + slope * x * (x - 1) / 2 < elapsed:
            x += 1
        if x < k:
            eng.k = x
            row = self.rows[eng.row]
            self.rows[eng.row] = (*row[:2], x, *row[3:])
            eng.gen = gen = eng.gen + 1
            _push(
                self.heap, (eng.start + (x * t0 + slope * x * (x - 1) / 2), 1, next(self.seq), eng.index, gen)
            )

    # ---- one engine step: finish the work in flight, then schedule the next ----
    def complete(self, eng: _Engine, t: float) -> None:
        """Apply the work in flight that ends at ``t``: a head iteration or a decode run."""
        finished = 0
        if self.eager_emit_s:
            self.emitted.clear()
        if eng.head:
            eng.head = False
            if eng.decoding:
                eng.steps += 1
            if eng.prefilling:
                finished = self.complete_prefills(eng, t)
        elif eng.k:
            eng.steps += eng.k
        eng.k = 0
        if eng.steps == eng.next_end:
            done = eng.drop_finished()
            finish = self.finish
            for i in done:
                finish[i] = t
            if self.eager_emit_s:
                self.emitted.extend(done)
            finished += len(done)
            if self.reserve_full:
                eng.reserved -= int(_sum(-(-self.full_tokens[done] // eng.block)))
        if finished:
            eng.load -= finished
            if self.next_closed < self.num_requests:
                self.closed_loop_arrivals(finished, t)

    def complete_prefills(self, eng: _Engine, t: float) -> int:
        """Advance the prefills of the head iteration that ended at ``t``; completed ones emit a token and decode
        (here or, on a prefill engine, after the KV hand-off) unless that was their last. Returns how many
        finished."""
        finished = 0
        new_ids: list[int] = []
        new_ctx: list[int] = []
        new_left: list[int] = []
        still = []
        for entry in eng.prefilling:
            i, c, done, blocks, chunk = entry
            if done + chunk < c:
                entry[2] += chunk
                still.append(entry)
                continue
            eng.pf_blocks -= blocks
            m = c - self.prompt[i] + 1
            self.generated[i] = m
            if m == 1:
                self.first_token[i] = t
                if self.eager_emit_s:
                    self.emitted.append(i)
            if m >= self.out[i]:
                self.finish[i] = t
                finished += 1
                self.release(eng, i)
            elif eng.prefill_only:
                eng.load -= 1
                dest = self.pick(1)
                self.push(t + eng.cost.kv_transfer_s(c), 0, i, dest.index)
            else:
                new_ids.append(i)
                new_ctx.append(c + 1)
                new_left.append(self.out[i] - m)
        eng.prefilling = still
        if new_ids:
            eng.add_decodes(new_ids, new_ctx, new_left)
        return finished

    def closed_loop_arrivals(self, num_finished: int, t: float) -> None:
        n = len(self.prompt)
        for _ in range(num_finished):
            if self.next_closed >= n:
                return
            i = self.next_closed
            self.next_closed += 1
            self.arrival[i] = t
            self.route(i, t, 0)

    def preempt_youngest(self, eng: _Engine) -> None:
        young_pf = max((e[0] for e in eng.prefilling), default=-1)
        young_d = max(eng.ids) if eng.n else -1
        if young_pf > young_d:
            entry = next(e for e in eng.prefilling if e[0] == young_pf)
            eng.prefilling.remove(entry)
            eng.pf_blocks -= entry[3]
            i = young_pf
        else:
            j = eng.ids.index(young_d)
            i = young_d
            self.generated[i] = self.out[i] - (eng.ends[j] - eng.steps)
            eng.drop(j)
        self.kv_ready[i] = False
        self.preemptions[i] += 1
        self.release(eng, i)
        heapq.heappush(eng.waiting, i)

    def release(self, eng: _Engine, i: int) -> None:
        """Return request ``i``'s whole-length reservation to ``eng`` (``full`` admission only)."""
        if self.reserve_full and not eng.prefill_only:
            eng.reserved -= -(-int(self.full_tokens[i]) // eng.block)

    def schedule(self, eng: _Engine, t: float) -> None:
        """Compose the engine's next batch at ``t`` (the rules in :mod:`workbench.serving.simulate`) and start
        it; idle when there is none."""
        if self.prefill_first and eng.waiting:
            new_tokens: list[int] = []
            context: list[int] = []
            self.admit(eng, -1, self.max_tokens, new_tokens, context, False)
            if new_tokens:
                self.start_head(eng, t, new_tokens, context, False)
                return
        used = eng.blocks_needed(exact=False)
        preempted = used > eng.cap_blocks
        while used > eng.cap_blocks:
            self.preempt_youngest(eng)
            used = eng.blocks_needed()
        new_tokens = []
        context = []
        if eng.prefilling:  # partial prefills first (chunked prefill only)
            budget = self.max_tokens - eng.n
            for entry in eng.prefilling:
                entry[4] = chunk = min(entry[1] - entry[2], budget, self.max_chunk)
                if chunk:
                    budget -= chunk
                    new_tokens.append(chunk)
                    context.append(entry[2])
        if eng.waiting and not preempted and not self.prefill_first:
            budget = self.max_tokens - eng.n - sum(new_tokens)
            self.admit(eng, 0, budget, new_tokens, context, True)
        if new_tokens:
            self.start_head(eng, t, new_tokens, context, True)
        elif eng.n:
            self.start_run(eng, t, preempted)
        else:
            eng.busy = False

    def start_head(
        self, eng: _Engine, t: float, new_tokens: list[int], context: list[int], decoding: bool
    ) -> None:
        """Start one iteration with prefill chunks (and the running decodes when ``decoding``): price it, record
        its row, push the engine's next event."""
        if self.emitted:
            self.delay_emitted(t)
        n, steps = eng.n, eng.steps
        eng.decoding = with_decodes = decoding and n > 0
        eng.next_end = eng.ends[0] if n else -1
        eng.start, eng.head, eng.k = t, True, 0
        kv_tokens = eng.off_sum + n * steps - (0 if decoding else n)
        for e in eng.prefilling:
            kv_tokens += e[2] + e[4]
        ctx = eng.off_view + steps if with_decodes else _EMPTY
        head_s = eng.cost.iteration_s(_array(new_tokens), _array(context), ctx)
        if not 0.0 <= head_s < math.inf:
            self.bad_time(eng, head_s)
        self.rows.append(
            (
                eng.index,
                t,
                1,
                head_s,
                0.0,
                sum(new_tokens),
                n if with_decodes else 0,
                kv_tokens,
                len(eng.waiting),
            )
        )
        eng.gen = gen = eng.gen + 1
        _push(self.heap, (t + head_s, 1, next(self.seq), eng.index, gen))

    def delay_emitted(self, t: float) -> None:
        """The first and last tokens that came at ``t`` reach the client ``eager_emit_s`` later: the iteration
        starting at ``t`` has prefill tokens, launched eagerly before the engine processes the earlier outputs."""
        first, finish, late = self.first_token, self.finish, self.eager_emit_s
        for i in self.emitted:
            if first[i] == t:
                first[i] = t + late
            if finish[i] == t:
                finish[i] = t + late
        self.emitted.clear()

    def start_run(self, eng: _Engine, t: float, preempted: bool) -> None:
        """Start a run of decode-only iterations up to the next event that changes the batch (the first finish,
        the KV pool running out; one iteration after a preemption), priced at both ends and interpolated."""
        n, steps, b = eng.n, eng.steps, eng.block
        ctx = eng.off_view + steps
        ctx_sum = eng.off_sum + n * steps
        eng.next_end = end = eng.ends[0]
        eng.start, eng.head, eng.decoding = t, False, True
        if preempted:
            k = 1
        else:
            k = end - steps
            if k > self.max_run:
                k = self.max_run
        cap = eng.cap_blocks - eng.pf_blocks
        if k > 1 and (ctx_sum + n * (k + b - 2)) // b > cap and int(_sum((ctx + (k + b - 2)) // b)) > cap:
            lo, hi = 0, k - 1  # the iteration lo fits, hi does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if int(_sum((ctx + (mid + b - 1)) // b)) <= cap else (lo, mid)
            k = hi
        price = eng.cost.iteration_s
        t0 = price(_EMPTY, _EMPTY, ctx)
        t1 = price(_EMPTY, _EMPTY, ctx + (k - 1)) if k > 1 else t0
        if not (0.0 <= t0 < math.inf and 0.0 <= t1 < math.inf):
            self.bad_time(eng, t1 if 0.0 <= t0 < math.inf else t0)
        slope = (t1 - t0) / (k - 1) if k > 1 else 0.0
        eng.k, eng.t0, eng.slope = k, t0, slope
        rows = self.rows
        eng.row = len(rows)
        rows.append((eng.index, t, k, t0, slope, 0, n, ctx_sum, len(eng.waiting)))
        eng.gen = gen = eng.gen + 1
        _push(self.heap, (t + k * t0 + slope * k * (k - 1) / 2, 1, next(self.seq), eng.index, gen))

    def bad_time(self, eng: _Engine, value: float) -> None:
        raise ValueError(
            f"engine {eng.index}: iteration_s returned {value!r}; it must be a finite number >= 0"
        )

    def admit(
        self,
        eng: _Engine,
        extra: int,
        budget: int,
        new_tokens: list[int],
        context: list[int],
        with_decodes: bool,
    ) -> None:
        """Admit waiting requests FCFS while a slot, KV blocks (beside what the running requests hold in the decode
        iteration ``extra`` from now: -1 now, 0 this iteration; under ``full`` admission, beside the blocks the
        admitted requests reserved for their whole length) and token budget remain; prefills go to
        ``new_tokens``/``context`` and ``eng.prefilling``, hand-offs to the decodes."""
        reserve = self.reserve_full and not eng.prefill_only
        held, pf0 = (eng.reserved, 0) if reserve else (eng.blocks_needed(extra, exact=False), eng.pf_blocks)
        free = eng.cap_blocks - held
        exact = reserve or held == pf0  # reservations, or no decodes: the count is exact
        slots = self.max_seqs - eng.n - len(eng.prefilling)
        waiting, b = eng.waiting, eng.block
        ids: list[int] = []
        ctx: list[int] = []
        left: list[int] = []
        while waiting and slots > 0 and budget > 0:
            i = waiting[0]
            c = self.prompt[i] + self.generated[i]
            blocks = -(-c // b)
            need = -(-(self.prompt[i] + self.out[i] - 1) // b) if reserve else blocks
            hit = 0
            if self.kv_ready[i]:  # a hand-off: its KV is here, it decodes at once
                chunk = 0
            else:
                if (
                    self.hit is not None and not self.generated[i]
                ):  # a first prefill: the cached prefix is reused
                    hit = self.hit[i]
                chunk = min(c - hit, budget, self.max_chunk) if self.chunked else c - hit
                if chunk > budget and (new_tokens or ids or (with_decodes and eng.n)):
                    break
            if need > free:
                if exact:
                    break
                exact = True  # the bound was too coarse: count the blocks the decodes hold
                free += (held - pf0) - (eng.blocks_needed(extra) - eng.pf_blocks)
                if need > free:
                    break
            heapq.heappop(waiting)
            free -= need
            if reserve:
                eng.reserved += need
            slots -= 1
            if chunk:
                budget -= chunk
                eng.prefilling.append([i, c, hit, blocks, chunk])
                eng.pf_blocks += blocks
                new_tokens.append(chunk)
                context.append(hit)
            else:
                budget -= 1
                ids.append(i)
                ctx.append(c)
                left.append(self.out[i] - self.generated[i])
        if ids:
            eng.add_decodes(ids, ctx, left)

    # ---- tables ----
    def result(self, emit_delay_s: float = 0.0) -> RequestSimResult:
        """The tables and statistics; tokens reach the client ``emit_delay_s`` after their iteration ends."""
        flat = np.fromiter(itertools.chain.from_iterable(self.rows), np.float64, len(self.rows) * ROW_FIELDS)
        table = flat.reshape(-1, ROW_FIELDS)
        caps = np.array([e.cap_blocks * e.block for e in self.engines], dtype=np.int64)
        return sim_result(
            self.req,
            arrival_s=self.arrival,
            first_token_s=np.array(self.first_token, dtype=np.float64) + emit_delay_s,
            finish_s=np.array(self.finish, dtype=np.float64) + emit_delay_s,
            preemptions=self.preemptions,
            engine=np.array(self.engine_of, dtype=np.int64),
            prefill_engine=np.array(self.prefill_engine_of, dtype=np.int64),
            iterations=iteration_table(table, caps),
        )
