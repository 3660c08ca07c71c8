"""How close a row's next-token distributions are to the reference's over the probe's positions, and whether the
reference's own distributions make that a meaningful question.

The distance (the largest logit difference) cannot tell a right row from a wrong one once rounding moves every
logit by a few units (bf16, quantized weights). What a user of the model sees is the distribution: as llama.cpp's
perplexity tool does for a quantized model against its full-precision self, each row gets the KL divergence
KL(reference || row) at every probe position (softmax in float64), its mean and 99th percentile, and the share of
positions where both pick the same top-1 token. On a flat reference distribution every row would agree in KL and
none in top-1; on a one-hot one every row would agree on top-1 whatever its errors: `distribution_shape` says which
the reference's are (mean entropy and mean top-1 probability)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Accuracy:
    kl_mean: float | None  # mean over positions of KL(reference || row), nats; None where the row's logits are not finite
    kl_p99: float | None  # its 99th percentile over positions
    top1_agree: float  # share of positions whose argmax equals the reference's, 0..1 (a non-finite row never agrees)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """[positions, vocab] -> log probabilities, in float64."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def kl_per_position(reference: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(softmax(reference) || softmax(logits)) at each position: [positions, vocab] twice -> [positions]."""
    ref_log, row_log = log_softmax(reference), log_softmax(logits)
    kl = (np.exp(ref_log) * (ref_log - row_log)).sum(axis=-1)
    return np.maximum(kl, 0.0)  # float64 sums of a zero divergence can land a hair below 0


def accuracy(reference: np.ndarray, logits: np.ndarray) -> Accuracy:
    """The three figures of a row's probe logits against the reference's, both [positions, vocab]."""
    assert reference.shape == logits.shape and reference.ndim == 2, (reference.shape, logits.shape)
    finite = np.isfinite(logits).all(axis=-1)  # [positions]
    agree = (np.argmax(reference, axis=-1) == np.argmax(np.where(finite[:, None], logits, 0), axis=-1)) & finite
    if not finite.all():  # NaN or inf logits: no distribution to compare there, and a mean over the rest would hide it
        return Accuracy(None, None, float(agree.mean()))
    kl = kl_per_position(reference, logits)
    return Accuracy(float(kl.mean()), float(np.percentile(kl, 99)), float(agree.mean()))


def distribution_shape(reference: np.ndarray) -> dict[str, float | int]:
    """What the reference's probe distributions look like: mean entropy (nats) beside the uniform distribution's
    log(vocab), and the mean probability of the top-1 token; a flat reference has entropy near log(vocab), a
    one-hot one entropy near 0 and top-1 probability near 1."""
    log_p = log_softmax(reference)
    p = np.exp(log_p)
    entropy = -(p * log_p).sum(axis=-1)
    return {
        "positions": int(reference.shape[0]),
        "entropy_mean": float(entropy.mean()),
        "uniform_entropy": float(np.log(reference.shape[1])),
        "top1_prob_mean": float(p.max(axis=-1).mean()),
    }


def shape_problem(shape: dict[str, float | int]) -> str | None:
    """Why the reference's distributions (distribution_shape) would make KL and top-1 figures meaningless, or None:
    nearly flat (mean entropy above 90% of log(vocab)) or nearly one-hot (mean top-1 probability above 0.95)."""
    if shape["entropy_mean"] > 0.9 * shape["uniform_entropy"]:
        return "nearly flat"
    if shape["top1_prob_mean"] > 0.95:
        return "nearly one-hot"
    return None
