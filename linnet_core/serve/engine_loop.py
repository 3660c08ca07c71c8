"""ServeEngine: the engine loop. Requests arrive from any thread; one loop thread owns the scheduler and the
model and repeats schedule -> run -> postprocess (nano-vllm's step) while there is work:

  1. apply cancellations (a client that went away gives its row back at once),
  2. admit waiting requests into free rows,
  3. prefill this step's prompt chunks (long prompts in several steps), all in one model call; where the engine
     batches one-token chunks (engine.py), the requests that decode ride in the same call, one token each, and
     the step makes no other model call (vLLM's chunked prefill),
  4. hand the prefills' events (each finished prompt's first token) to the listener at once, so a request's
     first token leaves as soon as its prefill made it, not after the decode step that follows,
  5. otherwise one batched decode step over every row, for the requests whose prompts are in,
  6. hand the decode step's events (one new token per request, finishes) to the listener in one call.

Where the engine starts a step without waiting for it (OverlappingEngine in engine.py: on a GPU) and every decoding
request is greedy, step 5 launches the decode step and then hands out the events of the step before it, so the host's
bookkeeping runs while the device computes (vLLM's async scheduling). The step's tokens are waited for in the next
iteration, or before anything that needs them: a prefill call, a sampled step, going idle. A request that finishes
in step k has its row computed once more in step k + 1, as every unused row is; that token is dropped.

An accepted request always runs to its end: max_tokens, EOS (unless ignored), or its cancellation. If the
model fails, every request in flight gets an error event and new ones are refused: none waits forever."""

from __future__ import annotations

import ctypes
import threading
import time
from collections import defaultdict
from dataclasses import astuple, dataclass, replace
from typing import Callable

import numpy as np

from linnet_core.engine import Engine
from linnet_core.errors import UserError
from linnet_core.serve.config import ServeConfig
from linnet_core.serve.model_step import ModelStep
from linnet_core.serve.request import Event, Request, Status
from linnet_core.serve.scheduler import Scheduler

Listener = Callable[[list[Event]], None]


@dataclass
class PendingStep:
    """A decode step launched and not yet waited for: the wait for its tokens, the requests that were decoding
    when it started, and when it was launched (perf_counter)."""

    tokens: Callable[[], np.ndarray]
    decoding: list[Request]
    launched: float


class EngineFailed(Exception):
    """The model raised; the engine serves no more requests."""


@dataclass(frozen=True)
class StepTimes:
    """Where the loop's time went, summed since the engine started: prompt tokens prefilled and decode tokens made,
    with the seconds the model took for each (the engine calls), and the loop's steps with their whole seconds. A
    client's throughput counts prefill and decode alike; these say how much of it each phase took, how many rows a
    decode step carried on average, and how much of a step the host spent outside the engine's calls and its waits
    for the device (scheduling, bookkeeping, handing events out).

    Where steps overlap (on a GPU), a decode step's seconds run from when the device could start it (its launch, or
    the previous call's end if later) to its tokens' arrival: the device's time for it while the device is the limit,
    the loop's period while the host is. The host's seconds then run beside the device's: the host is the limit when
    they fill nearly the whole loop, and otherwise the device never waits for it."""

    prefill_tokens: int = 0
    prefill_s: float = 0.0  # prefill calls, with the decode tokens that rode in them
    rider_tokens: int = 0  # decode tokens made inside prefill calls (counted in neither decode figure)
    decode_steps: int = 0
    decode_tokens: int = 0
    decode_s: float = 0.0
    decode_blocked_s: float = 0.0  # the loop inside decode calls, or waiting for a launched step's tokens
    loop_steps: int = 0  # engine steps (one prefill call and one decode step at most) that had work
    loop_s: float = 0.0  # their wall time, model calls included

    @property
    def host_s(self) -> float:
        """The loop's time outside the model's calls and its waits for the device."""
        return max(0.0, self.loop_s - self.prefill_s - self.decode_blocked_s)

    def __add__(self, other: "StepTimes") -> "StepTimes":
        return StepTimes(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def __sub__(self, earlier: "StepTimes") -> "StepTimes":
        return StepTimes(*(a - b for a, b in zip(astuple(self), astuple(earlier))))


OMP_PAUSE_SOFT = 1  # OpenMP 5.0's omp_pause_soft


def release_openmp_workers() -> bool:
    """Ends the OpenMP worker threads that this thread's parallel regions started (torch's CPU kernels run on
    OpenMP); they start again if this thread runs another. Returns False where no OpenMP runtime is loaded.

    Why: libgomp keeps a team of workers per thread that ran a parallel region, and once all teams' threads
    outnumber the CPUs it stops spinning between regions and puts its workers to sleep, so each of a decode
    step's hundreds of regions pays a wake-up. The engine is built on one thread (its loading runs parallel
    regions) and stepped on the loop's: two teams on a CPU that fits one. Measured on the 0.5B shape, 8 rows,
    2 CPUs: 150-180 ms a step with two teams (about 700 context switches a step), 130 ms with one (none), the
    same as stepping it on the thread that built it."""
    try:
        pause = ctypes.CDLL(None).omp_pause_resource_all  # the runtime torch loaded, found by its global symbols
    except (AttributeError, OSError):
        return False
    return pause(OMP_PAUSE_SOFT) == 0


class ServeEngine:
    def __init__(self, engine: Engine, config: ServeConfig, eos_token_id: int | None = None, name: str = "engine"):
        if (engine.rows, engine.max_positions) != (config.rows, config.max_positions):
            raise UserError(
                f"the engine has {engine.rows} rows of {engine.max_positions} positions, "
                f"the serving config asks for {config.rows} x {config.max_positions}"
            )
        self.config, self.eos_token_id, self.name = config, eos_token_id, name
        self.scheduler = Scheduler(config)
        self.model = ModelStep(engine)
        self.times = StepTimes()  # whole steps, replaced, never mutated: another thread reads one consistent value
        self._step = StepTimes()  # the step in progress (listeners run inside it, before its wall time is known)
        self.failure: str | None = None  # why the model stopped, once it has
        self._lock = threading.Lock()  # guards the scheduler's state shared with submit() and cancel()
        self._cancels: set[str] = set()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._listener: Listener = lambda events: None
        self._decoded = False  # whether this step's prefill call made its decode tokens (riders)
        self._pending: PendingStep | None = None  # a decode step launched, its tokens not yet waited for
        self._device_free = 0.0  # perf_counter when the last model call or wait for the device ended

    # ---- any thread ----

    @property
    def steps(self) -> int:
        """Decode steps run, the loop step in progress's included, for /health and tests."""
        return self.times.decode_steps + self._step.decode_steps

    def submit(self, request: Request) -> None:
        """Queues a request; raises UserError (it can never run here) or QueueFull (not now)."""
        if not request.params.greedy and not self.model.can_sample:
            raise UserError(f"the {self.name} engine has no logits methods, so it serves greedy requests only (temperature 0)")
        with self._lock:
            if self.failure:
                raise EngineFailed(f"the engine has stopped: {self.failure}")
            self.scheduler.add(request)
        self._wake.set()

    def cancel(self, request_id: str) -> None:
        """Ends a request wherever it is (waiting or holding a row); its last event says "cancelled"."""
        with self._lock:
            self._cancels.add(request_id)
        self._wake.set()

    def load(self) -> dict[str, int]:
        """Rows in use and requests waiting, for /health."""
        with self._lock:
            return {"rows": self.config.rows, "rows_busy": self.scheduler.pool.num_used, "waiting": len(self.scheduler.waiting)}

    def start(self, listener: Listener) -> None:
        """Runs the loop on its own thread; the listener is called from it with each step's events."""
        assert self._thread is None, "the engine loop is already running"
        self._listener, self._stopping = listener, False
        self.model.compile_ahead(self.config.prefill_budget)  # before any request waits on a compile
        release_openmp_workers()  # this thread built the engine; from now on only the loop's thread runs it
        self._thread = threading.Thread(target=self._run, name="linnet-serve-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the loop after its current step; requests still queued get a "cancelled" event."""
        if self._thread is None:
            return
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)
        self._thread = None
        self._pending = None  # its requests are cancelled below
        with self._lock:
            left = self._drain()
        if left:
            self._listener([Event(r.id, (), "cancelled") for r in left])

    # ---- the loop's thread ----

    def _run(self) -> None:
        while not self._stopping:
            with self._lock:
                idle = not self.scheduler.has_work and not self._cancels
            if idle and self._pending is not None:  # a last step launched for requests that have all finished
                started = time.perf_counter()
                self._take_pending({}, {})  # no tokens to hand out; the host's mirror of last tokens catches up
                self._count_step(time.perf_counter() - started)
                continue
            if idle:
                self._wake.wait()
                self._wake.clear()
                continue
            started = time.perf_counter()
            for phase in (self.prefill_step, self.decode_step):
                try:
                    events = phase()
                except Exception as e:  # the model failed: end every request with the error, refuse new ones
                    self._listener(self._fail_all(f"{type(e).__name__}: {e}"))
                    return
                if events:
                    self._listener(events)
            self._count_step(time.perf_counter() - started)

    def step(self) -> list[Event]:
        """One iteration: cancellations, admissions, prefill chunks, one decode step. Returns its events (a
        request whose prompt finished this step has two, its prefill's first token and then its decode token, where
        the engine does not fold decoding into its prefill call)."""
        started = time.perf_counter()
        events = self.prefill_step() + self.decode_step() + self.finish_pending()
        self._count_step(time.perf_counter() - started)
        return events

    def _count_step(self, seconds: float) -> None:
        """Adds the step that took these seconds, with the model time it spent, to the engine's times."""
        self.times = self.times + replace(self._step, loop_steps=1, loop_s=seconds)
        self._step = StepTimes()

    def _add_time(self, **figures: float) -> None:
        """Adds figures (StepTimes' fields) to the step in progress."""
        self._step = replace(self._step, **{name: getattr(self._step, name) + value for name, value in figures.items()})

    def prefill_step(self) -> list[Event]:
        """Cancellations, admissions and this step's prefill chunks; the events of requests they ended or started."""
        tokens: dict[str, list[int]] = defaultdict(list)  # request id -> new tokens, in order
        finished: dict[str, str] = {}  # request id -> finish reason
        with self._lock:
            self._apply_cancels(finished)
            self.scheduler.admit()
            chunks = self.scheduler.prefill_chunks()
        if chunks:  # the prefill call reads what a launched step made
            self._take_pending(tokens, finished)
        start = time.perf_counter()
        riders = self.scheduler.decoding() if chunks and self.model.decodes_in_prefill else []
        firsts, ridden = self.model.prefill(chunks, riders)  # one engine call for all of them (none without chunks)
        prefill_s = time.perf_counter() - start
        for request, token in zip(riders, ridden):
            self._append(request, token, tokens, finished)
        for chunk, first in zip(chunks, firsts):
            chunk.request.prefilled += len(chunk.tokens)
            if chunk.is_last:
                chunk.request.status = Status.DECODING
                self._append(chunk.request, first, tokens, finished)
        self._decoded = bool(chunks) and self.model.decodes_in_prefill  # this step's decode happened in the call
        if chunks:
            self._device_free = start + prefill_s
            self._add_time(prefill_tokens=sum(len(c.tokens) for c in chunks), prefill_s=prefill_s, rider_tokens=len(riders))
        return self._events(tokens, finished)

    def decode_step(self) -> list[Event]:
        """One batched decode step over every row; one new token for each decoding request. None after a prefill
        call that the decoding requests rode in. Where the engine overlaps and every decoding request is greedy,
        the step is launched and the events returned are the step before's (see the module's docstring)."""
        tokens: dict[str, list[int]] = defaultdict(list)
        finished: dict[str, str] = {}
        decoding = [] if self._decoded else self.scheduler.decoding()
        self._decoded = False
        if decoding and self.model.overlaps and all(r.params.greedy for r in decoding):
            start = time.perf_counter()
            launched = PendingStep(self.model.start_decode(decoding), decoding, start)  # timed when its tokens arrive
            events = self.finish_pending()  # while the device runs the step just launched
            self._pending = launched
            return events
        self._take_pending(tokens, finished)  # a sampled step feeds the tokens the step before made
        decoding = [r for r in decoding if r.status is Status.DECODING]
        if decoding:
            start = time.perf_counter()
            new = self.model.decode(decoding)
            self._device_free = time.perf_counter()
            seconds = self._device_free - start
            self._add_time(decode_steps=1, decode_tokens=len(decoding), decode_s=seconds, decode_blocked_s=seconds)
            for request in decoding:
                self._append(request, int(new[request.row]), tokens, finished)
        return self._events(tokens, finished)

    def finish_pending(self) -> list[Event]:
        """The events of the launched decode step, after waiting for its tokens; none if there is none."""
        tokens: dict[str, list[int]] = defaultdict(list)
        finished: dict[str, str] = {}
        self._take_pending(tokens, finished)
        return self._events(tokens, finished)

    def _take_pending(self, tokens: dict, finished: dict) -> None:
        """Waits for the launched decode step, if any, and appends its token to each request still decoding (one
        that finished or was cancelled since the launch gets none); counted in the decode figures (StepTimes says how)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        start = time.perf_counter()
        new = pending.tokens()
        arrived = time.perf_counter()
        device_s = arrived - max(pending.launched, self._device_free)  # the device ran the steps before it until then
        self._device_free = arrived
        live = [r for r in pending.decoding if r.status is Status.DECODING]
        self._add_time(decode_steps=1, decode_tokens=len(live), decode_s=device_s, decode_blocked_s=arrived - start)
        for request in live:
            self._append(request, int(new[request.row]), tokens, finished)

    def _events(self, tokens: dict[str, list[int]], finished: dict[str, str]) -> list[Event]:
        """Frees the rows of finished requests; the events, one per request with news, in order."""
        with self._lock:
            for request_id in finished:
                request = self.scheduler.running.get(request_id)
                if request is not None:
                    self.scheduler.finish(request)
        ids = list(tokens) + [i for i in finished if i not in tokens]
        return [Event(i, tuple(tokens.get(i, ())), finished.get(i)) for i in ids]

    def _append(self, request: Request, token: int, tokens: dict, finished: dict) -> None:
        request.output.append(token)
        tokens[request.id].append(token)
        if request.done_generating:
            finished[request.id] = "length"
        elif token == self.eos_token_id and not request.params.ignore_eos:
            finished[request.id] = "stop"
        if request.id in finished:
            request.status = Status.FINISHED  # out of decoding() at once; its row is freed at the step's end

    def _apply_cancels(self, finished: dict) -> None:
        cancels, self._cancels = self._cancels, set()
        for request_id in cancels:
            request = self.scheduler.remove_waiting(request_id) or self.scheduler.running.get(request_id)
            if request is not None:
                self.scheduler.finish(request)
                finished[request_id] = "cancelled"

    def _fail_all(self, why: str) -> list[Event]:
        with self._lock:
            self.failure = why
            left = self._drain()
        return [Event(r.id, (), "error", why) for r in left]

    def _drain(self) -> list[Request]:
        """Takes every request out of the scheduler (rows freed); the caller holds the lock."""
        left = [*self.scheduler.waiting, *self.scheduler.running.values()]
        for request in left:
            if request.status is Status.WAITING:
                self.scheduler.remove_waiting(request.id)
            else:
                self.scheduler.finish(request)
        return left
