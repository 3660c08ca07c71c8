"""Linnet, inductor: the generated PyTorch module under torch.compile, the decode step with static shapes (one
compile: positions are device tensors) and prefill with its length dynamic; on a GPU both are then captured in CUDA
graphs as the cudagraphs row captures the eager module. Compilation happens on the first call (on a GPU the decode
step's at load, in the capture's warm-up); inductor's on-disk cache is shared by the row's trials."""

from __future__ import annotations

from runners._linnet_torch import LinnetTorchRunner


class Runner(LinnetTorchRunner):
    mode = "inductor"

    def load(self):
        super().load()
        # on a GPU the capture's warm-up compiles the decode step at load; the prefill compiles on its first call
        when = "at load, the prefill on first call" if self.spec.device == "cuda" else "on first call"
        self.notes.append(f"inductor compiles the decode step (static shapes, once) and the prefill (its length dynamic): "
                          f"the step {when}; its cache is shared by the row's trials")  # fmt: skip


class Int8(Runner):
    """linnet-inductor-int8: the module compiled with weight-only int8 (linnet compile --quant int8), under inductor."""

    quant = "int8"
