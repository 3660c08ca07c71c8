"""The contract every Linnet engine keeps (generated PyTorch, generated JAX / StableHLO, ONNX Runtime), so that
the single-request runners and linnet.serve drive any of them the same way.

An engine owns a static KV cache of `rows` rows of `max_positions` positions. Each row holds one sequence,
its own position, and the last token it produced (kept on the device). Prefill fills one row (or, batched, a
piece of each of several rows in one call); a decode step advances every row at once (rows nobody uses compute
harmlessly and are ignored), which is what continuous batching needs and what a single request (rows = 1) uses
too. Greedy argmax happens on the device: one token id per row crosses to the host per step, never the logits."""

from __future__ import annotations

from typing import Callable, NamedTuple, Protocol, Sequence

import numpy as np


class Engine(Protocol):
    rows: int  # cache rows (1 for a single request, S for serving)
    max_positions: int  # positions per row

    def prefill(self, row: int, tokens: Sequence[int], start: int = 0) -> int:
        """Writes tokens at positions start.. of `row` (start > 0 continues a chunked prefill) and returns the
        greedy next token id, which becomes the row's last token; the row's position becomes start + len."""
        ...

    def step(self) -> np.ndarray:
        """One decode step over all rows: each row consumes its last token at its position. Returns the new
        token ids, int [rows], on the host; positions advance by one."""
        ...

    def score(self, tokens: Sequence[int], n_prefill: int) -> np.ndarray:
        """Float32 logits [len(tokens) - n_prefill + 1, vocab] through the cache path in row 0: prefill
        tokens[:n_prefill] (last position's logits), then feed the rest one token at a time (teacher forcing)."""
        ...


class SamplingEngine(Engine, Protocol):
    """The optional extension linnet.serve uses for temperature / top-p requests, which need the logits.

    Both methods behave like their greedy twins and leave the row's last token at the argmax; greedy-only
    engines leave them out and linnet.serve then refuses sampled requests with a clear message. The logits
    cross to the host only for the steps where some running request samples."""

    def prefill_logits(self, row: int, tokens: Sequence[int], start: int = 0) -> np.ndarray:
        """prefill(), returning the last position's float32 logits [vocab] instead of the greedy token id."""
        ...

    def step_logits(self, tokens: np.ndarray) -> np.ndarray:
        """step(), except that row r consumes tokens[r] (int [rows], e.g. a sampled token) instead of its last
        token; returns float32 logits [rows, vocab] on the host. Positions advance by one."""
        ...


class OverlappingEngine(Engine, Protocol):
    """The optional extension with which linnet.serve prepares the next step on the host while the device runs this
    one (vLLM's async scheduling): a decode step started, its tokens waited for later. linnet.serve overlaps only
    where `overlaps_steps` is true, on a GPU: where start_step returns after the step has run (a CPU), the loop's
    one-step lag would only hand tokens and freed rows out later (measured: first tokens 15-30% later on a CPU)."""

    overlaps_steps: bool  # whether start_step returns while the device still runs the step

    def start_step(self) -> Callable[[], np.ndarray]:
        """step() without waiting for the device: launches one decode step over all rows and returns a function that
        waits for its new token ids, int [rows]. Other engine calls may follow before that function is called; they
        run after the step, as they would after step()."""
        ...


class RowBucketEngine(Engine, Protocol):
    """The optional extension with which a decode step covers only the first rows: linnet.serve gives requests the
    lowest free rows, so at low load and as a workload drains, a step over the smallest bucket that holds every busy
    row costs less than one over every row (vLLM's CUDA graphs per batch size). Rows outside the step keep their
    positions and last tokens. The generated PyTorch has it (a CUDA graph per bucket on a GPU)."""

    step_row_buckets: tuple[int, ...]  # the row counts a step may cover, ascending; the last is `rows`

    def step(self, rows: int | None = None) -> np.ndarray:
        """step() over the first `rows` rows (one of step_row_buckets; None: all): their new token ids, int [rows].
        start_step(rows) and step_sampled(tokens, draws, rows), where the engine has them, take it too."""
        ...


class Draws(NamedTuple):
    """The sampled choices of one engine call, for the engines that sample on the device (DeviceSamplingEngine):
    which of the call's outputs (rows of a step, chunks of a batched prefill) sample, each with its temperature,
    top-p and one uniform draw in [0, 1) from its request's random stream. linnet_core/serve/sampling.py says how a
    draw becomes a token; the others take the argmax."""

    index: Sequence[int]
    temperature: Sequence[float]
    top_p: Sequence[float]
    uniform: Sequence[float]


class DeviceSamplingEngine(Engine, Protocol):
    """The optional extension with which sampling happens where the logits are: only token ids cross to the host,
    and a sampled token becomes its row's last token there. linnet.serve uses it when an engine has it, and
    step_logits / prefill_batch_logits with a sampler on the host otherwise."""

    def step_sampled(self, tokens: np.ndarray, draws: Draws) -> np.ndarray:
        """step_logits(tokens)'s step, returning the new tokens int [rows]: the rows in draws.index sampled."""
        ...

    def prefill_batch_sampled(self, chunks: Sequence["Chunk"], draws: Draws) -> np.ndarray:
        """prefill_batch(chunks), the chunks in draws.index sampled: int [len(chunks)]."""
        ...


class Chunk(NamedTuple):
    """One row's prefill piece in a batched prefill: tokens written at positions start.. of row."""

    row: int
    tokens: Sequence[int]
    start: int = 0


class BatchPrefillEngine(Engine, Protocol):
    """The optional extension linnet.serve uses to prefill all of an engine step's chunks in one model call: the
    chunks of several rows flattened into one token sequence, each token attending to its own row's cache. The
    chunks name distinct rows. Engines without it get prefill_batch() below, which calls prefill() per chunk.

    A one-token chunk at a row's position with its last token is that row's decode step. An engine whose
    prefill_batch runs those chunks together (one batched decode attention, not an attention call each) sets
    `decodes_in_prefill_batch = True`: linnet.serve then folds the rows that decode into its step's prefill call,
    one model call per step (vLLM's chunked prefill), instead of a prefill call and a decode step."""

    def prefill_batch(self, chunks: Sequence[Chunk]) -> np.ndarray:
        """What prefill() of each chunk in turn would do, in one call: int [len(chunks)], each chunk's greedy next
        token (greedy on the device: only these ids cross to the host)."""
        ...

    def prefill_batch_logits(self, chunks: Sequence[Chunk]) -> np.ndarray:
        """prefill_batch(), returning each chunk's last position's float32 logits [len(chunks), vocab] (for
        sampling; an engine with it keeps SamplingEngine too)."""
        ...


def prefill_batch(engine: Engine, chunks: Sequence[Chunk]) -> np.ndarray:
    """The chunks' greedy next tokens, int [len(chunks)]: in one call where the engine has prefill_batch, else one
    prefill() per chunk."""
    batch = getattr(engine, "prefill_batch", None)
    if callable(batch):
        return np.asarray(batch(chunks), dtype=np.int64)
    return np.array([engine.prefill(c.row, c.tokens, c.start) for c in chunks], dtype=np.int64)


def prefill_batch_logits(engine: "SamplingEngine", chunks: Sequence[Chunk]) -> np.ndarray:
    """The chunks' last logits, float32 [len(chunks), vocab]: in one call where the engine has
    prefill_batch_logits, else one prefill_logits() per chunk."""
    batch = getattr(engine, "prefill_batch_logits", None)
    if callable(batch):
        return np.asarray(batch(chunks), dtype=np.float32)
    return np.stack([np.asarray(engine.prefill_logits(c.row, c.tokens, c.start), dtype=np.float32) for c in chunks])


class GeneratingEngine(Engine, Protocol):
    """The optional extension for engines that can run many decode steps in one call on the device (an XLA while
    loop), with no host round trip per token. The single-request rows use it for their decode; linnet.serve,
    which admits requests between steps, does not."""

    def generate(self, n: int) -> np.ndarray:
        """n decode steps over all rows in one call: int [n, rows], the ids n calls of step() return, in order."""
        ...
