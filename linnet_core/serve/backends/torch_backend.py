"""The torch backend: Linnet's generated PyTorch module (linnet_core.emit_torch) for S rows of L positions.
On a GPU its decode step is captured once as a CUDA graph and replayed; on a CPU it runs eagerly (or under
inductor with mode "inductor"), without graphs."""

from __future__ import annotations

import torch

from linnet_core.arch import build_decoder
from linnet_core.checkpoint import read_config
from linnet_core.emit_torch import load_engine
from linnet_core.errors import UserError
from linnet_core.serve.backends import Built, EngineSpec
from linnet_core.targets import CompileOptions

MODES = ("eager", "inductor", "cudagraphs")
# Prefill cost grows faster than its length (attention is T x T): two chunks of 256 cost less than one of 512.
SERVE_OPTIONS = {"prefill_chunk": 256}


def make(spec: EngineSpec) -> Built:
    mode = spec.mode or ("cudagraphs" if spec.device == "cuda" else "eager")
    if mode not in MODES:
        raise UserError(f"unknown torch mode {mode!r}; use one of {', '.join(MODES)}")
    if mode == "cudagraphs" and spec.device != "cuda":
        raise UserError("CUDA graphs need a GPU: use --device cuda, or --mode eager or inductor on a CPU")
    torch.set_grad_enabled(False)
    notes = [f"generated PyTorch, {mode}, {spec.dtype}" + (f", weights {spec.quant}" if spec.quant else "")]
    if spec.device != "cuda":
        torch.set_num_threads(spec.cpu_threads)  # process-wide: the engine is this process's one torch user
        notes += ["on a CPU: the torch path without CUDA graphs", f"{spec.cpu_threads} intra-op thread(s)"]
    decoder = build_decoder(read_config(spec.checkpoint))
    options = CompileOptions(dtype=spec.dtype, max_positions=spec.max_positions, batch=spec.rows, quant=spec.quant)
    engine = load_engine(decoder, spec.checkpoint, spec.work("torch"), options, spec.device, mode)
    return Built(engine, notes, SERVE_OPTIONS)
