"""The contract every Linnet engine keeps (generated PyTorch, generated JAX / StableHLO, ONNX Runtime), so that
the single-request runners and linnet.serve drive any of them the same way.

An engine owns a static KV cache of `rows` rows of `max_positions` positions. Each row holds one sequence,
its own position, and the last token it produced (kept on the device). Prefill fills one row; a decode step
advances every row at once (rows nobody uses compute harmlessly and are ignored), which is what continuous
batching needs and what a single request (rows = 1) uses too. Greedy argmax happens on the device: one
token id per row crosses to the host per step, never the logits."""

from __future__ import annotations

from typing import Protocol, Sequence

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


class GeneratingEngine(Engine, Protocol):
    """The optional extension for engines that can run many decode steps in one call on the device (an XLA while
    loop), with no host round trip per token. The single-request rows use it for their decode; linnet.serve,
    which admits requests between steps, does not."""

    def generate(self, n: int) -> np.ndarray:
        """n decode steps over all rows in one call: int [n, rows], the ids n calls of step() return, in order."""
        ...
