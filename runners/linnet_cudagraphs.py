"""Linnet, CUDA graphs: the generated PyTorch module's decode step captured once in a CUDA graph over the static
KV cache and replayed every step (positions live on the device, so one graph serves them all); prefill runs
eagerly outside the graph. GPU only."""

from __future__ import annotations

from runners._linnet_torch import LinnetTorchRunner


class Runner(LinnetTorchRunner):
    mode = "cudagraphs"

    @classmethod
    def unavailable(cls, spec):
        if spec.device != "cuda":
            return "CUDA graphs need a GPU"
        return super().unavailable(spec)

    def load(self):
        super().load()
        self.notes.append("decode step captured once in a CUDA graph at load; prefill runs eagerly")
