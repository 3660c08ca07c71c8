"""The timing protocol, shared byte for byte by every single-request runner (see DESIGN.md).

One run = prefill the prompt (time to first token), then decode until N new tokens exist (decode speed =
(N - 1) / time from the first new token to the last). W warm-ups, then R timed runs: median, min, max.
Runners return host values, so every clock read here follows finished device work."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from runners.base import Runner, RunSpec

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


def measure(runner: Runner, spec: RunSpec, progress: Progress) -> dict[str, Any]:
    """Load, warm up, time R runs, then score the probe. Returns the record's metrics, tokens and logits."""
    progress("loading")
    start = time.perf_counter()
    runner.load()
    load_s = time.perf_counter() - start

    ttft, decode, first_call_s = [], [], 0.0
    for i in range(spec.warmups + spec.runs):
        timed = i >= spec.warmups
        progress(f"run {i - spec.warmups + 1}/{spec.runs}" if timed else f"warm-up {i + 1}/{spec.warmups}")
        to_first, to_last, tokens = timed_run(runner, spec)
        if i == 0:
            first_call_s = to_first + to_last  # lazy compilation and session building show here
        if timed:
            ttft.append(to_first * 1e3)
            decode.append((spec.new_tokens - 1) / to_last)

    progress("scoring the probe")
    logits = runner.score(spec.probe, spec.probe_prefill)
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
    return {"metrics": metrics, "tokens": tokens, "logits": logits}


def reference_logits(runner: Runner, spec: RunSpec, progress: Progress) -> dict[str, Any]:
    """The reference's greedy tokens and probe logits, untimed: what the reference supplies to the other
    rows when it is not itself being timed."""
    progress("loading the reference")
    runner.load()
    progress("generating the reference tokens")
    tokens = timed_run(runner, spec)[2]
    progress("scoring the probe")
    return {"metrics": {}, "tokens": tokens, "logits": runner.score(spec.probe, spec.probe_prefill)}
