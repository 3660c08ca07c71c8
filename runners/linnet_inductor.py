"""Linnet, inductor: the generated PyTorch module under torch.compile, the decode step with static shapes (one
compile: positions are device tensors) and prefill with dynamic shapes. Compilation happens on the first call
and is reported as first-call time."""

from __future__ import annotations

from runners._linnet_torch import LinnetTorchRunner


class Runner(LinnetTorchRunner):
    mode = "inductor"

    def load(self):
        super().load()
        self.notes.append("decode step and prefill compiled by inductor on first call")


class Int8(Runner):
    """linnet-inductor-int8: the module compiled with weight-only int8 (linnet compile --quant int8), under inductor."""

    quant = "int8"
