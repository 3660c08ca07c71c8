"""Linnet, CUDA graphs: the generated PyTorch module's decode captured in CUDA graphs over the static KV cache, a
block of decode steps per graph (positions and tokens live on the device, so one graph serves every position and
one replay makes a block of tokens); the prefill captured per prompt-length bucket. GPU only."""

from __future__ import annotations

from runners._linnet_torch import LinnetTorchRunner


class Runner(LinnetTorchRunner):
    mode = "cudagraphs"

    @classmethod
    def unavailable(cls, spec):
        if spec.device != "cuda":
            return "CUDA graphs need a GPU"
        return super().unavailable(spec)
