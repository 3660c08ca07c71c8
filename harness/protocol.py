"""The timing protocols (see DESIGN.md), each shared byte for byte by every runner of its kind.

Single request: one run = prefill the prompt (time to first token), then decode until N new tokens exist
(decode speed = (N - 1) / time from the first new token to the last). W warm-ups, then R timed runs: median,
min, max. Runners return host values, so every clock read here follows finished device work.

Serving: every request of the workload is submitted at start; the client keeps at most max_in_flight open
(as `vllm bench serve --max-concurrency`), and times each from the moment it is sent. Serving throughput =
generated tokens / wall time from the first send to the last completion; time to first token and the gaps
between token arrivals are taken at the client, per request. One untimed wave first, then R timed runs."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from harness.energy import EnergyCounter, per_token
from runners.base import Runner, RunSpec, ServingRunner

Progress = Callable[[str], None]


def spread(name: str, values: list[float]) -> dict[str, float]:
    """{name: median, name_min: min, name_max: max}."""
    return {name: statistics.median(values), f"{name}_min": min(values), f"{name}_max": max(values)}


def timed_run(runner: Runner, spec: RunSpec) -> tuple[float, float, list[int]]:
    """One run: (seconds to the first token, seconds from first to last token, the N tokens)."""
    start = time.perf_counter()
    first = runner.prefill(spec.prompt)
    first_at = time.perf_counter()
    rest = runner.decode(spec.new_tokens - 1)
    end = time.perf_counter()
    tokens = [first, *rest]
    assert len(tokens) == spec.new_tokens, f"{spec.runner} generated {len(tokens)} tokens, not {spec.new_tokens}"
    assert all(isinstance(t, int) for t in tokens), f"{spec.runner} returned non-int token ids: {tokens[:4]}"
    return first_at - start, end - first_at, tokens


def score_probe(runner: Runner | ServingRunner, spec: RunSpec, progress: Progress):
    """The probe's logits, or None in a later trial (mode "time"), whose row already has its first trial's."""
    if spec.mode == "time":
        return None
    progress("scoring the probe")
    return runner.score(spec.probe, spec.probe_prefill)


def measure(runner: Runner, spec: RunSpec, progress: Progress) -> dict[str, Any]:
    """Load, warm up, time R runs, then score the probe. Returns the record's metrics, tokens and logits."""
    progress("loading")
    start = time.perf_counter()
    runner.load()
    load_s = time.perf_counter() - start

    ttft, decode, first_call_s, before = [], [], 0.0, None
    counter = EnergyCounter(spec.device)
    for i in range(spec.warmups + spec.runs):
        timed = i >= spec.warmups
        progress(f"run {i - spec.warmups + 1}/{spec.runs}" if timed else f"warm-up {i + 1}/{spec.warmups}")
        if i == spec.warmups:
            before = counter.joules()  # one window over every timed run (harness/energy.py)
        to_first, to_last, tokens = timed_run(runner, spec)
        if i == 0:
            first_call_s = to_first + to_last  # lazy compilation and session building show here
        if timed:
            ttft.append(to_first * 1e3)
            decode.append((spec.new_tokens - 1) / to_last)
    energy = per_token(counter, before, spec.runs * spec.new_tokens, runner.notes)

    logits = score_probe(runner, spec, progress)
    metrics = {
        **spread("ttft_ms", ttft),
        **spread("decode_tok_s", decode),
        "load_s": load_s,
        "first_call_s": first_call_s,
        "runs": spec.runs,
        "warmups": spec.warmups,
        "prompt_tokens": len(spec.prompt),
        "new_tokens": spec.new_tokens,
    }
    # every timed value, for the parent's intervals over trials (harness/stats.py)
    samples = {"ttft_ms": ttft, "decode_tok_s": decode}
    if energy:  # a GPU whose counter answered (harness/energy.py): one figure, over every timed run
        metrics.update(spread("energy_j_per_tok", energy))
        samples["energy_j_per_tok"] = energy
    return {"metrics": metrics, "samples": samples, "tokens": tokens, "logits": logits}


def reference_logits(runner: Runner, spec: RunSpec, progress: Progress) -> dict[str, Any]:
    """The reference's greedy tokens and probe logits, untimed: what the reference supplies to the other
    rows when it is not itself being timed."""
    progress("loading the reference")
    runner.load()
    progress("generating the reference tokens")
    tokens = timed_run(runner, spec)[2]
    progress("scoring the probe")
    return {"metrics": {}, "tokens": tokens, "logits": runner.score(spec.probe, spec.probe_prefill)}


def truth_logits(runner: Runner, spec: RunSpec, progress: Progress) -> dict[str, Any]:
    """The float64 truth's probe logits (runners/transformers_truth.py), untimed: no tokens are generated."""
    progress("loading the float64 truth")
    runner.load()
    progress("the truth's forward over the probe")
    return {"metrics": {}, "tokens": None, "logits": runner.score(spec.probe, spec.probe_prefill)}


@dataclass(frozen=True)
class RequestTiming:
    """One request as its client saw it."""

    sent: float  # perf_counter when the request was sent
    arrivals: tuple[float, ...]  # perf_counter at each arrival of new tokens
    tokens: int  # new tokens received

    @property
    def ttft_s(self) -> float:
        return self.arrivals[0] - self.sent

    @property
    def gaps_s(self) -> list[float]:
        """Inter-token latency: the time between successive arrivals."""
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]


@dataclass(frozen=True)
class ServingRun:
    wall_s: float  # first send to last completion
    requests: tuple[RequestTiming, ...]

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.requests)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s


async def timed_request(runner: ServingRunner, prompt: list[int], max_tokens: int, gate: asyncio.Semaphore) -> RequestTiming:
    async with gate:  # at most max_in_flight requests open at once
        sent, arrivals, tokens = time.perf_counter(), [], 0
        async for new in runner.generate(prompt, max_tokens):
            arrivals.append(time.perf_counter())
            tokens += len(new)
    return RequestTiming(sent, tuple(arrivals), tokens)


async def serve_all(runner: ServingRunner, prompts: list[list[int]], max_tokens: int, in_flight: int) -> ServingRun:
    """Submits every prompt at once (at most in_flight open); every request must come back whole."""
    gate = asyncio.Semaphore(in_flight)
    requests = await asyncio.gather(*(timed_request(runner, p, max_tokens, gate) for p in prompts))
    short = [(i, r.tokens) for i, r in enumerate(requests) if r.tokens != max_tokens]
    assert not short, f"{runner.spec.runner}: requests (index, tokens) came back with other than {max_tokens} tokens: {short[:5]}"
    wall = max(r.arrivals[-1] for r in requests) - min(r.sent for r in requests)
    return ServingRun(wall, tuple(requests))


def percentiles(name: str, values: list[float]) -> dict[str, float]:
    """{name: median, name_min, name_max, name_p90, name_p99}; {} when there are no values."""
    if not values:
        return {}
    p90, p99 = np.percentile(values, [90, 99]).tolist()
    return {**spread(name, values), f"{name}_p90": p90, f"{name}_p99": p99}


async def serving_session(runner: ServingRunner, spec: RunSpec, progress: Progress):
    """Inside one event loop: the warm-up wave, the timed runs, then the reference prompt's greedy tokens."""
    w, prompts = spec.serving_workload, spec.serving_prompts
    start = time.perf_counter()  # the first call's time includes starting: linnet.serve on XLA compiles its steps there
    await runner.start()
    try:
        progress(f"warm-up: {w.warmup_requests} requests")
        await serve_all(runner, prompts[: w.warmup_requests], w.warmup_new_tokens, w.max_in_flight)
        first_call_s = time.perf_counter() - start
        runs, counter = [], EnergyCounter(spec.device)
        runner.timed_runs(True)
        before = counter.joules()  # one window over every timed run (harness/energy.py)
        for i in range(w.runs):
            progress(f"run {i + 1}/{w.runs}: {w.requests} requests")
            runs.append(await serve_all(runner, prompts, w.new_tokens, w.max_in_flight))
        energy = per_token(counter, before, sum(run.tokens for run in runs), runner.notes)
        runner.timed_runs(False)
        tokens = None
        if runner.token_ids and len(spec.prompt) + spec.new_tokens <= w.max_positions:  # comparable with the reference
            progress("the reference prompt")
            tokens = [t async for new in runner.generate(spec.prompt, spec.new_tokens) for t in new]
    finally:
        await runner.stop()
    return first_call_s, runs, tokens, energy


def measure_serving(runner: ServingRunner, spec: RunSpec, progress: Progress) -> dict[str, Any]:
    """Load, then the serving session, then score the probe. Returns the record's metrics, tokens and logits."""
    w = spec.serving_workload
    assert len(spec.serving_prompts) == w.requests, (len(spec.serving_prompts), w.requests)
    progress("loading")
    start = time.perf_counter()
    runner.load()
    load_s = time.perf_counter() - start
    first_call_s, runs, tokens, energy = asyncio.run(serving_session(runner, spec, progress))
    logits = score_probe(runner, spec, progress)
    requests = [r for run in runs for r in run.requests]
    runner.notes.append(f"serving workload '{w.name}': {w.description}; {w.runs} timed run(s)")
    metrics = {
        **spread("serving_tok_s", [run.tok_s for run in runs]),
        **spread("serving_wall_s", [run.wall_s for run in runs]),
        **percentiles("serving_ttft_ms", [r.ttft_s * 1e3 for r in requests]),
        **percentiles("serving_itl_ms", [g * 1e3 for r in requests for g in r.gaps_s]),
        "serving_tpot_ms": statistics.median((r.arrivals[-1] - r.arrivals[0]) * 1e3 / (r.tokens - 1) for r in requests)
        if w.new_tokens > 1 else None,
        "load_s": load_s,
        "first_call_s": first_call_s,
        "runs": w.runs,
        "serving_requests": w.requests,
        "serving_new_tokens": w.new_tokens,
        "serving_in_flight": w.max_in_flight,
    }
    # per timed run its throughput; per request its time to first token (so that the median, min and max over the
    # samples are the figures above: over requests)
    samples = {"serving_tok_s": [run.tok_s for run in runs], "serving_ttft_ms": [r.ttft_s * 1e3 for r in requests]}
    if energy:  # on a GPU whose energy counter answered (harness/energy.py): joules per generated token, all runs
        metrics.update(spread("serving_energy_j_per_tok", energy))
        samples["serving_energy_j_per_tok"] = energy
    return {"metrics": metrics, "samples": samples, "tokens": tokens, "logits": logits}
