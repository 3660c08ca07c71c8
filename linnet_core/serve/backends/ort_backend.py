"""The ONNX Runtime backend: Linnet's ONNX graph for S rows of L positions, in one ONNX Runtime session
(linnet_core.ort_engine) on the CPU provider, or the CUDA one on a GPU."""

from __future__ import annotations

from linnet_core.arch import build_decoder
from linnet_core.checkpoint import read_config
from linnet_core.emit_onnx import write_onnx
from linnet_core.errors import UserError
from linnet_core.ort_engine import PROVIDER_LABELS, OrtEngine, SessionSettings, fuses_attention, why_unavailable
from linnet_core.serve.backends import Built, EngineSpec
from linnet_core.targets import CompileOptions


def make(spec: EngineSpec) -> Built:
    provider = "cuda" if spec.device == "cuda" else "cpu"
    reason = why_unavailable(provider, spec.dtype)
    if reason:
        raise UserError(reason)
    decoder = build_decoder(read_config(spec.checkpoint))
    options = CompileOptions(dtype=spec.dtype, max_positions=spec.max_positions, batch=spec.rows, quant=spec.quant,
                             fused_attention=fuses_attention(provider, spec.dtype))  # fmt: skip
    model = write_onnx(decoder, spec.checkpoint, spec.work("onnx"), options)[0]
    threads = spec.cpu_threads if provider == "cpu" else 0
    engine = OrtEngine(model, SessionSettings(provider=provider, threads=threads))
    weights = f", weights {spec.quant} (MatMulNBits)" if spec.quant else ""
    weights += ", attention fused (GroupQueryAttention)" if options.fused_attention else ""
    notes = [f"ONNX Runtime, {PROVIDER_LABELS[provider]} execution provider, {spec.dtype}{weights}", *engine.notes]
    if provider == "cpu":
        notes.append(f"{threads} intra-op thread(s)")
    if engine.use_cuda_graphs:
        notes.append("decode steps replayed as CUDA graphs")
    return Built(engine, notes)
