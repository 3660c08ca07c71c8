"""Linnet on ONNX Runtime (rows linnet-ort-f32, -f16, -bf16): the emitted ONNX graph in the dtype its registry entry
names (runners/__init__.py), run by linnet_core.ort_engine on the CPU execution provider, or the CUDA one (IO binding, buffers on the
GPU) when the run is on a GPU. Loading writes the model (`linnet compile --target onnx`, in a process of its own); the
first call builds the session."""

from __future__ import annotations

import time

from linnet_core.emit_onnx import INT8_ACCURACY_LEVEL, INT8_BLOCK, MODEL_FILE
from linnet_core.ort_engine import PROVIDER_LABELS, OrtEngine, SessionSettings, fuses_attention, why_unavailable
from runners import RUNNERS, base


class Runner(base.EngineRunner):
    provider_on_gpu = "cuda"  # the provider when the run is on a GPU (TensorRT's runner overrides it)
    quant: str | None = None  # weight-only quantization of the graph (Int8 below); it then computes in the run's dtype

    @classmethod
    def dtype_for(cls, spec) -> str:
        """The row's compute dtype: its registry entry's (linnet-ort-f16: f16, whatever the run's), else the run's."""
        info = RUNNERS.get(spec.runner)
        return spec.dtype if cls.quant or info is None or info.dtype is None else info.dtype

    @property
    def dtype(self) -> str:
        return self.dtype_for(self.spec)

    @classmethod
    def provider_for(cls, spec) -> str:
        return cls.provider_on_gpu if spec.device == "cuda" else "cpu"

    @classmethod
    def unavailable(cls, spec):
        return why_unavailable(cls.provider_for(spec), cls.dtype_for(spec))

    def load(self):
        provider = self.provider_for(self.spec)
        fused = fuses_attention(provider, self.dtype)
        out = self.spec.work / f"onnx-{self.dtype}{'-' + self.quant if self.quant else ''}"
        emit_s = base.run_build(["compile", self.spec.checkpoint, "--target", "onnx", "--out", str(out),
                                 "--dtype", self.dtype, "--max-positions", str(self.spec.max_positions),
                                 *(["--quant", self.quant] if self.quant else []),
                                 *(["--fused-attention"] if fused else [])])  # fmt: skip
        self.model_path = out / MODEL_FILE
        self.metrics["export_s"] = emit_s
        trt_cache = self.spec.work / "trt-cache"
        trt_cache.mkdir(parents=True, exist_ok=True)
        self.settings = SessionSettings(provider=provider, trt_cache=str(trt_cache), trt_dtype=self.dtype)
        self.engine: OrtEngine | None = None
        self.notes += [
            (f"{self.dtype}; ONNX Runtime's {PROVIDER_LABELS[provider]} execution provider; load writes the ONNX "
             f"model with `linnet compile --target onnx` in a process of its own ({emit_s:.1f} s, included in load "
             "time), the first call builds the session"),
            ("one graph for prefill and decode; KV cache, last token and position stay in ONNX Runtime buffers fed "
             "back by IO binding: only the next token id crosses to the host per step"),
        ]  # fmt: skip
        if fused:
            self.notes.append("attention as ONNX Runtime's RotaryEmbedding and GroupQueryAttention contrib ops")
        if provider == "cpu" and self.dtype == "f16":
            self.notes.append("ONNX Runtime's CPU provider runs the f16 operators it has no f16 kernel for in f32, "
                              "between casts it inserts")  # fmt: skip
        if self.quant:
            self.notes.append(f"weights int8 in blocks of {INT8_BLOCK} (MatMulNBits, accuracy level {INT8_ACCURACY_LEVEL}: "
                              "activations rounded to int8 per block inside the matmul, as llama.cpp q8_0 does); the "
                              "embedding lookup reads a float copy of the tied table")  # fmt: skip
        if self.dtype != self.spec.dtype:
            self.notes.append(f"distance: against transformers in {self.spec.dtype}")

    def current_engine(self) -> OrtEngine:
        """The engine, its session built on first use (first-call time, reported apart from load)."""
        if self.engine is None:
            start = time.perf_counter()
            self.engine = OrtEngine(self.model_path, self.settings)
            self.metrics["session_build_s"] = time.perf_counter() - start
            self.notes += self.engine.notes
            if self.engine.use_cuda_graphs:
                self.notes.append("decode steps replayed as CUDA graphs")
        return self.engine



class Int8(Runner):
    """linnet-ort-int8: the ONNX graph with its linear layers and head in int8 blocks (linnet compile --quant int8)."""

    quant = "int8"
