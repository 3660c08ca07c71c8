"""The compile targets of `linnet compile`: each names the function that writes a target's artefacts.

A target function takes (decoder: graph.Decoder, checkpoint: Path, out: Path, options: CompileOptions) and
returns the list of files it wrote. Adding a target is one line here and its emitter module."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from linnet_core.errors import UserError


@dataclass(frozen=True)
class CompileOptions:
    dtype: str = "f32"  # "f32" | "f16" | "bf16": the compute dtype baked into the artefacts
    max_positions: int = 768  # static KV cache positions per row
    batch: int = 1  # rows of the static cache (serving uses more)
    quant: str | None = None  # weight-only quantization of the linear layers (linnet_core/quant.py): None | "int8"
    # ONNX: attention as ONNX Runtime's RotaryEmbedding and GroupQueryAttention contrib ops (its CPU provider; CUDA's
    # only in 16-bit) rather than standard operators that every provider runs (linnet_core/emit_onnx.py)
    fused_attention: bool = False


# target name -> "module:function"
TARGETS: dict[str, str] = {
    "onnx": "linnet_core.emit_onnx:write_onnx",
    "torch": "linnet_core.emit_torch:write",
    "jax": "linnet_core.emit_jax:compile_jax",
    "stablehlo": "linnet_core.export_stablehlo:compile_stablehlo",
}


def compile_function(target: str):
    if target not in TARGETS:
        raise UserError(f"unknown target {target!r}; known targets: {', '.join(TARGETS) or 'none yet'}")
    module, _, name = TARGETS[target].partition(":")
    return getattr(importlib.import_module(module), name)
