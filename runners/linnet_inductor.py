"""Linnet, inductor: the generated PyTorch module under torch.compile. On a CPU the whole decode step compiles with
static shapes (one compile: positions are device tensors) and the prefill with its length dynamic. On a GPU each kind
of block compiles once for all its layers, and the step and the prefill are captured in CUDA graphs as the cudagraphs
row captures the eager module. Compilation happens on the first call (on a GPU the decode step's at load, in the
capture's warm-up); inductor's on-disk cache is shared by the row's trials."""

from __future__ import annotations

from runners._linnet_torch import LinnetTorchRunner


class Runner(LinnetTorchRunner):
    mode = "inductor"

    def load(self):
        super().load()
        if self.spec.device == "cuda":  # the capture's warm-up compiles the blocks for the step at load
            how = ("inductor compiles each kind of block once for all its layers, for the decode step at load "
                   "and for the prefill (its length dynamic) on first call")  # fmt: skip
        else:
            how = "inductor compiles the whole decode step (static shapes, once) and the prefill (its length dynamic) on first call"
        self.notes.append(f"{how}; its cache is shared by the row's trials")


class Int8(Runner):
    """linnet-inductor-int8: the module compiled with weight-only int8 (linnet compile --quant int8), under inductor."""

    quant = "int8"
