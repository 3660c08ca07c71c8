"""The backends linnet.serve runs on: each is a function that makes an Engine (linnet_core/engine.py) for
(checkpoint, rows, positions, dtype, device), in a module of its own here, imported only when used. Adding a
backend is its module and one line in BACKENDS; `--backend module:function` names a function outside this table
(the tests use it for a reference engine).

Every Linnet engine keeps the contract's optional logits methods (engine.SamplingEngine) itself, so temperature /
top-p requests run on every backend, and an adapter only builds the engine."""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from linnet_core.engine import Engine
from linnet_core.errors import UserError


def serving_cpu_threads() -> int:
    """Intra-op threads for a serving engine on a CPU. The serving loop and its clients (the event loop, HTTP,
    streaming) run beside the engine: with more than two cores the engine gets every core but one, which the loop
    keeps. On two cores or fewer it gets them all: keeping one back halves the engine's compute (the 0.5B shape
    decoded on one thread of this 2-core machine, where the single-request rows use two), while the loop's own work
    between steps is a few milliseconds."""
    cores = len(os.sched_getaffinity(0))
    return cores if cores <= 2 else cores - 1


@dataclass(frozen=True)
class EngineSpec:
    checkpoint: Path  # the Hugging Face checkpoint directory
    rows: int  # S: cache rows
    max_positions: int  # L: positions per row
    dtype: str = "f32"  # "f32" | "f16" | "bf16"
    device: str = "cpu"  # "cpu" | "cuda"
    work_dir: Path | None = None  # where a backend may write its artefacts (generated source, graphs); a temp dir when None
    mode: str | None = None  # a backend's variant, e.g. torch "eager" | "inductor" | "cudagraphs"; None picks per device
    threads: int | None = None  # intra-op threads on a CPU; None: see cpu_threads
    quant: str | None = None  # weight-only quantization (linnet_core/quant.py): None | "int8"; torch and ort offer it

    @property
    def cpu_threads(self) -> int:
        """threads, or serving_cpu_threads()."""
        return self.threads or serving_cpu_threads()

    def work(self, name: str) -> Path:
        """A directory for the backend's artefacts: under work_dir, or a fresh temporary one."""
        if self.work_dir is None:
            return Path(tempfile.mkdtemp(prefix=f"linnet-serve-{name}-"))
        path = Path(self.work_dir) / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass
class Built:
    engine: Engine
    notes: list[str] = field(default_factory=list)  # what the backend chose, for a row's notes and /health
    serve_options: dict[str, Any] = field(default_factory=dict)  # ServeConfig fields the backend needs (prefill_buckets)


@dataclass(frozen=True)
class Backend:
    function: str  # "module:function", the adapter
    needs: tuple[str, ...]  # the modules it imports: without one, the backend is unavailable


BACKENDS: dict[str, Backend] = {
    "torch": Backend("linnet_core.serve.backends.torch_backend:make", ("torch", "linnet_core.emit_torch")),
    "xla": Backend("linnet_core.serve.backends.xla_backend:make", ("jax", "linnet_core.emit_jax")),
    "ort": Backend("linnet_core.serve.backends.ort_backend:make", ("onnxruntime", "linnet_core.emit_onnx")),
}


def unavailable(backend: str) -> str | None:
    """Why a backend cannot run in this installation (a module it needs is missing), or None."""
    if backend not in BACKENDS:
        return None  # module:function backends say so when they are imported
    missing = next((m for m in BACKENDS[backend].needs if importlib.util.find_spec(m) is None), None)
    return None if missing is None else f"the {backend} backend needs {missing}, which is not installed"


def backend_function(backend: str) -> Callable[[EngineSpec], Built]:
    if backend in BACKENDS:
        reason = unavailable(backend)
        if reason:
            raise UserError(reason)
        backend = BACKENDS[backend].function
    module, sep, name = backend.partition(":")
    if not sep:
        raise UserError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)} (or module:function)")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise UserError(f"backend {backend!r} cannot be imported ({e})") from None


def make_engine(backend: str, spec: EngineSpec) -> Built:
    built = backend_function(backend)(spec)
    engine = built.engine
    if (engine.rows, engine.max_positions) != (spec.rows, spec.max_positions):
        raise UserError(f"the {backend} backend made {engine.rows} x {engine.max_positions} rows, not {spec.rows} x {spec.max_positions}")
    return built
