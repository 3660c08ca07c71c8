"""The torch backend: Linnet's generated PyTorch module (linnet_core.emit_torch) for S rows of L positions.
On a GPU its decode step is captured once as a CUDA graph and replayed; on a CPU it runs eagerly (or under
inductor with mode "inductor"), without graphs."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from linnet_core.checkpoint import read_config
from linnet_core.emit_torch import load_engine
from linnet_core.errors import UserError
from linnet_core.graph import qwen2_decoder
from linnet_core.serve.backends import Built, EngineSpec
from linnet_core.targets import CompileOptions

MODES = ("eager", "inductor", "cudagraphs")
# Prefill cost grows faster than its length (attention is T x T): two chunks of 256 cost less than one of 512.
SERVE_OPTIONS = {"prefill_chunk": 256}


class TorchServing:
    """The generated Engine with the contract's logits methods. Its decode step computes the logits [rows, vocab]
    on the device anyway (step() reads back only the argmax); step_logits feeds chosen tokens first."""

    def __init__(self, engine):
        self.engine, self.rows, self.max_positions = engine, engine.rows, engine.max_positions
        self.prefill, self.step, self.score = engine.prefill, engine.step, engine.score

    @torch.inference_mode()
    def prefill_logits(self, row: int, tokens: Sequence[int], start: int = 0) -> np.ndarray:
        logits, _ = self.engine.prefill_logits(row, tokens, start)  # [vocab] on the device
        return logits.float().cpu().numpy()

    @torch.inference_mode()
    def step_logits(self, tokens: np.ndarray) -> np.ndarray:
        engine = self.engine
        engine.last_tokens.copy_(torch.as_tensor(np.asarray(tokens, dtype=np.int64)))  # [rows]: what each row reads
        return engine.advance().float().cpu().numpy()  # [rows, vocab]; the argmax became the rows' last tokens


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
    decoder = qwen2_decoder(read_config(spec.checkpoint))
    options = CompileOptions(dtype=spec.dtype, max_positions=spec.max_positions, batch=spec.rows, quant=spec.quant)
    engine = load_engine(decoder, spec.checkpoint, spec.work("torch"), options, spec.device, mode)
    return Built(TorchServing(engine), notes, SERVE_OPTIONS)
