"""Rotary position embedding's inverse frequencies, computed once for every emitter from a rope op's attributes,
as transformers computes them (its rope init functions): plain RoPE, and Llama 3's frequency scaling."""

from __future__ import annotations

import math

import numpy as np


def inverse_frequencies(head_dim: int, theta: float, scaling: dict | None = None) -> np.ndarray:
    """float32 [head_dim / 2]: the rotation speed of each pair of dims (dim i pairs with i + head_dim / 2)."""
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / head_dim))
    inv_freq = inv_freq.astype(np.float32)
    if scaling is None:
        return inv_freq
    assert scaling["rope_type"] == "llama3", scaling
    return llama3(inv_freq, scaling)


def llama3(inv_freq: np.ndarray, scaling: dict) -> np.ndarray:
    """Llama 3's scaling: wavelengths longer than the pre-training context / low_freq_factor are slowed by
    `factor`, those shorter than context / high_freq_factor kept, and those between interpolated smoothly."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < context / high) & ~(wavelen > context / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)
