"""Linnet on TensorRT (rows linnet-trt-f32, -f16, -bf16): the same emitted ONNX graph and engine as
runners/linnet_ort.py, on ONNX Runtime's TensorRT execution provider, which compiles the graph (or the parts of it
TensorRT takes; the rest runs on the CUDA provider) into a TensorRT engine on the first call."""

from __future__ import annotations

from runners import linnet_ort


class Runner(linnet_ort.Runner):
    provider_on_gpu = "tensorrt"

    @classmethod
    def unavailable(cls, spec):
        # TensorRT exists only on a GPU: say what is missing here rather than falling back to the CPU.
        missing = linnet_ort.why_unavailable("tensorrt", cls.dtype_for(spec))
        if missing:
            return missing
        if spec.device != "cuda":
            return "TensorRT runs on a GPU; this run is on the CPU"
        return None
