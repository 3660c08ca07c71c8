"""Temperature and top-p (nucleus) sampling of one row's logits, for requests that do not ask for greedy decoding.

Greedy requests never come here: their token is the engine's device argmax. Sampling needs the logits, which
cross to the host only for steps where some running request samples (see model_step.py)."""

from __future__ import annotations

import numpy as np


def sample(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """One token id from softmax(logits / temperature), restricted to the top-p nucleus. logits: float [vocab]."""
    assert temperature > 0, temperature
    z = logits.astype(np.float64) / temperature
    probs = np.exp(z - z.max())
    order = np.argsort(-probs, kind="stable")  # most likely first
    cumulative = np.cumsum(probs[order])
    # the nucleus: the fewest most-likely tokens whose mass reaches top_p of the total (at least one)
    keep = int(np.searchsorted(cumulative, top_p * cumulative[-1])) + 1
    chosen = int(np.searchsorted(cumulative[:keep], rng.random() * cumulative[keep - 1], side="right"))
    return int(order[min(chosen, keep - 1)])
