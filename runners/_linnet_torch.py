"""What the three generated-PyTorch rows share: at load, emit the model's module into the run's work directory,
import it, and drive its Engine (one cache row) in a given mode: eager, inductor or CUDA graphs. The decode runs
through the Engine's generate() (base.EngineRunner.decode): its tokens stay on the device until the last."""

from __future__ import annotations


import torch

from linnet_core.checkpoint import read_config
from linnet_core.emit_torch import import_generated, write
from linnet_core.arch import build_decoder
from linnet_core.targets import CompileOptions
from runners import base
from runners._torch import cuda_unavailable, inference_only


class LinnetTorchRunner(base.EngineRunner):
    mode = "eager"  # the generated Engine's mode: "eager" | "inductor" | "cudagraphs"
    quant: str | None = None  # weight-only quantization compiled into the module: None | "int8"

    @classmethod
    def unavailable(cls, spec):
        return cuda_unavailable(spec)

    def load(self):
        """Emitting and importing the module count as load time, as does a CUDA graph's capture."""
        inference_only()
        spec = self.spec
        decoder = build_decoder(read_config(spec.checkpoint))
        options = CompileOptions(dtype=spec.dtype, max_positions=spec.max_positions, batch=1, quant=self.quant)
        [path] = write(decoder, spec.checkpoint, spec.work / "generated", options)
        module = import_generated(path)
        self.engine = module.Engine(spec.checkpoint, rows=1, max_positions=spec.max_positions, device=spec.device,
                                    dtype=spec.dtype, mode=self.mode)  # fmt: skip
        self.notes.append(f"KV cache compiled for {spec.max_positions} positions")
        self.notes.append(decode_note(self.engine))
        self.metrics["weights_s"] = self.engine.weights_s  # the part of the load time that reads and places them
        if self.engine.weights_in_huge_pages:
            self.notes.append("load time includes the weights' copy into 2 MiB pages (weights_s), whose first touch a VM "
                              "may back far more slowly than small pages' (DESIGN.md)")  # fmt: skip
        if self.quant:
            self.notes.append(f"weights int8, one scale per output channel, activations {spec.dtype}; "
                              f"{int8_products(module, self.mode)}")  # fmt: skip

    def close(self):
        self.engine = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def int8_products(module, mode: str) -> str:
    """What a quantized engine's decode steps and prefills multiply with, as the module was loaded."""
    if module.cpu_matvec_loaded:  # a CPU's f32 engine over matrices big enough for the kernels (Engine.__init__)
        return ("decode: matvec_int8, Linnet's AVX-512 int8 matrix-vector kernel; "
                "prefill: matmul_int8, the weight widened to f32 a tile at a time")  # fmt: skip
    decode = "torch's int8 weight-pack matmul" if mode != "inductor" else "one fused inductor pass over the int8 weight"
    return f"decode: {decode}; prefill: the weight widened to the activations' dtype"


def decode_note(engine) -> str:
    """What the row's decode and prefill do, from the engine as it was built."""
    if engine.prefill_graphs is not None:  # the CUDA graph modes, one row
        return (f"decode: {engine.block_steps} steps per CUDA graph replay, tokens to the host once per decode; "
                "prefill: one CUDA graph per prompt-length bucket (padded, captured on first use)")  # fmt: skip
    return "decode: every step on the device, tokens to the host once per decode"
