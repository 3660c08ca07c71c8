"""The xla backend: Linnet's generated JAX module (linnet_core.emit_jax) for S rows of L positions, jitted by XLA.
Its decode step is one compiled call over every row; prefill pads each chunk to a power of two, so XLA compiles
a handful of prompt shapes, not one per length."""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from linnet_core.checkpoint import read_config
from linnet_core.emit_jax import load_engine
from linnet_core.errors import UserError
from linnet_core.graph import qwen2_decoder
from linnet_core.serve.backends import Built, EngineSpec
from linnet_core.targets import CompileOptions


class XlaServing:
    """The generated Engine with the contract's logits methods: its prefill and decode calls return the logits
    beside the next ids, on the device; only these methods bring them to the host."""

    def __init__(self, engine, device):
        self.engine, self.device, self.rows, self.max_positions = engine, device, engine.rows, engine.max_positions
        self.prefill, self.step, self.score = engine.prefill, engine.step, engine.score

    def prefill_logits(self, row: int, tokens: Sequence[int], start: int = 0) -> np.ndarray:
        return np.asarray(self.engine.prefill_on_device(row, tokens, start)[1], dtype=np.float32)

    def step_logits(self, tokens: np.ndarray) -> np.ndarray:
        self.engine.tokens = jax.device_put(np.asarray(tokens, dtype=np.int32), self.device)  # [rows]: read next
        return np.asarray(self.engine.step_on_device()[1], dtype=np.float32)  # [rows, vocab]


def device_for(name: str):
    platform = "gpu" if name == "cuda" else "cpu"
    devices = [d for d in jax.devices() if d.platform == platform] if platform == "gpu" else jax.devices("cpu")
    if not devices:
        raise UserError("CUDA requested but JAX sees no GPU (install jax[cuda12])")
    return devices[0]


def make(spec: EngineSpec) -> Built:
    if spec.quant:
        raise UserError(f"the xla backend has no quantized weights (--quant {spec.quant}): use --backend torch or ort")
    device = device_for(spec.device)
    if spec.dtype == "f32":  # true f32 matmuls (a GPU would otherwise use TF32), as the single-request XLA rows
        jax.config.update("jax_default_matmul_precision", "highest")
    decoder = qwen2_decoder(read_config(spec.checkpoint))
    options = CompileOptions(dtype=spec.dtype, max_positions=spec.max_positions, batch=spec.rows)
    engine = load_engine(decoder, spec.checkpoint, spec.work("jax"), options, device)
    return Built(XlaServing(engine, device), [f"generated JAX on XLA ({device.platform}), {spec.dtype}"])
