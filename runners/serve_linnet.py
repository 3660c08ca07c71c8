"""linnet.serve rows: the serving engine in this process over one Linnet backend each (S = the workload's
in-flight bound rows of L positions, continuous batching), its requests streamed through AsyncClient, the
same path the HTTP server takes minus the sockets. Greedy on the device, EOS ignored."""

from __future__ import annotations

import os
from pathlib import Path

# as runners/_jax.py, without importing JAX for the rows that do not use it: no 75% GPU reservation at start-up
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from linnet_core.checkpoint import read_config
from linnet_core.serve.backends import EngineSpec, make_engine, unavailable
from linnet_core.serve.client import AsyncClient
from linnet_core.serve.config import ServeConfig
from linnet_core.serve.engine_loop import ServeEngine, StepTimes
from linnet_core.serve.request import SamplingParams
from runners import base


class LinnetServe(base.ServingRunner):
    backend = ""  # a linnet_core.serve.backends name (or module:function)

    @classmethod
    def unavailable(cls, spec):
        return unavailable(cls.backend)

    def mode(self) -> str | None:
        """The backend's variant for this row; None lets the backend pick per device."""
        return None

    @property
    def max_positions(self) -> int:
        """The workload's positions per row, or the probe's when it is longer: score() runs it through this cache."""
        return max(super().max_positions, len(self.spec.probe))

    def load(self):
        spec = self.spec
        engine_spec = EngineSpec(Path(spec.checkpoint), self.rows, self.max_positions, spec.dtype, spec.device,
                                 spec.work / "engine", self.mode())  # fmt: skip
        self.built = make_engine(self.backend, engine_spec)
        self.notes.extend(self.built.notes)
        config = ServeConfig(rows=self.rows, max_positions=self.max_positions,
                             max_waiting=spec.serving_workload.requests, **self.built.serve_options)  # fmt: skip
        self.serve = ServeEngine(self.built.engine, config, read_config(Path(spec.checkpoint)).eos_token_id, self.backend)
        blocks = f" (in whole blocks of {config.prefill_granule})" if config.prefill_granule > 1 else ""
        self.notes.append(f"linnet.serve: {config.rows} rows x {config.max_positions} positions, "
                          f"prefill chunks of <= {config.prefill_chunk} tokens, {config.prefill_budget} per step{blocks}")  # fmt: skip

    async def start(self):
        self.client = AsyncClient(self.serve)

    async def generate(self, prompt, max_tokens):
        stream = self.client.submit(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        try:
            async for event in stream:
                if event.finish_reason in ("error", "cancelled"):
                    raise RuntimeError(f"linnet.serve ended request {stream.id}: {event.finish_reason} {event.error or ''}")
                if event.tokens:
                    yield list(event.tokens)
        finally:
            stream.cancel()

    async def stop(self):
        self.client.close()
        self.metrics["serving_steps"] = self.serve.steps

    def timed_runs(self, starting):
        if starting:
            self.times_before = self.serve.times
            return
        self.metrics.update(step_metrics(self.serve.times - self.times_before))
        m = self.metrics
        if "serving_decode_tok_s" in m:
            self.notes.append(f"in the timed runs the engine decoded {m['serving_decode_tok_s']:.4g} tok/s in its decode steps "
                              f"({m['serving_decode_rows']:.3g} rows a step on average) and prefilled "
                              f"{m.get('serving_prefill_tok_s', 0):.4g} prompt tok/s; prefill took "
                              f"{m.get('serving_prefill_share', 0):.0%} of its model time; the host spent "
                              f"{m.get('serving_host_ms', 0):.3g} ms a step outside the engine's calls and its waits "
                              f"for the device ({m.get('serving_host_share', 0):.0%} of the loop's time)")  # fmt: skip
        if m.get("serving_rider_share"):
            self.notes.append(f"{m['serving_rider_share']:.0%} of the decode tokens were made inside prefill calls (the "
                              "decoding rows ride in a step's prefill call, so the step makes one model call)")  # fmt: skip

    def score(self, ids, n_prefill):
        """The engine's own cache path, in row 0, once the serving loop has stopped."""
        return self.built.engine.score(ids, n_prefill)


def step_metrics(times: StepTimes) -> dict[str, float]:
    """The timed runs' model time by phase (ServeEngine.times): decode tok/s within the decode steps, the rows a step
    carried, prefill tok/s, and prefill's share of the model's time. Comparable with a single-request row's decode
    tok/s, which leaves its prefill out too; a phase that did not run has no figures. And what the host costs: its
    milliseconds per engine step outside the engine's calls and its waits for the device, and their share of the
    loop's time (where steps overlap, on a GPU, the device computes meanwhile: StepTimes). Where decode tokens rode in
    prefill calls, their share of all decode tokens: those calls' time counts as prefill."""
    metrics = {}
    if times.decode_s > 0 and times.decode_steps > 0:
        metrics["serving_decode_tok_s"] = times.decode_tokens / times.decode_s
        metrics["serving_decode_rows"] = times.decode_tokens / times.decode_steps
    if times.prefill_s > 0:
        metrics["serving_prefill_tok_s"] = times.prefill_tokens / times.prefill_s
    if times.prefill_s + times.decode_s > 0:
        metrics["serving_prefill_share"] = times.prefill_s / (times.prefill_s + times.decode_s)
    if times.rider_tokens > 0:
        metrics["serving_rider_share"] = times.rider_tokens / (times.rider_tokens + times.decode_tokens)
    if times.loop_steps > 0 and times.loop_s > 0:
        metrics["serving_host_ms"] = times.host_s * 1e3 / times.loop_steps
        metrics["serving_host_share"] = times.host_s / times.loop_s
    return metrics


class CudaGraphs(LinnetServe):
    """linnet.serve on generated PyTorch, its decode step a CUDA graph; on a CPU, the torch path without graphs."""

    backend = "torch"

    def mode(self):
        return "cudagraphs" if self.spec.device == "cuda" else None


class Xla(LinnetServe):
    backend = "xla"

    def close(self):
        from runners import _jax

        _jax.record_allocator_peak(self, self.built.engine.device)


class Ort(LinnetServe):
    backend = "ort"
