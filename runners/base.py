"""What every runner is: the spec it is handed, and the interface the timing protocol calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import numpy as np


# Set in the environment of a row's build step (harness/memory.py reads it): an export the engine then loads.
BUILD_ENV = "LINNET_BENCH_BUILD"


def run_build(args: list[str]) -> float:
    """Runs `linnet ARGS` (an export or compile the engine then loads) in a process of its own; returns its seconds.

    A user makes such files once, apart from the engine, so their memory is not the engine's: the harness's sampler
    tells the build's process by BUILD_ENV, reports its peak apart (build_peak_mem_gib) and leaves it out of the
    row's peak memory. Its time stays in the row's load time."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "linnet_core.cli", *args], capture_output=True, text=True,
                          check=False, env={**os.environ, BUILD_ENV: args[0]})  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"linnet {' '.join(args[:2])} failed: {(done.stdout + done.stderr)[-1500:]}")
    return time.perf_counter() - start


class RowRefused(Exception):
    """A runner's own verdict that its row must not be published (a reference that failed its self-check): the
    worker records the row as failed with this one-line reason, not a traceback."""


# How a transformers row's note begins when its cached decode passed that self-check (runners/_transformers.py): a
# row without it, in a file from before the check, may have decoded without its cache (scripts/gpu_targets.py)
CACHE_CHECKED = "cached decode checked against a full forward at load"


@dataclass(frozen=True)
class RunSpec:
    """Everything a child process needs, sent as JSON. Unknown keys are errors."""

    runner: str  # runner id
    module: str  # "package.module" (class Runner) or "package.module:Class": what the child imports
    model: str  # model id
    checkpoint: str  # Hugging Face checkpoint directory every stack reads
    dtype: str  # "f32" | "f16" | "bf16": the compute dtype
    device: str  # "cpu" | "cuda"
    prompt: list[int]  # the timed prompt's token ids
    new_tokens: int  # tokens generated per run, the first included
    warmups: int  # untimed runs before the measured ones
    runs: int  # measured runs
    probe: list[int]  # the distance probe sequence
    probe_prefill: int  # how much of the probe is prefilled; the rest is fed one token at a time
    max_positions: int  # static caches hold this many positions (prompt + new, rounded up)
    work_dir: str  # a private directory for artefacts (compiled graphs, exports, logits)
    # "measure" (time, then score) | "time" (a later trial: no probe) | "score" (reference logits only) | "truth" (the
    # float64 truth's probe logits: runners/transformers_truth.py)
    mode: str = "measure"
    options: dict[str, Any] = field(default_factory=dict)  # runner-specific settings
    kind: str = "single"  # "single" (the single-request protocol) | "serving" (the serving workload)
    serving: dict[str, Any] | None = None  # for serving runners: harness.workload.ServingWorkload's fields
    serving_prompts: list[list[int]] | None = None  # for serving runners: the workload's prompts

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls(**json.loads(text))

    @property
    def work(self) -> Path:
        return Path(self.work_dir)

    @property
    def serving_workload(self):
        from harness.workload import ServingWorkload

        assert self.serving is not None, f"{self.runner}: a serving runner's spec has no serving workload"
        return ServingWorkload(**self.serving)


class Runner:
    """A single-request stack. The harness calls load once, then prefill/decode per run, then score, then close.

    Every method returns host values (token ids as ints, logits as a numpy array), so the device has
    finished its work when a method returns; the protocol reads the clock only between calls."""

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.notes: list[str] = []  # shown in the row's Notes column
        self.metrics: dict[str, Any] = {}  # extra measurements merged into the row (e.g. allocator peak)

    @classmethod
    def unavailable(cls, spec: RunSpec) -> str | None:
        """Why this stack cannot run here (no CUDA, package missing), or None."""
        return None

    def load(self) -> None:
        """Reads the checkpoint and makes the model ready for its first run."""
        raise NotImplementedError

    def prefill(self, prompt: list[int]) -> int:
        """Starts a new sequence from the prompt; returns the first new token id (greedy)."""
        raise NotImplementedError

    def decode(self, n: int) -> list[int]:
        """Generates the next n token ids greedily, EOS ignored."""
        raise NotImplementedError

    def score(self, ids: list[int], n_prefill: int) -> np.ndarray | None:
        """Logits through the cache path: prefill ids[:n_prefill], then feed the rest one token at a time.

        Returns float32 [len(ids) - n_prefill + 1, vocab]: the last prefill position, then one row per fed
        token. None when the engine exposes no logits (say why in self.notes)."""
        return None

    def close(self) -> None:
        pass


class EngineRunner(Runner):
    """A single request on a Linnet engine (linnet_core/engine.py): row 0 of a one-row cache, one step per token."""

    engine = None  # set by load(): the Engine this row drives

    def current_engine(self):
        """The engine the calls go to; a runner that builds it on first use overrides this."""
        return self.engine

    def prefill(self, prompt):
        return self.current_engine().prefill(0, prompt)

    def decode(self, n):
        engine = self.current_engine()
        if hasattr(engine, "generate"):  # linnet_core.engine.GeneratingEngine: every step in one device call
            return [int(t) for t in engine.generate(n)[:, 0]]
        return [int(engine.step()[0]) for _ in range(n)]

    def score(self, ids, n_prefill):
        return self.current_engine().score(ids, n_prefill)


class ServingRunner:
    """A serving stack: many requests at once, each streamed back token by token (harness.protocol.measure_serving).

    load() makes the stack ready (it is timed); start() and stop() run inside the protocol's event loop, around
    every request; generate() is one request as the client sees it. score() and close() follow, outside the loop."""

    token_ids = True  # generate() yields the real token ids; False: placeholders that only count the tokens

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.notes: list[str] = []  # shown in the row's Notes column
        self.metrics: dict[str, Any] = {}  # extra measurements merged into the row

    @classmethod
    def unavailable(cls, spec: RunSpec) -> str | None:
        """Why this stack cannot run here (no CUDA, package or server missing), or None."""
        return None

    @property
    def rows(self) -> int:
        """Requests the stack serves at once: the workload's in-flight bound."""
        return self.spec.serving_workload.max_in_flight

    @property
    def max_positions(self) -> int:
        return self.spec.serving_workload.max_positions

    def load(self) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        """Inside the event loop, before the first request (start threads, open connections)."""

    def generate(self, prompt: list[int], max_tokens: int) -> AsyncIterator[list[int]]:
        """One greedy request, EOS ignored: yields the new token ids as they reach the client (one or more at a time)."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Inside the event loop, after the last request."""

    def timed_runs(self, starting: bool) -> None:
        """Called with True just before the first timed run and with False just after the last (the warm-up and the
        reference prompt fall outside), for a stack that keeps its own account of the timed work (linnet.serve)."""

    def score(self, ids: list[int], n_prefill: int) -> np.ndarray | None:
        """As Runner.score; None when the stack exposes no logits (say why in self.notes)."""
        return None

    def close(self) -> None:
        pass
