"""Rotary position embedding's inverse frequencies, computed once for every emitter from a rope op's attributes,
as transformers computes them (its rope init functions): plain RoPE, Llama 3's frequency scaling and LongRoPE
(Phi-3 / Phi-4-mini). A rope op rotates the first `rotary_dim` dims of each head (all of them unless the attribute
says fewer: partial rotary), rotate-half within that slice; the rest pass through unchanged."""

from __future__ import annotations

import math

import numpy as np

from linnet_core.errors import UserError


def rotation(attrs: dict) -> tuple[np.ndarray, float]:
    """A rope op's inverse frequencies, float32 [rotary_dim / 2], and the factor its cos and sin are multiplied
    by (LongRoPE's attention factor; 1 otherwise)."""
    dim = attrs.get("rotary_dim", attrs["head_dim"])
    return inverse_frequencies(dim, attrs["theta"], attrs["scaling"]), attention_factor(attrs["scaling"])


def inverse_frequencies(dim: int, theta: float, scaling: dict | None = None) -> np.ndarray:
    """float32 [dim / 2]: the rotation speed of each pair of the dim rotated dims (i pairs with i + dim / 2)."""
    shape = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim
    if scaling is not None and scaling["rope_type"] == "longrope":
        # the short factors: what transformers uses for a sequence within original_max_position_embeddings
        return (1.0 / (np.asarray(scaling["short_factor"], np.float32) * theta**shape)).astype(np.float32)
    inv_freq = (1.0 / (theta**shape)).astype(np.float32)
    if scaling is None:
        return inv_freq
    assert scaling["rope_type"] == "llama3", scaling
    return llama3(inv_freq, scaling)


def attention_factor(scaling: dict | None) -> float:
    return float(scaling.get("attention_factor", 1.0)) if scaling else 1.0


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


def longrope(scaling: dict, rotary_dim: int, max_position_embeddings: int) -> dict:
    """A LongRoPE scaling checked (a ValueError otherwise), with its attention factor as transformers defaults it:
    sqrt(1 + ln(factor) / ln(original_max_position_embeddings)), factor being max_position_embeddings over the
    original when not given, 1 for a factor of at most 1."""
    out = {"rope_type": "longrope"}
    for key in ("short_factor", "long_factor"):
        values = scaling.get(key)
        if not (isinstance(values, list) and len(values) == rotary_dim // 2 and all(positive(v) for v in values)):
            raise ValueError(f"rope_scaling longrope needs {key}: a list of {rotary_dim // 2} positive numbers "
                             f"(one per pair of the {rotary_dim} rotated dims)")  # fmt: skip
        out[key] = [float(v) for v in values]
    original = scaling.get("original_max_position_embeddings")
    if isinstance(original, bool) or not isinstance(original, int) or original < 2:
        raise ValueError(f"rope_scaling longrope needs an integer original_max_position_embeddings above 1, not {original!r}")
    out["original_max_position_embeddings"] = original
    factor = scaling.get("factor") or max_position_embeddings / original
    given = scaling.get("attention_factor")
    if given is not None and not positive(given):
        raise ValueError(f"rope_scaling longrope's attention_factor must be a positive number, not {given!r}")
    if not positive(factor):
        raise ValueError(f"rope_scaling longrope's factor must be a positive number, not {factor!r}")
    default = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    out["attention_factor"] = float(given if given is not None else default)
    return out


def positive(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < float("inf")


def check_positions(attrs: dict, positions: int) -> None:
    """A one-line error when a rope op cannot be computed as transformers does at `positions` positions per row:
    transformers turns LongRoPE's frequencies to the long factors for a whole sequence once it is longer than
    original_max_position_embeddings, which a static cache's precomputed keys cannot follow."""
    scaling = attrs["scaling"]
    if scaling and scaling["rope_type"] == "longrope" and positions > scaling["original_max_position_embeddings"]:
        limit = scaling["original_max_position_embeddings"]
        raise UserError(f"{positions} positions per row: Linnet computes LongRoPE's short factors, as transformers "
                        f"does for sequences of at most original_max_position_embeddings ({limit}); give at most {limit}")  # fmt: skip
