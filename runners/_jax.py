"""Small helpers shared by the JAX rows (KerasHub, Linnet's generated JAX and StableHLO): the device, matmul
precision, and the allocator's peak memory. Importing this module configures JAX for a child process, so it
must come before the first `import jax` of a runner module."""

from __future__ import annotations

import os

# Without this JAX reserves 75% of the GPU at start-up, and NVML would report that reservation for every row.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

from linnet_core.devices import jax_device, jax_missing  # noqa: E402

GIB = 2**30
MEMORY_NOTE = "peak memory is JAX's allocator peak; the driver shows its pool, which grows in whole regions"


def unavailable(spec) -> str | None:
    return jax_missing(spec.device)


LOOP_NOTE = "decode: the remaining tokens in one jitted call, an XLA while loop over the decode step (as KerasHub's sampler)"
CPU_DISPATCH_NOTE = "CPU: synchronous dispatch (every call is awaited anyway; no hand-off to a worker thread)"


def device(runner) -> jax.Device:
    """The JAX device a row runs on. f32 rows get true f32 matmuls (a GPU would otherwise use TF32). On a CPU,
    JAX runs computations on the calling thread: each call is awaited for its host result anyway, and
    handing every one to a worker thread and back costs more than a small decode step computes."""
    spec = runner.spec
    if spec.dtype == "f32":
        jax.config.update("jax_default_matmul_precision", "highest")
    if spec.device == "cpu":
        jax.config.update("jax_cpu_enable_async_dispatch", False)
        runner.notes.append(CPU_DISPATCH_NOTE)
    return jax_device(spec.device)


def record_allocator_peak(runner, dev: jax.Device) -> None:
    """On a GPU: JAX's own peak in runner.metrics (allocator_peak_gib) and the note saying what it is."""
    stats = dev.memory_stats() or {}
    if runner.spec.device == "cuda" and "peak_bytes_in_use" in stats:
        runner.metrics["allocator_peak_gib"] = stats["peak_bytes_in_use"] / GIB
        runner.notes.append(MEMORY_NOTE)
