"""llama.cpp on Linnet's GGUF: the checkpoint exported by `linnet export gguf` at load, in a process of its own (a
user converts a model once, apart: its memory is not llama.cpp's), then run by llama.cpp through llama-cpp-python's
bindings of its C API, every layer on the GPU where the build has one.

The C API (not the high-level `Llama` class) because it is where llama.cpp's own settings live: weight
repacking (`use_extra_bufts`) is a model parameter the class does not expose, and reading the last row of
logits after each `llama_decode` is all a greedy loop and the distance probe need."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields
from pathlib import Path

import llama_cpp
import numpy as np

from linnet_core import gguf as linnet_gguf
from linnet_core.checkpoint import read_config
from linnet_core.errors import UserError
from runners import base

GGML_TYPES = {"f32": llama_cpp.GGML_TYPE_F32, "f16": llama_cpp.GGML_TYPE_F16}
FLASH_ATTN = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


@dataclass(frozen=True)
class Settings:
    """From spec.options; unset fields follow the GGUF dtype (an f32 GGUF runs f32 throughout, so its distance
    measures the export; other dtypes run with llama.cpp's defaults, as a user would)."""

    gguf_dtype: str  # "f32" | "f16" | "bf16" | "q8_0": how the export stores 2-D weights
    kv_cache: str  # "f32" | "f16": the K and V cache type
    flash_attn: str  # "auto" | "on" | "off": llama.cpp's CPU flash attention rounds through f16
    extra_bufts: bool  # weight repacking into CPU-specific layouts; off: reported to crash Q8_0 on AMX CPUs
    n_threads: int  # CPU threads for prefill and decode

    @classmethod
    def from_spec(cls, spec: base.RunSpec, default_gguf_dtype: str | None) -> Settings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(spec.options) - known)
        if unknown:
            raise UserError(f"{spec.runner}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        asked = spec.options.get("gguf_dtype")
        if default_gguf_dtype and asked not in (None, default_gguf_dtype):
            raise UserError(f"{spec.runner} runs a {default_gguf_dtype} GGUF; ask llamacpp-linnet-gguf for gguf_dtype={asked}")
        gguf_dtype = default_gguf_dtype or asked or spec.dtype  # the run's f32/f16/bf16 name a GGUF dtype too
        exact = gguf_dtype == "f32"
        settings = cls(
            gguf_dtype=gguf_dtype,
            kv_cache=spec.options.get("kv_cache", "f32" if exact else "f16"),
            flash_attn=spec.options.get("flash_attn", "off" if exact else "auto"),
            extra_bufts=bool(spec.options.get("extra_bufts", False)),
            n_threads=int(spec.options.get("n_threads", len(os.sched_getaffinity(0)))),
        )
        settings.check()
        return settings

    def check(self) -> None:
        for name, value, allowed in (
            ("gguf_dtype", self.gguf_dtype, linnet_gguf.DTYPES),
            ("kv_cache", self.kv_cache, GGML_TYPES),
            ("flash_attn", self.flash_attn, FLASH_ATTN),
        ):
            if value not in allowed:
                raise UserError(f"option {name}={value!r}: use one of {', '.join(allowed)}")
        if self.n_threads < 1:
            raise UserError(f"option n_threads={self.n_threads}: needs at least 1")

    def describe(self) -> str:
        return (
            f"GGUF {self.gguf_dtype}, KV cache {self.kv_cache}, flash attention {self.flash_attn}, "
            f"{self.n_threads} threads, weight repacking {'on' if self.extra_bufts else 'off'}"
        )


class Runner(base.Runner):
    gguf_dtype: str | None = None  # None: the run's dtype; the variant rows below fix it

    @classmethod
    def unavailable(cls, spec):
        if spec.device == "cuda" and not llama_cpp.llama_supports_gpu_offload():
            return "this llama-cpp-python build has no GPU offload (rebuild it with CMAKE_ARGS=-DGGML_CUDA=on)"
        config = read_config(Path(spec.checkpoint))
        return linnet_gguf.llama_cpp_mismatch(config)

    def load(self):
        self.settings = Settings.from_spec(self.spec, self.gguf_dtype)
        path = self.spec.work / "model.gguf"
        export_s = base.run_build(["export", "gguf", self.spec.checkpoint, str(path), "--dtype", self.settings.gguf_dtype])
        self.metrics["export_s"] = export_s
        self.notes.append(f"`linnet export gguf` in a process of its own ({export_s:.1f} s, included in load time)")
        self.notes.append(self.settings.describe())
        logging.getLogger("llama-cpp-python").setLevel(logging.WARNING)  # llama.cpp logs every tensor otherwise
        self.session = Session(path, self.spec.max_positions, self.settings, on_gpu=self.spec.device == "cuda")

    def prefill(self, prompt):
        self.session.clear()
        self.next_id = int(np.argmax(self.session.eval(prompt)))
        return self.next_id

    def decode(self, n):
        out = []
        for _ in range(n):  # each step feeds the previous token; EOS is just another token
            self.next_id = int(np.argmax(self.session.eval([self.next_id])))
            out.append(self.next_id)
        return out

    def score(self, ids, n_prefill):
        self.session.clear()
        rows = [self.session.eval(ids[:n_prefill]).copy()]
        rows += [self.session.eval([t]).copy() for t in ids[n_prefill:]]
        return np.stack(rows).astype(np.float32)

    def close(self):
        if hasattr(self, "session"):
            self.session.free()


class F16Runner(Runner):
    gguf_dtype = "f16"


class Q8Runner(Runner):
    gguf_dtype = "q8_0"


class Session:
    """One llama.cpp model and context holding one sequence; eval() feeds tokens and returns the last logits."""

    def __init__(self, path: Path, positions: int, settings: Settings, on_gpu: bool):
        llama_cpp.llama_backend_init()
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = -1 if on_gpu else 0  # -1: every layer
        model_params.use_extra_bufts = settings.extra_bufts
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        ctx_params = llama_cpp.llama_context_default_params()
        ctx_params.n_ctx = positions
        ctx_params.n_batch = positions  # a whole prompt is one llama_decode call ...
        ctx_params.n_ubatch = min(positions, 512)  # ... which llama.cpp splits into micro-batches of this size
        ctx_params.n_seq_max = 1
        ctx_params.n_threads = ctx_params.n_threads_batch = settings.n_threads
        ctx_params.type_k = ctx_params.type_v = GGML_TYPES[settings.kv_cache]
        ctx_params.flash_attn_type = FLASH_ATTN[settings.flash_attn]
        self.ctx = llama_cpp.llama_init_from_model(self.model, ctx_params)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)

    def eval(self, ids: list[int]) -> np.ndarray:
        """Appends ids to the sequence; returns a view of the logits [vocab] after its last token (valid
        until the next eval)."""
        tokens = (llama_cpp.llama_token * len(ids))(*ids)
        status = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(tokens, len(ids)))
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status} for {len(ids)} token(s)")
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))

    def free(self) -> None:
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)
