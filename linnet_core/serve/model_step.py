"""One step of the model over an Engine (nano-vllm's model runner): all of a step's prefill chunks into their rows
in one engine call, and one batched decode step over every row, greedy on the device, and sampled there too where
the engine can (DeviceSamplingEngine in engine.py), else on the host from the step's logits. Where the engine
batches one-token chunks, the decoding rows ride in the prefill call instead (as one-token chunks): a step with
prompt work is then one model call.

The engine's decode step advances every row, used or not, or, where the engine steps fewer rows
(`step_row_buckets`, RowBucketEngine in engine.py), the smallest bucket of rows that holds every decoding request's
row: requests take the lowest free rows (rows.py), so at low load and as a workload drains the idle rows are
skipped. Rows nobody uses compute harmlessly, but their positions keep growing; a free row that reaches the end of
its positions is parked again at position 1 with a one-token prefill, so no row ever writes past max_positions,
whatever the engine does at its edge."""

from __future__ import annotations

from typing import Callable

import numpy as np

from linnet_core.engine import Chunk, Draws, Engine, prefill_batch, prefill_batch_logits
from linnet_core.serve.request import Request
from linnet_core.serve.sampling import sample
from linnet_core.serve.scheduler import PrefillChunk


def can_sample(engine: Engine) -> bool:
    """Sampling needs the optional logits methods of the engine contract (SamplingEngine in engine.py)."""
    return callable(getattr(engine, "prefill_logits", None)) and callable(getattr(engine, "step_logits", None))


def samples_on_device(engine: Engine) -> bool:
    """Whether the engine samples where its logits are (DeviceSamplingEngine in engine.py)."""
    return all(callable(getattr(engine, name, None)) for name in ("step_sampled", "prefill_batch_sampled"))


def draws(index: list[int], requests: list[Request]) -> Draws:
    """The draws of the sampled requests at `index` of an engine call: each takes the next uniform of its own
    random stream, in the order the host sampler would."""
    params = [r.params for r in requests]
    return Draws(index, [p.temperature for p in params], [p.top_p for p in params], [r.rng.random() for r in requests])


class ModelStep:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.rows, self.max_positions = engine.rows, engine.max_positions
        self.can_sample = can_sample(engine)
        self.samples_on_device = samples_on_device(engine)
        # decoding rows ride in a step's prefill call (the engine batches one-token chunks: engine.py)
        self.decodes_in_prefill = bool(getattr(engine, "decodes_in_prefill_batch", False))
        # the host prepares step k + 1 while the device runs step k, on a GPU (OverlappingEngine in engine.py)
        self.overlaps = bool(getattr(engine, "overlaps_steps", False)) and callable(getattr(engine, "start_step", None))
        self.row_buckets = tuple(getattr(engine, "step_row_buckets", ()))  # () : every step covers every row
        self.positions = np.zeros(self.rows, dtype=np.int64)  # [rows] host mirror of each row's position
        self.last_tokens = np.zeros(self.rows, dtype=np.int64)  # [rows] the token each row feeds at the next step

    def compile_ahead(self, max_prefill_tokens: int) -> int:
        """Has the engine compile every call a serving step can make, where it compiles per shape (XLA); returns how
        many compiles, 0 for the others."""
        compile_serving = getattr(self.engine, "compile_serving", None)
        return compile_serving(max_prefill_tokens) if callable(compile_serving) else 0

    def prefill(self, chunks: list[PrefillChunk], riders: list[Request] = ()) -> tuple[list[int | None], list[int]]:
        """Writes all of a step's chunks into their requests' rows in one engine call (engine.prefill_batch), with
        the decoding requests `riders` in the same call, each as a one-token chunk of its last token at its position:
        their decode step. Returns, per chunk, the request's first new token after its last chunk, else None; and each
        rider's new token. The call returns the logits only when a sampled request needs them; otherwise only token
        ids leave the device."""
        if not chunks:
            return [], []
        batch = [Chunk(c.request.row, c.tokens, c.start) for c in chunks]
        batch += [Chunk(r.row, [int(self.last_tokens[r.row])], int(self.positions[r.row])) for r in riders]
        requests = [c.request for c in chunks] + list(riders)
        sampled = [c.is_last and not c.request.params.greedy for c in chunks] + [not r.params.greedy for r in riders]
        if any(sampled) and self.samples_on_device:  # only token ids leave the device
            picks = [i for i, s in enumerate(sampled) if s]
            tokens = [int(t) for t in self.engine.prefill_batch_sampled(batch, draws(picks, [requests[i] for i in picks]))]
        elif any(sampled):
            logits = prefill_batch_logits(self.engine, batch)  # [C + D, vocab]
            tokens = [int(row.argmax()) for row in logits]
            for i, request in enumerate(requests):
                if sampled[i]:
                    params = request.params
                    tokens[i] = sample(logits[i], params.temperature, params.top_p, request.rng)
        else:
            tokens = [int(t) for t in prefill_batch(self.engine, batch)]
        assert len(tokens) == len(batch), f"the engine's batched prefill returned {len(tokens)} tokens for {len(batch)} chunks"
        for chunk, token in zip(batch, tokens):
            self.positions[chunk.row] = chunk.start + len(chunk.tokens)
            self.last_tokens[chunk.row] = token
        firsts = [token if chunk.is_last else None for chunk, token in zip(chunks, tokens)]
        return firsts, tokens[len(chunks) :]

    def step_rows(self, decoding: list[Request]) -> tuple[int, tuple[int, ...]]:
        """The rows a decode step for `decoding` covers, and the argument that asks the engine for them: the
        smallest of the engine's buckets holding every decoding row, or every row (no argument) when it has none."""
        if not self.row_buckets:
            return self.rows, ()
        top = max((r.row for r in decoding), default=0) + 1
        n = next(b for b in self.row_buckets if b >= top)
        return n, (n,)

    def decode(self, decoding: list[Request]) -> np.ndarray:
        """One decode step over the rows of the `decoding` requests (step_rows); int [rows] new token ids, a row
        outside the step keeping its last token. Without a request that samples, the step is the engine's greedy
        step and only token ids leave the device."""
        self.park_exhausted_rows()
        n, rows = self.step_rows(decoding)
        sampling = [r for r in decoding if not r.params.greedy]
        if not sampling:
            new = self.engine.step(*rows)
        elif self.samples_on_device:  # only token ids leave the device
            new = self.engine.step_sampled(self.last_tokens, draws([r.row for r in sampling], sampling), *rows)
        else:  # engines that sample on the host step every row
            n, logits = self.rows, self.engine.step_logits(self.last_tokens)  # [rows, vocab]; rows feed the tokens we chose
            new = logits.argmax(axis=-1)
            for request in sampling:
                new[request.row] = sample(logits[request.row], request.params.temperature, request.params.top_p, request.rng)
        self.positions[:n] += 1
        return self.took_step(n, new)

    def start_decode(self, decoding: list[Request]) -> Callable[[], np.ndarray]:
        """decode() for greedy requests without waiting for the device: launches the step and returns a function that
        waits for its new token ids, int [rows]. Until then the host's last tokens are the step before's, so a
        prefill with riders, a sampled step or another wait must come after it (ServeEngine keeps that order)."""
        self.park_exhausted_rows()
        n, rows = self.step_rows(decoding)
        wait = self.engine.start_step(*rows)
        self.positions[:n] += 1
        return lambda: self.took_step(n, wait())

    def took_step(self, n: int, new) -> np.ndarray:
        """Records the tokens `new` [n] of a decode step over the first n rows as their last tokens; returns every
        row's last token, int [rows]. (The caller advances the rows' positions.)"""
        new = np.asarray(new, dtype=np.int64)
        assert new.shape == (n,), f"the engine's step returned shape {new.shape}, not ({n},)"
        self.last_tokens = np.concatenate([new, self.last_tokens[n:]])
        return self.last_tokens

    def park_exhausted_rows(self) -> None:
        """A request's row never reaches max_positions (the scheduler checks its length); a free row might."""
        for row in np.flatnonzero(self.positions >= self.max_positions):
            self.last_tokens[row] = self.engine.prefill(int(row), [0], 0)
            self.positions[row] = 1
