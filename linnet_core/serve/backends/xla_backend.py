"""The xla backend: Linnet's generated JAX module (linnet_core.emit_jax) for S rows of L positions, jitted by XLA.
Its decode step is one compiled call over every row; a step's prefill chunks are one call too, each chunk laid out
from the start of a block of 32 tokens and the blocks padded to a power of two, so XLA compiles one shape per power
of two of blocks, all of them when the serving loop starts (ServeEngine.start), not one per length mid-run. The
scheduler counts each chunk in whole blocks against the step's budget (ServeConfig.prefill_granule), so that a full
step of 2048 tokens is 64 blocks, not the next power of two. The rows that decode ride in a step's prefill call,
one token each."""

from __future__ import annotations

import jax

from linnet_core.arch import build_decoder
from linnet_core.checkpoint import read_config
from linnet_core.devices import jax_device
from linnet_core.emit_jax import load_engine
from linnet_core.errors import UserError
from linnet_core.serve.backends import Built, EngineSpec
from linnet_core.targets import CompileOptions


def make(spec: EngineSpec) -> Built:
    if spec.quant:
        raise UserError(f"the xla backend has no quantized weights (--quant {spec.quant}): use --backend torch or ort")
    device = jax_device(spec.device)
    if spec.dtype == "f32":  # true f32 matmuls (a GPU would otherwise use TF32), as the single-request XLA rows
        jax.config.update("jax_default_matmul_precision", "highest")
    decoder = build_decoder(read_config(spec.checkpoint))
    options = CompileOptions(dtype=spec.dtype, max_positions=spec.max_positions, batch=spec.rows)
    engine = load_engine(decoder, spec.checkpoint, spec.work("jax"), options, device)
    return Built(engine, [f"generated JAX on XLA ({device.platform}), {spec.dtype}"],
                 {"prefill_granule": engine.prefill_granule})  # fmt: skip
