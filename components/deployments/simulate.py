"""An iteration-level simulation of a serving engine, read as a benchmark client reads it.

Requests (a closed loop of C clients with a warm-up phase, as ``aiperf --concurrency C --num-requests 20C
--warmup-request-count 2C``; a batch submitted at once; or a fixed arrival rate) enter the engine's
scheduler. Each step is formed as the engine forms it (``engines.base.POLICIES``): the running decodes and
prefill chunks under the token budget and max running requests, admitted while the paged KV cache has room
(the memory left after weights and activations at the engine's memory fraction), requests waiting -- or
preempted -- when it is full. Each step's time is its kernel time (``stepmodel.StepModel``: the op engine's
best tier for that GPU) plus the engine's per-step cost.

Fast: while the step is decode-only and nothing can change (no prefill work, no admission possible) the
simulation jumps to the next event (a request finishing, an arrival, the KV cache filling) in one move:
decode attention is linear in the context, so k steps cost k steps at the mean context.

Every step also accumulates its cost FEATURES (decode kernels, prefill kernels, 1, sequences, has prefill):
the step time is ``theta @ features`` with theta = (kernel scales, base, per-sequence, prefill costs) of
``engines.base.StepCost``. In a closed loop the order of steps does not depend on their durations, so a
request's TTFT and end-to-end latency are linear in theta: the bench fits an engine's constants from ONE
simulation per run (``RequestStats.features``).
"""

from __future__ import annotations

import heapq
import itertools
import math
import struct
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from components.deployments.engines.base import ServingEngine, StepCost
from components.deployments.stepmodel import StepModel

CLOSED, BATCH, RATE = "closed", "batch", "rate"
# decode kernels, prefill kernels, steps, sequences in steps, steps with prefill, all-reduces, layers run
N_FEATURES = 7
ZERO = (0.0,) * N_FEATURES
# distinct (batch, context, padding) decode times a simulation keeps (a whole-catalog rank's are bounded)
DECODE_MEMO = 1 << 16
CLIENT_DELAY_US = 2000.0  # mean client round trip between a response and the next request (jittered)
SGLANG_NEW_TOKEN_RATIO = 0.7  # SGLang reserves this share of each running request's remaining output


@dataclass(frozen=True)
class Workload:
    """What the client sends: ``kind`` closed (``concurrency`` clients, ``requests`` measured after
    ``warmup``), batch (``concurrency`` requests at t = 0) or rate (``requests`` at ``rate`` per second)."""

    isl: int
    osl: int
    concurrency: int = 1
    kind: str = CLOSED
    requests: int | None = None  # measured requests (default 20 x concurrency; batch: concurrency)
    warmup: int | None = None  # default 2 x concurrency (closed loop only)
    rate: float = 0.0
    prefilled: bool = False  # disaggregated decode worker: requests arrive with their KV cache
    client_delay_us: float = CLIENT_DELAY_US  # closed loop: a client's next request follows after 0-2x this
    # closed loop: the clients' first requests spread over this span (the steady state the warm-up reaches:
    # clients out of phase), 0 = all at once
    stagger_us: float = 0.0
    # closed loop: a fixed time each client spends elsewhere between a first token and its next request (a
    # disaggregated prefill worker: the request's decode on the decode worker)
    think_us: float = 0.0
    seed: int = 0

    def measured(self) -> int:
        if self.kind == BATCH:
            return self.concurrency
        return self.requests or 20 * self.concurrency

    def warmups(self) -> int:
        return (2 * self.concurrency if self.warmup is None else self.warmup) if self.kind == CLOSED else 0


def theta(cost: StepCost) -> np.ndarray:
    """The step-cost coefficients of the step features (the front-end TTFT terms are not per step)."""
    return np.asarray(cost.vector()[:N_FEATURES], dtype="float64")


@dataclass
class RequestStats:
    """The measured requests of one simulation: per request arrival, first token and finish times (us),
    and the same as feature vectors (times = features @ theta)."""

    arrival_us: np.ndarray
    arrival_extra_us: np.ndarray  # from arrival to the first step boundary after it (not in the features)
    first_us: np.ndarray
    finish_us: np.ndarray
    f_arrival: np.ndarray
    f_first: np.ndarray
    f_finish: np.ndarray
    osl: int
    steps: int
    decode_batch: float  # mean decode batch over decode steps (of one attention-DP rank)
    kv_capacity_tokens: float
    preemptions: int = 0
    notes: list[str] = field(default_factory=list)

    def features(self) -> tuple[np.ndarray, float, np.ndarray]:
        """(TTFT row, TTFT extra us, TPOT row) averaged over the measured requests: TTFT = row @ theta +
        extra (the wait for the step under way at arrival, at the simulated step cost), TPOT = row @
        theta."""
        ttft = (self.f_first - self.f_arrival).mean(axis=0)
        tpot = ((self.f_finish - self.f_first) / max(self.osl - 1, 1)).mean(axis=0)
        return ttft, float(self.arrival_extra_us.mean()), tpot

    def metrics(self) -> dict[str, float]:
        """TTFT, TPOT (aiperf: (e2e - TTFT) / (osl - 1)), e2e (ms, means over requests) and output tokens/s
        over the measured requests' span."""
        ttft = self.first_us - self.arrival_us
        e2e = self.finish_us - self.arrival_us
        tpot = (e2e - ttft) / max(self.osl - 1, 1)
        span = float(self.finish_us.max() - self.arrival_us.min()) or 1.0
        return {
            "ttft_ms": float(ttft.mean()) / 1e3,
            "tpot_ms": float(tpot.mean()) / 1e3,
            "e2e_ms": float(e2e.mean()) / 1e3,
            "tokens_per_s": len(e2e) * self.osl / (span / 1e6),
        }


class _Sim:
    """One run of the scheduler (see the module docstring). Plain Python floats, tuples and lists in the
    loop (a whole-catalog rank runs hundreds of thousands of steps: numpy per step was most of its time);
    per-request state in lists indexed by request id."""

    def __init__(self, step: StepModel, engine: ServingEngine, kv_tokens: float, w: Workload) -> None:
        self.step, self.engine, self.w = step, engine, w
        self.theta = theta(engine.cost)
        self.th = tuple(float(x) for x in self.theta)
        self.policy = engine.policy
        self.mixed = engine.mixed_chunk and engine.policy == "prefill-first"
        # attention DP: the worker's ranks share the queue, each with the engine's budget and batch limit
        self.dp = max(int(getattr(step, "dp", 1)), 1)
        self.budget = engine.max_num_batched_tokens * self.dp
        self.max_seqs = engine.max_num_seqs * self.dp
        self.kv_cap = float(kv_tokens)
        self.t = 0.0
        self.f = ZERO  # the step features so far (N_FEATURES floats)
        self.counter = 0  # decode steps so far
        self.steps = 0
        self.batch_sum = 0.0
        self.preemptions = 0
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.decoding: list[tuple[int, int, int]] = []  # heap of (finish counter, rid, version)
        n_all = w.warmups() + w.measured()
        self.version = [0] * n_all  # admissions into decode so far (heap entries of older ones are stale)
        self.done_prompt = [0] * n_all  # prefill tokens done (current admission)
        self.prompt = [0] * n_all  # tokens to prefill (isl; + generated after a preemption)
        self.generated = [0] * n_all  # output tokens emitted before the current admission
        self.base = [0] * n_all  # decoders: context - counter
        self.order = [0] * n_all  # admission order (newest preempted first)
        self.n_dec = 0
        self.sum_base = 0
        self.sum_finish = 0
        self.prefill_tokens = 0  # KV tokens held by requests still prefilling
        self.admitted = 0
        nan = math.nan
        self.arr_t, self.arr_f = [0.0] * n_all, [ZERO] * n_all
        self.first_t, self.first_f = [nan] * n_all, [ZERO] * n_all
        self.fin_t, self.fin_f = [nan] * n_all, [ZERO] * n_all
        self.issued = 0
        self.n_all = n_all
        self.finished = 0
        self.future: list[tuple[float, int]] = []  # heap of (time sent, rid) not yet at the scheduler
        self.arr_extra = [0.0] * n_all
        # the clients' jitter draws, in the order they are used (one generator stream, drawn at once)
        self.jitter = np.random.default_rng(w.seed).random(n_all).tolist()
        self.pads: dict[int, int] = {}
        # decode times by (batch, context, padding): a closed loop's decode steps come back to the same
        # batch and mean context (most calls), and a one-step jump times the same step twice
        self.decode_memo: dict[tuple[int, float, int | None], float] = {}
        th = self.th
        # the per-step terms of a decode-only step that do not depend on its batch (``_jump``'s estimate)
        self.ar, self.layers = step.allreduces, step.layers
        self.per_fixed = th[5] * self.ar + th[6] * self.layers

    # ------------------------------------------------------------------ arrivals and KV accounting
    def _issue(self, when: float) -> None:
        """A request the client sends at ``when`` (it reaches the scheduler at the next step boundary)."""
        rid = self.issued
        self.issued += 1
        heapq.heappush(self.future, (when, rid))

    def _arrive(self, rid: int, when: float) -> None:
        self.arr_t[rid], self.arr_f[rid] = when, self.f
        self.arr_extra[rid] = self.t - when
        self.prompt[rid] = self.w.isl
        self.generated[rid] = 0
        self.waiting.append(rid)

    def _start(self) -> None:
        w = self.w
        if w.kind == RATE:
            gap = 1e6 / w.rate
            for i in range(self.n_all):
                self._issue(i * gap)
        else:  # batch: every request at t = 0; closed loop: the clients spread over ``stagger_us``
            n = min(w.concurrency, self.n_all)
            spread = w.stagger_us if w.kind == CLOSED else 0.0
            for i in range(n):
                self._issue(spread * i / n)

    def _on_finish(self) -> None:
        """Closed loop: the client sends its next request after its round trip (jittered, so clients that
        finish in the same step do not come back in lockstep)."""
        self.finished += 1
        if self.w.kind == CLOSED and self.issued < self.n_all:
            jitter = self.w.client_delay_us * 2.0 * self.jitter[self.finished - 1]
            self._issue(self.t + self.w.think_us + jitter)

    def _decode_tokens(self) -> float:
        return self.sum_base + self.n_dec * self.counter

    def _used(self) -> float:
        """KV tokens held (or reserved, per policy) by running requests."""
        policy, n_dec = self.policy, self.n_dec
        if policy == "no-evict":  # the whole isl + osl of every running request is reserved
            return float(len(self.prefilling) + n_dec) * (self.w.isl + self.w.osl)
        used = self.prefill_tokens + self._decode_tokens()
        if policy == "prefill-first":
            remaining = self.sum_finish - n_dec * self.counter
            used += SGLANG_NEW_TOKEN_RATIO * remaining
        return used + (len(self.prefilling) + n_dec) * self.engine.block_size / 2

    def _decode_us(self, n: int, ctx: float, padded: int | None = None) -> float:
        """``StepModel.decode_us``, each distinct question timed once per simulation."""
        key = (n, ctx, padded)
        found = self.decode_memo.get(key)
        if found is None:
            if len(self.decode_memo) >= DECODE_MEMO:
                self.decode_memo.clear()
            found = self.decode_memo[key] = self.step.decode_us(n, ctx, padded)
        return found

    def _admissible(self, rid: int) -> bool:
        running = len(self.prefilling) + self.n_dec
        if running >= self.max_seqs:
            return False
        policy = self.policy
        if policy == "no-evict":
            need: float = self.w.isl + self.w.osl
        elif policy == "prefill-first":
            need = self.prompt[rid] + SGLANG_NEW_TOKEN_RATIO * (self.w.osl - self.generated[rid])
        else:
            need = min(self.prompt[rid], self.budget)
        return self._used() + need <= self.kv_cap

    def _graph(self, n: int) -> int:
        found = self.pads.get(n)
        if found is None:
            found = self.pads[n] = self.engine.graph_batch(n)
        return found

    # ------------------------------------------------------------------ steps
    def _advance(self, kernel_dec: float, kernel_pre: float, seqs: int, prefill: bool, k: int) -> None:
        d, p, one, s = kernel_dec * k, kernel_pre * k, 1.0 * k, seqs * k
        pre, ar, lay = float(prefill) * k, self.ar * k, self.layers * k
        f, th = self.f, self.th
        self.f = (f[0] + d, f[1] + p, f[2] + one, f[3] + s, f[4] + pre, f[5] + ar, f[6] + lay)
        self.t += d * th[0] + p * th[1] + one * th[2] + s * th[3] + pre * th[4] + ar * th[5] + lay * th[6]
        self.steps += k

    def _chunks(self, budget: int) -> list[tuple[int, int]]:
        """(rid, tokens) prefill chunks of this step within ``budget``, admitting waiting requests."""
        out: list[tuple[int, int]] = []
        if not (self.prefilling or self.waiting):
            return out
        chunked = self.engine.chunked_prefill
        for rid in self.prefilling:
            if budget <= 0:
                break
            left = self.prompt[rid] - self.done_prompt[rid]
            take = min(left, budget)
            out.append((rid, take))
            budget -= take
        while self.waiting and budget > 0 and self._admissible(self.waiting[0]):
            rid = self.waiting[0]
            left = self.prompt[rid]
            if not chunked and left > budget and (out or left <= self.engine.max_num_batched_tokens):
                break  # a whole prompt that does not fit this step's budget waits for the next one
            self.waiting.popleft()
            self.prefilling.append(rid)
            self.done_prompt[rid] = 0
            self.order[rid] = self.admitted
            self.admitted += 1
            take = min(left, budget)
            out.append((rid, take))
            budget -= take
        return out

    def _preempt_for(self, need: float) -> None:
        """vLLM: free the newest running requests' KV until ``need`` more tokens fit (recompute later)."""
        while self._used() + need > self.kv_cap and (self.n_dec + len(self.prefilling)) > 1:
            victims = [(self.order[r], r) for r in self.prefilling] + [
                (self.order[r], r) for _, r, v in self.decoding if self.version[r] == v
            ]
            _, rid = max(victims)
            if rid in self.prefilling:
                self.prefilling.remove(rid)
                self.prefill_tokens -= self.done_prompt[rid]
            else:
                finish = next(f for f, r, v in self.decoding if r == rid and self.version[r] == v)
                self.version[rid] += 1
                self.n_dec -= 1
                self.sum_base -= self.base[rid]
                self.sum_finish -= finish
                done = self.w.osl - (finish - self.counter)
                self.generated[rid] = done
                self.prompt[rid] = self.w.isl + done
            self.waiting.appendleft(rid)
            self.preemptions += 1

    def _finish_prefills(self, chunks: list[tuple[int, int]]) -> None:
        done_prompt, prompt, generated = self.done_prompt, self.prompt, self.generated
        for rid, take in chunks:
            done_prompt[rid] += take
            self.prefill_tokens += take
            if done_prompt[rid] < prompt[rid]:
                continue
            self.prefilling.remove(rid)
            self.prefill_tokens -= done_prompt[rid]
            if generated[rid] == 0:
                self.first_t[rid], self.first_f[rid] = self.t, self.f
                generated[rid] = 1
            left = self.w.osl - generated[rid]
            if left <= 0:
                self.fin_t[rid], self.fin_f[rid] = self.t, self.f
                self._on_finish()
                continue
            self._enter_decode(rid, prompt[rid] + (1 if prompt[rid] == self.w.isl else 0), left)

    def _enter_decode(self, rid: int, ctx: int, left: int) -> None:
        finish = self.counter + left
        v = self.version[rid]
        heapq.heappush(self.decoding, (finish, rid, v))
        self.base[rid] = ctx - self.counter
        self.sum_base += self.base[rid]
        self.sum_finish += finish
        self.n_dec += 1

    def _pop_finished(self) -> None:
        decoding, version, counter = self.decoding, self.version, self.counter
        while decoding and decoding[0][0] <= counter:
            finish, rid, v = heapq.heappop(decoding)
            if version[rid] != v:
                continue
            version[rid] = v + 1
            self.n_dec -= 1
            self.sum_base -= self.base[rid]
            self.sum_finish -= finish
            self.fin_t[rid], self.fin_f[rid] = self.t, self.f
            self._on_finish()
        self._clean()

    def _clean(self) -> None:
        """Drop heap entries of preempted or finished admissions."""
        while self.decoding and self.version[self.decoding[0][1]] != self.decoding[0][2]:
            heapq.heappop(self.decoding)

    def _decode_step(self, with_prefill: bool) -> bool:
        return self.n_dec > 0 and not (with_prefill and self.policy == "prefill-first" and not self.mixed)

    def run(self) -> RequestStats:
        self._start()
        guard = 0
        # loop invariants read once (the loop runs hundreds of thousands of times)
        future, prefilled, decode_first = self.future, self.w.prefilled, self.policy == "decode-first"
        # vLLM (and SGLang's mixed chunk) count the decodes in the step's budget; SGLang otherwise runs
        # prefill apart; TensorRT-LLM's max_num_tokens bounds the context tokens (a whole prompt enters
        # beside the generations)
        shared = decode_first or self.mixed
        done_prompt, prompt, step, n_all = self.done_prompt, self.prompt, self.step, self.n_all
        while self.finished < n_all:
            guard += 1
            if guard > 10_000_000:
                raise RuntimeError("simulation did not converge")
            if (future and future[0][0] <= self.t) or prefilled:
                self._arrivals()
            if not (self.prefilling or self.n_dec or self.waiting):
                if not future:
                    break
                self.t = max(self.t, future[0][0])  # idle: the next request starts a step on arrival
                continue
            if decode_first and self.n_dec:
                self._preempt_for(self.n_dec)
            budget = self.budget
            chunks = (
                self._chunks(budget - (self.n_dec if shared else 0))
                if self.prefilling or self.waiting
                else []
            )
            decoding = self._decode_step(bool(chunks))
            if not chunks and not decoding:
                if self.waiting and not self.n_dec and not self.prefilling:
                    raise _NoRoom(self.w.isl)
                continue
            if not chunks:
                self._jump()
                continue
            n = self.n_dec if decoding else 0
            ctx = self._decode_tokens() / self.n_dec + 1 if n else 0.0
            pairs: list[tuple[float, float]] = []
            ends: list[bool] = []
            for rid, take in chunks:  # (a loop: cheaper than two comprehensions of one or two chunks)
                done = done_prompt[rid] + take
                pairs.append((float(take), float(done)))
                ends.append(done >= prompt[rid])
            if self.dp == 1:
                ending = sum(ends)
                total = step.step_us(n, ctx, pairs, ending)
                dec = self._decode_us(n, ctx) if n else 0.0
                seqs = n + ending
            else:
                total, dec, seqs = step.rank_step_us(n, ctx, pairs, ends)
            self._advance(min(dec, total), max(total - dec, 0.0), seqs, True, 1)
            if n:
                self.counter += 1
                self.batch_sum += n / self.dp
            self._finish_prefills(chunks)
            if self.decoding and self.decoding[0][0] <= self.counter:
                self._pop_finished()
        return self._stats()

    def _arrivals(self) -> None:
        while self.future and self.future[0][0] <= self.t:
            when, rid = heapq.heappop(self.future)
            self._arrive(rid, when)
        if self.w.prefilled:
            while self.waiting and self._admissible(self.waiting[0]):
                rid = self.waiting.popleft()
                self.order[rid] = self.admitted
                self.admitted += 1
                self.first_t[rid], self.first_f[rid] = self.t, self.f
                self.generated[rid] = 1
                self._enter_decode(rid, self.w.isl + 1, self.w.osl - 1)

    def _jump(self) -> None:
        """Decode-only steps up to the next event, in one move."""
        decoding = self.decoding
        if self.version[decoding[0][1]] != decoding[0][2]:
            self._clean()
        n, counter = self.n_dec, self.counter
        k = decoding[0][0] - counter
        if self.policy == "decode-first":
            room = self.kv_cap - self._used()
            k = min(k, max(1, int(room // n)))
        ctx = self._decode_tokens() / n + 1
        rank = -(-n // self.dp)  # the decodes of the busiest attention-DP rank
        pad = self._graph(rank)  # decode-only steps replay the captured graph of this size
        if self.future:
            th = self.th
            per = self._decode_us(rank, ctx, pad) * th[0] + th[2] + th[3] * rank
            per += self.per_fixed
            k = min(k, max(1, math.ceil((self.future[0][0] - self.t) / max(per, 1e-9))))
        k = max(int(k), 1)
        mid = ctx + (k - 1) / 2.0
        self._advance(self._decode_us(rank, mid, pad), 0.0, rank, False, k)
        self.counter = counter = counter + k
        self.batch_sum += n / self.dp * k
        if decoding[0][0] <= counter:
            self._pop_finished()

    def _stats(self) -> RequestStats:
        w = self.w
        keep = slice(w.warmups(), self.n_all)
        notes = []
        if self.preemptions:
            notes.append(f"{self.preemptions} preemptions (KV cache full: requests recomputed)")

        def times(values: list[float]) -> np.ndarray:
            return np.asarray(values[keep], dtype="float64")

        def rows(values: list[tuple[float, ...]]) -> np.ndarray:
            # packed as bytes in one call and read in one copy: numpy reads a list of tuples element by
            # element (a tenth of a simulation's time)
            kept = values[keep]
            packed = struct.pack(f"{N_FEATURES * len(kept)}d", *itertools.chain.from_iterable(kept))
            return np.frombuffer(bytearray(packed), dtype="float64").reshape(-1, N_FEATURES)

        return RequestStats(
            times(self.arr_t),
            times(self.arr_extra),
            times(self.first_t),
            times(self.fin_t),
            rows(self.arr_f),
            rows(self.first_f),
            rows(self.fin_f),
            osl=w.osl,
            steps=self.steps,
            decode_batch=self.batch_sum / max(self.counter, 1),
            kv_capacity_tokens=self.kv_cap,
            preemptions=self.preemptions,
            notes=notes,
        )


class _NoRoom(ValueError):
    def __init__(self, isl: int) -> None:
        super().__init__(f"isl {isl}: one request does not fit the KV cache")


# simulations already run, by (id(step model), engine, KV tokens, workload): (step model, stats)
Simulations = dict[tuple[int, ServingEngine, float, Workload], tuple[StepModel, RequestStats]]


def simulate(
    step: StepModel,
    engine: ServingEngine,
    kv_tokens: float,
    workload: Workload,
    memo: Simulations | None = None,
) -> RequestStats:
    """Run the engine's scheduler over the workload; the measured requests' times and features. ``memo``:
    the simulations a caller already ran (a bench whose runs repeat a deployment, workload and engine
    settings: a fifth of the silicon runs' simulations): the same inputs give the same stats, so those
    are reused (shared: read them, do not change them)."""
    if memo is None:
        return _Sim(step, engine, kv_tokens, workload).run()
    key = (id(step), engine, float(kv_tokens), workload)
    found = memo.get(key)
    if found is None or found[0] is not step:  # the step model held with its stats: its id is not reused
        found = memo[key] = (step, _Sim(step, engine, kv_tokens, workload).run())
    return found[1]
