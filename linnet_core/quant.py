"""Weight-only quantization: how a linear layer's float weight becomes integers and scales, and how each engine
stores them. Activations stay in the compute dtype; only the weights are rounded.

Symmetric: w ~= q * scale, q an integer in -qmax..qmax (qmax = 2^(bits-1) - 1: 127 for int8), one
scale per output channel and group of `group` inputs: scale = max |w| over the group / qmax. Per output channel
(group = the whole input) is what the generated PyTorch uses for int8 (torch's int8 weight-pack kernel takes one
scale per channel); ONNX Runtime's MatMulNBits takes groups (blocks) of a power of two along the input, which
`onnx_blocks` packs in its layout.

The generated PyTorch module is standalone, so it carries its own copy of `quantize` for per-channel int8 (its
template's quantize_int8, the same arithmetic: tests hold the two equal)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linnet_core.errors import UserError

# --quant name -> bits. No int4: 4-bit groups of 32 leave qwen2-tiny's top-1 agreement at 16% (KL 2.3) on random
# weights and at 0.81 (KL 0.23; gemma3-tiny 0.54, KL 0.61) on the trained twin of synthetic recipe 3 (random-id
# probe), far from 8 bits' 0.99 (KL 1.3e-3) there and too near a wrong answer for a bound to tell them apart at this
# width (64).
QUANTS = {"int8": 8}
# quantize works through a weight this many rows at a time (a Llama 3.2 1B embedding row is 2048 inputs: 32 MiB of
# float32 temporaries per block)
QUANTIZE_ROWS = 4096


def check_quant(quant: str | None) -> str | None:
    """The quantization name, or a one-line error naming the known ones."""
    if quant is not None and quant not in QUANTS:
        raise UserError(f"unknown quantization {quant!r}; use one of {', '.join(QUANTS)} (or leave it out for none)")
    return quant


@dataclass(frozen=True)
class Quantized:
    """A [N, K] weight as integers and scales: weight ~= values * repeat(scales, group, axis=1)."""

    values: np.ndarray  # int8 [N, K]: the integers, -qmax..qmax
    scales: np.ndarray  # float32 [N, ceil(K / group)]: one per output channel and group of inputs
    bits: int  # 8
    group: int  # inputs per scale; K: one scale per output channel

    def dequantize(self) -> np.ndarray:
        """float32 [N, K]: what the quantized weight stands for."""
        k = self.values.shape[1]
        return self.values.astype(np.float32) * np.repeat(self.scales, self.group, axis=1)[:, :k]


def quantize(weight: np.ndarray, bits: int = 8, group: int | None = None) -> Quantized:
    """Symmetric round-to-nearest (ties to even, as torch.round) of a float [N, K] weight, computed in float32, a
    block of QUANTIZE_ROWS rows at a time (rows are independent): a float32 temporary of a large embedding would
    otherwise be several times its size at once."""
    n, k = weight.shape
    group = group or k
    values, scales = np.empty((n, k), np.int8), np.empty((n, -(-k // group)), np.float32)
    for start in range(0, n, QUANTIZE_ROWS):
        rows = slice(start, start + QUANTIZE_ROWS)
        values[rows], scales[rows] = quantize_rows(np.asarray(weight[rows], dtype=np.float32), bits, group)
    return Quantized(values, scales, bits, group)


def quantize_rows(w: np.ndarray, bits: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """quantize's arithmetic on float32 rows [n, K]: (int8 values [n, K], float32 scales [n, blocks])."""
    n, k = w.shape
    blocks = -(-k // group)
    padded = np.zeros((n, blocks * group), np.float32)
    padded[:, :k] = w
    qmax = 2 ** (bits - 1) - 1
    # an all-zero group gets a tiny scale rather than 0: its integers are 0 either way, and nothing divides by 0
    scales = np.maximum(np.abs(padded.reshape(n, blocks, group)).max(axis=-1), 1e-12) / np.float32(qmax)
    scales = scales.astype(np.float32)
    q = np.clip(np.round(padded.reshape(n, blocks, group) / scales[..., None]), -qmax, qmax)
    return q.reshape(n, -1)[:, :k].astype(np.int8), scales


def onnx_blocks(q: Quantized) -> np.ndarray:
    """MatMulNBits' packed B input for 8 bits: uint8 [N, blocks, group], each integer stored as q + 128 (the op's
    default zero point when none is given, which makes it symmetric). Inputs past K (the last block's padding) are
    stored as zero."""
    n, k = q.values.shape
    blocks = q.scales.shape[1]
    stored = np.full((n, blocks * q.group), 2 ** (q.bits - 1), np.uint8)
    stored[:, :k] = (q.values.astype(np.int16) + 2 ** (q.bits - 1)).astype(np.uint8)
    assert q.bits == 8, q.bits
    return stored.reshape(n, blocks, q.group)
